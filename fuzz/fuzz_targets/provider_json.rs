//! Both providers' whole answers on any bytes: an answer or an error, never a panic; an
//! answer read from JSON text reads the same again.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(answer) = nanobot_llm_openai::fuzzing::parse_answer(data) {
        let again = nanobot_llm_openai::fuzzing::parse_answer(data).unwrap();
        assert_eq!(format!("{answer:?}"), format!("{again:?}"));
    }
    let _ = nanobot_llm_anthropic::fuzzing::parse_answer(data);
});

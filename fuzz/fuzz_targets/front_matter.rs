//! The skill front-matter reader on any text: never a panic or a stack overflow.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (_, body) = nanobot_prompt_inputs::parse_front_matter(&text);
    assert!(body.len() <= text.len());
    let _ = nanobot_prompt_inputs::check_front_matter(&text);
});

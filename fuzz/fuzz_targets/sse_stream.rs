//! Server-sent event streams on any bytes, split at any points: the parser finds the same
//! events however the bytes arrive, and both providers' stream assemblers read them without
//! a panic (an answer or an error).
#![no_main]

use nanobot_llm_http::SseParser;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&step, bytes)) = data.split_first() else {
        return;
    };
    let mut whole = SseParser::new();
    let at_once = whole.feed(bytes);
    let mut pieces = SseParser::new();
    let mut events = Vec::new();
    let step = usize::from(step % 17) + 1;
    for (i, chunk) in bytes.chunks(step).enumerate() {
        // Uneven pieces: every other chunk split once more.
        if i % 2 == 1 && chunk.len() > 1 {
            events.extend(pieces.feed(&chunk[..1]));
            events.extend(pieces.feed(&chunk[1..]));
        } else {
            events.extend(pieces.feed(chunk));
        }
    }
    assert_eq!(at_once, events, "the events depend on how the bytes arrived");
    let _ = nanobot_llm_openai::fuzzing::assemble_stream(events.iter().map(|e| e.data.as_str()));
    let _ = nanobot_llm_anthropic::fuzzing::assemble_stream(
        events.iter().map(|e| (e.event.as_deref(), e.data.as_str())),
    );
});

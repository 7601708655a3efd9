//! Tool calls written as text, in both placements, on any text: never a panic; every call
//! names an offered tool and carries a JSON object as its arguments; a whole answer never
//! holds more calls than the same text read anywhere.
#![no_main]

use nanobot_llm_port::text::{CallPlacement, tool_calls_in_text};

const OFFERED: [&str; 3] = ["search_memory", "write_file", "read_file"];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let whole = tool_calls_in_text(&text, &OFFERED, CallPlacement::WholeAnswer, |n| n.to_string());
    let anywhere = tool_calls_in_text(&text, &OFFERED, CallPlacement::Anywhere, |n| n.to_string());
    assert!(whole.len() <= anywhere.len());
    for call in whole.iter().chain(&anywhere) {
        assert!(OFFERED.contains(&call.function.name.as_str()));
        assert!(call.arguments_json().is_ok_and(|v| v.is_object()), "{call:?}");
    }
});

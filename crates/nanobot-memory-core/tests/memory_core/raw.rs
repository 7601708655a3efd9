//! Raw archives: formatting (spec memory.md 5.4) and splitting instead of cutting.

use nanobot_memory_core::{format_messages, raw_entries};
use nanobot_session_store::StoredMessage;
use serde_json::json;

fn msg(value: serde_json::Value) -> StoredMessage {
    StoredMessage::from_map(value.as_object().cloned().unwrap())
}

#[test]
fn cases_31_32_33_formatting() {
    let lines = format_messages(&[
        msg(json!({"role": "user", "content": "null stamp", "timestamp": null})),
        msg(json!({"role": "assistant", "content": "int stamp", "timestamp": 1720000000})),
        msg(json!({"content": "no role", "timestamp": "2026-07-28T12:00:59.123456"})),
        msg(
            json!({"role": "user", "content": "", "media": ["/p/clip.mp4"], "timestamp": "2026-07-27"}),
        ),
        msg(json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]})),
        msg(json!({"role": "tool", "content": "result", "tool_call_id": "c", "timestamp": "t"})),
        msg(
            json!({"role": "user", "content": [{"type": "text", "text": "block text"}, {"type": "image_url", "image_url": {"url": "u"}}]}),
        ),
        msg(
            json!({"role": "user", "content": "goal\n\nGUIDANCE", "_runtime_context": {"version": 1, "sources": [], "suffix": "GUIDANCE"}}),
        ),
        msg(
            json!({"role": "assistant", "content": "done", "tools_used": ["read_file", "exec"], "timestamp": "t"}),
        ),
    ]);
    assert_eq!(
        lines,
        [
            "[?] USER: null stamp",
            "[1720000000] ASSISTANT: int stamp",
            "[2026-07-28T12:00] UNKNOWN: no role",
            "[2026-07-27] USER: [image: /p/clip.mp4]",
            "[t] TOOL: result",
            "[?] USER: block text",
            "[?] USER: goal",
            "[t] ASSISTANT [tools: read_file, exec]: done",
        ]
    );
}

#[test]
fn case_30_dumps_split_into_parts_and_lose_nothing() {
    let small = raw_entries(1, &["[t] USER: hi".to_owned()], 16_000);
    assert_eq!(small, ["[RAW] 1 messages\n[t] USER: hi"]);

    let long = format!("[t] USER: {}", "x".repeat(50_000));
    let parts = raw_entries(1, std::slice::from_ref(&long), 16_000);
    assert_eq!(parts.len(), 4);
    for (i, part) in parts.iter().enumerate() {
        let (header, body) = part.split_once('\n').unwrap();
        assert_eq!(header, format!("[RAW] 1 messages (part {}/4)", i + 1));
        assert!(body.chars().count() <= 16_000);
    }
    let joined: String = parts
        .iter()
        .map(|p| p.split_once('\n').unwrap().1)
        .collect();
    assert_eq!(joined, long);

    // Several lines pack into parts without splitting a line that fits.
    let lines: Vec<String> = (0..10)
        .map(|i| format!("[t] USER: line {i} {}", "y".repeat(300)))
        .collect();
    let parts = raw_entries(10, &lines, 1_000);
    assert!(parts.len() >= 4);
    let rejoined: Vec<String> = parts
        .iter()
        .flat_map(|p| {
            p.split_once('\n')
                .unwrap()
                .1
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(rejoined, lines);
}

#[test]
fn case_61_the_instruction_names_its_rules() {
    let text = nanobot_memory_core::archive_instruction(4);
    for needle in [
        "SNIP",
        "final 4 conversation messages",
        "[permanent]",
        "[durable]",
        "[ephemeral]",
        "[correction]",
        "[skip]",
        "Recent History",
        "[skip] merely because",
    ] {
        assert!(text.contains(needle), "{needle}");
    }
    assert!(!text.contains("check context below"));
}

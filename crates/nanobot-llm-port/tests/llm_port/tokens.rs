//! Token counts: exact cl100k_base values, nanobot's estimate rules (the spec's acceptance
//! cases 86-90), and the peer's own total on the benchmark workload.

use nanobot_bench_workload::{SEED, message_stream};
use nanobot_llm_port::tokens::{
    estimate_json_message_tokens, estimate_json_prompt_tokens, estimate_message_tokens,
    estimate_prompt_tokens, prompt_tokens_at_most, to_python_json,
};
use nanobot_llm_port::{
    AssistantMessage, Cl100kBase, Content, ContentPart, Message, TokenCounter, ToolCall,
    ToolDefinition, Utf8Bytes,
};
use serde_json::{Map, Value, json};

fn obj(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn cl100k_known_values() {
    // Values published with tiktoken (OpenAI cookbook) and checked against Python tiktoken.
    let cases = [
        ("", 0),
        ("hello", 1),
        ("hello world", 2),
        ("tiktoken is great!", 6),
        ("antidisestablishmentarianism", 6),
        ("2 + 2 = 4", 7),
        ("お誕生日おめでとう", 9),
    ];
    for (text, tokens) in cases {
        assert_eq!(Cl100kBase.count(text), tokens, "{text:?}");
    }
    assert_eq!(Cl100kBase.encoding(), "cl100k_base");
}

#[test]
fn spec_86_message_estimate_with_the_byte_fallback() {
    let c = &Utf8Bytes;
    assert_eq!(
        estimate_json_message_tokens(c, &obj(json!({"role": "user", "content": "héllo"}))),
        10
    );
    assert_eq!(
        estimate_json_message_tokens(
            c,
            &obj(json!({"role": "assistant", "content": "hi", "tool_calls": [{"id": "1"}]}))
        ),
        20
    );
    assert_eq!(
        estimate_json_message_tokens(
            c,
            &obj(json!({"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "exec"}))
        ),
        14
    );
    for empty in [
        json!({"role": "user", "content": ""}),
        json!({"role": "user", "content": null}),
        json!({"role": "user"}),
    ] {
        assert_eq!(estimate_json_message_tokens(c, &obj(empty)), 4);
    }
    // The typed path gives the same numbers.
    assert_eq!(estimate_message_tokens(c, &Message::user("héllo")), 10);
    assert_eq!(
        estimate_message_tokens(c, &Message::tool_result("c1", "exec", "ok")),
        14
    );
    assert_eq!(
        estimate_message_tokens(c, &Message::Assistant(AssistantMessage::default())),
        4
    );
}

#[test]
fn spec_87_parts_objects_and_reasoning() {
    let c = &Utf8Bytes;
    let parts = json!({"role": "user", "content": [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": "u"}}
    ]});
    assert_eq!(estimate_json_message_tokens(c, &obj(parts.clone())), 54);
    let typed: Message = serde_json::from_value(parts).unwrap();
    assert_eq!(estimate_message_tokens(c, &typed), 54);

    assert_eq!(
        estimate_json_message_tokens(c, &obj(json!({"role": "user", "content": {"k": 1}}))),
        12
    );
    let reasoning = json!({"role": "assistant", "content": "", "reasoning_content": "rc",
                           "thinking_blocks": [{"type": "thinking", "thinking": "long thoughts"}]});
    assert_eq!(estimate_json_message_tokens(c, &obj(reasoning.clone())), 7);
    let typed: Message = serde_json::from_value(reasoning).unwrap();
    assert_eq!(estimate_message_tokens(c, &typed), 7);
    // A text part with empty text adds nothing; a text part is not JSON-dumped.
    let empty_text = json!({"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "ab"}]});
    assert_eq!(estimate_json_message_tokens(c, &obj(empty_text)), 6);
}

#[test]
fn spec_88_prompt_estimate() {
    let c = &Utf8Bytes;
    let messages = [
        obj(json!({"role": "user", "content": "ab"})),
        obj(json!({"role": "assistant", "content": "cd"})),
    ];
    assert_eq!(estimate_json_prompt_tokens(c, &messages, &[]), 13);
    assert_eq!(
        estimate_prompt_tokens(c, &[Message::user("ab"), Message::assistant("cd")], &[]),
        13
    );

    let image_only = Message::user_parts(vec![ContentPart::image_url("https://x/y.png")]);
    assert_eq!(estimate_prompt_tokens(c, &[image_only], &[]), 4);

    let user = [obj(json!({"role": "user", "content": "ab"}))];
    assert_eq!(
        estimate_json_prompt_tokens(c, &user, &[json!({"a": 1})]),
        17
    );
    assert_eq!(estimate_json_prompt_tokens(c, &[], &[]), 0);
}

#[test]
fn prompt_estimate_counts_tools_calls_and_names() {
    let c = &Utf8Bytes;
    let call = ToolCall::new("c1", "f", "{}");
    let messages = vec![
        Message::assistant_tool_calls(None, vec![call.clone()]),
        Message::tool_result("c1", "f", "r"),
    ];
    let tool = ToolDefinition::function("f", "d", json!({"type": "object"}));
    let expected_payload = format!(
        "{}\nr\nf\nc1\n{}",
        to_python_json(&vec![call]),
        to_python_json(&vec![tool.clone()])
    );
    assert_eq!(
        estimate_prompt_tokens(c, &messages, &[tool]),
        expected_payload.len() + 8
    );
}

#[test]
fn byte_bound_is_exact_for_bytes_and_above_cl100k() {
    let messages: Vec<Message> = message_stream(SEED, 300)
        .into_iter()
        .map(|m| serde_json::from_value(m).unwrap())
        .collect();
    let tool = ToolDefinition::function("f", "d", json!({"type": "object"}));
    for end in [0, 1, 7, 300] {
        let slice = &messages[..end];
        let tools = std::slice::from_ref(&tool);
        let bound = prompt_tokens_at_most(slice, tools);
        assert_eq!(bound, estimate_prompt_tokens(&Utf8Bytes, slice, tools));
        let exact = estimate_prompt_tokens(&Cl100kBase, slice, tools);
        assert!(exact <= bound, "{exact} > {bound} at {end}");
        if end == 300 {
            assert!(
                exact < bound / 2,
                "a real bound, not a tight one: {exact} vs {bound}"
            );
        }
    }
}

#[test]
fn spec_90_cl100k_message_estimate() {
    assert_eq!(
        estimate_message_tokens(&Cl100kBase, &Message::user("hello")),
        5
    );
}

#[test]
fn python_json_matches_json_dumps() {
    let value = json!({"b": [1, 2.5, "é\n\"q\"", null, true], "a": {}, "c": []});
    assert_eq!(
        to_python_json(&value),
        r#"{"b": [1, 2.5, "é\n\"q\"", null, true], "a": {}, "c": []}"#
    );
    let call = ToolCall::new("call_1", "read_file", r#"{"path": "x"}"#);
    assert_eq!(
        to_python_json(&call),
        r#"{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"x\"}"}}"#
    );
}

/// The peer (nanobot-ai 0.3.5 with tiktoken) counts 1,087,368 tokens for
/// `sum(estimate_message_tokens(m))` over this workload (perf-anchors.md, W5). Both of our
/// paths, JSON rows and typed messages, must reach the same number.
#[test]
fn workload_total_matches_the_peer_exactly() {
    let stream = message_stream(SEED, 10_000);
    let json_total: usize = stream
        .iter()
        .map(|m| estimate_json_message_tokens(&Cl100kBase, m.as_object().unwrap()))
        .sum();
    assert_eq!(json_total, 1_087_368);

    let typed_total: usize = stream
        .into_iter()
        .map(|m| serde_json::from_value::<Message>(m).unwrap())
        .map(|m| estimate_message_tokens(&Cl100kBase, &m))
        .sum();
    assert_eq!(typed_total, 1_087_368);
}

#[test]
fn content_helpers() {
    let content = Content::Parts(vec![
        ContentPart::text("a"),
        ContentPart::image_url("u"),
        ContentPart::text("b"),
    ]);
    assert_eq!(content.joined_text(), "a\nb");
    assert_eq!(content.as_text(), None);
    assert_eq!(Content::from("x").as_text(), Some("x"));
}

#[test]
fn strip_think_removes_leaked_reasoning() {
    use nanobot_llm_port::text::strip_think;
    let cases = [
        ("<think>reasoning</think>final answer", "final answer"),
        ("<think>nothing user-facing</think>", ""),
        ("<channel|>", ""),
        ("<|channel|>hello", "hello"),
        ("before <thinking>x</thinking> after", "before  after"),
        ("<think>never closed, all hidden", ""),
        ("<thinking/> answer", "answer"),
        ("answer <thinking/>", "answer"),
        ("<think广场的鸽子", "广场的鸽子"),
        ("</think> answer", "answer"),
        ("answer </thought>", "answer"),
        ("answer <thi", "answer"),
        ("answer <|chan", "answer"),
        (
            "we discuss the <think> tag in prose",
            "we discuss the <think> tag in prose",
        ),
        ("a < b and c", "a < b and c"),
        ("plain", "plain"),
    ];
    for (input, expected) in cases {
        assert_eq!(strip_think(input), expected, "{input:?}");
    }
}

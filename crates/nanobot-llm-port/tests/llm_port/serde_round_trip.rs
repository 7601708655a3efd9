//! Messages, requests and responses survive JSON round trips, unknown fields included; the
//! JSON we write is pinned by snapshots.

use insta::assert_json_snapshot;
use nanobot_llm_port::{
    AssistantMessage, Content, ContentPart, FinishReason, JsonSchemaFormat, LlmRequest,
    LlmResponse, Message, RepetitionControls, ResponseFormat, Role, ToolCall, ToolChoice,
    ToolDefinition, Usage,
};
use serde_json::{Value, json};

/// Parses `wire` as a message and checks that writing it back gives the same JSON.
fn round_trip(wire: Value) -> Message {
    let message: Message = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&message).unwrap(), wire);
    message
}

#[test]
fn assistant_with_tool_calls_reasoning_and_provider_fields() {
    let wire = json!({
        "role": "assistant",
        "content": null,
        "reasoning_content": "The user wants the file.",
        "tool_calls": [{
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"a.md\"}", "provider_specific_fields": {"x": 1}},
            "extra_content": {"google": {"thought_signature": "c2ln"}}
        }],
        "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
        "refusal": null
    });
    let message = round_trip(wire);
    assert_eq!(message.role(), Role::Assistant);
    assert_eq!(message.tool_calls().len(), 1);
    let call = &message.tool_calls()[0];
    assert_eq!(call.arguments_json().unwrap(), json!({"path": "a.md"}));
    assert!(message.extra().contains_key("thinking_blocks"));
    assert_json_snapshot!(message);
}

#[test]
fn user_parts_with_images_and_unknown_parts() {
    let wire = json!({
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}, "_meta": {"path": "/tmp/a.png"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}
        ],
        "name": "alice",
        "timestamp": "2026-11-30T06:00:00"
    });
    let message = round_trip(wire);
    let Some(Content::Parts(parts)) = message.content() else {
        panic!("expected parts")
    };
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0].as_text(), Some("What is in this picture?"));
    match &parts[1] {
        ContentPart::ImageUrl { image_url, extra } => {
            assert_eq!(image_url.data(), Some(("image/png", "iVBORw0KGgo=")));
            assert!(extra.contains_key("_meta"));
        }
        other => panic!("expected an image, got {other:?}"),
    }
    assert!(matches!(&parts[3], ContentPart::Other(fields) if fields["type"] == "input_audio"));
    assert_json_snapshot!(message);
}

#[test]
fn system_and_tool_messages() {
    round_trip(json!({"role": "system", "content": "You are nanobot."}));
    let tool = round_trip(json!({
        "role": "tool", "content": "ok", "tool_call_id": "call_1", "name": "exec", "latency_ms": 12
    }));
    assert_eq!(tool.role(), Role::Tool);
    assert_json_snapshot!(vec![Message::system("Be brief."), tool]);
}

#[test]
fn empty_tool_call_list_and_empty_reasoning_are_kept() {
    round_trip(
        json!({"role": "assistant", "content": "", "tool_calls": [], "reasoning_content": ""}),
    );
}

#[test]
fn normalisations_are_the_documented_two() {
    // An assistant message without content gets `content: null`; a call without a type
    // gets `"type": "function"`.
    let message: Message = serde_json::from_value(json!({
        "role": "assistant",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&message).unwrap(),
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        })
    );
}

#[test]
fn bad_messages_are_clear_errors() {
    let cases = [
        (json!({"content": "x"}), "missing field `role`"),
        (
            json!({"role": "wizard", "content": "x"}),
            "unknown variant `wizard`",
        ),
        (
            json!({"role": "user", "content": 5}),
            "a string or a list of content parts",
        ),
        (json!({"role": "user"}), "missing field `content`"),
        (
            json!({"role": "tool", "content": "x"}),
            "missing field `tool_call_id`",
        ),
    ];
    for (wire, expected) in cases {
        let error = serde_json::from_value::<Message>(wire.clone())
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{wire}: {error}");
    }
}

#[test]
fn request_with_every_field() {
    let request = LlmRequest::new(
        "gpt-4o-mini",
        vec![
            Message::system("You are nanobot."),
            Message::user_parts(vec![
                ContentPart::text("Describe"),
                ContentPart::image_data("image/jpeg", "/9j/4AAQ"),
            ]),
            Message::assistant_tool_calls(
                None,
                vec![ToolCall::with_json(
                    "call_1",
                    "read_file",
                    &json!({"path": "USER.md"}),
                )],
            ),
            Message::tool_result("call_1", "read_file", "# User\nLikes tea."),
        ],
    )
    .with_tools(vec![ToolDefinition::function(
        "read_file",
        "Read a workspace file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    )])
    .with_tool_choice(ToolChoice::None)
    .with_max_tokens(1024)
    .with_temperature(0.7)
    .with_response_format(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "facts".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        },
    });
    let wire = serde_json::to_value(&request).unwrap();
    let back: LlmRequest = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(back, request);
    assert_json_snapshot!(wire);
}

#[test]
fn tool_choice_and_response_format_shapes() {
    let choices = [
        ToolChoice::Auto,
        ToolChoice::None,
        ToolChoice::Required,
        ToolChoice::Function("save_memory".into()),
    ];
    let wire = serde_json::to_value(&choices).unwrap();
    assert_eq!(
        wire,
        json!(["auto", "none", "required", {"type": "function", "function": {"name": "save_memory"}}])
    );
    let back: Vec<ToolChoice> = serde_json::from_value(wire).unwrap();
    assert_eq!(back, choices);
    assert!(serde_json::from_value::<ToolChoice>(json!("sometimes")).is_err());
    assert_eq!(
        serde_json::to_value(ResponseFormat::JsonObject).unwrap(),
        json!({"type": "json_object"})
    );
}

#[test]
fn response_with_usage_and_finish_reasons() {
    let response = LlmResponse {
        message: AssistantMessage::text("- the user likes tea"),
        finish_reason: FinishReason::Length,
        usage: Some(Usage {
            prompt_tokens: 1200,
            completion_tokens: 80,
            cached_tokens: 1024,
            cache_write_tokens: 0,
        }),
        model: Some("qwen2.5-0.5b-instruct".into()),
    };
    assert!(response.is_truncated());
    assert_eq!(response.usage.unwrap().total_tokens(), 1280);
    let wire = serde_json::to_value(&response).unwrap();
    assert_eq!(
        serde_json::from_value::<LlmResponse>(wire.clone()).unwrap(),
        response
    );
    assert_json_snapshot!(wire);

    for reason in ["stop", "length", "tool_calls", "content_filter", "end_turn"] {
        let parsed: FinishReason = serde_json::from_value(json!(reason)).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), json!(reason));
    }
    assert_eq!(
        FinishReason::from("end_turn"),
        FinishReason::Other("end_turn".into())
    );
}

#[test]
fn repetition_controls_go_on_the_wire_only_when_set() {
    let plain = RepetitionControls::none().apply(LlmRequest::new("m", vec![]));
    let body = serde_json::to_value(&plain).unwrap();
    for field in ["frequency_penalty", "presence_penalty", "repeat_last_n"] {
        assert!(body.get(field).is_none(), "{field} sent unset: {body}");
    }
    let controlled = RepetitionControls::none()
        .looking_back(2_560)
        .with_penalties(0.3, -0.25)
        .apply(LlmRequest::new("m", vec![]));
    let body = serde_json::to_value(&controlled).unwrap();
    assert_eq!(body["repeat_last_n"], json!(2_560));
    assert_eq!(body["frequency_penalty"], json!(0.3));
    assert_eq!(body["presence_penalty"], json!(-0.25));
}

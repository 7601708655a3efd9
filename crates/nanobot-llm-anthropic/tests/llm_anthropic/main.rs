//! The Anthropic client against a loopback server replaying the Messages API's wire format:
//! the body we send (system blocks with the cache breakpoint, tool use, tool results,
//! images, merged turns) and what we parse (text, thinking, tool calls, usage with cache),
//! streamed or not, and the error paths.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fuzz_corpus;

use std::time::Duration;

use nanobot_llm_anthropic::{AnthropicClient, AnthropicConfig};
use nanobot_llm_http::testing::{FakeServer, Reply};
use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_port::{
    ContentPart, FinishReason, LlmClient, LlmError, LlmRequest, Message, ToolCall, ToolChoice,
    ToolDefinition,
};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/llm_anthropic/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn client(server: &FakeServer, stream: bool) -> AnthropicClient {
    AnthropicClient::new(
        AnthropicConfig::new("claude-sonnet-4-5")
            .with_base_url(server.url())
            .with_api_key(ApiKey::new("sk-ant-SECRET-7"))
            .streaming(stream)
            .with_timeouts({
                let mut value = Timeouts::default();
                value.connect = Duration::from_secs(2);
                value.idle = Duration::from_millis(800);
                value
            }),
    )
    .unwrap()
}

fn json_reply(status: u16, name: &str) -> Reply {
    Reply::Full {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: fixture(name).into_bytes(),
    }
}

fn conversation() -> LlmRequest {
    let system =
        "STABLE PREFIX: identity, files, skills.\n\n---\n\n[Archived Context Summary]\nvolatile";
    let breakpoint = system.find("\n\n---\n\n[Archived").unwrap();
    LlmRequest::new(
        "claude-sonnet-4-5",
        vec![
            Message::system(system),
            Message::user("Weather in Paris?"),
            Message::assistant_tool_calls(
                Some("Checking.".into()),
                vec![ToolCall::with_json(
                    "toolu_1",
                    "get_weather",
                    &json!({"city": "Paris"}),
                )],
            ),
            Message::tool_result("toolu_1", "get_weather", "18°C, sunny"),
            Message::user_parts(vec![
                ContentPart::text("And this picture?"),
                ContentPart::image_data("image/png", "iVBORw0KGgo="),
            ]),
        ],
    )
    .with_tools(vec![ToolDefinition::function(
        "get_weather",
        "Weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )])
    .with_tool_choice(ToolChoice::Auto)
    .with_max_tokens(512)
    .with_cache_breakpoint(breakpoint)
}

#[tokio::test]
async fn request_mapping_and_a_tool_use_answer() {
    let server = FakeServer::start(vec![json_reply(200, "message_tool_use.json")]).await;
    let answer = client(&server, false)
        .complete(&conversation())
        .await
        .unwrap();
    assert_eq!(
        answer.message.text_content(),
        "I'll check the weather in Paris."
    );
    let call = &answer.message.tool_calls()[0];
    assert_eq!(
        (call.id.as_str(), call.function.name.as_str()),
        ("toolu_01A09q90qw90lq917835lq9", "get_weather")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&call.function.arguments).unwrap(),
        json!({"city": "Paris", "unit": "celsius"})
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    let usage = answer.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens
        ),
        (6352, 58, 6240, 0)
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-SECRET-7"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.json(),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "system": [
                {"type": "text", "text": "STABLE PREFIX: identity, files, skills.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "\n\n---\n\n[Archived Context Summary]\nvolatile"}
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}, "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C, sunny"},
                    {"type": "text", "text": "And this picture?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
                ]}
            ],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}, "description": "Weather for a city", "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "auto"}
        })
    );
}

#[tokio::test]
async fn without_a_breakpoint_the_whole_system_prompt_is_cached() {
    let server = FakeServer::start(vec![json_reply(200, "message_tool_use.json")]).await;
    let request = LlmRequest::new("m", vec![Message::system("all of it"), Message::user("hi")]);
    client(&server, false).complete(&request).await.unwrap();
    let body = server.requests()[0].json();
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "all of it", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body["max_tokens"], json!(4096));
}

#[tokio::test]
async fn a_streamed_answer_with_thinking_text_and_tool_input() {
    let server = FakeServer::start(vec![Reply::sse(&fixture("message_stream.sse"), 23)]).await;
    let answer = client(&server, true)
        .complete(&conversation())
        .await
        .unwrap();
    assert_eq!(answer.message.text_content(), "Let me check.");
    assert_eq!(
        answer.message.reasoning_content.as_deref(),
        Some("The user wants the weather.")
    );
    let call = &answer.message.tool_calls()[0];
    assert_eq!(call.id, "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(
        serde_json::from_str::<Value>(&call.function.arguments).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    let usage = answer.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_write_tokens
        ),
        (6265, 89, 6240)
    );
    assert_eq!(server.requests()[0].json()["stream"], json!(true));
}

async fn error_of(reply: Reply, stream: bool) -> LlmError {
    let server = FakeServer::start(vec![reply]).await;
    client(&server, stream)
        .complete(&LlmRequest::new("m", vec![Message::user("hi")]))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn errors_map_by_remedy() {
    assert!(
        error_of(json_reply(400, "prompt_too_long.json"), false)
            .await
            .is_context_length_exceeded()
    );
    assert!(
        error_of(json_reply(413, "prompt_too_long.json"), false)
            .await
            .is_context_length_exceeded()
    );
    let overloaded = error_of(json_reply(529, "overloaded.json"), false).await;
    assert!(
        matches!(overloaded, LlmError::Transient { .. }),
        "{overloaded}"
    );
    let body: Value = serde_json::from_str(&fixture("rate_limit.json")).unwrap();
    let limited = error_of(
        Reply::json_with(429, &body, &[("retry-after", "12")]),
        false,
    )
    .await;
    assert_eq!(limited.retry_after(), Some(Duration::from_secs(12)));
    let auth = error_of(Reply::json(401, &json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key sk-ant-SECRET-7"}})), false).await;
    assert!(
        !auth.to_string().contains("SECRET") && auth.to_string().contains("***"),
        "{auth}"
    );
    // An error event in the middle of a stream.
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    assert!(matches!(
        error_of(Reply::sse(stream, 9), true).await,
        LlmError::Transient { .. }
    ));
    // Cut, malformed, stalled.
    let full = fixture("message_stream.sse");
    let cut = error_of(Reply::sse(&full[..full.len() / 2], 50), true).await;
    assert!(matches!(cut, LlmError::InvalidResponse { .. }), "{cut}");
    assert!(matches!(
        error_of(
            Reply::Full {
                status: 200,
                headers: vec![],
                body: b"{not json".to_vec()
            },
            false
        )
        .await,
        LlmError::InvalidResponse { .. }
    ));
    let stalled = error_of(
        Reply::Stall {
            sent: full.as_bytes()[..200].to_vec(),
            silence: Duration::from_secs(5),
        },
        true,
    )
    .await;
    assert!(matches!(stalled, LlmError::Timeout { .. }), "{stalled}");
}

#[tokio::test]
async fn a_ten_megabyte_answer() {
    let big = "y".repeat(10 * 1024 * 1024);
    let server = FakeServer::start(vec![Reply::json(200, &json!({"content": [{"type": "text", "text": big}], "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 2}}))]).await;
    let answer = client(&server, false)
        .complete(&LlmRequest::new("m", vec![Message::user("big")]))
        .await
        .unwrap();
    assert_eq!(answer.message.text_content().len(), 10 * 1024 * 1024);
    assert_eq!(answer.finish_reason, FinishReason::Length);
}

#[test]
fn the_key_never_prints() {
    let config = AnthropicConfig::new("m").with_api_key(ApiKey::new("sk-ant-SECRET"));
    assert!(!format!("{config:?}").contains("SECRET"));
    assert!(AnthropicClient::new(config.with_base_url("ftp://x")).is_err());
}

#[tokio::test]
async fn streaming_hands_text_to_the_sink_as_it_arrives() {
    let server = FakeServer::start(vec![Reply::sse(&fixture("message_stream.sse"), 40)]).await;
    let pieces = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink: nanobot_llm_port::TextSink = {
        let pieces = pieces.clone();
        std::sync::Arc::new(move |t: &str| pieces.lock().unwrap().push(t.to_owned()))
    };
    client(&server, true)
        .complete_streaming(&conversation(), &sink)
        .await
        .unwrap();
    assert_eq!(pieces.lock().unwrap().clone(), ["Let me ", "check."]);
}

fn facts_request() -> LlmRequest {
    LlmRequest::new(
        "claude-sonnet-4-5",
        vec![
            Message::system("Extract facts."),
            Message::user("I'm Maria; Lina is allergic to peanuts."),
        ],
    )
    .with_response_format(nanobot_llm_port::ResponseFormat::JsonSchema {
        json_schema: nanobot_llm_port::JsonSchemaFormat {
            name: "memory facts".into(),
            schema: json!({"type": "object", "properties": {"facts": {"type": "array"}, "summary": {"type": "string"}}, "required": ["facts", "summary"]}),
            strict: Some(true),
        },
    })
}

/// Issue 13: a JSON-schema answer through a forced tool (the Messages API has no response
/// format): the schema becomes the tool's input schema, the tool is forced, and its input
/// comes back as the answer's text, with no tool call left and a normal stop.
#[tokio::test]
async fn a_structured_answer_goes_through_a_forced_tool() {
    for stream in [false, true] {
        let reply = if stream {
            Reply::sse(&fixture("structured_stream.sse"), 31)
        } else {
            json_reply(200, "structured_answer.json")
        };
        let server = FakeServer::start(vec![reply]).await;
        let llm = client(&server, stream);
        assert!(llm.capabilities().supports_structured_output);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink_seen = seen.clone();
        let sink: nanobot_llm_port::TextSink =
            std::sync::Arc::new(move |text: &str| sink_seen.lock().unwrap().push_str(text));
        let answer = llm
            .complete_streaming(&facts_request(), &sink)
            .await
            .unwrap();
        let sent = server.requests()[0].json();
        assert_eq!(
            sent["tool_choice"],
            json!({"type": "tool", "name": "memory_facts"})
        );
        assert_eq!(sent["tools"][0]["name"], "memory_facts");
        assert_eq!(
            sent["tools"][0]["input_schema"]["required"],
            json!(["facts", "summary"])
        );
        assert!(
            sent.get("response_format").is_none(),
            "not an Anthropic field"
        );
        assert_eq!(answer.finish_reason, FinishReason::Stop, "stream {stream}");
        assert!(answer.message.tool_calls.is_none(), "stream {stream}");
        let text = answer.message.text_content();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed["facts"][0]["fact"], "Her name is Maria",
            "stream {stream}"
        );
        assert_eq!(*seen.lock().unwrap(), text, "the sink gets the JSON too");
    }
}

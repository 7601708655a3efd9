//! The OpenAI-compatible client against a loopback server replaying recorded wire data:
//! every test checks the body we send as well as what we parse; then the error paths; then,
//! when `LOCAL_LLM_BASE_URL` is set, a real local model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod embeddings;
mod fuzz_corpus;
mod local;

use std::time::Duration;

use nanobot_llm_http::testing::{FakeServer, Reply};
use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_openai::{OpenAiClient, OpenAiConfig};
use nanobot_llm_port::{
    FinishReason, JsonSchemaFormat, LlmClient, LlmError, LlmRequest, Message, ResponseFormat,
    ToolChoice, ToolDefinition,
};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/llm_openai/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn client(server: &FakeServer, stream: bool) -> OpenAiClient {
    OpenAiClient::new(
        OpenAiConfig::new(format!("{}/v1", server.url()), "gpt-4o-mini")
            .with_api_key(ApiKey::new("sk-test-SECRET-42"))
            .with_header("x-title", "nanobot-rs tests")
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

fn weather_tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition::function(
        "get_weather",
        "Weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )]
}

#[tokio::test]
async fn a_plain_answer_recorded_from_llama_cpp() {
    let server = FakeServer::start(vec![Reply::Full {
        status: 200,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
        body: fixture("llamacpp_chat.json").into_bytes(),
    }])
    .await;
    let request = LlmRequest::new(
        "local",
        vec![
            Message::system("You are terse."),
            Message::user("What is the capital of France? One sentence."),
        ],
    )
    .with_max_tokens(20)
    .with_temperature(0.0);
    let answer = client(&server, false).complete(&request).await.unwrap();
    assert_eq!(
        answer.message.text_content(),
        "The capital of France is Paris."
    );
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    let usage = answer.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens
        ),
        (29, 8, 5)
    );
    assert_eq!(answer.model.as_deref(), Some("smollm2-135m-instruct"));

    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        sent.header("authorization"),
        Some("Bearer sk-test-SECRET-42")
    );
    assert_eq!(sent.header("x-title"), Some("nanobot-rs tests"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.json(),
        json!({
            "model": "local",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the capital of France? One sentence."}
            ],
            "max_tokens": 20,
            "temperature": 0.0
        })
    );
}

#[tokio::test]
async fn a_streamed_answer_recorded_from_llama_cpp() {
    let server = FakeServer::start(vec![Reply::sse(&fixture("llamacpp_stream.sse"), 37)]).await;
    let request = LlmRequest::new("local", vec![Message::user("Say hi.")])
        .with_max_tokens(8)
        .with_temperature(0.0);
    let answer = client(&server, true).complete(&request).await.unwrap();
    assert_eq!(
        answer.message.text_content(),
        "Hello there! I'm here to help"
    );
    assert_eq!(answer.finish_reason, FinishReason::Length);
    let usage = answer.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens
        ),
        (33, 8, 24)
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    let body = sent.json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn tool_calls_tool_choice_and_response_format() {
    let server = FakeServer::start(vec![Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: fixture("openai_tool_calls.json").into_bytes(),
    }])
    .await;
    let history = vec![
        Message::system("Use tools."),
        Message::user("Weather and time in Paris?"),
        Message::assistant_tool_calls(
            None,
            vec![nanobot_llm_port::ToolCall::with_json(
                "call_1",
                "get_weather",
                &json!({"city": "Lyon"}),
            )],
        ),
        Message::tool_result("call_1", "get_weather", "12°C"),
    ];
    let request = LlmRequest::new("gpt-4o-mini", history)
        .with_tools(weather_tools())
        .with_tool_choice(ToolChoice::Function("get_weather".into()))
        .with_response_format(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "answer".into(),
                schema: json!({"type": "object"}),
                strict: Some(true),
            },
        })
        .with_cache_breakpoint(5);
    let answer = client(&server, false).complete(&request).await.unwrap();
    let calls = answer.message.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].function.name.as_str()),
        ("call_Xk3M9pQ2vR7tY1wZ", "get_weather")
    );
    assert_eq!(
        calls[0].function.arguments,
        r#"{"city":"Paris","unit":"celsius"}"#
    );
    assert_eq!(calls[1].function.name, "get_time");
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.message.content, None);
    assert!(
        answer.message.extra.is_empty(),
        "refusal/annotations are not kept to be echoed back"
    );
    assert_eq!(answer.usage.unwrap().cached_tokens, 1280);

    let body = server.requests()[0].json();
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Weather and time in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Lyon\"}"}}]},
                {"role": "tool", "content": "12°C", "tool_call_id": "call_1", "name": "get_weather"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}}
        })
    );
}

#[tokio::test]
async fn streamed_tool_call_deltas_are_assembled() {
    // Split into 11-byte pieces: events and JSON arrive in fragments.
    let server = FakeServer::start(vec![Reply::sse(
        &fixture("openai_tool_calls_stream.sse"),
        11,
    )])
    .await;
    let request = LlmRequest::new(
        "gpt-4o-mini",
        vec![Message::user("Weather and time in Paris?")],
    )
    .with_tools(weather_tools());
    let answer = client(&server, true).complete(&request).await.unwrap();
    let calls = answer.message.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
    assert_eq!(
        (calls[1].id.as_str(), calls[1].function.arguments.as_str()),
        ("call_Lm8N4bV6cX2zQ0aS", r#"{"zone":"Europe/Paris"}"#)
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.usage.unwrap().prompt_tokens, 1432);
    assert_eq!(
        server.requests()[0].json()["tools"][0]["function"]["name"],
        json!("get_weather")
    );
}

async fn error_of(reply: Reply, stream: bool) -> (LlmError, Value) {
    let server = FakeServer::start(vec![reply]).await;
    let err = client(&server, stream)
        .complete(&LlmRequest::new("gpt-4o-mini", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    let sent = server
        .requests()
        .first()
        .map(|r| r.json())
        .unwrap_or(Value::Null);
    (err, sent)
}

#[tokio::test]
async fn errors_map_by_remedy() {
    let json_reply = |status: u16, name: &str| Reply::Full {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: fixture(name).into_bytes(),
    };
    let (err, sent) = error_of(json_reply(400, "openai_context_length.json"), false).await;
    assert!(err.is_context_length_exceeded(), "{err}");
    assert_eq!(sent["messages"][0]["content"], json!("hi"));
    let (err, _) = error_of(json_reply(400, "llamacpp_context_overflow.json"), false).await;
    assert!(err.is_context_length_exceeded(), "{err}");

    let limited: Value = serde_json::from_str(&fixture("openai_rate_limit.json")).unwrap();
    let (err, _) = error_of(
        Reply::json_with(429, &limited, &[("retry-after-ms", "307")]),
        false,
    )
    .await;
    assert_eq!(err.retry_after(), Some(Duration::from_millis(307)));
    assert!(err.is_retryable());

    for status in [500, 502, 503, 504] {
        let (err, _) = error_of(
            Reply::json(status, &json!({"error": {"message": "upstream"}})),
            false,
        )
        .await;
        assert!(matches!(err, LlmError::Transient { .. }), "{status}: {err}");
    }

    // The key echoed back by the server never reaches our error.
    let (err, _) = error_of(json_reply(401, "openai_bad_key.json"), false).await;
    let text = err.to_string();
    assert!(
        text.contains("HTTP 401") && !text.contains("SECRET") && text.contains("***"),
        "{text}"
    );
    assert!(!format!("{err:?}").contains("SECRET"));

    let (err, _) = error_of(
        Reply::Full {
            status: 200,
            headers: vec![],
            body: b"<html>gateway page</html>".to_vec(),
        },
        false,
    )
    .await;
    assert!(matches!(err, LlmError::InvalidResponse { .. }), "{err}");
    let (err, _) = error_of(Reply::json(200, &json!({"choices": []})), false).await;
    assert!(matches!(err, LlmError::InvalidResponse { .. }), "{err}");
}

#[tokio::test]
async fn cut_stalled_and_huge_answers() {
    // A body cut before its declared length.
    let body = fixture("llamacpp_chat.json");
    let (err, _) = error_of(
        Reply::Cut {
            body: body.as_bytes()[..100].to_vec(),
            declared: body.len(),
        },
        false,
    )
    .await;
    assert!(matches!(err, LlmError::InvalidResponse { .. }), "{err}");

    // A stream cut mid-way (no finish reason, no [DONE]).
    let stream = fixture("llamacpp_stream.sse");
    let cut = &stream[..stream.find("\"finish_reason\":\"length\"").unwrap() - 60];
    let (err, _) = error_of(Reply::sse(cut, 64), true).await;
    assert!(matches!(err, LlmError::InvalidResponse { .. }), "{err}");
    assert!(err.to_string().contains("cut off"), "{err}");

    // A server that stops talking: the idle timeout (800 ms here) ends the wait.
    let (err, _) = error_of(
        Reply::Stall {
            sent: stream.as_bytes()[..300].to_vec(),
            silence: Duration::from_secs(5),
        },
        true,
    )
    .await;
    assert!(matches!(err, LlmError::Timeout { .. }), "{err}");

    // A 10 MB answer is read whole.
    let big = "x".repeat(10 * 1024 * 1024);
    let server = FakeServer::start(vec![Reply::json(200, &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": big}, "finish_reason": "stop"}]}))]).await;
    let answer = client(&server, false)
        .complete(&LlmRequest::new("m", vec![Message::user("big")]))
        .await
        .unwrap();
    assert_eq!(answer.message.text_content().len(), 10 * 1024 * 1024);

    // Nobody listening: transient, retryable.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = OpenAiClient::new(OpenAiConfig::new(
        format!("http://127.0.0.1:{port}/v1"),
        "m",
    ))
    .unwrap();
    let err = nobody
        .complete(&LlmRequest::new("m", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transient { .. }), "{err}");
}

#[tokio::test]
async fn works_with_the_retry_decorator() {
    let limited: Value = serde_json::from_str(&fixture("openai_rate_limit.json")).unwrap();
    let server = FakeServer::start(vec![
        Reply::json_with(429, &limited, &[("retry-after", "0")]),
        Reply::json(503, &json!({"error": {"message": "overloaded"}})),
        Reply::Full {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: fixture("llamacpp_chat.json").into_bytes(),
        },
    ])
    .await;
    let retry = nanobot_llm_port::Retry::new(
        client(&server, false),
        {
            let mut value = nanobot_llm_port::RetryPolicy::default();
            value.initial_backoff = Duration::from_millis(1);
            value
        },
        std::sync::Arc::new(nanobot_llm_port::TokioClock::system()),
    );
    let answer = retry
        .complete(&LlmRequest::new("m", vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        answer.message.text_content(),
        "The capital of France is Paris."
    );
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn the_key_never_prints() {
    let config = OpenAiConfig::new("https://api.example.com/v1", "m")
        .with_api_key(ApiKey::new("sk-live-SECRET"));
    assert!(!format!("{config:?}").contains("SECRET"));
    assert!(OpenAiClient::new(OpenAiConfig::new("api.example.com", "m")).is_err());
    let client = OpenAiClient::new(config.with_context_window("m", 32_000)).unwrap();
    assert_eq!(client.capabilities().context_window, 32_000);
    assert!(!format!("{client:?}").contains("SECRET"));
}

#[tokio::test]
async fn streaming_hands_text_to_the_sink_as_it_arrives() {
    let server = FakeServer::start(vec![Reply::sse(&fixture("llamacpp_stream.sse"), 40)]).await;
    let pieces = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink: nanobot_llm_port::TextSink = {
        let pieces = pieces.clone();
        std::sync::Arc::new(move |t: &str| pieces.lock().unwrap().push(t.to_owned()))
    };
    let answer = client(&server, true)
        .complete_streaming(
            &LlmRequest::new("local", vec![Message::user("Say hi.")]),
            &sink,
        )
        .await
        .unwrap();
    let pieces = pieces.lock().unwrap().clone();
    assert_eq!(pieces.len(), 8, "{pieces:?}");
    assert_eq!(pieces.concat(), answer.message.text_content());
}

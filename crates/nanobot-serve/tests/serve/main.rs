//! The server in process (tower's `oneshot`), over the in-memory backend and a scripted
//! model: the OpenAI shapes, identity and sessions kept apart, hostile ids, streaming and
//! its failure, limits, and a client that goes away.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{
    Capabilities, Cl100kBase, LlmClient, LlmError, LlmRequest, LlmResponse, SystemClock, TextSink,
};
use nanobot_memory_scope::{ScopeKey, Subject, UserKey};
use nanobot_serve::{ApiKeyEntry, ServeSettings, Server, UserBinding};
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, AgentSettings, InMemoryBackend};
use serde_json::{Value, json};
use tower::ServiceExt;

mod mcp;
mod metrics;
mod options;
mod ui;

struct Fixture {
    llm: Arc<ScriptedLlm>,
    agent: Arc<Agent>,
    router: Router,
}

fn fixture(configure: impl FnOnce(&mut ServeSettings, &mut AgentSettings)) -> Fixture {
    let llm = Arc::new(ScriptedLlm::new());
    let (agent, router) = serve(llm.clone(), configure);
    Fixture { llm, agent, router }
}

fn serve(
    llm: Arc<dyn LlmClient>,
    configure: impl FnOnce(&mut ServeSettings, &mut AgentSettings),
) -> (Arc<Agent>, Router) {
    let mut agent_settings = AgentSettings::new("nanobot", 32_768, 512);
    let mut settings = ServeSettings::new("nanobot");
    configure(&mut settings, &mut agent_settings);
    let agent = agent(llm, agent_settings);
    let router = Server::new(agent.clone(), settings).router();
    (agent, router)
}

/// An agent over the in-memory backend.
fn agent(llm: Arc<dyn LlmClient>, settings: AgentSettings) -> Arc<Agent> {
    let mut builder = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    builder.tool_contract = false;
    Arc::new(Agent::new(
        settings,
        llm,
        Arc::new(ContextBuilder::new(builder, Arc::new(Cl100kBase))),
        Arc::new(InMemoryBackend::new(
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        )),
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    ))
}

fn keys() -> Vec<ApiKeyEntry> {
    vec![
        ApiKeyEntry {
            name: "alice-app".into(),
            secret: "sk-alice".into(),
            tenant: "acme".into(),
            binding: UserBinding::PerKey,
            operator: false,
        },
        ApiKeyEntry {
            name: "bob-app".into(),
            secret: "sk-bob".into(),
            tenant: "acme".into(),
            binding: UserBinding::PerKey,
            operator: false,
        },
        ApiKeyEntry {
            name: "webui".into(),
            secret: "sk-webui".into(),
            tenant: "acme".into(),
            binding: UserBinding::TrustedFrontend {
                user_header: Some("x-openwebui-user-id".into()),
                chat_header: Some("x-openwebui-chat-id".into()),
            },
            operator: false,
        },
    ]
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    /// The `data:` payloads of a server-sent event stream.
    fn events(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .split("\n\n")
            .filter_map(|event| {
                event
                    .lines()
                    .find_map(|line| line.strip_prefix("data: ").or(line.strip_prefix("data:")))
                    .map(str::to_owned)
            })
            .collect()
    }
}

async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

fn chat(text: &str) -> Value {
    json!({"model": "nanobot", "messages": [{"role": "user", "content": text}]})
}

async fn stored(agent: &Agent, scope: &ScopeKey, session: &str) -> Vec<(String, String)> {
    let memory = agent.memory(scope).await.unwrap();
    let handle = memory
        .sessions
        .get_or_create(&SessionKey::new(format!("api:{session}")).unwrap())
        .await
        .unwrap();
    handle.read(|s| {
        s.messages()
            .iter()
            .map(|m| {
                (
                    m.role().unwrap_or_default().to_owned(),
                    m.content()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    })
}

fn user_scope(tenant: &str, user: &str) -> ScopeKey {
    ScopeKey::new(
        tenant,
        "default",
        Subject::User(UserKey::new("api", user).unwrap()),
    )
    .unwrap()
}

#[tokio::test]
async fn health_models_and_keys_in_openais_shapes() {
    let f = fixture(|s, _| s.keys = keys());
    let health = call(&f.router, "GET", "/health", &[], None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(
        call(&f.router, "GET", "/health/ready", &[], None)
            .await
            .status,
        StatusCode::OK
    );

    let refused = call(&f.router, "GET", "/v1/models", &[], None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.json()["error"]["code"], "invalid_api_key");
    let wrong = call(
        &f.router,
        "GET",
        "/v1/models",
        &[("authorization", "Bearer sk-alicE")],
        None,
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);

    let models = call(
        &f.router,
        "GET",
        "/v1/models",
        &[("authorization", "Bearer sk-alice")],
        None,
    )
    .await;
    assert_eq!(models.status, StatusCode::OK);
    assert_eq!(models.json()["data"][0]["id"], "nanobot");
    assert_eq!(models.json()["object"], "list");

    let unknown = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-alice")],
        Some(json!({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]})),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.json()["error"]["code"], "model_not_found");
    assert_eq!(unknown.json()["error"]["param"], "model");
    let garbage = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-alice")],
        Some(json!({"messages": "hi"})),
    )
    .await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
    assert_eq!(garbage.json()["error"]["type"], "invalid_request_error");
    assert!(
        f.llm.requests().is_empty(),
        "no refused request reached the model"
    );
}

#[tokio::test]
async fn a_session_turn_is_answered_whole_and_stored_in_the_callers_scope() {
    let f = fixture(|s, _| s.keys = keys());
    f.llm
        .push(nanobot_llm_port::LlmResponse::text("Hello, Alice."));
    let answer = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer sk-alice"),
            ("x-session-id", "chat-1"),
        ],
        Some(json!({"model": "nanobot", "messages": [
            {"role": "user", "content": "ignored: the server owns the history"},
            {"role": "assistant", "content": "ignored too"},
            {"role": "user", "content": [{"type": "text", "text": "Hi, I am Alice."}]}
        ]})),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let body = answer.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello, Alice.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(answer.headers["x-session-id"], "chat-1");
    assert_eq!(answer.headers["x-nanobot-history"], "server");
    assert_eq!(
        stored(&f.agent, &user_scope("acme", "alice-app"), "chat-1").await,
        [
            ("user".to_owned(), "Hi, I am Alice.".to_owned()),
            ("assistant".to_owned(), "Hello, Alice.".to_owned())
        ]
    );
    let sent = serde_json::to_string(&f.llm.requests()[0].messages).unwrap();
    assert!(
        !sent.contains("ignored"),
        "only the last user message is taken: {sent}"
    );
}

#[tokio::test]
async fn two_keys_with_one_session_id_get_two_sessions_and_untrusted_users_are_ignored() {
    let f = fixture(|s, _| s.keys = keys());
    for (secret, answer) in [("sk-alice", "A"), ("sk-bob", "B")] {
        f.llm.push(nanobot_llm_port::LlmResponse::text(answer));
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {secret}"))],
            // An untrusted key names another user: ignored.
            Some(json!({"messages": [{"role": "user", "content": format!("from {secret}")}], "session_id": "same", "user": "alice-app"})),
        )
        .await;
        assert_eq!(out.status, StatusCode::OK);
    }
    let alice = stored(&f.agent, &user_scope("acme", "alice-app"), "same").await;
    let bob = stored(&f.agent, &user_scope("acme", "bob-app"), "same").await;
    assert_eq!(alice[0].1, "from sk-alice");
    assert_eq!(bob[0].1, "from sk-bob");
    assert_eq!((alice.len(), bob.len()), (2, 2));

    // A trusted front end names its users and chats.
    for (user, chat) in [("u-1", "c-9"), ("u-2", "c-9")] {
        f.llm.push(nanobot_llm_port::LlmResponse::text("ok"));
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", "Bearer sk-webui"),
                ("x-openwebui-user-id", user),
                ("x-openwebui-chat-id", chat),
            ],
            Some(chat_body(user)),
        )
        .await;
        assert_eq!(out.status, StatusCode::OK);
    }
    assert_eq!(
        stored(&f.agent, &user_scope("acme", "u-1"), "c-9").await[0].1,
        "I am u-1"
    );
    assert_eq!(
        stored(&f.agent, &user_scope("acme", "u-2"), "c-9").await[0].1,
        "I am u-2"
    );
}

fn chat_body(user: &str) -> Value {
    chat(&format!("I am {user}"))
}

#[tokio::test]
async fn hostile_ids_are_refused_or_kept_inside_the_callers_keys() {
    let f = fixture(|s, _| s.keys = keys());
    let long = "x".repeat(257);
    let refused = [
        "",
        "bad\nline",
        "tab\there",
        "nul\0",
        "bell\u{7}",
        "esc\u{1b}[31m",
        "del\u{7f}",
        "c1\u{85}",
        long.as_str(),
        "\r",
    ];
    for id in refused {
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-webui")],
            Some(json!({"messages": [{"role": "user", "content": "hi"}], "session_id": id})),
        )
        .await;
        assert_eq!(out.status, StatusCode::BAD_REQUEST, "session {id:?}");
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-webui")],
            Some(json!({"messages": [{"role": "user", "content": "hi"}], "session_id": "s", "user": id})),
        )
        .await;
        assert_eq!(out.status, StatusCode::BAD_REQUEST, "user {id:?}");
    }
    assert!(f.llm.requests().is_empty());
    // Odd but harmless ids are kept inside the caller's scope, as `api:<id>`.
    let contained = [
        "../../etc/passwd",
        "api:other",
        "telegram:42",
        "*",
        "%2e%2e",
        "a/b\\c",
        "' OR 1=1 --",
        "用户",
        "😀",
        "null",
        "x".repeat(256).leak(),
    ];
    for id in contained {
        f.llm.push(nanobot_llm_port::LlmResponse::text("ok"));
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-alice")],
            Some(json!({"messages": [{"role": "user", "content": "hi"}], "session_id": id})),
        )
        .await;
        assert_eq!(
            out.status,
            StatusCode::OK,
            "{id:?}: {}",
            String::from_utf8_lossy(&out.body)
        );
        assert_eq!(
            stored(&f.agent, &user_scope("acme", "alice-app"), id)
                .await
                .len(),
            2,
            "{id:?}"
        );
    }
}

#[tokio::test]
async fn a_streamed_answer_is_role_content_stop_usage_done() {
    let f = fixture(|_, _| {});
    f.llm
        .push(nanobot_llm_port::LlmResponse::text("Streamed answer."));
    let out = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("x-session-id", "s-1")],
        Some(json!({"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": true}})),
    )
    .await;
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(out.headers["content-type"], "text/event-stream");
    let events = out.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Streamed answer.");
    let stop = &chunks[chunks.len() - 2];
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert!(stop["usage"].is_null());
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(
        stored(&f.agent, &user_scope("default", "local"), "s-1")
            .await
            .len(),
        2
    );
}

#[tokio::test]
async fn a_model_failure_mid_stream_is_one_error_event_and_no_done() {
    let f = fixture(|_, _| {});
    f.llm
        .push(nanobot_llm_port::testing::Step::Fail(LlmError::permanent(
            "the model broke",
        )));
    let out = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("x-session-id", "s-2")],
        Some(json!({"messages": [{"role": "user", "content": "hi"}], "stream": true})),
    )
    .await;
    let events = out.events();
    assert!(!events.iter().any(|e| e == "[DONE]"), "{events:?}");
    let errors: Vec<&String> = events.iter().filter(|e| e.contains("\"error\"")).collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    assert!(errors[0].contains("the model broke"), "{}", errors[0]);
    assert_eq!(events.last(), Some(errors[0]));
}

#[tokio::test]
async fn a_stateless_request_stores_nothing() {
    let f = fixture(|_, _| {});
    f.llm.push(nanobot_llm_port::LlmResponse::text("stateless"));
    let out = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[],
        Some(chat("hi")),
    )
    .await;
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(out.json()["choices"][0]["message"]["content"], "stateless");
    assert!(out.headers.get("x-session-id").is_none());
    assert!(
        stored(&f.agent, &user_scope("default", "local"), "stateless")
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_turns_is_429_and_a_busy_session_409_both_with_retry_after() {
    let f = fixture(|s, a| {
        s.max_concurrent_turns = 2;
        a.turn_wait = Duration::from_millis(200);
    });
    f.llm.push(nanobot_llm_port::testing::Step::Hang);
    let router = f.router.clone();
    let hanging = tokio::spawn(async move {
        call(
            &router,
            "POST",
            "/v1/chat/completions",
            &[("x-session-id", "busy")],
            Some(chat("first")),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let busy = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("x-session-id", "busy")],
        Some(chat("second")),
    )
    .await;
    assert_eq!(
        busy.status,
        StatusCode::CONFLICT,
        "{}",
        String::from_utf8_lossy(&busy.body)
    );
    assert_eq!(busy.json()["error"]["code"], "session_busy");
    assert_eq!(busy.headers["retry-after"], "1");

    f.llm.push(nanobot_llm_port::testing::Step::Hang);
    let router = f.router.clone();
    let second = tokio::spawn(async move {
        call(
            &router,
            "POST",
            "/v1/chat/completions",
            &[("x-session-id", "other")],
            Some(chat("x")),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let limited = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("x-session-id", "third")],
        Some(chat("y")),
    )
    .await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.json()["error"]["code"], "too_many_turns");
    assert_eq!(limited.headers["retry-after"], "1");
    hanging.abort();
    second.abort();
}

/// A model that types: each piece goes to the sink, then a pause.
struct Typing {
    pieces: Vec<&'static str>,
    pause: Duration,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl LlmClient for Typing {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let silent: TextSink = Arc::new(|_: &str| {});
        self.complete_streaming(request, &silent).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(128_000)
    }

    async fn complete_streaming(
        &self,
        _request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        for piece in &self.pieces {
            sink(piece);
            tokio::time::sleep(self.pause).await;
        }
        Ok(LlmResponse::text(self.pieces.concat()))
    }
}

/// The first token reaches the client while the model is still typing; the client then
/// goes away, and the turn still finishes and is stored whole, with one model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_after_the_first_token_does_not_cancel_the_turn() {
    let typing = Arc::new(Typing {
        pieces: vec!["You ", "left, ", "but I ", "answered."],
        pause: Duration::from_millis(100),
        calls: AtomicUsize::new(0),
    });
    let (agent, router) = serve(typing.clone(), |_, _| {});
    let request = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("x-session-id", "gone")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}).to_string(),
        ))
        .unwrap();
    let started = std::time::Instant::now();
    let mut body = router.oneshot(request).await.unwrap().into_body();
    let mut seen = String::new();
    while !seen.contains("You ") {
        let frame = body.frame().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().unwrap()));
    }
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "the first token came before the answer was done: {:?}",
        started.elapsed()
    );
    // The client goes away.
    drop(body);
    let scope = user_scope("default", "local");
    for _ in 0..100 {
        if stored(&agent, &scope, "gone").await.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        stored(&agent, &scope, "gone").await,
        [
            ("user".to_owned(), "hi".to_owned()),
            (
                "assistant".to_owned(),
                "You left, but I answered.".to_owned()
            )
        ]
    );
    assert_eq!(typing.calls.load(Ordering::SeqCst), 1);
}

/// The session routes reach the caller's own sessions only: listed, read, cleared
/// (archived into the caller's memory) and deleted; another key's session of the same id
/// is untouched.
#[tokio::test]
async fn session_routes_reach_the_callers_own_sessions_only() {
    let f = fixture(|s, _| s.keys = keys());
    let alice = [("authorization", "Bearer sk-alice")];
    let bob = [("authorization", "Bearer sk-bob")];
    for (who, text) in [
        (&alice, "alice one"),
        (&alice, "alice two"),
        (&bob, "bob one"),
    ] {
        f.llm
            .push(nanobot_llm_port::LlmResponse::text(format!("re: {text}")));
        let out = call(
            &f.router,
            "POST",
            "/v1/chat/completions",
            &[who[0], ("x-session-id", "s1")],
            Some(chat(text)),
        )
        .await;
        assert_eq!(out.status, StatusCode::OK);
    }
    let listed = call(&f.router, "GET", "/v1/sessions", &alice, None).await;
    assert_eq!(listed.status, StatusCode::OK);
    let data = listed.json()["data"].clone();
    assert_eq!(data.as_array().unwrap().len(), 1, "{data}");
    assert_eq!(data[0]["id"], "s1");
    assert_eq!(data[0]["message_count"], 4);

    let read = call(&f.router, "GET", "/v1/sessions/s1/messages", &alice, None).await;
    let messages = read.json()["data"].clone();
    let texts: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["alice one", "re: alice one", "alice two", "re: alice two"]
    );
    assert!(
        messages.as_array().unwrap().iter().all(|m| m
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with('_'))),
        "{messages}"
    );
    let missing = call(&f.router, "GET", "/v1/sessions/nope/messages", &alice, None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["code"], "not_found");
    let hostile = call(
        &f.router,
        "GET",
        "/v1/sessions/bad%0Aid/messages",
        &alice,
        None,
    )
    .await;
    assert_eq!(hostile.status, StatusCode::BAD_REQUEST);

    // `/new`: the archive's summary comes from the model.
    f.llm.push(nanobot_llm_port::LlmResponse::text(
        "- Alice said one and two.",
    ));
    let cleared = call(&f.router, "POST", "/v1/sessions/s1/clear", &alice, None).await;
    assert_eq!(
        cleared.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&cleared.body)
    );
    assert!(
        stored(&f.agent, &user_scope("acme", "alice-app"), "s1")
            .await
            .is_empty()
    );
    let memory = f
        .agent
        .memory(&user_scope("acme", "alice-app"))
        .await
        .unwrap();
    let journal = memory.journal.read_last(5).await.unwrap();
    assert!(
        journal
            .iter()
            .any(|e| e.content.contains("Alice said one and two")),
        "{journal:?}"
    );

    let deleted = call(&f.router, "DELETE", "/v1/sessions/s1", &alice, None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let again = call(&f.router, "DELETE", "/v1/sessions/s1", &alice, None).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    // Bob's session of the same id is untouched.
    assert_eq!(
        stored(&f.agent, &user_scope("acme", "bob-app"), "s1")
            .await
            .len(),
        2
    );
    let unauthorised = call(&f.router, "GET", "/v1/sessions", &[], None).await;
    assert_eq!(unauthorised.status, StatusCode::UNAUTHORIZED);
}

/// `POST /v1/memory/search` searches the caller's memory only, as JSON hits.
#[tokio::test]
async fn memory_search_finds_the_callers_memory_only() {
    let f = fixture(|s, _| s.keys = keys());
    f.llm.push(nanobot_llm_port::LlmResponse::text("Noted."));
    let said = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-alice"), ("x-session-id", "s1")],
        Some(chat("My locker code is 4417-B.")),
    )
    .await;
    assert_eq!(said.status, StatusCode::OK);
    let search = |secret: &'static str| {
        let router = f.router.clone();
        async move {
            call(
                &router,
                "POST",
                "/v1/memory/search",
                &[("authorization", secret)],
                Some(json!({"query": "4417-B", "limit": 3})),
            )
            .await
        }
    };
    let alice = search("Bearer sk-alice").await;
    assert_eq!(
        alice.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&alice.body)
    );
    let hits = alice.json()["data"].clone();
    assert_eq!(hits[0]["source"], "session:api:s1#0", "{hits}");
    assert!(hits[0]["snippet"].as_str().unwrap().contains("4417-B"));
    let bob = search("Bearer sk-bob").await;
    assert_eq!(
        bob.json()["data"],
        json!([]),
        "another key's memory is not searched"
    );
    let bad = call(
        &f.router,
        "POST",
        "/v1/memory/search",
        &[("authorization", "Bearer sk-alice")],
        Some(json!({"query": ""})),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["error"]["param"], "query");
}

/// A log line writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every response carries `x-request-id` (the client's when sane, else ours), and the logs
/// at info level carry neither the user's nor the session's id nor the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_on_every_answer_and_no_raw_ids_or_text_in_info_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();
    let f = fixture(|s, _| s.keys = keys());
    f.llm
        .push(nanobot_llm_port::LlmResponse::text("A private answer."));
    let out = call(
        &f.router,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", "Bearer sk-webui"),
            ("x-openwebui-user-id", "user-raw-id-4471"),
            ("x-session-id", "session-raw-id-9932"),
            ("x-request-id", "req-from-client-1"),
        ],
        Some(chat("my very private text")),
    )
    .await;
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(out.headers["x-request-id"], "req-from-client-1");
    let health = call(
        &f.router,
        "GET",
        "/health",
        &[("x-request-id", "an id with spaces")],
        None,
    )
    .await;
    let generated = health.headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(generated.starts_with("req-"), "{generated}");
    let refused = call(&f.router, "GET", "/v1/models", &[], None).await;
    assert!(refused.headers.contains_key("x-request-id"));

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("chat completion"), "{logs}");
    assert!(logs.contains("req-from-client-1"), "{logs}");
    for secret in [
        "user-raw-id-4471",
        "session-raw-id-9932",
        "my very private text",
        "A private answer",
        "sk-webui",
    ] {
        assert!(!logs.contains(secret), "{secret} in the logs: {logs}");
    }
}

/// A model that answers `X` with `answer to X` after a pause.
struct Echo {
    pause: Duration,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl LlmClient for Echo {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.pause).await;
        // The message's last line: the user's text (a runtime note may come before it).
        let last = request
            .messages
            .last()
            .and_then(|m| m.content())
            .and_then(|c| c.as_text())
            .and_then(|t| t.lines().last())
            .unwrap_or_default()
            .to_owned();
        Ok(LlmResponse::text(format!("answer to {last}")))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(128_000)
    }
}

/// Acceptance 2 of issue 18, in one process: 50 clients × 20 turns over 10 sessions with a
/// model of 50 ms: every session holds its turns whole and in each client's order, none
/// lost, doubled or crossing sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_over_ten_sessions_lose_double_and_cross_nothing() {
    const CLIENTS: usize = 50;
    const TURNS: usize = 20;
    const SESSIONS: usize = 10;
    let echo = Arc::new(Echo {
        pause: Duration::from_millis(50),
        calls: AtomicUsize::new(0),
    });
    let (agent, router) = serve(echo.clone(), |s, a| {
        s.max_concurrent_turns = CLIENTS;
        a.turn_wait = Duration::from_secs(120);
    });
    let started = std::time::Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let router = router.clone();
        clients.push(tokio::spawn(async move {
            let session = format!("s{}", c % SESSIONS);
            let mut failures = Vec::new();
            for t in 0..TURNS {
                let text = format!("c{c} t{t}");
                let out = call(
                    &router,
                    "POST",
                    "/v1/chat/completions",
                    &[("x-session-id", &session)],
                    Some(chat(&text)),
                )
                .await;
                if out.status != StatusCode::OK {
                    failures.push(format!("{text}: {}", out.status));
                    continue;
                }
                let answer = out.json()["choices"][0]["message"]["content"].clone();
                if answer != json!(format!("answer to {text}")) {
                    failures.push(format!("{text}: got {answer}"));
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for client in clients {
        failures.extend(client.await.unwrap());
    }
    assert!(failures.is_empty(), "{failures:?}");
    let scope = user_scope("default", "local");
    for s in 0..SESSIONS {
        let messages = stored(&agent, &scope, &format!("s{s}")).await;
        assert_eq!(
            messages.len(),
            2 * TURNS * CLIENTS / SESSIONS,
            "session s{s}"
        );
        let mut last_turn = std::collections::HashMap::new();
        for pair in messages.chunks(2) {
            let (user, assistant) = (&pair[0], &pair[1]);
            assert_eq!(user.0, "user");
            assert_eq!(
                assistant,
                &("assistant".to_owned(), format!("answer to {}", user.1))
            );
            let (client, turn) = user.1.split_once(' ').unwrap();
            let client: usize = client[1..].parse().unwrap();
            let turn: usize = turn[1..].parse().unwrap();
            assert_eq!(client % SESSIONS, s, "a message crossed sessions: {user:?}");
            let previous = last_turn.insert(client, turn);
            assert_eq!(
                previous.map_or(0, |p| p + 1),
                turn,
                "client {client}'s turns out of order or doubled in s{s}"
            );
        }
    }
    assert_eq!(echo.calls.load(Ordering::SeqCst), CLIENTS * TURNS);
    println!(
        "{} turns over {SESSIONS} sessions in {:.1?}",
        CLIENTS * TURNS,
        started.elapsed()
    );
}

/// `/clear` waits for a running turn of the session like another turn would: past the
/// wait it is 409, and the running turn is not cut in two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_a_session_with_a_turn_running_is_409() {
    let f = fixture(|_, a| a.turn_wait = Duration::from_millis(200));
    f.llm.push(nanobot_llm_port::testing::Step::Hang);
    let router = f.router.clone();
    let running = tokio::spawn(async move {
        call(
            &router,
            "POST",
            "/v1/chat/completions",
            &[("x-session-id", "busy")],
            Some(chat("first")),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cleared = call(&f.router, "POST", "/v1/sessions/busy/clear", &[], None).await;
    assert_eq!(
        cleared.status,
        StatusCode::CONFLICT,
        "{}",
        String::from_utf8_lossy(&cleared.body)
    );
    assert_eq!(cleared.json()["error"]["code"], "session_busy");
    assert_eq!(
        stored(&f.agent, &user_scope("default", "local"), "busy")
            .await
            .len(),
        1
    );
    running.abort();
}

//! What a request adds to its turn: an `Idempotency-Key`, a client's system message, and a
//! stateless request's own history.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use nanobot_llm_port::{LlmResponse, Message};
use nanobot_serve::CorsOrigins;
use serde_json::json;

use super::{Typing, call, chat, fixture, serve, stored, user_scope};

const CHAT: &str = "/v1/chat/completions";

/// A retry with the same key gets the stored answer (one model call, nothing stored
/// twice, whole or streamed); the same key with another request is 409; a hostile key
/// is 400.
#[tokio::test]
async fn an_idempotent_retry_replays_the_answer_without_calling_the_model() {
    let f = fixture(|_, _| {});
    f.llm.push(
        LlmResponse::text("the first answer").with_usage(nanobot_llm_port::Usage::new(41, 3)),
    );
    let headers = [("x-session-id", "retry"), ("idempotency-key", "req-1")];
    let first = call(&f.router, "POST", CHAT, &headers, Some(chat("hello"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.headers.get("x-nanobot-replayed").is_none());
    let again = call(&f.router, "POST", CHAT, &headers, Some(chat("hello"))).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.json()["choices"][0]["message"]["content"],
        "the first answer"
    );
    assert_eq!(again.headers["x-nanobot-replayed"], "true");
    assert_eq!(
        again.json()["usage"],
        first.json()["usage"],
        "the first turn's usage"
    );
    let mut streamed_body = chat("hello");
    streamed_body["stream"] = json!(true);
    let streamed = call(&f.router, "POST", CHAT, &headers, Some(streamed_body)).await;
    let events = streamed.events();
    assert!(
        events.iter().any(|e| e.contains("the first answer")),
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(f.llm.call_count(), 1, "one model call for three requests");
    assert_eq!(
        stored(&f.agent, &user_scope("default", "local"), "retry")
            .await
            .len(),
        2,
        "the turn is stored once"
    );

    let other = call(
        &f.router,
        "POST",
        CHAT,
        &headers,
        Some(chat("something else")),
    )
    .await;
    assert_eq!(other.status, StatusCode::CONFLICT);
    assert_eq!(other.json()["error"]["code"], "idempotency_key_reused");
    assert_eq!(other.json()["error"]["param"], "Idempotency-Key");
    assert_eq!(f.llm.call_count(), 1);

    // A new key is a new turn.
    f.llm.push(LlmResponse::text("the second answer"));
    let next = call(
        &f.router,
        "POST",
        CHAT,
        &[("x-session-id", "retry"), ("idempotency-key", "req-2")],
        Some(chat("hello")),
    )
    .await;
    assert_eq!(
        next.json()["choices"][0]["message"]["content"],
        "the second answer"
    );
    // The first key still replays its own answer, not the session's latest.
    let first_again = call(&f.router, "POST", CHAT, &headers, Some(chat("hello"))).await;
    assert_eq!(
        first_again.json()["choices"][0]["message"]["content"],
        "the first answer"
    );

    let long = "k".repeat(300);
    for hostile in ["a\tb", long.as_str()] {
        let refused = call(
            &f.router,
            "POST",
            CHAT,
            &[("x-session-id", "retry"), ("idempotency-key", hostile)],
            Some(chat("hello")),
        )
        .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{hostile:?}");
        assert_eq!(refused.json()["error"]["param"], "Idempotency-Key");
    }
    assert_eq!(f.llm.call_count(), 2);
}

/// Two requests with one key at once: the second waits for the first's turn and replays
/// its answer; the model is called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_arrives_while_the_first_runs_waits_and_replays() {
    let typing = Arc::new(Typing {
        pieces: vec!["slow ", "and ", "once"],
        pause: Duration::from_millis(80),
        calls: AtomicUsize::new(0),
    });
    let (agent, router) = serve(typing.clone(), |_, _| {});
    let headers = [("x-session-id", "twice"), ("idempotency-key", "same")];
    let (a, b) = tokio::join!(
        call(&router, "POST", CHAT, &headers, Some(chat("hi"))),
        async {
            tokio::time::sleep(Duration::from_millis(40)).await;
            call(&router, "POST", CHAT, &headers, Some(chat("hi"))).await
        }
    );
    for answer in [&a, &b] {
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.json()["choices"][0]["message"]["content"],
            "slow and once"
        );
    }
    assert_eq!(b.headers["x-nanobot-replayed"], "true");
    assert_eq!(typing.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        stored(&agent, &user_scope("default", "local"), "twice")
            .await
            .len(),
        2
    );
}

/// A client's system message is its instructions for the turn: in the system prompt after
/// the stable prefix (which it leaves as it was), never stored.
#[tokio::test]
async fn a_clients_system_message_follows_the_stable_prefix_and_is_not_stored() {
    let f = fixture(|_, _| {});
    f.llm.push(LlmResponse::text("plain"));
    f.llm.push(LlmResponse::text("bonjour"));
    let headers = [("x-session-id", "fr")];
    call(&f.router, "POST", CHAT, &headers, Some(chat("hello"))).await;
    let body = json!({"model": "nanobot", "messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "hello again"},
    ]});
    let out = call(&f.router, "POST", CHAT, &headers, Some(body)).await;
    assert_eq!(out.status, StatusCode::OK);
    let requests = f.llm.requests();
    let system = |i: usize| match &requests[i].messages[0] {
        Message::System(m) => m.content.joined_text(),
        other => panic!("{other:?}"),
    };
    let (plain, with) = (system(0), system(1));
    let at = with
        .find("\n\n---\n\n# Instructions from the client")
        .unwrap_or_else(|| panic!("{with}"));
    assert!(
        plain.starts_with(&with[..at]),
        "the stable prefix is unchanged"
    );
    assert!(
        with[at..].contains("Answer in French.\n\nBe brief."),
        "{with}"
    );
    assert!(!plain.contains("Instructions from the client"));
    let kept = stored(&f.agent, &user_scope("default", "local"), "fr").await;
    assert_eq!(kept.len(), 4);
    assert!(
        kept.iter().all(|(_, text)| !text.contains("French")),
        "{kept:?}"
    );
}

/// Without a session the request's earlier messages are the history; a message that
/// cannot be replayed is a clear 400.
#[tokio::test]
async fn a_stateless_request_brings_its_own_history() {
    let f = fixture(|_, _| {});
    f.llm.push(LlmResponse::text("You are Ada."));
    let body = json!({"model": "nanobot", "messages": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada!"},
        {"role": "user", "content": "What is my name?"},
    ]});
    let out = call(&f.router, "POST", CHAT, &[], Some(body)).await;
    assert_eq!(out.status, StatusCode::OK);
    let request = &f.llm.requests()[0];
    let texts: Vec<String> = request
        .messages
        .iter()
        .map(|m| m.content().map(|c| c.joined_text()).unwrap_or_default())
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts[0].contains("Be kind."));
    assert_eq!(texts[1], "My name is Ada.");
    assert_eq!(texts[2], "Hello Ada!");
    assert!(texts[3].starts_with("What is my name?"), "{:?}", texts[3]);

    let tool = json!({"model": "nanobot", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "user", "content": "and?"},
    ]});
    let refused = call(&f.router, "POST", CHAT, &[], Some(tool)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.json()["error"]["param"], "messages[1].role");
    assert_eq!(f.llm.call_count(), 1);
}

/// CORS is off unless origins are configured; then an allowed origin's preflight and
/// answers carry the headers a browser needs, and any other origin gets none (its preflight
/// a 403 that says why).
#[tokio::test]
async fn cors_is_off_by_default_and_exact_when_configured() {
    let preflight = |origin: &'static str| {
        [
            ("origin", origin),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type",
            ),
        ]
    };
    let off = fixture(|_, _| {});
    let answer = call(
        &off.router,
        "OPTIONS",
        CHAT,
        &preflight("https://chat.example.com"),
        None,
    )
    .await;
    assert!(answer.headers.get("access-control-allow-origin").is_none());
    let health = call(
        &off.router,
        "GET",
        "/health",
        &[("origin", "https://chat.example.com")],
        None,
    )
    .await;
    assert!(health.headers.get("access-control-allow-origin").is_none());

    let on = fixture(|s, _| {
        s.keys = super::keys();
        s.cors = CorsOrigins::parse(&["https://chat.example.com".to_owned()]).unwrap();
    });
    let allowed = call(
        &on.router,
        "OPTIONS",
        CHAT,
        &preflight("https://chat.example.com"),
        None,
    )
    .await;
    assert_eq!(allowed.status, StatusCode::NO_CONTENT);
    assert_eq!(
        allowed.headers["access-control-allow-origin"],
        "https://chat.example.com"
    );
    let allow_headers = allowed.headers["access-control-allow-headers"]
        .to_str()
        .unwrap();
    for name in ["authorization", "idempotency-key", "x-openwebui-user-id"] {
        assert!(allow_headers.contains(name), "{allow_headers}");
    }
    assert!(allowed.headers.get("x-request-id").is_some());
    let refused = call(
        &on.router,
        "OPTIONS",
        CHAT,
        &preflight("https://evil.example"),
        None,
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["error"]["code"], "origin_not_allowed");
    assert!(refused.headers.get("access-control-allow-origin").is_none());

    let models = call(
        &on.router,
        "GET",
        "/v1/models",
        &[
            ("origin", "https://chat.example.com"),
            ("authorization", "Bearer sk-alice"),
        ],
        None,
    )
    .await;
    assert_eq!(models.status, StatusCode::OK);
    assert_eq!(
        models.headers["access-control-allow-origin"],
        "https://chat.example.com"
    );
    assert!(
        models.headers["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("x-session-id")
    );
    let other = call(
        &on.router,
        "GET",
        "/v1/models",
        &[
            ("origin", "https://evil.example"),
            ("authorization", "Bearer sk-alice"),
        ],
        None,
    )
    .await;
    assert!(other.headers.get("access-control-allow-origin").is_none());

    assert_eq!(
        CorsOrigins::parse(&["*".to_owned()]).unwrap(),
        CorsOrigins::Any
    );
    assert_eq!(CorsOrigins::parse(&[]).unwrap(), CorsOrigins::Off);
    for bad in [
        vec!["*".to_owned(), "https://a.example".to_owned()],
        vec!["chat.example.com".to_owned()],
        vec!["https://chat.example.com/path".to_owned()],
        vec!["https://".to_owned()],
    ] {
        assert!(CorsOrigins::parse(&bad).is_err(), "{bad:?}");
    }
}

/// The design's case: a streamed request goes away after the first token; its retry with
/// the same key waits for the turn, which finished without it, and gets the whole answer;
/// the model was called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_mid_stream_disconnect_replays_the_whole_answer() {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let typing = Arc::new(Typing {
        pieces: vec!["first ", "then ", "the rest"],
        pause: Duration::from_millis(80),
        calls: AtomicUsize::new(0),
    });
    let (agent, router) = serve(typing.clone(), |_, _| {});
    let request = Request::builder()
        .method("POST")
        .uri(CHAT)
        .header("x-session-id", "flaky")
        .header("idempotency-key", "retry-me")
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}).to_string(),
        ))
        .unwrap();
    let mut body = router.clone().oneshot(request).await.unwrap().into_body();
    let mut seen = String::new();
    while !seen.contains("first ") {
        let frame = body.frame().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().unwrap()));
    }
    drop(body);
    let retry = call(
        &router,
        "POST",
        CHAT,
        &[("x-session-id", "flaky"), ("idempotency-key", "retry-me")],
        Some(chat("hi")),
    )
    .await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(
        retry.json()["choices"][0]["message"]["content"],
        "first then the rest"
    );
    assert_eq!(retry.headers["x-nanobot-replayed"], "true");
    assert_eq!(typing.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        stored(&agent, &user_scope("default", "local"), "flaky")
            .await
            .len(),
        2
    );
}

//! Several `nanobot` processes taking turns on one session at once, for the file and the
//! database backends: a loopback model that answers each turn by name, the race, and the
//! check that turns never interleaved and nothing was lost or doubled.

use std::path::Path;
use std::sync::{Arc, Mutex};

use nanobot_llm_http::testing::{FakeServer, Reply};
use nanobot_session_store::Session;
use serde_json::json;

/// How many processes race, and how many turns each takes.
pub(crate) const PROCESSES: usize = 4;
pub(crate) const TURNS: usize = 25;

/// A loopback model that answers `turn X` with `answer to X` and anything else (an
/// archive request) with a summary; every system prompt it sees goes to `prompts`.
pub(crate) async fn echo_model(prompts: Arc<Mutex<Vec<String>>>) -> FakeServer {
    let responder: nanobot_llm_http::testing::Responder = Arc::new(move |request| {
        let body = request.json();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if let Some(system) = messages.first().and_then(|m| m["content"].as_str()) {
            prompts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(system.to_owned());
        }
        let last = messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let text = match last.strip_prefix("turn ") {
            Some(turn) => format!("answer to {turn}"),
            None => "Summary: the user asked numbered questions.".to_owned(),
        };
        Reply::json(
            200,
            &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 100, "completion_tokens": 5}}),
        )
    });
    FakeServer::respond_with(responder).await
}

/// [`PROCESSES`] processes each running [`TURNS`] `nanobot run` turns on session
/// `cli:shared` of `workspace` with `env` (the model's URL among it); what failed.
pub(crate) async fn race_turns(workspace: &Path, env: &[(&'static str, String)]) -> Vec<String> {
    let mut workers = Vec::new();
    for p in 0..PROCESSES {
        let (path, env) = (workspace.to_owned(), env.to_vec());
        workers.push(tokio::task::spawn_blocking(move || {
            let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut failures = Vec::new();
            for t in 0..TURNS {
                let out = super::nanobot(
                    &path,
                    &[
                        "--session",
                        "cli:shared",
                        "run",
                        "-m",
                        &format!("turn p{p} t{t}"),
                    ],
                    &envs,
                );
                if !out.status.success() {
                    failures.push(format!("p{p} t{t}: {}", super::text(&out, &path)));
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for worker in workers {
        failures.extend(worker.await.unwrap_or_else(|e| vec![e.to_string()]));
    }
    failures
}

/// Every user turn of `session` is followed by its own answer, and every turn of the race
/// is there once; the pointer stays within the messages.
pub(crate) fn assert_serialised(session: &Session) {
    let messages: Vec<(String, String)> = session
        .messages()
        .iter()
        .map(|m| {
            (
                m.role().unwrap_or_default().to_owned(),
                m.content()
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(messages.len(), 2 * PROCESSES * TURNS, "{messages:#?}");
    let mut seen = std::collections::HashSet::new();
    for pair in messages.chunks(2) {
        let (role, asked) = &pair[0];
        assert_eq!(role, "user", "{pair:?}");
        let turn = asked.strip_prefix("turn ").expect("a user turn");
        assert_eq!(
            pair[1],
            ("assistant".to_owned(), format!("answer to {turn}"))
        );
        assert!(seen.insert(turn.to_owned()), "{turn} doubled");
    }
    assert_eq!(seen.len(), PROCESSES * TURNS);
    assert!(
        session.last_consolidated() <= messages.len(),
        "pointer within the messages"
    );
}

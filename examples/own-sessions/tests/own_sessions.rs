//! The store passes the session conformance suite from outside this repository's port
//! crate, and a bot built on it answers through it.

use std::sync::Arc;

use nanobot_llm_http::testing::FakeServer;
use nanobot_memory::llm::{Cl100kBase, SystemClock};
use nanobot_memory::scope::{ScopeKey, Subject};
use nanobot_memory::{Bot, Speaker};
use own_sessions::{AuditedSessions, OwnBackend};

nanobot_memory::sessions::session_store_conformance!(
    audited,
    || async { AuditedSessions::default() },
    skips = [shared_turn_locks, shared_stale_writers]
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_keeps_its_sessions_in_the_store_its_builder_wrote() {
    let model = FakeServer::chat_model(Arc::new(|text: &str| format!("echo {text}"))).await;
    let backend = Arc::new(OwnBackend::new(Arc::new(SystemClock), Arc::new(Cl100kBase)));
    let bot = Bot::builder()
        .backend(backend.clone())
        .openai(&format!("{}/v1", model.url()), "local")
        .build()
        .await
        .unwrap();
    let me = Speaker::anonymous();
    let first = bot.turn(&me, "cli:chat", "hello").await.unwrap();
    assert_eq!(first.answer, "echo hello");
    bot.turn(&me, "cli:chat", "again").await.unwrap();
    bot.finish().await.unwrap();

    let sessions = backend
        .sessions(&ScopeKey::local(Subject::Agent))
        .expect("the agent scope was opened");
    let audit = sessions.audit();
    let appended: usize = audit
        .iter()
        .filter_map(|line| line.strip_prefix("append cli:chat "))
        .map(|n| n.parse::<usize>().unwrap())
        .sum();
    assert_eq!(
        appended, 4,
        "two turns, a user message and an answer each: {audit:?}"
    );
    // The second turn's request replayed the first from this store.
    let second = model.requests()[1].json().to_string();
    assert!(second.contains("echo hello"), "{second}");
}

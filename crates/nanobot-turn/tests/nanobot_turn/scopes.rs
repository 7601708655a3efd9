//! A process that meets many scopes (a server): open scopes are bounded, idle sessions are
//! compacted in every open scope by one sweep, and idempotency records stay bounded.

use std::sync::Arc;
use std::time::Duration;

use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, LlmResponse, SystemClock, TextSink};
use nanobot_memory_scope::{ScopeKey, Subject, UserKey};
use nanobot_session_store::SessionKey;
use nanobot_turn::{
    Agent, AgentSettings, IDEMPOTENCY_KEY_FIELD, IDEMPOTENCY_RECORDS, IdempotencyKey,
    InMemoryBackend, TurnOptions,
};

fn agent(llm: Arc<ScriptedLlm>, settings: AgentSettings) -> Agent {
    let mut config = BuilderConfig::new(Host::new("Linux", "x86_64", "nanobot-rs"));
    config.tool_contract = false;
    Agent::new(
        settings,
        llm,
        Arc::new(ContextBuilder::new(config, Arc::new(Cl100kBase))),
        Arc::new(InMemoryBackend::new(
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        )),
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    )
}

fn user(name: &str) -> ScopeKey {
    ScopeKey::local(Subject::User(UserKey::new("api", name).unwrap()))
}

fn silent() -> TextSink {
    Arc::new(|_: &str| {})
}

async fn one_turn(agent: &Agent, scope: &ScopeKey, key: &SessionKey, text: &str) {
    let memory = agent.memory(scope).await.unwrap();
    agent.turn(&memory, key, text, &silent()).await.unwrap();
}

#[tokio::test]
async fn open_scopes_are_bounded_and_a_closed_scope_opens_again_from_storage() {
    let llm = Arc::new(ScriptedLlm::new());
    let mut settings = AgentSettings::new("m", 32_768, 512);
    settings.max_open_scopes = 2;
    let agent = agent(llm.clone(), settings);
    let key = SessionKey::new("api:chat").unwrap();
    for name in ["ada", "bob", "cy"] {
        llm.push(LlmResponse::text(format!("hello {name}")));
        one_turn(&agent, &user(name), &key, "hi").await;
    }
    assert_eq!(agent.open_scopes().await, 2);
    // A scope somebody holds is never closed: past the bound while it is held.
    let held = agent.memory(&user("ada")).await.unwrap();
    llm.push(LlmResponse::text("hello dee"));
    one_turn(&agent, &user("dee"), &key, "hi").await;
    assert!(Arc::strong_count(&held) > 1, "ada stays open while held");
    let messages = held
        .sessions
        .get_or_create(&key)
        .await
        .unwrap()
        .read(|s| s.messages().len());
    assert_eq!(
        messages, 2,
        "ada's session survived being closed and opened"
    );
    drop(held);
    llm.push(LlmResponse::text("hello again"));
    one_turn(&agent, &user("eve"), &key, "hi").await;
    assert_eq!(agent.open_scopes().await, 2);
}

#[tokio::test]
async fn one_sweep_compacts_idle_sessions_of_every_open_scope_which_may_then_close() {
    let llm = Arc::new(ScriptedLlm::new());
    let mut settings = AgentSettings::new("m", 32_768, 512);
    settings.max_open_scopes = 1;
    settings.idle_ttl = Some(Duration::from_millis(50));
    let agent = agent(llm.clone(), settings);
    let key = SessionKey::new("api:chat").unwrap();
    for name in ["ada", "bob"] {
        for n in 0..3 {
            llm.push(LlmResponse::text(format!("answer {n} to {name}")));
            one_turn(&agent, &user(name), &key, &format!("question {n}")).await;
        }
    }
    // Both wait for idle compaction: neither may close.
    assert_eq!(agent.open_scopes().await, 2);
    assert!(agent.compact_idle().await.is_empty(), "nothing is idle yet");
    tokio::time::sleep(Duration::from_millis(120)).await;
    for _ in 0..2 {
        llm.push(LlmResponse::text("Summary: questions were asked."));
    }
    let done = agent.compact_idle().await;
    let mut scopes: Vec<String> = done.iter().map(|(s, _)| s.subject.to_string()).collect();
    scopes.sort();
    assert_eq!(scopes.len(), 2, "{scopes:?}");
    for (_, compacted) in &done {
        let record = compacted.result.as_ref().unwrap().as_ref().unwrap();
        assert!(record.end > record.start);
    }
    llm.push(LlmResponse::text("hello cy"));
    one_turn(&agent, &user("cy"), &key, "hi").await;
    // cy waits for compaction now; the other two were compacted and may close.
    assert_eq!(agent.open_scopes().await, 1);
}

#[tokio::test]
async fn a_session_keeps_its_newest_idempotency_records_only() {
    let llm = Arc::new(ScriptedLlm::new());
    let agent = agent(llm.clone(), AgentSettings::new("m", 32_768, 512));
    let scope = user("ada");
    let key = SessionKey::new("api:chat").unwrap();
    let memory = agent.memory(&scope).await.unwrap();
    let turns = IDEMPOTENCY_RECORDS + 3;
    for n in 0..turns {
        llm.push(LlmResponse::text(format!("answer {n}")));
        let options = TurnOptions::default().with_idempotency(IdempotencyKey {
            key: format!("k{n}"),
            fingerprint: format!("f{n}"),
        });
        agent
            .turn_with(&memory, &key, &format!("q{n}"), &options, &silent())
            .await
            .unwrap();
    }
    let handle = memory.sessions.get_or_create(&key).await.unwrap();
    let kept = handle.read(|s| s.meta().metadata[IDEMPOTENCY_KEY_FIELD].clone());
    let kept = kept.as_object().unwrap();
    assert_eq!(kept.len(), IDEMPOTENCY_RECORDS);
    assert!(!kept.contains_key("k0") && kept.contains_key(&format!("k{}", turns - 1)));
    // An old key's record is gone: the request runs again; a kept one replays.
    let replay = |n: usize| {
        TurnOptions::default().with_idempotency(IdempotencyKey {
            key: format!("k{n}"),
            fingerprint: format!("f{n}"),
        })
    };
    llm.push(LlmResponse::text("answer again"));
    let again = agent
        .turn_with(&memory, &key, "q0", &replay(0), &silent())
        .await
        .unwrap();
    assert!(!again.replayed);
    let kept = agent
        .turn_with(&memory, &key, "q5", &replay(5), &silent())
        .await
        .unwrap();
    assert!(kept.replayed);
    assert_eq!(kept.answer, "answer 5");
    assert_eq!(llm.remaining(), 0);
    // After a clear the recorded answer is no longer in the session: the turn runs again.
    memory.sessions.clear(&handle).await.unwrap();
    llm.push(LlmResponse::text("after the clear"));
    let cleared = agent
        .turn_with(&memory, &key, "q6", &replay(6), &silent())
        .await
        .unwrap();
    assert!(!cleared.replayed);
    assert_eq!(cleared.answer, "after the clear");
}

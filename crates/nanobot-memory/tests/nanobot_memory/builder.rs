//! The builder in memory, with a scripted model: no service needed.

use std::error::Error as _;
use std::sync::Arc;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory::scope::{ScopeKey, Subject, UserKey};
use nanobot_memory::{AssemblyError, Bot, IsolationMode, Speaker};

#[tokio::test]
async fn a_bot_without_a_model_is_refused_with_the_setters_to_call() {
    let error = Bot::builder().in_memory().build().await.unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, AssemblyError::Incomplete { .. }),
        "{error:?}"
    );
    assert!(
        text.contains(".openai(") && text.contains(".llm("),
        "{text}"
    );
}

#[tokio::test]
async fn a_turn_answers_saves_and_remembers() {
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_text("Hello Ada.")
            .then_text("Bees."),
    );
    let bot = Bot::builder().llm(llm.clone()).build().await.unwrap();
    let me = Speaker::anonymous();
    let first = bot
        .turn(&me, "cli:chat", "I'm Ada; I keep bees.")
        .await
        .unwrap();
    assert_eq!(first.answer, "Hello Ada.");
    let second = bot.turn(&me, "cli:chat", "What do I keep?").await.unwrap();
    assert_eq!(second.answer, "Bees.");
    let replayed = format!("{:?}", llm.requests()[1].messages);
    assert!(replayed.contains("I keep bees") && replayed.contains("Hello Ada."));
    bot.finish().await.unwrap();
    let memory = bot.memory(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let key = nanobot_memory::sessions::SessionKey::new("cli:chat").unwrap();
    let session = memory.sessions.get_or_create(&key).await.unwrap();
    assert_eq!(session.read(|s| s.messages().len()), 4);
}

#[tokio::test]
async fn per_user_isolation_keeps_users_apart_and_fails_closed_for_strangers() {
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_text("noted")
            .then_text("I don't know")
            .then_text("hi"),
    );
    let bot = Bot::builder()
        .llm(llm.clone())
        .isolation(IsolationMode::User)
        .build()
        .await
        .unwrap();
    bot.turn(
        &Speaker::user("telegram:1"),
        "telegram:1",
        "my code is CANARY-1",
    )
    .await
    .unwrap();
    bot.turn(
        &Speaker::user("telegram:2"),
        "telegram:2",
        "what is my code?",
    )
    .await
    .unwrap();
    assert!(!format!("{:?}", llm.requests()[1].messages).contains("CANARY-1"));

    // A message that names no sender gets no memory at all: no prompt of anyone's, and
    // the turn runs without one.
    let stranger = Speaker::anonymous();
    let refused = bot
        .prompt(&stranger, "telegram:9", "hello")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("no sender"), "{refused}");
    bot.turn(&stranger, "telegram:9", "hello").await.unwrap();
    assert!(!format!("{:?}", llm.requests()[2].messages).contains("CANARY-1"));

    // Each user's scope holds its own session only.
    let one = ScopeKey::local(Subject::User(UserKey::new("telegram", "1").unwrap()));
    let sessions = bot
        .memory(&one)
        .await
        .unwrap()
        .sessions
        .list()
        .await
        .unwrap();
    assert_eq!(sessions.len(), 1);
}

#[tokio::test]
async fn a_bad_session_key_is_a_sessions_error_with_its_source() {
    let bot = Bot::builder()
        .llm(Arc::new(ScriptedLlm::new()))
        .build()
        .await
        .unwrap();
    let error = bot
        .turn(&Speaker::anonymous(), "", "hello")
        .await
        .unwrap_err();
    assert!(matches!(error, AssemblyError::Sessions(_)), "{error:?}");
    assert!(error.source().is_some());
}

#[tokio::test]
async fn search_is_offered_where_the_backend_keeps_an_index_and_can_be_turned_off() {
    let on = Bot::builder()
        .llm(Arc::new(ScriptedLlm::new()))
        .build()
        .await
        .unwrap();
    assert!(on.search().is_some());
    let off = Bot::builder()
        .llm(Arc::new(ScriptedLlm::new()))
        .search(false)
        .build()
        .await
        .unwrap();
    assert!(off.search().is_none());
}

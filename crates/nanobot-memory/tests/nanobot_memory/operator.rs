//! What an operator and a chat's commands do through the library: links, erasure, the
//! review queue, and the replies to nanobot's slash commands.

use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory::scope::{ScopeKey, Subject, UserKey};
use nanobot_memory::sessions::SessionKey;
use nanobot_memory::{AssemblyError, Bot, IsolationMode, ScopeCommands, Speaker};

async fn two_users(root: &TempDir) -> Result<Bot, AssemblyError> {
    let bot = Bot::builder()
        .files(root.path().join("ws"))
        .isolation(IsolationMode::User)
        .llm(Arc::new(
            ScriptedLlm::new().then_text("Hi one.").then_text("Hi two."),
        ))
        .build()
        .await?;
    for user in ["telegram:1", "telegram:2"] {
        bot.turn(&Speaker::user(user), user, "Hello.").await?;
    }
    bot.finish().await?;
    Ok(bot)
}

#[tokio::test]
async fn links_erasure_and_their_refusals() {
    let root = TempDir::new("operator-scopes");
    let bot = two_users(&root).await.unwrap();
    let (one, two) = (
        UserKey::parse("telegram:1").unwrap(),
        UserKey::parse("telegram:2").unwrap(),
    );
    let (record, own) = bot.link(two.clone(), one.clone(), "ops").await.unwrap();
    assert_eq!(
        (record.identity.clone(), record.by.as_str()),
        (two.clone(), "ops")
    );
    assert_eq!(
        own.map(|s| s.sessions),
        Some(1),
        "telegram:2's own scope is kept"
    );
    bot.unlink(&two, "ops").await.unwrap();
    let again = bot.unlink(&two, "ops").await.unwrap_err();
    assert!(matches!(again, AssemblyError::NotFound { .. }), "{again}");

    let agent = bot.erase_scope(&Subject::Agent).await.unwrap_err();
    assert!(matches!(agent, AssemblyError::Refused { .. }), "{agent}");
    let erased = bot.erase_scope(&Subject::User(two.clone())).await.unwrap();
    assert!(erased.removed);
    assert_eq!(erased.links, 2, "the link and the unlink record");
    let gone = bot.erase_scope(&Subject::User(two)).await.unwrap_err();
    assert!(matches!(gone, AssemblyError::NotFound { .. }), "{gone}");
    let left = bot.storage().scopes().await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(bot.agent_summary().await.unwrap().sessions, 0);
    assert!(bot.proposals().await.unwrap().is_empty());
    let refused = bot.dismiss_proposals(&[1]).await.unwrap_err();
    assert!(
        refused.to_string().contains("there is no proposal 1"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_scopes_commands_answer_as_nanobot_does() {
    let root = TempDir::new("operator-commands");
    let bot = two_users(&root).await.unwrap();
    let scope = ScopeKey::local(Subject::User(UserKey::parse("telegram:1").unwrap()));
    let memory = bot.memory(&scope).await.unwrap();
    let commands = ScopeCommands::new(bot.agent(), &memory);
    let key = SessionKey::new("telegram:1").unwrap();

    let help = commands.slash(&key, "/help").await.unwrap().unwrap();
    assert_eq!(help, nanobot_memory::commands::HELP);
    let unknown = commands.slash(&key, "/fly").await.unwrap().unwrap();
    assert!(unknown.starts_with("Unknown command /fly."), "{unknown}");
    assert!(commands.slash(&key, "just words").await.is_none());

    let status = commands.status(&key).await.unwrap();
    assert!(
        status.starts_with("Session: telegram:1\nMessages: 2 (0 archived, 2 live)"),
        "{status}"
    );
    assert!(status.ends_with("Next Dream: disabled"), "{status}");
    let listed = commands.sessions_list().await.unwrap();
    assert!(listed.starts_with("telegram:1  2 messages"), "{listed}");
    let shown = commands.session_show(&key).await.unwrap();
    assert!(
        shown.contains("[0] user: Hello.") && shown.contains("[1] assistant: Hi one."),
        "{shown}"
    );
    assert_eq!(
        commands.session_export(&key).await.unwrap().lines().count(),
        2
    );
    let missing = SessionKey::new("telegram:9").unwrap();
    let error = commands.session_show(&missing).await.unwrap_err();
    assert!(matches!(error, AssemblyError::NotFound { .. }), "{error}");
    let history = commands.memory_history(5).await.unwrap();
    assert!(history.starts_with("The journal is empty"), "{history}");
    let files = commands.memory_show().await.unwrap();
    assert!(
        files.contains("## USER.md") && files.ends_with("## skills\n(none)"),
        "{files}"
    );
}

//! The file backend through the builder: the workspace is created, nanobot-ai's format is
//! written, and another bot over the same workspace reads what the first saved.

use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory::{Bot, Durability, FileOptions, Speaker, Storage};

#[tokio::test]
async fn a_files_bot_creates_its_workspace_and_a_second_bot_reads_it() {
    let root = TempDir::new("assembly-files");
    let workspace = root.path().join("new/workspace");
    let first = Bot::builder()
        .files_with(
            &workspace,
            FileOptions::default().durability(Durability::Always),
        )
        .llm(Arc::new(ScriptedLlm::new().then_text("Hi Ada.")))
        .build()
        .await
        .unwrap();
    assert!(matches!(first.storage(), Storage::Files(_)));
    first
        .turn(&Speaker::anonymous(), "cli:chat", "I'm Ada.")
        .await
        .unwrap();
    first.finish().await.unwrap();
    let files: Vec<_> = std::fs::read_dir(workspace.join("sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    // Line 1 is nanobot-ai's metadata record, padded in place for later updates.
    let meta: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(meta["_type"], "metadata", "{text}");
    let roles: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["role"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(roles, ["user", "assistant"], "{text}");

    let llm = Arc::new(ScriptedLlm::new().then_text("You are Ada."));
    let second = Bot::builder()
        .files(&workspace)
        .llm(llm.clone())
        .build()
        .await
        .unwrap();
    second
        .turn(&Speaker::anonymous(), "cli:chat", "Who am I?")
        .await
        .unwrap();
    assert!(format!("{:?}", llm.requests()[0].messages).contains("I'm Ada."));
}

#[tokio::test]
async fn a_workspace_that_cannot_be_created_is_named_in_the_error() {
    let root = TempDir::new("assembly-files-blocked");
    let blocker = root.path().join("file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let error = Bot::builder()
        .files(blocker.join("workspace"))
        .llm(Arc::new(ScriptedLlm::new()))
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("cannot be created"), "{error}");
    assert!(error.to_string().contains("workspace"), "{error}");
}

/// `Storage::scopes` lists each user's scope with the sessions its store holds (a stray
/// file beside them is not a session), and `erase` removes one scope and nothing else.
#[tokio::test]
async fn a_files_bot_lists_and_erases_its_scopes() {
    let root = TempDir::new("assembly-scopes");
    let workspace = root.path().join("ws");
    let bot = Bot::builder()
        .files(&workspace)
        .isolation(nanobot_memory::IsolationMode::User)
        .llm(Arc::new(
            ScriptedLlm::new().then_text("Hi.").then_text("Hello."),
        ))
        .build()
        .await
        .unwrap();
    for (user, session) in [("telegram:1", "telegram:1"), ("telegram:2", "telegram:2")] {
        bot.turn(&Speaker::user(user), session, "Hello.")
            .await
            .unwrap();
    }
    bot.finish().await.unwrap();
    let scopes = bot.storage().scopes().await.unwrap();
    assert_eq!(scopes.len(), 2, "{scopes:?}");
    assert!(scopes.iter().all(|s| s.sessions == 1), "{scopes:?}");
    let first = std::path::PathBuf::from(&scopes[0].location);
    std::fs::write(first.join("sessions").join("notes.jsonl.bak"), "x").unwrap();
    let again = bot
        .storage()
        .scope(&scopes[0].subject)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.sessions, 1, "{again:?}");
    assert!(bot.storage().erase(&scopes[0].subject).await.unwrap());
    let left = bot.storage().scopes().await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].subject, scopes[1].subject);
    // A scope that holds memory but no sessions (imported, or Dream's only) counts none,
    // and listing it creates nothing.
    let second = std::path::PathBuf::from(&left[0].location).join("sessions");
    std::fs::remove_dir_all(&second).unwrap();
    let listed = bot.storage().scopes().await.unwrap();
    assert_eq!(listed[0].sessions, 0, "{listed:?}");
    assert!(!second.exists(), "listing created {}", second.display());
    let in_memory = Bot::builder()
        .in_memory()
        .llm(Arc::new(ScriptedLlm::new()))
        .build()
        .await
        .unwrap();
    let refused = in_memory.storage().scopes().await.unwrap_err();
    assert!(
        refused.to_string().contains("keeps no list of scopes"),
        "{refused}"
    );
}

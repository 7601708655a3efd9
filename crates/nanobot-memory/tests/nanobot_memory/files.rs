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

//! Issue 32, memory that stays true, through the `nanobot` binary on files and on
//! PostgreSQL: two Dream runs against a loopback model (a move from Berlin to Paris, and a
//! repeated allergy), then `memory history`, `memory blame` and the files the prompt reads.

use std::path::Path;
use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_http::testing::{FakeServer, Reply};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{FileJournal, HistoryJournal, NewEntry};
use nanobot_store_postgres::testing::TestSchema;
use serde_json::json;

use super::postgres::{available, pg_env};
use super::{nanobot, text};

fn edit(id: &str, old: &str, new: &str) -> Reply {
    let arguments =
        json!({"path": "memory/MEMORY.md", "old_text": old, "new_text": new}).to_string();
    Reply::json(
        200,
        &json!({
            "id": id, "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "edit_file", "arguments": arguments}}]}}],
        }),
    )
}

fn done() -> Reply {
    Reply::json(
        200,
        &json!({
            "id": "d", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Memory updated."}}],
        }),
    )
}

/// Runs the scenario in `ws` (its MEMORY.md holds the allergy) with the backend `env`
/// names; `journal` is that backend's journal.
async fn knowledge_update(
    ws: &Path,
    journal: Arc<dyn HistoryJournal>,
    env: Vec<(&'static str, String)>,
) {
    let server = FakeServer::start(vec![
        edit(
            "a",
            "- Allergic to peanuts",
            "- Allergic to peanuts\n- Lives in Berlin",
        ),
        done(),
        edit(
            "b",
            "- Lives in Berlin",
            "- Lives in Paris\n\n## Health\n\n- Is allergic to peanuts.",
        ),
        done(),
    ])
    .await;
    let mut env = env;
    env.push(("NANOBOT_BASE_URL", format!("{}/v1", server.url())));
    env.push(("NANOBOT_DREAM_MODE", "tools".to_owned()));
    let run = Arc::new((ws.to_owned(), env));
    let go = |args: &'static [&'static str]| {
        let run = run.clone();
        tokio::task::spawn_blocking(move || {
            let (ws, env) = run.as_ref();
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let out = nanobot(ws, args, &env);
            let said = text(&out, ws);
            assert!(out.status.success(), "{args:?}: {said}");
            said
        })
    };
    let entry = NewEntry::text("- We live in Berlin")
        .from_session("telegram:ada")
        .covering(0, 4);
    journal.append(&[entry]).await.unwrap();
    go(&["dream", "run"]).await.unwrap();
    let entry = NewEntry::text("- We moved to Paris; still allergic to peanuts")
        .from_session("cli:direct")
        .covering(8, 12);
    journal.append(&[entry]).await.unwrap();
    let second = go(&["dream", "run"]).await.unwrap();
    assert!(
        second.contains("Lines not added because memory already says them"),
        "{second}"
    );
    assert!(
        second.contains("\"- Is allergic to peanuts.\" repeats"),
        "{second}"
    );

    let shown = go(&["memory", "show"]).await.unwrap();
    assert!(
        shown.contains("- Lives in Paris") && !shown.contains("Berlin"),
        "{shown}"
    );
    assert_eq!(shown.matches("peanuts").count(), 1, "{shown}");
    assert!(!shown.contains("Source-"), "{shown}");
    assert!(
        !shown.contains("## Health"),
        "the section left empty goes too: {shown}"
    );
    let history = go(&["memory", "history", "Berlin"]).await.unwrap();
    assert!(
        history.contains("memory/MEMORY.md: - Lives in Berlin")
            && history.contains("replaced by: - Lives in Paris")
            && history.contains("session telegram:ada messages 0-4"),
        "{history}"
    );
    let blame = go(&["memory", "blame", "memory/MEMORY.md"]).await.unwrap();
    assert!(
        blame.contains("session cli:direct messages 8-12"),
        "{blame}"
    );
    assert!(blame.contains("written outside Dream"), "{blame}");
    let entries = go(&["memory", "history", "5"]).await.unwrap();
    assert!(entries.contains("We moved to Paris"), "{entries}");
    server.requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knowledge_update_on_files_keeps_the_old_fact_in_history_only() {
    let ws = TempDir::new("cli-facts");
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(
        ws.path().join("memory/MEMORY.md"),
        "# Memory\n\n- Allergic to peanuts\n",
    )
    .unwrap();
    let journal = Arc::new(FileJournal::open(ws.path()).unwrap());
    knowledge_update(ws.path(), journal, Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knowledge_update_on_postgres_keeps_the_old_fact_in_history_only() {
    let Some(url) = available("a_knowledge_update_on_postgres_keeps_the_old_fact_in_history_only")
    else {
        return;
    };
    let ws = TempDir::new("pg-facts");
    let store = TestSchema::new(&url).store().await;
    let agent = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    nanobot_memory_store::MemoryDocuments::write(
        &agent,
        nanobot_memory_store::Document::Memory,
        "# Memory\n\n- Allergic to peanuts\n",
        nanobot_memory_store::Expected::Any,
    )
    .await
    .unwrap();
    let env = pg_env(&url, &store);
    knowledge_update(ws.path(), Arc::new(agent), env).await;
}

//! The program on PostgreSQL (issue 15): the isolation suite on the app's backend, four
//! `nanobot` processes sharing one database and session, a document written by one
//! instance in the next prompt of another, and a nanobot-ai workspace imported and exported
//! back unchanged. Each test works in a schema of its own in `NANOBOT_TEST_PG_URL`'s
//! database; without it they print that they skip (and fail under `CI=true`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use nanobot_bench_workload::testing::{TempDir, peer_python, run_peer};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{Document, Expected, MemoryDocuments};
use nanobot_session_store::{SessionKey, SessionStore};
use nanobot_store_postgres::PgStore;
use nanobot_store_postgres::testing::{TestSchema, url};
use serde_json::{Value, json};

use super::{nanobot, text};

pub(crate) fn available(test: &str) -> Option<String> {
    let found = url();
    if found.is_none() {
        nanobot_bench_workload::testing::skip(
            test,
            "NANOBOT_TEST_PG_URL is not set (`cargo xtask ci` sets it to the local PostgreSQL)",
        );
    }
    found
}

/// The environment that points `nanobot` at `store`'s schema.
pub(crate) fn pg_env(url: &str, store: &PgStore) -> Vec<(&'static str, String)> {
    vec![
        ("NANOBOT_STORAGE", "postgres".to_owned()),
        ("NANOBOT_DATABASE_URL", url.to_owned()),
        ("NANOBOT_DATABASE_SCHEMA", store.schema().name().to_owned()),
    ]
}

fn run(workspace: &Path, args: &[&str], envs: &[(&str, String)]) -> std::process::Output {
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    nanobot(workspace, args, &envs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_isolation_suite_passes_on_postgres() {
    let Some(url) = available("the_isolation_suite_passes_on_postgres") else {
        return;
    };
    let ws = TempDir::new("pg-isolation");
    let store = TestSchema::new(&url).store().await;
    let backend = nanobot_memory::PgBackend::open(
        store,
        Some(ws.path()),
        Arc::new(nanobot_llm_port::SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    )
    .await
    .unwrap();
    nanobot_turn::conformance::isolation_suite(Arc::new(backend)).await;
}

/// Acceptance 8: four processes run 25 turns each on one session of one database: turns
/// never interleave, nothing is lost or doubled; then a document written by another
/// instance is in the next turn's prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_database_and_see_each_others_documents() {
    let Some(url) = available("four_processes_share_one_database") else {
        return;
    };
    let ws = TempDir::new("pg-four-processes");
    let store = TestSchema::new(&url).store().await;
    let prompts: Arc<Mutex<Vec<String>>> = Arc::default();
    let server = super::racing::echo_model(prompts.clone()).await;
    let model = format!("{}/v1", server.url());
    let mut env = pg_env(&url, &store);
    env.extend([
        ("NANOBOT_BASE_URL", model.clone()),
        ("NANOBOT_CONTEXT_WINDOW", "2048".to_owned()),
        ("NANOBOT_MAX_OUTPUT_TOKENS", "64".to_owned()),
    ]);
    let failures = super::racing::race_turns(ws.path(), &env).await;
    assert!(failures.is_empty(), "runs failed:\n{}", failures.join("\n"));

    let agent = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let loaded = agent
        .load(&SessionKey::new("cli:shared").unwrap())
        .await
        .unwrap()
        .unwrap();
    super::racing::assert_serialised(&loaded.session);

    // Another instance (this test's own pool) changes USER.md; the next turn's prompt,
    // in a new process, shows it.
    agent
        .write(
            Document::User,
            "# User\n\n- Prefers the canary-7c1e fact\n",
            Expected::Any,
        )
        .await
        .unwrap();
    prompts.lock().unwrap().clear();
    let out = run(
        ws.path(),
        &[
            "--session",
            "cli:shared",
            "run",
            "-m",
            "turn after the edit",
        ],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    let prompts = prompts.lock().unwrap();
    assert!(
        prompts.iter().any(|p| p.contains("canary-7c1e")),
        "the other instance's USER.md is not in the prompt: {prompts:?}"
    );
}

/// The message lines (not metadata or provider records) of a session file, as JSON.
/// Issue 17 on PostgreSQL: the search corpus imported into a database, then `nanobot memory
/// search` finds the labelled sources (history, memory files, sessions, Chinese) from the
/// scope's index in the database, `--json` and text; `memory reindex` empties and feeds it
/// again with the same top five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_search_works_on_postgres() {
    let Some(url) = available("memory_search_works_on_postgres") else {
        return;
    };
    let ws = super::search::workspace("pg-search");
    let store = TestSchema::new(&url).store().await;
    let env = pg_env(&url, &store);
    let ws_arg = ws.path().display().to_string();
    let out = run(ws.path(), &["import", &ws_arg], &env);
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    let sources = |query: &str| -> Vec<String> {
        let out = run(ws.path(), &["memory", "search", query, "--json"], &env);
        assert!(out.status.success(), "{query}: {}", text(&out, ws.path()));
        let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        hits.iter()
            .map(|h| h["source"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut first = Vec::new();
    for (query, relevant) in super::search::QUERIES {
        let found = sources(query);
        assert!(
            found.iter().any(|s| s == relevant),
            "{query}: {relevant} not in {found:?}"
        );
        first.push(found);
    }
    assert!(
        !ws.path().join(".nanobot-rs/index.sqlite").exists(),
        "no side index file on PostgreSQL"
    );
    let reindex = run(ws.path(), &["memory", "reindex"], &env);
    assert!(reindex.status.success(), "{}", text(&reindex, ws.path()));
    let said = text(&reindex, ws.path());
    assert!(
        said.contains("300 history entries, 3 memory files"),
        "{said}"
    );
    let again: Vec<Vec<String>> = super::search::QUERIES
        .iter()
        .map(|(query, _)| sources(query))
        .collect();
    assert_eq!(again, first);
}

/// Search by meaning on PostgreSQL: the scope's `PgIndex` keeps the vectors
/// (`search::search_by_meaning_checks`, with the real embedding model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_search_finds_by_meaning_on_postgres() {
    let test = "memory_search_finds_by_meaning_on_postgres";
    let (Some(url), Some(embeddings)) = (available(test), super::search::embeddings_url(test))
    else {
        return;
    };
    let ws = super::search::meaning_workspace("pg-search-meaning");
    let store = TestSchema::new(&url).store().await;
    let env = pg_env(&url, &store);
    let ws_arg = ws.path().display().to_string();
    let out = run(ws.path(), &["import", &ws_arg], &env);
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    // Nothing is read from the files from now on: the journal is in the database.
    std::fs::remove_file(ws.path().join("memory/history.jsonl")).unwrap();
    tokio::task::spawn_blocking(move || {
        super::search::search_by_meaning_checks(ws.path(), &embeddings, &env);
    })
    .await
    .unwrap();
}

fn message_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("_type").is_none())
        .collect()
}

fn history_lines(workspace: &Path) -> Vec<Value> {
    std::fs::read_to_string(workspace.join("memory/history.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

/// The one session file under `root` (nanobot-ai's namespace directory).
fn session_file(root: &Path) -> std::path::PathBuf {
    let mut found = Vec::new();
    for namespace in std::fs::read_dir(root).unwrap().flatten() {
        if namespace.path().is_dir() {
            for file in std::fs::read_dir(namespace.path()).unwrap().flatten() {
                if file.path().extension().is_some_and(|x| x == "jsonl") {
                    found.push(file.path());
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// Acceptance 2: a workspace nanobot-ai 0.3.5 wrote (a NUL escape, a duplicate key, a 1 MB
/// tool output), imported into PostgreSQL and exported back, has the same message lines
/// and history lines (as JSON values), and nanobot-ai opens the export; importing and
/// exporting again copies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nanobot_ai_workspace_round_trips_through_postgres() {
    let Some(url) = available("a_nanobot_ai_workspace_round_trips_through_postgres") else {
        return;
    };
    let Some(python) = peer_python("a_nanobot_ai_workspace_round_trips_through_postgres") else {
        return;
    };
    let root = TempDir::new("pg-round-trip");
    let (source, source_sessions) = (root.path().join("ws"), root.path().join("sessions"));
    let (copy, copy_sessions) = (root.path().join("copy"), root.path().join("copy-sessions"));
    std::fs::create_dir_all(&source).unwrap();
    let write = r##"
import json, os, sys
from pathlib import Path
ws, root = Path(sys.argv[1]), Path(sys.argv[2])
os.environ["HOME"] = str(ws.parent)
from nanobot.session.manager import SessionManager
from nanobot.agent.memory import MemoryStore
m = SessionManager(ws, sessions_root=root)
s = m.get_or_create("telegram:42")
s.add_message("user", "hello \u0000 with a NUL")
s.add_message("assistant", "", tool_calls=[{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}])
s.add_message("tool", "x" * 1_000_000, tool_call_id="c1", name="read")
s.add_message("assistant", "done, 日本 🚀")
s.metadata["title"] = "Round trip"
m.save(s)
path = m._get_session_path("telegram:42")
with open(path, "a", encoding="utf-8") as f:
    f.write('{"role": "user", "content": "first", "content": "second duplicate", "timestamp": "2026-12-01T09:00:00"}\n')
store = MemoryStore(ws)
for i in range(5):
    store.append_history(f"- fact {i} \u00e9", session_key="telegram:42")
store.set_last_dream_cursor(2)
(ws / "USER.md").write_text("# User\n\n- From nanobot-ai\n", encoding="utf-8")
print(json.dumps({"path": str(path)}))
"##;
    run_peer(
        &python,
        write,
        &[source.as_os_str(), source_sessions.as_os_str()],
        None,
    );
    let store = TestSchema::new(&url).store().await;
    let env = pg_env(&url, &store);
    let source_arg = source.display().to_string();
    let sessions_arg = source_sessions.display().to_string();
    let out = run(
        &source,
        &["import", &source_arg, "--sessions-root", &sessions_arg],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out, &source));
    // Two memory versions in the store (as Dream would record them): the export replays
    // them as commits of the workspace's memory repository.
    let agent = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    for (n, text) in ["# User\n- one\n", "# User\n- one\n- two\n"]
        .iter()
        .enumerate()
    {
        let files: nanobot_memory_store::Snapshot =
            [("USER.md".to_owned(), (*text).to_owned())].into();
        nanobot_memory_store::MemoryVersions::commit(
            &agent,
            &format!("dream: version {n}"),
            &files,
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    }
    let copy_arg = copy.display().to_string();
    let copy_sessions_arg = copy_sessions.display().to_string();
    let out = run(
        &source,
        &["export", &copy_arg, "--sessions-root", &copy_sessions_arg],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out, &source));

    let original = message_lines(&session_file(&source_sessions));
    let exported = message_lines(&session_file(&copy_sessions));
    assert_eq!(original.len(), 5);
    assert_eq!(
        exported, original,
        "message lines differ after the round trip"
    );
    assert_eq!(original[0]["content"], "hello \u{0} with a NUL");
    assert_eq!(original[2]["content"].as_str().unwrap().len(), 1_000_000);
    assert_eq!(original[4]["content"], "second duplicate");
    assert_eq!(history_lines(&copy), history_lines(&source));
    assert_eq!(
        std::fs::read_to_string(copy.join(".nanobot/workspace-id"))
            .unwrap()
            .trim(),
        std::fs::read_to_string(source.join(".nanobot/workspace-id"))
            .unwrap()
            .trim(),
        "the workspace id is kept"
    );
    assert_eq!(
        std::fs::read_to_string(copy.join("memory/.dream_cursor"))
            .unwrap()
            .trim(),
        "2"
    );
    let git = nanobot_memory_store::GitVersions::open(&copy).unwrap();
    let log = nanobot_memory_store::MemoryVersions::log(&git, 10)
        .await
        .unwrap();
    assert_eq!(
        log.iter().map(|v| v.message.as_str()).collect::<Vec<_>>(),
        ["dream: version 1", "dream: version 0"]
    );

    // nanobot-ai opens the export.
    let read = r##"
import json, os, sys
from pathlib import Path
ws, root = Path(sys.argv[1]), Path(sys.argv[2])
os.environ["HOME"] = str(ws.parent)
from nanobot.session.manager import SessionManager
from nanobot.agent.memory import MemoryStore
m = SessionManager(ws, sessions_root=root)
s = m.get_or_create("telegram:42")
store = MemoryStore(ws)
print(json.dumps({"messages": len(s.messages), "title": s.metadata.get("title"),
  "unread": [e["cursor"] for e in store.read_unprocessed_history(store.get_last_dream_cursor())],
  "user": (ws / "USER.md").read_text(encoding="utf-8")}))
"##;
    let seen = run_peer(
        &python,
        read,
        &[copy.as_os_str(), copy_sessions.as_os_str()],
        None,
    );
    assert_eq!(seen["messages"], 5);
    assert_eq!(seen["title"], "Round trip");
    assert_eq!(seen["unread"], json!([3, 4, 5]));
    assert_eq!(seen["user"], "# User\n\n- From nanobot-ai\n");

    // Idempotent: both again copy nothing.
    let out = run(
        &source,
        &["import", &source_arg, "--sessions-root", &sessions_arg],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out, &source));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "0 session(s), 0 journal entries, 0 document(s), 0 version(s), 0 link(s) copied"
        ),
        "{}",
        text(&out, &source)
    );
    let out = run(
        &source,
        &["export", &copy_arg, "--sessions-root", &copy_sessions_arg],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out, &source));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "0 session(s), 0 journal entries, 0 document(s), 0 version(s), 0 link(s) copied"
        ),
        "{}",
        text(&out, &source)
    );
    assert_eq!(message_lines(&session_file(&copy_sessions)), original);
}

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
use super::{command, nanobot, text};

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

/// A store in a schema of its own, and its agent scope, whose `MEMORY.md` is `memory`.
async fn agent_with_memory(
    url: &str,
    memory: &str,
) -> (
    nanobot_store_postgres::PgStore,
    nanobot_store_postgres::PgScope,
) {
    let store = TestSchema::new(url).store().await;
    let agent = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let document = nanobot_memory_store::Document::Memory;
    let any = nanobot_memory_store::Expected::Any;
    nanobot_memory_store::MemoryDocuments::write(&agent, document, memory, any)
        .await
        .unwrap();
    (store, agent)
}

fn answer(text: &str) -> Reply {
    Reply::json(
        200,
        &json!({
            "id": "t", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
        }),
    )
}

const CANARY: &str = "zebraquartz7781";

/// `nanobot` with `args` in `ws`, `input` on its stdin.
fn run_with_input(
    ws: &Path,
    env: &[(&'static str, String)],
    args: &[&str],
    input: &str,
) -> (bool, String) {
    use std::io::Write as _;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut child = command(ws, args, &env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), text(&out, ws))
}

/// Forgets a conversation holding a canary in `ws` with the backend `env` names: the
/// session, its journal entries, the line only it taught and its search rows go; a fact
/// another conversation also taught stays; then the history is erased too. `scan` says
/// where the canary is still found (with the memory versions, or without them).
async fn forget_a_conversation<F>(
    ws: &Path,
    journal: Arc<dyn HistoryJournal>,
    env: Vec<(&'static str, String)>,
    scan: F,
) where
    F: AsyncFn(bool) -> Vec<String>,
{
    let server = FakeServer::start(vec![
        answer("Noted."),
        edit(
            "a",
            "- Project X",
            &format!("- Project X\n- Door code is {CANARY}\n- Allergic to peanuts"),
        ),
        done(),
    ])
    .await;
    let mut env = env;
    env.push(("NANOBOT_BASE_URL", format!("{}/v1", server.url())));
    env.push(("NANOBOT_DREAM_MODE", "tools".to_owned()));
    let shared = Arc::new((ws.to_owned(), env));
    let go = |args: Vec<String>, input: &'static str| {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_with_input(&shared.0, &shared.1, &args, input)
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let secret = format!("The door code is {CANARY}, and I am allergic to peanuts.");
    let (ok, said) = go(args(&["--session", "telegram:7", "run", "-m", &secret]), "")
        .await
        .unwrap();
    assert!(ok, "{said}");
    let entries = [
        NewEntry::text(&secret)
            .from_session("telegram:7")
            .covering(0, 2),
        NewEntry::text("- Ada said again she is allergic to peanuts")
            .from_session("cli:direct")
            .covering(0, 2),
    ];
    journal.append(&entries).await.unwrap();
    let (ok, said) = go(args(&["dream", "run"]), "").await.unwrap();
    assert!(ok, "{said}");
    let (ok, said) = go(args(&["memory", "search", CANARY]), "").await.unwrap();
    assert!(ok && said.contains(CANARY), "indexed before: {said}");
    assert!(!scan(false).await.is_empty(), "the canary is there before");

    // Without --yes and no answer: nothing; answered no: nothing.
    let forget = args(&["memory", "forget", "--session", "telegram:7"]);
    let (ok, said) = go(forget.clone(), "").await.unwrap();
    assert!(!ok && said.contains("nothing was removed"), "{said}");
    assert!(
        said.contains(&format!("memory/MEMORY.md: - Door code is {CANARY}")),
        "lists it: {said}"
    );
    assert!(said.contains("Kept, as another conversation also taught them:\n  memory/MEMORY.md: - Allergic to peanuts"), "{said}");
    let (ok, said) = go(forget.clone(), "n\n").await.unwrap();
    assert!(ok && said.contains("Nothing was removed."), "{said}");
    let (ok, said) = go(forget.clone(), "y\n").await.unwrap();
    assert!(
        ok && said.contains("Forgetting session telegram:7 removed"),
        "{said}"
    );

    assert_eq!(
        scan(false).await,
        Vec::<String>::new(),
        "the canary outside the versions"
    );
    assert!(!scan(true).await.is_empty(), "the versions still hold it");
    let (ok, shown) = go(args(&["memory", "show"]), "").await.unwrap();
    assert!(
        ok && shown.contains("- Allergic to peanuts") && !shown.contains(CANARY),
        "{shown}"
    );
    let (ok, said) = go(args(&["memory", "search", CANARY]), "").await.unwrap();
    assert!(
        ok && !said.contains(CANARY.get(..8).unwrap_or_default())
            || said.contains("Nothing in memory matches"),
        "{said}"
    );
    let (ok, said) = go(args(&["sessions", "list"]), "").await.unwrap();
    assert!(ok && !said.contains("telegram:7"), "{said}");
    let left = journal.read_since(0, None).await.unwrap();
    assert_eq!(
        left.len(),
        1,
        "the other conversation's entry stays: {left:?}"
    );
    let (ok, blame) = go(args(&["memory", "blame", "memory/MEMORY.md"]), "")
        .await
        .unwrap();
    assert!(ok && blame.contains("session cli:direct"), "{blame}");
    // Run again: nothing of it is left, and it says so.
    let (ok, said) = go(forget.clone(), "y\n").await.unwrap();
    assert!(
        !ok && said.contains("Nothing of session telegram:7 is in memory"),
        "{said}"
    );

    // The real erasure: said before it is done, then no version holds the canary.
    let mut erase = forget;
    erase.push("--erase-history".into());
    erase.push("--yes".into());
    let (ok, said) = go(erase, "").await.unwrap();
    assert!(
        ok && said.contains("memory versions rewritten without the removed lines"),
        "{said}"
    );
    assert!(said.contains("version ids change"), "{said}");
    assert_eq!(
        scan(true).await,
        Vec::<String>::new(),
        "the canary in the versions"
    );
    let (ok, said) = go(args(&["memory", "history", "door"]), "").await.unwrap();
    assert!(ok && said.contains("No memory line"), "{said}");
    let (ok, blame) = go(args(&["memory", "blame", "memory/MEMORY.md"]), "")
        .await
        .unwrap();
    assert!(
        ok && blame.contains("session cli:direct"),
        "provenance survives: {blame}"
    );
}

/// Where the versions repository under `root` holds the canary: every object git finds
/// in it, reachable or not.
fn git_objects_with_canary(root: &Path) -> Vec<String> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(root.join(".nanobot/memory.git"))
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = String::from_utf8_lossy(&out.stdout);
    all.lines()
        .filter(|l| l.contains(CANARY))
        .map(str::to_owned)
        .collect()
}

/// Where a file under `root` (the versions repository left out) holds the canary.
fn files_with_canary(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.ends_with(".nanobot/memory.git") {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path)
                .unwrap_or_default()
                .windows(CANARY.len())
                .any(|w| w == CANARY.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_a_conversation_on_files_leaves_no_trace_outside_the_versions() {
    let ws = TempDir::new("cli-forget");
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(
        ws.path().join("memory/MEMORY.md"),
        "# Memory\n\n- Project X\n",
    )
    .unwrap();
    let journal = Arc::new(FileJournal::open(ws.path()).unwrap());
    let root = ws.path().to_owned();
    let scan = async |versions: bool| {
        let mut found = files_with_canary(&root);
        if versions {
            found.extend(git_objects_with_canary(&root));
        }
        found
    };
    forget_a_conversation(ws.path(), journal, Vec::new(), scan).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_a_conversation_on_postgres_leaves_no_trace_outside_the_versions() {
    let Some(url) =
        available("forgetting_a_conversation_on_postgres_leaves_no_trace_outside_the_versions")
    else {
        return;
    };
    let ws = TempDir::new("pg-forget");
    let (store, agent) = agent_with_memory(&url, "# Memory\n\n- Project X\n").await;
    let env = pg_env(&url, &store);
    let schema = store.schema().name().to_owned();
    let pool = store.pool().clone();
    let scan = async |versions: bool| {
        let mut found = pg_rows_with_canary(&pool, &schema, versions).await;
        found.extend(files_with_canary(ws.path()));
        found
    };
    forget_a_conversation(ws.path(), Arc::new(agent), env, scan).await;
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
    let found = go(&["memory", "search", "Paris", "--source", "memory"])
        .await
        .unwrap();
    assert!(
        found.contains("learned from entry 2, session cli:direct messages 8-12"),
        "a curated line's hit names its source: {found}"
    );
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
    let (store, agent) = agent_with_memory(&url, "# Memory\n\n- Allergic to peanuts\n").await;
    let env = pg_env(&url, &store);
    knowledge_update(ws.path(), Arc::new(agent), env).await;
}

/// A turn running on the session (another process holds its turn lock): forgetting it is
/// refused with nothing removed, and works once the turn has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_turn_running_is_not_forgotten_under_it() {
    use nanobot_session_store::{FileSessionStore, SessionKey, SessionStore};
    let ws = TempDir::new("cli-forget-busy");
    let server = FakeServer::start(vec![answer("Hello.")]).await;
    let env = vec![("NANOBOT_BASE_URL", format!("{}/v1", server.url()))];
    let path = ws.path().to_owned();
    let run = move |args: &'static [&'static str]| {
        let (path, env) = (path.clone(), env.clone());
        tokio::task::spawn_blocking(move || run_with_input(&path, &env, args, ""))
    };
    let (ok, said) = run(&["--session", "telegram:9", "run", "-m", "hi"])
        .await
        .unwrap();
    assert!(ok, "{said}");
    let store = FileSessionStore::open_workspace(ws.path(), Default::default()).unwrap();
    let key = SessionKey::new("telegram:9").unwrap();
    let turn = store.try_lock_turn(&key).await.unwrap().unwrap();
    let forget: &[&str] = &["memory", "forget", "--session", "telegram:9", "--yes"];
    let (ok, said) = run(forget).await.unwrap();
    assert!(
        !ok && said.contains("has a turn running; nothing was removed"),
        "{said}"
    );
    assert!(store.load(&key).await.unwrap().is_some());
    turn.release().await;
    let (ok, said) = run(forget).await.unwrap();
    assert!(
        ok && said.contains("the session and its 2 messages"),
        "{said}"
    );
    assert!(store.load(&key).await.unwrap().is_none());
}

/// Forgets the first turn of a conversation by message range: its messages, the journal
/// entry made from them and the line only it taught go; the second turn, its entry and
/// its line stay, and the session still opens in nanobot-ai's format.
async fn forget_some_messages<F>(
    ws: &Path,
    journal: Arc<dyn HistoryJournal>,
    env: Vec<(&'static str, String)>,
    scan: F,
) where
    F: AsyncFn() -> Vec<String>,
{
    let server = FakeServer::start(vec![
        answer("Noted."),
        answer("Tea it is."),
        edit(
            "a",
            "- Project X",
            &format!("- Project X\n- Locker code is {CANARY}\n- Likes green tea"),
        ),
        done(),
    ])
    .await;
    let mut env = env;
    env.push(("NANOBOT_BASE_URL", format!("{}/v1", server.url())));
    env.push(("NANOBOT_DREAM_MODE", "tools".to_owned()));
    let shared = Arc::new((ws.to_owned(), env));
    let go = |args: &[&str]| {
        let shared = shared.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_with_input(&shared.0, &shared.1, &args, "")
        })
    };
    let first = format!("My locker code is {CANARY}.");
    for text in [first.as_str(), "I like green tea."] {
        let (ok, said) = go(&["--session", "telegram:7", "run", "-m", text])
            .await
            .unwrap();
        assert!(ok, "{said}");
    }
    let locker = format!("- Locker code is {CANARY}");
    let entries = [
        NewEntry::text(&locker)
            .from_session("telegram:7")
            .covering(0, 2),
        NewEntry::text("- Likes green tea")
            .from_session("telegram:7")
            .covering(2, 4),
    ];
    journal.append(&entries).await.unwrap();
    let (ok, said) = go(&["dream", "run"]).await.unwrap();
    assert!(ok, "{said}");
    assert!(!scan().await.is_empty(), "the canary is there before");

    // Message 1 is the first turn's answer: the whole turn, 0-1, goes.
    let forget = ["memory", "forget", "--session", "telegram:7", "--messages"];
    let (ok, said) = go(&[&forget[..], &["1", "--yes"]].concat()).await.unwrap();
    assert!(
        ok && said.contains("Forgetting messages 1-1 of session telegram:7 removed"),
        "{said}"
    );
    assert!(
        said.contains("messages 0-1 of the session (2, whole turns)"),
        "{said}"
    );
    assert!(
        said.contains(&format!("memory/MEMORY.md: - Locker code is {CANARY}")),
        "{said}"
    );
    assert_eq!(
        scan().await,
        Vec::<String>::new(),
        "the canary outside the versions"
    );
    let (ok, shown) = go(&["memory", "show"]).await.unwrap();
    assert!(ok && shown.contains("- Likes green tea"), "{shown}");
    let (ok, session) = go(&["sessions", "show", "telegram:7"]).await.unwrap();
    assert!(
        ok && session.contains("[0] user: I like green tea.")
            && session.contains("[1] assistant: Tea it is."),
        "{session}"
    );
    let left = journal.read_since(0, None).await.unwrap();
    assert_eq!(left.len(), 1, "the second turn's entry stays: {left:?}");
    assert_eq!(left[0].content, "- Likes green tea");

    // A range past the end, or backwards, removes nothing and says why.
    let (ok, said) = go(&[&forget[..], &["7-9", "--yes"]].concat())
        .await
        .unwrap();
    assert!(!ok && said.contains("has no messages 7-9"), "{said}");
    let (ok, said) = go(&[&forget[..], &["3-1", "--yes"]].concat())
        .await
        .unwrap();
    assert!(
        !ok && said.contains("the first message comes after the last"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_some_messages_on_files_takes_what_came_of_them() {
    let ws = TempDir::new("cli-forget-range");
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    std::fs::write(
        ws.path().join("memory/MEMORY.md"),
        "# Memory\n\n- Project X\n",
    )
    .unwrap();
    let journal = Arc::new(FileJournal::open(ws.path()).unwrap());
    let root = ws.path().to_owned();
    forget_some_messages(ws.path(), journal, Vec::new(), async || {
        files_with_canary(&root)
    })
    .await;
    // nanobot-ai's reader still opens the rewritten session: one JSON object per line.
    let sessions = std::fs::read_dir(ws.path().join("sessions")).unwrap();
    let jsonl = sessions
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|e| e == "jsonl"));
    for file in jsonl {
        for line in std::fs::read_to_string(file.path()).unwrap().lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_some_messages_on_postgres_takes_what_came_of_them() {
    let Some(url) = available("forgetting_some_messages_on_postgres_takes_what_came_of_them")
    else {
        return;
    };
    let ws = TempDir::new("pg-forget-range");
    let (store, agent) = agent_with_memory(&url, "# Memory\n\n- Project X\n").await;
    let env = pg_env(&url, &store);
    let schema = store.schema().name().to_owned();
    let pool = store.pool().clone();
    let scan = async || pg_rows_with_canary(&pool, &schema, false).await;
    forget_some_messages(ws.path(), Arc::new(agent), env, scan).await;
}

/// The tables of `schema` with rows holding the canary (`versions`: that table too).
async fn pg_rows_with_canary(pool: &sqlx::PgPool, schema: &str, versions: bool) -> Vec<String> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut found = Vec::new();
    for table in tables.into_iter().filter(|t| versions || t != "versions") {
        let sql = format!(
            "SELECT count(*) FROM \"{schema}\".\"{table}\" t WHERE t::text LIKE '%' || $1 || '%'"
        );
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(CANARY)
            .fetch_one(pool)
            .await
            .unwrap();
        if n > 0 {
            found.push(format!("{table}: {n} rows"));
        }
    }
    found
}

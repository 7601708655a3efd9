//! Scopes through the program: per-user memory on files, the group rule, fail closed,
//! linking, erasure, and the isolation suite over the file backend.

use std::path::Path;
use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_http::testing::{FakeServer, Reply};
use serde_json::json;

use crate::{nanobot, text};

const ALICE: &str = "CANARY-ALICE-5d1e";
const BOB: &str = "CANARY-BOB-0b7c";

/// Every file under `dir` whose bytes hold `needle`.
pub(crate) fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                hits.push(path.display().to_string());
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_keep_apart_share_when_linked_and_erase_whole() {
    let ws = TempDir::new("cli-scopes");
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "OK."}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 300, "completion_tokens": 1}});
    let server = FakeServer::start(vec![Reply::json(200, &answer); 16]).await;
    let url = format!("{}/v1", server.url());
    let path = ws.path().to_owned();
    let run = move |args: Vec<String>| {
        let (path, url) = (path.clone(), url.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                nanobot(
                    &path,
                    &args,
                    &[
                        ("NANOBOT_BASE_URL", url.as_str()),
                        ("NANOBOT_ISOLATION", "user"),
                    ],
                )
            })
            .await
            .unwrap()
        }
    };
    let args = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let sent = |n: usize| String::from_utf8_lossy(&server.requests()[n].body).into_owned();

    // Two users, the same session key, each with a secret.
    let said = format!("My secret word is {ALICE}.");
    let out = run(args(&[
        "--user",
        "telegram:1",
        "--session",
        "telegram:1",
        "run",
        "-m",
        &said,
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    let said = format!("My secret word is {BOB}.");
    let out = run(args(&[
        "--user",
        "telegram:2",
        "--session",
        "telegram:1",
        "run",
        "-m",
        &said,
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(
        !sent(1).contains(ALICE),
        "Bob's prompt shows Alice's secret"
    );
    let out = run(args(&[
        "--user",
        "telegram:1",
        "--session",
        "telegram:1",
        "run",
        "-m",
        "What is my secret word?",
    ]))
    .await;
    assert!(out.status.success());
    assert!(
        sent(2).contains(ALICE) && !sent(2).contains(BOB),
        "{}",
        sent(2)
    );

    // A group chat has its own memory and no user's.
    let out = run(args(&[
        "--user",
        "telegram:1",
        "--chat",
        "-100",
        "--group",
        "--session",
        "telegram:-100",
        "run",
        "-m",
        "Hello group",
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(
        !sent(3).contains(ALICE) && !sent(3).contains(BOB),
        "{}",
        sent(3)
    );

    // No sender: the turn runs without memory, says so, and leaves nothing behind.
    let before = files_holding(ws.path(), "Who am I?");
    let out = run(args(&["--session", "telegram:1", "run", "-m", "Who am I?"])).await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(!sent(4).contains(ALICE) && !sent(4).contains(BOB));
    assert!(
        text(&out, ws.path()).contains("without memory"),
        "{}",
        text(&out, ws.path())
    );
    assert_eq!(
        files_holding(ws.path(), "Who am I?"),
        before,
        "a memoryless turn was saved"
    );

    let listed = run(args(&["scopes", "list"])).await;
    let listed = text(&listed, ws.path());
    assert!(
        listed.contains("user:telegram:1")
            && listed.contains("user:telegram:2")
            && listed.contains("chat:telegram:-100")
            && listed.contains("Links: none"),
        "{listed}"
    );

    // Linking: discord:9 shares Alice's memory, until unlinked.
    let out = run(args(&[
        "scopes",
        "link",
        "telegram:1",
        "discord:9",
        "--by",
        "tester",
    ]))
    .await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(text(&out, ws.path()).contains("discord:9 → telegram:1 (by tester"));
    let out = run(args(&[
        "--user",
        "discord:9",
        "--session",
        "telegram:1",
        "run",
        "-m",
        "And now?",
    ]))
    .await;
    assert!(out.status.success());
    assert!(
        sent(5).contains(ALICE),
        "a linked identity sees the shared memory"
    );
    let shown = run(args(&["scopes", "show", "telegram:1"])).await;
    assert!(
        text(&shown, ws.path()).contains("Shared with: discord:9"),
        "{}",
        text(&shown, ws.path())
    );
    let out = run(args(&["scopes", "unlink", "discord:9", "--by", "tester"])).await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    let out = run(args(&[
        "--user",
        "discord:9",
        "--session",
        "telegram:1",
        "run",
        "-m",
        "And now?",
    ]))
    .await;
    assert!(out.status.success());
    assert!(
        !sent(6).contains(ALICE),
        "an unlinked identity still sees the shared memory"
    );

    // Erasure: one directory and the links; afterwards not a byte of the canary is left.
    assert!(!files_holding(ws.path(), ALICE).is_empty());
    let refused = run(args(&["scopes", "delete", "telegram:1"])).await;
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        text(&refused, ws.path())
    );
    let out = run(args(&["scopes", "delete", "telegram:1", "--yes"])).await;
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(
        text(&out, ws.path()).contains("Erased user:telegram:1"),
        "{}",
        text(&out, ws.path())
    );
    assert_eq!(files_holding(ws.path(), ALICE), Vec::<String>::new());
    assert!(
        files_holding(ws.path(), "telegram:1\"")
            .iter()
            .all(|f| !f.ends_with("links.jsonl"))
    );
    assert!(
        !files_holding(ws.path(), BOB).is_empty(),
        "Bob's memory is untouched"
    );
    let listed = run(args(&["scopes", "list"])).await;
    assert!(!text(&listed, ws.path()).contains("user:telegram:1 "));
}

#[tokio::test]
async fn the_file_backend_keeps_scopes_apart() {
    let ws = TempDir::new("files-isolation");
    let dir = ws.path().to_owned();
    let env = move |name: &str| (name == "NANOBOT_WORKSPACE").then(|| dir.display().to_string());
    let config = nanobot_app::Config::load(None, &env).unwrap();
    std::fs::create_dir_all(&config.workspace).unwrap();
    let backend = nanobot_app::bot::file_backend(
        &config,
        Arc::new(nanobot_llm_port::SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    )
    .unwrap();
    nanobot_turn::conformance::isolation_suite(Arc::new(backend)).await;
    // Everything of the two users stays under scopes/.
    for canary in ["CANARY-ALICE-7f3a", "CANARY-BOB-91c2"] {
        let hits = files_holding(ws.path(), canary);
        assert!(!hits.is_empty());
        assert!(
            hits.iter().all(|h| h.contains("/scopes/")),
            "{canary} outside scopes/: {hits:?}"
        );
    }
    // Erasing one user removes everything of theirs (sessions, journal, documents, versions)
    // and nothing of the other's.
    let dirs = nanobot_memory_scope::ScopeDirs::new(ws.path());
    let alice = nanobot_memory_scope::Subject::parse("user:telegram:1").unwrap();
    assert!(dirs.delete(&alice).unwrap());
    assert_eq!(
        files_holding(ws.path(), "CANARY-ALICE-7f3a"),
        Vec::<String>::new()
    );
    assert!(!files_holding(ws.path(), "CANARY-BOB-91c2").is_empty());
}

/// Issue 14, acceptance 6 (the count; the time is the `scopes` bench's): a Dream tick over
/// many scopes asks the model for the scopes with unread history only.
#[tokio::test]
async fn a_dream_tick_calls_the_model_for_scopes_with_work_only() {
    let ws = TempDir::new("dream-tick");
    let due = crate::fixtures::seed_scopes(ws.path(), 60, 3);
    let dir = ws.path().to_owned();
    let env = move |name: &str| (name == "NANOBOT_WORKSPACE").then(|| dir.display().to_string());
    let config = nanobot_app::Config::load(None, &env).unwrap();
    let llm = Arc::new(
        nanobot_llm_port::testing::ScriptedLlm::new()
            .then_text("Nothing to change.")
            .then_text("Nothing to change.")
            .then_text("Nothing to change."),
    );
    let bot = nanobot_app::Bot::open(config, llm.clone(), Arc::new(nanobot_llm_port::SystemClock))
        .await
        .unwrap();
    let results = bot
        .agent
        .dream_tick(nanobot_dream::Trigger::Scheduled)
        .await
        .unwrap();
    let ran: Vec<_> = results
        .iter()
        .map(|(scope, _)| scope.subject.clone())
        .collect();
    assert_eq!(ran, due);
    assert_eq!(llm.call_count(), 3);
    for (scope, result) in results {
        let report = result.unwrap();
        assert_eq!(
            report.status,
            nanobot_dream::RunStatus::Completed,
            "{scope}"
        );
        assert_eq!(
            report.batch,
            Some((4, 5, 2)),
            "{scope}: the unread entries only"
        );
    }
    // Now every scope is read: the next tick asks nothing.
    assert!(
        bot.agent
            .dream_tick(nanobot_dream::Trigger::Scheduled)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(llm.call_count(), 3);
}

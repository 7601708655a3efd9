//! The files bot, run as its user would: two users against a loopback model, each one's
//! memory kept apart on files, and the workspace nanobot-ai's format.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_http::testing::FakeServer;

fn run(workspace: &Path, model: &str, user: &str, text: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_files-bot"))
        .arg(workspace)
        .args([user, text])
        .env("OPENAI_BASE_URL", model)
        .output()
        .expect("files-bot runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Every file under `dir` whose text holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle)) {
            found.push(path.display().to_string());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_talk_and_each_keeps_a_memory_of_their_own() {
    let prompts = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = prompts.clone();
    let model = FakeServer::chat_model(Arc::new(move |text: &str| {
        seen.lock().unwrap().push(text.to_owned());
        format!("You said: {text}")
    }))
    .await;
    let url = format!("{}/v1", model.url());
    let ws = TempDir::new("files-bot");
    let (dir, url2) = (ws.path().to_owned(), url.clone());
    let answers = tokio::task::spawn_blocking(move || {
        [
            run(&dir, &url2, "ada", "I keep bees (ADA-CANARY)."),
            run(&dir, &url2, "bob", "I sail boats."),
        ]
    })
    .await
    .unwrap();
    assert_eq!(answers[0].trim(), "You said: I keep bees (ADA-CANARY).");
    assert_eq!(answers[1].trim(), "You said: I sail boats.");

    // Each user's session is on disk, in a scope of its own, as JSONL nanobot-ai reads.
    let ada = files_holding(ws.path(), "ADA-CANARY");
    assert_eq!(ada.len(), 1, "{ada:?}");
    assert!(
        ada[0].contains("/scopes/") && ada[0].ends_with(".jsonl"),
        "{ada:?}"
    );
    let first_line = std::fs::read_to_string(&ada[0]).unwrap();
    let meta: serde_json::Value = serde_json::from_str(first_line.lines().next().unwrap()).unwrap();
    assert_eq!(meta["_type"], "metadata", "{first_line}");

    // Bob's turn never saw Ada's words.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[1].json().to_string().contains("ADA-CANARY"));
    assert!(requests[0].json().to_string().contains("ADA-CANARY"));

    // A second turn of Ada's remembers the first: her session is replayed.
    let (dir, url3) = (ws.path().to_owned(), url.clone());
    tokio::task::spawn_blocking(move || run(&dir, &url3, "ada", "What do I keep?"))
        .await
        .unwrap();
    let third = model.requests()[2].json().to_string();
    assert!(third.contains("ADA-CANARY") && !third.contains("sail boats"));
}

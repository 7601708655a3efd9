//! Issue 14, acceptance 1: the default isolation mode changes nothing. A scripted
//! conversation over two sessions (with `/new`, which archives into the journal) leaves a
//! workspace whose tree and file bytes are snapshotted; the snapshot was made by the code
//! before scopes existed, and this run must match it byte for byte, with one deliberate
//! departure taken out before hashing: the archive entries of `history.jsonl` now also
//! name the digest of the messages they archive (`"message_digest"`, beside
//! `"message_range"`; nanobot-ai ignores both), which the test checks is there.

use std::path::Path;
use std::sync::Arc;

use chrono::TimeZone;
use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{LlmClient, TextSink, TokioClock};
use sha2::{Digest, Sha256};

/// Every file under `root`: its relative path, size and the SHA-256 of its bytes (with the
/// workspace's own path replaced, as the temporary directory's name differs per run).
fn tree(root: &Path) -> String {
    let mut rows = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                rows.push(format!("{relative}/"));
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mut text = String::from_utf8_lossy(&bytes)
                    .replace(&root.display().to_string(), "[workspace]");
                if relative.ends_with("history.jsonl") {
                    text = without_digests(&text);
                }
                let digest = Sha256::digest(text.as_bytes());
                let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                rows.push(format!("{relative}  {} bytes  {hex}", text.len()));
            }
        }
    }
    rows.sort();
    rows.join("\n")
}

/// `text` without the `"message_digest": "<16 hex>"` fields, each of which must follow a
/// `"message_range"`.
fn without_digests(text: &str) -> String {
    let field = ", \"message_digest\": \"";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(field) {
        assert!(
            rest[..at].ends_with(']'),
            "a digest follows the message range"
        );
        let after = &rest[at + field.len()..];
        let hex: String = after.chars().take(16).collect();
        assert!(hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(&after[16..17], "\"");
        out.push_str(&rest[..at]);
        rest = &after[17..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(start_paused = true)]
async fn the_default_mode_leaves_the_workspace_it_left_before_scopes() {
    let ws = TempDir::new("golden-default");
    let dir = ws.path().to_owned();
    let env = move |name: &str| match name {
        "NANOBOT_WORKSPACE" => Some(dir.display().to_string()),
        "NANOBOT_DREAM_ENABLED" => Some("false".into()),
        _ => None,
    };
    let config = nanobot_app::Config::load(None, &env).unwrap();
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_text("Hello Ada.")
            .then_text("Berlin is a fine city.")
            .then_text("Hello Bob.")
            .then_text("Peanuts are noted.")
            .then_text("- [permanent] Ada lives in Berlin and likes short answers.")
            .then_text("Welcome back."),
    );
    let start = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
    let bot = nanobot_app::Bot::open(
        config,
        llm.clone() as Arc<dyn LlmClient>,
        Arc::new(TokioClock::starting_at(start)),
    )
    .await
    .unwrap();
    let silent: TextSink = Arc::new(|_: &str| {});
    let ada = nanobot_session_store::SessionKey::new("telegram:ada").unwrap();
    let bob = nanobot_session_store::SessionKey::new("discord:bob").unwrap();
    bot.turn(&ada, "Hi, I am Ada.", &silent).await.unwrap();
    bot.turn(&ada, "I live in Berlin.", &silent).await.unwrap();
    bot.turn(&bob, "Hi, I am Bob.", &silent).await.unwrap();
    bot.turn(&bob, "I am allergic to peanuts.", &silent)
        .await
        .unwrap();
    bot.new_session(&ada).await.unwrap();
    bot.turn(&ada, "I am back.", &silent).await.unwrap();
    bot.finish().await.unwrap();
    assert_eq!(llm.remaining(), 0, "every scripted answer was used");
    let journal = std::fs::read_to_string(ws.path().join("memory/history.jsonl")).unwrap();
    assert!(
        journal.contains("\"message_digest\": \""),
        "archive entries name their messages' digest: {journal}"
    );
    insta::assert_snapshot!("default_mode_workspace", tree(ws.path()));
}

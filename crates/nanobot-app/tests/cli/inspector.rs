//! Acceptance 2, 3 and 5 of issue 35: `nanobot serve`'s memory inspector in a real headless
//! Chromium (Debian's package, driven by Playwright for Python; `cargo xtask ci` installs
//! both and names them in `NANOBOT_TEST_CHROMIUM` and `NANOBOT_TEST_BROWSER_PYTHON`): sign
//! in, open a session, search, approve one proposal and reject another; then the memory
//! file, the version recorded and the metrics counters are checked here. The browser's
//! screenshots go to `target/inspector-screenshots/` (the README's come from there).

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use nanobot_bench_workload::testing::{TempDir, required_env};
use serde_json::{Value, json};

use crate::racing::echo_model;
use crate::serve::{free_port, http, spawn_serve, wait_until_up};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_in_a_real_browser_reviews_proposals_and_the_numbers_follow() {
    let test = "the_inspector_in_a_real_browser_reviews_proposals_and_the_numbers_follow";
    let how = "`cargo xtask ci` installs Debian's chromium and crates/nanobot-app/tests/cli/browser/requirements.txt and sets it";
    let Some(python) = required_env("NANOBOT_TEST_BROWSER_PYTHON", test, how) else {
        return;
    };
    let Some(chromium) = required_env("NANOBOT_TEST_CHROMIUM", test, how) else {
        return;
    };
    let ws = TempDir::new("cli-inspector");
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    std::fs::write(
        ws.path().join("nanobot.toml"),
        "[[serve.keys]]\nname = \"ops\"\nsecret_env = \"TEST_OPS_KEY\"\noperator = true\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    let proposals = json!([
        {"at": "2026-12-01T10:00:00Z", "path": "SOUL.md", "before": null,
         "after": "# Soul\n\nI answer in two sentences at most.\n", "entries": [1, 2],
         "reason": "SOUL.md: +3 lines\n\nThe user asked twice for shorter answers.", "shared": true},
        {"at": "2026-12-01T10:05:00Z", "path": "skills/shouting/SKILL.md", "before": null,
         "after": "---\nname: shouting\ndescription: Answer in capitals\n---\n\nALWAYS SHOUT.\n",
         "entries": [3, 3], "reason": "skills/shouting/SKILL.md: +6 lines", "shared": true}
    ]);
    std::fs::write(
        ws.path().join("memory/.dream_proposals.json"),
        proposals.to_string(),
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("inspector-screenshots");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/browser/inspector.py");
    let (seen, metrics, log, status) = tokio::task::spawn_blocking(move || {
        let mut child = spawn_serve(
            &path,
            &["--listen", &listen],
            &[("NANOBOT_BASE_URL", &url), ("TEST_OPS_KEY", "sk-ops-inspector")],
        );
        wait_until_up(port, &mut child);
        let key = ("authorization", "Bearer sk-ops-inspector");
        let chat = json!({"model": "nanobot", "messages": [{"role": "user", "content": "Ada lives in Berlin."}]});
        let (code, body) = http(port, "POST", "/v1/chat/completions", &[key, ("x-session-id", "berlin")], Some(&chat));
        assert_eq!(code, 200, "{body}");
        let out = Command::new(&python)
            .arg(&script)
            .arg(format!("http://127.0.0.1:{port}"))
            .arg("sk-ops-inspector")
            .arg("user:api:ops")
            .arg(&chromium)
            .arg(&shots)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
        let (_, metrics) = http(port, "GET", "/metrics", &[], None);
        let log = Command::new(env!("CARGO_BIN_EXE_nanobot"))
            .arg("--workspace")
            .arg(&path)
            .args(["memory", "log"])
            .env("HOME", &path)
            .output()
            .unwrap();
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let status = child.wait().unwrap();
        (seen, metrics, String::from_utf8_lossy(&log.stdout).to_string(), status)
    })
    .await
    .unwrap();
    assert_eq!(seen["login_shown"], true, "{seen}");
    assert!(
        seen["session_messages"].as_u64().unwrap_or(0) >= 2,
        "{seen}"
    );
    let hits = seen["search_hits"].to_string();
    assert!(
        hits.contains("Berlin"),
        "the search found the session's words: {seen}"
    );
    assert_eq!(seen["proposals_before"], 2, "{seen}");
    assert_eq!(seen["proposals_after"], 0, "{seen}");
    assert!(
        seen["decisions"]
            .to_string()
            .contains("too loud for this agent"),
        "{seen}"
    );
    assert!(
        seen["versions"].to_string().contains("approved proposal"),
        "{seen}"
    );
    assert_eq!(
        seen["console_errors"],
        json!([]),
        "no CSP violation or script error: {seen}"
    );
    let soul = std::fs::read_to_string(ws.path().join("SOUL.md")).unwrap();
    assert_eq!(soul, "# Soul\n\nI answer in two sentences at most.\n");
    assert!(
        !ws.path().join("skills/shouting").exists(),
        "the rejected skill was not written"
    );
    assert!(
        log.contains("approved proposal"),
        "the version is recorded: {log}"
    );
    for line in [
        r#"nanobot_dream_reviews_total{decision="approved"} 1"#,
        r#"nanobot_dream_reviews_total{decision="rejected"} 1"#,
        r#"nanobot_turns_total{outcome="ok"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(status.success(), "{status}");
}

/// One GET with a cookie: the status, the `Set-Cookie` value (if any) and the body.
fn get(port: u16, path: &str, cookie: Option<&str>) -> (u16, Option<String>, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("cookie: {c}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n{cookie}\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let set = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned);
    (status, set, body.to_owned())
}

/// The inspector's search by meaning uses the configured embedder (the real
/// all-MiniLM-L6-v2 the CI serves): a query that shares no word with the entry it means
/// finds nothing by words and finds it by meaning. A server without keys signs its local
/// operator in with a cookie on the first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_searches_by_meaning_with_the_configured_embedder() {
    let test = "the_inspector_searches_by_meaning_with_the_configured_embedder";
    let Some(embeddings) = crate::search::embeddings_url(test) else {
        return;
    };
    let ws = crate::search::meaning_workspace("cli-inspector-meaning");
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let (words, meaning, status) = tokio::task::spawn_blocking(move || {
        let mut child = spawn_serve(
            &path,
            &["--listen", &listen],
            &[
                ("NANOBOT_BASE_URL", &url),
                ("NANOBOT_EMBEDDINGS_URL", &embeddings),
                ("NANOBOT_EMBEDDINGS_MODEL", "all-MiniLM-L6-v2"),
                ("NANOBOT_EMBEDDINGS_DIMENSIONS", "384"),
            ],
        );
        wait_until_up(port, &mut child);
        let (code, cookie, _) = get(port, "/ui", None);
        assert_eq!(code, 303, "the local operator is signed in by a redirect");
        let cookie = cookie.expect("a session cookie");
        let query = "/ui/search?scope=agent&q=feline%20companion&mode=";
        let words = get(port, &format!("{query}words"), Some(&cookie));
        let meaning = get(port, &format!("{query}meaning"), Some(&cookie));
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        (words, meaning, child.wait().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(words.0, 200, "{}", words.2);
    assert!(
        words.2.contains("Nothing in memory matches."),
        "{}",
        words.2
    );
    assert_eq!(meaning.0, 200, "{}", meaning.2);
    let first = meaning.2.split("<li>").nth(1).unwrap_or_default();
    assert!(first.contains("kitten called Miso"), "{}", meaning.2);
    assert!(status.success(), "{status}");
}

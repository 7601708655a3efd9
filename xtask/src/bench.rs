//! `cargo xtask bench`: the Python peer and our benchmarks back to back in one job, each
//! figure reported as a ratio (peer median / ours, so above 1 means we are faster).
//!
//! The peer is nanobot-ai run by `../shared/bench/bench_nanobot.py` on the same generated
//! inputs (`bench-workload` reproduces its digests). Comparing only figures taken in the same
//! job is the rule of `perf-anchors.md`: this machine's speed drifts between runs.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// One figure compared between the peer and us.
struct Comparison {
    /// What is measured, for the report.
    label: &'static str,
    /// The peer workload that measures it (`--only` name) and the path to its median.
    peer_workload: &'static str,
    peer_path: &'static [&'static str],
    /// Our bench target (`package/bench`) and the path to our median.
    ours_bench: (&'static str, &'static str),
    ours_path: &'static [&'static str],
    /// Paths to a count both sides report, which must agree (same work done).
    check: Option<(&'static [&'static str], &'static [&'static str])>,
}

const COMPARISONS: &[Comparison] = &[Comparison {
    label: "W5 estimate_message_tokens over 10,000 messages (cl100k)",
    peer_workload: "token_estimate",
    peer_path: &["estimate_message_tokens_all", "time_s", "median"],
    ours_bench: ("llm-port", "token_count"),
    ours_path: &["per_message_cl100k", "median_s"],
    check: Some((
        &["estimate_message_tokens_all", "tokens"],
        &["per_message_cl100k", "tokens"],
    )),
}];

/// Runs every comparison whose peer workload is in `only` (all when empty).
pub(crate) fn run(root: &Path, only: &[String]) -> Result<(), String> {
    let chosen: Vec<&Comparison> = COMPARISONS
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.peer_workload))
        .collect();
    if chosen.is_empty() {
        let known: Vec<&str> = COMPARISONS.iter().map(|c| c.peer_workload).collect();
        return Err(format!("no benchmark matches; known: {}", known.join(", ")));
    }
    let out_dir = target_dir(root).join("bench-report");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;

    let mut workloads: Vec<&str> = chosen.iter().map(|c| c.peer_workload).collect();
    workloads.dedup();
    let peer = run_peer(root, &workloads, &out_dir)?;

    let mut benches: Vec<(&str, &str)> = chosen.iter().map(|c| c.ours_bench).collect();
    benches.dedup();
    let mut ours = serde_json::Map::new();
    for (package, bench) in benches {
        ours.insert(
            format!("{package}/{bench}"),
            run_ours(root, package, bench)?,
        );
    }

    let mut rows = Vec::new();
    println!(
        "\n{:<60} {:>12} {:>12} {:>8}",
        "figure", "peer", "ours", "ratio"
    );
    for c in &chosen {
        let peer_w = &peer["workloads"][c.peer_workload];
        let ours_b = &ours[&format!("{}/{}", c.ours_bench.0, c.ours_bench.1)];
        let peer_s = number(peer_w, c.peer_path)?;
        let ours_s = number(ours_b, c.ours_path)?;
        if let Some((peer_count, ours_count)) = c.check {
            let (p, o) = (number(peer_w, peer_count)?, number(ours_b, ours_count)?);
            if p != o {
                return Err(format!(
                    "{}: the peer counted {p} and we counted {o}; not the same work",
                    c.label
                ));
            }
        }
        let ratio = peer_s / ours_s;
        println!(
            "{:<60} {:>10.2}ms {:>10.2}ms {:>7.1}x",
            c.label,
            peer_s * 1e3,
            ours_s * 1e3,
            ratio
        );
        rows.push(json!({"figure": c.label, "peer_s": peer_s, "ours_s": ours_s, "ratio": ratio}));
    }
    let report = json!({"rows": rows, "peer": peer, "ours": ours});
    let path = out_dir.join("report.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    )
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("\nfull report: {}", path.display());
    Ok(())
}

fn number(value: &Value, path: &[&str]) -> Result<f64, String> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("the report has no number at {}", path.join(".")))
}

fn target_dir(root: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn shared_dir(root: &Path) -> PathBuf {
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

/// Runs one of our bench binaries; it prints one JSON object on stdout.
fn run_ours(root: &Path, package: &str, bench: &str) -> Result<Value, String> {
    println!("==> ours: cargo bench -p {package} --bench {bench}");
    let output = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args([
            "bench", "--quiet", "--locked", "-p", package, "--bench", bench,
        ])
        .current_dir(root)
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

//! `cargo xtask campaign --short | --long SECONDS [--seed N] [--report FILE]`: the
//! reliability campaign (`docs/RELIABILITY.md`). It builds `nanobot-campaign`, which runs
//! the families that drive the real stores (kill loop, racing processes, model-based
//! sequences), then runs every fuzz target, and merges both into one JSON report
//! (`target/campaign/report.json` unless `--report` says otherwise). It fails when any
//! figure that must be zero is not, and says which, with the seed that replays it.
//!
//! `--short` is what `cargo xtask ci` runs (a few minutes); `--long SECONDS` shares the
//! budget out and never does less than the campaign promises (1,000 kills, 20,000 model
//! sequences, 10 million executions per fuzz target).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::fuzz::{self, FuzzBudget};

/// Options of one campaign run.
struct Options {
    long: Option<u64>,
    seed: u64,
    report: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        long: None,
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1),
        report: None,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--short" => options.long = None,
            "--long" => {
                let text = value()?;
                options.long = Some(
                    text.parse()
                        .map_err(|_| format!("--long {text:?} is not a number of seconds"))?,
                );
            }
            "--seed" => {
                let text = value()?;
                options.seed = text.parse().map_err(|_| format!("--seed {text:?}"))?;
            }
            "--report" => options.report = Some(PathBuf::from(value()?)),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: cargo xtask campaign \
                     [--short | --long SECONDS] [--seed N] [--report FILE]"
                ));
            }
        }
    }
    Ok(options)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let started = Instant::now();
    let profile = if options.long.is_some() {
        "release"
    } else {
        "dev"
    };
    crate::status(
        Command::new(crate::cargo())
            .args([
                "build",
                "--locked",
                "-p",
                "nanobot-campaign",
                "--profile",
                profile,
            ])
            .current_dir(root),
        "building nanobot-campaign",
    )?;
    let target = target_dir(root);
    let binary = target
        .join(if profile == "dev" { "debug" } else { "release" })
        .join("nanobot-campaign");
    let work = target.join("campaign");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let partial = work.join("stores.json");
    let _ = std::fs::remove_file(&partial);
    let mut command = Command::new(&binary);
    command
        .arg("run")
        .args(["--seed", &options.seed.to_string()])
        .arg("--report")
        .arg(&partial)
        .arg("--scratch")
        .arg(work.join("scratch"));
    match options.long {
        // The stores' families take about two thirds of a long run; fuzzing the rest.
        Some(seconds) => command.args(["--long", &(seconds * 2 / 3).to_string()]),
        None => command.arg("--short"),
    };
    println!("$ {command:?}");
    let stores_ok = command
        .status()
        .map_err(|e| format!("could not run {}: {e}", binary.display()))?
        .success();
    let text = std::fs::read_to_string(&partial).map_err(|e| {
        format!(
            "nanobot-campaign wrote no report ({}): {e}",
            partial.display()
        )
    })?;
    let mut report: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", partial.display()))?;

    let budget = match options.long {
        Some(seconds) => FuzzBudget::Long {
            // Two targets at a time: a third of the budget for the fuzz family.
            seconds_per_target: (seconds * 2 / 3 / fuzz::TARGETS.len() as u64).max(60),
            runs: 10_000_000,
        },
        None => FuzzBudget::Seconds(15),
    };
    let fuzz_started = Instant::now();
    let fuzzed = fuzz::run_all(root, budget)?;
    let mut broken: Vec<Value> = report["broken"].as_array().cloned().unwrap_or_default();
    let fuzz_family = match fuzzed {
        Some(targets) => {
            let crashes: u64 = targets.iter().map(|t| t.crashes).sum();
            let below_target = options.long.map_or(0, |_| {
                targets.iter().filter(|t| t.executions < 10_000_000).count() as u64
            });
            if crashes > 0 {
                broken.push(json!(format!("fuzz.crashes = {crashes}")));
            }
            if below_target > 0 {
                broken.push(json!(format!(
                    "fuzz.targets_below_10m_executions = {below_target}"
                )));
            }
            json!({
                "seconds": fuzz_started.elapsed().as_secs(),
                "figures": {
                    "targets": targets.iter().map(|t| (t.name.to_owned(), t.to_json())).collect::<serde_json::Map<_, _>>(),
                    "sanitizer": budget.sanitizer(),
                },
                "must_be_zero": {"crashes": crashes, "targets_below_10m_executions": below_target},
                "failures": targets.iter().filter(|t| t.crashes > 0).map(|t| format!("{}: a crash input is in fuzz/artifacts/{}/", t.name, t.name)).collect::<Vec<_>>(),
            })
        }
        None => json!({"skipped": "cargo-fuzz is not installed (cargo install cargo-fuzz)"}),
    };
    report["families"]["fuzz"] = fuzz_family;
    report["broken"] = Value::Array(broken.clone());
    report["seconds"] = json!(started.elapsed().as_secs());
    report["commit"] = json!(git_commit(root));

    let destination = options
        .report
        .clone()
        .unwrap_or_else(|| work.join("report.json"));
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&destination, text + "\n")
        .map_err(|e| format!("{}: {e}", destination.display()))?;
    println!("\ncampaign report: {}", destination.display());
    if broken.is_empty() && stores_ok {
        println!(
            "campaign: every must-be-zero figure is zero ({:.0?})",
            started.elapsed()
        );
        Ok(())
    } else {
        Err(format!(
            "the campaign found problems: {} (a fuzz crash's input is in fuzz/artifacts/; \
             the stores' families replay with `cargo xtask campaign --{} --seed {}`)",
            broken
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            if options.long.is_some() {
                "long N"
            } else {
                "short"
            },
            options.seed
        ))
    }
}

fn git_commit(root: &Path) -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

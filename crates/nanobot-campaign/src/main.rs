//! `nanobot-campaign`: the reliability campaign's families that run against the real stores
//! (kill loops, racing processes, model-based sequences), writing one JSON report.
//! `cargo xtask campaign --short|--long SECONDS` builds and runs it, adds the fuzz family and
//! fails on any figure that must be zero. See `docs/RELIABILITY.md`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod kill;
mod model;
mod pg;
mod pg_net;
mod pg_restart;
mod power;
mod racing;
mod report;
mod rng;
mod sim;
mod sweep;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use report::Family;
use serde_json::{Map, json};

/// How much of each family one run does.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) mode: &'static str,
    /// The first seed; each iteration derives its own from it.
    pub(crate) seed: u64,
    /// Kills at least, and for at least this long.
    pub(crate) kills: usize,
    pub(crate) kill_time: Duration,
    /// Racing runs (2, 3, 4 writers in turn) and how long each lasts.
    pub(crate) race_runs: usize,
    pub(crate) race_time: Duration,
    /// Power loss: workloads per durability level, and crash points per workload.
    pub(crate) power_workloads: u64,
    pub(crate) power_points: u64,
    /// I/O-error sweep: every `sweep_stride`-th operation failed (1: every operation, with
    /// each fault).
    pub(crate) sweep_stride: u64,
    /// Model-based sequences per store, and the longest sequence.
    pub(crate) sequences: u32,
    pub(crate) max_steps: usize,
    /// Simulation seeds, or the one seed to replay.
    pub(crate) sim_seeds: u64,
    pub(crate) replay: Option<u64>,
    /// PostgreSQL chaos: turns at least, and for at least this long.
    pub(crate) pg_turns: u64,
    pub(crate) pg_time: Duration,
    /// Network faults under the PostgreSQL store: for this long.
    pub(crate) pg_net_time: Duration,
    /// Server crashes (immediate stops and starts) of the local PostgreSQL.
    pub(crate) pg_restarts: u64,
    /// Where the campaign works (a fresh directory under it per family).
    pub(crate) scratch: PathBuf,
}

impl Plan {
    fn short(seed: u64, scratch: PathBuf) -> Self {
        Plan {
            mode: "short",
            seed,
            kills: 150,
            kill_time: Duration::ZERO,
            race_runs: 3,
            race_time: Duration::from_secs(4),
            power_workloads: 2,
            power_points: 60,
            sweep_stride: 5,
            sequences: 256,
            max_steps: 50,
            sim_seeds: 200,
            replay: None,
            pg_turns: 1_000,
            pg_time: Duration::ZERO,
            pg_net_time: Duration::from_secs(16),
            pg_restarts: 10,
            scratch,
        }
    }

    /// A long run of about `budget`: a share of it per family, and never less than the
    /// counts the campaign promises (1,000 kills, 20,000 sequences).
    fn long(seed: u64, scratch: PathBuf, budget: Duration) -> Self {
        Plan {
            mode: "long",
            seed,
            kills: 1_000,
            kill_time: budget.mul_f64(0.4),
            race_runs: 6,
            race_time: budget.mul_f64(0.2 / 6.0).max(Duration::from_secs(10)),
            power_workloads: 12,
            power_points: 300,
            sweep_stride: 1,
            sequences: 10_000,
            max_steps: 50,
            sim_seeds: 100_000,
            replay: None,
            pg_turns: 1_000,
            pg_time: budget.mul_f64(0.2).max(Duration::from_secs(600)),
            pg_net_time: budget.mul_f64(0.05).max(Duration::from_secs(180)),
            pg_restarts: 10,
            scratch,
        }
    }
}

/// In the order they run; the server crash last, since it takes the server down.
const FAMILIES: [&str; 9] = [
    "kill_loop",
    "racing",
    "power_loss",
    "io_sweep",
    "model_based",
    "simulation",
    "postgres_chaos",
    "postgres_network",
    "postgres_restart",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("child") => match child(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("nanobot-campaign child: {message}");
                ExitCode::FAILURE
            }
        },
        Some("run") => match run(&args[1..]) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(message) => {
                eprintln!("nanobot-campaign: {message}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!(
                "usage: nanobot-campaign run [--short | --long SECONDS] [--seed N] \
                 [--family NAME]... [--replay SEED] [--report FILE] [--scratch DIR]\n\
                 families: {}",
                FAMILIES.join(", ")
            );
            ExitCode::from(2)
        }
    }
}

/// A runtime on this thread (the stores' families and their children).
pub(crate) fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("no runtime: {e}"))
}

/// A runtime on two worker threads (the PostgreSQL families: work and chaos at once).
pub(crate) fn two_threads() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("no runtime: {e}"))
}

fn child(args: &[String]) -> Result<(), String> {
    match args {
        [role, dir, durability, seed] if role == "kill-writer" => {
            let seed = seed.parse().map_err(|_| format!("bad seed {seed:?}"))?;
            kill::writer(PathBuf::from(dir), durability, seed)
        }
        [role, dir, id, millis] if role == "race-writer" => {
            let id = id.parse().map_err(|_| format!("bad writer id {id:?}"))?;
            let millis = millis.parse().map_err(|_| format!("bad time {millis:?}"))?;
            racing::writer(PathBuf::from(dir), id, Duration::from_millis(millis))
        }
        _ => Err(format!("unknown child role {args:?}")),
    }
}

/// Runs the chosen families; `Ok(false)` when a must-be-zero figure is not.
fn run(args: &[String]) -> Result<bool, String> {
    let mut budget = None;
    let mut seed = None;
    let mut report_path = None;
    let mut scratch = None;
    let mut only = Vec::new();
    let mut replay = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--short" => budget = None,
            "--long" => {
                let text = value("--long")?;
                let seconds: u64 = text
                    .parse()
                    .map_err(|_| format!("--long {text:?} is not a number of seconds"))?;
                budget = Some(Duration::from_secs(seconds));
            }
            "--seed" => {
                let text = value("--seed")?;
                seed = Some(text.parse().map_err(|_| format!("--seed {text:?}"))?);
            }
            "--replay" => {
                let text = value("--replay")?;
                replay = Some(text.parse().map_err(|_| format!("--replay {text:?}"))?);
            }
            "--report" => report_path = Some(PathBuf::from(value("--report")?)),
            "--scratch" => scratch = Some(PathBuf::from(value("--scratch")?)),
            "--family" => {
                let name = value("--family")?;
                if !FAMILIES.contains(&name.as_str()) {
                    return Err(format!("unknown family {name:?} (one of {FAMILIES:?})"));
                }
                only.push(name);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let scratch = scratch.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("nanobot-campaign-{}", std::process::id()))
    });
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let mut plan = match budget {
        None => Plan::short(seed, scratch.clone()),
        Some(budget) => Plan::long(seed, scratch.clone(), budget),
    };
    plan.replay = replay;
    println!(
        "campaign ({}), seed {seed}; replay with: nanobot-campaign run --{} --seed {seed}",
        plan.mode,
        if budget.is_some() { "long N" } else { "short" }
    );

    let started = Instant::now();
    let mut families = Map::new();
    let mut broken = Vec::new();
    for name in FAMILIES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        println!("\n== {name}");
        let family_started = Instant::now();
        let family: Family = match name {
            "kill_loop" => kill::run(&plan),
            "racing" => racing::run(&plan),
            "power_loss" => power::run(&plan),
            "io_sweep" => sweep::run(&plan),
            "model_based" => model::run(&plan),
            "simulation" => sim::run(&plan),
            "postgres_chaos" => pg::run(&plan),
            "postgres_network" => pg_net::run(&plan),
            _ => pg_restart::run(&plan),
        };
        let seconds = family_started.elapsed().as_secs_f64();
        let json = family.to_json(seconds);
        println!(
            "{}",
            serde_json::to_string_pretty(&json["figures"]).unwrap_or_default()
        );
        for problem in family.broken() {
            broken.push(format!("{name}.{problem}"));
        }
        for failure in &family.failures {
            println!("  failure: {failure}");
        }
        families.insert(name.to_owned(), json);
    }
    let report = json!({
        "mode": plan.mode,
        "seed": seed,
        "seconds": started.elapsed().as_secs(),
        "families": families,
        "broken": broken,
    });
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    if let Some(path) = report_path {
        std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("\nreport: {}", path.display());
    }
    if broken.is_empty() {
        let _ = std::fs::remove_dir_all(&scratch);
        println!("\ncampaign: every must-be-zero figure is zero");
        Ok(true)
    } else {
        println!(
            "\ncampaign FAILED: {} (work kept in {})",
            broken.join(", "),
            scratch.display()
        );
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    //! Each family detects what it is there to detect: with one rule of the stores switched
    //! off, the family that guards it fails.
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn plan(label: &str) -> Plan {
        let scratch = std::env::temp_dir().join(format!(
            "nanobot-campaign-test-{label}-{}",
            std::process::id()
        ));
        let mut plan = Plan::short(7, scratch);
        plan.sequences = 64;
        plan.sim_seeds = 100;
        plan
    }

    #[test]
    fn the_model_based_family_notices_line_1_written_past_its_bytes() {
        let plan = plan("line1");
        let healthy = model::run(&plan);
        assert!(healthy.broken().is_empty(), "{:?}", healthy.failures);
        let broken = model::run_with(&plan, Some(nanobot_session_store::BrokenRule::Line1Overrun));
        assert_eq!(broken.broken(), ["failures = 1"], "{:?}", broken.failures);
        let _ = std::fs::remove_dir_all(&plan.scratch);
    }

    #[test]
    fn the_power_loss_family_notices_a_skipped_directory_fsync() {
        let mut plan = plan("dirsync");
        plan.power_points = 30;
        let healthy = power::run(&plan);
        assert!(healthy.broken().is_empty(), "{:?}", healthy.failures);
        let broken = power::run_with(&plan, Some(nanobot_session_store::BrokenRule::SkipDirSync));
        assert!(
            broken.broken().iter().any(|b| b.starts_with("violations")),
            "the skipped directory fsync went unnoticed"
        );
        assert!(
            broken
                .failures
                .iter()
                .any(|f| f.contains("the session is gone") && f.contains("acknowledged")),
            "{:?}",
            broken.failures
        );
        let _ = std::fs::remove_dir_all(&plan.scratch);
    }

    #[test]
    fn the_simulation_notices_a_dream_commit_whose_fence_is_not_checked() {
        let plan = plan("fence");
        let broken = sim::run_with(&plan, Some(nanobot_memory_store::BrokenRule::LeaseFence));
        assert!(
            broken.failures.iter().any(|f| f.contains("both committed")),
            "{:?}",
            broken.failures
        );
    }

    #[test]
    fn the_simulation_notices_a_pointer_moved_before_its_journal_entry() {
        let plan = plan("pointer");
        let healthy = sim::run(&plan);
        assert!(healthy.broken().is_empty(), "{:?}", healthy.failures);
        let broken = sim::run_with(
            &plan,
            Some(nanobot_memory_store::BrokenRule::PointerBeforeJournal),
        );
        assert!(
            !broken.broken().is_empty(),
            "the broken archive went unnoticed"
        );
        assert!(
            broken
                .failures
                .iter()
                .any(|f| f.contains("in no journal entry")),
            "{:?}",
            broken.failures
        );
    }
}

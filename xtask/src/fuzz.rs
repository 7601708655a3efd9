//! `cargo xtask fuzz [--seconds N]`: every cargo-fuzz target in `fuzz/` run for N seconds
//! (default 60) from its committed corpus, with the address sanitizer (the campaign's long
//! run builds them without one, for speed, and runs two at a time). The campaign
//! (`cargo xtask campaign`) runs them too, as its fuzz family, and reports each target's
//! executions, speed, corpus and coverage. New inputs go to a scratch corpus, so the
//! committed one changes only when a regression is added to it; every committed input is
//! replayed by an ordinary test of the crate that owns the reader.
//!
//! cargo-fuzz needs nightly flags: they are enabled on the stable toolchain with
//! `RUSTC_BOOTSTRAP=1`, for this build only. Without cargo-fuzz the fuzz family is reported
//! as skipped; under `CI=true` that is a failure (`cargo xtask ci` installs it).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

/// The targets (`fuzz/fuzz_targets/<name>.rs`) and what each reads.
pub(crate) const TARGETS: [(&str, &str); 8] = [
    ("front_matter", "skill front matter"),
    ("session_file", "session files"),
    ("journal_file", "history journal files"),
    ("cursor_files", "the journal's cursor files"),
    (
        "sse_stream",
        "server-sent event streams, as both providers assemble them",
    ),
    ("provider_json", "both providers' JSON answers"),
    ("config_file", "the configuration file and environment"),
    ("text_tool_calls", "tool calls models write as text"),
];

/// How long each target runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FuzzBudget {
    /// A fixed time per target.
    Seconds(u64),
    /// Until `runs` executions, or `seconds_per_target`, whichever comes first.
    Long { seconds_per_target: u64, runs: u64 },
}

/// What one target's run measured, from libFuzzer's final statistics.
#[derive(Debug, Clone, Default)]
pub(crate) struct TargetStats {
    pub(crate) name: &'static str,
    pub(crate) executions: u64,
    pub(crate) per_second: u64,
    pub(crate) corpus: u64,
    pub(crate) coverage: u64,
    pub(crate) crashes: u64,
    pub(crate) seconds: u64,
}

impl TargetStats {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "executions": self.executions,
            "executions_per_second": self.per_second,
            "corpus": self.corpus,
            "edges_covered": self.coverage,
            "crashes": self.crashes,
            "seconds": self.seconds,
        })
    }

    /// Reads libFuzzer's output: `stat::number_of_executed_units: N`, the last
    /// `#N ... cov: C ft: F corp: K/...` status line.
    fn read(&mut self, output: &str) {
        for line in output.lines() {
            let number = |prefix: &str| {
                line.strip_prefix(prefix)
                    .and_then(|rest| rest.trim().parse::<u64>().ok())
            };
            if let Some(n) = number("stat::number_of_executed_units:") {
                self.executions = n;
            } else if let Some(n) = number("stat::average_exec_per_sec:") {
                self.per_second = n;
            } else if line.starts_with('#') {
                let words: Vec<&str> = line.split_whitespace().collect();
                for pair in words.windows(2) {
                    match pair[0] {
                        "cov:" => self.coverage = pair[1].parse().unwrap_or(self.coverage),
                        "corp:" => {
                            self.corpus = pair[1]
                                .split('/')
                                .next()
                                .and_then(|n| n.parse().ok())
                                .unwrap_or(self.corpus);
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

fn has_cargo_fuzz() -> bool {
    Command::new(crate::cargo())
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `cargo xtask fuzz`: every target for `seconds`, failing at the first crash.
pub(crate) fn run(root: &Path, seconds: u64) -> Result<bool, String> {
    run_budget(root, FuzzBudget::Seconds(seconds))
}

/// Every target within `budget`; an error names a target that crashed.
pub(crate) fn run_budget(root: &Path, budget: FuzzBudget) -> Result<bool, String> {
    match run_all(root, budget)? {
        None => Ok(false),
        Some(stats) => match stats.iter().find(|t| t.crashes > 0) {
            Some(crashed) => Err(format!(
                "fuzz target {} crashed; the input is in fuzz/artifacts/{}/",
                crashed.name, crashed.name
            )),
            None => Ok(true),
        },
    }
}

/// Runs every target; `Ok(None)` when cargo-fuzz is missing outside CI. A crash is counted,
/// not returned as an error, so every target runs and the report has them all.
impl FuzzBudget {
    /// The sanitizer the targets are built with: the address sanitizer for a short run
    /// (it also watches the unsafe code of dependencies); none for the long run, which needs
    /// 10 million executions per target and runs five to six times faster without it (our
    /// own code has no `unsafe`).
    pub(crate) fn sanitizer(self) -> &'static str {
        match self {
            FuzzBudget::Seconds(_) => "address",
            FuzzBudget::Long { .. } => "none",
        }
    }

    /// The optimisation level of the targets' build: 1 for a short run, where the build
    /// (every crate the app links, instrumented) takes longer than the fuzzing; 3 for the
    /// long run, where executions per second count.
    fn opt_level(self) -> &'static str {
        match self {
            FuzzBudget::Seconds(_) => "1",
            FuzzBudget::Long { .. } => "3",
        }
    }

    /// `cargo fuzz <verb> -O --sanitizer …` with the environment this budget builds in;
    /// the build and every run share it, or a run would build again.
    fn cargo_fuzz(self, verb: &str, target_dir: &str, fuzz_dir: &Path) -> Command {
        let mut command = Command::new(crate::cargo());
        command
            .args(["fuzz", verb, "-O", "--sanitizer", self.sanitizer()])
            .env("RUSTC_BOOTSTRAP", "1")
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", self.opt_level())
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(fuzz_dir);
        command
    }

    /// How many targets run at once: one for a short run (CI's other steps are done, but
    /// its figures stay comparable), two for the long run (both cores).
    fn parallel(self) -> usize {
        match self {
            FuzzBudget::Seconds(_) => 1,
            FuzzBudget::Long { .. } => 2,
        }
    }
}

pub(crate) fn run_all(root: &Path, budget: FuzzBudget) -> Result<Option<Vec<TargetStats>>, String> {
    if !has_cargo_fuzz() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return Err(
                "cargo-fuzz is not installed, which CI=true requires (cargo install cargo-fuzz)"
                    .into(),
            );
        }
        println!(
            "cargo-fuzz is not installed: the fuzz targets are skipped (cargo install cargo-fuzz)"
        );
        return Ok(None);
    }
    let fuzz_dir = root.join("fuzz");
    let sanitizer = budget.sanitizer();
    // One target directory per sanitizer, so neither build undoes the other.
    let suffix = if sanitizer == "address" {
        "-fuzz".to_owned()
    } else {
        format!("-fuzz-{sanitizer}")
    };
    let target_dir = std::env::var("CARGO_TARGET_DIR")
        .map(|d| format!("{d}{suffix}"))
        .unwrap_or_else(|_| {
            fuzz_dir
                .join(format!("target{suffix}"))
                .display()
                .to_string()
        });
    let scratch = std::env::temp_dir().join(format!("nanobot-fuzz-{}", std::process::id()));
    let result = (|| {
        crate::status(
            &mut budget.cargo_fuzz("build", &target_dir, &fuzz_dir),
            "building the fuzz targets",
        )?;
        let shm = Path::new("/dev/shm");
        let temp = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let mut all = Vec::new();
        for group in TARGETS.chunks(budget.parallel()) {
            let runs: Vec<Result<TargetStats, String>> = std::thread::scope(|threads| {
                let handles: Vec<_> = group
                    .iter()
                    .map(|&(target, what)| {
                        let (scratch, fuzz_dir, target_dir, temp) =
                            (&scratch, &fuzz_dir, &target_dir, &temp);
                        threads.spawn(move || {
                            one_target(
                                target, what, budget, sanitizer, scratch, fuzz_dir, target_dir,
                                temp,
                            )
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("a fuzz thread panicked".into()))
                    })
                    .collect()
            });
            for run in runs {
                all.push(run?);
            }
        }
        Ok(Some(all))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// Runs one target from its committed corpus within the budget and reads its figures.
#[allow(clippy::too_many_arguments)]
fn one_target(
    target: &'static str,
    what: &str,
    budget: FuzzBudget,
    sanitizer: &str,
    scratch: &Path,
    fuzz_dir: &Path,
    target_dir: &str,
    temp: &Path,
) -> Result<TargetStats, String> {
    let work = scratch.join(target);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let corpus = fuzz_dir.join("corpus").join(target);
    std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let mut limits = vec![
        "-rss_limit_mb=2048".to_owned(),
        "-print_final_stats=1".to_owned(),
    ];
    match budget {
        FuzzBudget::Seconds(seconds) => {
            println!("fuzzing {target} ({what}) for {seconds} s");
            limits.push(format!("-max_total_time={seconds}"));
        }
        FuzzBudget::Long {
            seconds_per_target,
            runs,
        } => {
            println!(
                "fuzzing {target} ({what}) for {runs} executions or {seconds_per_target} s, sanitizer {sanitizer}"
            );
            limits.push(format!("-max_total_time={seconds_per_target}"));
            limits.push(format!("-runs={runs}"));
        }
    }
    let started = std::time::Instant::now();
    let output = budget
        .cargo_fuzz("run", target_dir, fuzz_dir)
        .arg(target)
        .arg(&work)
        .arg(&corpus)
        .arg("--")
        .args(&limits)
        .env("TMPDIR", temp)
        .output()
        .map_err(|e| format!("could not run cargo fuzz: {e}"))?;
    let text = String::from_utf8_lossy(&output.stderr);
    let mut stats = TargetStats {
        name: target,
        seconds: started.elapsed().as_secs(),
        ..TargetStats::default()
    };
    stats.read(&text);
    if !output.status.success() {
        stats.crashes = 1;
        // The panic or the sanitizer's report, and the input that caused it.
        let why: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("panicked at")
                    || l.contains("ERROR: AddressSanitizer")
                    || l.contains("deadly signal")
                    || l.contains("Test unit written to")
                    || l.contains("artifact_prefix")
            })
            .collect();
        let panic_message: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("panicked at"))
            .take(4)
            .collect();
        println!(
            "fuzz target {target} FAILED ({}):\n{}\n{}",
            output.status,
            why.join("\n"),
            panic_message.join("\n")
        );
    }
    println!(
        "  {target}: {} executions ({}/s), corpus {}, coverage {}, crashes {}",
        stats.executions, stats.per_second, stats.corpus, stats.coverage, stats.crashes
    );
    Ok(stats)
}

//! `cargo xtask <command>`: the one entry point for the checks CI runs.
//!
//! - `ci`: first provides what the suite needs (`services.rs`: PostgreSQL, the nanobot-ai
//!   peer, the openai client, cargo-fuzz, the local models), then formatting, the
//!   dependency-direction check, clippy (all features, and libraries without their
//!   defaults), the tests (nextest where it is installed, plus doc tests) and the docs, each
//!   failing on any warning, then the short reliability campaign (kills, racing processes,
//!   model-based sequences and a short run of every fuzz target); it ends with the checks
//!   that skipped and why. `ci --quick`: the same checks without the services and the
//!   campaign. `ci --checks-only`: the checks with the services the environment names.
//! - `campaign --short | --long SECONDS`: the reliability campaign, one JSON report; `ci`
//!   runs the short form, which includes a short run of every fuzz target.
//! - `fuzz [--seconds N]`: every fuzz target for N seconds (default 60).
//! - `deps`: only the dependency-direction check.
//! - `size`: only the size check (library files under 600 lines, functions under 80).
//! - `package`: every publishable crate packaged and verified, and the outside consumer
//!   (`tests/consumer`) built and tested from those packages only (`ci` runs it too, with
//!   `cargo deny check licenses bans sources` and each feature of the assembly crate and
//!   the ports alone).
//! - `release-check`: `cargo semver-checks` against the last `v*` tag.
//! - `bench [--before REV] [workload ...]`: the Python peer and our benchmarks in one job,
//!   as ratios; with `--before`, an earlier commit's benchmarks beside today's.
//!   The Python binding's save (`python_save`) is measured the same way, through its
//!   release wheel, beside nanobot-ai's own store.
//! - `eval search [ARGS]`: the memory-search evaluation (`crates/nanobot-search-eval`): every
//!   labelled corpus into every backend (PostgreSQL where `NANOBOT_TEST_PG_URL` is set),
//!   each lane beside a textbook BM25; a table, and `target/eval/search.json`.
//! - `llm install|start|stop|status`: a real small model served on 127.0.0.1.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_before.rs"]
mod before;
mod bench;
mod campaign;
mod deps;
mod fuzz;
mod llm;
mod package;
mod python;
mod release;
mod services;
mod size;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&root, &args[1..]),
        Some("deps") => deps::check(&root),
        Some("size") => size::check(&root),
        Some("package") => package::run(&root),
        Some("release-check") => release::release_check(&root),
        Some("bench") => bench_all(&root, &args[1..]),
        Some("campaign") => campaign::run(&root, &args[1..]),
        Some("llm") => llm::run(&root, &args[1..]),
        Some("eval") => match args.get(1).map(String::as_str) {
            Some("search") => eval_search(&root, &args[2..]),
            _ => Err("usage: cargo xtask eval search [--corpus DIR]... [--backends ...] [--storage ...] [--report FILE]".into()),
        },
        Some("demo") => llm::demo(&root, &args[1..]),
        Some("fuzz") => match args.get(1..) {
            Some([flag, n]) if flag == "--seconds" => n
                .parse()
                .map_err(|_| format!("--seconds {n:?} is not a number"))
                .and_then(|n| fuzz::run(&root, n).map(|_| ())),
            // As the long campaign fuzzes: no sanitizer, two targets at a time, N executions.
            Some([flag, n]) if flag == "--runs" => n
                .parse()
                .map_err(|_| format!("--runs {n:?} is not a number"))
                .and_then(|runs| {
                    fuzz::run_budget(
                        &root,
                        fuzz::FuzzBudget::Long {
                            seconds_per_target: 86_400,
                            runs,
                        },
                    )
                })
                .map(|_| ()),
            Some([]) | None => fuzz::run(&root, 60).map(|_| ()),
            _ => Err("usage: cargo xtask fuzz [--seconds N | --runs N]".into()),
        },
        _ => {
            eprintln!(
                "usage: cargo xtask <ci|deps|package|release-check|bench [--before REV] [workload ...]|campaign --short|--long SECONDS|llm <install|start|stop|status>>"
            );
            eprintln!(
                "  ci    everything CI checks, with every service it needs (--quick: no services, no campaign)"
            );
            eprintln!("  deps  only the dependency-direction check");
            eprintln!(
                "  package  every publishable crate packaged, and the outside consumer built from them"
            );
            eprintln!("  release-check  cargo semver-checks against the last v* tag");
            eprintln!("  bench the Python peer and our benchmarks in one job, as ratios");
            eprintln!("  eval search  search quality per lane and backend beside a textbook BM25");
            eprintln!(
                "  campaign  the reliability campaign (--short in CI, --long SECONDS before a release)"
            );
            eprintln!("  llm   a real small model on 127.0.0.1 for end-to-end tests and the demo");
            eprintln!("  demo  the bot against the local model, showing memory at work");
            eprintln!("  fuzz  every fuzz target for --seconds N (default 60)");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask eval search`: the evaluation binary, built for release, with the arguments
/// given (its report under `target/eval/` unless `--report` says otherwise).
fn eval_search(root: &Path, args: &[String]) -> Result<(), String> {
    eprintln!("eval search: building the evaluation (release; about 2 minutes the first time)");
    let status = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "run",
            "--quiet",
            "--release",
            "--locked",
            "-p",
            "nanobot-search-eval",
            "--",
        ])
        .args(args)
        .status()
        .map_err(|e| format!("cargo run: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the search evaluation failed ({status})"))
    }
}

fn workspace_root() -> PathBuf {
    // xtask lives one level below the workspace root. `cargo run` names the manifest's
    // folder at run time; the one compiled in is a fallback only: with a target directory
    // shared between checkouts, cargo runs the binary it last copied out, which may have been
    // built from another checkout (seen: `cargo xtask ci --quick` in one clone checked
    // another).
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir)
}

/// `cargo xtask bench [--before REV] [workload ...]`: our benchmarks against the peer, then
/// (when chosen, or when none is named) the Python binding's save beside nanobot-ai's.
fn bench_all(root: &Path, args: &[String]) -> Result<(), String> {
    let python_save = args.iter().any(|a| a == "python_save");
    let rest: Vec<String> = args
        .iter()
        .filter(|a| *a != "python_save")
        .cloned()
        .collect();
    let named = match rest.as_slice() {
        [flag, _rev, named @ ..] if flag == "--before" => named.len(),
        named => named.len(),
    };
    if !python_save || named > 0 {
        bench::run(root, &rest)?;
    }
    if python_save || named == 0 {
        let out_dir = bench::target_dir(root).join("bench-report");
        let workload = bench::shared_dir(root).join("bench/bench_nanobot.py");
        timed(
            "the Python binding's save, beside nanobot-ai's own store",
            || python::bench(root, &workload, &out_dir),
        )?;
    }
    Ok(())
}

/// How much of `cargo xtask ci` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CiMode {
    /// Services provided, then every check and the campaign (README's test command).
    Full,
    /// The checks and the campaign with the services the environment already names (what
    /// `Full` runs in a child process once it has provided them).
    ChecksOnly,
    /// A developer's loop: no services, no campaign; the service checks skip.
    Quick,
}

fn ci(root: &Path, args: &[String]) -> Result<(), String> {
    let mode = match args {
        [] => CiMode::Full,
        [flag] if flag == "--quick" => CiMode::Quick,
        [flag] if flag == "--checks-only" => CiMode::ChecksOnly,
        _ => return Err("usage: cargo xtask ci [--quick | --checks-only]".into()),
    };
    if mode == CiMode::Full {
        return ci_with_services(root);
    }
    checks(root, mode)
}

/// Provides the services, runs the checks in a child process that sees them, and stops the
/// services whatever the checks did.
fn ci_with_services(root: &Path) -> Result<(), String> {
    let started = Instant::now();
    println!(
        "cargo xtask ci: first the services the suite needs, then the checks \
         (about 52 minutes from nothing on 2 cores, about 35 when built and installed; \
         `cargo xtask ci --quick` skips the services and the campaign)"
    );
    let provided = services::provide(root)?;
    let exe = env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let result = status(
        Command::new(exe)
            .args(["ci", "--checks-only"])
            .envs(provided.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(root),
        "the checks",
    );
    if !provided.missing.is_empty() {
        println!("\nnot provided here (each one's checks skipped):");
        for missing in &provided.missing {
            println!("  {missing}");
        }
    }
    drop(provided);
    println!("\ncargo xtask ci: {:.0?} in all", started.elapsed());
    result
}

/// Whether this run is CI's (`CI=true`), where a missing service fails the run.
pub(crate) fn under_ci() -> bool {
    env::var("CI").is_ok_and(|v| v == "true")
}

fn checks(root: &Path, mode: CiMode) -> Result<(), String> {
    let started = Instant::now();
    step(root, "format", &["fmt", "--all", "--check"], &[])?;
    timed("dependency directions", || deps::check(root))?;
    timed("sizes", || size::check(root))?;
    step(
        root,
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Optional features must not rot: every library also builds without its defaults.
    step(
        root,
        "clippy without default features",
        &[
            "clippy",
            "--workspace",
            "--lib",
            "--no-default-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Snapshots are never written by CI: a missing or changed one fails the run. Tests
    // that skip for a missing service (peer, local model, git) record why in the skip
    // log; under CI=true they fail instead.
    let skip_log = env::temp_dir().join(format!("nanobot-xtask-skips-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&skip_log);
    let skip_log_text = skip_log.display().to_string();
    let insta = [
        ("INSTA_UPDATE", "no"),
        ("NANOBOT_SKIP_LOG", skip_log_text.as_str()),
    ];
    if has_nextest(root) {
        step(
            root,
            "tests (nextest)",
            &[
                "nextest",
                "run",
                "--workspace",
                "--all-features",
                "--locked",
                "--no-tests=warn",
            ],
            &insta,
        )?;
    } else {
        println!("cargo-nextest is not installed; running the tests with cargo test");
        step(
            root,
            "tests",
            &[
                "test",
                "--workspace",
                "--all-features",
                "--locked",
                "--lib",
                "--bins",
                "--tests",
            ],
            &insta,
        )?;
    }
    step(
        root,
        "doc tests",
        &["test", "--workspace", "--all-features", "--locked", "--doc"],
        &insta,
    )?;
    // As docs.rs builds them (`--cfg docsrs`, nightly's `doc_cfg` on this stable toolchain
    // for rustdoc only), so each feature-gated item says which feature it needs.
    step(
        root,
        "docs (as docs.rs builds them)",
        &[
            "doc",
            "--workspace",
            "--all-features",
            "--no-deps",
            "--locked",
        ],
        &[
            ("RUSTDOCFLAGS", "--cfg docsrs -D warnings"),
            ("RUSTC_BOOTSTRAP", "1"),
        ],
    )?;
    timed(
        "the Python binding: the wheel built, its pytest suite against nanobot-ai 0.3.5 (about 1 minute)",
        || python::check(root),
    )?;
    if mode == CiMode::Quick {
        println!("\n--quick: no packaging, dependency policy, each-feature check or campaign");
    } else {
        timed("dependency policy (cargo deny)", || release::deny(root))?;
        timed(
            "each feature alone: the assembly crate and the ports (cargo hack, about 4 minutes from nothing)",
            || release::each_feature(root),
        )?;
        package::run(root)?;
        timed("reliability campaign (short)", || {
            campaign::run(root, &["--short".to_owned()])
        })?;
    }
    report_skips(&skip_log, mode);
    println!("\nxtask ci: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

/// Prints how many checks skipped and why (from the skip log the tests append to), so a
/// green run says what it did not check.
fn report_skips(log: &Path, mode: CiMode) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    let mut by_reason: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for line in text.lines() {
        let (reason, test) = line.split_once('\t').unwrap_or((line, "?"));
        by_reason.entry(reason).or_default().push(test);
    }
    let total: usize = by_reason.values().map(Vec::len).sum();
    if total == 0 {
        println!("\nskipped checks: none (every peer, model and git check ran)");
        return;
    }
    let how = match mode {
        CiMode::Quick => "--quick provides no services; `cargo xtask ci` runs them",
        _ => {
            "`cargo xtask ci` runs them where it can provide their services; under CI=true a missing one fails"
        }
    };
    println!("\nskipped checks: {total} ({how})");
    for (reason, tests) in by_reason {
        println!("  {} x {reason}: {}", tests.len(), tests.join(", "));
    }
}

/// Whether `cargo <args>` runs and succeeds (its output dropped).
pub(crate) fn runs_quietly(args: &[&str]) -> bool {
    Command::new(cargo())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn has_nextest(root: &Path) -> bool {
    Command::new(cargo())
        .args(["nextest", "--version"])
        .current_dir(root)
        .output()
        .is_ok_and(|out| out.status.success())
}

fn cargo() -> String {
    env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn timed(name: &str, work: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    println!("\n==> {name}");
    let started = Instant::now();
    let result = work();
    println!(
        "<== {name}: {} in {:.1?}",
        if result.is_ok() { "ok" } else { "FAILED" },
        started.elapsed()
    );
    result
}

pub(crate) fn step(
    root: &Path,
    name: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(), String> {
    timed(name, || {
        println!("$ cargo {}", args.join(" "));
        let status = Command::new(cargo())
            .args(args)
            .envs(envs.iter().copied())
            .current_dir(root)
            .status()
            .map_err(|e| format!("could not run cargo: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "step `{name}` failed ({status}); run `cargo {}` to see why",
                args.join(" ")
            ))
        }
    })
}

/// Runs `command`, failing with `what` when it does not succeed.
pub(crate) fn status(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("could not run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

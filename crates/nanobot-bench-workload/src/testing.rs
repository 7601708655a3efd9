//! Helpers the crates' integration tests share: temporary directories, and running the
//! Python peer (nanobot-ai) for interoperability checks. Test code only: failures panic
//! with the reason, as a test should.
#![allow(clippy::expect_used, clippy::panic, clippy::print_stdout)]

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::SplitMix64;

/// Random texts for property tests: each of up to `max_parts` parts drawn from `parts`
/// (characters or words), the same sequence for the same seed.
pub fn random_texts<'a, T: AsRef<str>>(
    seed: u64,
    parts: &'a [T],
    max_parts: u64,
) -> impl Iterator<Item = String> + 'a {
    let mut rng = SplitMix64::new(seed);
    std::iter::repeat_with(move || {
        let len = rng.below(max_parts + 1);
        (0..len)
            .map(|_| parts[rng.below(parts.len() as u64) as usize].as_ref())
            .collect()
    })
}

/// A fresh temporary directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory whose name carries `label`, the process id and a counter.
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "nanobot-rs-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The committed inputs of a cargo-fuzz target (`fuzz/corpus/<target>/`), sorted by name,
/// as (path, bytes): what the crates' tests replay so a fixed crash stays fixed. Panics when
/// the corpus holds fewer than two inputs (it is committed, so that is a broken checkout).
/// The checkout is found at run time, from the running test's crate upwards, so a test
/// binary built in a target directory shared with another checkout reads its own.
pub fn fuzz_corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let relative = Path::new("fuzz/corpus").join(target);
    let dir = start
        .ancestors()
        .map(|at| at.join(&relative))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no {} above {}", relative.display(), start.display()));
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the {target} corpus ({}): {e}", dir.display()))
        .flatten()
        .map(|entry| {
            let path = entry.path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 2, "the {target} corpus is committed");
    inputs
}

/// Records that `test` skips because `reason` (a missing service: the peer, the local
/// model, git). Outside CI it prints `skipped: …` and appends a line to the file named by
/// `NANOBOT_SKIP_LOG` (which `cargo xtask ci` counts and reports at the end). Under
/// `CI=true` a missing service is a failure: it panics, so a green CI run can never hide
/// a check that did not run.
pub fn skip(test: &str, reason: &str) {
    skip_with(&|name| std::env::var(name).ok(), test, reason);
}

/// [`skip`] with the environment given, for its own test.
pub fn skip_with(env: &dyn Fn(&str) -> Option<String>, test: &str, reason: &str) {
    if env("CI").is_some_and(|v| v == "true" || v == "1") {
        panic!("{test} cannot run under CI=true: {reason}");
    }
    println!("skipped: {reason} ({test})");
    if let Some(log) = env("NANOBOT_SKIP_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
    {
        // One write of one line: appends from parallel tests stay whole lines.
        let _ = file.write_all(format!("{reason}\t{test}\n").as_bytes());
    }
}

/// The value of the environment variable `var`, or a recorded [`skip`] of `test` with
/// `hint` when it is not set.
pub fn required_env(var: &str, test: &str, hint: &str) -> Option<String> {
    let value = std::env::var(var).ok().filter(|v| !v.is_empty());
    if value.is_none() {
        skip(test, &format!("{var} is not set ({hint})"));
    }
    value
}

/// The Python of a nanobot-ai 0.3.5 install, from `NANOBOT_PEER_PYTHON` (`cargo xtask ci`
/// installs it and sets it); without it, a recorded [`skip`] of `test` and `None`.
pub fn peer_python(test: &str) -> Option<String> {
    required_env(
        "NANOBOT_PEER_PYTHON",
        test,
        "the nanobot-ai peer; `cargo xtask ci` installs it and sets it",
    )
}

/// The base URL of the local model (`LOCAL_LLM_BASE_URL`, set by `cargo xtask ci`, which
/// starts it); without it, a recorded [`skip`] of `test` and `None`.
pub fn local_llm(test: &str) -> Option<String> {
    required_env(
        "LOCAL_LLM_BASE_URL",
        test,
        "the local model; `cargo xtask ci` starts it, or `cargo xtask llm start --port 8088` prints it",
    )
}

/// The URL of the demo's model (Qwen2.5-Coder-1.5B, `cargo xtask llm start --model qwen15
/// --port 8089`), for the tests that check memory curation end to end; without it, a
/// recorded [`skip`] of `test` (a failure under `CI=true`).
pub fn local_demo_llm(test: &str) -> Option<String> {
    required_env(
        "LOCAL_LLM_DEMO_BASE_URL",
        test,
        "the demo's model; `cargo xtask ci` starts it, or `cargo xtask llm start --model qwen15 --port 8089` prints it",
    )
}

/// Whether a `git` program runs here; without one, a recorded [`skip`] of `test`.
pub fn git_program(test: &str) -> bool {
    let found = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip(test, "no git program to cross-check the repository");
    }
    found
}

/// Runs `script` with the peer's Python (`python -c script args...`, `stdin` fed in when
/// given) and returns the JSON it prints; panics with its stderr when it fails.
pub fn run_peer(python: &str, script: &str, args: &[&OsStr], stdin: Option<&[u8]>) -> Value {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the peer's Python");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input).expect("feed the peer script");
    }
    let output = child.wait_with_output().expect("wait for the peer script");
    assert!(
        output.status.success(),
        "peer script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(output.stdout.trim_ascii()).expect("the peer script prints JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12.9: under CI=true a missing service fails the test; outside CI the skip is
    /// printed and logged for `cargo xtask ci`'s count.
    #[test]
    fn skips_fail_under_ci_and_are_logged_outside() {
        let dir = TempDir::new("skip-log");
        let log = dir.path().join("skips.log");
        let log_text = log.display().to_string();
        let outside = |name: &str| (name == "NANOBOT_SKIP_LOG").then(|| log_text.clone());
        skip_with(&outside, "a test", "no peer");
        skip_with(&outside, "another test", "no git");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "no peer\ta test\nno git\tanother test\n"
        );
        let in_ci = |name: &str| (name == "CI").then(|| "true".to_owned());
        let failed = std::panic::catch_unwind(|| skip_with(&in_ci, "a test", "no peer"));
        assert!(failed.is_err(), "CI=true turns a skip into a failure");
    }
}

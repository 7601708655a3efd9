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

/// The Python of a nanobot-ai 0.3.5 install, from `NANOBOT_PEER_PYTHON` (`.ci/run` sets
/// it); without it, prints that `test` skips and returns `None`.
pub fn peer_python(test: &str) -> Option<String> {
    let python = std::env::var("NANOBOT_PEER_PYTHON").ok();
    if python.is_none() {
        println!("skipped: NANOBOT_PEER_PYTHON is not set ({test})");
    }
    python
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

//! `cargo xtask fuzz [--seconds N]`: every cargo-fuzz target in `fuzz/` run for N seconds
//! (default 15) from its committed corpus, with the address sanitizer. `cargo xtask ci`
//! runs it as a smoke; a longer run is `cargo xtask fuzz --seconds 3600`. New inputs go to
//! a scratch corpus, so the committed one changes only when a regression is added to it.
//!
//! cargo-fuzz needs nightly flags: they are enabled on the stable toolchain with
//! `RUSTC_BOOTSTRAP=1`, for this build only. Without cargo-fuzz the smoke is reported as
//! skipped; under `CI=true` that is a failure (`.ci/run` installs it).

use std::path::Path;
use std::process::Command;

/// The targets (`fuzz/fuzz_targets/<name>.rs`) and what each reads.
pub(crate) const TARGETS: [(&str, &str); 3] = [
    ("front_matter", "skill front matter"),
    ("session_file", "session files"),
    ("journal_file", "history journal files"),
];

fn has_cargo_fuzz() -> bool {
    Command::new(crate::cargo())
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs every target for `seconds`. `Ok(false)` when cargo-fuzz is missing outside CI.
pub(crate) fn run(root: &Path, seconds: u64) -> Result<bool, String> {
    if !has_cargo_fuzz() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return Err(
                "cargo-fuzz is not installed, which CI=true requires (cargo install cargo-fuzz)"
                    .into(),
            );
        }
        println!(
            "cargo-fuzz is not installed: the fuzz smoke is skipped (cargo install cargo-fuzz)"
        );
        return Ok(false);
    }
    let fuzz_dir = root.join("fuzz");
    // Sanitizer builds must not share the main target directory's artefacts.
    let target_dir = std::env::var("CARGO_TARGET_DIR")
        .map(|d| format!("{d}-fuzz"))
        .unwrap_or_else(|_| fuzz_dir.join("target").display().to_string());
    let scratch = std::env::temp_dir().join(format!("nanobot-fuzz-{}", std::process::id()));
    let result = (|| {
        for (target, what) in TARGETS {
            let work = scratch.join(target);
            std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
            println!("fuzzing {target} ({what}) for {seconds} s");
            crate::status(
                Command::new(crate::cargo())
                    .args(["fuzz", "run", "-O", "--sanitizer", "address", target])
                    .arg(&work)
                    .arg(fuzz_dir.join("corpus").join(target))
                    .args([
                        "--",
                        &format!("-max_total_time={seconds}"),
                        "-rss_limit_mb=2048",
                        "-print_final_stats=1",
                    ])
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env("CARGO_TARGET_DIR", &target_dir)
                    .current_dir(&fuzz_dir),
                &format!("fuzz target {target} (a crash input is in fuzz/artifacts/{target}/)"),
            )?;
        }
        Ok(true)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

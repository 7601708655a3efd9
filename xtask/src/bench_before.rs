//! `cargo xtask bench --before REV`: an earlier commit's benchmarks, measured in the same
//! job as today's, so a change's effect on every ratio is read side by side.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::bench::Tree;

/// A worktree of `rev` under the target directory (made once, reused), and the target
/// directory its builds use (apart from today's, so neither evicts the other).
pub(crate) fn checkout(root: &Path, rev: &str) -> Result<Tree, String> {
    let commit = git(
        root,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )?;
    let base = crate::bench::target_dir(root).join("bench-before");
    let dir = base.join(&commit[..12.min(commit.len())]);
    if !dir.join("Cargo.toml").is_file() {
        println!(
            "==> before: a worktree of {rev} ({commit}) at {}",
            dir.display()
        );
        let _ = git(root, &["worktree", "prune"]);
        git(
            root,
            &[
                "worktree",
                "add",
                "--detach",
                &dir.display().to_string(),
                &commit,
            ],
        )?;
    }
    Ok(Tree::At {
        dir,
        target: base.join("target"),
    })
}

/// The package of the workspace at `dir` that has the bench target `bench`.
pub(crate) fn package_of_bench(dir: &Path, bench: &str) -> Result<String, String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    let metadata: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata in {}: {e}", dir.display()))?;
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| {
            package["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|target| {
                    target["name"] == bench
                        && target["kind"]
                            .as_array()
                            .is_some_and(|kinds| kinds.iter().any(|k| k == "bench"))
                })
        })
        .and_then(|package| package["name"].as_str().map(str::to_owned))
        .ok_or_else(|| format!("no package in {} has the bench {bench}", dir.display()))
}

fn git(root: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .map_err(|e| format!("could not run git: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

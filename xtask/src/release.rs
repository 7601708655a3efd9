//! Release hygiene: the dependency policy (`cargo deny`), every feature of the assembly
//! crate and the ports building alone (`cargo hack`), and `cargo xtask release-check`
//! (`cargo semver-checks` against the last release tag).

use std::path::Path;
use std::process::Command;

/// The crates whose features must each build alone: the assembly crate a bot builder adds,
/// and the ports an outside backend implements.
fn each_feature_crates(root: &Path) -> Result<Vec<String>, String> {
    let metadata = crate::deps::metadata(root)?;
    let mut names: Vec<String> = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
        .iter()
        .filter(|p| {
            let layer = p["metadata"]["nanobot"]["layer"].as_str();
            matches!(layer, Some("port" | "assembly"))
        })
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

/// `cargo deny check licenses bans sources` over `deny.toml`. Advisories are left out: the
/// RustSec database cannot be fetched on this machine, and a check that cannot look is not
/// reported as passed.
pub(crate) fn deny(root: &Path) -> Result<(), String> {
    println!("$ cargo deny --locked check licenses bans sources");
    crate::status(
        Command::new(crate::cargo())
            .args([
                "deny",
                "--locked",
                "check",
                "--hide-inclusion-graph",
                "licenses",
                "bans",
                "sources",
            ])
            .current_dir(root),
        "cargo deny",
    )?;
    println!("advisories: not checked here (the RustSec database cannot be fetched offline)");
    Ok(())
}

/// `cargo hack clippy --each-feature` over the assembly crate and the ports, warnings
/// denied: a feature that only builds together with another is a broken promise to whoever
/// turns it on alone. (Clippy rather than check: the dependencies' artifacts are the ones
/// the clippy steps already built, and `-D warnings` reaches only our crates.)
pub(crate) fn each_feature(root: &Path) -> Result<(), String> {
    let crates = each_feature_crates(root)?;
    let mut args = vec!["hack", "clippy", "--each-feature", "--lib", "--locked"];
    for name in &crates {
        args.extend(["-p", name.as_str()]);
    }
    args.extend(["--", "-D", "warnings"]);
    println!("$ cargo {}", args.join(" "));
    crate::status(
        Command::new(crate::cargo()).args(&args).current_dir(root),
        "cargo hack --each-feature",
    )
}

/// `cargo xtask release-check`: the public API against the last `v*` tag, with
/// `cargo semver-checks` (installed on first use).
pub(crate) fn release_check(root: &Path) -> Result<(), String> {
    let Some(tag) = last_release_tag(root) else {
        println!("no v* release tag yet: nothing to compare the API with");
        return Ok(());
    };
    if !crate::runs_quietly(&["semver-checks", "--version"]) {
        println!("$ cargo install --locked cargo-semver-checks@0.51.0 (about 8 minutes, once)");
        crate::status(
            Command::new(crate::cargo()).args([
                "install",
                "--locked",
                "cargo-semver-checks@0.51.0",
            ]),
            "installing cargo-semver-checks",
        )?;
    }
    println!("$ cargo semver-checks --workspace --baseline-rev {tag}");
    crate::status(
        Command::new(crate::cargo())
            .args(["semver-checks", "--workspace", "--baseline-rev", &tag])
            .current_dir(root),
        &format!("cargo semver-checks against {tag}"),
    )
}

/// The newest tag `v<major>.<minor>.<patch>` reachable from HEAD.
fn last_release_tag(root: &Path) -> Option<String> {
    let out = Command::new("git")
        .args(["describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"])
        .current_dir(root)
        .output()
        .ok()?;
    let tag = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !tag.is_empty()).then_some(tag)
}

//! `cargo xtask package`: the family as a registry would hand it out, and a project outside
//! the workspace built from nothing else.
//!
//! 1. `cargo package` (with verification: each package builds from its own `.crate`) for
//!    every crate whose manifest does not say `publish = false`;
//! 2. a directory source: the third-party crates of the lock file (`cargo vendor`) and each
//!    `.crate` unpacked beside them;
//! 3. `tests/consumer` copied out of the tree, pointed at that source in place of crates.io,
//!    offline; a dependency that is not a registry package (a path, a git URL) fails the
//!    check; then its tests run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Where the consumer project lives in the repository.
const CONSUMER: &str = "tests/consumer";

/// The verification and the consumer build without debug info: both only have to build
/// and pass, and this halves the time of a cold build on 2 cores. The same setting in
/// both, so the consumer reuses the third-party crates the verification built.
const BUILD_ENV: [(&str, &str); 1] = [("CARGO_PROFILE_DEV_DEBUG", "0")];

pub(crate) fn run(root: &Path) -> Result<(), String> {
    let publishable = publishable(root)?;
    let target = target_dir(root);
    crate::timed(
        &format!(
            "package {} crates with verification (about 7 minutes from nothing on 2 cores, seconds to minutes after, by what changed)",
            publishable.len()
        ),
        || package(root, &publishable),
    )?;
    let source = target.join("packaged-source");
    crate::timed(
        "a directory source: the lock file's crates and ours",
        || directory_source(root, &target, &publishable, &source),
    )?;
    let project = target.join("consumer");
    crate::timed(
        "the outside consumer, from the packages only (about 2 minutes)",
        || consumer(root, &source, &project, &target),
    )
}

/// A crate a registry may hold.
struct Publishable {
    name: String,
    version: String,
}

/// The workspace crates a registry may hold, by name.
fn publishable(root: &Path) -> Result<Vec<Publishable>, String> {
    let metadata = crate::deps::metadata(root)?;
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut crates: Vec<Publishable> = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        // `publish = false` is an empty list of registries; absent means any.
        .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
        .filter_map(|p| {
            Some(Publishable {
                name: p["name"].as_str()?.to_owned(),
                version: p["version"].as_str()?.to_owned(),
            })
        })
        .collect();
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(crates)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                root.join(dir)
            }
        })
        .unwrap_or_else(|| root.join("target"))
}

fn package(root: &Path, crates: &[Publishable]) -> Result<(), String> {
    forget_earlier_packages(&target_dir(root), crates)?;
    let mut args = vec!["package", "--locked", "--allow-dirty"];
    for krate in crates {
        args.extend(["-p", krate.name.as_str()]);
    }
    println!("$ cargo {}", args.join(" "));
    crate::status(
        Command::new(crate::cargo())
            .args(&args)
            .envs(BUILD_ENV)
            .current_dir(root),
        "cargo package",
    )
}

/// Cargo takes a registry package of a given version as unchanging: it unpacks it once
/// (`$CARGO_HOME/registry/src/*/<name>-<version>`) and fingerprints its builds by the
/// version alone. Our packages change under one version between runs, so a warm machine
/// would verify a crate against an earlier run's build of its sibling (seen: an item added
/// to one crate "not found" by the next). Their unpacked copies and the fingerprints of
/// their builds go before each packaging; the third-party crates stay built.
fn forget_earlier_packages(target: &Path, crates: &[Publishable]) -> Result<(), String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let mut doomed: Vec<PathBuf> = Vec::new();
    for registry in read_dirs(&cargo_home.join("registry/src")) {
        for Publishable { name, version } in crates {
            doomed.push(registry.join(format!("{name}-{version}")));
        }
    }
    for profile in read_dirs(target) {
        for entry in read_dirs(&profile.join(".fingerprint")) {
            let file = entry.file_name().map(|n| n.to_string_lossy().into_owned());
            if file.is_some_and(|f| {
                crates
                    .iter()
                    .any(|c| f.starts_with(&format!("{}-", c.name)))
            }) {
                doomed.push(entry);
            }
        }
    }
    for path in doomed.iter().filter(|p| p.exists()) {
        std::fs::remove_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The folders in `dir` (none when it cannot be read).
fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces `source` with the vendored third-party crates and our unpacked packages.
fn directory_source(
    root: &Path,
    target: &Path,
    crates: &[Publishable],
    source: &Path,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(source);
    println!(
        "$ cargo vendor --locked --versioned-dirs {}",
        source.display()
    );
    let out = Command::new(crate::cargo())
        .args(["vendor", "--locked", "--versioned-dirs", "--quiet"])
        .arg(source)
        .current_dir(root)
        .output()
        .map_err(|e| format!("could not run cargo vendor: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo vendor failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for Publishable { name, version } in crates {
        let file = target
            .join("package")
            .join(format!("{name}-{version}.crate"));
        unpack(&file, source)?;
        let checksum = sha256_of(&file)?;
        let dir = source.join(format!("{name}-{version}"));
        std::fs::write(
            dir.join(".cargo-checksum.json"),
            format!("{{\"files\":{{}},\"package\":\"{checksum}\"}}"),
        )
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    println!("{} packages beside the vendored crates", crates.len());
    Ok(())
}

fn unpack(file: &Path, into: &Path) -> Result<(), String> {
    crate::status(
        Command::new("tar")
            .arg("-xzf")
            .arg(file)
            .arg("-C")
            .arg(into),
        &format!("unpacking {}", file.display()),
    )
}

fn sha256_of(file: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .map_err(|e| format!("could not run sha256sum: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .filter(|hash| out.status.success() && hash.len() == 64)
        .map(str::to_owned)
        .ok_or_else(|| format!("sha256sum {}: no hash", file.display()))
}

/// Copies the consumer out of the tree, points it at `source`, refuses any dependency that
/// is not a registry package, and runs its tests.
fn consumer(root: &Path, source: &Path, project: &Path, target: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(project);
    copy_tree(&root.join(CONSUMER), project)?;
    let config = project.join(".cargo");
    std::fs::create_dir_all(&config).map_err(|e| format!("{}: {e}", config.display()))?;
    std::fs::write(
        config.join("config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"packaged\"\n\n[source.packaged]\ndirectory = {:?}\n\n[net]\noffline = true\n",
            source.display().to_string()
        ),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    only_registry_packages(project)?;
    // The workspace's target directory: the third-party crates the verification built are
    // the same packages (crates.io's, through the replacement) and are not built again.
    let envs = [
        ("CARGO_TARGET_DIR", target.to_path_buf()),
        ("INSTA_UPDATE", PathBuf::from("no")),
    ];
    println!("$ cargo test (in {})", project.display());
    crate::status(
        Command::new(crate::cargo())
            .args(["test", "--offline"])
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .envs(BUILD_ENV)
            .current_dir(project),
        "the consumer's tests",
    )
}

/// Every package of the consumer's graph but itself comes from the (replaced) registry.
fn only_registry_packages(project: &Path) -> Result<(), String> {
    let out = Command::new(crate::cargo())
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(project)
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata in the consumer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let metadata: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cargo metadata in the consumer: {e}"))?;
    let registry = "registry+https://github.com/rust-lang/crates.io-index";
    let foreign: Vec<String> = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
        .iter()
        .filter(|p| p["name"] != "nanobot-consumer")
        .filter(|p| p["source"].as_str() != Some(registry))
        .map(|p| format!("{} ({})", p["name"], p["source"]))
        .collect();
    if foreign.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the consumer depends on something that is not a registry package: {}",
            foreign.join(", ")
        ))
    }
}

/// Copies `from` to `to`, leaving out build output.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "Cargo.lock" {
            continue;
        }
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name)).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

//! The Python binding (`crates/nanobot-python`, the `nanobot-rs` wheel): its venv (nanobot-ai
//! 0.3.5 beside maturin and pytest), the wheel built and its pytest suite run by `cargo
//! xtask ci`, and its save benchmark beside nanobot-ai's own store in `cargo xtask bench`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::services::{cache, runs, venv_install};

/// The binding's folder.
const CRATE: &str = "crates/nanobot-python";
/// maturin and pytest, pinned by hash.
const REQUIREMENTS: &str = "crates/nanobot-python/tests/requirements.txt";
/// The variable naming the venv's Python to the checks.
pub(crate) const VAR: &str = "NANOBOT_TEST_BINDING_PYTHON";
/// The nanobot-ai release the binding is checked against.
const NANOBOT_AI: &str = "nanobot-ai==0.3.5";

/// The venv `~/.cache/nanobot-rs/python-binding/.venv` with nanobot-ai, maturin and pytest
/// (installed again whenever the requirements change); its Python, or why not.
pub(crate) fn venv(root: &Path) -> Result<PathBuf, (String, String)> {
    let home = cache("nanobot-rs/python-binding");
    let venv = home.join(".venv");
    let python = venv.join("bin/python");
    let fix = format!(
        "python3 -m venv {0} && {0}/bin/pip install {NANOBOT_AI} && {0}/bin/pip install --require-hashes -r {REQUIREMENTS}",
        venv.display()
    );
    let wanted = fs::read_to_string(root.join(REQUIREMENTS))
        .map_err(|e| (format!("{REQUIREMENTS}: {e}"), "a whole clone".to_owned()))?;
    let stamp = home.join("requirements.txt");
    let current = fs::read_to_string(&stamp).is_ok_and(|s| s == wanted);
    let check = "import importlib.metadata as m, nanobot, pytest, maturin; assert m.version('nanobot-ai') == '0.3.5'";
    if !current || !runs(&python, &["-c", check]) {
        let _ = fs::remove_dir_all(&venv);
        let requirements = root.join(REQUIREMENTS).display().to_string();
        venv_install(&venv, &["-q", NANOBOT_AI])
            .and_then(|()| venv_install(&venv, &["-q", "--require-hashes", "-r", &requirements]))
            .map_err(|e| (e, fix.clone()))?;
        fs::write(&stamp, &wanted)
            .map_err(|e| (format!("{}: {e}", stamp.display()), fix.clone()))?;
    }
    if runs(&python, &["-c", check]) {
        Ok(python)
    } else {
        Err(("nanobot-ai, maturin or pytest does not import".into(), fix))
    }
}

/// Builds the wheel (`release` for the benchmark, the dev profile for the tests), installs
/// it into the venv of `python`, and returns its path.
fn build_and_install(root: &Path, python: &Path, release: bool) -> Result<PathBuf, String> {
    let out = crate::bench::target_dir(root).join("wheels");
    let _ = fs::remove_dir_all(&out);
    let mut build = Command::new(python);
    build
        .args(["-m", "maturin", "build", "--manifest-path"])
        .arg(root.join(CRATE).join("Cargo.toml"))
        .arg("--interpreter")
        .arg(python)
        .arg("--out")
        .arg(&out)
        .current_dir(root);
    if release {
        build.arg("--release");
    }
    crate::status(&mut build, "maturin build")?;
    let wheel = fs::read_dir(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("maturin left no wheel in {}", out.display()))?;
    println!("wheel: {}", wheel.display());
    crate::status(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&wheel),
        "pip install of the wheel",
    )?;
    Ok(wheel)
}

/// `cargo xtask ci`'s step: the wheel built from this checkout, installed, and its pytest
/// suite run against nanobot-ai 0.3.5. Skips (failing under `CI=true`) without the venv.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let Some(python) = env::var_os(VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
    else {
        let why = format!("{VAR} is not set (no venv with nanobot-ai, maturin and pytest)");
        if crate::under_ci() {
            return Err(format!("{why}, which CI=true requires"));
        }
        println!("skipped: {why}; `cargo xtask ci` provides it");
        return Ok(());
    };
    build_and_install(root, &python, false)?;
    // Run from the tests' folder so `import nanobot_rs` is the installed wheel, not the
    // source tree.
    crate::status(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "."])
            .current_dir(root.join(CRATE).join("tests"))
            .env("RUST_BACKTRACE", "0"),
        "pytest of the Python binding",
    )
}

/// `cargo xtask bench`'s Python row: the release wheel, then nanobot-ai's save after one
/// message at 10,000 messages with its own store and with ours, in one process.
pub(crate) fn bench(root: &Path, workload: &Path, out_dir: &Path) -> Result<(), String> {
    let python = venv(root).map_err(|(why, fix)| format!("{why}; to provide it: {fix}"))?;
    build_and_install(root, &python, true)?;
    fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let out = out_dir.join("python-save.json");
    crate::status(
        Command::new(&python)
            .arg(root.join(CRATE).join("bench/save.py"))
            .arg("--workload")
            .arg(workload)
            .arg("--out")
            .arg(&out)
            .env("RUST_BACKTRACE", "0"),
        "the binding's save benchmark",
    )?;
    println!("binding report: {}", out.display());
    Ok(())
}

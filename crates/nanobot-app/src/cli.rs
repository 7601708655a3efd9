//! The command line: parsing, and each command. `run_cli` is what `main` calls, and what the
//! command-line tests drive. The chat writes to the terminal directly.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use llm_port::{TextSink, TokioClock};
use memory_store::{Document, MemoryDocuments, MemoryDocumentsExt};
use session_store::SessionKey;

use crate::bot::{Bot, model_client};
use crate::commands;
use crate::config::Config;
use crate::error::AppError;

/// The usage text.
pub const USAGE: &str = "nanobot: a personal bot with memory.

Usage: nanobot [--config FILE] [--workspace DIR] [--session KEY] <command>

Commands:
  chat                          talk with the bot (Ctrl-C cancels an answer, Ctrl-D leaves)
  run -m TEXT                   one turn (the text from stdin without -m); exit code 1 on failure
  sessions list|show KEY|export KEY|delete KEY
  memory show|history [N]|log|restore ID
  dream run [--dry-run]|status
  init                          a new workspace from the templates
  config show                   the effective configuration (secrets redacted)
  demo                          memory at work against the local model (cargo xtask demo)
  help                          this text

Configuration: --config FILE, else $NANOBOT_CONFIG, else ./nanobot.toml when present;
environment variables override it (see the README).";

struct Options {
    config: Option<PathBuf>,
    workspace: Option<String>,
    session: String,
    rest: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, AppError> {
    let mut options = Options {
        config: None,
        workspace: None,
        session: "cli:direct".into(),
        rest: Vec::new(),
    };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| AppError::Usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "--config" => options.config = Some(PathBuf::from(value("--config")?)),
            "--workspace" => options.workspace = Some(value("--workspace")?),
            "--session" => options.session = value("--session")?,
            _ => {
                options.rest.push(arg.clone());
                options.rest.extend(iter.by_ref().cloned());
                break;
            }
        }
    }
    Ok(options)
}

/// Loads the configuration the options and environment name.
fn load_config(
    options: &Options,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, AppError> {
    let path = options
        .config
        .clone()
        .or_else(|| env("NANOBOT_CONFIG").map(PathBuf::from))
        .or_else(|| {
            let local = PathBuf::from("nanobot.toml");
            local.is_file().then_some(local)
        });
    let workspace = options.workspace.clone();
    let with_workspace = move |name: &str| {
        if name == "NANOBOT_WORKSPACE"
            && let Some(ws) = &workspace
        {
            return Some(ws.clone());
        }
        env(name)
    };
    Config::load(path.as_deref(), &with_workspace)
}

/// Runs the command line `args` (without the program name); the exit code.
pub async fn run_cli(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let env = |name: &str| std::env::var(name).ok();
    match dispatch(args, &env, out).await {
        Ok(()) => 0,
        Err(AppError::Usage(text)) => {
            let _ = writeln!(err, "{text}\nRun `nanobot help` for the commands.");
            2
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            1
        }
    }
}

async fn dispatch(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let options = parse(args)?;
    let words: Vec<&str> = options.rest.iter().map(String::as_str).collect();
    let key = SessionKey::new(options.session.clone())
        .map_err(|e| AppError::Usage(format!("--session: {e}")))?;
    let say = |out: &mut dyn Write, text: &str| {
        let _ = writeln!(out, "{text}");
    };
    match words.as_slice() {
        [] | ["help"] | ["--help"] | ["-h"] => {
            say(out, USAGE);
            Ok(())
        }
        ["config", "show"] => {
            say(out, &load_config(&options, env)?.show());
            Ok(())
        }
        ["init"] => {
            let config = load_config(&options, env)?;
            let bot = open(config).await?;
            let written = bot.documents.initialize().await?;
            let agents = bot.config.workspace.join("AGENTS.md");
            if !agents.exists() {
                std::fs::write(
                    &agents,
                    "# Agent Instructions\n\nWrite project rules for the bot here.\n",
                )
                .map_err(|e| AppError::NotFound(format!("AGENTS.md could not be written: {e}")))?;
            }
            say(
                out,
                &format!(
                    "Workspace ready at {}: {} created; memory versions in .nanobot/memory.git.",
                    bot.config.workspace.display(),
                    if written.is_empty() {
                        "nothing new".to_owned()
                    } else {
                        written
                            .iter()
                            .map(|d| d.path())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
            Ok(())
        }
        ["run", rest @ ..] => {
            let text = match rest {
                ["-m", text @ ..] if !text.is_empty() => text.join(" "),
                [] => {
                    let mut text = String::new();
                    std::io::stdin().lock().read_line(&mut text).ok();
                    let mut all = text;
                    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                        all.push('\n');
                        all.push_str(&line);
                    }
                    all
                }
                _ => {
                    return Err(AppError::Usage(
                        "usage: nanobot run -m TEXT (or the text on stdin)".into(),
                    ));
                }
            };
            if text.trim().is_empty() {
                return Err(AppError::Usage(
                    "nothing to say: give -m TEXT or text on stdin".into(),
                ));
            }
            let bot = open(load_config(&options, env)?).await?;
            let report = bot.turn(&key, text.trim(), &silent()).await?;
            say(out, &report.answer);
            bot.finish().await
        }
        ["chat"] => {
            let bot = Arc::new(open(load_config(&options, env)?).await?);
            chat(bot, key).await
        }
        ["sessions", "list"] => {
            let bot = open(load_config(&options, env)?).await?;
            say(out, &commands::sessions_list(&bot).await?);
            Ok(())
        }
        ["sessions", action @ ("show" | "export" | "delete"), target] => {
            let bot = open(load_config(&options, env)?).await?;
            let target = SessionKey::new(*target).map_err(|e| AppError::Usage(e.to_string()))?;
            let text = match *action {
                "show" => commands::sessions_show(&bot, &target).await?,
                "export" => commands::sessions_export(&bot, &target).await?,
                _ => commands::sessions_delete(&bot, &target).await?,
            };
            say(out, &text);
            Ok(())
        }
        ["memory", "show"] => {
            let bot = open(load_config(&options, env)?).await?;
            say(out, &commands::memory_show(&bot).await?);
            Ok(())
        }
        ["memory", "history", rest @ ..] => {
            let count = rest
                .first()
                .map(|n| {
                    n.parse::<usize>()
                        .map_err(|_| AppError::Usage(format!("{n:?} is not a number")))
                })
                .transpose()?
                .unwrap_or(10);
            let bot = open(load_config(&options, env)?).await?;
            say(out, &commands::memory_history(&bot, count).await?);
            Ok(())
        }
        ["memory", "log", rest @ ..] => {
            let bot = open(load_config(&options, env)?).await?;
            say(
                out,
                &commands::dream_log(&bot, rest.first().copied()).await?,
            );
            Ok(())
        }
        ["memory", "restore", id] => {
            let bot = open(load_config(&options, env)?).await?;
            say(out, &commands::dream_restore(&bot, Some(id)).await?);
            Ok(())
        }
        ["dream", "run", rest @ ..] => {
            let dry = match rest {
                [] => false,
                ["--dry-run"] => true,
                _ => {
                    return Err(AppError::Usage(
                        "usage: nanobot dream run [--dry-run]".into(),
                    ));
                }
            };
            let bot = open(load_config(&options, env)?).await?;
            progress(
                out,
                "Dream: reading new history and curating memory (this can take a while)...",
            );
            say(out, &commands::dream_run(&bot, dry).await?);
            Ok(())
        }
        ["dream", "status"] => {
            let bot = open(load_config(&options, env)?).await?;
            let status = commands::status(&bot, &key).await?;
            let dream_lines: Vec<&str> = status
                .lines()
                .filter(|l| l.starts_with("Journal") || l.starts_with("Next Dream"))
                .collect();
            let last = bot.dream.last_run().await?;
            say(
                out,
                &format!(
                    "{}\nLast run: {}",
                    dream_lines.join("\n"),
                    last.map_or("never".to_owned(), |t| t
                        .format("%Y-%m-%d %H:%M UTC")
                        .to_string())
                ),
            );
            Ok(())
        }
        ["demo", rest @ ..] => crate::demo::run(rest, env, out).await,
        other => Err(AppError::Usage(format!(
            "unknown command `{}`",
            other.join(" ")
        ))),
    }
}

async fn open(config: Config) -> Result<Bot, AppError> {
    let llm = model_client(&config)?;
    Bot::open(config, llm, Arc::new(TokioClock::system())).await
}

fn silent() -> TextSink {
    Arc::new(|_: &str| {})
}

/// A progress line: on a terminal it stays on one line; otherwise a plain line.
fn progress(out: &mut dyn Write, text: &str) {
    if std::io::stdout().is_terminal() {
        let _ = write!(out, "\r{text}\r");
    } else {
        let _ = writeln!(out, "{text}");
    }
    let _ = out.flush();
}

/// The interactive conversation.
async fn chat(bot: Arc<Bot>, key: SessionKey) -> Result<(), AppError> {
    let shutdown = Arc::new(tokio::sync::Notify::new());
    if let Some(autocompact) = bot.autocompact.clone() {
        let stop = shutdown.clone();
        tokio::spawn(
            autocompact.run(async move { stop.notified().await }, |done| {
                if let Ok(Some(record)) = &done.result {
                    println!(
                        "\n[memory] {} was idle: {} messages archived",
                        done.key,
                        record.end - record.start
                    );
                }
            }),
        );
    }
    if let Some(schedule) = bot.schedule.clone() {
        let (bot, stop) = (bot.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                let now = bot.clock.now();
                let Ok(Some(next)) = bot.dream.next_run(&schedule, now).await else {
                    return;
                };
                let wait = (next - now).to_std().unwrap_or_default();
                tokio::select! {
                    () = stop.notified() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                if let Ok(report) = bot.dream.run(dream::Trigger::Scheduled).await
                    && report.status != dream::RunStatus::NothingToDo
                {
                    println!(
                        "\n[dream] {}",
                        dream::format::run_reply(&report)
                            .lines()
                            .next()
                            .unwrap_or("")
                    );
                }
            }
        });
    }
    println!(
        "nanobot ({}, {}). /help for commands; Ctrl-D leaves.",
        bot.config.model, key
    );
    let terminal = std::io::stdin().is_terminal();
    let editor = if terminal {
        Some(Arc::new(std::sync::Mutex::new(
            rustyline::DefaultEditor::new().map_err(|e| AppError::Terminal(e.to_string()))?,
        )))
    } else {
        None
    };
    loop {
        let line = match &editor {
            Some(editor) => {
                let editor = editor.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let mut editor = editor.lock().unwrap_or_else(|p| p.into_inner());
                    let line = editor.readline("you> ");
                    if let Ok(text) = &line {
                        let _ = editor.add_history_entry(text.as_str());
                    }
                    line
                })
                .await
                .map_err(|e| AppError::Terminal(e.to_string()))?;
                match read {
                    Ok(line) => Some(line),
                    Err(rustyline::error::ReadlineError::Interrupted) => continue,
                    Err(rustyline::error::ReadlineError::Eof) => None,
                    Err(e) => return Err(AppError::Terminal(e.to_string())),
                }
            }
            None => tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
                }
            })
            .await
            .map_err(|e| AppError::Terminal(e.to_string()))?,
        };
        let Some(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(reply) = commands::slash(&bot, &key, line).await {
            match reply {
                Ok(text) => println!("{text}"),
                Err(e) => println!("error: {e}"),
            }
            continue;
        }
        let sink: TextSink = Arc::new(|text: &str| {
            print!("{text}");
            let _ = std::io::stdout().flush();
        });
        print!("bot> ");
        let _ = std::io::stdout().flush();
        tokio::select! {
            result = bot.turn(&key, line, &sink) => match result {
                Ok(_) => println!(),
                Err(e) => println!("\nerror: {e}"),
            },
            _ = tokio::signal::ctrl_c() => println!("\n(cancelled; your message is saved, the answer is not)"),
        }
    }
    shutdown.notify_waiters();
    bot.finish().await?;
    println!("Saved. Bye.");
    Ok(())
}

/// Writes the default documents of a new workspace (used by `init` and the demo).
pub async fn initialize(bot: &Bot) -> Result<Vec<Document>, AppError> {
    Ok(bot.documents.initialize().await?)
}

/// Reads a document (for the demo's closing summary).
pub async fn document(bot: &Bot, document: Document) -> Result<String, AppError> {
    Ok(bot.documents.read(document).await?.unwrap_or_default())
}

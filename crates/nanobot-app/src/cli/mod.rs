//! The command line: parsing, and each command. `run_cli` is what `main` calls, and what the
//! command-line tests drive.

mod args;
mod chat;

pub use args::{
    Cli, Command, ConfigCommand, DreamCommand, MemoryCommand, ScopesCommand, SessionsCommand, Shell,
};

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nanobot_llm_port::{TextSink, TokioClock};
use nanobot_memory_store::MemoryDocumentsExt;
use nanobot_session_store::SessionKey;

use clap::{CommandFactory, Parser};

use crate::bot::{Bot, Speaker, model_client};
use crate::commands;
use crate::config::Config;
use crate::error::AppError;

/// Loads the configuration the options and environment name.
fn load_config(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, AppError> {
    let path = cli
        .config
        .clone()
        .or_else(|| env("NANOBOT_CONFIG").map(PathBuf::from))
        .or_else(|| {
            let local = PathBuf::from("nanobot.toml");
            local.is_file().then_some(local)
        });
    let workspace = cli.workspace.clone();
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

/// The PostgreSQL store `import` and `export` copy into and out of.
async fn transfer_store(config: &Config) -> Result<nanobot_store_postgres::PgStore, AppError> {
    if config.storage.backend != nanobot_memory::settings::Backend::Postgres {
        return Err(AppError::Usage(
            "import and export copy between a workspace and PostgreSQL: set storage.backend = \"postgres\" and storage.database_url (NANOBOT_STORAGE, NANOBOT_DATABASE_URL)".into(),
        ));
    }
    crate::pg::connect(config).await
}

/// Parses the command line `args` (without the program name). `Err` holds what to print
/// and the exit code: help and `--version` on stdout with 0, usage errors (with
/// suggestions) on stderr with 2.
pub fn parse(args: &[String]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("nanobot".to_owned()).chain(args.iter().cloned()))
}

/// Runs the command line `args` (without the program name); the exit code.
pub async fn run_cli(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            if e.use_stderr() {
                let _ = write!(err, "{text}");
            } else {
                let _ = write!(out, "{text}");
            }
            return e.exit_code();
        }
    };
    run_parsed(cli, out, err).await
}

/// Runs a parsed command line; the exit code.
pub async fn run_parsed(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let env = |name: &str| std::env::var(name).ok();
    match dispatch(cli, &env, out).await {
        Ok(()) => 0,
        Err(AppError::Usage(text)) => {
            let _ = writeln!(err, "error: {text}\n\nFor more information, try '--help'.");
            2
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            1
        }
    }
}

fn session_key(text: &str, what: &str) -> Result<SessionKey, AppError> {
    SessionKey::new(text).map_err(|e| AppError::Usage(format!("{what}: {e}")))
}

async fn dispatch(
    cli: Cli,
    env: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let key = session_key(&cli.session, "--session")?;
    let Some(command) = &cli.command else {
        let _ = write!(out, "{}", Cli::command().render_help());
        return Ok(());
    };
    let text = match command {
        Command::Completions { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut Cli::command(), "nanobot", out);
            return Ok(());
        }
        Command::Config(ConfigCommand::Show) => load_config(&cli, env)?.show(),
        Command::Import {
            source,
            sessions_root,
        } => {
            let config = load_config(&cli, env)?;
            transfer(&config, Direction::Import, source, sessions_root.as_deref()).await?
        }
        Command::Export { dir, sessions_root } => {
            let config = load_config(&cli, env)?;
            transfer(&config, Direction::Export, dir, sessions_root.as_deref()).await?
        }
        Command::Init => init(&open(load_config(&cli, env)?).await?).await?,
        Command::Run { message } => {
            let text = message_text(message.as_deref())?;
            let bot = open_for_turns(&cli, load_config(&cli, env)?, &key).await?;
            let report = bot.turn(&key, text.trim(), &silent()).await?;
            let _ = writeln!(out, "{}", report.answer);
            return bot.finish().await;
        }
        Command::Chat => {
            let bot = open_for_turns(&cli, load_config(&cli, env)?, &key).await?;
            return chat::chat(Arc::new(bot), key).await;
        }
        Command::Serve { listen } => {
            let bot = open(load_config(&cli, env)?).await?;
            return crate::serve::serve(bot, listen.as_deref(), out).await;
        }
        Command::Mcp => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            return crate::serve::mcp_stdio(bot).await;
        }
        Command::Sessions(command) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            sessions(&bot, command).await?
        }
        Command::Memory(command) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            memory(&bot, command).await?
        }
        Command::Dream(command) => dream(&cli, load_config(&cli, env)?, &key, command, out).await?,
        Command::Scopes(command) => {
            let bot = open(load_config(&cli, env)?).await?;
            let by = |given: &Option<String>| {
                given
                    .clone()
                    .or_else(|| env("USER"))
                    .unwrap_or_else(|| "operator".to_owned())
            };
            scopes(&bot, command, &by).await?
        }
        Command::Demo { no_check } => {
            let workspace = cli.workspace.as_ref().map(PathBuf::from);
            return crate::demo::run(workspace, !no_check, env, out).await;
        }
    };
    let _ = writeln!(out, "{text}");
    Ok(())
}

/// What `run` says: its words, else standard input.
fn message_text(words: Option<&[String]>) -> Result<String, AppError> {
    let text = match words {
        Some(words) => words.join(" "),
        None => {
            let lines: Vec<String> = std::io::stdin()
                .lock()
                .lines()
                .map_while(Result::ok)
                .collect();
            lines.join("\n")
        }
    };
    if text.trim().is_empty() {
        return Err(AppError::Usage(
            "nothing to say: give -m TEXT or text on stdin".into(),
        ));
    }
    Ok(text)
}

/// `nanobot init`: the default documents, and an `AGENTS.md` to write rules in.
async fn init(bot: &Bot) -> Result<String, AppError> {
    let written = bot.memory.documents.initialize().await?;
    let agents = bot.config.workspace.join("AGENTS.md");
    if !agents.exists() {
        std::fs::write(
            &agents,
            "# Agent Instructions\n\nWrite project rules for the bot here.\n",
        )
        .map_err(|e| AppError::NotFound(format!("AGENTS.md could not be written: {e}")))?;
    }
    let created = if written.is_empty() {
        "nothing new".to_owned()
    } else {
        written
            .iter()
            .map(|d| d.path())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(format!(
        "Workspace ready at {}: {created} created; memory versions in .nanobot/memory.git.",
        bot.config.workspace.display()
    ))
}

/// Which way `transfer` copies.
enum Direction {
    Import,
    Export,
}

/// `nanobot import` and `nanobot export`: a workspace into or out of PostgreSQL.
async fn transfer(
    config: &Config,
    direction: Direction,
    workspace: &Path,
    sessions_root: Option<&Path>,
) -> Result<String, AppError> {
    let store = transfer_store(config).await?;
    let root = sessions_root.unwrap_or(&config.storage.sessions_root);
    Ok(match direction {
        Direction::Import => {
            let done = nanobot_memory::transfer::import(workspace, root, &store, &|line| {
                let _ = writeln!(std::io::stderr(), "[import] {line}");
            })
            .await?;
            format!("Imported {}: {}", workspace.display(), done.summary())
        }
        Direction::Export => {
            let done = nanobot_memory::transfer::export(workspace, root, &store, &|line| {
                let _ = writeln!(std::io::stderr(), "[export] {line}");
            })
            .await?;
            format!("Exported to {}: {}", workspace.display(), done.summary())
        }
    })
}

/// `nanobot sessions ...`.
async fn sessions(bot: &Bot, command: &SessionsCommand) -> Result<String, AppError> {
    let commands = bot.commands();
    let key = |text: &str| session_key(text, "the session key");
    Ok(match command {
        SessionsCommand::List => commands.sessions_list().await?,
        SessionsCommand::Show { key: k } => commands.session_show(&key(k)?).await?,
        SessionsCommand::Export { key: k } => commands.session_export(&key(k)?).await?,
        SessionsCommand::Delete { key: k } => commands.session_delete(&key(k)?).await?,
    })
}

/// `nanobot memory ...`.
async fn memory(bot: &Bot, command: &MemoryCommand) -> Result<String, AppError> {
    let commands = bot.commands();
    Ok(match command {
        MemoryCommand::Show => commands.memory_show().await?,
        MemoryCommand::History { what } => commands.memory_history_of(what.as_deref()).await?,
        MemoryCommand::Blame { file } => commands.memory_blame(file).await?,
        MemoryCommand::Forget {
            session,
            messages,
            yes,
            erase_history,
        } => {
            let key = session_key(session, "--session")?;
            crate::commands::memory_forget(bot, &key, *messages, *yes, *erase_history).await?
        }
        MemoryCommand::Search {
            query,
            sources,
            since,
            limit,
            json,
        } => {
            let search = commands::MemorySearch {
                query,
                sources,
                since: since.as_deref(),
                limit: *limit,
                json: *json,
            };
            commands::memory_search(bot, &search).await?
        }
        MemoryCommand::Reindex => commands.memory_reindex().await?,
        MemoryCommand::Log { id } => commands.dream_log(id.as_deref()).await?,
        MemoryCommand::Restore { id } => commands.dream_restore(Some(id)).await?,
    })
}

/// `nanobot dream ...`.
async fn dream(
    cli: &Cli,
    config: Config,
    key: &SessionKey,
    command: &DreamCommand,
    out: &mut dyn Write,
) -> Result<String, AppError> {
    if let DreamCommand::Proposals { dismiss } = command {
        return crate::scopes::proposals(&open(config).await?, dismiss).await;
    }
    let bot = open_in_scope(cli, config, key).await?;
    match command {
        DreamCommand::Run {
            all_scopes: true, ..
        } => {
            progress(
                out,
                "Dream: reading new history in every scope that has some (this can take a while)...",
            );
            crate::scopes::dream_all(&bot).await
        }
        DreamCommand::Run { dry_run, .. } => {
            progress(
                out,
                "Dream: reading new history and curating memory (this can take a while)...",
            );
            commands::dream_run(&bot, *dry_run).await
        }
        _ => dream_status(&bot, key).await,
    }
}

/// `nanobot dream status`: the journal's and the schedule's lines of the status, and the
/// last run.
async fn dream_status(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    let status = commands::status(bot, key).await?;
    let dream_lines: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("Journal") || l.starts_with("Next Dream"))
        .collect();
    let last = bot.memory.dream.last_run().await?;
    let last = last.map_or("never".to_owned(), |t| {
        t.format("%Y-%m-%d %H:%M UTC").to_string()
    });
    let stop = bot.memory.dream.last_stop().await?.map_or(String::new(), |s| {
        let (first, last) = s.entries;
        let when = s.at.format("%Y-%m-%d %H:%M UTC");
        format!("\nLast run stopped ({when}, {} in a row): {}; entries {first}-{last} wait for the next run", s.runs, s.reason)
    });
    Ok(format!(
        "{}\nLast run: {last}{stop}",
        dream_lines.join("\n")
    ))
}

/// `nanobot scopes ...`; `by` names the operator (`--by`, else `$USER`).
async fn scopes(
    bot: &Bot,
    command: &ScopesCommand,
    by: &dyn Fn(&Option<String>) -> String,
) -> Result<String, AppError> {
    match command {
        ScopesCommand::List => crate::scopes::list(bot).await,
        ScopesCommand::Show { scope } => crate::scopes::show(bot, scope).await,
        ScopesCommand::Link {
            target,
            identities,
            by: who,
        } => crate::scopes::link(bot, target, identities, &by(who)).await,
        ScopesCommand::Unlink { identity, by: who } => {
            crate::scopes::unlink(bot, identity, &by(who)).await
        }
        ScopesCommand::Delete { scope, yes } => crate::scopes::delete(bot, scope, *yes).await,
    }
}

async fn open(config: Config) -> Result<Bot, AppError> {
    let llm = model_client(&config)?;
    Bot::open(config, llm, Arc::new(TokioClock::system())).await
}

fn speaker(cli: &Cli) -> Speaker {
    let mut speaker = Speaker::anonymous();
    speaker.user = cli.user.clone();
    speaker.chat = cli.chat.clone();
    speaker.group = cli.group;
    speaker
}

/// The bot for turns: the speaker's scope, or no memory at all when the speaker cannot be
/// identified in a scoped isolation mode (fail closed; the resolver logs a warning).
async fn open_for_turns(cli: &Cli, config: Config, key: &SessionKey) -> Result<Bot, AppError> {
    let llm = model_client(&config)?;
    Bot::open_as(
        config,
        llm,
        Arc::new(TokioClock::system()),
        &speaker(cli),
        Some(key),
    )
    .await
}

/// The bot for an operator's command: the agent's scope, or the scope `--user`/`--chat`
/// name (an error when they resolve to no memory).
async fn open_in_scope(cli: &Cli, config: Config, key: &SessionKey) -> Result<Bot, AppError> {
    if cli.user.is_none() && cli.chat.is_none() {
        return open(config).await;
    }
    let bot = open_for_turns(cli, config, key).await?;
    match bot.no_memory {
        Some(reason) => Err(AppError::Usage(format!(
            "--user/--chat name no memory: {}",
            reason.describe()
        ))),
        None => Ok(bot),
    }
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

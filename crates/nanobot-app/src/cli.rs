//! The command line: parsing, and each command. `run_cli` is what `main` calls, and what the
//! command-line tests drive. The chat writes to the terminal directly.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use nanobot_llm_port::{TextSink, TokioClock};
use nanobot_memory_store::{Document, MemoryDocumentsExt};
use nanobot_session_store::SessionKey;

use clap::{ArgAction, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::bot::{Bot, Speaker, model_client};
use crate::commands;
use crate::config::Config;
use crate::error::AppError;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "nanobot",
    version,
    about = "nanobot: a personal bot with memory.",
    after_help = "Configuration: --config FILE, else $NANOBOT_CONFIG, else ./nanobot.toml when \
                  present; environment variables override it (see the README). Logs go to \
                  stderr: -v for more, -q for errors only, RUST_LOG for a filter.",
    args_override_self = true,
    disable_help_subcommand = false
)]
pub struct Cli {
    /// The configuration file.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The agent workspace (overrides `workspace` of the configuration).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<String>,
    /// The session key, `channel:chat_id`.
    #[arg(long, global = true, value_name = "KEY", default_value = "cli:direct")]
    pub session: String,
    /// Who is talking, `platform:id` (a bare id is on `cli`); whose memory in `user` isolation
    #[arg(long, global = true, value_name = "ID")]
    pub user: Option<String>,
    /// The chat the message comes from (on the user's platform).
    #[arg(long, global = true, value_name = "ID", allow_hyphen_values = true)]
    pub chat: Option<String>,
    /// The chat is a group: the chat's memory in `user` isolation, no user's private files
    #[arg(long, global = true, requires = "chat")]
    pub group: bool,
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// Errors only on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Talk with the bot (Ctrl-C cancels an answer, Ctrl-D leaves).
    Chat,
    /// One turn; the text from stdin without -m. Exit code 1 on failure.
    Run {
        /// The message.
        #[arg(short, long, value_name = "TEXT", num_args = 1.., allow_hyphen_values = true)]
        message: Option<Vec<String>>,
    },
    /// The stored sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Long-term memory: the files, the journal, the versions.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Dream, the memory curator.
    #[command(subcommand)]
    Dream(DreamCommand),
    /// Memory scopes: per-user and per-chat memory, identity links, erasure.
    #[command(subcommand)]
    Scopes(ScopesCommand),
    /// A new workspace from the templates.
    Init,
    /// Copies a workspace (nanobot-ai's or nanobot-rs's) into the configured PostgreSQL
    /// store: every scope's sessions, journal, memory files, versions and links. Run it
    /// again to resume or to bring the store up to date; what differs there is kept.
    Import {
        /// The workspace directory.
        #[arg(value_name = "WORKSPACE")]
        source: PathBuf,
        /// nanobot-ai's sessions directory (its sessions live in `<DIR>/<workspace id>/`);
        /// default: storage.sessions_root.
        #[arg(long, value_name = "DIR")]
        sessions_root: Option<PathBuf>,
    },
    /// Writes every scope of the configured PostgreSQL store out as a workspace nanobot-ai
    /// 0.3.5 opens (its layout, the workspace id kept, versions replayed as commits). Run
    /// it again to resume or to bring the copy up to date.
    Export {
        /// The directory to write the workspace to.
        dir: PathBuf,
        /// Where the workspace's sessions go (`<DIR>/<workspace id>/`); default:
        /// storage.sessions_root.
        #[arg(long, value_name = "DIR")]
        sessions_root: Option<PathBuf>,
    },
    /// The bot behind an OpenAI-compatible API (chat completions, sessions, memory search)
    /// until Ctrl-C: serve.listen, [[serve.keys]].
    Serve {
        /// The address and port (default: serve.listen, 127.0.0.1:8080).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// The configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Memory at work against the local model (`cargo xtask demo`)
    ///
    /// Fails unless memory worked: a summary, a Dream version carrying a fact of the
    /// conversation, and that fact in the next prompt.
    Demo {
        /// Only watch: report the memory checks without failing on them.
        #[arg(long)]
        no_check: bool,
    },
    /// A completion script for a shell, on stdout.
    Completions {
        /// The shell.
        shell: Shell,
    },
}

/// `nanobot sessions ...`
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Every session, most recently updated first.
    List,
    /// A session's messages.
    Show {
        /// The session key.
        key: String,
    },
    /// A session as JSON lines.
    Export {
        /// The session key.
        key: String,
    },
    /// Deletes a session.
    Delete {
        /// The session key.
        key: String,
    },
}

/// `nanobot memory ...`
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// The memory files.
    Show,
    /// The newest history entries.
    History {
        /// How many.
        #[arg(default_value_t = 10)]
        count: usize,
    },
    /// Searches memory as the agent's `search_memory` tool does: history entries, the
    /// memory files and past sessions, best first.
    Search {
        /// What to look for, in any language.
        query: String,
        /// Where to look: history, memory or sessions (repeat for several; all when left
        /// out).
        #[arg(long = "source", value_name = "SOURCE")]
        sources: Vec<String>,
        /// Only what was written on or after this date (YYYY-MM-DD).
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
        /// How many results (1 to 10).
        #[arg(long, default_value_t = nanobot_memory_index::DEFAULT_LIMIT)]
        limit: usize,
        /// The hits as JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Builds the search index again from the journal, the memory files and the sessions
    /// (it is derived data; the next search would bring it up to date anyway).
    Reindex,
    /// The memory versions, or one version's diff.
    Log {
        /// A version id (a unique prefix is enough).
        id: Option<String>,
    },
    /// Restores the memory files of a version (itself a new, restorable version).
    Restore {
        /// A version id (a unique prefix is enough).
        id: String,
    },
}

/// `nanobot scopes ...`
#[derive(Debug, Subcommand)]
pub enum ScopesCommand {
    /// Every scope of the workspace, with what it holds, and the links.
    List,
    /// One scope (`user:telegram:1`, `chat:telegram:-100`, `agent`, or a user's
    /// `telegram:1`): where it lives, what it holds, who shares it.
    Show {
        /// The scope.
        scope: String,
    },
    /// Links identities to the first one's memory (`nanobot scopes link telegram:1
    /// discord:9`: discord:9 now shares telegram:1's memory). Recorded with who and when.
    Link {
        /// The user whose memory is shared.
        target: String,
        /// The identities that share it.
        #[arg(required = true, num_args = 1..)]
        identities: Vec<String>,
        /// Who makes the change (default: $USER).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Unlinks an identity: its next turns have its own memory again.
    Unlink {
        /// The identity.
        identity: String,
        /// Who makes the change (default: $USER).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Erases a scope: its sessions, journal, documents, versions and Dream records, and
    /// every link that names it.
    Delete {
        /// The scope.
        scope: String,
        /// Confirms the erasure (it cannot be undone).
        #[arg(long)]
        yes: bool,
    },
}

/// `nanobot dream ...`
#[derive(Debug, Subcommand)]
pub enum DreamCommand {
    /// Runs Dream now.
    Run {
        /// Shows what would change and changes nothing.
        #[arg(long)]
        dry_run: bool,
        /// Runs in every scope with unread history, not only this one.
        #[arg(long, conflicts_with = "dry_run")]
        all_scopes: bool,
    },
    /// Changes users' and chats' Dreams proposed to the shared SOUL.md and skills.
    Proposals {
        /// Removes proposals by number after review (apply one by hand first).
        #[arg(long, value_name = "N", num_args = 1..)]
        dismiss: Vec<usize>,
    },
    /// The backlog, the next and the last run.
    Status,
}

/// `nanobot config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// The effective configuration (secrets redacted).
    Show,
}

/// The shells completions are written for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// Bash.
    Bash,
    /// Zsh.
    Zsh,
    /// Fish.
    Fish,
}

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
    let say = |out: &mut dyn Write, text: &str| {
        let _ = writeln!(out, "{text}");
    };
    let Some(command) = &cli.command else {
        let _ = write!(out, "{}", Cli::command().render_help());
        return Ok(());
    };
    match command {
        Command::Completions { shell } => {
            let mut command = Cli::command();
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut command, "nanobot", out);
            Ok(())
        }
        Command::Config(ConfigCommand::Show) => {
            say(out, &load_config(&cli, env)?.show());
            Ok(())
        }
        Command::Import {
            source: workspace,
            sessions_root,
        } => {
            let config = load_config(&cli, env)?;
            let store = transfer_store(&config).await?;
            let root = sessions_root
                .clone()
                .unwrap_or_else(|| config.storage.sessions_root.clone());
            let done = nanobot_memory::transfer::import(workspace, &root, &store, &|line| {
                let _ = writeln!(std::io::stderr(), "[import] {line}");
            })
            .await?;
            say(
                out,
                &format!("Imported {}: {}", workspace.display(), done.summary()),
            );
            Ok(())
        }
        Command::Export { dir, sessions_root } => {
            let config = load_config(&cli, env)?;
            let store = transfer_store(&config).await?;
            let root = sessions_root
                .clone()
                .unwrap_or_else(|| config.storage.sessions_root.clone());
            let done = nanobot_memory::transfer::export(dir, &root, &store, &|line| {
                let _ = writeln!(std::io::stderr(), "[export] {line}");
            })
            .await?;
            say(
                out,
                &format!("Exported to {}: {}", dir.display(), done.summary()),
            );
            Ok(())
        }
        Command::Init => {
            let config = load_config(&cli, env)?;
            let bot = open(config).await?;
            let written = bot.memory.documents.initialize().await?;
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
        Command::Run { message } => {
            let text = match message {
                Some(words) => words.join(" "),
                None => {
                    let mut all = String::new();
                    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                        if !all.is_empty() {
                            all.push('\n');
                        }
                        all.push_str(&line);
                    }
                    all
                }
            };
            if text.trim().is_empty() {
                return Err(AppError::Usage(
                    "nothing to say: give -m TEXT or text on stdin".into(),
                ));
            }
            let bot = open_for_turns(&cli, load_config(&cli, env)?, &key).await?;
            let report = bot.turn(&key, text.trim(), &silent()).await?;
            say(out, &report.answer);
            bot.finish().await
        }
        Command::Chat => {
            let bot = Arc::new(open_for_turns(&cli, load_config(&cli, env)?, &key).await?);
            chat(bot, key).await
        }
        Command::Serve { listen } => {
            let bot = open(load_config(&cli, env)?).await?;
            crate::serve::serve(bot, listen.as_deref(), out).await
        }
        Command::Sessions(SessionsCommand::List) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::sessions_list(&bot).await?);
            Ok(())
        }
        Command::Sessions(
            SessionsCommand::Show { key: target }
            | SessionsCommand::Export { key: target }
            | SessionsCommand::Delete { key: target },
        ) => {
            let target = session_key(target, "the session key")?;
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            let text = match command {
                Command::Sessions(SessionsCommand::Show { .. }) => {
                    commands::sessions_show(&bot, &target).await?
                }
                Command::Sessions(SessionsCommand::Export { .. }) => {
                    commands::sessions_export(&bot, &target).await?
                }
                _ => commands::sessions_delete(&bot, &target).await?,
            };
            say(out, &text);
            Ok(())
        }
        Command::Memory(MemoryCommand::Show) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::memory_show(&bot).await?);
            Ok(())
        }
        Command::Memory(MemoryCommand::History { count }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::memory_history(&bot, *count).await?);
            Ok(())
        }
        Command::Memory(MemoryCommand::Search {
            query,
            sources,
            since,
            limit,
            json,
        }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            let search = commands::MemorySearch {
                query,
                sources,
                since: since.as_deref(),
                limit: *limit,
                json: *json,
            };
            say(out, &commands::memory_search(&bot, &search).await?);
            Ok(())
        }
        Command::Memory(MemoryCommand::Reindex) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::memory_reindex(&bot).await?);
            Ok(())
        }
        Command::Memory(MemoryCommand::Log { id }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::dream_log(&bot, id.as_deref()).await?);
            Ok(())
        }
        Command::Memory(MemoryCommand::Restore { id }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            say(out, &commands::dream_restore(&bot, Some(id)).await?);
            Ok(())
        }
        Command::Dream(DreamCommand::Run {
            all_scopes: true, ..
        }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            progress(
                out,
                "Dream: reading new history in every scope that has some (this can take a while)...",
            );
            say(out, &crate::scopes::dream_all(&bot).await?);
            Ok(())
        }
        Command::Dream(DreamCommand::Proposals { dismiss }) => {
            let bot = open(load_config(&cli, env)?).await?;
            say(out, &crate::scopes::proposals(&bot, dismiss).await?);
            Ok(())
        }
        Command::Scopes(command) => {
            let bot = open(load_config(&cli, env)?).await?;
            let by = |given: &Option<String>| {
                given
                    .clone()
                    .or_else(|| env("USER"))
                    .unwrap_or_else(|| "operator".to_owned())
            };
            let text = match command {
                ScopesCommand::List => crate::scopes::list(&bot).await?,
                ScopesCommand::Show { scope } => crate::scopes::show(&bot, scope).await?,
                ScopesCommand::Link {
                    target,
                    identities,
                    by: who,
                } => crate::scopes::link(&bot, target, identities, &by(who)).await?,
                ScopesCommand::Unlink { identity, by: who } => {
                    crate::scopes::unlink(&bot, identity, &by(who)).await?
                }
                ScopesCommand::Delete { scope, yes } => {
                    crate::scopes::delete(&bot, scope, *yes).await?
                }
            };
            say(out, &text);
            Ok(())
        }
        Command::Dream(DreamCommand::Run { dry_run, .. }) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            progress(
                out,
                "Dream: reading new history and curating memory (this can take a while)...",
            );
            say(out, &commands::dream_run(&bot, *dry_run).await?);
            Ok(())
        }
        Command::Dream(DreamCommand::Status) => {
            let bot = open_in_scope(&cli, load_config(&cli, env)?, &key).await?;
            let status = commands::status(&bot, &key).await?;
            let dream_lines: Vec<&str> = status
                .lines()
                .filter(|l| l.starts_with("Journal") || l.starts_with("Next Dream"))
                .collect();
            let last = bot.memory.dream.last_run().await?;
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
        Command::Demo { no_check } => {
            crate::demo::run(
                cli.workspace.as_ref().map(PathBuf::from),
                !no_check,
                env,
                out,
            )
            .await
        }
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

/// The interactive conversation.
async fn chat(bot: Arc<Bot>, key: SessionKey) -> Result<(), AppError> {
    let shutdown = Arc::new(tokio::sync::Notify::new());
    if let Some(autocompact) = bot.memory.autocompact.clone() {
        let stop = shutdown.clone();
        let (sessions, clock) = (bot.memory.sessions.clone(), bot.clock.clone());
        tokio::spawn(
            autocompact.run(async move { stop.notified().await }, move |done| {
                if let Ok(Some(record)) = &done.result {
                    println!(
                        "\n[memory] {} was idle: {} messages archived{}",
                        done.key,
                        record.end - record.start,
                        match &record.outcome {
                            nanobot_memory_core::Archived::Raw { reason, .. } =>
                                format!(" raw, without a summary ({reason})"),
                            _ => String::new(),
                        }
                    );
                }
                let (sessions, clock) = (sessions.clone(), clock.clone());
                tokio::spawn(async move {
                    nanobot_turn::record_compaction(&sessions, clock.as_ref(), &done).await;
                });
            }),
        );
    }
    crate::bot::spawn_dream_schedule(bot.clone(), shutdown.clone(), |scope, line| {
        if scope.subject.is_agent() {
            println!("\n[dream] {line}");
        } else {
            println!("\n[dream {}] {line}", scope.subject);
        }
    });
    println!(
        "nanobot ({}, {}). /help for commands; Ctrl-D leaves.",
        bot.config.llm.model, key
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
    Ok(bot.memory.documents.initialize().await?)
}

/// Reads a document (for the demo's closing summary).
pub async fn document(bot: &Bot, document: Document) -> Result<String, AppError> {
    Ok(bot
        .memory
        .documents
        .read_text(document)
        .await?
        .unwrap_or_default())
}

//! The command line's shape: every command, option and argument, as clap reads them.

use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand, ValueEnum};

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
    /// Long-term memory as an MCP server on stdin and stdout, for nanobot-ai, Claude Desktop
    /// or any MCP host: the memory of --user/--chat, else the agent's. No tool can name
    /// another scope.
    Mcp,
    /// The configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Memory at work against the local model (`cargo xtask demo`)
    ///
    /// Fails unless memory worked: a summary, a Dream version carrying a fact into memory and
    /// the next prompt, answers that differ, a last answer from memory, her name in USER.md,
    /// no fact twice, each curated line with its sources, and no name nobody said.
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
    /// The newest history entries (`history 20`), or the memory lines mentioning a query,
    /// held now or replaced, with when each was held (`history Berlin`).
    History {
        /// How many entries (10 when left out), or what to look for.
        #[arg(value_name = "COUNT|QUERY")]
        what: Option<String>,
    },
    /// Forgets a conversation in every scope: the session, the journal entries made from
    /// it, the memory lines only it taught, their search rows. Lists them and asks first.
    Forget {
        /// The session key (`telegram:42`).
        #[arg(long, value_name = "KEY")]
        session: String,
        /// Only these messages, `FIRST-LAST` as `nanobot sessions show` numbers them
        /// (widened to whole turns), and what was made from them.
        #[arg(long, value_name = "FIRST-LAST", value_parser = message_range)]
        messages: Option<(usize, usize)>,
        /// Removes without asking.
        #[arg(long)]
        yes: bool,
        /// Rewrites the memory versions too, so no version holds the removed lines.
        #[arg(long)]
        erase_history: bool,
    },
    /// Each line of a memory file (`memory/MEMORY.md`, `USER.md`...) with the version that
    /// wrote it and the conversations it came from.
    Blame {
        /// The file, relative to the workspace.
        file: String,
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

/// `FIRST-LAST` (or one number) as a message range.
fn message_range(text: &str) -> Result<(usize, usize), String> {
    let number = |t: &str| {
        t.trim()
            .parse::<usize>()
            .map_err(|_| format!("{text:?} is not FIRST-LAST (message numbers, e.g. 4-9)"))
    };
    let (first, last) = match text.split_once('-') {
        Some((first, last)) => (number(first)?, number(last)?),
        None => (number(text)?, number(text)?),
    };
    if first > last {
        return Err(format!("{text:?}: the first message comes after the last"));
    }
    Ok((first, last))
}

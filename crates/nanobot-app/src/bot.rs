//! The stack, wired from the configuration: the assembly crate (`nanobot-memory`) opens the
//! backend the configuration names (files or PostgreSQL), the model and the embedder; this
//! file translates the configuration into its builder and keeps what the commands share.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nanobot_context_builder::Host;
use nanobot_dream::DreamSchedule;
use nanobot_llm_port::{Clock, Embedder, LlmClient, TextSink, TokenCounter};
use nanobot_memory::{AssemblyError, FileBackend, Recall};
use nanobot_memory_scope::{NoMemoryReason, ScopeKey, Subject};
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, ScopeMemory, SearchMemory};

pub use nanobot_memory::{ScopeSummary, Speaker, Storage};
pub use nanobot_turn::{
    BACKGROUND_FAILURE_KEY, RAW_ARCHIVE_KEY, TurnReport, background_failure, last_raw_archive,
    record_background_failure, record_raw_archives,
};

use crate::config::Config;
use crate::error::AppError;

/// The parts of a bot, shared by its commands. `memory` is the scope the command works in:
/// the agent's, or the one `--user`/`--chat` resolve to (its sessions, journal, documents,
/// Consolidator, AutoCompact and Dream).
pub struct Bot {
    /// The configuration it runs with.
    pub config: Config,
    /// The library turn and every scope's memory.
    pub agent: Arc<Agent>,
    /// Where every scope is kept (for the commands that list or erase scopes).
    pub storage: Storage,
    /// The memory this command works in.
    pub memory: Arc<ScopeMemory>,
    /// Why turns run without memory, when they do (fail closed).
    pub no_memory: Option<NoMemoryReason>,
    /// The Dream schedule (`None` when disabled).
    pub schedule: Option<DreamSchedule>,
    /// The `search_memory` tool the turns offer (with the configured embedder, if any).
    pub search: Arc<SearchMemory>,
    /// The library bot all of the above come from (for the operator's commands).
    pub assembled: nanobot_memory::Bot,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("config", &self.config)
            .field("scope", &self.memory.scope)
            .finish_non_exhaustive()
    }
}

/// The model the configuration names, with its timeout and retries.
pub fn model_client(config: &Config) -> Result<Arc<dyn LlmClient>, AppError> {
    let options = config.llm.model_options(config.api_key.clone())?;
    Ok(nanobot_memory::model_client(&options)?)
}

/// The embedder of memory search's vector lane, when the configuration names one.
pub fn embedder(config: &Config) -> Result<Option<Arc<dyn Embedder>>, AppError> {
    let Some(options) = config.embedding_options() else {
        return Ok(None);
    };
    let embedder = nanobot_memory::embedder(&options).map_err(|e| AppError::Config {
        key: "search.embeddings_url".into(),
        file: config.source.clone(),
        reason: e.to_string(),
    })?;
    Ok(Some(embedder))
}

/// The file backend of the configured workspace (which must exist), as the bot opens it.
pub fn file_backend(
    config: &Config,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
) -> Result<FileBackend, AppError> {
    Ok(FileBackend::open(
        &config.workspace,
        &config.storage.file_options(),
        clock,
        counter,
    )?)
}

impl Bot {
    /// Opens the workspace of `config` with `llm` in the agent's own scope, creating what
    /// is missing.
    pub async fn open(
        config: Config,
        llm: Arc<dyn LlmClient>,
        clock: Arc<dyn Clock>,
    ) -> Result<Bot, AppError> {
        Bot::open_as(config, llm, clock, &Speaker::default(), None).await
    }

    /// Opens the workspace of `config` in the scope of `speaker` talking in session `key`
    /// (`None`: the agent's scope, for an operator's command).
    pub async fn open_as(
        config: Config,
        llm: Arc<dyn LlmClient>,
        clock: Arc<dyn Clock>,
        speaker: &Speaker,
        key: Option<&SessionKey>,
    ) -> Result<Bot, AppError> {
        let workspace = config.workspace.clone();
        std::fs::create_dir_all(&workspace).map_err(|e| AppError::Config {
            key: "workspace".into(),
            file: config.source.clone(),
            reason: format!("{} cannot be created: {e}", workspace.display()),
        })?;
        let assembled = assemble(&config, llm.clone(), clock.clone()).await?;
        let storage = assembled.storage().clone();
        let (scope, no_memory) = match key {
            None => (ScopeKey::local(Subject::Agent), None),
            Some(key) => match assembled.recall(speaker, key).await? {
                Recall::Memory(memory) => (memory.scope.clone(), None),
                // The command still needs a memory to report on: the agent's; turns run
                // without any.
                Recall::Without(reason) => (ScopeKey::local(Subject::Agent), Some(reason)),
            },
        };
        let agent = assembled.agent().clone();
        let memory = agent.memory(&scope).await?;
        let schedule = config.dream.schedule()?;
        Ok(Bot {
            memory,
            no_memory,
            config,
            agent,
            storage,
            schedule,
            search: assembled
                .search()
                .cloned()
                .ok_or_else(|| AppError::Usage("memory search is off".into()))?,
            assembled,
        })
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.config.workspace
    }

    /// The prompt for `text` in session `key`, as the next turn would send it.
    pub async fn build_prompt(
        &self,
        key: &SessionKey,
        text: &str,
    ) -> Result<nanobot_context_builder::BuiltPrompt, AppError> {
        Ok(self.agent.build_prompt(&self.memory, key, text).await?)
    }

    /// One turn (the library turn, [`Agent::turn`]); without memory when the speaker could
    /// not be identified.
    pub async fn turn(
        &self,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, AppError> {
        Ok(match self.no_memory {
            Some(_) => self.agent.turn_without_memory(key, text, sink).await?,
            None => self.agent.turn(&self.memory, key, text, sink).await?,
        })
    }

    /// Waits for background consolidations and saves every session (before exiting).
    pub async fn finish(&self) -> Result<(), AppError> {
        Ok(self.agent.finish().await?)
    }

    /// `/new`: the live part is archived into the journal, then the session starts over.
    pub async fn new_session(&self, key: &SessionKey) -> Result<String, AppError> {
        if self.no_memory.is_some() {
            return Ok(
                "This chat has no memory (its sender is unknown); nothing to archive.".into(),
            );
        }
        Ok(self.commands().new_session(key).await?)
    }

    /// The chat's commands and the operator's reports on this command's scope.
    pub fn commands(&self) -> nanobot_memory::ScopeCommands<'_> {
        nanobot_memory::ScopeCommands::new(&self.agent, &self.memory)
            .with_search(&self.search)
            .schedule(self.schedule.as_ref())
            .workspace(&self.config.workspace)
    }
}

/// The library bot of `config`: its storage, model, settings, search and isolation.
async fn assemble(
    config: &Config,
    llm: Arc<dyn LlmClient>,
    clock: Arc<dyn Clock>,
) -> Result<nanobot_memory::Bot, AppError> {
    let turn_wait = Duration::from_secs(config.storage.turn_wait_secs);
    let settings = config
        .llm
        .agent_settings(&config.memory, &config.dream, turn_wait);
    let mut context = config.llm.context(Host::this_build());
    // This bot offers the model no tools, so the tool notes are left out.
    context.tool_contract = false;
    let bot_ids = config
        .memory
        .bot_keys()
        .map_err(|e| config.invalid(e.within("memory")))?;
    let mut builder = nanobot_memory::Bot::builder()
        .llm(llm)
        .clock(clock)
        .settings(settings)
        .context(context)
        .isolation(config.memory.isolation)
        .bot_ids(bot_ids)
        .progress(progress_printer());
    if let Some(embedder) = embedder(config)? {
        builder = builder.embedder(embedder, config.search.embed_per_search);
    }
    let builder = config.storage.open_in(builder, &config.workspace)?;
    builder.build().await.map_err(|e| match e {
        AssemblyError::Postgres(e) => crate::pg::store_error(config, e),
        other => other.into(),
    })
}

/// Dream's steps: on a terminal one line rewritten in place, otherwise plain lines (on
/// stderr, so scripted output stays clean).
fn progress_printer() -> nanobot_dream::Progress {
    use std::io::{IsTerminal, Write};
    let terminal = std::io::stderr().is_terminal();
    Arc::new(move |line: &str| {
        let mut err = std::io::stderr();
        if terminal {
            let _ = write!(err, "\r\x1b[2K[dream] {line}");
        } else {
            let _ = writeln!(err, "[dream] {line}");
        }
        let _ = err.flush();
    })
}

/// Clears the progress line on a terminal once the work is done.
pub fn clear_progress() {
    use std::io::{IsTerminal, Write};
    if std::io::stderr().is_terminal() {
        let mut err = std::io::stderr();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// Runs Dream on the bot's schedule until `stop` is notified (nothing when Dream is off);
/// `report` hears each scope's first line of what its run did.
pub fn spawn_dream_schedule(
    bot: Arc<Bot>,
    stop: Arc<tokio::sync::Notify>,
    report: impl Fn(&ScopeKey, String) + Send + Sync + 'static,
) {
    if let Some(schedule) = bot.schedule.clone() {
        let (agent, memory) = (bot.agent.clone(), bot.memory.clone());
        nanobot_memory::background::spawn_dream_schedule(agent, memory, schedule, stop, report);
    }
}

//! The stack, wired: the file backend of every scope (sessions, the journal and documents on
//! files, versions in git), the identity resolver, the model, and the library turn
//! (`nanobot-turn`) over them. The turn itself lives in that crate; this file only chooses
//! and opens backends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Offset;
use context_builder::{BuilderConfig, ContextBuilder, Host};
use dream::DreamSchedule;
use index_sqlite::SqliteIndex;
use llm_port::{Cl100kBase, Clock, Embedder, LlmClient, TextSink, TokenCounter};
use memory_core::ConsolidationConfig;
use memory_index::{LazyIndex, SearchIndex};
use memory_scope::{
    ChatType, FileLinks, IdentityResolver, Inbound, LinkTable, ModeResolver, NoMemoryReason,
    Resolution, ScopeDirs, ScopeKey, Subject,
};
use memory_store::{
    FileDocuments, FileJournal, FileLease, GitVersions, MemoryDocuments, MemoryVersions,
    ScopedDocuments,
};
use nanobot_turn::{
    Agent, AgentSettings, MemoryBackend, ScopeMemory, ScopeStores, SearchMemory, TurnError,
};
use prompt_inputs::{PromptFiles, PromptLoader};
use session_store::{Durability, FileSessionStore, FileStoreOptions, SessionKey, SessionManager};

pub use nanobot_turn::{
    BACKGROUND_FAILURE_KEY, RAW_ARCHIVE_KEY, TurnReport, background_failure, last_raw_archive,
    record_background_failure, record_raw_archives,
};

use crate::config::{Config, Provider};
use crate::error::AppError;

/// Who is talking, as the command line says (`--user`, `--chat`, `--group`); a channel
/// adapter fills the same from its platform.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Speaker {
    /// `platform:id`, or a bare id on the `cli` platform.
    pub user: Option<String>,
    /// The chat id (on the user's platform); a direct chat's id is the user's by default.
    pub chat: Option<String>,
    /// Whether the chat is a group.
    pub group: bool,
}

impl Speaker {
    /// The message's origin as the resolver reads it, for a turn in session `key`.
    pub fn inbound(&self, key: &SessionKey) -> Inbound {
        let (platform, sender) = match &self.user {
            Some(user) => match user.split_once(':') {
                Some((platform, id)) => (platform.to_owned(), Some(id.to_owned())),
                None => ("cli".to_owned(), Some(user.clone())),
            },
            None => (key.channel().to_owned(), None),
        };
        let chat_id = self
            .chat
            .clone()
            .or_else(|| sender.clone())
            .unwrap_or_else(|| {
                key.as_str()
                    .split_once(':')
                    .map_or(key.as_str(), |(_, c)| c)
                    .to_owned()
            });
        Inbound {
            channel: platform,
            sender_id: sender,
            chat_id,
            chat_type: if self.group {
                ChatType::Group
            } else {
                ChatType::Direct
            },
        }
    }
}

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
    /// Operator links between identities.
    pub links: Arc<dyn LinkTable>,
    /// The identity resolver (isolation mode, links, fail closed).
    pub resolver: Arc<ModeResolver>,
    /// The memory this command works in.
    pub memory: Arc<ScopeMemory>,
    /// Why turns run without memory, when they do (fail closed).
    pub no_memory: Option<NoMemoryReason>,
    /// The Dream schedule (`None` when disabled).
    pub schedule: Option<DreamSchedule>,
    /// The model.
    pub llm: Arc<dyn LlmClient>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The prompt builder.
    pub builder: Arc<ContextBuilder>,
    /// The `search_memory` tool the turns offer (with the configured embedder, if any).
    pub search: Arc<SearchMemory>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("config", &self.config)
            .field("scope", &self.memory.scope)
            .finish_non_exhaustive()
    }
}

/// The model the configuration names.
pub fn model_client(config: &Config) -> Result<Arc<dyn LlmClient>, AppError> {
    let timeouts = llm_http::Timeouts {
        connect: Duration::from_secs(10),
        idle: Duration::from_secs(config.request_timeout_secs),
    };
    let client: Arc<dyn LlmClient> = match config.provider {
        Provider::OpenAi | Provider::Local => Arc::new(llm_openai::OpenAiClient::new(
            llm_openai::OpenAiConfig::new(&config.base_url, &config.model)
                .with_api_key(config.api_key.clone())
                .streaming(config.stream)
                .with_context_window(&config.model, saturating_u32(config.context_window))
                .with_timeouts(timeouts)
                .with_native_tools(config.native_tools),
        )?),
        Provider::Anthropic => {
            let mut anthropic = llm_anthropic::AnthropicConfig::new(&config.model)
                .with_base_url(&config.base_url)
                .with_api_key(config.api_key.clone())
                .streaming(config.stream)
                .with_timeouts(timeouts);
            anthropic.context_window = saturating_u32(config.context_window);
            anthropic.default_max_tokens = saturating_u32(config.max_output_tokens);
            Arc::new(llm_anthropic::AnthropicClient::new(anthropic)?)
        }
    };
    Ok(Arc::new(llm_port::Retry::new(
        llm_port::Timeout::new(
            client,
            Duration::from_secs(config.request_timeout_secs),
            Arc::new(llm_port::TokioClock::system()),
        ),
        llm_port::RetryPolicy::default(),
        Arc::new(llm_port::TokioClock::system()),
    )))
}

/// The embedder of memory search's vector lane, when the configuration names one.
pub fn embedder(config: &Config) -> Result<Option<Arc<dyn Embedder>>, AppError> {
    let Some(embeddings) = &config.embeddings else {
        return Ok(None);
    };
    let timeouts = llm_http::Timeouts {
        connect: Duration::from_secs(10),
        idle: Duration::from_secs(config.request_timeout_secs),
    };
    let mut openai = llm_openai::OpenAiConfig::new(&embeddings.base_url, &embeddings.model)
        .with_api_key(embeddings.api_key.clone())
        .with_timeouts(timeouts);
    openai.provider = "the embeddings server".into();
    let embedder = llm_openai::OpenAiEmbedder::new(openai, embeddings.dimensions).map_err(|e| {
        AppError::Config {
            key: "search.embeddings_url".into(),
            file: config.source.clone(),
            reason: e.to_string(),
        }
    })?;
    Ok(Some(Arc::new(embedder)))
}

/// Every scope's memory on files: the agent scope is the workspace as nanobot-ai lays it
/// out, byte for byte; any other scope is a nanobot-shaped directory under `scopes/`.
pub struct FileBackend {
    workspace: PathBuf,
    dirs: ScopeDirs,
    options: FileStoreOptions,
    nanobot_layout: bool,
    sessions_root: PathBuf,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent_documents: Arc<FileDocuments>,
    agent_files: Arc<PromptLoader>,
}

impl FileBackend {
    /// The scopes of the workspace `config` names (which must exist), on files.
    pub fn open(
        config: &Config,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<FileBackend, AppError> {
        let workspace = config.workspace.clone();
        let durability = match config.durability.as_str() {
            "none" => Durability::None,
            "always" => Durability::Always,
            _ => Durability::TurnEnd,
        };
        // An existing nanobot-ai workspace keeps its sessions where nanobot-ai put them.
        let nanobot_layout = match config.layout.as_str() {
            "nanobot" => true,
            "auto" => workspace.join(".nanobot/workspace-id").is_file(),
            _ => false,
        };
        let agent_documents = Arc::new(FileDocuments::open(&workspace)?);
        Ok(FileBackend {
            dirs: ScopeDirs::new(&workspace),
            options: FileStoreOptions {
                durability,
                clock: clock.clone(),
            },
            nanobot_layout,
            sessions_root: config.sessions_root.clone(),
            clock,
            counter,
            agent_documents: agent_documents.clone(),
            agent_files: Arc::new(PromptLoader::new(agent_documents).with_agent_dir(&workspace)?),
            workspace,
        })
    }

    fn open_agent_sessions(&self) -> Result<FileSessionStore, AppError> {
        Ok(if self.nanobot_layout {
            FileSessionStore::open_nanobot(
                &self.workspace,
                &self.sessions_root,
                self.options.clone(),
            )?
        } else {
            FileSessionStore::open_workspace(&self.workspace, self.options.clone())?
        })
    }

    fn open_scope(&self, scope: &ScopeKey) -> Result<ScopeStores, AppError> {
        let root = self.dirs.open(scope)?;
        let agent = scope.subject.is_agent();
        let store = if agent {
            self.open_agent_sessions()?
        } else {
            FileSessionStore::open_workspace(&root, self.options.clone())?
        };
        let sessions = Arc::new(
            SessionManager::new(Arc::new(store), self.clock.clone(), self.counter.clone())
                .with_recorded_token_counts(true),
        );
        let journal = Arc::new(FileJournal::open_with(
            &root,
            self.clock.clone(),
            memory_store::JournalDurability::default(),
        )?);
        // A user's or a chat's documents: its own private files, the agent's shared ones
        // read-only; its prompts read both through the port.
        let (documents, prompt_files): (Arc<dyn MemoryDocuments>, Arc<dyn PromptFiles>) = if agent {
            (self.agent_documents.clone(), self.agent_files.clone())
        } else {
            let documents: Arc<dyn MemoryDocuments> = Arc::new(ScopedDocuments::new(
                Arc::new(FileDocuments::open(&root)?),
                self.agent_documents.clone(),
            ));
            let files = PromptLoader::new(documents.clone()).with_agent_dir(&self.workspace)?;
            (documents, Arc::new(files))
        };
        let versions: Result<Arc<dyn MemoryVersions>, String> = GitVersions::open(&root)
            .map(|g| Arc::new(g) as Arc<dyn MemoryVersions>)
            .map_err(|e| e.to_string());
        // The search index: a derived SQLite file in the scope directory, opened when the
        // scope's memory is first searched (nanobot-ai never reads it).
        let index_dir = root.clone();
        let index = LazyIndex::new(Box::new(move || {
            let index = SqliteIndex::open_in(&index_dir)?;
            // Derived data: a damaged file was set aside and is fed again by the next
            // indexing pass; the user hears of it, nothing fails.
            for repair in index.repairs() {
                tracing::warn!(
                    path = %repair.path.display(),
                    "the search index was rebuilt: {}",
                    repair.reason
                );
            }
            Ok(Arc::new(index) as Arc<dyn SearchIndex>)
        }));
        Ok(ScopeStores::stepwise(
            sessions,
            journal,
            documents,
            prompt_files,
            versions,
            Arc::new(FileLease::open(&root)?),
        )
        .with_search_index(Arc::new(index)))
    }
}

#[async_trait]
impl MemoryBackend for FileBackend {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        self.open_scope(scope).map_err(|e| match e {
            AppError::Sessions(e) => TurnError::Sessions(e),
            AppError::Memory(e) => TurnError::Memory(e),
            AppError::Scope(e) => TurnError::Scope(e),
            other => TurnError::Memory(memory_store::MemoryError::backend(other.to_string())),
        })
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        let mut due = Vec::new();
        if FileJournal::may_have_unread_entries(&self.workspace)? {
            due.push(ScopeKey::local(Subject::Agent));
        }
        for dir in self.dirs.list()? {
            if FileJournal::may_have_unread_entries(&dir.path)? {
                due.push(ScopeKey::local(dir.subject));
            }
        }
        Ok(due)
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        self.agent_files.clone()
    }
}

/// Where a bot's scopes are kept: the scope directories of the workspace, or a database.
pub enum Storage {
    /// `<workspace>` and `<workspace>/scopes/`.
    Files(ScopeDirs),
    /// A PostgreSQL schema.
    Postgres(store_postgres::PgStore),
}

/// What one scope holds, for `nanobot scopes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSummary {
    /// Whose memory.
    pub subject: Subject,
    /// Where it is kept (a directory, or the database's scope).
    pub location: String,
    /// Its sessions.
    pub sessions: usize,
    /// The latest journal cursor.
    pub entries: u64,
    /// Entries Dream has not read.
    pub unread: u64,
}

impl Storage {
    /// Every scope other than the agent's, with what it holds.
    pub async fn scopes(&self) -> Result<Vec<ScopeSummary>, AppError> {
        match self {
            Storage::Files(dirs) => dirs
                .list()?
                .into_iter()
                .map(|dir| {
                    let (sessions, latest, dream) = crate::scopes::holdings(&dir.path)?;
                    let entries = latest.unwrap_or(0);
                    Ok(ScopeSummary {
                        location: dir.path.display().to_string(),
                        subject: dir.subject,
                        sessions,
                        entries,
                        unread: entries.saturating_sub(dream),
                    })
                })
                .collect(),
            Storage::Postgres(store) => Ok(store
                .scopes()
                .await
                .map_err(|e| AppError::Storage(e.to_string()))?
                .into_iter()
                .filter(|s| !s.key.subject.is_agent())
                .map(|s| ScopeSummary {
                    location: format!("schema {}, scope {}", store.schema().name(), s.key),
                    subject: s.key.subject,
                    sessions: usize::try_from(s.sessions).unwrap_or(usize::MAX),
                    entries: s.latest,
                    unread: s.latest.saturating_sub(s.dream_cursor),
                })
                .collect()),
        }
    }

    /// The scope of `subject` as listed, `None` when it holds nothing yet.
    pub async fn scope(&self, subject: &Subject) -> Result<Option<ScopeSummary>, AppError> {
        Ok(self
            .scopes()
            .await?
            .into_iter()
            .find(|s| s.subject == *subject))
    }

    /// Erases the scope of `subject` and everything in it; whether there was one.
    pub async fn erase(&self, subject: &Subject) -> Result<bool, AppError> {
        match self {
            Storage::Files(dirs) => Ok(dirs.delete(subject)?),
            Storage::Postgres(store) => store
                .delete_scope(&ScopeKey::local(subject.clone()))
                .await
                .map_err(|e| AppError::Storage(e.to_string())),
        }
    }
}

/// The agent's settings from the configuration.
fn agent_settings(config: &Config) -> AgentSettings {
    let mut settings = AgentSettings::new(
        config.model.clone(),
        config.context_window,
        config.max_output_tokens,
    );
    settings.temperature = config.temperature;
    settings.turn_wait = Duration::from_secs(config.turn_wait_secs);
    let mut consolidation = ConsolidationConfig::new(
        config.model.clone(),
        config.context_window,
        config.max_output_tokens,
    );
    consolidation.ratio = config.consolidation_ratio;
    consolidation.structured_first = config.archive_with_schema;
    consolidation.temperature = config.temperature;
    // An archive call may take as long as any other call to this model.
    consolidation.call_timeout = Duration::from_secs(config.request_timeout_secs);
    settings.consolidation = consolidation;
    let dream = &mut settings.dream;
    dream.max_steps = config.dream_max_steps;
    dream.mode = config.dream_mode;
    dream.max_tokens = config.dream_max_tokens;
    dream.batch_entries = config.dream_batch_entries;
    // Dream writes whole files: it needs more room to answer than a chat turn.
    dream.max_output_tokens = saturating_u32(config.max_output_tokens.max(1_024));
    dream.batch_tokens = (config.context_window / 3).max(256);
    dream.prompt_file_chars = (config.context_window).clamp(1_000, 16_000);
    settings.dream_enabled = config.dream_enabled;
    settings.idle_ttl = (config.idle_ttl_minutes > 0)
        .then(|| Duration::from_secs(config.idle_ttl_minutes.saturating_mul(60)));
    settings
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
        let counter: Arc<dyn TokenCounter> = Arc::new(Cl100kBase);
        let (backend, storage, links): (Arc<dyn MemoryBackend>, Storage, Arc<dyn LinkTable>) =
            if config.storage == "postgres" {
                let store = crate::pg::connect(&config).await?;
                let backend = crate::pg::PgBackend::open(
                    store.clone(),
                    &workspace,
                    clock.clone(),
                    counter.clone(),
                )
                .await?;
                (
                    Arc::new(backend),
                    Storage::Postgres(store.clone()),
                    Arc::new(store.links()),
                )
            } else {
                (
                    Arc::new(FileBackend::open(&config, clock.clone(), counter.clone())?),
                    Storage::Files(ScopeDirs::new(&workspace)),
                    Arc::new(FileLinks::new(&workspace)),
                )
            };
        let builder = Arc::new(ContextBuilder::new(
            builder_config(&config),
            counter.clone(),
        ));
        let mut search = SearchMemory::new(counter.clone());
        if let Some(embedder) = embedder(&config)? {
            search = search.with_embedder(embedder, config.embed_per_search);
        }
        let search = Arc::new(search);
        let agent = Arc::new(
            Agent::new(
                agent_settings(&config),
                llm.clone(),
                builder.clone(),
                backend,
                clock.clone(),
                counter.clone(),
            )
            .with_progress(progress_printer())
            .with_tool(search.clone()),
        );
        let resolver = Arc::new(
            ModeResolver::new(config.isolation, links.clone()).with_bot_ids(config.bot_ids.clone()),
        );
        let (scope, no_memory) = match key {
            None => (ScopeKey::local(Subject::Agent), None),
            Some(key) => match resolver.resolve(&speaker.inbound(key)).await? {
                Resolution::Memory(scope) => (scope, None),
                // The command still needs a memory to report on: the agent's; turns run
                // without any.
                Resolution::NoMemory(reason) => (ScopeKey::local(Subject::Agent), Some(reason)),
            },
        };
        let memory = agent.memory(&scope).await?;
        let schedule = if config.dream_enabled {
            Some(DreamSchedule::from_settings(
                config.dream_interval_hours,
                config.dream_cron.as_deref(),
                chrono::FixedOffset::east_opt(0).unwrap_or_else(|| chrono::Utc.fix()),
            )?)
        } else {
            None
        };
        Ok(Bot {
            memory,
            no_memory,
            config,
            agent,
            storage,
            links,
            resolver,
            schedule,
            llm,
            clock,
            builder,
            search,
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
    ) -> Result<context_builder::BuiltPrompt, AppError> {
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
        Ok(self.agent.new_session(&self.memory, key).await?)
    }
}

/// The context builder's settings for this app.
fn builder_config(config: &Config) -> BuilderConfig {
    // This bot offers the model no tools, so the tool notes are left out.
    let mut builder_config = BuilderConfig::new(Host::this_build());
    builder_config.tool_contract = false;
    // The builder's caps suit large windows; a small window gets proportional ones, so
    // unprocessed history or a grown MEMORY.md cannot fill it.
    let window = config.context_window;
    builder_config.limits.recent_history_tokens = (window / 5).clamp(200, 8_000);
    builder_config.limits.memory_tokens = (window / 4).clamp(400, 16_000);
    builder_config.limits.bootstrap_file_tokens = (window / 8).clamp(200, 8_000);
    builder_config
}

/// Dream's steps: on a terminal one line rewritten in place, otherwise plain lines (on
/// stderr, so scripted output stays clean).
fn progress_printer() -> dream::Progress {
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

/// A `u32` setting from a `usize` one, saturating instead of wrapping.
fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Runs Dream on the bot's schedule until `stop` is notified: at each due time, every scope
/// with unread history gets its run (idle scopes cost nothing); `report` hears each scope's
/// first line of what its run did (nothing for a run with nothing to do).
pub fn spawn_dream_schedule(
    bot: Arc<Bot>,
    stop: Arc<tokio::sync::Notify>,
    report: impl Fn(&ScopeKey, String) + Send + Sync + 'static,
) {
    let Some(schedule) = bot.schedule.clone() else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let now = bot.clock.now();
            let Ok(Some(next)) = bot.memory.dream.next_run(&schedule, now).await else {
                return;
            };
            let wait = (next - now).to_std().unwrap_or_default();
            tokio::select! {
                () = stop.notified() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let Ok(results) = bot.agent.dream_tick(dream::Trigger::Scheduled).await else {
                continue;
            };
            for (scope, result) in results {
                let line = match result {
                    Ok(run) if run.status == dream::RunStatus::NothingToDo => continue,
                    Ok(run) => dream::format::run_reply(&run)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_owned(),
                    Err(e) => format!("failed: {e}"),
                };
                report(&scope, line);
            }
        }
    });
}

//! [`BotBuilder`]: a bot's parts chosen in a few calls (storage, model, isolation, search)
//! and assembled as the `nanobot` program assembles its own.

use std::path::PathBuf;
use std::sync::Arc;

use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_llm_port::{Cl100kBase, Clock, Embedder, LlmClient, TokenCounter, TokioClock};
use nanobot_memory_scope::{InMemoryLinks, IsolationMode, LinkTable, ModeResolver, UserKey};
#[cfg(feature = "postgres")]
use nanobot_session_store::Durability;
use nanobot_turn::{Agent, AgentSettings, InMemoryBackend, MemoryBackend, SearchMemory};

use crate::{AssemblyError, Bot, Storage};

/// Where the builder keeps memory.
enum StorageChoice {
    InMemory,
    #[cfg(feature = "files")]
    Files {
        workspace: PathBuf,
        options: crate::FileOptions,
    },
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        schema: String,
        durability: Durability,
    },
    Custom {
        backend: Arc<dyn MemoryBackend>,
        links: Arc<dyn LinkTable>,
    },
}

/// Which model the bot talks to.
enum ModelChoice {
    Client(Arc<dyn LlmClient>),
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    Options(crate::ModelOptions),
}

/// Assembles a [`Bot`]; see the crate's README for a whole bot.
pub struct BotBuilder {
    storage: StorageChoice,
    agent_dir: Option<PathBuf>,
    model: Option<ModelChoice>,
    settings: Option<AgentSettings>,
    context: Option<BuilderConfig>,
    isolation: IsolationMode,
    bot_ids: Vec<UserKey>,
    search: bool,
    embedder: Option<(Arc<dyn Embedder>, usize)>,
    #[cfg(feature = "embeddings")]
    embeddings: Option<(crate::EmbeddingOptions, usize)>,
    clock: Option<Arc<dyn Clock>>,
    counter: Option<Arc<dyn TokenCounter>>,
    progress: Option<nanobot_dream::Progress>,
}

impl Default for BotBuilder {
    fn default() -> Self {
        BotBuilder {
            storage: StorageChoice::InMemory,
            agent_dir: None,
            model: None,
            settings: None,
            context: None,
            isolation: IsolationMode::Workspace,
            bot_ids: Vec::new(),
            search: true,
            embedder: None,
            #[cfg(feature = "embeddings")]
            embeddings: None,
            clock: None,
            counter: None,
            progress: None,
        }
    }
}

impl std::fmt::Debug for BotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotBuilder")
            .field("isolation", &self.isolation)
            .field("search", &self.search)
            .finish_non_exhaustive()
    }
}

impl BotBuilder {
    /// Every scope in memory (the default): for tests and bots that remember nothing.
    pub fn in_memory(mut self) -> Self {
        self.storage = StorageChoice::InMemory;
        self
    }

    /// Every scope on files in `workspace` (created when missing), in nanobot-ai's format.
    #[cfg(feature = "files")]
    pub fn files(self, workspace: impl Into<PathBuf>) -> Self {
        self.files_with(workspace, crate::FileOptions::default())
    }

    /// [`BotBuilder::files`] with options (durability, nanobot-ai's session layout).
    #[cfg(feature = "files")]
    pub fn files_with(
        mut self,
        workspace: impl Into<PathBuf>,
        options: crate::FileOptions,
    ) -> Self {
        self.storage = StorageChoice::Files {
            workspace: workspace.into(),
            options,
        };
        self
    }

    /// Every scope in the schema `nanobot` of the PostgreSQL database at `url`.
    #[cfg(feature = "postgres")]
    pub fn postgres(self, url: impl Into<String>) -> Self {
        self.postgres_with(url, "nanobot", Durability::TurnEnd)
    }

    /// [`BotBuilder::postgres`] in `schema`, with `durability` for message appends.
    #[cfg(feature = "postgres")]
    pub fn postgres_with(
        mut self,
        url: impl Into<String>,
        schema: impl Into<String>,
        durability: Durability,
    ) -> Self {
        self.storage = StorageChoice::Postgres {
            url: url.into(),
            schema: schema.into(),
            durability,
        };
        self
    }

    /// A backend of your own (sessions, journal and documents wherever you keep them),
    /// with the operator's identity links kept in memory.
    pub fn backend(self, backend: Arc<dyn MemoryBackend>) -> Self {
        self.backend_with_links(backend, Arc::new(InMemoryLinks::new()))
    }

    /// [`BotBuilder::backend`] with the identity links kept in `links`.
    pub fn backend_with_links(
        mut self,
        backend: Arc<dyn MemoryBackend>,
        links: Arc<dyn LinkTable>,
    ) -> Self {
        self.storage = StorageChoice::Custom { backend, links };
        self
    }

    /// The directory of `AGENTS.md` and the built-in skills, for a bot whose memory is
    /// not on files (on files it is the workspace).
    pub fn agent_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.agent_dir = Some(dir.into());
        self
    }

    /// An OpenAI-compatible server at `base_url` serving `model`, with the API key from
    /// `OPENAI_API_KEY` when it is set.
    #[cfg(feature = "openai")]
    pub fn openai(self, base_url: &str, model: &str) -> Self {
        let key = std::env::var("OPENAI_API_KEY")
            .ok()
            .and_then(nanobot_llm_http::ApiKey::new);
        self.model(crate::ModelOptions::openai(base_url, model).api_key(key))
    }

    /// Anthropic's API serving `model`, with the key from `ANTHROPIC_API_KEY`.
    #[cfg(feature = "anthropic")]
    pub fn anthropic(self, model: &str) -> Self {
        let key = std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .and_then(nanobot_llm_http::ApiKey::new);
        self.model(crate::ModelOptions::anthropic(model).api_key(key))
    }

    /// The model `options` describe (with a per-call timeout and retries); its window
    /// sizes the agent's budgets unless [`BotBuilder::settings`] says otherwise.
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    pub fn model(mut self, options: crate::ModelOptions) -> Self {
        self.model = Some(ModelChoice::Options(options));
        self
    }

    /// A model client of your own (a scripted one in tests, a provider we do not ship).
    pub fn llm(mut self, client: Arc<dyn LlmClient>) -> Self {
        self.model = Some(ModelChoice::Client(client));
        self
    }

    /// Whose memory a turn uses: one for the whole bot (the default), one per user, or
    /// one per chat.
    pub fn isolation(mut self, mode: IsolationMode) -> Self {
        self.isolation = mode;
        self
    }

    /// Identities of bots on the channels, which never get a memory of their own.
    pub fn bot_ids(mut self, ids: Vec<UserKey>) -> Self {
        self.bot_ids = ids;
        self
    }

    /// Whether turns offer the model the `search_memory` tool (default: yes, where the
    /// backend keeps a search index).
    pub fn search(mut self, on: bool) -> Self {
        self.search = on;
        self
    }

    /// Search by meaning too, with `embedder`, embedding at most `per_search` missing
    /// vectors during one search.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>, per_search: usize) -> Self {
        self.embedder = Some((embedder, per_search));
        self
    }

    /// Search by meaning too, with an OpenAI-compatible embeddings server.
    #[cfg(feature = "embeddings")]
    pub fn embeddings(mut self, options: crate::EmbeddingOptions) -> Self {
        self.embeddings = Some((options, nanobot_turn::DEFAULT_EMBED_PER_SEARCH));
        self
    }

    /// The agent's settings whole (window, budgets, consolidation, Dream).
    pub fn settings(mut self, settings: AgentSettings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// How prompts are built (limits, host line, tool notes).
    pub fn context(mut self, config: BuilderConfig) -> Self {
        self.context = Some(config);
        self
    }

    /// The clock (default: the system's, through tokio).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The token counter (default: `cl100k_base`).
    pub fn counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// Where Dream reports its steps.
    pub fn progress(mut self, progress: nanobot_dream::Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Opens the storage, builds the model client and assembles the bot.
    pub async fn build(self) -> Result<Bot, AssemblyError> {
        let clock = self
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(TokioClock::system()));
        let counter = self.counter.clone().unwrap_or_else(|| Arc::new(Cl100kBase));
        let (llm, settings) = self.model_and_settings()?;
        let (backend, links, storage) = self.open_storage(&clock, &counter).await?;
        let search = self.search_tool(&counter)?;
        let context = self
            .context
            .unwrap_or_else(|| BuilderConfig::new(Host::this_build()));
        let mut agent = Agent::new(
            settings,
            llm,
            Arc::new(ContextBuilder::new(context, counter.clone())),
            backend,
            clock,
            counter,
        );
        if let Some(progress) = self.progress {
            agent = agent.with_progress(progress);
        }
        if let Some(search) = &search {
            agent = agent.with_tool(search.clone());
        }
        let resolver = ModeResolver::new(self.isolation, links.clone()).with_bot_ids(self.bot_ids);
        Ok(Bot {
            agent: Arc::new(agent),
            resolver: Arc::new(resolver),
            links,
            search,
            storage,
        })
    }

    fn model_and_settings(&self) -> Result<(Arc<dyn LlmClient>, AgentSettings), AssemblyError> {
        let incomplete = || AssemblyError::Incomplete {
            what: "no model: call .openai(url, model), .anthropic(model), .model(options) or \
                   .llm(client)"
                .into(),
        };
        let (llm, defaults) = match self.model.as_ref().ok_or_else(incomplete)? {
            ModelChoice::Client(client) => {
                (client.clone(), AgentSettings::new("default", 65_536, 8_192))
            }
            #[cfg(any(feature = "openai", feature = "anthropic"))]
            ModelChoice::Options(options) => (
                crate::models::model_client(options)?,
                AgentSettings::new(
                    options.model.clone(),
                    options.context_window,
                    options.max_output_tokens,
                ),
            ),
        };
        Ok((llm, self.settings.clone().unwrap_or(defaults)))
    }

    async fn open_storage(
        &self,
        clock: &Arc<dyn Clock>,
        counter: &Arc<dyn TokenCounter>,
    ) -> Result<(Arc<dyn MemoryBackend>, Arc<dyn LinkTable>, Storage), AssemblyError> {
        match &self.storage {
            StorageChoice::InMemory => Ok((
                Arc::new(InMemoryBackend::new(clock.clone(), counter.clone())),
                Arc::new(InMemoryLinks::new()),
                Storage::InMemory,
            )),
            #[cfg(feature = "files")]
            StorageChoice::Files { workspace, options } => {
                create_dir(workspace)?;
                let backend = Arc::new(crate::FileBackend::open(
                    workspace,
                    options,
                    clock.clone(),
                    counter.clone(),
                )?);
                Ok((
                    backend.clone(),
                    Arc::new(nanobot_memory_scope::FileLinks::new(workspace)),
                    Storage::Files(backend),
                ))
            }
            #[cfg(feature = "postgres")]
            StorageChoice::Postgres {
                url,
                schema,
                durability,
            } => {
                let store = crate::postgres::connect(url, schema, *durability).await?;
                if let Some(dir) = &self.agent_dir {
                    create_dir(dir)?;
                }
                let backend = crate::PgBackend::open(
                    store.clone(),
                    self.agent_dir.as_deref(),
                    clock.clone(),
                    counter.clone(),
                )
                .await?;
                Ok((
                    Arc::new(backend),
                    Arc::new(store.links()),
                    Storage::Postgres(store),
                ))
            }
            StorageChoice::Custom { backend, links } => {
                Ok((backend.clone(), links.clone(), Storage::Custom))
            }
        }
    }

    fn search_tool(
        &self,
        counter: &Arc<dyn TokenCounter>,
    ) -> Result<Option<Arc<SearchMemory>>, AssemblyError> {
        if !self.search {
            return Ok(None);
        }
        let mut search = SearchMemory::new(counter.clone());
        #[cfg(feature = "embeddings")]
        if let Some((options, per_search)) = &self.embeddings {
            search = search.with_embedder(crate::embeddings::embedder(options)?, *per_search);
        }
        if let Some((embedder, per_search)) = &self.embedder {
            search = search.with_embedder(embedder.clone(), *per_search);
        }
        Ok(Some(Arc::new(search)))
    }
}

/// Creates `dir` when it is missing, saying which directory could not be made.
#[cfg(any(feature = "files", feature = "postgres"))]
fn create_dir(dir: &std::path::Path) -> Result<(), AssemblyError> {
    std::fs::create_dir_all(dir).map_err(|e| AssemblyError::io(dir, "cannot be created", e))
}

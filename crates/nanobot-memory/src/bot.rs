//! An assembled bot: the library turn over the chosen backend and model, with the identity
//! resolver in front, so a channel adapter only says who spoke, where, and what.

use std::sync::Arc;

use nanobot_context_builder::BuiltPrompt;
use nanobot_llm_port::TextSink;
use nanobot_memory_scope::{IdentityResolver, LinkTable, ModeResolver, Resolution, ScopeKey};
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, ScopeMemory, SearchMemory, TurnReport};

use crate::{AssemblyError, BotBuilder, Speaker};

/// Where a bot keeps its scopes, for the operations the turn does not cover (listing and
/// erasing scopes).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Storage {
    /// Every scope in memory: nothing outlives the process.
    InMemory,
    /// `<workspace>` and `<workspace>/scopes/`.
    #[cfg(feature = "files")]
    Files(Arc<crate::FileBackend>),
    /// A PostgreSQL schema.
    #[cfg(feature = "postgres")]
    Postgres(nanobot_store_postgres::PgStore),
    /// A backend the bot builder wrote.
    Custom,
}

/// Whose memory a turn works in, once the resolver has read the speaker.
#[derive(Clone)]
pub enum Recall {
    /// The scope's memory.
    Memory(Arc<ScopeMemory>),
    /// No memory: the speaker could not be identified (fail closed), for the reason given.
    Without(nanobot_memory_scope::NoMemoryReason),
}

/// A bot: one agent over every scope's memory, and the resolver that picks the scope.
pub struct Bot {
    pub(crate) agent: Arc<Agent>,
    pub(crate) resolver: Arc<ModeResolver>,
    pub(crate) links: Arc<dyn LinkTable>,
    pub(crate) search: Option<Arc<SearchMemory>>,
    pub(crate) storage: Storage,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("isolation", &self.resolver.mode())
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl Bot {
    /// A builder: choose storage and a model, then `build().await`.
    pub fn builder() -> BotBuilder {
        BotBuilder::default()
    }

    /// One turn of `speaker` in `session` (`channel:chat_id`): the prompt from that scope's
    /// memory, the model's answer, both saved, consolidation when the session outgrows
    /// its budget.
    pub async fn turn(
        &self,
        speaker: &Speaker,
        session: &str,
        text: &str,
    ) -> Result<TurnReport, AssemblyError> {
        let quiet: TextSink = Arc::new(|_: &str| {});
        self.turn_streaming(speaker, session, text, &quiet).await
    }

    /// [`Bot::turn`], with the answer's text handed to `sink` as the model writes it.
    pub async fn turn_streaming(
        &self,
        speaker: &Speaker,
        session: &str,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, AssemblyError> {
        let key = SessionKey::new(session)?;
        Ok(match self.recall(speaker, &key).await? {
            Recall::Memory(memory) => self.agent.turn(&memory, &key, text, sink).await?,
            Recall::Without(_) => self.agent.turn_without_memory(&key, text, sink).await?,
        })
    }

    /// The prompt the next turn of `speaker` in `session` would send for `text`, without
    /// calling the model or saving anything (what a bot's CI snapshots).
    pub async fn prompt(
        &self,
        speaker: &Speaker,
        session: &str,
        text: &str,
    ) -> Result<BuiltPrompt, AssemblyError> {
        let key = SessionKey::new(session)?;
        match self.recall(speaker, &key).await? {
            Recall::Memory(memory) => Ok(self.agent.build_prompt(&memory, &key, text).await?),
            Recall::Without(reason) => Err(AssemblyError::Incomplete {
                what: format!(
                    "{}: this speaker's turns run without memory",
                    reason.describe()
                ),
            }),
        }
    }

    /// The memory `speaker` talking in `session` works in, as the resolver decides.
    pub async fn recall(
        &self,
        speaker: &Speaker,
        key: &SessionKey,
    ) -> Result<Recall, AssemblyError> {
        Ok(match self.resolver.resolve(&speaker.inbound(key)).await? {
            Resolution::Memory(scope) => Recall::Memory(self.agent.memory(&scope).await?),
            Resolution::NoMemory(reason) => Recall::Without(reason),
        })
    }

    /// The memory of `scope` (the agent's: `ScopeKey::local(Subject::Agent)`).
    pub async fn memory(&self, scope: &ScopeKey) -> Result<Arc<ScopeMemory>, AssemblyError> {
        Ok(self.agent.memory(scope).await?)
    }

    /// Waits for background consolidations and saves every session (call before exit).
    pub async fn finish(&self) -> Result<(), AssemblyError> {
        Ok(self.agent.finish().await?)
    }

    /// The library turn, for everything this facade does not wrap (Dream, `/new`, idle
    /// compaction, tools).
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The identity resolver.
    pub fn resolver(&self) -> &Arc<ModeResolver> {
        &self.resolver
    }

    /// The operator's identity links.
    pub fn links(&self) -> &Arc<dyn LinkTable> {
        &self.links
    }

    /// The `search_memory` tool the turns offer (`None`: search is off).
    pub fn search(&self) -> Option<&Arc<SearchMemory>> {
        self.search.as_ref()
    }

    /// Where the scopes are kept.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
}

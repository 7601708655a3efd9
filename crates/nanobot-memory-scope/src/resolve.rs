//! Which scope a turn's memory belongs to: the isolation mode and the identity resolver.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::error::ScopeError;
use crate::key::{ChatKey, ScopeKey, Subject, UserKey};
use crate::links::{LinkTable, canonical_user, links_in_force};

/// How an agent splits its memory (the `memory.isolation` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum IsolationMode {
    /// One memory for the whole agent, as nanobot has it (the default: nothing changes).
    #[default]
    Workspace,
    /// A direct message uses its sender's memory; a group chat uses the chat's, and no
    /// user's private files enter a group's prompt.
    User,
    /// Every chat has its own memory.
    Chat,
}

impl IsolationMode {
    /// `workspace`, `user` or `chat`.
    pub fn parse(text: &str) -> Option<IsolationMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "workspace" => Some(IsolationMode::Workspace),
            "user" => Some(IsolationMode::User),
            "chat" => Some(IsolationMode::Chat),
            _ => None,
        }
    }

    /// The name [`IsolationMode::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            IsolationMode::Workspace => "workspace",
            IsolationMode::User => "user",
            IsolationMode::Chat => "chat",
        }
    }
}

/// A direct conversation or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChatType {
    /// One person and the bot.
    #[default]
    Direct,
    /// Several people.
    Group,
}

/// What a channel says about an incoming message; the only input a scope is resolved from
/// (never the message text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The platform: `telegram`, `discord`, `cli`.
    pub channel: String,
    /// Who sent it, as the platform reports it (`None` when it does not).
    pub sender_id: Option<String>,
    /// The chat it came in.
    pub chat_id: String,
    /// Direct or group.
    pub chat_type: ChatType,
}

/// Why a turn runs without memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoMemoryReason {
    /// The channel did not say who sent the message.
    MissingSender,
    /// The sender is the bot itself (a bridge that reports the bot's id would otherwise
    /// merge everyone into one "user").
    BotSender,
}

impl NoMemoryReason {
    /// A sentence for logs and users.
    pub fn describe(self) -> &'static str {
        match self {
            NoMemoryReason::MissingSender => "the message names no sender",
            NoMemoryReason::BotSender => "the sender is the bot itself",
        }
    }
}

/// Where a turn's memory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// In this scope.
    Memory(ScopeKey),
    /// Nowhere: the turn runs, reads no memory and writes none (fail closed).
    NoMemory(NoMemoryReason),
}

/// Maps an incoming message onto the scope of its memory.
#[async_trait]
pub trait IdentityResolver: Send + Sync {
    /// The scope of `inbound`, or no memory.
    async fn resolve(&self, inbound: &Inbound) -> Result<Resolution, ScopeError>;
}

/// The default resolver: the isolation mode's table, operator links, and fail closed on a
/// missing sender or the bot's own id.
pub struct ModeResolver {
    mode: IsolationMode,
    tenant: String,
    agent: String,
    bot_ids: Vec<UserKey>,
    links: Arc<dyn LinkTable>,
    no_memory: AtomicU64,
}

impl std::fmt::Debug for ModeResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModeResolver")
            .field("mode", &self.mode)
            .field("bot_ids", &self.bot_ids)
            .field("no_memory", &self.no_memory)
            .finish_non_exhaustive()
    }
}

impl ModeResolver {
    /// A resolver for `mode` in the default tenant and agent, with `links`.
    pub fn new(mode: IsolationMode, links: Arc<dyn LinkTable>) -> Self {
        ModeResolver {
            mode,
            tenant: crate::key::DEFAULT_NAME.to_owned(),
            agent: crate::key::DEFAULT_NAME.to_owned(),
            bot_ids: Vec::new(),
            links,
            no_memory: AtomicU64::new(0),
        }
    }

    /// Scopes of `agent` of `tenant`.
    pub fn for_agent(mut self, tenant: &str, agent: &str) -> Result<Self, ScopeError> {
        let key = ScopeKey::new(tenant, agent, Subject::Agent)?;
        self.tenant = key.tenant;
        self.agent = key.agent;
        Ok(self)
    }

    /// The bot's own identities: a message from one of them gets no memory.
    pub fn with_bot_ids(mut self, ids: Vec<UserKey>) -> Self {
        self.bot_ids = ids;
        self
    }

    /// The mode.
    pub fn mode(&self) -> IsolationMode {
        self.mode
    }

    /// How many turns were resolved to no memory since this resolver was made.
    pub fn no_memory_count(&self) -> u64 {
        self.no_memory.load(Ordering::Relaxed)
    }

    fn scope(&self, subject: Subject) -> ScopeKey {
        ScopeKey {
            tenant: self.tenant.clone(),
            agent: self.agent.clone(),
            subject,
        }
    }

    fn refuse(&self, inbound: &Inbound, reason: NoMemoryReason) -> Resolution {
        let count = self.no_memory.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            channel = %inbound.channel,
            reason = reason.describe(),
            no_memory_turns = count,
            "turn runs without memory"
        );
        Resolution::NoMemory(reason)
    }

    async fn sender(
        &self,
        inbound: &Inbound,
    ) -> Result<Result<UserKey, NoMemoryReason>, ScopeError> {
        let Some(id) = inbound
            .sender_id
            .as_deref()
            .filter(|id| !id.trim().is_empty())
        else {
            return Ok(Err(NoMemoryReason::MissingSender));
        };
        let user = UserKey::new(&inbound.channel, id)?;
        if self.bot_ids.contains(&user) {
            return Ok(Err(NoMemoryReason::BotSender));
        }
        let links = links_in_force(&self.links.records().await?);
        Ok(Ok(canonical_user(&links, &user)))
    }
}

#[async_trait]
impl IdentityResolver for ModeResolver {
    async fn resolve(&self, inbound: &Inbound) -> Result<Resolution, ScopeError> {
        let chat = || ChatKey::new(&inbound.channel, &inbound.chat_id);
        let subject = match (self.mode, inbound.chat_type) {
            (IsolationMode::Workspace, _) => Subject::Agent,
            (IsolationMode::Chat, _) | (IsolationMode::User, ChatType::Group) => {
                // The bot's own messages never get memory, in any scoped mode.
                if let Err(reason @ NoMemoryReason::BotSender) = self.sender(inbound).await? {
                    return Ok(self.refuse(inbound, reason));
                }
                Subject::Chat(chat()?)
            }
            (IsolationMode::User, ChatType::Direct) => match self.sender(inbound).await? {
                Ok(user) => Subject::User(user),
                Err(reason) => return Ok(self.refuse(inbound, reason)),
            },
        };
        Ok(Resolution::Memory(self.scope(subject)))
    }
}

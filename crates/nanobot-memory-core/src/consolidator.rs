//! The Consolidator: archives the oldest part of a session into the journal when its prompt
//! outgrows the budget, and the whole live part when it goes idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use nanobot_llm_port::text::strip_think;
use nanobot_llm_port::tokens::estimate_json_message_tokens;
use nanobot_llm_port::{
    CountingEstimator, FinishReason, LlmClient, LlmError, LlmRequest, Message, PromptEstimator,
    TokenCounter, ToolChoice, ToolDefinition,
};
use nanobot_memory_store::{
    ArchiveCommit, HistoryJournal, MemoryError, NewEntry, SessionArchive, archive_digest,
};
use nanobot_session_store::{
    HistoryOptions, LAST_SUMMARY_KEY, MAX_WRITE_ATTEMPTS, RECALLED_FIELD, Replayed, Session,
    SessionHandle, SessionKey, SessionManager, StoredMessage, get_history, get_history_counted,
    python_isoformat,
};
use serde_json::{Value, json};

mod archive;
mod ask;
mod report;
mod rounds;
mod sizing;

use report::Prepared;
pub use report::{ARCHIVES, ArchiveRecord, Archived, ConsolidationReport, RawReason};

use crate::config::ConsolidationConfig;
use crate::error::ConsolidationError;
use crate::prompt::{PromptBuilder, archive_instruction};
use crate::raw::{format_messages, raw_entries};

/// A whole-session token estimate a test scripts (see `Consolidator::with_session_estimates`).
#[cfg(feature = "test-util")]
pub type SessionEstimates = Arc<dyn Fn(&Session) -> usize + Send + Sync>;

/// The answer a model gives when nothing is worth keeping.
pub const NOTHING: &str = "(nothing)";

/// What the probe request carries as its current message when a session's prompt is sized.
pub const PROBE_MESSAGE: &str = "[token-probe]";

/// What the archiving model reads instead of a tool result that recalled stored memory.
pub const RECALLED_PLACEHOLDER: &str =
    "[memory recalled by a search; it is already stored, do not summarise it again]";

/// Archives sessions into the journal. One per bot; all its work on one session is
/// serialized by a per-session lock, held across the model call.
pub struct Consolidator {
    config: ConsolidationConfig,
    llm: Arc<dyn LlmClient>,
    journal: Arc<dyn HistoryJournal>,
    archive: Arc<dyn SessionArchive>,
    sessions: Arc<SessionManager>,
    prompt: Arc<dyn PromptBuilder>,
    counter: Arc<dyn TokenCounter>,
    estimator: Arc<dyn PromptEstimator>,
    /// Whole-session estimates a test scripts instead of the replay's count.
    #[cfg(feature = "test-util")]
    session_estimates: Option<SessionEstimates>,
    locks: Mutex<HashMap<SessionKey, Weak<tokio::sync::Mutex<()>>>>,
    /// Token counts of recent request frames, by content.
    frames: Mutex<HashMap<u64, usize>>,
}

impl std::fmt::Debug for Consolidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consolidator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Consolidator {
    /// A Consolidator; the configuration is checked first. `archive` commits an archive of
    /// `sessions` into `journal` (entries and pointer move as one operation).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: ConsolidationConfig,
        llm: Arc<dyn LlmClient>,
        journal: Arc<dyn HistoryJournal>,
        archive: Arc<dyn SessionArchive>,
        sessions: Arc<SessionManager>,
        prompt: Arc<dyn PromptBuilder>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<Self, ConsolidationError> {
        config.validate()?;
        Ok(Consolidator {
            estimator: Arc::new(CountingEstimator(Arc::clone(&counter))),
            config,
            llm,
            journal,
            archive,
            sessions,
            prompt,
            counter,
            #[cfg(feature = "test-util")]
            session_estimates: None,
            locks: Mutex::new(HashMap::new()),
            frames: Mutex::new(HashMap::new()),
        })
    }

    /// Sizes requests with `estimator` instead of the token counter (a provider's own
    /// counter, or a test's script).
    pub fn with_estimator(mut self, estimator: Arc<dyn PromptEstimator>) -> Self {
        self.estimator = estimator;
        self
    }

    /// Test hook: `estimates` sizes whole sessions instead of the replay's count, so a test
    /// decides when a session is over its budget.
    #[cfg(feature = "test-util")]
    pub fn with_session_estimates(mut self, estimates: SessionEstimates) -> Self {
        self.session_estimates = Some(estimates);
        self
    }

    /// The settings.
    pub fn config(&self) -> &ConsolidationConfig {
        &self.config
    }

    /// The per-session lock: consolidation, idle compaction and `/new` archives of one
    /// session never overlap.
    pub fn lock_for(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, weak| weak.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }
}

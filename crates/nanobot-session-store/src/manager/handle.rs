//! One session in memory, shared by the turns that use it.

use super::*;

/// The one live copy of a session in this process.
///
/// Reads and in-memory changes are synchronous and short; [`SessionManager::save`] writes
/// what changed. A handle stays valid after it leaves the cache: while anyone holds it, the
/// manager returns this same handle for its key.
pub struct SessionHandle {
    pub(super) key: SessionKey,
    /// False for a transient session (a temporary chat): never written.
    pub(super) persist: bool,
    pub(super) state: Mutex<HandleState>,
    /// Serializes writes of this session within the process.
    pub(super) write: tokio::sync::Mutex<()>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) counter: Arc<dyn TokenCounter>,
    /// Count each new message and record the count in it (see [`TOKENS_FIELD`]).
    pub(super) record_tokens: bool,
}

pub(super) struct HandleState {
    pub(super) session: Session,
    pub(super) revision: Option<Revision>,
    pub(super) repairs: Vec<Repair>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl SessionHandle {
    pub(super) fn lock(&self) -> MutexGuard<'_, HandleState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// Whether saves write this session (false for a transient one).
    pub fn is_persistent(&self) -> bool {
        self.persist
    }

    /// Reads the session.
    pub fn read<R>(&self, f: impl FnOnce(&Session) -> R) -> R {
        f(&self.lock().session)
    }

    /// Changes the session in memory (saved by the next [`SessionManager::save`]).
    pub fn update<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        f(&mut self.lock().session)
    }

    /// A copy of the session.
    pub fn snapshot(&self) -> Session {
        self.lock().session.clone()
    }

    /// Appends a message, stamped with the manager's clock.
    pub fn add_message(&self, message: StoredMessage) {
        let now = local_naive(self.clock.now());
        let mut state = self.lock();
        state.session.add_message(message, now);
        // Count it now and record the count in the message, so no later process counts it
        // again (a long session loaded cold would otherwise be tokenized whole).
        if self.record_tokens
            && let Some(last) = state.session.last_message_mut()
        {
            record_tokens(last, self.counter.as_ref());
        }
    }

    /// The number of messages, archived ones included.
    pub fn message_count(&self) -> usize {
        self.lock().session.messages().len()
    }

    /// The consolidation pointer.
    pub fn last_consolidated(&self) -> usize {
        self.lock().session.last_consolidated()
    }

    /// The revision last read or written.
    pub fn revision(&self) -> Option<Revision> {
        self.lock().revision
    }

    /// What the store repaired when this session was loaded.
    pub fn repairs(&self) -> Vec<Repair> {
        self.lock().repairs.clone()
    }

    /// The replay for a model (see [`get_history`]); token estimates are cached per message.
    pub fn history(&self, options: &HistoryOptions) -> Vec<Replayed> {
        let state = self.lock();
        get_history(
            state.session.messages(),
            state.session.last_consolidated(),
            options,
            self.counter.as_ref(),
        )
    }
}

/// Adds the message's replay token count for `counter`'s encoding to its fields.
pub(super) fn record_tokens(message: &mut StoredMessage, counter: &dyn TokenCounter) {
    if let Some(tokens) = message_tokens(message, counter) {
        let mut recorded = message
            .get(TOKENS_FIELD)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        recorded.insert(counter.encoding().to_owned(), Value::from(tokens));
        message.insert(TOKENS_FIELD, Value::Object(recorded));
    }
}

//! A read-only view of a session for building a prompt: its metadata and the tail of
//! messages replay can use, without the archived past.

use nanobot_llm_port::TokenCounter;

use crate::history::{HistoryOptions, MIN_REPLAY_MESSAGES, Replayed, get_history};
use crate::key::SessionKey;
use crate::message::StoredMessage;
use crate::session::{Session, SessionMeta};
use crate::store::Revision;

/// What [`crate::SessionStore::open_for_replay`] returns: enough of a session to replay it.
///
/// `tail` holds the messages from `tail_start` on: at least everything
/// [`get_history`] can return for this session (from the pointer, the last
/// [`MIN_REPLAY_MESSAGES`] and the user turn that began them). Its history is the same as
/// the full session's.
#[derive(Debug, Clone)]
pub struct ReplayView {
    /// The session's key.
    pub key: SessionKey,
    /// Metadata, pointer and timestamps.
    pub meta: SessionMeta,
    /// All messages the session holds, archived ones included.
    pub message_count: usize,
    /// The index of `tail[0]` among all messages.
    pub tail_start: usize,
    /// The messages from `tail_start` on.
    pub tail: Vec<StoredMessage>,
    /// The revision read, for a writer that wants to append next.
    pub revision: Revision,
}

impl ReplayView {
    /// The view of a whole session.
    pub fn of_session(session: Session, revision: Revision) -> Self {
        ReplayView {
            key: session.key().clone(),
            meta: session.meta().clone(),
            message_count: session.messages().len(),
            tail_start: 0,
            tail: session.messages().to_vec(),
            revision,
        }
    }

    /// The replay for a model, exactly as the full session's [`get_history`].
    pub fn history(&self, options: &HistoryOptions, counter: &dyn TokenCounter) -> Vec<Replayed> {
        let pointer = self.meta.last_consolidated.saturating_sub(self.tail_start);
        get_history(&self.tail, pointer, options, counter)
    }
}

/// The first message index replay can start at for a session of `count` messages whose
/// pointer is `pointer`: from here on, a tail must also reach back to a user turn (and the
/// message before it) for [`get_history`] to see what it would see in the whole session.
/// Public so every backend that reads a tail reads the same one.
pub fn replay_floor(count: usize, pointer: usize) -> usize {
    pointer.min(count.saturating_sub(MIN_REPLAY_MESSAGES))
}

//! The one error type of the turn.

use std::fmt;

use nanobot_session_store::SessionKey;

/// How far a failed turn got in saving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Saved {
    /// Nothing of the turn was written.
    Nothing,
    /// The user's message was saved; no answer was.
    UserMessage,
    /// The message and the answer were saved; what failed came after (making the session
    /// durable, or tidying it).
    Answer,
}

impl Saved {
    /// What of a failed turn of session `key` was kept, as a sentence for the user.
    pub fn describe(self, key: &str) -> String {
        match self {
            Saved::Nothing => format!("Nothing of this turn was saved to session {key}."),
            Saved::UserMessage => {
                format!("Your message was kept in session {key}; no answer was saved.")
            }
            Saved::Answer => format!(
                "Your message and the answer were saved in session {key}; only finishing the \
                 save failed."
            ),
        }
    }
}

/// Why a turn, or opening a scope's memory, failed. Each variant keeps its source, so a
/// caller can tell a model that is down ([`TurnError::Llm`]) from a disk that is full.
#[derive(Debug)]
#[non_exhaustive]
pub enum TurnError {
    /// Sessions failed.
    Sessions(nanobot_session_store::SessionError),
    /// The journal or the documents failed.
    Memory(nanobot_memory_store::MemoryError),
    /// Consolidation failed.
    Consolidation(nanobot_memory_core::ConsolidationError),
    /// Dream failed.
    Dream(nanobot_dream::DreamError),
    /// The model failed.
    Llm(nanobot_llm_port::LlmError),
    /// The prompt could not be built.
    Context(nanobot_context_builder::ContextError),
    /// The scope could not be resolved or opened.
    Scope(nanobot_memory_scope::ScopeError),
    /// The idempotency key was used before with another request; nothing was done.
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// A turn failed part-way; `saved` says what of it was kept.
    Turn {
        /// The session.
        key: String,
        /// What was saved before the failure.
        saved: Saved,
        /// Why it failed.
        cause: Box<TurnError>,
    },
}

impl TurnError {
    /// Whether trying the same turn again can succeed: the model or a store said so (a rate
    /// limit, a dropped connection, a busy session). A turn that saved part of itself says
    /// what in [`Saved`]; retrying it adds the user's message again.
    pub fn is_retryable(&self) -> bool {
        match self {
            TurnError::Sessions(e) => e.is_retryable(),
            TurnError::Memory(e) => e.is_retryable(),
            TurnError::Llm(e) => e.is_retryable(),
            TurnError::Scope(e) => e.is_retryable(),
            TurnError::Turn { cause, .. } => cause.is_retryable(),
            _ => false,
        }
    }

    /// `cause`, as the failure of a turn of `key` that had saved `saved`.
    pub fn turn(key: &SessionKey, saved: Saved, cause: impl Into<TurnError>) -> Self {
        TurnError::Turn {
            key: key.to_string(),
            saved,
            cause: Box::new(cause.into()),
        }
    }
}

impl fmt::Display for TurnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnError::Sessions(e) => write!(f, "the sessions could not be read or saved: {e}"),
            TurnError::Memory(e) => write!(f, "the memory files could not be used: {e}"),
            TurnError::Consolidation(e) => write!(f, "consolidation failed: {e}"),
            TurnError::Dream(e) => write!(f, "Dream failed: {e}"),
            TurnError::Llm(e) => write!(f, "{e}"),
            TurnError::Context(e) => write!(f, "the prompt could not be built: {e}"),
            TurnError::Scope(e) => write!(f, "the memory scope could not be used: {e}"),
            TurnError::IdempotencyKeyReused { key } => write!(
                f,
                "the idempotency key {key:?} was used before with another request"
            ),
            TurnError::Turn { key, saved, cause } => {
                write!(f, "{cause}\n{}", saved.describe(key))
            }
        }
    }
}

impl std::error::Error for TurnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TurnError::Sessions(e) => Some(e),
            TurnError::Memory(e) => Some(e),
            TurnError::Consolidation(e) => Some(e),
            TurnError::Dream(e) => Some(e),
            TurnError::Llm(e) => Some(e),
            TurnError::Context(e) => Some(e),
            TurnError::Scope(e) => Some(e),
            TurnError::Turn { cause, .. } => Some(cause.as_ref()),
            TurnError::IdempotencyKeyReused { .. } => None,
        }
    }
}

macro_rules! from {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for TurnError {
            fn from(e: $ty) -> Self {
                TurnError::$variant(e)
            }
        }
    )*};
}

from!(
    Sessions(nanobot_session_store::SessionError),
    Memory(nanobot_memory_store::MemoryError),
    Consolidation(nanobot_memory_core::ConsolidationError),
    Dream(nanobot_dream::DreamError),
    Llm(nanobot_llm_port::LlmError),
    Context(nanobot_context_builder::ContextError),
    Scope(nanobot_memory_scope::ScopeError)
);

//! The assembly's one error type: what failed while opening a backend, a model or a bot,
//! with the source kept.

use std::fmt;

/// Why a bot could not be assembled or a turn failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AssemblyError {
    /// The builder was given too little or contradictory parts (`what` names the setter
    /// to call).
    Incomplete {
        /// What is missing or wrong, and which setter fixes it.
        what: String,
    },
    /// A directory or file could not be read, created or written.
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// What went wrong with it ("cannot be created").
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// What an operator named does not exist (a session, a scope, a link).
    NotFound {
        /// What, and where to look instead.
        what: String,
    },
    /// The operation was refused, and nothing was changed (`why` says what to do instead).
    Refused {
        /// Why, and what to do instead.
        why: String,
    },
    /// The sessions could not be opened or used.
    Sessions(nanobot_session_store::SessionError),
    /// The journal, documents, versions or lease could not be opened or used.
    Memory(nanobot_memory_store::MemoryError),
    /// A scope could not be resolved, opened or listed.
    Scope(nanobot_memory_scope::ScopeError),
    /// Memory search (its index, or feeding it) failed.
    Search(nanobot_memory_search::IndexingError),
    /// The model client could not be built (a bad URL, a missing key).
    Llm(nanobot_llm_port::LlmError),
    /// The Dream schedule is invalid.
    Dream(nanobot_dream::DreamError),
    /// A turn, or opening a scope's memory through the turn, failed.
    Turn(nanobot_turn::TurnError),
    /// The PostgreSQL store could not be reached or used.
    #[cfg(feature = "postgres")]
    Postgres(nanobot_store_postgres::StoreError),
}

impl fmt::Display for AssemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssemblyError::Incomplete { what } => write!(f, "the bot is incomplete: {what}"),
            AssemblyError::Io { path, what, source } => {
                write!(f, "{} {what}: {source}", path.display())
            }
            AssemblyError::Refused { why } => write!(f, "{why}"),
            AssemblyError::NotFound { what } => write!(f, "{what}"),
            AssemblyError::Sessions(e) => write!(f, "sessions: {e}"),
            AssemblyError::Memory(e) => write!(f, "memory: {e}"),
            AssemblyError::Scope(e) => write!(f, "scope: {e}"),
            AssemblyError::Search(e) => write!(f, "memory search: {e}"),
            AssemblyError::Llm(e) => write!(f, "model: {e}"),
            AssemblyError::Dream(e) => write!(f, "Dream: {e}"),
            AssemblyError::Turn(e) => write!(f, "{e}"),
            #[cfg(feature = "postgres")]
            AssemblyError::Postgres(e) => write!(f, "PostgreSQL: {e}"),
        }
    }
}

impl std::error::Error for AssemblyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AssemblyError::Incomplete { .. }
            | AssemblyError::Refused { .. }
            | AssemblyError::NotFound { .. } => None,
            AssemblyError::Io { source, .. } => Some(source),
            AssemblyError::Sessions(e) => Some(e),
            AssemblyError::Memory(e) => Some(e),
            AssemblyError::Scope(e) => Some(e),
            AssemblyError::Search(e) => Some(e),
            AssemblyError::Llm(e) => Some(e),
            AssemblyError::Dream(e) => Some(e),
            AssemblyError::Turn(e) => Some(e),
            #[cfg(feature = "postgres")]
            AssemblyError::Postgres(e) => Some(e),
        }
    }
}

impl AssemblyError {
    /// `path` `what` ("cannot be created"), because of `source`.
    pub fn io(path: &std::path::Path, what: &'static str, source: std::io::Error) -> Self {
        AssemblyError::Io {
            path: path.to_owned(),
            what,
            source,
        }
    }

    /// As the turn reports a backend's failure to open a scope: the port's own error where
    /// there is one, the rest as a memory backend error with this one as its source.
    pub fn into_turn_error(self) -> nanobot_turn::TurnError {
        use nanobot_turn::TurnError;
        match self {
            AssemblyError::Sessions(e) => TurnError::Sessions(e),
            AssemblyError::Memory(e) => TurnError::Memory(e),
            AssemblyError::Scope(e) => TurnError::Scope(e),
            AssemblyError::Turn(e) => e,
            other => TurnError::Memory(nanobot_memory_store::MemoryError::backend_caused_by(
                other.to_string(),
                false,
                other,
            )),
        }
    }
}

macro_rules! from {
    ($variant:ident, $source:ty) => {
        impl From<$source> for AssemblyError {
            fn from(e: $source) -> Self {
                AssemblyError::$variant(e)
            }
        }
    };
}

from!(Sessions, nanobot_session_store::SessionError);
from!(Memory, nanobot_memory_store::MemoryError);
from!(Scope, nanobot_memory_scope::ScopeError);
from!(Llm, nanobot_llm_port::LlmError);
from!(Search, nanobot_memory_search::IndexingError);

impl From<nanobot_memory_index::IndexError> for AssemblyError {
    fn from(e: nanobot_memory_index::IndexError) -> Self {
        AssemblyError::Search(e.into())
    }
}
from!(Dream, nanobot_dream::DreamError);
from!(Turn, nanobot_turn::TurnError);
#[cfg(feature = "postgres")]
from!(Postgres, nanobot_store_postgres::StoreError);

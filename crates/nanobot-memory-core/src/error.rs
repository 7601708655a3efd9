//! memory-core's one error type.

use std::fmt;

use nanobot_memory_store::MemoryError;
use nanobot_session_store::SessionError;

/// Why a consolidation or compaction failed. A failed model call is not an error: it falls
/// back to a raw archive, which always succeeds unless storage fails.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsolidationError {
    /// The configuration cannot work (e.g. the answer's token cap leaves no input budget).
    InvalidConfig {
        /// What is wrong and what to change.
        reason: String,
    },
    /// The session could not be read or saved.
    Session(SessionError),
    /// The journal could not be written.
    Memory(MemoryError),
}

impl fmt::Display for ConsolidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsolidationError::InvalidConfig { reason } => {
                write!(f, "the consolidation settings cannot work: {reason}")
            }
            ConsolidationError::Session(error) => write!(f, "consolidation stopped: {error}"),
            ConsolidationError::Memory(error) => write!(f, "consolidation stopped: {error}"),
        }
    }
}

impl std::error::Error for ConsolidationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConsolidationError::Session(error) => Some(error),
            ConsolidationError::Memory(error) => Some(error),
            ConsolidationError::InvalidConfig { .. } => None,
        }
    }
}

impl From<SessionError> for ConsolidationError {
    fn from(error: SessionError) -> Self {
        ConsolidationError::Session(error)
    }
}

impl From<MemoryError> for ConsolidationError {
    fn from(error: MemoryError) -> Self {
        ConsolidationError::Memory(error)
    }
}

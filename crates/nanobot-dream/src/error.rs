//! Dream's one error type.

use std::fmt;

use nanobot_llm_port::LlmError;
use nanobot_memory_store::MemoryError;

/// Why a Dream operation could not be carried out. A run the model did not finish is not an
/// error: it is an outcome ([`crate::RunStatus`]) that leaves memory as it was.
#[derive(Debug)]
#[non_exhaustive]
pub enum DreamError {
    /// Another run holds the workspace's lease.
    AlreadyRunning {
        /// Who holds it.
        holder: String,
    },
    /// Memory versioning cannot be used; log, show and restore need it.
    VersioningUnavailable {
        /// Why, and what to do.
        reason: String,
    },
    /// The first saved version has no earlier state to restore.
    NothingBefore {
        /// The version's short id.
        id: String,
    },
    /// A configuration value is not usable.
    InvalidConfig {
        /// The setting.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A question about memory (a file to blame, a query) that cannot be answered as asked.
    InvalidQuery {
        /// What was asked.
        query: String,
        /// Why it cannot be answered, and what would work.
        reason: String,
    },
    /// The memory storage failed.
    Memory(MemoryError),
    /// The model could not be reached (only where a call is required outside a run).
    Llm(LlmError),
}

impl fmt::Display for DreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DreamError::AlreadyRunning { holder } => write!(
                f,
                "Dream is already running ({holder}); wait for it to finish, it holds the workspace's memory"
            ),
            DreamError::VersioningUnavailable { reason } => {
                write!(f, "memory versioning is unavailable: {reason}")
            }
            DreamError::NothingBefore { id } => write!(
                f,
                "version {id} is the first saved version; there is no earlier state to restore"
            ),
            DreamError::InvalidConfig { key, reason } => write!(f, "dream.{key}: {reason}"),
            DreamError::InvalidQuery { query, reason } => write!(f, "{query:?}: {reason}"),
            DreamError::Memory(e) => write!(f, "{e}"),
            DreamError::Llm(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DreamError::Memory(e) => Some(e),
            DreamError::Llm(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MemoryError> for DreamError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::VersioningUnavailable { reason } => {
                DreamError::VersioningUnavailable { reason }
            }
            other => DreamError::Memory(other),
        }
    }
}

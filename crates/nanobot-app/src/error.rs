//! The app's one error type: every failure as a sentence with what to do next.

use std::fmt;
use std::path::PathBuf;

/// Why a command failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AppError {
    /// A configuration value is wrong.
    Config {
        /// The key (`llm.context_window`).
        key: String,
        /// The file, when it came from one.
        file: Option<PathBuf>,
        /// What is wrong.
        reason: String,
    },
    /// The command line is wrong.
    Usage(String),
    /// Something the user asked for does not exist.
    NotFound(String),
    /// Sessions failed.
    Sessions(nanobot_session_store::SessionError),
    /// Memory failed.
    Memory(nanobot_memory_store::MemoryError),
    /// Consolidation failed.
    Consolidation(nanobot_memory_core::ConsolidationError),
    /// Dream failed.
    Dream(nanobot_dream::DreamError),
    /// The model failed.
    Llm(nanobot_llm_port::LlmError),
    /// The prompt could not be built.
    Context(nanobot_context_builder::ContextError),
    /// A scope could not be resolved, linked, listed or erased.
    Scope(nanobot_memory_scope::ScopeError),
    /// The storage backend (a database) could not be reached or used.
    Storage(String),
    /// The terminal failed.
    Terminal(String),
    /// Memory search (its index, or feeding it) failed.
    Search(nanobot_memory_search::IndexingError),
    /// `nanobot mcp` lost its client abnormally.
    Mcp(nanobot_mcp::McpServerError),
    /// `nanobot demo` ran, but memory did not work as it should (the checks it names).
    Demo {
        /// The checks that failed.
        reason: String,
    },
    /// A turn failed part-way; the message says what of it was saved.
    Turn {
        /// The session.
        key: String,
        /// What was saved before the failure.
        saved: Saved,
        /// Why it failed.
        cause: Box<AppError>,
    },
}

pub use nanobot_turn::Saved;

impl AppError {
    /// `cause`, as the failure of a turn of `key` that had saved `saved`.
    pub fn turn(
        key: &nanobot_session_store::SessionKey,
        saved: Saved,
        cause: impl Into<AppError>,
    ) -> Self {
        AppError::Turn {
            key: key.to_string(),
            saved,
            cause: Box::new(cause.into()),
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Config { key, file, reason } => match file {
                Some(file) => write!(
                    f,
                    "configuration error: {key} in {}: {reason}",
                    file.display()
                ),
                None => write!(f, "configuration error: {key}: {reason}"),
            },
            AppError::Usage(text) => write!(f, "{text}\nRun `nanobot help` for the commands."),
            AppError::NotFound(text) => write!(f, "{text}"),
            AppError::Sessions(e) => write!(f, "the sessions could not be read or saved: {e}"),
            AppError::Memory(e) => write!(f, "the memory files could not be used: {e}"),
            AppError::Consolidation(e) => write!(f, "consolidation failed: {e}"),
            AppError::Dream(e) => write!(f, "Dream failed: {e}"),
            AppError::Llm(e) => write!(
                f,
                "{e}\nCheck llm.base_url and the API key (`nanobot config show`); for the local model run `cargo xtask llm start`."
            ),
            AppError::Context(e) => write!(f, "the prompt could not be built: {e}"),
            AppError::Scope(e) => write!(f, "the memory scope could not be used: {e}"),
            AppError::Storage(e) => write!(
                f,
                "the storage could not be used: {e}\nCheck storage.database_url and storage.schema (`nanobot config show`)."
            ),
            AppError::Terminal(e) => write!(f, "the terminal failed: {e}"),
            AppError::Search(e) => write!(
                f,
                "memory search failed: {e}\nThe index is derived data: `nanobot memory reindex` builds it again."
            ),
            AppError::Mcp(e) => write!(f, "the MCP server stopped: {e}"),
            AppError::Demo { reason } => write!(
                f,
                "the demo ran but memory did not work: {reason}\nA model too small to curate memory fails this (use the default model, or pass --no-check to only watch)."
            ),
            AppError::Turn { key, saved, cause } => {
                write!(f, "{cause}\n{}", saved.describe(key))
            }
        }
    }
}

/// The underlying error, so a caller (or a log) can walk the chain down to the store, the
/// model or the turn that failed.
impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppError::Sessions(e) => Some(e),
            AppError::Memory(e) => Some(e),
            AppError::Consolidation(e) => Some(e),
            AppError::Dream(e) => Some(e),
            AppError::Llm(e) => Some(e),
            AppError::Context(e) => Some(e),
            AppError::Scope(e) => Some(e),
            AppError::Search(e) => Some(e),
            AppError::Mcp(e) => Some(e),
            AppError::Turn { cause, .. } => Some(cause.as_ref()),
            _ => None,
        }
    }
}

macro_rules! from {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for AppError {
            fn from(e: $ty) -> Self {
                AppError::$variant(e)
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
    Scope(nanobot_memory_scope::ScopeError),
    Search(nanobot_memory_search::IndexingError)
);

impl From<nanobot_memory_index::IndexError> for AppError {
    fn from(e: nanobot_memory_index::IndexError) -> Self {
        AppError::Search(e.into())
    }
}

impl From<nanobot_memory::AssemblyError> for AppError {
    fn from(e: nanobot_memory::AssemblyError) -> Self {
        use nanobot_memory::AssemblyError;
        match e {
            AssemblyError::Sessions(e) => AppError::Sessions(e),
            AssemblyError::Memory(e) => AppError::Memory(e),
            AssemblyError::Scope(e) => AppError::Scope(e),
            AssemblyError::Llm(e) => AppError::Llm(e),
            AssemblyError::Dream(e) => AppError::Dream(e),
            AssemblyError::Turn(e) => AppError::from(e),
            AssemblyError::Postgres(e) => AppError::Storage(e.to_string()),
            AssemblyError::NotFound { what } => AppError::NotFound(what),
            AssemblyError::Search(e) => AppError::Search(e),
            AssemblyError::Io { ref source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                AppError::NotFound(e.to_string())
            }
            other => AppError::Usage(other.to_string()),
        }
    }
}

impl From<nanobot_turn::TurnError> for AppError {
    fn from(e: nanobot_turn::TurnError) -> Self {
        use nanobot_turn::TurnError;
        match e {
            TurnError::Sessions(e) => AppError::Sessions(e),
            TurnError::Memory(e) => AppError::Memory(e),
            TurnError::Consolidation(e) => AppError::Consolidation(e),
            TurnError::Dream(e) => AppError::Dream(e),
            TurnError::Llm(e) => AppError::Llm(e),
            TurnError::Context(e) => AppError::Context(e),
            TurnError::Scope(e) => AppError::Scope(e),
            TurnError::Turn { key, saved, cause } => AppError::Turn {
                key,
                saved,
                cause: Box::new(AppError::from(*cause)),
            },
            other => AppError::Memory(nanobot_memory_store::MemoryError::backend(
                other.to_string(),
            )),
        }
    }
}

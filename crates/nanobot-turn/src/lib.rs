#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod agent;
mod backends;
#[cfg(feature = "conformance")]
pub mod conformance;
mod counts;
mod error;
mod memory;
mod notes;
mod options;
mod tools;

pub use agent::{
    Agent, AgentSettings, DEFAULT_MAX_OPEN_SCOPES, DEFAULT_MAX_TOOL_STEPS, TurnReport,
};
pub use backends::{InMemoryBackend, OneScope};
pub use counts::{OPEN_SCOPES, STORAGE_ERRORS, TURN_SECONDS, TURNS};
pub use error::{Saved, TurnError};
pub use memory::{MemoryBackend, ScopeMemory, ScopeStores};
pub use notes::{
    BACKGROUND_FAILURE_KEY, RAW_ARCHIVE_KEY, background_failure, last_raw_archive,
    record_background_failure, record_compaction, record_raw_archives,
};
pub use options::{IDEMPOTENCY_KEY_FIELD, IDEMPOTENCY_RECORDS, IdempotencyKey, TurnOptions};
pub use tools::{
    DEFAULT_EMBED_PER_SEARCH, Found, PreparedSearch, SearchMemory, ToolContext, ToolOutput,
    TurnTool,
};

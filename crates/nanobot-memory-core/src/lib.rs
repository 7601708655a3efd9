#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod autocompact;
mod config;
mod consolidator;
mod error;
pub mod grounding;
mod prompt;
mod raw;
pub mod structured;
mod summary;

pub use autocompact::{AutoCompact, Compacted, DEFAULT_IDLE_TTL, IDLE_COMPACTIONS, TurnGuard};
pub use config::ConsolidationConfig;
#[cfg(feature = "test-util")]
pub use consolidator::SessionEstimates;
pub use consolidator::{
    ARCHIVES, ArchiveRecord, Archived, ConsolidationReport, Consolidator, NOTHING, PROBE_MESSAGE,
    RECALLED_PLACEHOLDER, RawReason,
};
pub use error::ConsolidationError;
pub use prompt::{
    PlainPrompt, PromptBuilder, append_user_text, archive_instruction, replayed_messages,
};
pub use raw::{format_messages, raw_entries};
pub use summary::SessionSummary;

#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod current;
mod error;
pub mod govern;
mod identity;
mod memo;
mod recent;
mod report;
pub mod snapshot;
mod truncate;

pub use builder::{BuilderConfig, BuiltPrompt, ContextBuilder, Limits, SEPARATOR, Summary, Turn};
pub use current::{Appended, CurrentMessage, Image, RuntimeBlock, RuntimeContextMarker, Speaker};
pub use error::ContextError;
pub use identity::Host;
pub use recent::RecentHistoryReport;
pub use report::{BuildReport, HistoryTokens, Omission, Part, PartReport, Truncation};

/// The workspace types a build reads, re-exported so a bot needs one import.
pub use nanobot_memory_store::JournalEntry;
pub use nanobot_prompt_inputs::{SkillFile, SkillSource, WorkspaceSnapshot};

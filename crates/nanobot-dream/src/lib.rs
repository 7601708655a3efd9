#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
pub mod diff;
mod error;
pub mod format;
pub mod lines;
mod overlay;
pub mod plan;
pub mod prompt;
pub mod provenance;
mod run;
pub mod sandbox;
mod schedule;
mod settings;

pub use config::{DreamConfig, DreamMode};
pub use error::DreamError;
pub use overlay::{Overlay, ToolOutcome};
pub use run::{
    BlameLine, DREAM_EDITS, DREAM_RUNS, Decision, Dream, DreamStores, ForgetLines, Forgotten,
    HistoryMatches, MemoryAudit, Origin, PastLine, Progress, Proposal, Repeat, RestoreReport,
    Review, RunReport, RunStatus, StopReason, StoppedRun, Superseded, Trigger, diff_snapshots,
    text_tool_calls,
};
pub use schedule::{CronExpr, DreamSchedule};
pub use settings::DreamSettings;

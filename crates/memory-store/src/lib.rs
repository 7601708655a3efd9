#![doc = include_str!("../README.md")]

#[cfg(feature = "conformance")]
pub mod conformance;
mod documents;
mod entry;
mod error;
#[cfg(feature = "fs")]
mod file;
#[cfg(feature = "fs")]
mod file_documents;
#[cfg(feature = "fs")]
mod file_lease;
mod front_matter;
#[cfg(feature = "fs")]
mod git;
mod journal;
mod lease;
#[cfg(feature = "fs")]
mod loader;
mod memory;
mod scoped;
mod skills;
mod snapshot;
mod versions;

pub use front_matter::{
    FrontMatterError, MAX_FRONT_MATTER_DEPTH, check_front_matter, parse_front_matter,
};

pub use documents::{
    AuxFile, Document, MAX_SKILL_NAME, MemoryDocumentStore, MemoryDocuments, MemoryDocumentsExt,
    SkillInfo, skill_info, validate_skill_name,
};
pub use entry::{JournalEntry, MESSAGE_RANGE_FIELD, NewEntry, TIMESTAMP_FORMAT};
pub use error::MemoryError;
#[cfg(feature = "fs")]
pub use file::{FileJournal, JournalDurability, JournalRepair};
#[cfg(feature = "fs")]
pub use file_documents::FileDocuments;
#[cfg(feature = "fs")]
pub use file_lease::FileLease;
#[cfg(feature = "fs")]
pub use git::{ForeignVersion, GitVersions, REPOSITORY, workspace_git_history};
pub use journal::{Compaction, HistoryJournal, HistoryJournalExt};
pub use lease::{LeaseGuard, MemoryLease, MemoryLeaseStore};
#[cfg(feature = "fs")]
pub use loader::{SystemProbe, WorkspaceLoader};
pub use memory::MemoryJournal;
pub use scoped::ScopedDocuments;
pub use skills::{
    RequirementProbe, Requirements, SkillFile, SkillSource, skill_requirements, strip_front_matter,
};
pub use snapshot::{PromptFiles, WorkspaceSnapshot};
pub use versions::{
    CURSOR_PATH, MIN_ID_PREFIX, MemoryVersionStore, MemoryVersions, Snapshot, Version,
    resolve_prefix,
};

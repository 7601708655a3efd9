#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod archive;
mod broken;
mod commit;
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
#[cfg(feature = "git")]
mod git;
mod journal;
mod lease;
mod memory;
mod scoped;
mod versions;

pub use archive::{
    ArchiveCommit, ArchiveCommitted, ArchiveFound, ArchiveIndex, ArchiveJournal, SessionArchive,
    TwoStepArchive, archive_digest, matching_archive, session_failure,
};
#[cfg(feature = "conformance")]
pub use broken::Rule as BrokenRule;
pub use commit::{
    FileChange, MemoryChange, MemoryCommit, MemoryFile, Recovery, StepwiseCommit, VersionRecord,
};
pub use documents::{
    AuxFile, DocVersion, Document, DocumentCapabilities, DocumentText, DocumentsStamp, Expected,
    InMemoryDocuments, MAX_SKILL_NAME, MemoryDocuments, MemoryDocumentsExt, SkillSet, SkillText,
    document_conflict, skill_path, validate_skill_name,
};
pub use entry::{
    JournalEntry, MESSAGE_DIGEST_FIELD, MESSAGE_RANGE_FIELD, NewEntry, TIMESTAMP_FORMAT,
};
pub use error::MemoryError;
#[cfg(feature = "fs")]
pub use file::{FileJournal, JournalDurability, JournalRepair};
#[cfg(feature = "fs")]
pub use file_documents::FileDocuments;
#[cfg(feature = "fs")]
pub use file_lease::FileLease;
#[cfg(feature = "git")]
pub use git::{ForeignVersion, GitVersions, REPOSITORY, workspace_git_history};
pub use journal::{
    Compaction, HistoryJournal, HistoryJournalExt, JournalCapabilities, JournalImport,
    compaction_start,
};
pub use lease::{
    Fence, InMemoryLease, Lease, LeaseCapabilities, LeaseHolder, MemoryLease, lease_lost,
};
pub use memory::{InMemoryJournal, stamp};
pub use scoped::ScopedDocuments;
pub use versions::{
    CURSOR_PATH, InMemoryVersions, MIN_ID_PREFIX, MemoryVersions, RewriteVersion, Snapshot,
    Version, resolve_prefix,
};

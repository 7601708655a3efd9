//! The memory commit: a change Dream (or a restore) made to a scope's memory files, its
//! cursor and its version history, applied as one unit under the Dream lease.
//!
//! A transactional backend applies it in one transaction that checks the lease's fence. A
//! backend without transactions ([`StepwiseCommit`]: files, memory) records the change
//! first (`memory/.dream_pending.json`), then applies it step by step (files, version,
//! cursor) and clears the record; a crash in between is finished by the next holder
//! ([`MemoryCommit::recover`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::documents::{
    AuxFile, DocVersion, Document, Expected, MemoryDocuments, skill_path, validate_skill_name,
};
use crate::error::MemoryError;
use crate::journal::HistoryJournal;
use crate::lease::{Fence, MemoryLease};
use crate::versions::{MemoryVersions, Snapshot, Version};

/// A file of a scope's memory that a commit may change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryFile {
    /// One of the three durable documents.
    Document(Document),
    /// `skills/<name>/SKILL.md`.
    Skill(String),
}

impl MemoryFile {
    /// The workspace-relative path.
    pub fn path(&self) -> String {
        match self {
            MemoryFile::Document(d) => d.path().to_owned(),
            MemoryFile::Skill(name) => skill_path(name),
        }
    }

    /// The file a canonical workspace-relative path names (`SOUL.md`, `USER.md`,
    /// `memory/MEMORY.md`, `skills/<name>/SKILL.md`); anything else is refused.
    pub fn from_path(path: &str) -> Result<MemoryFile, MemoryError> {
        let refused = || MemoryError::InvalidName {
            name: path.chars().take(80).collect(),
            reason: "a memory file is SOUL.md, USER.md, memory/MEMORY.md or skills/<name>/SKILL.md"
                .into(),
        };
        match path.split('/').collect::<Vec<_>>().as_slice() {
            ["SOUL.md"] => Ok(MemoryFile::Document(Document::Soul)),
            ["USER.md"] => Ok(MemoryFile::Document(Document::User)),
            ["memory", "MEMORY.md"] => Ok(MemoryFile::Document(Document::Memory)),
            ["skills", name, "SKILL.md"] => validate_skill_name(name)
                .map(|()| MemoryFile::Skill((*name).to_owned()))
                .map_err(|_| refused()),
            _ => Err(refused()),
        }
    }
}

/// One file's part of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The file.
    pub file: MemoryFile,
    /// What the change was made from: the version read (compare-and-set).
    pub expected: Expected,
    /// The text after; `None` deletes (a skill; a document is emptied).
    pub text: Option<String>,
}

/// A version to record with a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRecord {
    /// Its message (`dream: ...`).
    pub message: String,
    /// Every tracked file after the change, the cursor included.
    pub files: Snapshot,
}

/// A change to a scope's memory, applied as one unit under the lease `fence` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryChange {
    /// The fence of the lease the change was made under.
    pub fence: Fence,
    /// The files it changes.
    pub files: Vec<FileChange>,
    /// Dream's cursor afterwards.
    pub cursor: Option<u64>,
    /// The version to record, if any.
    pub version: Option<VersionRecord>,
    /// When it is made.
    pub time: DateTime<Utc>,
}

/// What [`MemoryCommit::recover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// No change was interrupted.
    Nothing,
    /// An interrupted change was finished.
    Finished,
    /// An interrupted change could not be finished (a file changed since) and was
    /// abandoned: what was applied stays, the cursor did not move, so the entries are read
    /// again.
    Abandoned {
        /// Why, as a sentence.
        reason: String,
    },
}

/// The memory commit port.
///
/// Contract (conformance suite, feature `conformance`):
///
/// - **Fenced.** A commit whose fence no longer holds the lease fails with
///   [`MemoryError::LeaseLost`] and writes nothing.
/// - **Compare-and-set.** A file changed since the change was made fails the commit with
///   [`MemoryError::Conflict`]; a transactional backend then writes nothing.
/// - **All or nothing.** Files, version and cursor change together: a transactional backend
///   in one transaction; a stepwise one finishes an interrupted change on `recover`.
/// - **The cursor never passes the journal's latest cursor.**
#[async_trait]
pub trait MemoryCommit: Send + Sync {
    /// Applies `change`; the version recorded, if one was asked for and the files differ
    /// from the latest version.
    async fn commit(&self, change: &MemoryChange) -> Result<Option<Version>, MemoryError>;

    /// Finishes (or abandons) a change a crash interrupted, under the lease `fence` names.
    async fn recover(&self, fence: Fence) -> Result<Recovery, MemoryError>;
}

/// The memory commit over stores without a transaction in common (files, memory): the
/// change is recorded first, then applied step by step, then the record is cleared.
pub struct StepwiseCommit {
    documents: Arc<dyn MemoryDocuments>,
    journal: Arc<dyn HistoryJournal>,
    versions: Option<Arc<dyn MemoryVersions>>,
    lease: Arc<dyn MemoryLease>,
}

impl std::fmt::Debug for StepwiseCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepwiseCommit").finish_non_exhaustive()
    }
}

impl StepwiseCommit {
    /// Commits into these stores; `versions` is `None` when versioning is unavailable
    /// (changes are applied, no version is recorded).
    pub fn new(
        documents: Arc<dyn MemoryDocuments>,
        journal: Arc<dyn HistoryJournal>,
        versions: Option<Arc<dyn MemoryVersions>>,
        lease: Arc<dyn MemoryLease>,
    ) -> Self {
        StepwiseCommit {
            documents,
            journal,
            versions,
            lease,
        }
    }

    /// Applies the steps of `change`; files already at their new text are skipped, so a
    /// change can be applied again after a crash.
    async fn carry_out(&self, change: &MemoryChange) -> Result<Option<Version>, MemoryError> {
        for file in &change.files {
            let current = match &file.file {
                MemoryFile::Document(d) => self.documents.read(*d).await?,
                MemoryFile::Skill(name) => self.documents.read_skill(name).await?,
            };
            let done = match (&file.text, &current) {
                (Some(text), Some(now)) => now.text == *text,
                (None, None) => true,
                (None, Some(now)) => {
                    matches!(file.file, MemoryFile::Document(_)) && now.text.is_empty()
                }
                (Some(_), None) => false,
            };
            if done {
                continue;
            }
            let found = current.as_ref().map(|d| d.version);
            if !file.expected.is_met_by(found) {
                return Err(crate::documents::document_conflict(
                    &file.file.path(),
                    file.expected,
                    found,
                ));
            }
            match (&file.file, &file.text) {
                (MemoryFile::Document(d), text) => {
                    self.documents
                        .write(*d, text.as_deref().unwrap_or(""), file.expected)
                        .await?;
                }
                (MemoryFile::Skill(name), Some(text)) => {
                    self.documents
                        .write_skill(name, text, file.expected)
                        .await?;
                }
                (MemoryFile::Skill(name), None) => {
                    self.documents.delete_skill(name, file.expected).await?;
                }
            }
        }
        let mut version = None;
        if let (Some(record), Some(versions)) = (&change.version, &self.versions) {
            version = versions
                .commit(&record.message, &record.files, change.time)
                .await?;
        }
        if let Some(cursor) = change.cursor
            && self.journal.dream_cursor().await? != cursor
        {
            let latest = self.journal.latest_cursor().await?;
            self.journal.set_dream_cursor(cursor.min(latest)).await?;
        }
        Ok(version)
    }
}

#[async_trait]
impl MemoryCommit for StepwiseCommit {
    async fn commit(&self, change: &MemoryChange) -> Result<Option<Version>, MemoryError> {
        self.lease.check(change.fence).await?;
        // Nothing is recorded for a change that would conflict at once.
        for file in &change.files {
            let current = match &file.file {
                MemoryFile::Document(d) => self.documents.read(*d).await?,
                MemoryFile::Skill(name) => self.documents.read_skill(name).await?,
            };
            let found = current.as_ref().map(|d| d.version);
            if !file.expected.is_met_by(found) {
                return Err(crate::documents::document_conflict(
                    &file.file.path(),
                    file.expected,
                    found,
                ));
            }
        }
        self.documents
            .write_aux(AuxFile::DreamPending, &pending_json(change))
            .await?;
        let version = self.carry_out(change).await?;
        self.documents.write_aux(AuxFile::DreamPending, "").await?;
        Ok(version)
    }

    async fn recover(&self, fence: Fence) -> Result<Recovery, MemoryError> {
        let Some(text) = self.documents.read_aux(AuxFile::DreamPending).await? else {
            return Ok(Recovery::Nothing);
        };
        if text.trim().is_empty() {
            return Ok(Recovery::Nothing);
        }
        self.lease.check(fence).await?;
        let Some(mut change) = parse_pending(&text) else {
            return Err(MemoryError::InvalidFile {
                path: AuxFile::DreamPending.path().into(),
                reason: "is not a pending Dream change this version can read; inspect it, then delete it".into(),
            });
        };
        change.fence = fence;
        let outcome = match self.carry_out(&change).await {
            Ok(_) => Recovery::Finished,
            Err(MemoryError::Conflict { what }) => Recovery::Abandoned {
                reason: format!("a file changed after the interrupted change was made: {what}"),
            },
            Err(other) => return Err(other),
        };
        self.documents.write_aux(AuxFile::DreamPending, "").await?;
        Ok(outcome)
    }
}

fn expected_json(expected: Expected) -> Value {
    match expected {
        Expected::Absent => Value::String("absent".into()),
        Expected::Any => Value::String("any".into()),
        Expected::Version(v) => Value::String(v.to_string()),
    }
}

fn expected_from(value: Option<&Value>) -> Expected {
    match value.and_then(Value::as_str) {
        Some("absent") => Expected::Absent,
        Some(hex) => u64::from_str_radix(hex, 16)
            .map(|v| Expected::Version(DocVersion(v)))
            .unwrap_or(Expected::Any),
        None => Expected::Any,
    }
}

/// The pending record of `change` (`memory/.dream_pending.json`).
fn pending_json(change: &MemoryChange) -> String {
    let files: Vec<Value> = change
        .files
        .iter()
        .map(|f| json!({"path": f.file.path(), "expected": expected_json(f.expected), "text": f.text}))
        .collect();
    json!({
        "changes": files,
        "cursor": change.cursor,
        "version": change.version.as_ref().map(|v| json!({"message": v.message, "files": v.files})),
        "time": change.time.to_rfc3339(),
    })
    .to_string()
}

/// A pending record, in this release's form or the older one (`files` as a map of path to
/// text, `message` beside it; it is finished without a version, which the next run's
/// record of outside edits then captures).
fn parse_pending(text: &str) -> Option<MemoryChange> {
    let value: Value = serde_json::from_str(text).ok()?;
    let cursor = value.get("cursor").and_then(Value::as_u64);
    let time = value
        .get("time")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
    let mut files = Vec::new();
    if let Some(changes) = value.get("changes").and_then(Value::as_array) {
        for change in changes {
            files.push(FileChange {
                file: MemoryFile::from_path(change.get("path")?.as_str()?).ok()?,
                expected: expected_from(change.get("expected")),
                text: change
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        }
    } else {
        for (path, text) in value.get("files")?.as_object()? {
            files.push(FileChange {
                file: MemoryFile::from_path(path).ok()?,
                expected: Expected::Any,
                text: text.as_str().map(str::to_owned),
            });
        }
    }
    let version = value.get("version").and_then(|v| {
        let files: BTreeMap<String, String> = v
            .get("files")?
            .as_object()?
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        Some(VersionRecord {
            message: v.get("message")?.as_str()?.to_owned(),
            files,
        })
    });
    Some(MemoryChange {
        fence: Fence(0),
        files,
        cursor,
        version,
        time,
    })
}

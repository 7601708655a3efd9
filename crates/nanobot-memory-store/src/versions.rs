//! Versioned memory: every change Dream makes is a version of the tracked files (the
//! durable documents, the skills and Dream's cursor), with log, lookup by id and the files
//! as of any version. Diffs and restores are computed by the caller from those snapshots.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::MemoryError;

/// Tracked files by workspace-relative path (`SOUL.md`, `skills/x/SKILL.md`, ...).
pub type Snapshot = BTreeMap<String, String>;

/// The path under which Dream's cursor is versioned with the files.
pub const CURSOR_PATH: &str = "memory/.dream_cursor";

/// One saved version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The full id (lower-case hex).
    pub id: String,
    /// The version before it.
    pub parent: Option<String>,
    /// The message (`dream: ...`).
    pub message: String,
    /// When it was saved.
    pub time: DateTime<Utc>,
}

impl Version {
    /// The first 8 characters of the id, as logs show it.
    pub fn short_id(&self) -> &str {
        &self.id[..self.id.len().min(8)]
    }

    /// The message's first line, or `(no message)`.
    pub fn subject(&self) -> &str {
        self.message
            .lines()
            .next()
            .filter(|l| !l.trim().is_empty())
            .unwrap_or("(no message)")
    }
}

/// The shortest id prefix accepted.
pub const MIN_ID_PREFIX: usize = 4;

/// Where versions are kept.
///
/// Contract (conformance suite): a commit whose files equal the latest version's saves
/// nothing and returns `None`; the log is newest first; an id resolves by a unique prefix
/// of at least [`MIN_ID_PREFIX`] hex characters searched over the whole history, an
/// ambiguous one is refused with its candidates.
#[async_trait]
pub trait MemoryVersions: Send + Sync {
    /// Saves `files` (the whole tracked state) as a new version.
    async fn commit(
        &self,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
    ) -> Result<Option<Version>, MemoryError>;

    /// The newest `limit` versions, newest first.
    async fn log(&self, limit: usize) -> Result<Vec<Version>, MemoryError>;

    /// The version `id` (full or a unique prefix) names.
    async fn resolve(&self, id: &str) -> Result<Version, MemoryError>;

    /// The tracked files as of version `id` (a full id).
    async fn files_at(&self, id: &str) -> Result<Snapshot, MemoryError>;

    /// Rewrites every version through `edit`, oldest first, keeping their order and
    /// times: an erasure, so what `edit` takes out is gone from the storage of every
    /// version, not only from the newest. Ids may change. Returns how many changed.
    async fn rewrite(&self, edit: RewriteVersion<'_>) -> Result<usize, MemoryError>;
}

/// How [`MemoryVersions::rewrite`] changes one version: the version and its files in, its
/// new message and files out.
pub type RewriteVersion<'a> = &'a (dyn Fn(&Version, Snapshot) -> (String, Snapshot) + Send + Sync);

/// Finds the one version among `ids` that `prefix` names.
pub fn resolve_prefix<'a>(
    prefix: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<&'a str, MemoryError> {
    let wanted = prefix.trim().to_ascii_lowercase();
    if wanted.len() < MIN_ID_PREFIX || !wanted.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MemoryError::UnknownVersion {
            id: prefix.to_owned(),
        });
    }
    let matches: Vec<&str> = ids
        .into_iter()
        .filter(|id| id.starts_with(&wanted))
        .collect();
    match matches.as_slice() {
        [] => Err(MemoryError::UnknownVersion {
            id: prefix.to_owned(),
        }),
        [one] => Ok(one),
        many => Err(MemoryError::AmbiguousVersion {
            id: prefix.to_owned(),
            candidates: many.iter().map(|s| (*s).to_owned()).collect(),
        }),
    }
}

/// Versions kept in memory.
#[derive(Debug, Default)]
pub struct InMemoryVersions {
    versions: Mutex<Vec<(Version, Snapshot)>>,
}

impl InMemoryVersions {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl MemoryVersions for InMemoryVersions {
    async fn commit(
        &self,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
    ) -> Result<Option<Version>, MemoryError> {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        if versions.last().is_some_and(|(_, latest)| latest == files) {
            return Ok(None);
        }
        let parent = versions.last().map(|(v, _)| v.id.clone());
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let seed = format!(
            "{parent:?}\n{message}\n{time}\n{files:?}\n{}",
            versions.len()
        );
        for byte in seed.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let version = Version {
            id: format!("{hash:016x}{:024x}", versions.len() + 1),
            parent,
            message: message.to_owned(),
            time,
        };
        versions.push((version.clone(), files.clone()));
        Ok(Some(version))
    }

    async fn log(&self, limit: usize) -> Result<Vec<Version>, MemoryError> {
        let versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(versions
            .iter()
            .rev()
            .take(limit)
            .map(|(v, _)| v.clone())
            .collect())
    }

    async fn resolve(&self, id: &str) -> Result<Version, MemoryError> {
        let versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        let full = resolve_prefix(id, versions.iter().map(|(v, _)| v.id.as_str()))?;
        Ok(versions
            .iter()
            .find(|(v, _)| v.id == full)
            .map(|(v, _)| v.clone())
            .ok_or_else(|| MemoryError::UnknownVersion { id: id.to_owned() })?)
    }

    async fn files_at(&self, id: &str) -> Result<Snapshot, MemoryError> {
        let versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions
            .iter()
            .find(|(v, _)| v.id == id)
            .map(|(_, files)| files.clone())
            .ok_or_else(|| MemoryError::UnknownVersion { id: id.to_owned() })
    }

    async fn rewrite(&self, edit: RewriteVersion<'_>) -> Result<usize, MemoryError> {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = 0;
        for (version, files) in versions.iter_mut() {
            let (message, rewritten) = edit(version, files.clone());
            if message != version.message || rewritten != *files {
                changed += 1;
                version.message = message;
                *files = rewritten;
            }
        }
        Ok(changed)
    }
}

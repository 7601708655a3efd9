//! The port: one `MemoryIndex` per scope, so a search can only ever see the scope it was
//! opened for (no filter to forget).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

use crate::chunk::{Chunk, SourceKind};

/// The most hits one search returns.
pub const MAX_LIMIT: usize = 10;
/// The hits a search returns when the caller names no limit.
pub const DEFAULT_LIMIT: usize = 5;
/// The longest snippet of a hit, in characters.
pub const MAX_SNIPPET_CHARS: usize = 400;
/// A term found in more than this share of the chunks is left out of a query (unless
/// every term is that common): it would score nearly every chunk and rank none, and on
/// 100,000 chunks it is what makes a query slow (`../shared/design/search.md` §3.2).
pub const COMMON_TERM_SHARE: f64 = 0.5;

/// A backend may rank a query whose every term is common (held by more than
/// [`COMMON_TERM_SHARE`] of the chunks: `terms_to_search`'s fallback) among the newest this
/// many chunks only. Such a query says little about which chunk is meant, so recency is the
/// useful order, and scoring every chunk that holds a common word is the slow case (a
/// measured 110 ms at 100,000 chunks on SQLite, 32 ms at 10,000 on PostgreSQL, before the
/// window). The hits are ten at most, so a window of 2,000 chunks has plenty to rank.
pub const COMMON_QUERY_WINDOW: usize = 2_000;

/// What to look for.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// The words, in any language.
    pub query: String,
    /// Which memories to search; never empty.
    pub sources: BTreeSet<SourceKind>,
    /// Only chunks written at or after this time (chunks with no time are kept out too).
    pub since: Option<NaiveDateTime>,
    /// How many hits at most, 1 to [`MAX_LIMIT`].
    pub limit: usize,
}

impl SearchRequest {
    /// Every source, no time bound, [`DEFAULT_LIMIT`] hits.
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            sources: SourceKind::ALL.into_iter().collect(),
            since: None,
            limit: DEFAULT_LIMIT,
        }
    }

    /// Only these sources.
    pub fn sources(mut self, sources: impl IntoIterator<Item = SourceKind>) -> Self {
        self.sources = sources.into_iter().collect();
        self
    }

    /// At most `limit` hits.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Only what was written at or after `since`.
    pub fn since(mut self, since: NaiveDateTime) -> Self {
        self.since = Some(since);
        self
    }

    /// Whether `chunk` is among what this request searches (its sources and time bound).
    pub fn admits(&self, chunk: &crate::chunk::Chunk) -> bool {
        self.sources.contains(&chunk.kind)
            && self
                .since
                .is_none_or(|since| chunk.at.is_some_and(|at| at >= since))
    }

    /// Refuses what no backend should run: no words to search, no sources, a limit of
    /// 0 or over [`MAX_LIMIT`].
    pub fn check(&self) -> Result<(), IndexError> {
        let refuse = |reason: &str| {
            Err(IndexError::InvalidRequest {
                reason: reason.to_owned(),
            })
        };
        if crate::normalize::tokens(&self.query).is_empty() {
            return refuse("the query has no words to search for");
        }
        if self.sources.is_empty() {
            return refuse("no sources to search");
        }
        if self.limit == 0 || self.limit > MAX_LIMIT {
            return refuse(&format!("limit must be 1 to {MAX_LIMIT}"));
        }
        Ok(())
    }
}

/// One result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// `history#<cursor>`, `<FILE>#<heading>` or `session:<key>#<seq>`.
    pub source: String,
    /// Which memory it is in.
    pub kind: SourceKind,
    /// When it was written, where known.
    pub at: Option<NaiveDateTime>,
    /// Higher is better; comparable only within one search.
    pub score: f64,
    /// At most [`MAX_SNIPPET_CHARS`] characters of the chunk, around what matched.
    pub snippet: String,
}

/// A count of what an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct IndexStats {
    /// Chunks held.
    pub chunks: usize,
    /// Groups (entries, files, messages) held.
    pub groups: usize,
}

impl IndexStats {
    /// `chunks` chunks in `groups` groups (what a backend counts).
    pub fn new(chunks: usize, groups: usize) -> Self {
        IndexStats { chunks, groups }
    }
}

/// A whole group's new chunks; no chunks removes the group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupUpdate {
    /// The group ([`crate::group_of`] of every chunk's source).
    pub group: String,
    /// Its chunks, all of that group.
    pub chunks: Vec<Chunk>,
}

impl GroupUpdate {
    /// Groups `chunks` by their group, in the order the groups first appear.
    pub fn from_chunks(chunks: Vec<Chunk>) -> Vec<GroupUpdate> {
        let mut updates: Vec<GroupUpdate> = Vec::new();
        for chunk in chunks {
            match updates.iter_mut().find(|u| u.group == chunk.group) {
                Some(update) => update.chunks.push(chunk),
                None => updates.push(GroupUpdate {
                    group: chunk.group.clone(),
                    chunks: vec![chunk],
                }),
            }
        }
        updates
    }

    /// The group `group` with nothing in it: applying it removes the group.
    pub fn remove(group: impl Into<String>) -> GroupUpdate {
        GroupUpdate {
            group: group.into(),
            chunks: Vec::new(),
        }
    }
}

/// A search index over one scope's memory.
///
/// Contract (the conformance suite checks it on every backend):
/// - `replace` applies all its updates or none, and a search that starts after it returns
///   sees them;
/// - `search` is deterministic: the same index and request give the same hits in the same
///   order (ties broken by source, then part), one hit per source (its best chunk);
/// - nothing from another scope's index is ever returned.
#[async_trait]
pub trait MemoryIndex: Send + Sync {
    /// Replaces each named group's chunks with the given ones (an empty list removes it).
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError>;

    /// Removes every group whose name starts with `prefix` (a cleared session:
    /// `session:telegram:42#`).
    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError>;

    /// The best hits for `request`, best first.
    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError>;

    /// What the index holds.
    async fn stats(&self) -> Result<IndexStats, IndexError>;

    /// The index's records of what it has indexed (a journal cursor, a document's hash, a
    /// session's revision), so an indexing pass starts where the last one stopped.
    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError>;

    /// Sets marks (`None` removes one). An indexing pass sets them after the chunks they
    /// describe: a crash in between makes the next pass redo work, never skip it.
    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError>;

    /// Makes sure what was removed is gone from the index's storage too, not only from its
    /// answers (after a conversation is forgotten): a file-based index rewrites itself so
    /// a byte scan finds none of it. Slow on a large index; for forgetting, not for turns.
    async fn purge(&self) -> Result<(), IndexError>;
}

/// What went wrong with an index.
#[derive(Debug)]
#[non_exhaustive]
pub enum IndexError {
    /// The request cannot run (fix the request).
    InvalidRequest {
        /// Why.
        reason: String,
    },
    /// An update that breaks the contract (a chunk filed under another group).
    InvalidUpdate {
        /// Why.
        reason: String,
    },
    /// The backend failed; `retryable` says whether trying again can help.
    Storage {
        /// What was being done.
        action: String,
        /// Whether a retry can help (a busy lock, a dropped connection).
        retryable: bool,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl IndexError {
    /// Whether the same call can succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            IndexError::Storage {
                retryable: true,
                ..
            }
        )
    }
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::InvalidRequest { reason } => write!(f, "invalid search: {reason}"),
            IndexError::InvalidUpdate { reason } => write!(f, "invalid index update: {reason}"),
            IndexError::Storage { action, source, .. } => {
                write!(f, "search index: {action}: {source}")
            }
        }
    }
}

impl std::error::Error for IndexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexError::Storage { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Which query terms a backend searches by, given how many chunks hold each term
/// (`documents`, in query order) out of `total`: those held by at most
/// [`COMMON_TERM_SHARE`] of the chunks, or, when every term is that common, the rarest one
/// rather than none. Terms no chunk holds are left out. Returns their positions, in order.
pub fn terms_to_search(documents: &[usize], total: usize) -> Vec<usize> {
    let share = |count: usize| count as f64 / total.max(1) as f64;
    let rare: Vec<usize> = (0..documents.len())
        .filter(|&i| documents[i] > 0 && share(documents[i]) <= COMMON_TERM_SHARE)
        .collect();
    if !rare.is_empty() {
        return rare;
    }
    (0..documents.len())
        .filter(|&i| documents[i] > 0)
        .min_by_key(|&i| documents[i])
        .into_iter()
        .collect()
}

/// Checks that every chunk of every update belongs to the update's group.
pub fn check_updates(updates: &[GroupUpdate]) -> Result<(), IndexError> {
    for update in updates {
        if let Some(stray) = update.chunks.iter().find(|c| c.group != update.group) {
            return Err(IndexError::InvalidUpdate {
                reason: format!(
                    "chunk {:?} belongs to group {:?}, not {:?}",
                    stray.source, stray.group, update.group
                ),
            });
        }
    }
    Ok(())
}

//! The archive commit: the journal entries that archive a slice of a session, and the move
//! of that session's pointer past the slice, as one port operation.
//!
//! A transactional backend commits both at once, so an entry exists exactly when the
//! pointer moved. A backend without transactions ([`TwoStepArchive`]: files, memory)
//! journals first and moves the pointer second; every entry names its session, its slice
//! and a digest of the slice's messages, and an index finds them, so a commit repeated
//! after a crash or a conflict reuses what was journaled instead of archiving the slice
//! twice.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_session_store::{
    Append, Revision, SessionError, SessionKey, SessionMeta, SessionStore, StoredMessage,
    TOKENS_FIELD,
};
use sha2::{Digest as _, Sha256};

use crate::entry::{JournalEntry, NewEntry};
use crate::error::MemoryError;
use crate::journal::HistoryJournal;

/// One archive to commit.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveCommit<'a> {
    /// The session.
    pub session: &'a SessionKey,
    /// The session's revision the archive was made from: the commit fails with
    /// [`MemoryError::Conflict`] when the session moved on.
    pub expected: Revision,
    /// The first message archived (the pointer before).
    pub from: u64,
    /// One past the last (the pointer after).
    pub to: u64,
    /// [`archive_digest`] of the messages `[from, to)`.
    pub digest: &'a str,
    /// The entries' texts: a summary, or the messages in parts; empty when there was
    /// nothing worth keeping (the pointer still moves).
    pub entries: &'a [String],
    /// The session's metadata after the archive: its pointer at `to`, and whatever else the
    /// archive changes with it (the running summary).
    pub meta: &'a SessionMeta,
}

impl ArchiveCommit<'_> {
    /// The journal entries to append, each naming the session, the slice and its digest.
    pub fn new_entries(&self) -> Vec<NewEntry<'_>> {
        self.entries
            .iter()
            .map(|text| {
                NewEntry::text(text)
                    .from_session(self.session.as_str())
                    .covering(self.from, self.to)
                    .with_digest(self.digest)
            })
            .collect()
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveCommitted {
    /// The entries' cursors.
    pub cursors: Vec<u64>,
    /// The session's revision after the pointer moved.
    pub revision: Revision,
    /// The entries were journaled already (by this archive's earlier attempt, whose pointer
    /// move was lost) and were not appended again.
    pub reused: bool,
}

/// An archive found in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFound {
    /// Its entries' cursors.
    pub cursors: Vec<u64>,
    /// One past the last message it archives.
    pub to: u64,
    /// The digest of the messages it archives (`None`: written by an older release, which
    /// recorded none; such an archive is never matched).
    pub digest: Option<String>,
}

/// The archive commit port.
///
/// Contract (conformance suite, feature `conformance`):
///
/// - **One operation.** `commit_archive` journals the entries and moves the pointer from
///   `from` to `to`; a transactional backend does both or neither.
/// - **Stale archives are refused.** When the session is no longer at `expected`, the
///   commit fails with [`MemoryError::Conflict`] and moves no pointer.
/// - **Once per slice.** When the journal already holds an archive of this session from
///   `from` with the same digest (an earlier attempt whose pointer move was lost), it is
///   not appended again: the commit reuses it. A slice is never journaled twice.
/// - **Found by index.** `find_archive` finds every archive of a session from a message,
///   however many entries other sessions appended since.
/// - The pointer never passes the message count.
#[async_trait]
pub trait SessionArchive: Send + Sync {
    /// Journals the archive and moves the session's pointer, as one operation.
    async fn commit_archive(
        &self,
        commit: &ArchiveCommit<'_>,
    ) -> Result<ArchiveCommitted, MemoryError>;

    /// The archives of `session` that start at message `from`, oldest first.
    async fn find_archive(
        &self,
        session: &SessionKey,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError>;
}

/// The digest of the messages of an archived slice: the first 16 hex digits of the SHA-256
/// of their JSON (without this program's cached token counts). Two slices that start at the
/// same message of one session are the same slice only when their digests agree; after a
/// `/new` or a retention, message numbers start over and the digest tells them apart.
pub fn archive_digest(messages: &[StoredMessage]) -> String {
    let mut hasher = HashWriter(Sha256::new());
    for message in messages {
        // serde_json's compact text of the fields without the token count, written
        // straight into the hash (no copy of the fields, no string).
        let _ = serde_json::to_writer(&mut hasher, &WithoutTokens(message.fields()));
        hasher.0.update(b"\n");
    }
    let digest = hasher.0.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A message's fields without [`TOKENS_FIELD`], in their order.
struct WithoutTokens<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl serde::Serialize for WithoutTokens<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = self.0.iter().filter(|(key, _)| *key != TOKENS_FIELD);
        let mut map = serializer.serialize_map(Some(fields.clone().count()))?;
        for (key, value) in fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Bytes written into a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The session error of an archive commit as a memory error: a stale session is a
/// [`MemoryError::Conflict`], anything else keeps its source.
pub fn session_failure(error: SessionError) -> MemoryError {
    match error {
        SessionError::Conflict { .. } => MemoryError::Conflict {
            what: format!("the session changed since the archive was made ({error})"),
        },
        other => MemoryError::Session(other),
    }
}

/// Finds archives by session and first message: the index a journal without transactions
/// keeps beside its entries, rebuilt when the journal is read whole.
#[derive(Debug, Clone, Default)]
pub struct ArchiveIndex {
    by_start: HashMap<(String, u64), Vec<u64>>,
}

impl ArchiveIndex {
    /// Indexes `entry` (entries come in cursor order).
    pub fn add(&mut self, entry: &JournalEntry) {
        if let (Some(session), Some((from, _))) = (&entry.session_key, entry.message_range) {
            self.by_start
                .entry((session.clone(), from))
                .or_default()
                .push(entry.cursor);
        }
    }

    /// Forgets everything (before a whole re-read).
    pub fn clear(&mut self) {
        self.by_start.clear();
    }

    /// The archives of `session` from `from` among `entries` (sorted by cursor), oldest
    /// first: consecutive entries with the same slice and digest form one archive.
    pub fn find(&self, entries: &[JournalEntry], session: &str, from: u64) -> Vec<ArchiveFound> {
        let Some(cursors) = self.by_start.get(&(session.to_owned(), from)) else {
            return Vec::new();
        };
        let mut found: Vec<ArchiveFound> = Vec::new();
        for cursor in cursors {
            let Ok(at) = entries.binary_search_by_key(cursor, |e| e.cursor) else {
                continue; // compacted away
            };
            let entry = &entries[at];
            let Some((_, to)) = entry.message_range else {
                continue;
            };
            match found.last_mut() {
                Some(last)
                    if last.to == to
                        && last.digest == entry.message_digest
                        && last.cursors.last().is_some_and(|c| c + 1 == entry.cursor) =>
                {
                    last.cursors.push(entry.cursor);
                }
                _ => found.push(ArchiveFound {
                    cursors: vec![entry.cursor],
                    to,
                    digest: entry.message_digest.clone(),
                }),
            }
        }
        found
    }
}

/// What [`TwoStepArchive`] needs of a journal without transactions: archives found by an
/// index, and appended only when not already there, in one atomic step.
#[async_trait]
pub trait ArchiveJournal: HistoryJournal {
    /// The archives of `session` from message `from`, oldest first.
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError>;

    /// Appends `entries` (all of one archive: same session, slice and digest) unless an
    /// archive of that session from the same message with the same slice and digest is
    /// already journaled; the cursors, and whether they were already there.
    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError>;
}

/// The matching archive among `found` for `entries` (same slice end and digest).
pub fn matching_archive<'a>(
    found: &'a [ArchiveFound],
    entries: &[NewEntry<'_>],
) -> Option<&'a ArchiveFound> {
    let first = entries.first()?;
    let (_, to) = first.message_range?;
    let digest = first.digest?;
    found
        .iter()
        .find(|a| a.to == to && a.digest.as_deref() == Some(digest))
}

/// The archive commit over a journal and a session store that have no transaction in
/// common (files, memory): entries first, then the pointer, each step atomic, repaired by
/// the index when the second is lost.
pub struct TwoStepArchive {
    journal: Arc<dyn ArchiveJournal>,
    sessions: Arc<dyn SessionStore>,
    broken: crate::broken::Switch,
}

impl std::fmt::Debug for TwoStepArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoStepArchive").finish_non_exhaustive()
    }
}

impl TwoStepArchive {
    /// Archives of `sessions` into `journal`.
    pub fn new(journal: Arc<dyn ArchiveJournal>, sessions: Arc<dyn SessionStore>) -> Self {
        TwoStepArchive {
            journal,
            sessions,
            broken: crate::broken::Switch::default(),
        }
    }

    /// A commit with one contract rule switched off, to show that the conformance suite
    /// notices (feature `conformance`; never for real use).
    #[cfg(feature = "conformance")]
    pub fn broken(
        rule: crate::BrokenRule,
        journal: Arc<dyn ArchiveJournal>,
        sessions: Arc<dyn SessionStore>,
    ) -> Self {
        TwoStepArchive {
            broken: crate::broken::Switch::on(rule),
            ..Self::new(journal, sessions)
        }
    }
}

impl TwoStepArchive {
    /// The second step: the session's metadata (and so its pointer) at the commit's.
    async fn move_pointer(&self, commit: &ArchiveCommit<'_>) -> Result<Revision, MemoryError> {
        self.sessions
            .append(
                commit.session,
                Some(commit.expected),
                Append {
                    messages: &[],
                    meta: Some(commit.meta),
                },
            )
            .await
            .map_err(session_failure)
    }
}

#[async_trait]
impl SessionArchive for TwoStepArchive {
    async fn commit_archive(
        &self,
        commit: &ArchiveCommit<'_>,
    ) -> Result<ArchiveCommitted, MemoryError> {
        let current = self
            .sessions
            .current_revision(commit.session)
            .await
            .map_err(session_failure)?;
        if current != Some(commit.expected) {
            return Err(MemoryError::Conflict {
                what: format!(
                    "session {} is at {} now, not at {} where the archive was made",
                    commit.session,
                    current.map_or_else(|| "nothing".to_owned(), |r| r.to_string()),
                    commit.expected
                ),
            });
        }
        let entries = commit.new_entries();
        let pointer_first = self.broken.is(crate::broken::Rule::PointerBeforeJournal);
        let mut moved = None;
        if pointer_first {
            moved = Some(self.move_pointer(commit).await?);
        }
        let (cursors, reused) = if entries.is_empty() {
            (Vec::new(), false)
        } else if self.broken.is(crate::broken::Rule::ArchiveOnce) {
            (self.journal.append(&entries).await?, false)
        } else {
            self.journal.append_archive(&entries).await?
        };
        let revision = match moved {
            Some(revision) => revision,
            None => self.move_pointer(commit).await?,
        };
        Ok(ArchiveCommitted {
            cursors,
            revision,
            reused,
        })
    }

    async fn find_archive(
        &self,
        session: &SessionKey,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        self.journal.archives_from(session.as_str(), from).await
    }
}

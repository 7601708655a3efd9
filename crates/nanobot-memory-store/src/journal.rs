//! The history journal port.

use std::sync::Arc;

use async_trait::async_trait;

use crate::entry::{JournalEntry, NewEntry};
use crate::error::MemoryError;

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compaction {
    /// Entries before.
    pub before: usize,
    /// Entries dropped (all at or below Dream's cursor).
    pub dropped: usize,
    /// Entries kept; more than the bound when Dream has not read them yet.
    pub kept: usize,
}

/// The append-only journal of what conversations taught (nanobot-ai's
/// `memory/history.jsonl`), with Dream's read position.
///
/// Contract, checked by the conformance suite (`conformance` feature) for every backend:
///
/// - **Cursors** are allocated in increasing order, starting at 1, and never reused: not
///   after a compaction, not after a restart, not when the journal was edited by hand.
/// - **Order**: reads return entries in the order they were appended.
/// - **Removal** takes exactly the entries named (a forgotten conversation); the rest keep
///   their cursors and order.
/// - **Atomicity**: an append of several entries is all or nothing, and concurrent appends
///   (also from other processes, for backends that share storage) never get the same cursor.
/// - **Visibility**: cursors are assigned in commit order. An entry becomes visible to
///   readers together with every entry of a lower cursor, so a reader that has seen cursor
///   `x` and polls `read_since(x)` never skips an entry: nothing with a cursor at or below
///   `x` can appear later. (A database sequence does not give this: a transaction can take
///   a lower number and commit after a higher one. Take the cursor from a per-journal
///   counter inside the inserting transaction.)
/// - **Compaction** drops the oldest entries down to a bound but never an entry after Dream's
///   cursor.
/// - **Dream's cursor** only names cursors that were allocated.
#[async_trait]
pub trait HistoryJournal: Send + Sync {
    /// Appends entries in one write; their cursors, in order.
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError>;

    /// Entries with a cursor above `cursor`, oldest first, at most `limit` (all when `None`).
    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError>;

    /// The last `count` entries, oldest first.
    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError>;

    /// The latest cursor allocated (0 for a new journal).
    async fn latest_cursor(&self) -> Result<u64, MemoryError>;

    /// The cursor of the last entry Dream processed (0 before its first run).
    async fn dream_cursor(&self) -> Result<u64, MemoryError>;

    /// Records that Dream processed everything up to `cursor`; refused past the latest
    /// cursor.
    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError>;

    /// Drops the oldest entries so that at most `max_entries` remain, except entries Dream
    /// has not read yet, which always stay. `0` disables compaction.
    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError>;

    /// Removes the entries with these cursors, wherever they are (Dream read them or not;
    /// unknown cursors are ignored): how a conversation is forgotten. Their cursors are
    /// never handed out again, and Dream's cursor does not move. Returns how many went.
    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError>;

    /// What this journal offers beyond the contract.
    fn capabilities(&self) -> JournalCapabilities;
}

/// What a journal offers beyond the contract every journal keeps. Build it with
/// `..Default::default()`, so a capability added later keeps compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalCapabilities {
    /// Several journal instances over the same storage (processes, machines) share one
    /// cursor sequence and see each other's entries.
    pub shared_storage: bool,
}

/// Appends one entry; its cursor.
#[async_trait]
pub trait HistoryJournalExt: HistoryJournal {
    /// Appends one entry and returns its cursor.
    async fn append_one(&self, entry: NewEntry<'_>) -> Result<u64, MemoryError> {
        let cursors = self.append(&[entry]).await?;
        cursors
            .first()
            .copied()
            .ok_or_else(|| MemoryError::backend("the journal allocated no cursor for an append"))
    }

    /// Entries Dream has not processed yet, oldest first, at most `limit` (the oldest
    /// `limit`: what Dream reads next).
    async fn unprocessed(&self, limit: Option<usize>) -> Result<Vec<JournalEntry>, MemoryError> {
        let cursor = self.dream_cursor().await?;
        self.read_since(cursor, limit).await
    }

    /// The newest `limit` entries Dream has not processed yet, oldest first: what a
    /// prompt's Recent History shows when the backlog is longer than it can hold.
    async fn unprocessed_newest(&self, limit: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        let cursor = self.dream_cursor().await?;
        let mut newest = self.read_last(limit).await?;
        newest.retain(|entry| entry.cursor > cursor);
        Ok(newest)
    }
}

impl<T: HistoryJournal + ?Sized> HistoryJournalExt for T {}

macro_rules! forward_journal {
    ($($wrapper:ty),*) => {$(
        #[async_trait]
        impl<T: HistoryJournal + ?Sized> HistoryJournal for $wrapper {
            async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
                (**self).append(entries).await
            }
            async fn read_since(&self, cursor: u64, limit: Option<usize>) -> Result<Vec<JournalEntry>, MemoryError> {
                (**self).read_since(cursor, limit).await
            }
            async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
                (**self).read_last(count).await
            }
            async fn latest_cursor(&self) -> Result<u64, MemoryError> {
                (**self).latest_cursor().await
            }
            async fn dream_cursor(&self) -> Result<u64, MemoryError> {
                (**self).dream_cursor().await
            }
            async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
                (**self).set_dream_cursor(cursor).await
            }
            async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
                (**self).compact(max_entries).await
            }
            async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
                (**self).remove_entries(cursors).await
            }
            fn capabilities(&self) -> JournalCapabilities {
                (**self).capabilities()
            }
        }
    )*};
}

forward_journal!(Arc<T>, Box<T>);

/// A journal that can take another journal's entries as they are: how memory moves between
/// stores (a workspace on files into a database and back) without renumbering what Dream
/// and the sessions' archive records point at.
///
/// Contract (checked by [`crate::journal_import_conformance`]):
/// - Entries keep their cursors, timestamps and every field.
/// - Entries at or below this journal's latest cursor are skipped, so an import can be run
///   again or resumed; the count of entries copied is returned.
/// - The latest cursor becomes at least `latest` (a source's latest may lie past its last
///   entry, after a compaction), and Dream's at least `dream`, never past the latest.
/// - Nothing is lowered: a cursor already past the given one stays.
#[async_trait]
pub trait JournalImport: HistoryJournal {
    /// Copies `entries` (another journal's, in cursor order); how many were copied.
    async fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream: u64,
    ) -> Result<usize, MemoryError>;
}

#[async_trait]
impl<T: JournalImport + ?Sized> JournalImport for Arc<T> {
    async fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream: u64,
    ) -> Result<usize, MemoryError> {
        (**self).import(entries, latest, dream).await
    }
}

/// The entries with a cursor above `cursor`, at most `limit`, from `entries` held in strictly
/// increasing cursor order (both in-process journals keep them so): the first one is found
/// by bisection, so reading the newest entries of a long journal costs what it returns,
/// not the journal's length.
pub(crate) fn entries_after(
    entries: &[JournalEntry],
    cursor: u64,
    limit: Option<usize>,
) -> Vec<JournalEntry> {
    let first = entries.partition_point(|e| e.cursor <= cursor);
    let end = first.saturating_add(limit.unwrap_or(usize::MAX));
    entries[first..end.min(entries.len())].to_vec()
}

/// Where a compaction to `max_entries` starts keeping, for `cursors` in file order and
/// Dream's cursor `dream` (nanobot-ai's rule: the bound, but never past the first entry
/// Dream has not read). `None` marks a line that is no valid entry but still counts.
/// Public so every backend compacts by the same rule.
pub fn compaction_start(cursors: &[Option<u64>], max_entries: usize, dream: u64) -> usize {
    if max_entries == 0 || cursors.len() <= max_entries {
        return 0;
    }
    let first_unread = cursors
        .iter()
        .position(|c| c.is_some_and(|c| c > dream))
        .unwrap_or(cursors.len());
    (cursors.len() - max_entries).min(first_unread)
}

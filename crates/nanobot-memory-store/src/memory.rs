//! The in-memory journal: the reference for the conformance suite, and the choice for bots
//! that keep no memory across restarts.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use nanobot_llm_port::{Clock, SystemClock};

use crate::archive::{ArchiveFound, ArchiveIndex, ArchiveJournal, matching_archive};
use crate::entry::{JournalEntry, NewEntry, TIMESTAMP_FORMAT};
use crate::error::MemoryError;
use crate::journal::{
    Compaction, HistoryJournal, JournalCapabilities, JournalImport, compaction_start, entries_after,
};

#[derive(Debug, Default)]
struct State {
    entries: Vec<JournalEntry>,
    latest: u64,
    dream: u64,
    index: ArchiveIndex,
}

impl State {
    fn push(&mut self, entry: JournalEntry) {
        self.index.add(&entry);
        self.entries.push(entry);
    }
}

/// A journal held in memory: the reference backend.
pub struct InMemoryJournal {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    broken: crate::broken::Switch,
}

impl std::fmt::Debug for InMemoryJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryJournal").finish_non_exhaustive()
    }
}

impl Default for InMemoryJournal {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl InMemoryJournal {
    /// An empty journal stamping entries with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        InMemoryJournal {
            state: Mutex::new(State::default()),
            clock,
            broken: crate::broken::Switch::default(),
        }
    }

    /// A journal with one contract rule switched off, to show that the conformance suite
    /// notices (feature `conformance`; never for real use).
    #[cfg(feature = "conformance")]
    pub fn broken(rule: crate::BrokenRule, clock: Arc<dyn Clock>) -> Self {
        InMemoryJournal {
            broken: crate::broken::Switch::on(rule),
            ..Self::new(clock)
        }
    }

    /// Appends with cursors taken first and entries stored later, out of order: odd
    /// cursors wait while later ones are stored (what a database sequence does).
    async fn append_out_of_order(&self, entries: &[NewEntry<'_>]) -> Vec<u64> {
        let timestamp = stamp(self.clock.as_ref());
        let first = {
            let mut state = self.lock();
            let first = state.latest + 1;
            state.latest += entries.len() as u64;
            first
        };
        let cursors: Vec<u64> = (first..first + entries.len() as u64).collect();
        if first % 2 == 1 {
            for _ in 0..4 {
                YieldNow(false).await;
            }
        }
        let mut state = self.lock();
        for (entry, cursor) in entries.iter().zip(&cursors) {
            let stored = entry.stored(*cursor, &timestamp);
            let at = state.entries.partition_point(|e| e.cursor < *cursor);
            state.index.add(&stored);
            state.entries.insert(at, stored);
        }
        cursors
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The timestamp of an entry written at the clock's now: local wall-clock time to the minute,
/// as nanobot-ai writes it ([`crate::TIMESTAMP_FORMAT`]). Public so every backend stamps
/// alike.
pub fn stamp(clock: &dyn Clock) -> String {
    clock
        .now()
        .with_timezone(&chrono::Local)
        .format(TIMESTAMP_FORMAT)
        .to_string()
}

#[async_trait]
impl HistoryJournal for InMemoryJournal {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        if self.broken.is(crate::broken::Rule::JournalCommitOrder) {
            return Ok(self.append_out_of_order(entries).await);
        }
        let timestamp = stamp(self.clock.as_ref());
        let mut state = self.lock();
        Ok(append_locked(&mut state, entries, &timestamp))
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        // In cursor order: appends allocate upwards, late ones are inserted in place.
        Ok(entries_after(&self.lock().entries, cursor, limit))
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        let state = self.lock();
        let from = state.entries.len().saturating_sub(count);
        Ok(state.entries[from..].to_vec())
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        Ok(self.lock().latest)
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        Ok(self.lock().dream)
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        let mut state = self.lock();
        if cursor > state.latest {
            return Err(MemoryError::InvalidCursor {
                cursor,
                latest: state.latest,
            });
        }
        state.dream = cursor;
        Ok(())
    }

    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
        let mut state = self.lock();
        let cursors: Vec<Option<u64>> = state.entries.iter().map(|e| Some(e.cursor)).collect();
        let start = compaction_start(&cursors, max_entries, state.dream);
        let before = state.entries.len();
        state.entries.drain(..start);
        Ok(Compaction {
            before,
            dropped: start,
            kept: before - start,
        })
    }

    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        let mut state = self.lock();
        let before = state.entries.len();
        state.entries.retain(|e| !cursors.contains(&e.cursor));
        Ok(before - state.entries.len())
    }

    fn capabilities(&self) -> JournalCapabilities {
        JournalCapabilities::default()
    }
}

fn append_locked(state: &mut State, entries: &[NewEntry<'_>], timestamp: &str) -> Vec<u64> {
    let mut cursors = Vec::with_capacity(entries.len());
    for entry in entries {
        state.latest += 1;
        let cursor = state.latest;
        state.push(entry.stored(cursor, timestamp));
        cursors.push(cursor);
    }
    cursors
}

#[async_trait]
impl JournalImport for InMemoryJournal {
    async fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream: u64,
    ) -> Result<usize, MemoryError> {
        let mut state = self.lock();
        let mut copied = 0;
        for entry in entries {
            if entry.cursor > state.latest {
                state.latest = entry.cursor;
                state.push(entry.clone());
                copied += 1;
            }
        }
        state.latest = state.latest.max(latest);
        state.dream = state.dream.max(dream.min(state.latest));
        Ok(copied)
    }
}

#[async_trait]
impl ArchiveJournal for InMemoryJournal {
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        let state = self.lock();
        Ok(state.index.find(&state.entries, session, from))
    }

    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError> {
        let timestamp = stamp(self.clock.as_ref());
        let mut state = self.lock();
        if let (Some(session), Some((from, _))) = (
            entries.first().and_then(|e| e.session_key),
            entries.first().and_then(|e| e.message_range),
        ) {
            let found = state.index.find(&state.entries, session, from);
            if let Some(archive) = matching_archive(&found, entries) {
                return Ok((archive.cursors.clone(), true));
            }
        }
        Ok((append_locked(&mut state, entries, &timestamp), false))
    }
}

/// A future that is pending once before it is ready, waking itself: lets other tasks run
/// without a runtime's timer.
pub(crate) struct YieldNow(pub(crate) bool);

impl std::future::Future for YieldNow {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

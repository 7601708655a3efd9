//! The in-memory journal: the reference for the conformance suite, and the choice for bots
//! that keep no memory across restarts.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use llm_port::{Clock, SystemClock};

use crate::entry::{JournalEntry, NewEntry, TIMESTAMP_FORMAT};
use crate::error::MemoryError;
use crate::journal::{Compaction, HistoryJournal, compaction_start};

#[derive(Debug, Default)]
struct State {
    entries: Vec<JournalEntry>,
    latest: u64,
    dream: u64,
}

/// A journal held in memory.
pub struct MemoryJournal {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryJournal").finish_non_exhaustive()
    }
}

impl Default for MemoryJournal {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl MemoryJournal {
    /// An empty journal stamping entries with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryJournal {
            state: Mutex::new(State::default()),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The timestamp of an entry written now.
pub(crate) fn stamp(clock: &dyn Clock) -> String {
    clock
        .now()
        .with_timezone(&chrono::Local)
        .format(TIMESTAMP_FORMAT)
        .to_string()
}

#[async_trait]
impl HistoryJournal for MemoryJournal {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        let timestamp = stamp(self.clock.as_ref());
        let mut state = self.lock();
        let mut cursors = Vec::with_capacity(entries.len());
        for entry in entries {
            state.latest += 1;
            let cursor = state.latest;
            state.entries.push(JournalEntry {
                cursor,
                timestamp: timestamp.clone(),
                content: entry.content.to_owned(),
                session_key: entry.session_key.map(str::to_owned),
                message_range: entry.message_range,
                extra: Default::default(),
            });
            cursors.push(cursor);
        }
        Ok(cursors)
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        let state = self.lock();
        Ok(state
            .entries
            .iter()
            .filter(|e| e.cursor > cursor)
            .take(limit.unwrap_or(usize::MAX))
            .cloned()
            .collect())
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
}

//! The faulty ports of the simulation: the in-memory session store and journal, with a
//! rival writer, slow I/O and failing appends, each chosen by the seed's generator and
//! counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nanobot_memory_store::{
    ArchiveFound, ArchiveJournal, Compaction, HistoryJournal, InMemoryJournal, JournalCapabilities,
    JournalEntry, MemoryError, NewEntry,
};
use nanobot_session_store::{
    Append, InMemorySessionStore, Loaded, ReplayView, Revision, Session, SessionCapabilities,
    SessionError, SessionInfo, SessionKey, SessionStore, StoredMessage, TurnLock,
};

use crate::rng::Rng;

/// Faults injected, by kind, across the run.
#[derive(Debug, Default)]
pub(super) struct Injected(pub(super) BTreeMap<&'static str, u64>);

impl Injected {
    pub(super) fn add(&mut self, kind: &'static str) {
        *self.0.entry(kind).or_default() += 1;
    }
}

/// Shared state of the faulty ports of one seed.
pub(super) struct Faults {
    pub(super) rng: Mutex<Rng>,
    pub(super) injected: Mutex<Injected>,
    /// Percent chances.
    pub(super) conflict: u64,
    pub(super) slow: u64,
    pub(super) journal_error: u64,
}

impl Faults {
    pub(super) fn roll(&self, percent: u64) -> bool {
        self.rng
            .lock()
            .map(|mut r| r.chance(percent))
            .unwrap_or(false)
    }

    pub(super) fn millis(&self, max: u64) -> u64 {
        self.rng.lock().map(|mut r| r.below(max)).unwrap_or(0)
    }

    pub(super) fn note(&self, kind: &'static str) {
        if let Ok(mut injected) = self.injected.lock() {
            injected.add(kind);
        }
    }

    pub(super) async fn maybe_slow(&self) {
        if self.roll(self.slow) {
            self.note("slow_io");
            tokio::time::sleep(Duration::from_millis(1 + self.millis(2_000))).await;
        }
    }
}

/// The in-memory session store with a rival writer and slow I/O.
pub(super) struct FaultySessions {
    pub(super) inner: InMemorySessionStore,
    pub(super) faults: Arc<Faults>,
}

#[async_trait]
impl SessionStore for FaultySessions {
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        self.faults.maybe_slow().await;
        self.inner.load(key).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        self.faults.maybe_slow().await;
        if expected.is_some() && self.faults.roll(self.faults.conflict) {
            // Another instance writes first: a real conflict, and a real message to keep.
            if let Some(loaded) = self.inner.load(key).await? {
                let rival = [StoredMessage::user("a rival instance's message")];
                self.inner
                    .append(
                        key,
                        Some(loaded.revision),
                        Append {
                            messages: &rival,
                            meta: None,
                        },
                    )
                    .await?;
                self.faults.note("conflict");
            }
        }
        self.inner.append(key, expected, append).await
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        self.faults.maybe_slow().await;
        self.inner.rewrite(session, expected).await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        self.inner.list().await
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.inner.delete(key).await
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        self.inner.open_for_replay(key).await
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        self.inner.flush(key, expected).await
    }

    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        self.inner.try_lock_turn(key).await
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        self.inner.current_revision(key).await
    }

    fn capabilities(&self) -> SessionCapabilities {
        self.inner.capabilities()
    }
}

/// The in-memory journal whose appends sometimes fail (before anything is written).
pub(super) struct FaultyJournal {
    pub(super) inner: InMemoryJournal,
    pub(super) faults: Arc<Faults>,
}

impl FaultyJournal {
    pub(super) fn refuse(&self) -> Result<(), MemoryError> {
        if self.faults.roll(self.faults.journal_error) {
            self.faults.note("journal_error");
            return Err(MemoryError::Backend {
                message: "injected: the journal is unavailable".into(),
                retryable: true,
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl HistoryJournal for FaultyJournal {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        self.faults.maybe_slow().await;
        self.refuse()?;
        self.inner.append(entries).await
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        self.inner.read_since(cursor, limit).await
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        self.inner.read_last(count).await
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        self.inner.latest_cursor().await
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        self.inner.dream_cursor().await
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        self.inner.set_dream_cursor(cursor).await
    }

    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
        self.inner.compact(max_entries).await
    }

    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        self.inner.remove_entries(cursors).await
    }

    fn capabilities(&self) -> JournalCapabilities {
        self.inner.capabilities()
    }
}

#[async_trait]
impl ArchiveJournal for FaultyJournal {
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        self.inner.archives_from(session, from).await
    }

    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError> {
        self.faults.maybe_slow().await;
        self.refuse()?;
        self.inner.append_archive(entries).await
    }
}

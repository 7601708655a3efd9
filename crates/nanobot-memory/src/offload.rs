//! Blocking stores off the runtime's worker threads. The file backends do their IO with
//! blocking system calls inside `async fn`s (an append is microseconds, an fsync on a slow
//! disk may take seconds); on a server, a call that blocks its worker would stall every
//! other session's task queued on that worker. [`OffWorker`] runs each call of the store
//! it wraps under `tokio::task::block_in_place`, so the runtime hands the worker's other
//! tasks to another thread for the duration; on a current-thread runtime, where that is
//! impossible, the call runs as it is.

use std::future::Future;

use async_trait::async_trait;
use nanobot_memory_store::{
    ArchiveFound, ArchiveJournal, Compaction, HistoryJournal, JournalCapabilities, JournalEntry,
    MemoryError, NewEntry,
};
use nanobot_session_store::{
    Append, Loaded, ReplayView, Revision, Session, SessionCapabilities, SessionError, SessionInfo,
    SessionKey, SessionStore, TurnLock,
};
use tokio::runtime::{Handle, RuntimeFlavor};

/// A store whose calls may block, wrapped so they never hold a runtime worker.
#[derive(Debug)]
pub struct OffWorker<S>(S);

impl<S> OffWorker<S> {
    /// `store`, its calls run off the worker threads.
    pub fn new(store: S) -> Self {
        OffWorker(store)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.0
    }
}

/// Runs `work` to completion with the worker handed off, where the runtime allows it.
async fn off<F: Future>(work: F) -> F::Output {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(work))
        }
        _ => work.await,
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for OffWorker<S> {
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        off(self.0.load(key)).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        off(self.0.append(key, expected, append)).await
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        off(self.0.rewrite(session, expected)).await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        off(self.0.list()).await
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        off(self.0.delete(key)).await
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        off(self.0.open_for_replay(key)).await
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        off(self.0.flush(key, expected)).await
    }

    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        off(self.0.try_lock_turn(key)).await
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        off(self.0.current_revision(key)).await
    }

    fn capabilities(&self) -> SessionCapabilities {
        self.0.capabilities()
    }
}

#[async_trait]
impl<J: HistoryJournal> HistoryJournal for OffWorker<J> {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        off(self.0.append(entries)).await
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        off(self.0.read_since(cursor, limit)).await
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        off(self.0.read_last(count)).await
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        off(self.0.latest_cursor()).await
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        off(self.0.dream_cursor()).await
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        off(self.0.set_dream_cursor(cursor)).await
    }

    async fn compact(&self, max_entries: usize) -> Result<Compaction, MemoryError> {
        off(self.0.compact(max_entries)).await
    }

    async fn remove_entries(&self, cursors: &[u64]) -> Result<usize, MemoryError> {
        off(self.0.remove_entries(cursors)).await
    }

    fn capabilities(&self) -> JournalCapabilities {
        self.0.capabilities()
    }
}

#[async_trait]
impl<J: ArchiveJournal> ArchiveJournal for OffWorker<J> {
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        off(self.0.archives_from(session, from)).await
    }

    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError> {
        off(self.0.append_archive(entries)).await
    }
}

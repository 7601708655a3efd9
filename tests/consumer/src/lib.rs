//! Stores of a bot builder's own, and the backend that gives them to a bot, written against
//! the registry packages of nanobot-rs only.
//!
//! `AuditedSessions` keeps sessions in memory and an audit trail of every write (which
//! session, how many messages): the shape of a store that forwards sessions to a service of
//! yours. `ToyJournal` is a history journal written from scratch on the port's contract.
//! `OwnBackend` gives each scope one of each and keeps the rest of its memory in memory;
//! `Bot::builder().backend(..)` plugs it in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_memory::llm::{Clock, SystemClock, TokenCounter};
use nanobot_memory::prompt_inputs::{PromptFiles, PromptLoader};
use nanobot_memory::scope::ScopeKey;
use nanobot_memory::sessions::{
    Append, InMemorySessionStore, Loaded, ReplayView, Revision, Session, SessionCapabilities,
    SessionError, SessionInfo, SessionKey, SessionManager, SessionStore, TurnLock,
};
use nanobot_memory::store::{
    ArchiveFound, ArchiveJournal, Compaction, HistoryJournal, InMemoryDocuments, InMemoryLease,
    InMemoryVersions, JournalCapabilities, JournalEntry, MemoryDocuments, MemoryError,
    MemoryVersions, NewEntry, ScopedDocuments, compaction_start, matching_archive, stamp,
};
use nanobot_memory::turn::TurnError;
use nanobot_memory::{MemoryBackend, ScopeStores};

/// Sessions in memory, with an audit line per write.
#[derive(Default)]
pub struct AuditedSessions {
    inner: InMemorySessionStore,
    audit: Mutex<Vec<String>>,
}

impl AuditedSessions {
    /// The audit trail so far: `append <key> <n>` and `rewrite <key> <n>` lines.
    pub fn audit(&self) -> Vec<String> {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, line: String) {
        self.audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

#[async_trait]
impl SessionStore for AuditedSessions {
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        self.inner.load(key).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        let count = append.messages.len();
        let revision = self.inner.append(key, expected, append).await?;
        self.record(format!("append {key} {count}"));
        Ok(revision)
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        let revision = self.inner.rewrite(session, expected).await?;
        self.record(format!(
            "rewrite {} {}",
            session.key(),
            session.messages().len()
        ));
        Ok(revision)
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

/// A journal in a vector behind a mutex: cursors from a counter that only grows, Dream's
/// cursor checked against it, compaction by the port's shared rule.
pub struct ToyJournal {
    clock: Arc<dyn Clock>,
    state: Mutex<JournalState>,
}

#[derive(Default)]
struct JournalState {
    entries: Vec<JournalEntry>,
    latest: u64,
    dream: u64,
}

impl JournalState {
    fn append(&mut self, entries: &[NewEntry<'_>], timestamp: &str) -> Vec<u64> {
        let mut cursors = Vec::with_capacity(entries.len());
        for entry in entries {
            self.latest += 1;
            let cursor = self.latest;
            self.entries.push(entry.stored(cursor, timestamp));
            cursors.push(cursor);
        }
        cursors
    }

    /// The archives of `session` from message `from`, oldest first: consecutive entries
    /// with the same slice and digest are one archive. (A scan: it is a toy.)
    fn archives_from(&self, session: &str, from: u64) -> Vec<ArchiveFound> {
        let mut found: Vec<ArchiveFound> = Vec::new();
        for entry in &self.entries {
            let Some((start, to)) = entry.message_range else {
                continue;
            };
            if start != from || entry.session_key.as_deref() != Some(session) {
                continue;
            }
            match found.last_mut() {
                Some(last)
                    if last.to == to
                        && last.digest == entry.message_digest
                        && last.cursors.last() == Some(&(entry.cursor - 1)) =>
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

impl Default for ToyJournal {
    fn default() -> Self {
        ToyJournal::new(Arc::new(SystemClock))
    }
}

impl ToyJournal {
    /// An empty journal stamping entries with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        ToyJournal {
            clock,
            state: Mutex::new(JournalState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl HistoryJournal for ToyJournal {
    async fn append(&self, entries: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        let timestamp = stamp(self.clock.as_ref());
        Ok(self.state().append(entries, &timestamp))
    }

    async fn read_since(
        &self,
        cursor: u64,
        limit: Option<usize>,
    ) -> Result<Vec<JournalEntry>, MemoryError> {
        let state = self.state();
        let after = state.entries.partition_point(|e| e.cursor <= cursor);
        let end = limit.map_or(state.entries.len(), |n| {
            (after + n).min(state.entries.len())
        });
        Ok(state.entries[after..end].to_vec())
    }

    async fn read_last(&self, count: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        let state = self.state();
        let from = state.entries.len().saturating_sub(count);
        Ok(state.entries[from..].to_vec())
    }

    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        Ok(self.state().latest)
    }

    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        Ok(self.state().dream)
    }

    async fn set_dream_cursor(&self, cursor: u64) -> Result<(), MemoryError> {
        let mut state = self.state();
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
        let mut state = self.state();
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
        let mut state = self.state();
        let before = state.entries.len();
        state.entries.retain(|e| !cursors.contains(&e.cursor));
        Ok(before - state.entries.len())
    }

    fn capabilities(&self) -> JournalCapabilities {
        JournalCapabilities::default()
    }
}

/// What the archive commit needs of a journal: archives found, and appended only once.
#[async_trait]
impl ArchiveJournal for ToyJournal {
    async fn archives_from(
        &self,
        session: &str,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        Ok(self.state().archives_from(session, from))
    }

    async fn append_archive(
        &self,
        entries: &[NewEntry<'_>],
    ) -> Result<(Vec<u64>, bool), MemoryError> {
        let timestamp = stamp(self.clock.as_ref());
        let mut state = self.state();
        let first = entries.first();
        if let (Some(session), Some((from, _))) = (
            first.and_then(|e| e.session_key),
            first.and_then(|e| e.message_range),
        ) {
            let found = state.archives_from(session, from);
            if let Some(archive) = matching_archive(&found, entries) {
                return Ok((archive.cursors.clone(), true));
            }
        }
        Ok((state.append(entries, &timestamp), false))
    }
}

/// Every scope's sessions in an [`AuditedSessions`] and its journal in a [`ToyJournal`] of
/// its own; the rest in memory, the agent's documents shared read-only with the others.
pub struct OwnBackend {
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent_documents: Arc<dyn MemoryDocuments>,
    scopes: Mutex<HashMap<ScopeKey, (Arc<AuditedSessions>, ScopeStores)>>,
}

impl OwnBackend {
    /// No scopes yet.
    pub fn new(clock: Arc<dyn Clock>, counter: Arc<dyn TokenCounter>) -> Self {
        OwnBackend {
            clock,
            counter,
            agent_documents: Arc::new(InMemoryDocuments::new()),
            scopes: Mutex::new(HashMap::new()),
        }
    }

    /// The sessions of `scope`, once a turn has opened it.
    pub fn sessions(&self, scope: &ScopeKey) -> Option<Arc<AuditedSessions>> {
        let scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        scopes.get(scope).map(|(sessions, _)| sessions.clone())
    }
}

#[async_trait]
impl MemoryBackend for OwnBackend {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, stores)) = scopes.get(scope) {
            return Ok(stores.clone());
        }
        let sessions = Arc::new(AuditedSessions::default());
        // The agent's SOUL.md and skills are shared, read-only, with every other scope.
        let documents: Arc<dyn MemoryDocuments> = if scope.subject.is_agent() {
            self.agent_documents.clone()
        } else {
            Arc::new(ScopedDocuments::new(
                Arc::new(InMemoryDocuments::new()),
                self.agent_documents.clone(),
            ))
        };
        let versions: Arc<dyn MemoryVersions> = Arc::new(InMemoryVersions::new());
        let stores = ScopeStores::stepwise(
            Arc::new(SessionManager::new(
                sessions.clone(),
                self.clock.clone(),
                self.counter.clone(),
            )),
            Arc::new(ToyJournal::new(self.clock.clone())),
            documents.clone(),
            Arc::new(PromptLoader::new(documents)),
            Ok(versions),
            Arc::new(InMemoryLease::with_clock(self.clock.clone())),
        );
        scopes.insert(scope.clone(), (sessions, stores.clone()));
        Ok(stores)
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        Ok(Vec::new())
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        Arc::new(PromptLoader::new(self.agent_documents.clone()))
    }
}

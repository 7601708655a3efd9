//! A session store of your own, and the backend that gives it to a bot.
//!
//! `AuditedSessions` keeps sessions in memory and an audit trail of every write (which
//! session, how many messages): the shape of a store that forwards sessions to a service of
//! yours. `OwnBackend` opens one per scope and keeps the rest of each scope's memory in
//! memory; `Bot::builder().backend(..)` plugs it in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_memory::llm::{Clock, TokenCounter};
use nanobot_memory::prompt_inputs::{PromptFiles, PromptLoader};
use nanobot_memory::scope::{ScopeKey, Subject};
use nanobot_memory::sessions::{
    Append, InMemorySessionStore, Loaded, ReplayView, Revision, Session, SessionCapabilities,
    SessionError, SessionInfo, SessionKey, SessionManager, SessionStore, TurnLock,
};
use nanobot_memory::store::{
    InMemoryDocuments, InMemoryJournal, InMemoryLease, InMemoryVersions, MemoryVersions,
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

/// Every scope's sessions in an [`AuditedSessions`] of its own; the rest in memory.
pub struct OwnBackend {
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    scopes: Mutex<HashMap<ScopeKey, (Arc<AuditedSessions>, ScopeStores)>>,
}

impl OwnBackend {
    /// No scopes yet.
    pub fn new(clock: Arc<dyn Clock>, counter: Arc<dyn TokenCounter>) -> Self {
        OwnBackend {
            clock,
            counter,
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
        let documents = Arc::new(InMemoryDocuments::new());
        let versions: Arc<dyn MemoryVersions> = Arc::new(InMemoryVersions::new());
        let stores = ScopeStores::stepwise(
            Arc::new(SessionManager::new(
                sessions.clone(),
                self.clock.clone(),
                self.counter.clone(),
            )),
            Arc::new(InMemoryJournal::new(self.clock.clone())),
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
        let agent = ScopeKey::local(Subject::Agent);
        let scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        match scopes.get(&agent) {
            Some((_, stores)) => stores.prompt_files.clone(),
            None => Arc::new(PromptLoader::new(Arc::new(InMemoryDocuments::new()))),
        }
    }
}

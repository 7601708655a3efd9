//! Two ready backends: every scope in memory (tests, ephemeral bots), and one scope whose
//! stores the caller opened by hand (a single-user bot).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_llm_port::{Clock, TokenCounter};
use nanobot_memory_index::InMemoryIndex;
use nanobot_memory_scope::{ScopeError, ScopeKey, Subject};
use nanobot_memory_store::{
    InMemoryDocuments, InMemoryJournal, InMemoryLease, InMemoryVersions, MemoryDocuments,
    MemoryVersions, ScopedDocuments,
};
use nanobot_prompt_inputs::{PromptFiles, PromptLoader};
use nanobot_session_store::{InMemorySessionStore, SessionManager};

use crate::error::TurnError;
use crate::memory::{MemoryBackend, ScopeStores};

/// Every scope in memory, each with stores of its own; the agent's documents are shared
/// read-only with the others, as files are. Nothing outlives the process.
pub struct InMemoryBackend {
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent_documents: Arc<InMemoryDocuments>,
    scopes: Mutex<HashMap<ScopeKey, ScopeStores>>,
}

impl std::fmt::Debug for InMemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryBackend").finish_non_exhaustive()
    }
}

impl InMemoryBackend {
    /// No scopes yet.
    pub fn new(clock: Arc<dyn Clock>, counter: Arc<dyn TokenCounter>) -> Self {
        InMemoryBackend {
            clock,
            counter,
            agent_documents: Arc::new(InMemoryDocuments::new()),
            scopes: Mutex::new(HashMap::new()),
        }
    }

    /// The agent's own documents (`SOUL.md`, skills: shared by every scope).
    pub fn agent_documents(&self) -> Arc<InMemoryDocuments> {
        self.agent_documents.clone()
    }

    /// The scopes opened so far.
    pub fn scopes(&self) -> Vec<ScopeKey> {
        let mut keys: Vec<ScopeKey> = self.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ScopeKey, ScopeStores>> {
        self.scopes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl MemoryBackend for InMemoryBackend {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        let mut scopes = self.lock();
        if let Some(stores) = scopes.get(scope) {
            return Ok(stores.clone());
        }
        let documents: Arc<dyn MemoryDocuments> = if scope.subject.is_agent() {
            self.agent_documents.clone()
        } else {
            Arc::new(ScopedDocuments::new(
                Arc::new(InMemoryDocuments::new()),
                self.agent_documents.clone(),
            ))
        };
        let sessions = Arc::new(SessionManager::new(
            Arc::new(InMemorySessionStore::new()),
            self.clock.clone(),
            self.counter.clone(),
        ));
        let versions: Arc<dyn MemoryVersions> = Arc::new(InMemoryVersions::new());
        let stores = ScopeStores::stepwise(
            sessions,
            Arc::new(InMemoryJournal::new(self.clock.clone())),
            documents.clone(),
            Arc::new(PromptLoader::new(documents)),
            Ok(versions),
            Arc::new(InMemoryLease::with_clock(self.clock.clone())),
        )
        .with_search_index(Arc::new(InMemoryIndex::new()));
        scopes.insert(scope.clone(), stores.clone());
        Ok(stores)
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        let opened: Vec<(ScopeKey, ScopeStores)> = self
            .lock()
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let mut due = Vec::new();
        for (scope, stores) in opened {
            if stores.journal.latest_cursor().await? > stores.journal.dream_cursor().await? {
                due.push(scope);
            }
        }
        due.sort();
        Ok(due)
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        Arc::new(PromptLoader::new(self.agent_documents.clone()))
    }
}

/// One scope (the agent's) whose stores the caller opened: the backend of a single-user
/// bot. Any other scope is refused, so a misconfigured isolation mode fails loudly instead
/// of mixing memories.
pub struct OneScope {
    stores: ScopeStores,
}

impl std::fmt::Debug for OneScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneScope").finish_non_exhaustive()
    }
}

impl OneScope {
    /// The agent scope over `stores`.
    pub fn new(stores: ScopeStores) -> Self {
        OneScope { stores }
    }
}

#[async_trait]
impl MemoryBackend for OneScope {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        if scope.subject != Subject::Agent {
            return Err(TurnError::Scope(ScopeError::NotFound {
                scope: format!("{scope} (this bot keeps one memory: the agent's)"),
            }));
        }
        Ok(self.stores.clone())
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        let journal = &self.stores.journal;
        Ok(
            if journal.latest_cursor().await? > journal.dream_cursor().await? {
                vec![ScopeKey::local(Subject::Agent)]
            } else {
                Vec::new()
            },
        )
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        self.stores.prompt_files.clone()
    }
}

//! Every scope's memory in PostgreSQL: the stores of a scope are one `PgScope` (sessions,
//! journal, documents, versions, lease, the archive and memory commits, each one
//! transaction where it spans several, and the search index); a user's or a chat's
//! documents read the agent scope's `SOUL.md` and skills, read-only. `AGENTS.md` and the
//! built-in skills still come from a workspace directory on this machine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::{Clock, TokenCounter};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{MemoryDocuments, MemoryVersions, ScopedDocuments};
use nanobot_prompt_inputs::{PromptFiles, PromptLoader};
use nanobot_session_store::{Durability, SessionManager};
use nanobot_store_postgres::{PgOptions, PgScope, PgStore, StoreError};
use nanobot_turn::{MemoryBackend, ScopeStores, TurnError};

use crate::AssemblyError;

/// The store at `url` in `schema`, migrated; `durability` means for appends what it means
/// on files.
pub async fn connect(
    url: &str,
    schema: &str,
    durability: Durability,
) -> Result<PgStore, AssemblyError> {
    let options = PgOptions::default().schema(schema).durability(durability);
    Ok(PgStore::connect(url, options).await?)
}

/// Every scope's memory in one PostgreSQL schema.
pub struct PgBackend {
    store: PgStore,
    agent_dir: Option<PathBuf>,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent: PgScope,
    agent_files: Arc<PromptLoader>,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackend")
            .field("schema", &self.store.schema().name())
            .finish_non_exhaustive()
    }
}

impl PgBackend {
    /// The scopes of `store`; `agent_dir` (which must exist) holds `AGENTS.md` and the
    /// built-in skills (`None`: the prompts read none).
    pub async fn open(
        store: PgStore,
        agent_dir: Option<&Path>,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<PgBackend, AssemblyError> {
        let agent = store
            .scope_with_clock(&ScopeKey::local(Subject::Agent), clock.clone())
            .await?;
        let agent_files = Arc::new(loader(
            Arc::new(agent.clone()) as Arc<dyn MemoryDocuments>,
            agent_dir,
        )?);
        Ok(PgBackend {
            store,
            agent_dir: agent_dir.map(Path::to_owned),
            clock,
            counter,
            agent,
            agent_files,
        })
    }

    /// The store.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// A user's or a chat's documents read the agent's shared ones read-only.
    fn documents(
        &self,
        scope: &ScopeKey,
        pg: &Arc<PgScope>,
    ) -> Result<crate::DocumentsAndPrompts, TurnError> {
        if scope.subject.is_agent() {
            return Ok((pg.clone(), self.agent_files.clone()));
        }
        let documents: Arc<dyn MemoryDocuments> = Arc::new(ScopedDocuments::new(
            pg.clone(),
            Arc::new(self.agent.clone()),
        ));
        let files =
            loader(documents.clone(), self.agent_dir.as_deref()).map_err(TurnError::Memory)?;
        Ok((documents, Arc::new(files)))
    }
}

#[async_trait]
impl MemoryBackend for PgBackend {
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError> {
        let pg = Arc::new(
            self.store
                .scope_with_clock(scope, self.clock.clone())
                .await
                .map_err(backend)?,
        );
        let sessions = Arc::new(
            SessionManager::new(pg.clone(), self.clock.clone(), self.counter.clone())
                .with_recorded_token_counts(true),
        );
        let (documents, prompt_files) = self.documents(scope, &pg)?;
        let index = Arc::new(pg.index());
        Ok(ScopeStores {
            sessions,
            journal: pg.clone(),
            documents,
            prompt_files,
            versions: Ok(pg.clone() as Arc<dyn MemoryVersions>),
            lease: pg.clone(),
            archive: pg.clone(),
            commit: pg,
            // The scope's search index and its vectors, in the same database.
            index: Some(index.clone()),
            vectors: Some(index),
        })
    }

    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError> {
        self.store.scopes_with_dream_work().await.map_err(backend)
    }

    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles> {
        self.agent_files.clone()
    }
}

/// The prompt files of `documents`, with `AGENTS.md` and the skills of `agent_dir`.
fn loader(
    documents: Arc<dyn MemoryDocuments>,
    agent_dir: Option<&Path>,
) -> Result<PromptLoader, nanobot_memory_store::MemoryError> {
    let loader = PromptLoader::new(documents);
    match agent_dir {
        Some(dir) => loader.with_agent_dir(dir),
        None => Ok(loader),
    }
}

fn backend(error: StoreError) -> TurnError {
    let retryable = error.is_retryable();
    TurnError::Memory(nanobot_memory_store::MemoryError::backend_caused_by(
        error.to_string(),
        retryable,
        error,
    ))
}

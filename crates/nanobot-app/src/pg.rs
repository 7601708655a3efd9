//! Every scope's memory in PostgreSQL (`storage.backend = "postgres"`): the stores of a
//! scope are one `PgScope` (sessions, journal, documents, versions, lease, the archive and
//! memory commits, each one transaction where it spans several); a user's or a chat's
//! documents read the agent scope's `SOUL.md` and skills, read-only. `AGENTS.md` and the
//! built-in skills still come from the workspace directory on this machine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use llm_port::{Clock, TokenCounter};
use memory_scope::{ScopeKey, Subject};
use memory_store::{MemoryDocuments, MemoryVersions, ScopedDocuments};
use nanobot_turn::{MemoryBackend, ScopeStores, TurnError};
use prompt_inputs::{PromptFiles, PromptLoader};
use session_store::SessionManager;
use store_postgres::{Durability, PgOptions, PgScope, PgStore, StoreError};

use crate::config::Config;
use crate::error::AppError;

/// The PostgreSQL store the configuration names, migrated.
pub async fn connect(config: &Config) -> Result<PgStore, AppError> {
    let Some(url) = &config.database_url else {
        return Err(AppError::Config {
            key: "storage.database_url".into(),
            file: config.source.clone(),
            reason: "storage.backend is postgres: set the database URL (NANOBOT_DATABASE_URL)"
                .into(),
        });
    };
    PgStore::connect(
        url,
        PgOptions {
            schema: config.database_schema.clone(),
            // storage.durability means for appends what it means on files.
            durability: match config.durability.as_str() {
                "none" => Durability::None,
                "always" => Durability::Always,
                _ => Durability::TurnEnd,
            },
            ..PgOptions::default()
        },
    )
    .await
    .map_err(|e| store_error(config, e))
}

/// A store error as the app reports it, the URL's password never shown.
pub fn store_error(config: &Config, error: StoreError) -> AppError {
    AppError::Storage(format!(
        "PostgreSQL at {} (schema {}): {error}",
        config
            .database_url
            .as_deref()
            .map_or_else(String::new, crate::config::redact_url),
        config.database_schema
    ))
}

/// Every scope's memory in PostgreSQL.
pub struct PgBackend {
    store: PgStore,
    workspace: PathBuf,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    agent: PgScope,
    agent_files: Arc<PromptLoader>,
}

impl PgBackend {
    /// The scopes of `store`; `workspace` (which must exist) holds `AGENTS.md`.
    pub async fn open(
        store: PgStore,
        workspace: &Path,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<PgBackend, AppError> {
        let agent = store
            .scope_with_clock(&ScopeKey::local(Subject::Agent), clock.clone())
            .await
            .map_err(|e| AppError::Storage(e.to_string()))?;
        let agent_files = Arc::new(
            PromptLoader::new(Arc::new(agent.clone()) as Arc<dyn MemoryDocuments>)
                .with_agent_dir(workspace)?,
        );
        Ok(PgBackend {
            store,
            workspace: workspace.to_owned(),
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
        let (documents, prompt_files): (Arc<dyn MemoryDocuments>, Arc<dyn PromptFiles>) =
            if scope.subject.is_agent() {
                (pg.clone(), self.agent_files.clone())
            } else {
                let documents: Arc<dyn MemoryDocuments> = Arc::new(ScopedDocuments::new(
                    pg.clone(),
                    Arc::new(self.agent.clone()),
                ));
                let files = PromptLoader::new(documents.clone())
                    .with_agent_dir(&self.workspace)
                    .map_err(TurnError::Memory)?;
                (documents, Arc::new(files))
            };
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
            // The scope's search index and its vectors, in the same database (migration 2).
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

fn backend(error: StoreError) -> TurnError {
    let retryable = error.is_retryable();
    TurnError::Memory(memory_store::MemoryError::backend_caused_by(
        error.to_string(),
        retryable,
        error,
    ))
}

//! Each scope's memory, opened on first use and kept open up to a limit.

use super::*;

impl Agent {
    /// The memory of `scope`, opened on first use.
    pub async fn memory(&self, scope: &ScopeKey) -> Result<Arc<ScopeMemory>, TurnError> {
        let mut memories = self.memories.lock().await;
        if let Some(memory) = memories.get(scope) {
            return Ok(memory);
        }
        let memory = Arc::new(self.open(scope).await?);
        memories.insert(scope.clone(), memory.clone());
        let closed = memories.close_past(self.settings.max_open_scopes);
        crate::counts::open_scopes(memories.entries.len());
        // Flushed without the map: other scopes' requests do not wait for these writes.
        drop(memories);
        for closed in closed {
            // Nothing holds it and no session waits: only unflushed tidying can be left.
            let (_, error) = closed.sessions.flush_all().await;
            if let Some(error) = error {
                tracing::warn!(%error, "a closed scope's sessions could not be flushed");
            }
        }
        Ok(memory)
    }

    /// How many scopes' memories are open in this process.
    pub async fn open_scopes(&self) -> usize {
        self.memories.lock().await.entries.len()
    }

    /// Idle compaction in every open scope: each session idle for
    /// [`AgentSettings::idle_ttl`] is archived (its recent tail kept live), as the CLI bot's
    /// background task does for its one scope. A server calls it from one sweeper task.
    /// Raw archives and failures are recorded in the session, as for the CLI bot.
    pub async fn compact_idle(&self) -> Vec<(ScopeKey, nanobot_memory_core::Compacted)> {
        let open: Vec<Arc<ScopeMemory>> = self.memories.lock().await.all();
        let mut done = Vec::new();
        for memory in open {
            let Some(autocompact) = &memory.autocompact else {
                continue;
            };
            for compacted in autocompact.compact_due().await {
                record_compaction(&memory.sessions, self.clock.as_ref(), &compacted).await;
                done.push((memory.scope.clone(), compacted));
            }
        }
        done
    }

    /// Closes the memory of `scope` in this process (before its storage is erased): the
    /// next use opens it again.
    pub async fn forget_memory(&self, scope: &ScopeKey) {
        let mut memories = self.memories.lock().await;
        memories.entries.remove(scope);
        crate::counts::open_scopes(memories.entries.len());
    }

    pub(super) async fn open(&self, scope: &ScopeKey) -> Result<ScopeMemory, TurnError> {
        let stores = self.backend.open(scope).await?;
        let prompt = Arc::new(ContextPrompt {
            builder: self.builder.clone(),
            inputs: Mutex::new(HashMap::new()),
            latest: Mutex::new(stores.prompt_files.load().await?),
        });
        let consolidator = Arc::new(Consolidator::new(
            self.settings.consolidation.clone(),
            self.archive_llm.clone(),
            stores.journal.clone(),
            stores.archive.clone(),
            stores.sessions.clone(),
            prompt.clone(),
            self.counter.clone(),
        )?);
        let autocompact = self
            .settings
            .idle_ttl
            .map(|ttl| AutoCompact::new(consolidator.clone(), ttl));
        let mut dream_config = self.settings.dream.clone();
        dream_config.propose_shared = !scope.subject.is_agent();
        let mut dream = Dream::new(
            dream_config,
            self.dream_llm.clone(),
            stores.dream_stores(),
            self.clock.clone(),
            self.counter.clone(),
        )?;
        if let Some(progress) = &self.progress {
            dream = dream.with_progress(progress.clone());
        }
        if !self.settings.dream_enabled {
            dream.fast_forward_cursor().await?;
        }
        Ok(ScopeMemory {
            scope: scope.clone(),
            sessions: stores.sessions,
            journal: stores.journal,
            documents: stores.documents,
            consolidator,
            autocompact,
            dream: Arc::new(dream),
            index: stores.index,
            vectors: stores.vectors,
            prompt_files: stores.prompt_files,
            prompt,
        })
    }

    /// One Dream tick: a run in every scope whose journal has entries Dream has not read,
    /// one scope after another; idle scopes cost no model call. Each scope's result is
    /// reported on its own, so one failing scope does not stop the others.
    pub async fn dream_tick(
        &self,
        trigger: Trigger,
    ) -> Result<Vec<(ScopeKey, Result<RunReport, TurnError>)>, TurnError> {
        let mut results = Vec::new();
        for scope in self.backend.scopes_with_dream_work().await? {
            let result = match self.memory(&scope).await {
                Ok(memory) => memory.dream.run(trigger).await.map_err(TurnError::from),
                Err(e) => Err(e),
            };
            results.push((scope, result));
        }
        Ok(results)
    }
}

//! The sections put to work: the turn's, the Consolidator's and Dream's budgets sized to
//! the model's window, the prompt's caps, and the storage opened by a builder.

use std::path::Path;
use std::time::Duration;

use nanobot_context_builder::{BuilderConfig, Host};
use nanobot_dream::DreamSettings;
use nanobot_memory_core::ConsolidationConfig;
use nanobot_turn::AgentSettings;

use super::{LlmSettings, MemorySettings, StorageSettings};
use crate::{AssemblyError, BotBuilder};

impl LlmSettings {
    /// The agent's settings for this model: the turn's window, the Consolidator's archive
    /// calls (as long as any call to the model), and Dream's budgets, whose answers get
    /// more room than a chat turn's because Dream writes whole files.
    pub fn agent_settings(
        &self,
        memory: &MemorySettings,
        dream: &DreamSettings,
        turn_wait: Duration,
    ) -> AgentSettings {
        let (window, output) = (self.context_window, self.max_output_tokens);
        let mut settings = AgentSettings::new(self.model.clone(), window, output);
        settings.temperature = self.temperature;
        settings.repetition = self.repetition();
        settings.turn_wait = turn_wait;
        let mut consolidation = ConsolidationConfig::new(self.model.clone(), window, output);
        consolidation.ratio = memory.consolidation_ratio;
        consolidation.structured_first = memory.archive_with_schema;
        consolidation.temperature = self.temperature;
        consolidation.call_timeout = self.request_timeout();
        settings.consolidation = consolidation;
        dream.apply(&mut settings.dream);
        settings.dream.max_output_tokens = u32::try_from(output.max(1_024)).unwrap_or(u32::MAX);
        settings.dream.batch_tokens = (window / 3).max(256);
        settings.dream.prompt_file_chars = window.clamp(1_000, 16_000);
        settings.dream_enabled = dream.enabled;
        settings.idle_ttl = memory.idle_ttl();
        settings
    }

    /// The context builder's settings for this model: the builder's caps suit large
    /// windows, so a small window gets proportional ones and unprocessed history or a grown
    /// `MEMORY.md` cannot fill it.
    pub fn context(&self, host: Host) -> BuilderConfig {
        let window = self.context_window;
        let mut config = BuilderConfig::new(host);
        config.limits.recent_history_tokens = (window / 5).clamp(200, 8_000);
        config.limits.memory_tokens = (window / 4).clamp(400, 16_000);
        config.limits.bootstrap_file_tokens = (window / 8).clamp(200, 8_000);
        config
    }
}

impl StorageSettings {
    /// `builder` with this storage: the files of `workspace`, or PostgreSQL with the
    /// agent's own files (`SOUL.md`, skills) still in `workspace`.
    pub fn open_in(
        &self,
        builder: BotBuilder,
        workspace: &Path,
    ) -> Result<BotBuilder, AssemblyError> {
        match self.backend {
            #[cfg(feature = "postgres")]
            super::Backend::Postgres => {
                let url = self.database_url().map_err(|e| AssemblyError::Incomplete {
                    what: e.within("storage").to_string(),
                })?;
                Ok(builder
                    .postgres_with(url, &self.schema, self.durability)
                    .agent_dir(workspace))
            }
            #[cfg(feature = "files")]
            super::Backend::Files => Ok(builder.files_with(workspace, self.file_options())),
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (builder, workspace);
                Err(AssemblyError::Incomplete {
                    what: format!(
                        "storage.backend {} needs its crate feature",
                        self.backend.name()
                    ),
                })
            }
        }
    }
}

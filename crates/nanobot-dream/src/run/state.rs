//! Dream's own records: when it last ran, its cursor, its instructions.

use super::*;

impl Dream {
    pub(super) async fn record_run(&self, at: DateTime<Utc>) -> Result<(), DreamError> {
        let mut state = self.state().await?;
        state.insert("last_run_at".into(), Value::String(at.to_rfc3339()));
        self.documents
            .write_aux(AuxFile::DreamState, &Value::Object(state).to_string())
            .await?;
        Ok(())
    }

    pub(crate) async fn state(&self) -> Result<serde_json::Map<String, Value>, DreamError> {
        Ok(self
            .documents
            .read_aux(AuxFile::DreamState)
            .await?
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default())
    }

    pub(crate) async fn write_state(
        &self,
        state: serde_json::Map<String, Value>,
    ) -> Result<(), DreamError> {
        self.documents
            .write_aux(AuxFile::DreamState, &Value::Object(state).to_string())
            .await?;
        Ok(())
    }

    /// When Dream last ran (persisted, so a restart catches up).
    pub async fn last_run(&self) -> Result<Option<DateTime<Utc>>, DreamError> {
        Ok(self
            .state()
            .await?
            .get("last_run_at")
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }

    /// With Dream disabled: moves the cursor to the latest entry (never back), so Recent
    /// History in every prompt does not grow without bound. Whether it moved.
    pub async fn fast_forward_cursor(&self) -> Result<bool, DreamError> {
        let latest = self.journal.latest_cursor().await?;
        if self.journal.dream_cursor().await? < latest {
            self.journal.set_dream_cursor(latest).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The instructions a run uses, and whether they are the workspace's own.
    pub async fn instructions(&self) -> Result<(String, bool), DreamError> {
        let custom = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        let is_custom = custom.as_deref().is_some_and(|t| !t.trim().is_empty());
        Ok((prompt::instructions(custom.as_deref()), is_custom))
    }

    /// Writes the default instructions to `prompts/dream.md` for editing, unless it already
    /// has content. Whether it was written.
    pub async fn init_instructions(&self) -> Result<bool, DreamError> {
        let current = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        if current.as_deref().is_some_and(|t| !t.trim().is_empty()) {
            return Ok(false);
        }
        let text = format!("{}\n", prompt::default_instructions());
        self.documents
            .write_aux(AuxFile::DreamPrompt, &text)
            .await?;
        Ok(true)
    }
}

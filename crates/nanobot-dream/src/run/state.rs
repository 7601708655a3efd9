//! Dream's own records: when it last ran, why its last run stopped, its cursor, its
//! instructions.

use super::*;

/// A run that stopped before it finished: its entries were not curated and wait for the
/// next run (the cursor did not move).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoppedRun {
    /// When the run started.
    pub at: DateTime<Utc>,
    /// Why it stopped ([`StopReason`]'s words).
    pub reason: String,
    /// The first and last cursor of the entries that wait.
    pub entries: (u64, u64),
    /// Runs in a row that stopped on a batch starting at the same entry.
    pub runs: u64,
}

impl StoppedRun {
    fn from_state(value: &Value) -> Option<StoppedRun> {
        Some(StoppedRun {
            at: DateTime::parse_from_rfc3339(value.get("at")?.as_str()?)
                .ok()?
                .with_timezone(&Utc),
            reason: value.get("reason")?.as_str()?.to_owned(),
            entries: (value.get("first")?.as_u64()?, value.get("last")?.as_u64()?),
            runs: value.get("runs")?.as_u64()?,
        })
    }

    fn to_state(&self) -> Value {
        serde_json::json!({
            "at": self.at.to_rfc3339(),
            "reason": self.reason,
            "first": self.entries.0,
            "last": self.entries.1,
            "runs": self.runs,
        })
    }
}

impl Dream {
    /// Records when `report`'s run started and, if it stopped on a batch, why (counting the
    /// runs in a row that stopped on the same first entry); a run that finished clears it.
    pub(super) async fn record_run(&self, report: &RunReport) -> Result<(), DreamError> {
        let mut state = self.state().await?;
        state.insert(
            "last_run_at".into(),
            Value::String(report.started.to_rfc3339()),
        );
        match (&report.status, report.batch) {
            (RunStatus::Stopped(reason), Some((first, last, _))) => {
                let runs = state
                    .get("last_stop")
                    .and_then(StoppedRun::from_state)
                    .filter(|p| p.entries.0 == first)
                    .map_or(1, |p| p.runs + 1);
                let stop = StoppedRun {
                    at: report.started,
                    reason: reason.to_string(),
                    entries: (first, last),
                    runs,
                };
                tracing::warn!(
                    reason = %stop.reason,
                    first, last, runs,
                    "a Dream run stopped; its entries wait for the next run"
                );
                state.insert("last_stop".into(), stop.to_state());
            }
            _ => {
                state.remove("last_stop");
            }
        }
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

    /// Why the last run stopped, if it did (a finished run clears it).
    pub async fn last_stop(&self) -> Result<Option<StoppedRun>, DreamError> {
        Ok(self
            .state()
            .await?
            .get("last_stop")
            .and_then(StoppedRun::from_state))
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

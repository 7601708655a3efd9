//! Dream's section of a configuration file (`[dream]`): whether and when it runs, and the
//! budgets a user may set. The rest of [`DreamConfig`] follows from the model's window.

use chrono::FixedOffset;
use nanobot_llm_port::InvalidOption;

use crate::{CronExpr, DreamConfig, DreamError, DreamMode, DreamSchedule};

/// What a user sets about Dream; every field has nanobot's default.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct DreamSettings {
    /// Dream runs on its schedule (default: yes).
    pub enabled: bool,
    /// Hours between runs (default 2).
    pub interval_hours: u32,
    /// A cron expression that takes precedence over the interval.
    pub cron: Option<String>,
    /// Model calls per run (default 30).
    pub max_steps: usize,
    /// Tokens per run (default 400,000).
    pub max_tokens: u64,
    /// Journal entries per run (default 20).
    pub batch_entries: usize,
    /// Tool calls, an edit plan, or chosen by the model's capabilities (default).
    pub mode: DreamMode,
}

impl Default for DreamSettings {
    fn default() -> Self {
        let budgets = DreamConfig::new("");
        DreamSettings {
            enabled: true,
            interval_hours: 2,
            cron: None,
            max_steps: budgets.max_steps,
            max_tokens: budgets.max_tokens,
            batch_entries: budgets.batch_entries,
            mode: budgets.mode,
        }
    }
}

impl DreamSettings {
    /// The same settings with Dream on schedule or not.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The same settings with runs `hours` apart.
    pub fn interval_hours(mut self, hours: u32) -> Self {
        self.interval_hours = hours;
        self
    }

    /// The same settings with a cron schedule (an empty expression is none).
    pub fn cron(mut self, cron: Option<String>) -> Self {
        self.cron = cron.filter(|c| !c.trim().is_empty());
        self
    }

    /// The same settings with another mode.
    pub fn mode(mut self, mode: DreamMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same settings with other budgets per run.
    pub fn budgets(mut self, max_steps: usize, max_tokens: u64, batch_entries: usize) -> Self {
        self.max_steps = max_steps;
        self.max_tokens = max_tokens;
        self.batch_entries = batch_entries;
        self
    }

    /// Refuses values no run could use; an empty cron expression becomes none.
    pub fn check(&mut self) -> Result<(), InvalidOption> {
        self.cron = self.cron.take().filter(|c| !c.trim().is_empty());
        InvalidOption::at_least("interval_hours", self.interval_hours, 1)?;
        InvalidOption::at_least("max_steps", self.max_steps, 1)?;
        InvalidOption::at_least("max_tokens", self.max_tokens, 1_000)?;
        InvalidOption::at_least("batch_entries", self.batch_entries, 1)?;
        if let Some(cron) = &self.cron {
            CronExpr::parse(cron, utc()).map_err(|e| InvalidOption::new("cron", e.to_string()))?;
        }
        Ok(())
    }

    /// The schedule, when Dream runs on one (times in UTC).
    pub fn schedule(&self) -> Result<Option<DreamSchedule>, DreamError> {
        if !self.enabled {
            return Ok(None);
        }
        DreamSchedule::from_settings(self.interval_hours, self.cron.as_deref(), utc()).map(Some)
    }

    /// `config` with these settings' mode and budgets.
    pub fn apply(&self, config: &mut DreamConfig) {
        config.mode = self.mode;
        config.max_steps = self.max_steps;
        config.max_tokens = self.max_tokens;
        config.batch_entries = self.batch_entries;
    }
}

fn utc() -> FixedOffset {
    FixedOffset::east_opt(0).unwrap_or_else(|| chrono::Offset::fix(&chrono::Utc))
}

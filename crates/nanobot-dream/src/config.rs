//! Dream's budgets and batch.

use crate::error::DreamError;

/// How the model edits the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum DreamMode {
    /// Plan mode when the backend says it makes no native tool calls, else tool calls.
    #[default]
    Auto,
    /// A tool loop: list, read, edit and write through native tool calls.
    Tools,
    /// One schema-constrained edit plan per step, for models without native tool calls.
    Plan,
}

impl DreamMode {
    /// `auto`, `tools` or `plan`.
    pub fn parse(text: &str) -> Option<DreamMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(DreamMode::Auto),
            "tools" => Some(DreamMode::Tools),
            "plan" => Some(DreamMode::Plan),
            _ => None,
        }
    }

    /// The name [`DreamMode::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            DreamMode::Auto => "auto",
            DreamMode::Tools => "tools",
            DreamMode::Plan => "plan",
        }
    }
}

/// How a run is bounded. Defaults keep a run to a few minutes and a known cost even with a
/// weak model that loops.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DreamConfig {
    /// The model to ask.
    pub model: String,
    /// Tool calls or an edit plan (default: chosen by the backend's capabilities).
    pub mode: DreamMode,
    /// At most this many journal entries per run (nanobot: 20).
    pub batch_entries: usize,
    /// Entries are added while their tokens stay under this (the first always is, whole):
    /// long entries make smaller batches instead of being cut.
    pub batch_tokens: usize,
    /// At most this many model calls per run.
    pub max_steps: usize,
    /// At most this many tokens (prompt + completion, as reported, else estimated) per run.
    pub max_tokens: u64,
    /// Output tokens asked for per call.
    pub max_output_tokens: u32,
    /// The same tool call (name and arguments) this many times stops the run as a loop.
    pub max_repeated_calls: usize,
    /// This many edits that change nothing stop the run as a loop.
    pub max_no_op_edits: usize,
    /// A memory file may not grow past this many characters.
    pub max_file_chars: usize,
    /// Each file is shown whole in the prompt up to this many characters.
    pub prompt_file_chars: usize,
    /// The journal is compacted to this many entries after a completed run (0: never).
    pub journal_max_entries: usize,
    /// `SOUL.md` and skills belong to the agent scope (this Dream serves a user's or a
    /// chat's): the run reads them, and its changes to them are queued as proposals for an
    /// operator instead of written; the scope's versions do not track them.
    pub propose_shared: bool,
    /// How long a grant of the Dream lease lasts; a run renews it at every model call, so
    /// this must outlast the slowest call. A run that stalls past it loses the lease and
    /// commits nothing (a backend whose lease is a lock held while the process lives, as
    /// files, ignores it).
    pub lease_ttl: std::time::Duration,
}

impl DreamConfig {
    /// Defaults for `model`.
    pub fn new(model: impl Into<String>) -> Self {
        DreamConfig {
            model: model.into(),
            mode: DreamMode::Auto,
            batch_entries: 20,
            batch_tokens: 24_000,
            max_steps: 30,
            max_tokens: 400_000,
            max_output_tokens: 4_096,
            max_repeated_calls: 3,
            max_no_op_edits: 3,
            max_file_chars: 64_000,
            prompt_file_chars: 16_000,
            journal_max_entries: 1_000,
            propose_shared: false,
            lease_ttl: std::time::Duration::from_secs(600),
        }
    }

    /// Refuses values that would make every run fail or never end.
    pub fn validate(&self) -> Result<(), DreamError> {
        let positive = [
            ("batch_entries", self.batch_entries),
            ("batch_tokens", self.batch_tokens),
            ("max_steps", self.max_steps),
            ("max_repeated_calls", self.max_repeated_calls),
            ("max_no_op_edits", self.max_no_op_edits),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(DreamError::InvalidConfig {
                    key,
                    reason: "must be at least 1".into(),
                });
            }
        }
        if self.lease_ttl < std::time::Duration::from_secs(1) {
            return Err(DreamError::InvalidConfig {
                key: "lease_ttl",
                reason: "must be at least a second (it must outlast a model call)".into(),
            });
        }
        if self.max_tokens == 0 || self.max_output_tokens == 0 {
            return Err(DreamError::InvalidConfig {
                key: "max_tokens",
                reason: "token budgets must be at least 1".into(),
            });
        }
        if self.model.trim().is_empty() {
            return Err(DreamError::InvalidConfig {
                key: "model",
                reason: "name the model Dream asks".into(),
            });
        }
        Ok(())
    }
}

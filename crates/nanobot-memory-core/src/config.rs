//! Consolidation settings and the budget arithmetic.

use std::time::Duration;

use crate::error::ConsolidationError;

/// How the Consolidator sizes prompts and archives.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConsolidationConfig {
    /// The model archives are asked of.
    pub model: String,
    /// The model's context window in tokens.
    pub context_window: usize,
    /// The most tokens an answer may take (reserved out of the window).
    pub max_output_tokens: usize,
    /// Tokens kept free for estimation error (nanobot: 1,024).
    pub safety_margin: usize,
    /// After consolidating, the prompt should be at most this share of the budget (0.1 to
    /// 0.95; default 0.5).
    pub ratio: f64,
    /// The most archives one consolidation makes (nanobot: 5).
    pub max_rounds: usize,
    /// The most archives one background run makes while working a backlog off, in
    /// consolidations of `max_rounds` each (default 200).
    pub max_background_rounds: usize,
    /// The longest summary stored, in characters (nanobot: 8,000); longer ones are cut
    /// with a visible marker.
    pub summary_max_chars: usize,
    /// The longest part of a raw archive, in characters (nanobot truncates its one entry at
    /// 16,000; here a longer dump is split into several entries and nothing is cut).
    pub raw_part_max_chars: usize,
    /// Sampling temperature of archive calls.
    pub temperature: Option<f32>,
    /// The longest an archive call may take before it counts as failed (raw fallback).
    pub call_timeout: Duration,
    /// When the archive answer is unusable (cut off, too large to ask, empty, tool calls)
    /// and the model supports structured output, ask once more with a small request and a
    /// JSON schema (facts with their marks, and a summary) before falling back to the raw
    /// messages. Default on.
    pub structured_retry: bool,
    /// Skip the free-text request and ask with the schema straight away (for small models
    /// that cannot follow the free-text instruction). Default off.
    pub structured_first: bool,
    /// The most tokens a structured archive answer may take (less when the window is
    /// smaller).
    pub structured_max_output_tokens: usize,
}

impl ConsolidationConfig {
    /// nanobot's defaults for a model with this window and answer cap.
    pub fn new(model: impl Into<String>, context_window: usize, max_output_tokens: usize) -> Self {
        ConsolidationConfig {
            model: model.into(),
            context_window,
            max_output_tokens,
            safety_margin: 1024,
            ratio: 0.5,
            max_rounds: 5,
            max_background_rounds: 200,
            summary_max_chars: 8000,
            raw_part_max_chars: 16_000,
            temperature: None,
            call_timeout: Duration::from_secs(120),
            structured_retry: true,
            structured_first: false,
            structured_max_output_tokens: 512,
        }
    }

    /// The input budget: window minus answer cap minus safety margin.
    pub fn budget(&self) -> usize {
        self.context_window
            .saturating_sub(self.max_output_tokens)
            .saturating_sub(self.safety_margin)
    }

    /// Where a consolidation stops: `floor(budget * ratio)`.
    pub fn target(&self) -> usize {
        (self.budget() as f64 * self.ratio).floor() as usize
    }

    /// Refuses settings that cannot work, instead of degrading every archive to a raw dump
    /// as nanobot-ai does when the answer cap leaves no input budget.
    pub fn validate(&self) -> Result<(), ConsolidationError> {
        let invalid = |reason: String| Err(ConsolidationError::InvalidConfig { reason });
        if !(0.1..=0.95).contains(&self.ratio) {
            return invalid(format!("ratio {} is outside 0.1 to 0.95", self.ratio));
        }
        if self.context_window > 0 && self.budget() == 0 {
            return invalid(format!(
                "max output tokens ({}) plus the safety margin ({}) leave nothing of the {}-token \
                 context window; lower the output cap",
                self.max_output_tokens, self.safety_margin, self.context_window
            ));
        }
        if self.max_rounds == 0
            || self.max_background_rounds == 0
            || self.summary_max_chars == 0
            || self.raw_part_max_chars < 200
        {
            return invalid("rounds, summary size and raw part size must be positive (raw parts at least 200 characters)".into());
        }
        Ok(())
    }
}

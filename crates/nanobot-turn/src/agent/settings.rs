//! What an agent is configured with, and what a turn reports.

use super::*;

/// How an agent's turns and memory policies are set.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentSettings {
    /// The model to ask.
    pub model: String,
    /// Its context window, in tokens.
    pub context_window: usize,
    /// Output tokens asked for per answer.
    pub max_output_tokens: usize,
    /// Sampling temperature (`None`: the provider's default).
    pub temperature: Option<f32>,
    /// Penalties against repeating earlier text, on answers only (never on archives or
    /// Dream, which copy facts from their input on purpose).
    pub repetition: RepetitionControls,
    /// How long a turn waits for another turn of the same session.
    pub turn_wait: Duration,
    /// The Consolidator of every scope.
    pub consolidation: ConsolidationConfig,
    /// Dream of every scope (`propose_shared` is set for scopes other than the agent's).
    pub dream: DreamConfig,
    /// Whether Dream runs at all; when it does not, its cursor follows the journal so
    /// Recent History cannot grow without bound.
    pub dream_enabled: bool,
    /// Idle compaction after this long (`None`: never).
    pub idle_ttl: Option<Duration>,
    /// How many rounds of tool calls one turn may make; the request after the last round
    /// offers no tools, so the model answers.
    pub max_tool_steps: usize,
    /// How many scopes' memories stay open in this process (a server meets many users).
    /// Past it, the least recently used scope that nothing holds and that has no session
    /// waiting for idle compaction is closed (it opens again from storage when used); a
    /// scope still in use or waiting is never closed, so the bound can be passed while
    /// that many are busy.
    pub max_open_scopes: usize,
}

impl AgentSettings {
    /// Settings for `model` with a `context_window`-token window and answers of up to
    /// `max_output_tokens`, every policy at its default.
    pub fn new(model: impl Into<String>, context_window: usize, max_output_tokens: usize) -> Self {
        let model = model.into();
        AgentSettings {
            consolidation: ConsolidationConfig::new(
                model.clone(),
                context_window,
                max_output_tokens,
            ),
            dream: DreamConfig::new(model.clone()),
            model,
            context_window,
            max_output_tokens,
            temperature: None,
            repetition: RepetitionControls::none(),
            turn_wait: Duration::from_secs(30),
            dream_enabled: true,
            idle_ttl: None,
            max_tool_steps: DEFAULT_MAX_TOOL_STEPS,
            max_open_scopes: DEFAULT_MAX_OPEN_SCOPES,
        }
    }

    pub(crate) fn replay_budget(&self) -> usize {
        self.context_window
            .saturating_sub(self.max_output_tokens + 1_024)
            .max(128)
    }
}

/// What one turn did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnReport {
    /// The answer.
    pub answer: String,
    /// The prompt's estimate (the build report's total).
    pub prompt_tokens: usize,
    /// What the provider reported.
    pub usage: Option<Usage>,
    /// Archives made before the turn because the request would not fit.
    pub consolidated_before: usize,
    /// Tool calls the model made in this turn, in order (their names).
    pub tool_calls: Vec<String>,
    /// The answer is an earlier turn's, returned again for the same idempotency key: the
    /// model was not called and nothing was saved.
    pub replayed: bool,
}

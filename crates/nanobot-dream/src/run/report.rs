//! What a run did and why it stopped.

use super::*;

/// What started a run (it names the run in the change log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The schedule.
    Scheduled,
    /// A person (`/dream`).
    Manual,
}

impl Trigger {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Trigger::Scheduled => "scheduled",
            Trigger::Manual => "manual",
        }
    }
}

/// Why a run stopped before the model finished.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// It used every model call it was allowed.
    StepBudget {
        /// The calls made.
        steps: usize,
    },
    /// It used its token budget.
    TokenBudget {
        /// The tokens used.
        tokens: u64,
    },
    /// The model made the same call again and again.
    RepeatedCall {
        /// The tool.
        tool: String,
    },
    /// The model kept making edits that change nothing.
    NoOpEdits,
    /// The model answered with nothing.
    EmptyAnswer,
    /// The model declined the work: its provider's filter stopped the answer, or it
    /// answered that it will not or cannot do it, having changed nothing.
    Refused(String),
    /// The model's answer was cut by its output limit.
    Truncated,
    /// The model could not be reached or failed.
    ModelError(String),
    /// Plan mode: no answer was a usable edit plan (not JSON, or not the schema's shape).
    InvalidPlan(String),
    /// Plan mode: every edit of the plan was refused, again after being told why.
    PlanRefused {
        /// Why the last plan's edits were refused.
        reasons: Vec<String>,
    },
    /// The run lost its lease (it stalled past it and another run took it): it stopped
    /// and committed nothing.
    LeaseLost(String),
    /// The run finished, but a file it changed was changed by someone else meanwhile: it
    /// committed nothing, and the next run reads the entries again.
    Conflict(String),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::StepBudget { steps } => write!(f, "step budget used ({steps} model calls)"),
            StopReason::TokenBudget { tokens } => write!(f, "token budget used ({tokens} tokens)"),
            StopReason::RepeatedCall { tool } => write!(f, "loop: the same {tool} call repeated"),
            StopReason::NoOpEdits => write!(f, "loop: repeated edits that change nothing"),
            StopReason::EmptyAnswer => write!(f, "empty final answer"),
            StopReason::Refused(why) => write!(f, "the model declined: {why}"),
            StopReason::Truncated => write!(f, "final answer cut by the output limit"),
            StopReason::ModelError(e) => write!(f, "model error: {e}"),
            StopReason::InvalidPlan(why) => write!(f, "no usable edit plan: {why}"),
            StopReason::PlanRefused { reasons } => {
                write!(
                    f,
                    "every edit of the plan was refused: {}",
                    reasons.join("; ")
                )
            }
            StopReason::LeaseLost(what) => write!(f, "the lease was lost ({what})"),
            StopReason::Conflict(what) => {
                write!(f, "a file changed while the run worked ({what})")
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// No journal entries after the cursor: no model call, nothing changed.
    NothingToDo,
    /// The model finished; its changes were applied (or shown, in a dry run).
    Completed,
    /// The run stopped; nothing was applied and the cursor did not move.
    Stopped(StopReason),
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// How it ended.
    pub status: RunStatus,
    /// Whether it was a dry run (nothing applied whatever the status).
    pub dry_run: bool,
    /// The journal entries shown to the model: (first cursor, last cursor, count).
    pub batch: Option<(u64, u64, usize)>,
    /// Model calls.
    pub steps: usize,
    /// Tool calls, and how many of them the tools refused.
    pub tool_calls: usize,
    /// Tool calls that returned an error to the model.
    pub tool_errors: usize,
    /// Tokens used (as the provider reported, else estimated).
    pub tokens: u64,
    /// The file changes (applied, or that would be applied in a dry run).
    pub changes: Vec<FileDiff>,
    /// The change-log body built from `changes`.
    pub summary: String,
    /// The version recording the change, when one was saved.
    pub version: Option<Version>,
    /// A version saved first for edits made outside Dream since the last version.
    pub outside_edits: Option<Version>,
    /// The model's final answer (never used for the change log).
    pub final_text: Option<String>,
    /// How the model edited: [`DreamMode::Tools`] or [`DreamMode::Plan`] (never `Auto`).
    pub mode: DreamMode,
    /// Plan mode: the edits refused (which, and why); they changed nothing.
    pub refused: Vec<String>,
    /// Added lines taken out before the change was applied because they say what a line
    /// of the curated files already says.
    pub repeats: Vec<Repeat>,
    /// Lines a `[correction]` fact of the batch replaced (the model had appended it).
    pub superseded: Vec<Superseded>,
    /// Journal entries compacted away after the run.
    pub compacted: usize,
    /// Files whose changes were queued as proposals, not written (`propose_shared`).
    pub proposed: Vec<String>,
    /// When the run started and ended (from the injected clock).
    pub started: DateTime<Utc>,
    /// When it ended.
    pub finished: DateTime<Utc>,
}

impl RunReport {
    /// The report of a run that has done nothing yet.
    pub(crate) fn new(mode: DreamMode, dry_run: bool, started: DateTime<Utc>) -> Self {
        RunReport {
            status: RunStatus::NothingToDo,
            dry_run,
            batch: None,
            steps: 0,
            tool_calls: 0,
            tool_errors: 0,
            tokens: 0,
            changes: Vec::new(),
            summary: String::new(),
            version: None,
            outside_edits: None,
            final_text: None,
            mode,
            refused: Vec::new(),
            repeats: Vec::new(),
            superseded: Vec::new(),
            compacted: 0,
            proposed: Vec::new(),
            started,
            finished: started,
        }
    }

    /// Whether the run completed (the cursor moved past its batch, unless a dry run).
    pub fn completed(&self) -> bool {
        self.status == RunStatus::Completed
    }
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// The version whose earlier state was restored.
    pub undone: Version,
    /// The new version recording the restore (restore it to undo the restore).
    pub version: Option<Version>,
    /// The files changed by the restore.
    pub changes: Vec<FileDiff>,
}

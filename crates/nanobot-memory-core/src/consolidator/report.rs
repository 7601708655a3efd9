//! What an archive did: its records, its raw fallbacks, a run's report.

use super::*;

/// Why an archive fell back to the raw messages.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RawReason {
    /// The configuration leaves no input budget.
    NoBudget,
    /// The messages cannot be replayed in full within the budget (one message too large).
    NotReplayable,
    /// The archive request itself would not fit the budget.
    RequestTooLarge,
    /// The model call failed.
    CallFailed(LlmError),
    /// The answer was cut by the output limit or ended in a provider error.
    Unfinished(FinishReason),
    /// The model called tools instead of answering.
    ToolCalls,
    /// The answer was empty.
    Empty,
    /// The structured answer did not parse as the schema asked.
    InvalidStructured(String),
    /// The first request failed, and so did the structured one asked after it.
    Retried {
        /// Why the first answer was unusable (`None` when the schema was asked first).
        first: Option<Box<RawReason>>,
        /// Why the structured answer was unusable.
        structured: Box<RawReason>,
    },
}

impl RawReason {
    /// A short name for monitoring (`call_failed`, `unfinished`, ...): a metric's label,
    /// where the whole reason would make a series per error text.
    pub fn code(&self) -> &'static str {
        match self {
            RawReason::NoBudget => "no_budget",
            RawReason::NotReplayable => "not_replayable",
            RawReason::RequestTooLarge => "request_too_large",
            RawReason::CallFailed(_) => "call_failed",
            RawReason::Unfinished(_) => "unfinished",
            RawReason::ToolCalls => "tool_calls",
            RawReason::Empty => "empty",
            RawReason::InvalidStructured(_) => "invalid_structured",
            RawReason::Retried { structured, .. } => structured.code(),
        }
    }
}

impl std::fmt::Display for RawReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawReason::NoBudget => f.write_str("the configuration leaves no input budget"),
            RawReason::NotReplayable => {
                f.write_str("a message is too large to replay within the budget")
            }
            RawReason::RequestTooLarge => {
                f.write_str("the archive request would not fit the budget")
            }
            RawReason::CallFailed(e) => write!(f, "the model call failed: {e}"),
            RawReason::Unfinished(reason) => write!(f, "the answer was unfinished ({reason:?})"),
            RawReason::ToolCalls => f.write_str("the model called tools instead of answering"),
            RawReason::Empty => f.write_str("the answer was empty"),
            RawReason::InvalidStructured(why) => {
                write!(
                    f,
                    "the structured answer was not what the schema asked: {why}"
                )
            }
            RawReason::Retried { first, structured } => match first {
                Some(first) => write!(f, "{first}; asked again with a schema: {structured}"),
                None => write!(f, "asked with a schema: {structured}"),
            },
        }
    }
}

/// What one archive did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Archived {
    /// The model's summary was journaled (exactly this text, cleaned and capped).
    Summary {
        /// The stored text.
        text: String,
        /// Its journal cursor.
        cursor: u64,
    },
    /// The model found nothing worth keeping; nothing was journaled.
    Nothing,
    /// The messages themselves were journaled, in one or more parts.
    Raw {
        /// The cursors of the parts.
        cursors: Vec<u64>,
        /// Why no summary.
        reason: RawReason,
    },
    /// A journal entry already covered these messages (a crash came between its append and
    /// the pointer move): the pointer was moved without archiving them twice.
    Recovered {
        /// The entry's cursor.
        cursor: u64,
    },
    /// Another writer archived these messages first (the session's pointer had moved when
    /// this archive was committed): this archive was discarded, nothing was journaled.
    Superseded,
}

/// Metric: archives, by `outcome` (`summary`, `raw`, `nothing`, `recovered`, `superseded`)
/// and, for a raw one, the `reason` ([`RawReason::code`]).
pub const ARCHIVES: &str = "nanobot_archives_total";

impl Archived {
    /// Counts this archive in [`ARCHIVES`].
    pub(crate) fn count(&self) {
        let (outcome, reason) = match self {
            Archived::Summary { .. } => ("summary", ""),
            Archived::Nothing => ("nothing", ""),
            Archived::Raw { reason, .. } => ("raw", reason.code()),
            Archived::Recovered { .. } => ("recovered", ""),
            Archived::Superseded => ("superseded", ""),
        };
        metrics::counter!(ARCHIVES, "outcome" => outcome, "reason" => reason).increment(1);
    }
}

/// An archive decided but not committed yet: the entries it journals and what they are.
pub(super) enum Prepared {
    Summary(String),
    Nothing,
    Raw {
        parts: Vec<String>,
        reason: RawReason,
    },
}

impl Prepared {
    pub(super) fn entries(&self) -> Vec<String> {
        match self {
            Prepared::Summary(text) => vec![text.clone()],
            Prepared::Nothing => Vec::new(),
            Prepared::Raw { parts, .. } => parts.clone(),
        }
    }

    /// What was archived, with the cursors the commit gave the entries.
    pub(super) fn committed(self, cursors: Vec<u64>) -> Archived {
        match self {
            Prepared::Summary(text) => Archived::Summary {
                cursor: cursors.first().copied().unwrap_or_default(),
                text,
            },
            Prepared::Nothing => Archived::Nothing,
            Prepared::Raw { reason, .. } => Archived::Raw { cursors, reason },
        }
    }
}

/// One archive of messages `[start, end)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveRecord {
    /// The first message archived.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// What was written.
    pub outcome: Archived,
}

/// What a consolidation did.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ConsolidationReport {
    /// The prompt estimate before (provider-reported tokens when given).
    pub estimate_before: usize,
    /// The estimate after the last archive.
    pub estimate_after: usize,
    /// The archives made, oldest first.
    pub archives: Vec<ArchiveRecord>,
    /// Still at or over the budget afterwards: no further boundary (one turn larger than the
    /// budget, or the round limit). The next request may not fit; replay trimming is left.
    pub over_budget: bool,
}

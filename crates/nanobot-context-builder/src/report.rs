//! What a build produced, part by part: tokens, bytes, what was left out and why, what was
//! cut, and the hash of the stable prefix.

use crate::recent::RecentHistoryReport;

/// A part of the built prompt, in prompt order. The first nine are the system prompt's
/// parts; the rest account for everything else a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Part {
    /// Runtime, workspace layout, platform policy, format hint, untrusted-content notice.
    Identity,
    /// `AGENTS.md`, `SOUL.md`, `USER.md`.
    Bootstrap,
    /// The tool usage notes.
    ToolContract,
    /// `memory/MEMORY.md`.
    Memory,
    /// The bodies of always-on skills.
    ActiveSkills,
    /// One line per other skill.
    SkillsIndex,
    /// Instructions a client sent with its request (an API caller's system message): right
    /// after the stable prefix, so they never spoil its cache.
    Instructions,
    /// Journal entries Dream has not processed yet.
    RecentHistory,
    /// The session's archived-context summary.
    Summary,
    /// The `---` separators between system-prompt parts.
    Separators,
    /// The replayed conversation.
    History,
    /// The current message, with its images and runtime context.
    Current,
    /// The per-message framing every request pays (system and current message; the
    /// history's framing is inside [`Part::History`], as session stores count it).
    Framing,
}

impl Part {
    /// The system prompt's parts, in order.
    pub const SYSTEM: [Part; 9] = [
        Part::Identity,
        Part::Bootstrap,
        Part::ToolContract,
        Part::Memory,
        Part::ActiveSkills,
        Part::SkillsIndex,
        Part::Instructions,
        Part::RecentHistory,
        Part::Summary,
    ];

    /// Whether the part only changes when files or configuration change (it belongs to the
    /// stable prefix a provider can cache), rather than with every consolidation or turn.
    pub fn is_stable(self) -> bool {
        matches!(
            self,
            Part::Identity
                | Part::Bootstrap
                | Part::ToolContract
                | Part::Memory
                | Part::ActiveSkills
                | Part::SkillsIndex
        )
    }

    /// A short lower-case name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Part::Identity => "identity",
            Part::Bootstrap => "bootstrap",
            Part::ToolContract => "tool_contract",
            Part::Memory => "memory",
            Part::ActiveSkills => "active_skills",
            Part::SkillsIndex => "skills_index",
            Part::Instructions => "instructions",
            Part::RecentHistory => "recent_history",
            Part::Summary => "summary",
            Part::Separators => "separators",
            Part::History => "history",
            Part::Current => "current",
            Part::Framing => "framing",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// One part's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartReport {
    /// Which part.
    pub part: Part,
    /// Its size in bytes (UTF-8).
    pub bytes: usize,
    /// Its estimated tokens.
    pub tokens: usize,
}

/// Why a system-prompt part is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Omission {
    /// There was nothing to show (no file, an empty file, no skills, no entries).
    Empty,
    /// Every file still holds its unedited template.
    Template,
    /// The turn asked to leave it out (`include_memory` / `include_recent_history` off).
    Disabled,
    /// The summary says there was nothing to summarise (`(nothing)`).
    NothingSummarised,
}

/// A file that was over its cap and was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The file (`MEMORY.md`, `SOUL.md`, ...).
    pub file: &'static str,
    /// Its tokens before the cut.
    pub tokens: usize,
    /// The cap it was cut to.
    pub cap: usize,
}

/// Where the history's token figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryTokens {
    /// The caller passed it (a session store's per-message cache).
    FromCaller,
    /// The builder counted the messages.
    Counted,
}

/// The build report: every part's size, what was left out or cut, and the stable prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuildReport {
    /// Every part present, in prompt order; their tokens add up to [`BuildReport::total_tokens`].
    pub parts: Vec<PartReport>,
    /// System-prompt parts that are absent, and why.
    pub omitted: Vec<(Part, Omission)>,
    /// Files cut to their caps.
    pub truncations: Vec<Truncation>,
    /// The estimate of the whole request: the sum of the parts.
    pub total_tokens: usize,
    /// The system prompt's length in bytes up to the end of its last stable part: a
    /// provider can place a cache breakpoint there.
    pub stable_prefix_bytes: usize,
    /// SHA-256 (hex) of those bytes: equal hashes on two turns mean a cacheable prefix.
    pub stable_prefix_hash: String,
    /// The journal entries shown.
    pub recent_history: RecentHistoryReport,
    /// Messages replayed from the session.
    pub history_messages: usize,
    /// Where the history's token figure came from.
    pub history_tokens: HistoryTokens,
    /// Skills the current message invoked with `$name` and that were attached to it.
    pub invoked_skills: Vec<String>,
    /// Paths of the images attached to the current message.
    pub images: Vec<String>,
}

impl BuildReport {
    /// The tokens of `part`, zero when absent.
    pub fn tokens(&self, part: Part) -> usize {
        self.parts
            .iter()
            .filter(|p| p.part == part)
            .map(|p| p.tokens)
            .sum()
    }

    /// The tokens of the system prompt (its parts and separators).
    pub fn system_tokens(&self) -> usize {
        Part::SYSTEM
            .iter()
            .chain([&Part::Separators])
            .map(|p| self.tokens(*p))
            .sum()
    }
}

//! What the builder is configured with, what it is given, and what it builds.

use super::*;

/// Caps that keep a prompt bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// `MEMORY.md` beyond this many tokens is cut, with a visible marker.
    pub memory_tokens: usize,
    /// Each bootstrap file (`AGENTS.md`, `SOUL.md`, `USER.md`) beyond this is cut.
    pub bootstrap_file_tokens: usize,
    /// At most this many journal entries are considered for Recent History.
    pub recent_history_entries: usize,
    /// Recent History beyond this many tokens keeps its newest entries.
    pub recent_history_tokens: usize,
    /// What one image costs in the estimate (OpenAI's high-detail 1024×1024 tile cost).
    pub image_tokens: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_tokens: 16_000,
            bootstrap_file_tokens: 8_000,
            recent_history_entries: 50,
            recent_history_tokens: 8_000,
            image_tokens: 765,
        }
    }
}

/// How a bot's prompts are built; fixed for the builder's life.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuilderConfig {
    /// The machine the identity names.
    pub host: Host,
    /// Caps.
    pub limits: Limits,
    /// Skills left out of the prompt entirely (index, active skills, `$name`).
    pub disabled_skills: BTreeSet<String>,
    /// One shared session across channels: Recent History then shows every non-internal
    /// session's entries, not only the current session's.
    pub unified_session: bool,
    /// Include nanobot's tool usage notes (on by default, as nanobot-ai does). A bot that
    /// offers the model no tools turns them off: they describe tools it does not have and
    /// cost over a thousand tokens per request.
    pub tool_contract: bool,
}

impl BuilderConfig {
    /// Defaults for `host`.
    pub fn new(host: Host) -> Self {
        BuilderConfig {
            host,
            limits: Limits::default(),
            disabled_skills: BTreeSet::new(),
            unified_session: false,
            tool_contract: true,
        }
    }
}

/// The session's archived-context summary, shown as the system prompt's last part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The summary lines.
    pub text: String,
    /// When the session was last active before it was archived (ISO 8601 text).
    pub last_active: String,
}

/// What changes from turn to turn.
#[derive(Debug, Clone, Default)]
pub struct Turn<'a> {
    /// The channel the answer goes to (`cli`, `telegram`, ...): selects the format hint.
    pub channel: Option<&'a str>,
    /// The session's key: scopes Recent History.
    pub session_key: Option<&'a str>,
    /// The session's summary.
    pub summary: Option<&'a Summary>,
    /// The replayed history (e.g. a session store's `get_history`).
    pub history: &'a [Message],
    /// The history's token estimate, when the caller knows it (saves counting).
    pub history_tokens: Option<usize>,
    /// Journal entries Dream has not processed, oldest first.
    pub journal: &'a [JournalEntry],
    /// Leave `MEMORY.md` out (temporary chats).
    pub exclude_memory: bool,
    /// Leave Recent History out (ephemeral turns).
    pub exclude_recent_history: bool,
    /// The current message; `None` builds the system prompt and history only.
    pub current: Option<CurrentMessage>,
    /// A client's own instructions (an API caller's system message), placed right after
    /// the stable prefix and capped like a bootstrap file; absent, nothing is reported.
    pub instructions: Option<&'a str>,
}

/// A built prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltPrompt {
    /// System message, history, current message (merged into a trailing message of the
    /// same role).
    pub messages: Vec<Message>,
    /// The runtime context appended to the current user message, for the caller to persist
    /// with it.
    pub runtime_context: Option<RuntimeContextMarker>,
    /// Sizes, omissions, cuts and the stable prefix.
    pub report: BuildReport,
}

impl BuiltPrompt {
    /// The system prompt's text.
    pub fn system_prompt(&self) -> &str {
        match self.messages.first() {
            Some(Message::System(m)) => m.content.as_text().unwrap_or(""),
            _ => "",
        }
    }

    /// The system prompt split where a cache breakpoint belongs: the stable prefix, and
    /// the volatile rest (starting with its separator, or empty).
    pub fn system_split(&self) -> (&str, &str) {
        let text = self.system_prompt();
        let at = self.report.stable_prefix_bytes.min(text.len());
        text.split_at(if text.is_char_boundary(at) {
            at
        } else {
            text.len()
        })
    }
}

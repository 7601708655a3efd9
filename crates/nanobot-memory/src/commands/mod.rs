//! What a scope's chat and its operator are answered: nanobot's chat commands (`/new`,
//! `/status`, `/dream`, `/dream-log`, `/dream-restore`, `/dream-prompt`, `/help`) and the
//! reports an operator reads (sessions, memory files, the journal), as text a channel
//! adapter sends as it is. Deterministic for the same memory, so a bot's CI can snapshot it.

mod dream;
mod reports;
mod search;

pub use search::SearchArgs;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use nanobot_dream::DreamSchedule;
use nanobot_memory_store::HistoryJournal;
use nanobot_session_store::SessionKey;
use nanobot_turn::{Agent, ScopeMemory};

use crate::AssemblyError;

/// The chat's commands.
pub const HELP: &str = "Commands:
/new                 start over; the conversation so far is archived to memory
/status              session, messages, context use, last consolidation, next Dream
/dream               run Dream now over new history
/dream-log [id]      Dream's versions, or one version with its changes
/dream-restore [id]  Dream versions to restore, or restore to before one (undoable)
/dream-prompt [init] Dream's instructions: default or this workspace's; init copies the default
/help                this list
Ctrl-C cancels an answer; Ctrl-D leaves.";

/// One scope's memory as its commands see it.
#[derive(Clone, Copy)]
pub struct ScopeCommands<'a> {
    agent: &'a Agent,
    memory: &'a Arc<ScopeMemory>,
    schedule: Option<&'a DreamSchedule>,
    workspace: Option<&'a Path>,
    search: Option<&'a Arc<nanobot_turn::SearchMemory>>,
}

impl<'a> ScopeCommands<'a> {
    /// The commands of `memory`, a scope of `agent`'s; Dream on no schedule.
    pub fn new(agent: &'a Agent, memory: &'a Arc<ScopeMemory>) -> Self {
        ScopeCommands {
            agent,
            memory,
            schedule: None,
            workspace: None,
            search: None,
        }
    }

    /// The same, with Dream's schedule (`/status` says when it runs next).
    pub fn schedule(mut self, schedule: Option<&'a DreamSchedule>) -> Self {
        self.schedule = schedule;
        self
    }

    /// The same, with the bot's memory search (`memory_search`, `memory_reindex`).
    pub fn with_search(mut self, search: &'a Arc<nanobot_turn::SearchMemory>) -> Self {
        self.search = Some(search);
        self
    }

    /// The same, with the workspace whose own `.git` (nanobot-ai's versions) `/dream-log`
    /// shows too.
    pub fn workspace(mut self, workspace: &'a Path) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The reply to a slash command; `None` when `line` is not one.
    pub async fn slash(
        &self,
        key: &SessionKey,
        line: &str,
    ) -> Option<Result<String, AssemblyError>> {
        let mut words = line.split_whitespace();
        let command = words.next()?;
        let argument = words.next();
        Some(match command {
            "/new" => self.new_session(key).await,
            "/status" => self.status(key).await,
            "/dream" => self.dream_run(false).await,
            "/dream-log" => self.dream_log(argument).await,
            "/dream-restore" => self.dream_restore(argument).await,
            "/dream-prompt" => self.dream_prompt(argument).await,
            "/help" => Ok(HELP.to_owned()),
            _ if command.starts_with('/') => Ok(format!("Unknown command {command}.\n{HELP}")),
            _ => return None,
        })
    }

    /// `/new`: the live part is archived into the journal, then the session starts over.
    pub async fn new_session(&self, key: &SessionKey) -> Result<String, AssemblyError> {
        Ok(self.agent.new_session(self.memory, key).await?)
    }

    /// `/status`: the session, its share of the context, its last consolidation, what
    /// Dream has not read, and when Dream runs next.
    pub async fn status(&self, key: &SessionKey) -> Result<String, AssemblyError> {
        let memory = self.memory;
        let handle = memory.sessions.get_or_create(key).await?;
        let (count, archived, estimate) = handle.read(|s| {
            let estimate = memory.consolidator.estimate(s);
            (s.messages().len(), s.last_consolidated(), estimate)
        });
        let budget = memory.consolidator.config().budget().max(1);
        let mut out = format!(
            "Session: {key}\nMessages: {count} ({archived} archived, {} live)\nContext: {estimate} of {budget} tokens of the input budget ({}%)\n",
            count - archived.min(count),
            estimate * 100 / budget
        );
        let last = memory.journal.read_last(50).await?;
        match last
            .iter()
            .rev()
            .find(|e| e.session_key.as_deref() == Some(key.as_str()))
        {
            Some(entry) => {
                let (cursor, at) = (entry.cursor, &entry.timestamp);
                let _ = writeln!(out, "Last consolidation: journal entry {cursor} at {at}");
            }
            None => out.push_str("Last consolidation: none yet\n"),
        }
        if let Some(failure) = handle.read(nanobot_turn::background_failure) {
            let _ = writeln!(out, "Last background failure: {failure}");
        }
        if let Some(raw) = handle.read(nanobot_turn::last_raw_archive) {
            let _ = writeln!(out, "Last raw archive (no summary): {raw}");
        }
        let unread = memory
            .journal
            .latest_cursor()
            .await?
            .saturating_sub(memory.journal.dream_cursor().await?);
        let _ = writeln!(out, "Journal: {unread} entries not yet read by Dream");
        let _ = writeln!(out, "{}", self.agent.tool_status(memory));
        out.push_str(&self.next_dream().await?);
        Ok(out)
    }

    /// `Next Dream: ...`.
    async fn next_dream(&self) -> Result<String, AssemblyError> {
        let Some(schedule) = self.schedule else {
            return Ok("Next Dream: disabled".into());
        };
        let now = self.agent.clock().now();
        Ok(match self.memory.dream.next_run(schedule, now).await? {
            Some(next) if next <= now => format!("Next Dream: due now ({})", schedule.describe()),
            Some(next) => format!(
                "Next Dream: {} ({})",
                next.format("%Y-%m-%d %H:%M UTC"),
                schedule.describe()
            ),
            None => "Next Dream: never (the cron expression has no future time)".into(),
        })
    }
}

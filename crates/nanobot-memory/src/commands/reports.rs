//! What an operator reads of a scope: its sessions, its memory files, its journal.

use std::fmt::Write as _;

use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};
use nanobot_session_store::{Session, SessionKey};

use super::ScopeCommands;
use crate::AssemblyError;

impl ScopeCommands<'_> {
    /// Every session: key, messages, last update, the start of its first message.
    pub async fn sessions_list(&self) -> Result<String, AssemblyError> {
        let sessions = self.memory.sessions.list().await?;
        if sessions.is_empty() {
            return Ok("No sessions yet.".into());
        }
        let mut out = String::new();
        for s in sessions {
            let _ = writeln!(
                out,
                "{}  {} messages  updated {}  {}",
                s.key,
                s.message_count,
                s.updated_at.format("%Y-%m-%d %H:%M"),
                s.preview.chars().take(60).collect::<String>()
            );
        }
        Ok(out.trim_end().to_owned())
    }

    /// One session: its messages, the archived ones marked `·`, and what went wrong last
    /// in the background.
    pub async fn session_show(&self, key: &SessionKey) -> Result<String, AssemblyError> {
        let session = self.load(key).await?;
        let mut out = format!(
            "Session {key}: {} messages, {} archived\n",
            session.messages().len(),
            session.last_consolidated()
        );
        if let Some(failure) = nanobot_turn::background_failure(&session) {
            let _ = writeln!(out, "Last background failure: {failure}");
        }
        if let Some(raw) = nanobot_turn::last_raw_archive(&session) {
            let _ = writeln!(out, "Last raw archive (no summary): {raw}");
        }
        for (i, m) in session.messages().iter().enumerate() {
            let marker = if i < session.last_consolidated() {
                "·"
            } else {
                " "
            };
            let content = match m.content() {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let content: String = content.replace('\n', " ").chars().take(200).collect();
            let _ = writeln!(out, "{marker}[{i}] {}: {content}", m.role().unwrap_or("?"));
        }
        Ok(out.trim_end().to_owned())
    }

    /// One session as JSON lines, one message a line, as stored.
    pub async fn session_export(&self, key: &SessionKey) -> Result<String, AssemblyError> {
        let session = self.load(key).await?;
        let lines: Vec<String> = session
            .messages()
            .iter()
            .map(|m| serde_json::Value::Object(m.fields().clone()).to_string())
            .collect();
        Ok(lines.join("\n"))
    }

    /// Deletes one session.
    pub async fn session_delete(&self, key: &SessionKey) -> Result<String, AssemblyError> {
        Ok(if self.memory.sessions.delete(key).await? {
            format!("Deleted session {key}.")
        } else {
            format!("There was no session {key}.")
        })
    }

    async fn load(&self, key: &SessionKey) -> Result<Session, AssemblyError> {
        match self.memory.sessions.store().load(key).await? {
            Some(loaded) => Ok(loaded.session),
            None => Err(AssemblyError::NotFound {
                what: format!("There is no session {key}; `nanobot sessions list` shows them."),
            }),
        }
    }

    /// Every memory file, then the skills with their descriptions.
    pub async fn memory_show(&self) -> Result<String, AssemblyError> {
        let documents = &self.memory.documents;
        let mut out = String::new();
        for document in Document::ALL {
            let text = documents.read_text(document).await?;
            let text = text.as_deref().map(str::trim_end).filter(|t| !t.is_empty());
            let _ = writeln!(out, "## {}\n{}", document.path(), text.unwrap_or("(empty)"));
        }
        let skills: Vec<String> = documents
            .skills()
            .await?
            .skills
            .iter()
            .map(|s| nanobot_prompt_inputs::skill_info(&s.name, &s.document.text))
            .map(|s| format!("- {}: {}", s.name, s.description.as_deref().unwrap_or("")))
            .collect();
        let skills = if skills.is_empty() {
            "(none)".to_owned()
        } else {
            skills.join("\n")
        };
        let _ = write!(out, "## skills\n{skills}");
        Ok(out)
    }

    /// The journal's last `count` entries, each marked read by Dream or new.
    pub async fn memory_history(&self, count: usize) -> Result<String, AssemblyError> {
        let journal = &self.memory.journal;
        let entries = journal.read_last(count).await?;
        if entries.is_empty() {
            return Ok("The journal is empty: nothing has been consolidated yet.".into());
        }
        let dream_cursor = journal.dream_cursor().await?;
        let mut out = String::new();
        for e in entries {
            let read = if e.cursor <= dream_cursor {
                "read by Dream"
            } else {
                "new"
            };
            let _ = writeln!(
                out,
                "#{} [{}] {} ({read})\n{}\n",
                e.cursor,
                e.timestamp,
                e.session_key.as_deref().unwrap_or("-"),
                e.content.trim_end()
            );
        }
        Ok(out.trim_end().to_owned())
    }
}

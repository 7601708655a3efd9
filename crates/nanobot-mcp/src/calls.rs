//! Each tool's call: its arguments read, the scope's memory asked, and the result shaped
//! as its output schema says. Only `remember` writes, and only once every argument is good.

use nanobot_memory_store::{Document, HistoryJournalExt, MemoryDocumentsExt, NewEntry};
use nanobot_session_store::SessionKey;
use rmcp::model::JsonObject;
use serde_json::{Value, json};

use crate::MemoryServer;
use crate::args::{Args, BadArgument};
use crate::tools::{DEFAULT_ITEMS, FILES, MAX_ITEMS, MAX_NOTE_CHARS, names};

/// What a call answers: the structured result, and the text for hosts that read text (the
/// structured result as JSON unless the tool has a text of its own).
pub(crate) struct Answer {
    pub(crate) structured: Value,
    pub(crate) text: Option<String>,
}

impl Answer {
    fn structured(structured: Value) -> Self {
        Answer {
            structured,
            text: None,
        }
    }

    /// A structured result with a text of its own for hosts that read text.
    pub(crate) fn with_text(structured: Value, text: String) -> Self {
        Answer {
            structured,
            text: Some(text),
        }
    }
}

/// Why a call gave no answer.
pub(crate) enum CallError {
    /// An argument the host's model can correct.
    Argument(BadArgument),
    /// No tool of that name.
    UnknownTool(String),
    /// The call was right but memory could not answer: said to the model, nothing written.
    Failed(String),
    /// A tool the operator has not turned on.
    Off {
        /// Its name.
        tool: &'static str,
    },
}

impl From<BadArgument> for CallError {
    fn from(bad: BadArgument) -> Self {
        CallError::Argument(bad)
    }
}

/// A listing's `limit` argument.
fn item_limit(args: &Args<'_>) -> Result<usize, BadArgument> {
    Ok(args.count("limit", 1, MAX_ITEMS as u64, DEFAULT_ITEMS as u64)? as usize)
}

/// The characters of stored text one result may still carry, and whether any was cut.
struct TextBudget {
    left: usize,
    truncated: bool,
}

impl TextBudget {
    fn new(max_chars: usize) -> Self {
        TextBudget {
            left: max_chars,
            truncated: false,
        }
    }

    /// `text` within what is left ([`cut`]), counted against it.
    fn take(&mut self, text: &str) -> String {
        let (kept, cut_short) = cut(text, self.left);
        self.truncated |= cut_short;
        self.left = self.left.saturating_sub(kept.chars().count());
        kept
    }
}

pub(crate) async fn call(
    server: &MemoryServer,
    name: &str,
    arguments: Option<&JsonObject>,
) -> Result<Answer, CallError> {
    match name {
        names::SEARCH => search(server, arguments).await,
        names::READ => read_memory(server, &Args::new(arguments, &["file"])?).await,
        names::HISTORY => recent_history(server, &Args::new(arguments, &["after", "limit"])?).await,
        names::SESSIONS => list_sessions(server, &Args::new(arguments, &["limit"])?).await,
        names::SESSION => read_session(server, &Args::new(arguments, &["key", "limit"])?).await,
        names::REMEMBER => remember(server, &Args::new(arguments, &["note"])?).await,
        names::LOG => memory_log(server, &Args::new(arguments, &["limit"])?).await,
        names::DIFF => memory_diff(server, &Args::new(arguments, &["version"])?).await,
        names::RESTORE => {
            crate::operator::restore_memory(server, &Args::new(arguments, &["version"])?).await
        }
        names::FORGET => {
            crate::operator::forget_session(server, &Args::new(arguments, &["key"])?).await
        }
        other => Err(CallError::UnknownTool(other.to_owned())),
    }
}

/// As the agent's own tool searches: the same arguments, the same envelope of recalled
/// data, within the server's time limit.
async fn search(
    server: &MemoryServer,
    arguments: Option<&JsonObject>,
) -> Result<Answer, CallError> {
    let known = ["query", "sources", "since", "limit"];
    Args::new(arguments, &known)?;
    let text = Value::Object(arguments.cloned().unwrap_or_default()).to_string();
    let request = nanobot_memory_search::parse_arguments(&text).map_err(|reason| {
        // The reader names the argument in backticks.
        let name = reason.split('`').nth(1).unwrap_or("query");
        BadArgument::new(name, reason.clone())
    })?;
    let memory = &server.memory;
    let Some(index) = memory.index.clone() else {
        return Err(CallError::Failed(
            "this memory is kept without a search index, so it cannot be searched".into(),
        ));
    };
    let limit = server.shared.options.search_timeout;
    let found = tokio::time::timeout(limit, server.shared.search.search(memory, index, &request))
        .await
        .map_err(|_| {
            CallError::Failed(format!(
                "memory search took longer than {limit:?}; try a narrower query"
            ))
        })?
        .map_err(|e| CallError::Failed(format!("memory search failed: {e}")))?;
    let text = nanobot_memory_search::render_with_note(
        &request.query,
        &found.hits,
        server.shared.counter.as_ref(),
        server.shared.search.budget_tokens(),
        found.note.as_deref(),
    );
    Ok(Answer {
        structured: json!({"query": request.query, "results": found.hits, "note": found.note}),
        text: Some(text),
    })
}

async fn read_memory(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let file = args.text("file")?;
    let document = match file.trim_start_matches("memory/") {
        "SOUL.md" => Document::Soul,
        "USER.md" => Document::User,
        "MEMORY.md" => Document::Memory,
        _ => {
            return Err(BadArgument::new(
                "file",
                format!("must be one of {}", crate::args::list(&FILES)),
            )
            .into());
        }
    };
    let text = server
        .memory
        .documents
        .read_text(document)
        .await
        .map_err(|e| CallError::Failed(format!("{file} could not be read: {e}")))?
        .unwrap_or_default();
    let (text, truncated) = cut(&text, server.shared.options.max_text_chars);
    Ok(Answer::structured(
        json!({"file": document.path(), "text": text, "truncated": truncated}),
    ))
}

async fn recent_history(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let after = args.count("after", 0, u64::MAX >> 1, 0)?;
    let limit = item_limit(args)?;
    let mut entries = server
        .memory
        .journal
        .read_since(after, Some(limit + 1))
        .await
        .map_err(|e| CallError::Failed(format!("the journal could not be read: {e}")))?;
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next_after = entries.last().map_or(after, |e| e.cursor);
    let mut budget = TextBudget::new(server.shared.options.max_text_chars);
    let entries: Vec<Value> = entries
        .iter()
        .map(|entry| {
            let content = budget.take(&entry.content);
            json!({
                "cursor": entry.cursor,
                "timestamp": entry.timestamp,
                "session": entry.session_key,
                "content": content,
            })
        })
        .collect();
    Ok(Answer::structured(
        json!({"entries": entries, "next_after": next_after, "more": more}),
    ))
}

async fn list_sessions(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let limit = item_limit(args)?;
    let mut sessions = server
        .memory
        .sessions
        .list()
        .await
        .map_err(|e| CallError::Failed(format!("the sessions could not be listed: {e}")))?;
    sessions.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.key.as_str().cmp(b.key.as_str()))
    });
    let total = sessions.len();
    let listed: Vec<Value> = sessions
        .iter()
        .take(limit)
        .map(|info| {
            json!({
                "key": info.key.as_str(),
                "updated_at": info.updated_at.format("%Y-%m-%dT%H:%M:%S").to_string(),
                "messages": info.message_count,
                "title": info.title,
                "preview": info.preview,
            })
        })
        .collect();
    Ok(Answer::structured(
        json!({"sessions": listed, "total": total}),
    ))
}

async fn read_session(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let key = args.text("key")?;
    let key = SessionKey::new(key).map_err(|e| BadArgument::new("key", e.to_string()))?;
    let limit = item_limit(args)?;
    // From the store, not a cache: another process may have taken the latest turns, and
    // reading never creates a session.
    let loaded = server
        .memory
        .sessions
        .store()
        .load(&key)
        .await
        .map_err(|e| CallError::Failed(format!("session {key} could not be read: {e}")))?
        .ok_or_else(|| CallError::Failed(format!("there is no session {key} in this memory")))?;
    let messages = loaded.session.messages();
    let first = messages.len().saturating_sub(limit);
    let mut budget = TextBudget::new(server.shared.options.max_text_chars);
    let shown: Vec<Value> = messages[first..]
        .iter()
        .enumerate()
        .map(|(n, message)| {
            let content = budget.take(&message_text(message.content()));
            json!({
                "index": first + n,
                "role": message.role().unwrap_or("unknown"),
                "timestamp": message.get("timestamp").and_then(Value::as_str),
                "content": content,
            })
        })
        .collect();
    Ok(Answer::structured(json!({
        "key": key.as_str(),
        "messages": shown,
        "total": messages.len(),
        "truncated": budget.truncated,
    })))
}

async fn remember(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let note = args.text("note")?.trim();
    let chars = note.chars().count();
    if chars > MAX_NOTE_CHARS {
        return Err(BadArgument::new(
            "note",
            format!("is {chars} characters; at most {MAX_NOTE_CHARS}"),
        )
        .into());
    }
    let cursor = server
        .memory
        .journal
        .append_one(NewEntry::text(note))
        .await
        .map_err(|e| CallError::Failed(format!("the note was not kept: {e}")))?;
    Ok(Answer::structured(json!({"cursor": cursor})))
}

async fn memory_log(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let limit = item_limit(args)?;
    let versions =
        server.memory.dream.log(limit).await.map_err(|e| {
            CallError::Failed(format!("the memory versions could not be read: {e}"))
        })?;
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"id": v.id, "time": v.time.to_rfc3339(), "message": v.message}))
        .collect();
    Ok(Answer::structured(json!({"versions": versions})))
}

/// The `version` argument: a version id (or its start) from `memory_log`.
pub(crate) fn version_argument<'a>(args: &Args<'a>) -> Result<&'a str, BadArgument> {
    let id = args.text("version")?.trim();
    if id.len() < 4 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(BadArgument::new(
            "version",
            "must be a version id (at least 4 hex digits) from memory_log",
        ));
    }
    Ok(id)
}

async fn memory_diff(server: &MemoryServer, args: &Args<'_>) -> Result<Answer, CallError> {
    let id = version_argument(args)?;
    let (version, diffs) = server
        .memory
        .dream
        .show(id)
        .await
        .map_err(|e| CallError::Failed(format!("version {id}: {e}")))?;
    let mut budget = TextBudget::new(server.shared.options.max_text_chars);
    let files: Vec<Value> = diffs
        .iter()
        .map(|diff| {
            let text = budget.take(&diff.unified);
            json!({"path": diff.path, "added": diff.added, "removed": diff.removed, "diff": text})
        })
        .collect();
    Ok(Answer::structured(json!({
        "id": version.id,
        "message": version.message,
        "files": files,
        "truncated": budget.truncated,
    })))
}

/// A message's text: a string as it is, the text blocks of a list, anything else as JSON.
fn message_text(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

/// `text` within `max` characters, and whether it was cut (then it ends with a note).
pub(crate) fn cut(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        None => (text.to_owned(), false),
        Some((at, _)) => (
            format!(
                "{}\n[cut: {} more characters]",
                &text[..at],
                text[at..].chars().count()
            ),
            true,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_says_how_much_is_left_out() {
        assert_eq!(cut("short", 10), ("short".to_owned(), false));
        assert_eq!(
            cut("ééééé", 2),
            ("éé\n[cut: 3 more characters]".to_owned(), true)
        );
    }
}

//! Raw archives: the messages themselves, written to the journal when no summary can be
//! had. nanobot-ai truncates a dump at 16,000 characters and still marks every message
//! archived; here a long dump is split into parts, so nothing leaves the live history
//! without reaching the journal.

use nanobot_session_store::{RECALLED_FIELD, StoredMessage, public_copy};
use serde_json::Value;

/// One line (or block) per message: `[<timestamp, 16 chars>] <ROLE>[ [tools: a, b]]:
/// <content>`. Messages without content are left out (an assistant turn that only calls
/// tools: its results follow); model-only runtime context is not dumped, and neither is
/// memory a search recalled ([`RECALLED_FIELD`]): it is already stored where it came from.
pub fn format_messages(messages: &[StoredMessage]) -> Vec<String> {
    messages.iter().filter_map(format_message).collect()
}

fn format_message(message: &StoredMessage) -> Option<String> {
    if message.flag(RECALLED_FIELD) {
        return None;
    }
    let message = public_copy(message);
    let role = message
        .role()
        .map_or("UNKNOWN".to_owned(), str::to_uppercase);
    let mut content = match message.content() {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    if message.role() == Some("user") {
        let crumbs: Vec<String> = message
            .get("media")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(|p| format!("[image: {p}]"))
            .collect();
        if !crumbs.is_empty() {
            let crumbs = crumbs.join("\n");
            content = if content.is_empty() {
                crumbs
            } else {
                format!("{content}\n{crumbs}")
            };
        }
    }
    if content.trim().is_empty() {
        return None;
    }
    let stamp = match message.get("timestamp") {
        Some(Value::String(text)) => text.chars().take(16).collect(),
        Some(Value::Null) | None => "?".to_owned(),
        Some(other) => other.to_string().chars().take(16).collect(),
    };
    let tools = message
        .get("tools_used")
        .and_then(Value::as_array)
        .map(|tools| {
            let names: Vec<&str> = tools.iter().filter_map(Value::as_str).collect();
            format!(" [tools: {}]", names.join(", "))
        })
        .unwrap_or_default();
    Some(format!("[{stamp}] {role}{tools}: {content}"))
}

/// The journal entries of a raw archive of `count` messages: `[RAW] <count> messages` and
/// the formatted lines, split into parts of at most `max_chars` characters of text
/// (`(part i/k)` in the header) instead of cut.
pub fn raw_entries(count: usize, lines: &[String], max_chars: usize) -> Vec<String> {
    let budget = max_chars.max(1);
    let mut chunks: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut current_chars = 0;
    for line in lines {
        for piece in split_chars(line, budget) {
            let piece_chars = piece.chars().count();
            let needed = piece_chars + usize::from(current_chars > 0);
            if current_chars > 0 && current_chars + needed > budget {
                chunks.push(std::mem::take(&mut current));
                current_chars = 0;
            }
            if current_chars > 0 {
                current.push('\n');
                current_chars += 1;
            }
            current.push_str(piece);
            current_chars += piece_chars;
        }
    }
    if !current.is_empty() || chunks.is_empty() {
        chunks.push(current);
    }
    let parts = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            if parts == 1 {
                format!("[RAW] {count} messages\n{body}")
            } else {
                format!("[RAW] {count} messages (part {}/{parts})\n{body}", i + 1)
            }
        })
        .collect()
}

/// `text` in pieces of at most `max_chars` characters (whole when it fits).
fn split_chars(text: &str, max_chars: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while rest.chars().count() > max_chars {
        let cut = rest
            .char_indices()
            .nth(max_chars)
            .map_or(rest.len(), |(i, _)| i);
        pieces.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    pieces.push(rest);
    pieces
}

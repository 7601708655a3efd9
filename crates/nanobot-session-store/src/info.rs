//! Titles and previews for session listings, shared by every backend.

use serde_json::{Map, Value};

use crate::history::sanitize_assistant_text;
use crate::message::StoredMessage;

/// How many message records a listing scans for a preview, as nanobot-ai does.
pub const PREVIEW_SCAN_RECORDS: usize = 200;
const PREVIEW_CHARS: usize = 120;

/// The listing title: `metadata.title` when it is a string; an auto-generated title keeps
/// no model reasoning (`<think>` blocks), a title the user edited is kept as written.
pub fn listing_title(metadata: &Map<String, Value>) -> Option<String> {
    let title = metadata.get("title")?.as_str()?;
    if metadata.get("title_user_edited") == Some(&Value::Bool(true)) {
        return Some(title.to_owned());
    }
    Some(nanobot_llm_port::text::strip_think(title))
}

/// The preview of a listing: the first user message with text, else the first assistant
/// message with text, among the first [`PREVIEW_SCAN_RECORDS`] messages.
pub fn listing_preview<'a>(messages: impl IntoIterator<Item = &'a StoredMessage>) -> String {
    let mut scan = PreviewScan::default();
    for message in messages {
        if scan.offer(message) {
            break;
        }
    }
    scan.finish()
}

/// A preview search fed one message at a time, so a listing can stop decoding early.
#[derive(Default)]
pub struct PreviewScan {
    scanned: usize,
    fallback: Option<String>,
    found: Option<String>,
}

impl PreviewScan {
    /// Looks at the next message; true when the search is over.
    pub fn offer(&mut self, message: &StoredMessage) -> bool {
        if self.is_done() {
            return true;
        }
        self.scanned += 1;
        let role = message.role();
        if matches!(role, Some("user" | "assistant")) {
            let text = preview_text(message);
            if !text.is_empty() {
                if role == Some("user") {
                    self.found = Some(text);
                } else {
                    self.fallback.get_or_insert(text);
                }
            }
        }
        self.is_done()
    }

    /// Whether more messages cannot change the preview.
    pub fn is_done(&self) -> bool {
        self.found.is_some() || self.scanned >= PREVIEW_SCAN_RECORDS
    }

    /// The preview found.
    pub fn finish(self) -> String {
        self.found.or(self.fallback).unwrap_or_default()
    }
}

fn preview_text(message: &StoredMessage) -> String {
    let raw = match message.content() {
        Some(Value::String(text)) => public_text(message, text),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    let cleaned = sanitize_assistant_text(&raw);
    let collapsed = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= PREVIEW_CHARS {
        return collapsed;
    }
    let cut: String = collapsed.chars().take(PREVIEW_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

/// The text without model-only runtime context, when its marker names an exact suffix.
fn public_text(message: &StoredMessage, text: &str) -> String {
    let suffix = message
        .get("_runtime_context")
        .and_then(|m| m.get("suffix"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    match suffix {
        Some(suffix) if text == suffix => String::new(),
        Some(suffix) => text
            .strip_suffix(&format!("\n\n{suffix}"))
            .unwrap_or(text)
            .to_owned(),
        None => text.to_owned(),
    }
}

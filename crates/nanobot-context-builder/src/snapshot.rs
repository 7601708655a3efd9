//! Helpers for snapshot tests of prompts (with `insta` or any other tool): a readable
//! rendering of the messages, and redaction of what changes between runs (times, ids,
//! inline image data, hashes), so a bot's CI snapshots stay stable.
//!
//! ```
//! use nanobot_context_builder::snapshot::redact;
//! assert_eq!(
//!     redact("last active 2026-08-19T10:00:00.123456, call call_Ab12, cursor 3"),
//!     "last active [time], call [call-id], cursor 3"
//! );
//! ```

use std::fmt::Write as _;

use nanobot_llm_port::{Content, ContentPart, Message};

use crate::BuiltPrompt;

/// The prompt's messages, one block per message, redacted; then the report's parts.
pub fn render(prompt: &BuiltPrompt) -> String {
    let mut out = render_messages(&prompt.messages);
    out.push_str("=== report\n");
    for part in &prompt.report.parts {
        let _ = writeln!(out, "{}: {} tokens", part.part.name(), part.tokens);
    }
    let _ = writeln!(out, "total: {} tokens", prompt.report.total_tokens);
    for (part, why) in &prompt.report.omitted {
        let _ = writeln!(out, "omitted {}: {why:?}", part.name());
    }
    for cut in &prompt.report.truncations {
        let _ = writeln!(
            out,
            "cut {} from {} to {} tokens",
            cut.file, cut.tokens, cut.cap
        );
    }
    if let Some(marker) = &prompt.runtime_context {
        let _ = writeln!(out, "runtime context: {}", marker.to_json());
    }
    out
}

/// Messages as text: a `=== role` line, then the content; image parts as a short
/// placeholder, tool calls as JSON; everything redacted.
pub fn render_messages(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        let _ = writeln!(out, "=== {}", message.role().as_str());
        match message.content() {
            Some(Content::Text(text)) => {
                out.push_str(text);
                out.push('\n');
            }
            Some(Content::Parts(parts)) => {
                for part in parts {
                    match part {
                        ContentPart::Text { text, .. } => {
                            out.push_str("--- text\n");
                            out.push_str(text);
                            out.push('\n');
                        }
                        ContentPart::ImageUrl { image_url, .. } => {
                            let _ = writeln!(out, "--- image {}", image_url.url);
                        }
                        ContentPart::Other(extra) => {
                            let _ = writeln!(
                                out,
                                "--- part {}",
                                serde_json::Value::Object(extra.clone())
                            );
                        }
                    }
                }
            }
            None => {}
        }
        for call in message.tool_calls() {
            let _ = writeln!(
                out,
                "--- tool call {}",
                serde_json::to_string(call).unwrap_or_default()
            );
        }
        if let Message::Tool(tool) = message {
            let _ = writeln!(out, "--- for {}", tool.tool_call_id);
        }
    }
    redact(&out)
}

/// `text` with timestamps (`2026-08-19T10:00:00.123`, `2026-08-19 10:00`), UUIDs, tool-call
/// ids (`call_…`, `toolu_…`), 64-digit hex hashes and inline base64 image data replaced by
/// fixed placeholders.
pub fn redact(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !is_word(bytes[i - 1]);
        let found = if at_word_start {
            timestamp(bytes, i)
                .map(|end| (end, "[time]".to_owned()))
                .or_else(|| uuid(bytes, i).map(|end| (end, "[id]".to_owned())))
                .or_else(|| hex_hash(bytes, i).map(|end| (end, "[sha256]".to_owned())))
                .or_else(|| call_id(bytes, i).map(|end| (end, "[call-id]".to_owned())))
                .or_else(|| data_url(bytes, i))
        } else {
            None
        };
        match found {
            Some((end, replacement)) => {
                out.push_str(&text[copied..i]);
                out.push_str(&replacement);
                i = end;
                copied = end;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn digits(bytes: &[u8], at: usize, count: usize) -> bool {
    bytes.len() >= at + count && bytes[at..at + count].iter().all(u8::is_ascii_digit)
}

/// `YYYY-MM-DD[T ]HH:MM[:SS[.ffffff]][Z|±HH:MM]`, or a bare `YYYY-MM-DD`.
fn timestamp(b: &[u8], at: usize) -> Option<usize> {
    if !(digits(b, at, 4) && b.get(at + 4) == Some(&b'-') && digits(b, at + 5, 2))
        || b.get(at + 7) != Some(&b'-')
        || !digits(b, at + 8, 2)
    {
        return None;
    }
    let mut end = at + 10;
    if matches!(b.get(end), Some(b'T' | b' '))
        && digits(b, end + 1, 2)
        && b.get(end + 3) == Some(&b':')
        && digits(b, end + 4, 2)
    {
        end += 6;
        if b.get(end) == Some(&b':') && digits(b, end + 1, 2) {
            end += 3;
            if b.get(end) == Some(&b'.') && digits(b, end + 1, 1) {
                end += 1;
                while end < b.len() && b[end].is_ascii_digit() {
                    end += 1;
                }
            }
        }
        if b.get(end) == Some(&b'Z') {
            end += 1;
        } else if matches!(b.get(end), Some(b'+' | b'-'))
            && digits(b, end + 1, 2)
            && b.get(end + 3) == Some(&b':')
            && digits(b, end + 4, 2)
        {
            end += 6;
        }
    }
    (end >= b.len() || !is_word(b[end])).then_some(end)
}

fn hex_run(b: &[u8], at: usize) -> usize {
    b[at..].iter().take_while(|c| c.is_ascii_hexdigit()).count()
}

/// `8-4-4-4-12` hex digits.
fn uuid(b: &[u8], at: usize) -> Option<usize> {
    let mut end = at;
    for (i, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if hex_run(b, end) != len {
            return None;
        }
        end += len;
        if i < 4 {
            if b.get(end) != Some(&b'-') {
                return None;
            }
            end += 1;
        }
    }
    (end >= b.len() || !is_word(b[end])).then_some(end)
}

/// Exactly 64 hex digits (a SHA-256).
fn hex_hash(b: &[u8], at: usize) -> Option<usize> {
    let len = hex_run(b, at);
    let end = at + len;
    (len == 64 && (end >= b.len() || !is_word(b[end]))).then_some(end)
}

/// `call_…`, `toolu_…`, `chatcmpl-…`: a provider's id prefix and its token.
fn call_id(b: &[u8], at: usize) -> Option<usize> {
    let rest = &b[at..];
    let prefix = [&b"call_"[..], b"toolu_", b"chatcmpl-"]
        .into_iter()
        .find(|p| rest.starts_with(p))?;
    let body = rest[prefix.len()..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'-')
        .count();
    (body > 0).then_some(at + prefix.len() + body)
}

/// `data:<mime>;base64,<payload>` → the same with `[N bytes]` for the payload.
fn data_url(b: &[u8], at: usize) -> Option<(usize, String)> {
    let rest = &b[at..];
    if !rest.starts_with(b"data:") {
        return None;
    }
    let marker = rest.windows(8).position(|w| w == b";base64,")?;
    let head = std::str::from_utf8(&rest[..marker + 8]).ok()?;
    if head[5..marker].bytes().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    let start = marker + 8;
    let payload = rest[start..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
        .count();
    Some((at + start + payload, format!("{head}[{payload} chars]")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_times_ids_hashes_and_images() {
        let text = "at 2026-08-19 10:00 and 2026-08-19T10:00:00+02:00, id 123e4567-e89b-12d3-a456-426614174000, \
                    toolu_01AbC, hash 9d2a7ebf9d2a7ebf9d2a7ebf9d2a7ebf9d2a7ebf9d2a7ebf9d2a7ebf9d2a7ebf, \
                    img data:image/png;base64,iVBORw0KGgo= end; v1.2026-01-01x stays";
        assert_eq!(
            redact(text),
            "at [time] and [time], id [id], [call-id], hash [sha256], img data:image/png;base64,[12 chars] end; v1.2026-01-01x stays"
        );
    }

    #[test]
    fn leaves_plain_text_alone() {
        let text = "version 2026 and 12-34 and recall_this and call_ (nothing)";
        assert_eq!(redact(text), text);
    }
}

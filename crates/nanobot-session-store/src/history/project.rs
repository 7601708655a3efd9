//! A stored message as the model is shown it: runtime context dropped, breadcrumbs of media and apps, assistant text cleaned.

use super::*;

/// One message as the model sees it, or `None` when it is not replayed.
pub(super) fn project(
    message: &StoredMessage,
    include_runtime_context: bool,
) -> Option<Map<String, Value>> {
    if message.shape().command {
        return None;
    }
    let role = match role(message) {
        Some(role @ ("user" | "assistant" | "tool" | "system")) => role,
        _ => return None,
    };
    let has_runtime_context = message
        .get("_runtime_context")
        .is_some_and(Value::is_object);
    let add_cli_apps = include_runtime_context && !has_runtime_context;
    let content = match message.get("content") {
        // Text no runtime context is cut from: read where it lies, copied once.
        Some(Value::String(text)) if include_runtime_context || !has_runtime_context => {
            Value::String(replayed_text(message, role, text, add_cli_apps))
        }
        other => {
            let mut content = other.cloned().unwrap_or(Value::String(String::new()));
            if !include_runtime_context {
                content = without_runtime_context(message, content);
            }
            match content {
                Value::String(text) => {
                    Value::String(replayed_text(message, role, &text, add_cli_apps))
                }
                content => content,
            }
        }
    };
    if role == "assistant"
        && content.as_str().is_some_and(|t| t.trim().is_empty())
        && !["tool_calls", "reasoning_content", "thinking_blocks"]
            .iter()
            .any(|k| message.get(k).is_some())
    {
        return None;
    }
    let mut out = Map::with_capacity(4);
    out.insert("role".into(), Value::String(role.into()));
    out.insert("content".into(), content);
    for field in REPLAYED_FIELDS {
        if let Some(value) = message.get(field) {
            out.insert(field.into(), value.clone());
        }
    }
    Some(out)
}

/// A text content as the model is shown it: an assistant's sanitized, a user's with the
/// breadcrumbs of its media (and, when `add_cli_apps`, of its CLI apps).
fn replayed_text(message: &StoredMessage, role: &str, text: &str, add_cli_apps: bool) -> String {
    match role {
        "assistant" => sanitize_assistant_text(text),
        "user" => {
            let text = with_media_breadcrumbs(text, message.get("media"));
            match message.get("cli_apps") {
                apps @ Some(Value::Array(_)) if add_cli_apps => {
                    with_cli_app_breadcrumbs(&text, apps)
                }
                _ => text,
            }
        }
        _ => text.to_owned(),
    }
}

/// nanobot's `public_history_message`: a copy without the runtime-context marker and with
/// the exact model-only text it records cut off the content (what people, forks and raw
/// archives see).
pub fn public_copy(message: &StoredMessage) -> StoredMessage {
    let content = message
        .get("content")
        .cloned()
        .map(|c| without_runtime_context(message, c));
    let mut fields = message.fields().clone();
    fields.shift_remove("_runtime_context");
    if let Some(content) = content {
        fields.insert("content".into(), content);
    }
    StoredMessage::from_map(fields)
}

/// nanobot's `public_history_message` for the content: cut the exact runtime-context suffix
/// or trailing blocks its marker records.
pub(super) fn without_runtime_context(message: &StoredMessage, content: Value) -> Value {
    let Some(marker) = message.get("_runtime_context").and_then(Value::as_object) else {
        return content;
    };
    if marker.get("version").and_then(Value::as_i64) != Some(1) {
        return content;
    }
    match (&content, marker.get("suffix"), marker.get("blocks")) {
        (Value::String(text), Some(Value::String(suffix)), _) if !suffix.is_empty() => {
            if text == suffix {
                Value::String(String::new())
            } else if let Some(bare) = text.strip_suffix(&format!("\n\n{suffix}")) {
                Value::String(bare.to_owned())
            } else {
                content
            }
        }
        (Value::Array(blocks), _, Some(Value::Array(expected)))
            if !expected.is_empty() && blocks.len() >= expected.len() =>
        {
            let cut = blocks.len() - expected.len();
            if blocks[cut..] == expected[..] {
                Value::Array(blocks[..cut].to_vec())
            } else {
                content
            }
        }
        _ => content,
    }
}

/// nanobot's assistant replay sanitizer: one leading `[Message Time: …]` marker, local image
/// breadcrumbs and echoed `generate_image(...)`/`message(...)` lines go; lines are re-joined
/// with `\n` and the text trimmed.
pub(crate) fn sanitize_assistant_text(text: &str) -> String {
    already_clean(text).map_or_else(|| sanitize_by_lines(text), str::to_owned)
}

/// The sanitizer as nanobot writes it: split into lines, filter, re-join, trim.
fn sanitize_by_lines(text: &str) -> String {
    let mut rest = text;
    if let Some(after) = rest.strip_prefix("[Message Time: ")
        && let Some(close) = after.find(']').filter(|&i| i > 0)
    {
        rest = &after[close + 1..];
        rest = rest.strip_prefix('\n').unwrap_or(rest);
    }
    let lines: Vec<&str> = python_splitlines(rest)
        .into_iter()
        .filter(|line| !is_local_image_breadcrumb(line) && !is_tool_call_echo(line))
        .collect();
    lines.join("\n").trim().to_owned()
}

/// The sanitized text without splitting it into lines, when there is nothing to remove
/// and every line break is `\n` (most assistant text): the lines re-joined are the text
/// itself, but for a last `\n` the trim drops anyway.
fn already_clean(text: &str) -> Option<&str> {
    if text.starts_with("[Message Time: ") || has_other_line_breaks(text.as_bytes()) {
        return None;
    }
    let removed = text
        .split('\n')
        .any(|line| is_local_image_breadcrumb(line) || is_tool_call_echo(line));
    (!removed).then(|| text.trim())
}

/// Any line break Python's `splitlines` knows besides `\n`: `\r`, `\v`, `\f`, `\x1c` to
/// `\x1e`, U+0085, U+2028 and U+2029 (in UTF-8, `C2 85`, `E2 80 A8`, `E2 80 A9`).
fn has_other_line_breaks(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(at, &byte)| match byte {
        b'\r' | 0x0b | 0x0c | 0x1c..=0x1e => true,
        0xC2 => bytes.get(at + 1) == Some(&0x85),
        0xE2 => matches!(bytes.get(at + 1..at + 3), Some([0x80, 0xA8 | 0xA9])),
        _ => false,
    })
}

/// `^\[image: (/|~)[^\]]+\]\s*$`
pub(super) fn is_local_image_breadcrumb(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("[image: ") else {
        return false;
    };
    let Some(path) = rest.strip_prefix('/').or_else(|| rest.strip_prefix('~')) else {
        return false;
    };
    match path.find(']') {
        Some(close) if close > 0 => path[close + 1..].chars().all(char::is_whitespace),
        _ => false,
    }
}

/// `^\s*(generate_image|message)\([^)]*\)\s*$`
pub(super) fn is_tool_call_echo(line: &str) -> bool {
    let line = line.trim_start();
    let Some(rest) = line
        .strip_prefix("generate_image(")
        .or_else(|| line.strip_prefix("message("))
    else {
        return false;
    };
    match rest.find(')') {
        Some(close) => rest[close + 1..].chars().all(char::is_whitespace),
        None => false,
    }
}

/// Python's `str.splitlines()`.
pub(super) fn python_splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r'
                | '\u{0b}'
                | '\u{0c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if is_break {
            lines.push(&text[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r'
                && let Some(&(j, '\n')) = chars.peek()
            {
                chars.next();
                end = j + 1;
            }
            start = end;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

pub(super) fn with_media_breadcrumbs(text: &str, media: Option<&Value>) -> String {
    let Some(Value::Array(paths)) = media else {
        return text.to_owned();
    };
    let crumbs: Vec<String> = paths
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(|p| format!("[image: {p}]"))
        .collect();
    append_lines(text, &crumbs)
}

pub(super) fn with_cli_app_breadcrumbs(text: &str, apps: Option<&Value>) -> String {
    let Some(Value::Array(apps)) = apps else {
        return text.to_owned();
    };
    let lines: Vec<String> = apps
        .iter()
        .take(8)
        .filter_map(Value::as_object)
        .filter_map(|app| {
            let name = app.get("name")?.as_str()?.trim().to_lowercase();
            if name.is_empty() {
                return None;
            }
            let entry = app
                .get("entry_point")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .unwrap_or("unknown");
            Some(format!(
                "[CLI App Attachment: @{name}; tool=run_cli_app; entry_point={entry}; \
                 skill=skills/cli-app-{name}/SKILL.md]"
            ))
        })
        .collect();
    append_lines(text, &lines)
}

pub(super) fn append_lines(text: &str, lines: &[String]) -> String {
    if lines.is_empty() {
        return text.to_owned();
    }
    let joined = lines.join("\n");
    if text.is_empty() {
        joined
    } else {
        format!("{text}\n{joined}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_bench_workload::testing::random_texts;

    #[test]
    fn the_shortcut_gives_what_the_lines_give() {
        let pieces = [
            "plain answer",
            " ",
            "\n",
            "\n\n",
            "\r\n",
            "\r",
            "\u{b}",
            "\u{c}",
            "\u{1c}",
            "\u{85}",
            "\u{2028}",
            "\u{2029}",
            "\u{a0}",
            "[image: /tmp/a.png]",
            "[image: ~/b.png]  ",
            "[image: http://x]",
            "generate_image(cat)",
            "  message(hi)  ",
            "message(",
            "中文回答",
            "“引号”",
            "—",
            "[Message Time: 2026-01-01 10:00]",
            "\t",
        ];
        let mut shortcuts = 0;
        for text in random_texts(3, &pieces, 7).take(20_000) {
            if let Some(clean) = already_clean(&text) {
                shortcuts += 1;
                assert_eq!(clean, sanitize_by_lines(&text), "{text:?}");
            }
            assert_eq!(
                sanitize_assistant_text(&text),
                sanitize_by_lines(&text),
                "{text:?}"
            );
        }
        assert!(shortcuts > 1_000, "the shortcut is taken: {shortcuts}");
    }
}

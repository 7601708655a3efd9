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
    let mut content = message
        .get("content")
        .cloned()
        .unwrap_or(Value::String(String::new()));
    if !include_runtime_context {
        content = without_runtime_context(message, content);
    }
    if role == "assistant"
        && let Value::String(text) = &content
    {
        content = Value::String(sanitize_assistant_text(text));
    }
    if role == "user"
        && let Value::String(text) = &content
    {
        let mut text = with_media_breadcrumbs(text, message.get("media"));
        if include_runtime_context && !has_runtime_context {
            text = with_cli_app_breadcrumbs(&text, message.get("cli_apps"));
        }
        content = Value::String(text);
    }
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

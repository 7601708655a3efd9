//! Tool calls a model wrote as text instead of as native calls.
//!
//! Small local models do: a JSON object `{"name": …, "arguments": {…}}` as the whole answer,
//! fenced (```` ```json ````), wrapped in their template's `<tool_call>` tags, with every brace
//! doubled (`{{"name": …}}`, learnt from an escaped template), with `parameters` for
//! `arguments`, with the arguments as JSON text, or several calls in a row. One parser reads
//! all of these, so the turn and Dream accept the same answers.

use serde_json::Value;

use super::strip_think;
use crate::ToolCall;

/// Where in an answer's text a call may stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallPlacement {
    /// The answer is nothing but calls: only fences, `<tool_call>` tags and whitespace
    /// around them. A call quoted inside prose is an ordinary answer (the turn: a user who
    /// asks what a tool call looks like gets an answer, not a call).
    WholeAnswer,
    /// Calls anywhere in the text, prose around them ignored (Dream, whose answers are
    /// only ever about its own tools).
    Anywhere,
}

/// The calls of offered tools written in `text` (reasoning blocks removed first), in order,
/// each with the id `id(position)` gives. A JSON object that names no offered tool, or whose
/// arguments are not an object (nor JSON text of one), is not a call.
pub fn tool_calls_in_text(
    text: &str,
    offered: &[&str],
    placement: CallPlacement,
    id: impl Fn(usize) -> String,
) -> Vec<ToolCall> {
    let body = strip_think(text);
    let accepted = |found: &Found| {
        !found.calls.is_empty()
            && (placement == CallPlacement::Anywhere || only_wrapping(&found.rest))
    };
    let mut found = scan(&body, offered);
    if !accepted(&found) && body.contains("{{") {
        // Read once more with every doubled brace single: `{{"name": …}}` is then a call.
        found = scan(&body.replace("{{", "{").replace("}}", "}"), offered);
    }
    if !accepted(&found) {
        return Vec::new();
    }
    found
        .calls
        .into_iter()
        .enumerate()
        .map(|(position, (name, arguments))| ToolCall::new(id(position), name, arguments))
        .collect()
}

/// The calls found in a text, and the text left around them.
struct Found {
    calls: Vec<(String, String)>,
    rest: String,
}

/// Every JSON object in `text`, left to right; the calls among them are kept, everything
/// else (other objects too) is left over.
fn scan(text: &str, offered: &[&str]) -> Found {
    let mut found = Found {
        calls: Vec::new(),
        rest: String::new(),
    };
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        found.rest.push_str(&rest[..start]);
        let candidate = &rest[start..];
        let mut stream = serde_json::Deserializer::from_str(candidate).into_iter::<Value>();
        let Some(Ok(Value::Object(object))) = stream.next() else {
            found.rest.push('{');
            rest = &candidate[1..];
            continue;
        };
        let consumed = stream.byte_offset().max(1);
        match as_call(&object, offered) {
            Some(call) => found.calls.push(call),
            None => found.rest.push_str(&candidate[..consumed]),
        }
        rest = &candidate[consumed..];
    }
    found.rest.push_str(rest);
    found
}

/// `(name, arguments as JSON text)` when the object calls an offered tool.
fn as_call(object: &serde_json::Map<String, Value>, offered: &[&str]) -> Option<(String, String)> {
    let name = object.get("name")?.as_str()?;
    if !offered.contains(&name) {
        return None;
    }
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None => "{}".to_owned(),
        Some(object @ Value::Object(_)) => object.to_string(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(_)) => text.clone(),
            _ => return None,
        },
        Some(_) => return None,
    };
    Some((name.to_owned(), arguments))
}

/// Whether the text around the calls is only fences, `<tool_call>` tags and whitespace.
fn only_wrapping(rest: &str) -> bool {
    let mut rest = rest
        .replace("<tool_call>", " ")
        .replace("</tool_call>", " ");
    while let Some(at) = rest.find("```") {
        let after = &rest[at + 3..];
        let language = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        rest = format!("{} {}", &rest[..at], &after[language..]);
    }
    rest.trim().is_empty()
}

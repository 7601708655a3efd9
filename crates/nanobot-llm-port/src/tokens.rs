//! Token counting: the `cl100k_base` encoding bundled into the binary (nothing is downloaded
//! at run time), a byte-count fallback, and nanobot's per-message and per-request estimates.
//!
//! The estimates reproduce `nanobot/utils/helpers.py` (nanobot-ai 0.3.5) exactly, so a
//! budget computed here matches the one the Python original computes on the same messages:
//!
//! - [`estimate_message_tokens`]: the content (plain text; for a list, each non-empty text
//!   part, and every other part as its JSON), then `name`, `tool_call_id`, the JSON of
//!   `tool_calls` and `reasoning_content`, joined by newlines; 4 for an empty payload, else
//!   `max(4, tokens + 4)`.
//! - [`estimate_prompt_tokens`]: a whole request as one payload (text parts only, then tool
//!   calls, reasoning, name and tool call id of every message, then the tool definitions),
//!   plus 4 per message.
//!
//! "JSON" above means Python's `json.dumps(value, ensure_ascii=False)`: `", "` and `": "`
//! separators and raw UTF-8, which [`to_python_json`] writes.

use std::io;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::message::{Content, ContentPart, Message};

#[cfg(feature = "cl100k")]
mod cl100k;
use crate::request::ToolDefinition;

/// Counts the tokens of a text.
///
/// Contract: a count never exceeds the text's length in bytes (every byte-pair encoding
/// spends at least one byte per token), so a caller may skip counting a text whose byte
/// length already fits its room ([`prompt_tokens_at_most`]).
#[cfg_attr(feature = "test-util", mockall::automock)]
pub trait TokenCounter: Send + Sync {
    /// The number of tokens `text` encodes to.
    fn count(&self, text: &str) -> usize;

    /// The encoding's name, for reports (`cl100k_base`, `utf8_bytes`, ...).
    fn encoding(&self) -> &str;
}

impl<T: TokenCounter + ?Sized> TokenCounter for Arc<T> {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }

    fn encoding(&self) -> &str {
        (**self).encoding()
    }
}

impl<T: TokenCounter + ?Sized> TokenCounter for &T {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }

    fn encoding(&self) -> &str {
        (**self).encoding()
    }
}

/// OpenAI's `cl100k_base`, the encoding nanobot counts every model's tokens with.
///
/// The ranks are compiled into the binary; the first count in a process decodes them (about
/// 20 ms in a release build), later counts share them. Exact: the same counts as tiktoken.
#[cfg(feature = "cl100k")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cl100kBase;

#[cfg(feature = "cl100k")]
impl Cl100kBase {
    /// The encoder (a handle to the shared, lazily decoded ranks).
    pub fn new() -> Self {
        Cl100kBase
    }

    /// Decodes the ranks now (and indexes where long pieces outside ASCII can be cut), so
    /// the first real count is not the slow one.
    pub fn warm_up(&self) {
        self.count("warm up 预热一下");
    }
}

#[cfg(feature = "cl100k")]
impl TokenCounter for Cl100kBase {
    fn count(&self, text: &str) -> usize {
        cl100k::count(text)
    }

    fn encoding(&self) -> &str {
        "cl100k_base"
    }
}

/// The fallback nanobot uses when no tokenizer is available: one token per UTF-8 byte.
/// Never below the real count (about 3 to 4 times it for English), so a budget computed
/// with it errs on the safe side. It costs nothing to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Utf8Bytes;

impl TokenCounter for Utf8Bytes {
    fn count(&self, text: &str) -> usize {
        text.len()
    }

    fn encoding(&self) -> &str {
        "utf8_bytes"
    }
}

/// The tokens every message adds for its framing, on top of its payload.
pub const PER_MESSAGE_OVERHEAD: usize = 4;

/// Sizes messages and requests in tokens: the one estimator every policy takes (the
/// Consolidator sizing the requests it would send, the governor the ones a turn sends).
/// [`CountingEstimator`] is nanobot's estimate over a counter; a context builder adds its
/// images' flat cost; a test scripts it.
pub trait PromptEstimator: Send + Sync {
    /// One message.
    fn message(&self, message: &Message) -> usize;

    /// A whole request: `messages` and `tools`.
    fn prompt(&self, messages: &[Message], tools: &[ToolDefinition]) -> usize;

    /// A cheap upper bound of [`PromptEstimator::prompt`], when there is one: a request
    /// whose bound fits its budget needs no exact count. `None` by default.
    fn prompt_at_most(&self, messages: &[Message], tools: &[ToolDefinition]) -> Option<usize> {
        let _ = (messages, tools);
        None
    }
}

/// nanobot's estimates over a [`TokenCounter`] (`cl100k_base` in practice).
#[derive(Clone)]
pub struct CountingEstimator(pub Arc<dyn TokenCounter>);

impl PromptEstimator for CountingEstimator {
    fn message(&self, message: &Message) -> usize {
        estimate_message_tokens(self.0.as_ref(), message)
    }

    fn prompt(&self, messages: &[Message], tools: &[ToolDefinition]) -> usize {
        estimate_prompt_tokens(self.0.as_ref(), messages, tools)
    }

    /// The payload's bytes: the [`TokenCounter`] contract caps every count there.
    fn prompt_at_most(&self, messages: &[Message], tools: &[ToolDefinition]) -> Option<usize> {
        Some(prompt_tokens_at_most(messages, tools))
    }
}

/// The estimate of one message, as nanobot's `estimate_message_tokens`.
pub fn estimate_message_tokens(counter: &dyn TokenCounter, message: &Message) -> usize {
    let mut payload = Payload::default();
    if let Some(content) = message.content() {
        match content {
            Content::Text(text) => payload.push(text),
            Content::Parts(parts) => {
                for part in parts {
                    match part {
                        ContentPart::Text { text, .. } => {
                            if !text.is_empty() {
                                payload.push(text);
                            }
                        }
                        other => payload.push_json(other),
                    }
                }
            }
        }
    }
    let (name, tool_call_id) = names(message);
    payload.push_non_empty(name);
    payload.push_non_empty(tool_call_id);
    if let Message::Assistant(assistant) = message {
        if let Some(calls) = assistant.tool_calls.as_ref().filter(|c| !c.is_empty()) {
            payload.push_json(calls);
        }
        payload.push_non_empty(assistant.reasoning_content.as_deref());
    }
    payload.message_tokens(counter)
}

/// [`estimate_message_tokens`] for a message kept as a JSON object (a stored session row),
/// with every quirk of the Python original: only string `name`, `tool_call_id` and
/// `reasoning_content` count, any other content is counted as its JSON.
pub fn estimate_json_message_tokens(
    counter: &dyn TokenCounter,
    message: &Map<String, Value>,
) -> usize {
    // One pass over the fields (a stored message has a handful) instead of a hashed lookup
    // per field the estimate reads.
    let mut fields: [Option<&Value>; 5] = [None; 5];
    for (key, value) in message {
        let slot = match key.as_str() {
            "content" => 0,
            "name" => 1,
            "tool_call_id" => 2,
            "tool_calls" => 3,
            "reasoning_content" => 4,
            _ => continue,
        };
        fields[slot] = Some(value);
    }
    let [content, name, tool_call_id, tool_calls, reasoning] = fields;
    let mut payload = Payload::default();
    match content {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => payload.push(text),
        Some(Value::Array(parts)) => {
            for part in parts {
                match json_text_part(part) {
                    Some(text) => {
                        if !text.is_empty() {
                            payload.push(text);
                        }
                    }
                    None => payload.push_json(part),
                }
            }
        }
        Some(other) => payload.push_json(other),
    }
    payload.push_non_empty(name.and_then(Value::as_str));
    payload.push_non_empty(tool_call_id.and_then(Value::as_str));
    if let Some(calls) = tool_calls.filter(|c| python_truthy(c)) {
        payload.push_json(calls);
    }
    payload.push_non_empty(reasoning.and_then(Value::as_str));
    payload.message_tokens(counter)
}

/// The estimate of a whole request, as nanobot's `estimate_prompt_tokens`: every message's
/// text parts, tool calls, reasoning, name and tool call id, and the tool definitions, as one
/// payload, plus [`PER_MESSAGE_OVERHEAD`] per message.
pub fn estimate_prompt_tokens(
    counter: &dyn TokenCounter,
    messages: &[Message],
    tools: &[ToolDefinition],
) -> usize {
    prompt_payload(messages, tools).prompt_tokens(counter, messages.len())
}

/// An upper bound of [`estimate_prompt_tokens`] for any counter that keeps the
/// [`TokenCounter`] contract, found without tokenizing: the payload's length in bytes plus
/// the framing. A request whose bound fits its budget needs no exact count.
pub fn prompt_tokens_at_most(messages: &[Message], tools: &[ToolDefinition]) -> usize {
    prompt_payload(messages, tools).as_str().len() + PER_MESSAGE_OVERHEAD * messages.len()
}

/// The text [`estimate_prompt_tokens`] counts.
fn prompt_payload<'a>(messages: &'a [Message], tools: &[ToolDefinition]) -> Payload<'a> {
    let mut payload = Payload::default();
    for message in messages {
        match message.content() {
            Some(Content::Text(text)) => payload.push(text),
            Some(Content::Parts(parts)) => {
                for text in parts.iter().filter_map(ContentPart::as_text) {
                    payload.push_non_empty(Some(text));
                }
            }
            None => {}
        }
        if let Message::Assistant(assistant) = message {
            if let Some(calls) = assistant.tool_calls.as_ref().filter(|c| !c.is_empty()) {
                payload.push_json(calls);
            }
            payload.push_non_empty(assistant.reasoning_content.as_deref());
        }
        let (name, tool_call_id) = names(message);
        payload.push_non_empty(name);
        payload.push_non_empty(tool_call_id);
    }
    if !tools.is_empty() {
        payload.push_json(tools);
    }
    payload
}

/// [`estimate_prompt_tokens`] for messages and tool definitions kept as JSON.
pub fn estimate_json_prompt_tokens(
    counter: &dyn TokenCounter,
    messages: &[Map<String, Value>],
    tools: &[Value],
) -> usize {
    let mut payload = Payload::default();
    for message in messages {
        match message.get("content") {
            Some(Value::String(text)) => payload.push(text),
            Some(Value::Array(parts)) => {
                for text in parts.iter().filter_map(json_text_part) {
                    payload.push_non_empty(Some(text));
                }
            }
            _ => {}
        }
        if let Some(calls) = message.get("tool_calls").filter(|c| python_truthy(c)) {
            payload.push_json(calls);
        }
        payload.push_non_empty(message.get("reasoning_content").and_then(Value::as_str));
        payload.push_non_empty(message.get("name").and_then(Value::as_str));
        payload.push_non_empty(message.get("tool_call_id").and_then(Value::as_str));
    }
    if !tools.is_empty() {
        payload.push_json(tools);
    }
    payload.prompt_tokens(counter, messages.len())
}

fn names(message: &Message) -> (Option<&str>, Option<&str>) {
    match message {
        Message::System(m) => (m.name.as_deref(), None),
        Message::User(m) => (m.name.as_deref(), None),
        Message::Assistant(m) => (m.name.as_deref(), None),
        Message::Tool(m) => (m.name.as_deref(), Some(m.tool_call_id.as_str())),
    }
}

/// The text of a `{"type": "text"}` part (`""` when its text is missing or not a string),
/// or `None` for any other element.
fn json_text_part(part: &Value) -> Option<&str> {
    let part = part.as_object()?;
    (part.get("type")? == "text").then(|| part.get("text").and_then(Value::as_str).unwrap_or(""))
}

/// Python truthiness of a JSON value (`null`, `false`, `0`, `""`, `[]` and `{}` are false):
/// nanobot-ai's records are read with Python's rules, so ours must agree.
pub fn python_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Parts joined by newlines, as Python's `"\n".join(parts)`.
#[derive(Default)]
struct Payload<'a> {
    /// The only part so far, where it lies: a message of one text (most of them) is counted
    /// without being copied.
    only: Option<&'a str>,
    /// The parts joined, once there is more than one (or a JSON one).
    text: String,
    parts: usize,
}

impl<'a> Payload<'a> {
    fn push(&mut self, part: &'a str) {
        if self.parts == 0 {
            self.only = Some(part);
        } else {
            self.join_next();
            self.text.push_str(part);
        }
        self.parts += 1;
    }

    fn push_non_empty(&mut self, part: Option<&'a str>) {
        if let Some(part) = part.filter(|p| !p.is_empty()) {
            self.push(part);
        }
    }

    fn push_json<T: Serialize + ?Sized>(&mut self, value: &T) {
        if self.parts > 0 {
            self.join_next();
        }
        write_python_json_into(&mut self.text, value);
        self.parts += 1;
    }

    /// Moves a borrowed part into the joined text and starts the next part's line.
    fn join_next(&mut self) {
        if let Some(only) = self.only.take() {
            self.text.push_str(only);
        }
        self.text.push('\n');
    }

    fn as_str(&self) -> &str {
        self.only.unwrap_or(&self.text)
    }

    fn message_tokens(&self, counter: &dyn TokenCounter) -> usize {
        let text = self.as_str();
        if text.is_empty() {
            return PER_MESSAGE_OVERHEAD;
        }
        (counter.count(text) + PER_MESSAGE_OVERHEAD).max(PER_MESSAGE_OVERHEAD)
    }

    fn prompt_tokens(&self, counter: &dyn TokenCounter, messages: usize) -> usize {
        let text = self.as_str();
        let text_tokens = if text.is_empty() {
            0
        } else {
            counter.count(text)
        };
        text_tokens + PER_MESSAGE_OVERHEAD * messages
    }
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it: `", "` between
/// items, `": "` after keys, non-ASCII characters raw, keys in their stored order.
///
/// Session files and the history journal of nanobot-ai are written this way; writing the
/// same bytes keeps files diff-identical when both programs share a workspace.
pub fn to_python_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = String::new();
    write_python_json_into(&mut out, value);
    out
}

/// [`to_python_json`] appended to `out` as bytes, with no check that they are UTF-8 (they
/// are): for writers that send the bytes on as they are (a session file's append).
pub fn write_python_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut serializer = serde_json::Serializer::with_formatter(out, PythonFormatter);
    // Our types and serde_json values always serialize: keys are strings, there are no
    // fallible custom impls, and writing to a Vec cannot fail.
    let _ = value.serialize(&mut serializer);
}

fn write_python_json_into<T: Serialize + ?Sized>(out: &mut String, value: &T) {
    // A scratch buffer per value: validating it as UTF-8 costs O(value), where validating
    // the whole growing payload would make a request's estimate quadratic.
    let mut bytes = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, PythonFormatter);
    // Our types and serde_json values always serialize: keys are strings, there are no
    // fallible custom impls, and writing to a Vec cannot fail.
    let _ = value.serialize(&mut serializer);
    match std::str::from_utf8(&bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(&bytes)),
    }
}

/// serde_json's compact output with Python's default separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }
}

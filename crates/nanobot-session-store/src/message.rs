//! Messages as stored: every field a writer put there, in its order.

use std::fmt;
use std::sync::{Arc, OnceLock};

use nanobot_llm_port::Role;
use nanobot_llm_port::tokens::python_truthy;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The field recording a message's replay token estimate per encoding
/// (`{"cl100k_base": 42}`), so a session is counted once, not once per process. Written by
/// [`crate::SessionHandle::add_message`]; nanobot-ai ignores it; removed when the message
/// changes.
pub const TOKENS_FIELD: &str = "_tokens";

/// The field marking a tool result as memory recalled by a search (`search_memory`): the
/// text came out of the journal, the memory files or an earlier session, so archiving it
/// again would store it twice and let it grow with every recall. The Consolidator leaves
/// such messages out of what it archives; nanobot-ai ignores the field.
pub const RECALLED_FIELD: &str = "_recalled";

/// One stored message: `role`, `content`, `timestamp` and every other field a writer set
/// (`tool_calls`, `tool_call_id`, `name`, `reasoning_content`, `media`, `_command`, fields we
/// do not know), kept in their order, so a file from nanobot-ai loses nothing when we write
/// it back.
///
/// A message read from a file keeps its line as it was (already checked to be a JSON
/// object), in the buffer the whole file was read into, and is decoded only when a field is
/// first read: loading a long session costs one validation pass and no copy, and writing it
/// back reproduces the original bytes. It also caches its token estimate for replay, so a
/// long session is counted once. Undecoded, a message is 40 bytes beside its text.
pub struct StoredMessage {
    /// The record as read, until a change makes it stale.
    raw: Option<RawText>,
    /// Everything decoded or computed from the record, allocated on first use and shared
    /// by copies (a copy of a message is a save's snapshot, a fork, a merge): what is
    /// computed from the same record is the same for all of them, and a change to one
    /// copy replaces its own.
    derived: OnceLock<Arc<Derived>>,
}

/// One record's text inside a buffer it shares with the other records read with it.
#[derive(Clone)]
struct RawText {
    buffer: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl RawText {
    fn text(&self) -> &str {
        // Checked as UTF-8 (and as one JSON object) when it was read.
        simdutf8::basic::from_utf8(&self.buffer[self.start..self.end]).unwrap_or_default()
    }
}

#[derive(Default, Clone)]
struct Derived {
    fields: OnceLock<Map<String, Value>>,
    /// (encoding fingerprint, tokens) of the replay projection.
    tokens: OnceLock<(u64, u32)>,
    /// The model-replay projection (`None`: not replayed), computed once.
    projection: OnceLock<Option<Arc<Map<String, Value>>>>,
    /// What replay asks of every message, decoded once.
    shape: OnceLock<Shape>,
}

/// The roles replay tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Speaker {
    User,
    Assistant,
    Tool,
    System,
    /// No string role, or one a provider would refuse.
    Other,
}

/// What replay needs to know about every message, so a long history is scanned without
/// looking fields up again.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) speaker: Speaker,
    /// A slash-command pair persisted for the UI only (`_command`).
    pub(crate) command: bool,
    /// A proactive message pushed to a channel (`_channel_delivery`).
    pub(crate) delivery: bool,
    /// A tool result's truthy `tool_call_id`, in string form.
    pub(crate) answers: Option<String>,
    /// The ids an assistant message's `tool_calls` declare.
    pub(crate) declares: Vec<String>,
}

impl Shape {
    /// One pass over the fields (replay asks this of every live message of a long session).
    fn of(fields: &Map<String, Value>) -> Shape {
        let mut shape = Shape {
            speaker: Speaker::Other,
            command: false,
            delivery: false,
            answers: None,
            declares: Vec::new(),
        };
        let mut calls = None;
        for (key, value) in fields {
            match key.as_str() {
                "role" => {
                    shape.speaker = match value.as_str() {
                        Some("user") => Speaker::User,
                        Some("assistant") => Speaker::Assistant,
                        Some("tool") => Speaker::Tool,
                        Some("system") => Speaker::System,
                        _ => Speaker::Other,
                    }
                }
                "_command" => shape.command = python_truthy(value),
                "_channel_delivery" => shape.delivery = python_truthy(value),
                "tool_call_id" => {
                    shape.answers = match value {
                        Value::String(id) if !id.is_empty() => Some(id.clone()),
                        other if python_truthy(other) => Some(other.to_string()),
                        _ => None,
                    }
                }
                "tool_calls" => calls = Some(value),
                _ => {}
            }
        }
        if let (Speaker::Assistant, Some(Value::Array(calls))) = (shape.speaker, calls) {
            shape.declares = calls.iter().filter_map(call_id).collect();
        }
        shape
    }
}

/// The id of a tool call entry, as nanobot compares them (string form of a truthy id).
pub(crate) fn call_id(call: &Value) -> Option<String> {
    match call.get("id")? {
        Value::String(id) if !id.is_empty() => Some(id.clone()),
        Value::Number(n) if n.as_f64() != Some(0.0) => Some(n.to_string()),
        Value::Bool(true) => Some("True".to_owned()),
        _ => None,
    }
}

impl StoredMessage {
    /// A message with `role` and `content`, no timestamp.
    pub fn new(role: Role, content: impl Into<Value>) -> Self {
        let mut fields = Map::new();
        fields.insert("role".into(), Value::String(role.as_str().into()));
        fields.insert("content".into(), content.into());
        Self::from_map(fields)
    }

    /// A user message.
    pub fn user(content: impl Into<Value>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<Value>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// A tool result answering `tool_call_id`.
    pub fn tool_result(tool_call_id: &str, name: &str, content: impl Into<Value>) -> Self {
        Self::new(Role::Tool, content)
            .with("tool_call_id", tool_call_id)
            .with("name", name)
    }

    /// Wraps any JSON object as it is (no field is required: a record without a role is
    /// kept, and skipped by replay).
    pub fn from_map(fields: Map<String, Value>) -> Self {
        StoredMessage {
            raw: None,
            derived: OnceLock::from(Arc::new(Derived {
                fields: OnceLock::from(fields),
                ..Derived::default()
            })),
        }
    }

    /// A message from the text of one JSON object, kept verbatim and decoded on first use.
    /// Refused (with serde_json's reason) unless the text is a JSON object.
    pub fn from_json_text(text: &str) -> Result<Self, String> {
        if !text.trim_start().starts_with('{') {
            return Err("not a JSON object".to_owned());
        }
        let buffer = Arc::new(text.as_bytes().to_vec());
        Self::from_shared_text(&buffer, 0..text.len(), text)
    }

    /// A message from `text`, which is `buffer[range]` (a file read whole): kept as a
    /// range of the shared buffer, after the same check as [`Self::from_json_text`].
    pub(crate) fn from_shared_text(
        buffer: &Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
        text: &str,
    ) -> Result<Self, String> {
        let value = check_object_text(text)?;
        Ok(Self::from_checked(
            buffer,
            range.start + value.start..range.start + value.end,
        ))
    }

    /// A message whose text, `buffer[range]`, [`check_object_text`] accepted.
    pub(crate) fn from_checked(buffer: &Arc<Vec<u8>>, range: std::ops::Range<usize>) -> Self {
        StoredMessage {
            raw: Some(RawText {
                buffer: Arc::clone(buffer),
                start: range.start,
                end: range.end,
            }),
            derived: OnceLock::new(),
        }
    }

    /// A message from an llm-port message (what a model answered, or a tool result).
    pub fn from_llm(message: &nanobot_llm_port::Message) -> Self {
        match serde_json::to_value(message) {
            Ok(Value::Object(fields)) => Self::from_map(fields),
            // A message always serializes to an object; keep the role if it ever did not.
            _ => Self::new(message.role(), Value::Null),
        }
    }

    /// Sets a field (replacing an existing one in place), builder style.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets a field, replacing an existing one in place.
    pub fn insert(&mut self, key: &str, value: impl Into<Value>) {
        let mut fields = std::mem::take(self).into_fields();
        if key != TOKENS_FIELD {
            // A recorded token count described the message before this change.
            fields.shift_remove(TOKENS_FIELD);
        }
        fields.insert(key.to_owned(), value.into());
        *self = Self::from_map(fields);
    }

    /// Sets a field right after `content` (where nanobot-ai puts `timestamp`), or at the
    /// end when there is no content.
    pub fn insert_after_content(&mut self, key: &str, value: impl Into<Value>) {
        let mut fields = std::mem::take(self).into_fields();
        fields.shift_remove(TOKENS_FIELD);
        let at = fields
            .keys()
            .position(|k| k == "content")
            .map_or(fields.len(), |i| i + 1);
        fields.shift_insert(at, key.to_owned(), value.into());
        *self = Self::from_map(fields);
    }

    /// The role, if the record has a string one.
    pub fn role(&self) -> Option<&str> {
        self.fields().get("role").and_then(Value::as_str)
    }

    /// The content, if present.
    pub fn content(&self) -> Option<&Value> {
        self.fields().get("content")
    }

    /// A field.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields().get(key)
    }

    /// Whether the field is present and truthy in Python's sense.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key).is_some_and(python_truthy)
    }

    /// All fields (decoding the record on first use).
    pub fn fields(&self) -> &Map<String, Value> {
        self.derived().fields.get_or_init(|| match &self.raw {
            // The text was checked to be a JSON object when it was read.
            Some(raw) => serde_json::from_str(raw.text()).unwrap_or_default(),
            None => Map::new(),
        })
    }

    /// All fields, owned.
    pub fn into_fields(mut self) -> Map<String, Value> {
        self.fields();
        let Some(derived) = self.derived.get_mut() else {
            return Map::new();
        };
        match Arc::get_mut(derived) {
            Some(only) => only.fields.take().unwrap_or_default(),
            // Shared with a copy: that copy keeps its fields.
            None => derived.fields.get().cloned().unwrap_or_default(),
        }
    }

    /// The record's JSON text as read, if it is unchanged since.
    pub fn raw_json(&self) -> Option<&str> {
        self.raw.as_ref().map(RawText::text)
    }

    /// Appends the record as nanobot-ai writes it (Python's `json.dumps`): the text as read
    /// while it is unchanged, without checking it again, its fields otherwise. The same
    /// bytes [`Serialize`] gives with that formatter.
    #[cfg(feature = "fs")]
    pub(crate) fn write_python_json(&self, out: &mut Vec<u8>) {
        match &self.raw {
            Some(raw) => out.extend_from_slice(&raw.buffer[raw.start..raw.end]),
            None => nanobot_llm_port::tokens::write_python_json(out, self.fields()),
        }
    }

    fn derived(&self) -> &Derived {
        self.derived.get_or_init(Arc::default)
    }

    pub(crate) fn cached_tokens(&self, fingerprint: u64) -> Option<u32> {
        self.derived()
            .tokens
            .get()
            .filter(|(f, _)| *f == fingerprint)
            .map(|(_, t)| *t)
    }

    pub(crate) fn cache_tokens(&self, fingerprint: u64, tokens: u32) {
        let _ = self.derived().tokens.set((fingerprint, tokens));
    }

    /// What replay needs to know about this message.
    pub(crate) fn shape(&self) -> &Shape {
        self.derived()
            .shape
            .get_or_init(|| Shape::of(self.fields()))
    }

    /// The model-replay projection, computed once by `project`.
    pub(crate) fn cached_projection(
        &self,
        project: impl FnOnce() -> Option<Arc<Map<String, Value>>>,
    ) -> &Option<Arc<Map<String, Value>>> {
        self.derived().projection.get_or_init(project)
    }
}

/// Checks that `text` is one JSON object (whitespace around it allowed); where the object
/// is within `text`.
pub(crate) fn check_object_text(text: &str) -> Result<std::ops::Range<usize>, String> {
    if !text.trim_start().starts_with('{') {
        return Err("not a JSON object".to_owned());
    }
    let value = serde_json::from_str::<&RawValue>(text).map_err(|e| format!("not JSON ({e})"))?;
    // The value without the whitespace around it (a CRLF file's `\r`, say).
    let start = (value.get().as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
    Ok(start..start + value.get().len())
}

impl Default for StoredMessage {
    fn default() -> Self {
        Self::from_map(Map::new())
    }
}

impl Clone for StoredMessage {
    fn clone(&self) -> Self {
        StoredMessage {
            raw: self.raw.clone(),
            derived: self.derived.clone(),
        }
    }
}

impl PartialEq for StoredMessage {
    fn eq(&self, other: &Self) -> bool {
        match (self.raw_json(), other.raw_json()) {
            (Some(a), Some(b)) if a == b => true,
            _ => self.fields() == other.fields(),
        }
    }
}

impl fmt::Debug for StoredMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.fields(), f)
    }
}

impl Serialize for StoredMessage {
    /// Writes the record as read when it is unchanged (byte for byte with serde_json), its
    /// fields otherwise.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self
            .raw
            .as_ref()
            .and_then(|raw| serde_json::from_str::<&RawValue>(raw.text()).ok())
        {
            Some(raw) => raw.serialize(serializer),
            None => self.fields().serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for StoredMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(StoredMessage::from_map)
    }
}

impl From<Map<String, Value>> for StoredMessage {
    fn from(fields: Map<String, Value>) -> Self {
        StoredMessage::from_map(fields)
    }
}

//! OpenAI-style chat messages: the shape every provider adapter, store and policy shares.
//!
//! Round trips are lossless in meaning: every field a provider sends that we do not model
//! lands in an `extra` map and is written back unchanged. Two normalisations are made on
//! output, both accepted by every OpenAI-compatible API: an assistant message always carries
//! `content` (`null` when it has none), and a tool call always carries `"type"`
//! (`"function"` when the input left it out).

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Fields a message, part or call carries that this crate does not model, kept verbatim.
pub type Extra = Map<String, Value>;

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person (or a channel speaking for them).
    User,
    /// The model.
    Assistant,
    /// The result of a tool call the assistant made.
    Tool,
}

impl Role {
    /// The wire name: `system`, `user`, `assistant` or `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat message, tagged by its `role` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model.
    System(SystemMessage),
    /// A user turn.
    User(UserMessage),
    /// A model turn: text, tool calls, or both.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolMessage),
}

impl Message {
    /// A system message with plain text.
    pub fn system(text: impl Into<String>) -> Self {
        Message::System(SystemMessage {
            content: Content::Text(text.into()),
            name: None,
            extra: Extra::new(),
        })
    }

    /// A user message with plain text.
    pub fn user(text: impl Into<String>) -> Self {
        Message::User(UserMessage {
            content: Content::Text(text.into()),
            name: None,
            extra: Extra::new(),
        })
    }

    /// A user message made of parts (text and images).
    pub fn user_parts(parts: Vec<ContentPart>) -> Self {
        Message::User(UserMessage {
            content: Content::Parts(parts),
            name: None,
            extra: Extra::new(),
        })
    }

    /// An assistant message with plain text.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::Assistant(AssistantMessage::text(text))
    }

    /// An assistant message that calls tools, with optional text beside the calls.
    pub fn assistant_tool_calls(text: Option<String>, calls: Vec<ToolCall>) -> Self {
        Message::Assistant(AssistantMessage {
            content: text.map(Content::Text),
            tool_calls: Some(calls),
            ..AssistantMessage::default()
        })
    }

    /// The result of the tool call `tool_call_id`, answered by tool `name`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Message::Tool(ToolMessage {
            content: Content::Text(text.into()),
            tool_call_id: tool_call_id.into(),
            name: Some(name.into()),
            extra: Extra::new(),
        })
    }

    /// Who speaks this message.
    pub fn role(&self) -> Role {
        match self {
            Message::System(_) => Role::System,
            Message::User(_) => Role::User,
            Message::Assistant(_) => Role::Assistant,
            Message::Tool(_) => Role::Tool,
        }
    }

    /// The message's content, if it has any (only an assistant message may have none).
    pub fn content(&self) -> Option<&Content> {
        match self {
            Message::System(m) => Some(&m.content),
            Message::User(m) => Some(&m.content),
            Message::Assistant(m) => m.content.as_ref(),
            Message::Tool(m) => Some(&m.content),
        }
    }

    /// The fields this crate does not model.
    pub fn extra(&self) -> &Extra {
        match self {
            Message::System(m) => &m.extra,
            Message::User(m) => &m.extra,
            Message::Assistant(m) => &m.extra,
            Message::Tool(m) => &m.extra,
        }
    }

    /// The tool calls of an assistant message; empty for every other message.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant(m) => m.tool_calls(),
            _ => &[],
        }
    }
}

/// Instructions for the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemMessage {
    /// The instructions.
    pub content: Content,
    /// An optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A user turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// Text or parts (text and images).
    pub content: Content,
    /// An optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A model turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The answer text; `None` when the turn only calls tools. Always written, as `null` when
    /// absent.
    #[serde(default)]
    pub content: Option<Content>,
    /// Reasoning a provider returned beside the answer (DeepSeek, Kimi, OpenAI reasoning
    /// models); `""` is kept distinct from absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls; an empty list is kept distinct from absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// An optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this crate does not model (e.g. `thinking_blocks`, provider signatures).
    #[serde(flatten)]
    pub extra: Extra,
}

impl AssistantMessage {
    /// An assistant message with plain text.
    pub fn text(text: impl Into<String>) -> Self {
        AssistantMessage {
            content: Some(Content::Text(text.into())),
            ..AssistantMessage::default()
        }
    }

    /// The tool calls, empty when there are none.
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.tool_calls.as_deref().unwrap_or_default()
    }

    /// The answer's text: its text parts joined by newlines; empty when there is none.
    pub fn text_content(&self) -> String {
        self.content
            .as_ref()
            .map(Content::joined_text)
            .unwrap_or_default()
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// What the tool returned.
    pub content: Content,
    /// The id of the call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A message's content: plain text, or a list of parts.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Text and image parts, in order.
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The plain text, if this is [`Content::Text`].
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text(text) => Some(text),
            Content::Parts(_) => None,
        }
    }

    /// All text: the plain text, or the text parts joined by newlines.
    pub fn joined_text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => {
                let texts: Vec<&str> = parts.iter().filter_map(ContentPart::as_text).collect();
                texts.join("\n")
            }
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(text) => serializer.serialize_str(text),
            Content::Parts(parts) => parts.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;

        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of content parts")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
        }

        deserializer.deserialize_any(ContentVisitor)
    }
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    /// `{"type": "text", "text": ...}`.
    Text {
        /// The text.
        text: String,
        /// Other fields of the part (e.g. Anthropic's `cache_control`).
        extra: Extra,
    },
    /// `{"type": "image_url", "image_url": {"url": ...}}`; the URL may be a `data:` URL.
    ImageUrl {
        /// The image reference.
        image_url: ImageUrl,
        /// Other fields of the part (nanobot keeps a `_meta` with the local path here).
        extra: Extra,
    },
    /// Any other part type (audio, files, provider-specific blocks), kept verbatim.
    Other(Extra),
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text {
            text: text.into(),
            extra: Extra::new(),
        }
    }

    /// An image given by URL (`https://…` or `data:…`).
    pub fn image_url(url: impl Into<String>) -> Self {
        ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: url.into(),
                detail: None,
                extra: Extra::new(),
            },
            extra: Extra::new(),
        }
    }

    /// An inline image: `mime` (e.g. `image/png`) and its bytes already base64-encoded.
    pub fn image_data(mime: &str, base64_data: &str) -> Self {
        Self::image_url(format!("data:{mime};base64,{base64_data}"))
    }

    /// The text of a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentPart::Text { text, .. } => Some(text),
            _ => None,
        }
    }
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentPart::Text { text, extra } => {
                let mut map = serializer.serialize_map(Some(2 + extra.len()))?;
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
                for (key, value) in extra {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            ContentPart::ImageUrl { image_url, extra } => {
                let mut map = serializer.serialize_map(Some(2 + extra.len()))?;
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", image_url)?;
                for (key, value) in extra {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            ContentPart::Other(fields) => fields.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut fields = Extra::deserialize(deserializer)?;
        let kind = fields.get("type").and_then(Value::as_str);
        match kind {
            Some("text") if fields.get("text").is_some_and(Value::is_string) => {
                fields.shift_remove("type");
                let text = match fields.shift_remove("text") {
                    Some(Value::String(text)) => text,
                    _ => return Err(de::Error::custom("text part without text")),
                };
                Ok(ContentPart::Text {
                    text,
                    extra: fields,
                })
            }
            Some("image_url") if fields.get("image_url").is_some_and(Value::is_object) => {
                fields.shift_remove("type");
                let image_url = fields
                    .shift_remove("image_url")
                    .map(serde_json::from_value::<ImageUrl>)
                    .transpose()
                    .map_err(de::Error::custom)?
                    .ok_or_else(|| de::Error::custom("image part without image_url"))?;
                Ok(ContentPart::ImageUrl {
                    image_url,
                    extra: fields,
                })
            }
            _ => Ok(ContentPart::Other(fields)),
        }
    }
}

/// Where an image lives: an `https://` URL or a `data:<mime>;base64,<data>` URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// The URL.
    pub url: String,
    /// OpenAI's resolution hint (`low`, `high`, `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ImageUrl {
    /// For a `data:` URL, its media type and base64 payload.
    pub fn data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (mime, data) = rest.split_once(";base64,")?;
        Some((mime, data))
    }
}

/// One tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id; the tool result answers it by this id.
    pub id: String,
    /// Always `"function"` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
    /// Fields this crate does not model (e.g. Gemini's `extra_content` thought signatures).
    #[serde(flatten)]
    pub extra: Extra,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A call of function `name` with `arguments`, a JSON text.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
                extra: Extra::new(),
            },
            extra: Extra::new(),
        }
    }

    /// A call whose arguments are the JSON value `arguments`.
    pub fn with_json(id: impl Into<String>, name: impl Into<String>, arguments: &Value) -> Self {
        Self::new(id, name, arguments.to_string())
    }

    /// The arguments parsed as JSON. Models do send malformed arguments; callers decide
    /// whether that is an error for the model to see or a failed turn.
    pub fn arguments_json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.function.arguments)
    }
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments as the model wrote them: a JSON text, kept unparsed.
    pub arguments: String,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

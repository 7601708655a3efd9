//! What is sent to a model and what comes back.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{AssistantMessage, Extra, Message, ToolCall};

/// One chat-completion request, in the OpenAI shape. Provider adapters map it to their API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// The model to ask.
    pub model: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Functions the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether and which tool the model must call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The most tokens the answer may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Plain text, any JSON object, or JSON matching a schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Where the system prompt's stable prefix ends (bytes into the first system message),
    /// as the context builder reports it: adapters with explicit prompt caching (Anthropic)
    /// place a cache breakpoint there. Never sent as a field.
    #[serde(skip)]
    pub cache_breakpoint: Option<usize>,
    /// Provider-specific body fields, passed through.
    #[serde(flatten)]
    pub extra: Extra,
}

impl LlmRequest {
    /// A request for `model` with `messages` and nothing else set.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        LlmRequest {
            model: model.into(),
            messages,
            ..LlmRequest::default()
        }
    }

    /// Marks the end of the system prompt's stable prefix (see [`LlmRequest::cache_breakpoint`]).
    pub fn with_cache_breakpoint(mut self, bytes: usize) -> Self {
        self.cache_breakpoint = Some(bytes);
        self
    }

    /// Offers `tools`.
    pub fn with_tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Caps the answer's length.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the sampling temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Asks for a response format.
    pub fn with_response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }
}

/// Sampling controls against a small model's habit of repeating itself (greedy decoding
/// copies an earlier answer into the next one). Sent with chat answers only: summaries and
/// curation copy facts from their input on purpose, and a penalty would bend them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct RepetitionControls {
    /// OpenAI's `frequency_penalty` (-2 to 2): less of a token the more it already occurs.
    pub frequency_penalty: Option<f32>,
    /// OpenAI's `presence_penalty` (-2 to 2): less of any token that already occurs.
    pub presence_penalty: Option<f32>,
    /// llama.cpp's `repeat_last_n`: how many of the latest tokens the penalties look at.
    /// Its default, 64, sees little more than the question, so an earlier answer in the
    /// history is copied freely; 0 turns the penalties off.
    pub repeat_last_n: Option<u32>,
}

impl RepetitionControls {
    /// No control: the server's defaults.
    pub fn none() -> Self {
        RepetitionControls::default()
    }

    /// The same controls with OpenAI's frequency and presence penalties.
    pub fn with_penalties(mut self, frequency: f32, presence: f32) -> Self {
        self.frequency_penalty = Some(frequency);
        self.presence_penalty = Some(presence);
        self
    }

    /// The same controls with the penalties looking at the latest `tokens` (llama.cpp).
    pub fn looking_back(mut self, tokens: u32) -> Self {
        self.repeat_last_n = Some(tokens);
        self
    }

    /// `request` with the controls that are set, as body fields.
    pub fn apply(&self, mut request: LlmRequest) -> LlmRequest {
        let penalties = [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ];
        for (name, value) in penalties {
            if let Some(value) = value {
                // Rounded so 0.3 goes on the wire as 0.3, not as f32's 0.30000001192092896.
                let value = (f64::from(value) * 1_000.0).round() / 1_000.0;
                request.extra.insert(name.to_owned(), Value::from(value));
            }
        }
        if let Some(tokens) = self.repeat_last_n {
            request
                .extra
                .insert("repeat_last_n".to_owned(), Value::from(tokens));
        }
        request
    }
}

/// A function the model may call, described by a JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Always `"function"` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function.
    pub function: FunctionDefinition,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl ToolDefinition {
    /// A function tool with a name, a description and a JSON schema for its parameters.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolDefinition {
            kind: function_kind(),
            function: FunctionDefinition {
                name: name.into(),
                description: Some(description.into()),
                parameters,
                strict: None,
                extra: Extra::new(),
            },
            extra: Extra::new(),
        }
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.function.name
    }
}

/// The function part of a tool definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON schema of its arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// OpenAI's strict schema adherence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Extra,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must not call tools (tools may still be offered, which keeps a provider's
    /// prompt cache warm).
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this function.
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolChoice::Auto => serializer.serialize_str("auto"),
            ToolChoice::None => serializer.serialize_str("none"),
            ToolChoice::Required => serializer.serialize_str("required"),
            ToolChoice::Function(name) => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "function")?;
                map.serialize_entry("function", &serde_json::json!({ "name": name }))?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match &value {
            Value::String(s) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(de::Error::custom(format!(
                    "unknown tool_choice `{other}`, expected auto, none, required or a function"
                ))),
            },
            Value::Object(map) => map
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(|name| ToolChoice::Function(name.to_owned()))
                .ok_or_else(|| de::Error::custom("tool_choice object without function.name")),
            _ => Err(de::Error::custom(
                "tool_choice must be a string or an object",
            )),
        }
    }
}

/// The format the answer must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON that matches a schema.
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchemaFormat,
    },
}

/// A named JSON schema for [`ResponseFormat::JsonSchema`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name.
    pub name: String,
    /// The schema.
    pub schema: Value,
    /// Whether the provider must follow it exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// One answer of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmResponse {
    /// The assistant message: text, reasoning, tool calls.
    pub message: AssistantMessage,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// Token usage, when the provider reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The model that answered, when the provider says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl LlmResponse {
    /// A complete text answer (finish reason `stop`, no usage).
    pub fn text(text: impl Into<String>) -> Self {
        LlmResponse {
            message: AssistantMessage::text(text),
            finish_reason: FinishReason::Stop,
            usage: None,
            model: None,
        }
    }

    /// An answer that calls tools (finish reason `tool_calls`).
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        LlmResponse {
            message: AssistantMessage {
                tool_calls: Some(calls),
                ..AssistantMessage::default()
            },
            finish_reason: FinishReason::ToolCalls,
            usage: None,
            model: None,
        }
    }

    /// Sets the usage.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the finish reason.
    pub fn with_finish_reason(mut self, reason: FinishReason) -> Self {
        self.finish_reason = reason;
        self
    }

    /// The answer's text; empty when there is none.
    pub fn text_content(&self) -> String {
        self.message.text_content()
    }

    /// The tool calls, empty when there are none.
    pub fn tool_calls_made(&self) -> &[ToolCall] {
        self.message.tool_calls()
    }

    /// Whether the answer was cut by the output-token limit.
    pub fn is_truncated(&self) -> bool {
        self.finish_reason == FinishReason::Length
    }
}

/// Why a model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// The output-token limit was reached; the answer is cut.
    Length,
    /// The model called tools.
    ToolCalls,
    /// A provider filter removed content.
    ContentFilter,
    /// Any other reason, as the provider named it.
    Other(String),
}

impl FinishReason {
    /// The OpenAI wire name.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

impl From<&str> for FinishReason {
    fn from(reason: &str) -> Self {
        match reason {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "tool_calls" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let reason = String::deserialize(deserializer)?;
        Ok(FinishReason::from(reason.as_str()))
    }
}

/// Tokens a call used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt, cached ones included.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Usage with prompt and completion counts and no caching.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            ..Usage::default()
        }
    }

    /// Prompt plus completion tokens.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

//! The chat-completions wire format: the body we send, the answer we read, and the
//! streamed pieces assembled into the same answer.

use nanobot_llm_port::{
    AssistantMessage, Content, FinishReason, LlmError, LlmRequest, LlmResponse, ToolCall, Usage,
};
use serde_json::{Map, Value, json};

/// The request body: the request as OpenAI spells it, plus the stream switches.
pub(crate) fn body(request: &LlmRequest, stream: bool) -> Result<Vec<u8>, LlmError> {
    let mut value = serde_json::to_value(request)
        .map_err(|e| LlmError::permanent(format!("the request cannot be encoded: {e}")))?;
    if let Value::Object(map) = &mut value
        && stream
    {
        map.insert("stream".into(), Value::Bool(true));
        map.insert("stream_options".into(), json!({"include_usage": true}));
    }
    serde_json::to_vec(&value)
        .map_err(|e| LlmError::permanent(format!("the request cannot be encoded: {e}")))
}

fn invalid(what: impl std::fmt::Display) -> LlmError {
    LlmError::invalid_response(what.to_string())
}

/// Usage, with cached prompt tokens where the provider reports them.
fn usage(value: &Value) -> Option<Usage> {
    let obj = value.as_object()?;
    let number = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let mut usage = Usage::new(
        number(obj.get("prompt_tokens")),
        number(obj.get("completion_tokens")),
    );
    usage.cached_tokens = number(
        value
            .pointer("/prompt_tokens_details/cached_tokens")
            .or_else(|| obj.get("prompt_cache_hit_tokens")),
    );
    Some(usage)
}

fn tool_call(value: &Value) -> Result<ToolCall, LlmError> {
    let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
    let name = value
        .pointer("/function/name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("a tool call has no function name"))?;
    let arguments = match value.pointer("/function/arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "{}".to_owned(),
        Some(other) => other.to_string(),
    };
    Ok(ToolCall::new(id, name, arguments))
}

fn text_of(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

fn reasoning(message: &Map<String, Value>) -> Option<String> {
    message
        .get("reasoning_content")
        .or_else(|| message.get("reasoning"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}

/// A whole (non-streamed) answer.
pub(crate) fn parse_response(body: &[u8]) -> Result<LlmResponse, LlmError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "the answer is not JSON ({e}): {}",
            nanobot_llm_http::excerpt(body, 200)
        ))
    })?;
    let choice = value
        .pointer("/choices/0")
        .ok_or_else(|| invalid("the answer has no choices"))?;
    let message = choice
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("the answer's choice has no message"))?;
    let calls = match message.get("tool_calls") {
        Some(Value::Array(calls)) if !calls.is_empty() => {
            Some(calls.iter().map(tool_call).collect::<Result<Vec<_>, _>>()?)
        }
        _ => None,
    };
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(FinishReason::from)
        .unwrap_or(if calls.is_some() {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        });
    Ok(LlmResponse {
        message: AssistantMessage {
            content: text_of(message.get("content")).map(Content::Text),
            reasoning_content: reasoning(message),
            tool_calls: calls,
            ..AssistantMessage::default()
        },
        finish_reason: finish,
        usage: value.get("usage").and_then(usage),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Streamed chunks assembled into one answer.
#[derive(Debug, Default)]
pub(crate) struct StreamAssembler {
    text: String,
    saw_text: bool,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    model: Option<String>,
    done: bool,
}

impl StreamAssembler {
    /// Takes one event's data; `Ok(true)` at the stream's end (`[DONE]`).
    pub(crate) fn push(
        &mut self,
        data: &str,
        sink: Option<&nanobot_llm_port::TextSink>,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let value: Value = serde_json::from_str(data).map_err(|e| {
            invalid(format!(
                "a streamed piece is not JSON ({e}): {}",
                nanobot_llm_http::excerpt(data.as_bytes(), 200)
            ))
        })?;
        if value.get("error").is_some() {
            let message = nanobot_llm_http::provider_message(data.as_bytes());
            return Err(if nanobot_llm_http::is_context_overflow(&message) {
                LlmError::ContextLengthExceeded { message }
            } else {
                LlmError::transient(format!("the stream reported an error: {message}"))
            });
        }
        if let Some(model) = value.get("model").and_then(Value::as_str) {
            self.model.get_or_insert_with(|| model.to_owned());
        }
        if let Some(u) = value.get("usage").filter(|u| !u.is_null()) {
            self.usage = usage(u);
        }
        let Some(choice) = value.pointer("/choices/0") else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta").and_then(Value::as_object) {
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                self.text.push_str(text);
                self.saw_text = true;
                if let (Some(sink), false) = (sink, text.is_empty()) {
                    sink(text);
                }
            }
            if let Some(r) = delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str)
            {
                self.reasoning.push_str(r);
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                for call in calls {
                    self.push_call(call)?;
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(FinishReason::from(reason));
        }
        Ok(false)
    }

    /// A streamed piece of a tool call, added to the call at its index.
    fn push_call(&mut self, call: &Value) -> Result<(), LlmError> {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(self.calls.len().saturating_sub(1) as u64) as usize;
        if index > 1024 {
            return Err(invalid("a streamed tool call index is out of range"));
        }
        while self.calls.len() <= index {
            self.calls.push(PartialCall::default());
        }
        let slot = &mut self.calls[index];
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            slot.id = id.to_owned();
        }
        if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
            slot.name.push_str(name);
        }
        if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
            slot.arguments.push_str(args);
        }
        Ok(())
    }

    /// The assembled answer; a stream that ended before its finish is cut.
    pub(crate) fn finish(self) -> Result<LlmResponse, LlmError> {
        let Some(finish) = self.finish else {
            return Err(invalid(if self.done {
                "the stream ended without a finish reason"
            } else {
                "the stream was cut off before the answer finished"
            }));
        };
        let calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .map(|c| {
                let arguments = if c.arguments.is_empty() {
                    "{}".into()
                } else {
                    c.arguments
                };
                ToolCall::new(c.id, c.name, arguments)
            })
            .collect();
        Ok(LlmResponse {
            message: AssistantMessage {
                content: self.saw_text.then(|| Content::Text(self.text)),
                reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
                tool_calls: (!calls.is_empty()).then_some(calls),
                ..AssistantMessage::default()
            },
            finish_reason: finish,
            usage: self.usage,
            model: self.model,
        })
    }
}

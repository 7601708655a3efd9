//! Our OpenAI-shaped messages to and from the Messages API.

use nanobot_llm_port::{
    AssistantMessage, Content, ContentPart, FinishReason, LlmError, LlmRequest, LlmResponse,
    Message, ResponseFormat, ToolCall, ToolChoice, Usage,
};
use serde_json::{Map, Value, json};

fn invalid(what: impl std::fmt::Display) -> LlmError {
    LlmError::invalid_response(what.to_string())
}

fn cache_control() -> Value {
    json!({"type": "ephemeral"})
}

/// The request body.
pub(crate) fn body(
    request: &LlmRequest,
    default_max_tokens: u32,
    cache: bool,
    stream: bool,
) -> Result<Vec<u8>, LlmError> {
    let (system, turns) = conversation(request, cache);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(default_max_tokens)),
    );
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert(
        "messages".into(),
        Value::Array(
            turns
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        ),
    );
    let structured = structured_tool(request);
    if let Some(tools) = tool_list(request, structured.as_ref(), cache) {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some((name, _)) = &structured {
        // The Messages API has no response format: a forced tool whose input is the answer.
        body.insert("tool_choice".into(), json!({"type": "tool", "name": name}));
    } else if let Some(choice) = &request.tool_choice {
        body.insert(
            "tool_choice".into(),
            match choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Function(name) => json!({"type": "tool", "name": name}),
            },
        );
    }
    if let Some(t) = request.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    for (k, v) in &request.extra {
        body.entry(k.clone()).or_insert_with(|| v.clone());
    }
    serde_json::to_vec(&Value::Object(body))
        .map_err(|e| LlmError::permanent(format!("the request cannot be encoded: {e}")))
}

/// The system blocks and the turns of a request (cache marks on the stable prefix, the
/// conversation so far and the system prompt, as configured).
fn conversation(request: &LlmRequest, cache: bool) -> (Vec<Value>, Vec<(String, Vec<Value>)>) {
    let mut system: Vec<Value> = Vec::new();
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    let mut first_system = true;
    for message in &request.messages {
        match message {
            Message::System(m) => {
                let text = m.content.joined_text();
                if text.is_empty() {
                    continue;
                }
                match (first_system, request.cache_breakpoint) {
                    (true, Some(at))
                        if cache && at > 0 && at < text.len() && text.is_char_boundary(at) =>
                    {
                        system.push(json!({"type": "text", "text": &text[..at], "cache_control": cache_control()}));
                        system.push(json!({"type": "text", "text": &text[at..]}));
                    }
                    _ => system.push(json!({"type": "text", "text": text})),
                }
                first_system = false;
            }
            Message::User(m) => push(&mut turns, "user", user_blocks(&m.content)),
            Message::Assistant(m) => push(&mut turns, "assistant", assistant_blocks(m)),
            Message::Tool(m) => {
                let text = m.content.joined_text();
                let text = if text.is_empty() {
                    "(no output)".to_owned()
                } else {
                    text
                };
                push(
                    &mut turns,
                    "user",
                    vec![
                        json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": text}),
                    ],
                );
            }
        }
    }
    // An empty turn is refused by the API.
    for (_, blocks) in &mut turns {
        if blocks.is_empty() {
            blocks.push(json!({"type": "text", "text": "(empty)"}));
        }
    }
    // The conversation so far is a cacheable prefix too: mark the second-to-last turn.
    if cache && turns.len() >= 3 {
        let at = turns.len() - 2;
        if let Some(Value::Object(last)) = turns[at].1.last_mut() {
            last.insert("cache_control".into(), cache_control());
        }
    }
    if cache
        && request.cache_breakpoint.is_none()
        && let Some(Value::Object(last)) = system.last_mut()
    {
        last.insert("cache_control".into(), cache_control());
    }
    (system, turns)
}

/// An assistant message as blocks: its text, then its tool calls.
fn assistant_blocks(m: &nanobot_llm_port::AssistantMessage) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(content) = &m.content {
        let text = content.joined_text();
        if !text.is_empty() {
            blocks.push(json!({"type": "text", "text": text}));
        }
    }
    for call in m.tool_calls() {
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(other) => json!({"value": other}),
            Err(_) => json!({"raw_arguments": call.function.arguments}),
        };
        blocks.push(
            json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}),
        );
    }
    blocks
}

/// The request's tools and the structured-answer tool, the last one marked for the cache;
/// `None` when there are none.
fn tool_list(
    request: &LlmRequest,
    structured: Option<&(String, Value)>,
    cache: bool,
) -> Option<Vec<Value>> {
    if request.tools.is_empty() && structured.is_none() {
        return None;
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            let mut tool = json!({"name": t.function.name, "input_schema": t.function.parameters});
            if let Some(description) = &t.function.description {
                tool["description"] = json!(description);
            }
            tool
        })
        .collect();
    if let Some((name, schema)) = structured {
        tools.push(json!({
            "name": name,
            "description": "Give your whole answer through this tool, as its input.",
            "input_schema": schema,
        }));
    }
    if cache && let Some(Value::Object(last)) = tools.last_mut() {
        last.insert("cache_control".into(), cache_control());
    }
    Some(tools)
}

/// Appends blocks as a turn of `role`, merged into the previous turn of the same role (the
/// API wants user and assistant to alternate; tool results are user turns).
fn push(turns: &mut Vec<(String, Vec<Value>)>, role: &str, blocks: Vec<Value>) {
    match turns.last_mut() {
        Some((last, existing)) if last == role => existing.extend(blocks),
        _ => turns.push((role.to_owned(), blocks)),
    }
}

fn user_blocks(content: &Content) -> Vec<Value> {
    match content {
        Content::Text(text) if text.is_empty() => Vec::new(),
        Content::Text(text) => vec![json!({"type": "text", "text": text})],
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text { text, .. } if !text.is_empty() => Some(json!({"type": "text", "text": text})),
                ContentPart::Text { .. } => None,
                ContentPart::ImageUrl { image_url, .. } => Some(match image_url.data() {
                    Some((media_type, data)) => json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
                    None => json!({"type": "image", "source": {"type": "url", "url": image_url.url}}),
                }),
                ContentPart::Other(extra) => Some(Value::Object(extra.clone())),
            })
            .collect(),
    }
}

fn usage(value: &Value) -> Usage {
    let n = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (read, write) = (
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    );
    let mut usage = Usage::new(n("input_tokens") + read + write, n("output_tokens"));
    usage.cached_tokens = read;
    usage.cache_write_tokens = write;
    usage
}

fn finish_reason(stop: Option<&str>) -> FinishReason {
    match stop {
        Some("end_turn") | Some("stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// The forced tool that carries a structured answer: its name and input schema, when the
/// request asks for JSON (a schema, or any object).
pub(crate) fn structured_tool(request: &LlmRequest) -> Option<(String, Value)> {
    match &request.response_format {
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            // Tool names are `[a-zA-Z0-9_-]{1,64}`; a schema's name may be anything.
            let mut name: String = json_schema
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(64)
                .collect();
            if name.is_empty() {
                name = "answer".into();
            }
            Some((name, json_schema.schema.clone()))
        }
        Some(ResponseFormat::JsonObject) => Some(("answer".into(), json!({"type": "object"}))),
        _ => None,
    }
}

/// A structured answer as the caller asked for it: the forced tool's input as the message
/// text (JSON), no tool call, and the model's stop read as a normal end. Any other answer
/// (the model wrote text instead) is left as it came, for the caller to judge.
pub(crate) fn into_structured(mut response: LlmResponse, tool: &str) -> LlmResponse {
    let calls = response.message.tool_calls.take().unwrap_or_default();
    let (ours, others): (Vec<ToolCall>, Vec<ToolCall>) =
        calls.into_iter().partition(|c| c.function.name == tool);
    if let Some(call) = ours.into_iter().next() {
        response.message.content = Some(Content::Text(call.function.arguments));
        if response.finish_reason == FinishReason::ToolCalls {
            response.finish_reason = FinishReason::Stop;
        }
    }
    response.message.tool_calls = (!others.is_empty()).then_some(others);
    response
}

/// A whole answer.
pub(crate) fn parse_response(body: &[u8]) -> Result<LlmResponse, LlmError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "the answer is not JSON ({e}): {}",
            nanobot_llm_http::excerpt(body, 200)
        ))
    })?;
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the answer has no content blocks"))?;
    let mut answer = Assembly::default();
    for block in blocks {
        answer.block(block)?;
        if let Some(Value::Object(input)) = block.get("input")
            && let Some(call) = answer.calls.last_mut()
        {
            call.2 = Value::Object(input.clone()).to_string();
        }
    }
    answer.stop = value
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    answer.usage = value.get("usage").map(usage);
    answer.model = value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    answer.stopped = true;
    answer.finish()
}

/// Content blocks assembled, whole or streamed.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    text: String,
    saw_text: bool,
    thinking: String,
    /// (id, name, arguments JSON text), by block.
    calls: Vec<(String, String, String)>,
    /// Which call a block index belongs to.
    call_of_block: Vec<(u64, usize)>,
    stop: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    stopped: bool,
}

impl Assembly {
    fn block(&mut self, block: &Value) -> Result<(), LlmError> {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                self.text
                    .push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
                self.saw_text = true;
            }
            Some("thinking") => self
                .thinking
                .push_str(block.get("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("a tool_use block has no name"))?;
                self.calls
                    .push((id.to_owned(), name.to_owned(), String::new()));
            }
            _ => {}
        }
        Ok(())
    }

    /// One streamed event.
    pub(crate) fn event(
        &mut self,
        name: Option<&str>,
        data: &str,
        sink: Option<&nanobot_llm_port::TextSink>,
    ) -> Result<bool, LlmError> {
        let value: Value = serde_json::from_str(data).map_err(|e| {
            invalid(format!(
                "a streamed event is not JSON ({e}): {}",
                nanobot_llm_http::excerpt(data.as_bytes(), 200)
            ))
        })?;
        let kind = name
            .or_else(|| value.get("type").and_then(Value::as_str))
            .unwrap_or("");
        match kind {
            "message_start" => {
                let message = value.get("message").cloned().unwrap_or_default();
                self.model = message
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.usage = message.get("usage").map(usage);
            }
            "content_block_start" => {
                let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = value.get("content_block").cloned().unwrap_or_default();
                let calls_before = self.calls.len();
                self.block(&block)?;
                if self.calls.len() > calls_before {
                    self.call_of_block.push((index, self.calls.len() - 1));
                }
            }
            "content_block_delta" => self.block_delta(&value, sink)?,
            "message_delta" => {
                if let Some(stop) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop.to_owned());
                }
                if let Some(out) = value
                    .pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                {
                    self.usage
                        .get_or_insert_with(|| Usage::new(0, 0))
                        .completion_tokens = out;
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => return Err(stream_error(&value, data)),
            _ => {}
        }
        Ok(false)
    }

    /// A piece of a content block: text (sent on to `sink`), thinking, or a tool call's
    /// input.
    fn block_delta(
        &mut self,
        value: &Value,
        sink: Option<&nanobot_llm_port::TextSink>,
    ) -> Result<(), LlmError> {
        let index = value.get("index").and_then(Value::as_u64).unwrap_or(0);
        let delta = value.get("delta").cloned().unwrap_or_default();
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                self.text.push_str(text);
                self.saw_text = true;
                if let (Some(sink), false) = (sink, text.is_empty()) {
                    sink(text);
                }
            }
            Some("thinking_delta") => self
                .thinking
                .push_str(delta.get("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("input_json_delta") => {
                let call = self
                    .call_of_block
                    .iter()
                    .find(|(b, _)| *b == index)
                    .map(|(_, c)| *c)
                    .ok_or_else(|| {
                        invalid("tool input arrived for a block that is not a tool call")
                    })?;
                self.calls[call].2.push_str(
                    delta
                        .get("partial_json")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// The assembled answer; a stream without `message_stop` was cut.
    pub(crate) fn finish(self) -> Result<LlmResponse, LlmError> {
        if !self.stopped {
            return Err(invalid("the stream was cut off before the answer finished"));
        }
        let calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|(id, name, args)| {
                let arguments = if args.trim().is_empty() {
                    "{}".into()
                } else {
                    args
                };
                ToolCall::new(id, name, arguments)
            })
            .collect();
        Ok(LlmResponse {
            message: AssistantMessage {
                content: self.saw_text.then(|| Content::Text(self.text)),
                reasoning_content: (!self.thinking.is_empty()).then_some(self.thinking),
                tool_calls: (!calls.is_empty()).then_some(calls),
                ..AssistantMessage::default()
            },
            finish_reason: finish_reason(self.stop.as_deref()),
            usage: self.usage,
            model: self.model,
        })
    }
}

/// The error a stream reported, by its type.
fn stream_error(value: &Value, data: &str) -> LlmError {
    let message = nanobot_llm_http::provider_message(data.as_bytes());
    let kind = value
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    match kind {
        "overloaded_error" | "api_error" => LlmError::transient(format!("anthropic: {message}")),
        "rate_limit_error" => LlmError::RateLimited {
            retry_after: None,
            message: format!("anthropic: {message}"),
        },
        _ if nanobot_llm_http::is_context_overflow(&message) => {
            LlmError::ContextLengthExceeded { message }
        }
        _ => LlmError::Permanent {
            status: None,
            message: format!("anthropic: {message}"),
        },
    }
}

//! `POST /v1/chat/completions`: one turn of the library agent, answered whole or streamed
//! as server-sent events in OpenAI's chunk format.
//!
//! With a session the server owns the history: only the last user message is taken, and
//! the turn runs in the caller's own scope (`api:<user>` of the key's tenant), stored as
//! `api:<session>`. Without one the request is stateless: nothing is read or stored, and
//! the earlier user and assistant messages of the request are the history. A client's
//! `system` (or `developer`) messages are its instructions for this turn: in the system
//! prompt right after the stable prefix, never stored. With a session, `Idempotency-Key`
//! makes a retry return the stored answer without calling the model (across instances:
//! the record is in the session, checked under its turn lock).
//! The turn runs in a task of its own, so a client that goes away does not cancel it: it
//! finishes and is stored.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use nanobot_llm_port::{Message, TextSink};
use nanobot_turn::{IdempotencyKey, TurnOptions, TurnReport};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::Server;
use crate::error::ServeError;
use crate::identity::{checked_id, session_key};

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: Option<String>,
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    user: Option<String>,
    session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

/// What the turn's task sends to the request.
enum Piece {
    /// Answer text as it arrives.
    Text(String),
    /// The turn ended.
    Done(Result<TurnReport, ServeError>),
}

pub(crate) async fn completions(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match run(server, headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn run(server: Arc<Server>, headers: HeaderMap, body: Bytes) -> Result<Response, ServeError> {
    let caller = server.caller(&headers)?;
    let request = read_request(&server, &body)?;
    let text = last_user_text(&request.messages)?;
    let instructions = instructions(&request.messages);
    let user = caller.user(&headers, request.user.as_deref())?;
    let session = caller.session(&headers, request.session_id.as_deref())?;
    let options = turn_options(&server, &headers, instructions.as_deref(), &text)?;
    // A stateless request brings its own history; with a session the server's is used.
    let history = match &session {
        Some(_) => Vec::new(),
        None => earlier_messages(&request.messages)?,
    };
    tracing::info!(
        key = %caller.key,
        user = %crate::log_id(&user),
        session = %session.as_deref().map_or_else(|| "-".to_owned(), crate::log_id),
        stream = request.stream,
        "chat completion"
    );
    let permit = server.turns.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!(nanobot_session_store::BUSY, "reason" => "turns").increment(1);
        ServeError::TooManyTurns
    })?;

    let (sender, receiver) = mpsc::unbounded_channel();
    let text_sender = sender.clone();
    let sink: TextSink = Arc::new(move |delta: &str| {
        if !delta.is_empty() {
            let _ = text_sender.send(Piece::Text(delta.to_owned()));
        }
    });
    let agent = server.agent.clone();
    match &session {
        Some(id) => {
            let scope = caller.scope(&user)?;
            let key = session_key(id)?;
            let memory = agent
                .memory(&scope)
                .await
                .map_err(|e| ServeError::from_turn(&e))?;
            tokio::spawn(async move {
                let outcome = agent.turn_with(&memory, &key, &text, &options, &sink).await;
                drop(permit);
                let _ = sender.send(Piece::Done(outcome.map_err(|e| ServeError::from_turn(&e))));
            });
        }
        None => {
            let key = session_key("stateless")?;
            tokio::spawn(async move {
                let outcome = agent
                    .turn_without_memory_with(&key, &history, &text, &options, &sink)
                    .await;
                drop(permit);
                let _ = sender.send(Piece::Done(outcome.map_err(|e| ServeError::from_turn(&e))));
            });
        }
    }
    let reply = Reply {
        id: completion_id(),
        created: now_seconds(),
        model: server.settings.model_name.clone(),
        include_usage: request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
    };
    let mut response = if request.stream {
        streamed(&server, reply, receiver)
    } else {
        whole(&server, reply, receiver, session.as_deref()).await?
    };
    if let Some(id) = &session {
        name_session(&mut response, id);
    }
    Ok(response)
}

/// Tells the client which session the answer went into, and that the server keeps its
/// history.
fn name_session(response: &mut Response, id: &str) {
    if let Ok(value) = HeaderValue::from_str(id) {
        let headers = response.headers_mut();
        headers.insert("x-session-id", value);
        headers.insert("x-nanobot-history", HeaderValue::from_static("server"));
    }
}

/// The request in the body, for this server's model.
fn read_request(server: &Server, body: &[u8]) -> Result<ChatRequest, ServeError> {
    let request: ChatRequest = serde_json::from_slice(body).map_err(|e| {
        ServeError::bad_request(
            "messages",
            format!("the body is not a chat completion request: {e}"),
        )
    })?;
    if let Some(model) = &request.model
        && *model != server.settings.model_name
    {
        return Err(ServeError::ModelNotFound(model.clone()));
    }
    Ok(request)
}

/// The turn's options: the client's instructions, and its idempotency key with the
/// request's fingerprint.
fn turn_options(
    server: &Server,
    headers: &HeaderMap,
    instructions: Option<&str>,
    text: &str,
) -> Result<TurnOptions, ServeError> {
    let mut options = TurnOptions::default();
    if let Some(instructions) = instructions {
        options = options.with_instructions(instructions.to_owned());
    }
    if let Some(value) = headers.get("idempotency-key") {
        let key = value.to_str().map_err(|_| {
            ServeError::bad_request("Idempotency-Key", "the Idempotency-Key is not text")
        })?;
        let key = checked_id("Idempotency-Key", key)?;
        let fingerprint = fingerprint(&server.settings.model_name, instructions, text);
        options = options.with_idempotency(IdempotencyKey { key, fingerprint });
    }
    Ok(options)
}

/// The text of the last message, which must be the user's.
fn last_user_text(messages: &[WireMessage]) -> Result<String, ServeError> {
    let last = messages
        .last()
        .ok_or_else(|| ServeError::bad_request("messages", "`messages` is empty"))?;
    if last.role != "user" {
        return Err(ServeError::bad_request(
            "messages",
            format!(
                "the last message must be the user's, not the {}'s",
                last.role
            ),
        ));
    }
    let text = content_text(&last.content);
    if text.trim().is_empty() {
        return Err(ServeError::bad_request(
            "messages",
            "the user's message has no text",
        ));
    }
    Ok(text)
}

/// The text of a message's content: a string, or the text parts of an array (other parts,
/// such as images, are not read).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn is_instruction(role: &str) -> bool {
    matches!(role, "system" | "developer")
}

/// The client's instructions: its `system` and `developer` messages, in order.
fn instructions(messages: &[WireMessage]) -> Option<String> {
    let texts: Vec<String> = messages
        .iter()
        .filter(|m| is_instruction(&m.role))
        .map(|m| content_text(&m.content))
        .filter(|t| !t.trim().is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// A stateless request's conversation before its last message: user and assistant text.
fn earlier_messages(messages: &[WireMessage]) -> Result<Vec<Message>, ServeError> {
    let earlier = &messages[..messages.len().saturating_sub(1)];
    let mut history = Vec::with_capacity(earlier.len());
    for (i, message) in earlier.iter().enumerate() {
        let text = content_text(&message.content);
        match message.role.as_str() {
            role if is_instruction(role) => {}
            "user" => history.push(Message::user(text)),
            "assistant" => history.push(Message::assistant(text)),
            other => {
                return Err(ServeError::bad_request(
                    &format!("messages[{i}].role"),
                    format!(
                        "a {other:?} message cannot be replayed: a request without a session carries system, user and assistant messages; send a session id to let the server keep the history"
                    ),
                ));
            }
        }
    }
    Ok(history)
}

/// What identifies a request for its idempotency key: the model, the instructions and
/// the user's text (with a session, the server holds the rest).
fn fingerprint(model: &str, instructions: Option<&str>, text: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [model, instructions.unwrap_or(""), text] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What every chunk or answer of one completion repeats.
struct Reply {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
}

impl Reply {
    fn usage(&self, server: &Server, report: &TurnReport) -> Value {
        let (prompt, completion) = match &report.usage {
            Some(usage) => (usage.prompt_tokens, usage.completion_tokens),
            None => (
                report.prompt_tokens as u64,
                server.agent.counter().count(&report.answer) as u64,
            ),
        };
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }
}

/// Waits for the whole answer (504 past the request timeout; the turn goes on).
async fn whole(
    server: &Server,
    reply: Reply,
    mut receiver: mpsc::UnboundedReceiver<Piece>,
    session: Option<&str>,
) -> Result<Response, ServeError> {
    let finished = tokio::time::timeout(server.settings.request_timeout, async {
        while let Some(piece) = receiver.recv().await {
            if let Piece::Done(outcome) = piece {
                return outcome;
            }
        }
        Err(ServeError::Internal(
            "the turn ended without an answer".into(),
        ))
    })
    .await
    .map_err(|_| ServeError::Timeout {
        session: session.map(str::to_owned),
    })?;
    let report = finished?;
    let replayed = report.replayed;
    let mut response = axum::Json(json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": report.answer},
            "finish_reason": "stop",
        }],
        "usage": reply.usage(server, &report),
    }))
    .into_response();
    if replayed {
        // The stored answer of an earlier request with this Idempotency-Key.
        response
            .headers_mut()
            .insert("x-nanobot-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Where a streamed answer is.
enum StreamState {
    /// The role delta is next.
    Start,
    /// Content deltas until the turn ends.
    Answering,
    /// Nothing more.
    Ended,
}

/// The answer as server-sent events: the role delta, content deltas, a last chunk with
/// `finish_reason`, the usage chunk when asked, `[DONE]`. A failure after the stream began
/// is one `error` event and no `[DONE]`, so no client takes it for a finished answer.
fn streamed(
    server: &Arc<Server>,
    reply: Reply,
    receiver: mpsc::UnboundedReceiver<Piece>,
) -> Response {
    let interval = server.settings.keep_alive;
    let server = server.clone();
    let events = stream::unfold(
        (StreamState::Start, receiver, reply, server),
        |(state, mut receiver, reply, server)| async move {
            match state {
                StreamState::Ended => None,
                StreamState::Start => {
                    let first = reply.chunk(json!({"role": "assistant", "content": ""}), None);
                    Some((
                        vec![data(&first)],
                        (StreamState::Answering, receiver, reply, server),
                    ))
                }
                StreamState::Answering => match receiver.recv().await {
                    Some(Piece::Text(delta)) => {
                        let chunk = reply.chunk(json!({"content": delta}), None);
                        Some((
                            vec![data(&chunk)],
                            (StreamState::Answering, receiver, reply, server),
                        ))
                    }
                    Some(Piece::Done(Ok(report))) => {
                        let mut events = vec![data(&reply.chunk(json!({}), Some("stop")))];
                        if reply.include_usage {
                            events.push(data(&json!({
                                "id": reply.id,
                                "object": "chat.completion.chunk",
                                "created": reply.created,
                                "model": reply.model,
                                "choices": [],
                                "usage": reply.usage(&server, &report),
                            })));
                        }
                        events.push(Event::default().data("[DONE]"));
                        Some((events, (StreamState::Ended, receiver, reply, server)))
                    }
                    Some(Piece::Done(Err(error))) => Some((
                        vec![data(&error.body())],
                        (StreamState::Ended, receiver, reply, server),
                    )),
                    None => Some((
                        vec![data(
                            &ServeError::Internal("the turn ended without an answer".into()).body(),
                        )],
                        (StreamState::Ended, receiver, reply, server),
                    )),
                },
            }
        },
    );
    let flat = futures_util::StreamExt::flat_map(events, |batch| {
        stream::iter(batch.into_iter().map(Ok::<Event, Infallible>))
    });
    sse(flat, KeepAlive::new().interval(interval))
}

fn sse<S>(events: S, keep_alive: KeepAlive) -> Response
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(events).keep_alive(keep_alive).into_response()
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

static COMPLETIONS: AtomicU64 = AtomicU64::new(0);

/// An id for a request that brought none.
pub(crate) fn new_request_id() -> String {
    let n = COMPLETIONS.fetch_add(1, Ordering::Relaxed);
    format!("req-{:x}{n:x}", now_nanos())
}

fn completion_id() -> String {
    let n = COMPLETIONS.fetch_add(1, Ordering::Relaxed);
    format!("chatcmpl-{:x}{n:x}", now_nanos())
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

//! The one error type of the server, answered in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`).

use std::fmt;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nanobot_turn::TurnError;
use serde_json::json;

/// Why a request was refused or failed: each variant is an answer a client can act on.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// No valid API key (401).
    Unauthorized,
    /// The request may not be made from where it comes (403): a browser origin not allowed.
    Forbidden(String),
    /// The request is malformed or names something invalid (400).
    BadRequest {
        /// The field at fault.
        param: String,
        /// What is wrong with it.
        message: String,
    },
    /// The model asked for is not served (404).
    ModelNotFound(String),
    /// The session (or other thing) named does not exist (404).
    NotFound(String),
    /// Another turn of the session is running and did not finish within the wait (409).
    SessionBusy,
    /// The `Idempotency-Key` was used before in this session with another request (409).
    IdempotencyKeyReused,
    /// Too many turns at once (429).
    TooManyTurns,
    /// The turn did not finish within the request timeout; it goes on and is stored (504).
    Timeout {
        /// The session it will be stored in.
        session: Option<String>,
    },
    /// The model failed (502, or 503 when trying again can help).
    Upstream {
        /// What the model's client said.
        message: String,
        /// Whether trying again can help.
        retryable: bool,
    },
    /// Storage or anything else on our side failed (500).
    Internal(String),
}

impl ServeError {
    /// A 400 naming `param`.
    pub fn bad_request(param: &str, message: impl Into<String>) -> ServeError {
        ServeError::BadRequest {
            param: param.to_owned(),
            message: message.into(),
        }
    }

    /// The answer for a failed turn.
    pub fn from_turn(error: &TurnError) -> ServeError {
        if is_busy(error) {
            return ServeError::SessionBusy;
        }
        match root(error) {
            TurnError::IdempotencyKeyReused { .. } => ServeError::IdempotencyKeyReused,
            TurnError::Llm(llm) => ServeError::Upstream {
                message: llm.to_string(),
                retryable: llm.is_retryable(),
            },
            other => ServeError::Internal(other.to_string()),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ServeError::Unauthorized => StatusCode::UNAUTHORIZED,
            ServeError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServeError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ServeError::ModelNotFound(_) | ServeError::NotFound(_) => StatusCode::NOT_FOUND,
            ServeError::SessionBusy | ServeError::IdempotencyKeyReused => StatusCode::CONFLICT,
            ServeError::TooManyTurns => StatusCode::TOO_MANY_REQUESTS,
            ServeError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ServeError::Upstream {
                retryable: true, ..
            } => StatusCode::SERVICE_UNAVAILABLE,
            ServeError::Upstream { .. } => StatusCode::BAD_GATEWAY,
            ServeError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `error` object.
    pub fn body(&self) -> serde_json::Value {
        let (kind, code, param) = match self {
            ServeError::Unauthorized => ("invalid_request_error", "invalid_api_key", None),
            ServeError::Forbidden(_) => ("permission_error", "origin_not_allowed", None),
            ServeError::BadRequest { param, .. } => (
                "invalid_request_error",
                "invalid_value",
                Some(param.as_str()),
            ),
            ServeError::ModelNotFound(_) => {
                ("invalid_request_error", "model_not_found", Some("model"))
            }
            ServeError::NotFound(_) => ("invalid_request_error", "not_found", None),
            ServeError::SessionBusy => ("conflict_error", "session_busy", None),
            ServeError::IdempotencyKeyReused => (
                "conflict_error",
                "idempotency_key_reused",
                Some("Idempotency-Key"),
            ),
            ServeError::TooManyTurns => ("rate_limit_error", "too_many_turns", None),
            ServeError::Timeout { .. } => ("timeout_error", "turn_timeout", None),
            ServeError::Upstream { .. } => ("api_error", "model_failed", None),
            ServeError::Internal(_) => ("api_error", "internal_error", None),
        };
        json!({"error": {"message": self.to_string(), "type": kind, "param": param, "code": code}})
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Unauthorized => {
                f.write_str("a valid API key is required (Authorization: Bearer <key>)")
            }
            ServeError::BadRequest { message, .. } | ServeError::Forbidden(message) => {
                f.write_str(message)
            }
            ServeError::ModelNotFound(model) => write!(f, "the model {model:?} is not served here"),
            ServeError::NotFound(what) => f.write_str(what),
            ServeError::SessionBusy => f.write_str(
                "another turn of this session is running; try again when it has finished",
            ),
            ServeError::IdempotencyKeyReused => f.write_str(
                "this Idempotency-Key was used before in this session with another request; use a new key for a new request",
            ),
            ServeError::TooManyTurns => {
                f.write_str("too many turns are running; try again in a moment")
            }
            ServeError::Timeout {
                session: Some(session),
            } => write!(
                f,
                "the turn did not finish in time; it goes on and its answer will be stored in session {session}"
            ),
            ServeError::Timeout { session: None } => f.write_str("the turn did not finish in time"),
            ServeError::Upstream { message, .. } => write!(f, "the model failed: {message}"),
            ServeError::Internal(message) => write!(f, "the server failed: {message}"),
        }
    }
}

impl std::error::Error for ServeError {}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if matches!(
            self,
            ServeError::SessionBusy
                | ServeError::TooManyTurns
                | ServeError::Upstream {
                    retryable: true,
                    ..
                }
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

fn root(error: &TurnError) -> &TurnError {
    match error {
        TurnError::Turn { cause, .. } => root(cause),
        other => other,
    }
}

fn is_busy(error: &TurnError) -> bool {
    matches!(
        root(error),
        TurnError::Sessions(nanobot_session_store::SessionError::Busy { .. })
    )
}

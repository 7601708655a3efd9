//! The one error type every LLM client returns, split by what a caller can do about it.

use std::fmt;
use std::time::Duration;

/// Why a call to a model failed.
///
/// The split is by remedy: compact the prompt ([`LlmError::ContextLengthExceeded`]), wait
/// and retry ([`LlmError::is_retryable`]), or give up and report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LlmError {
    /// The prompt does not fit the model's window; retrying the same request cannot help,
    /// a shorter prompt can (compaction).
    ContextLengthExceeded {
        /// The provider's words.
        message: String,
    },
    /// Too many requests; the provider may say how long to wait.
    RateLimited {
        /// The wait the provider asked for (`Retry-After`), if any.
        retry_after: Option<Duration>,
        /// The provider's words.
        message: String,
    },
    /// No answer within the allowed time.
    Timeout {
        /// The time allowed.
        after: Duration,
    },
    /// A failure that may pass: a 5xx, a reset connection, an overloaded provider.
    Transient {
        /// What happened.
        message: String,
    },
    /// A failure that will repeat: bad credentials, an unknown model, a rejected request.
    Permanent {
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// What happened.
        message: String,
    },
    /// The provider answered with something we cannot read (malformed or cut body, no
    /// choices). Not retried by default: a provider that sends garbage tends to repeat it.
    InvalidResponse {
        /// What was wrong with it.
        message: String,
    },
}

impl LlmError {
    /// Whether the same request may succeed later: rate limits, timeouts and transient
    /// failures.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. } | LlmError::Timeout { .. } | LlmError::Transient { .. }
        )
    }

    /// The wait the provider asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether the prompt must shrink before another attempt.
    pub fn is_context_length_exceeded(&self) -> bool {
        matches!(self, LlmError::ContextLengthExceeded { .. })
    }

    /// A transient failure with `message`.
    pub fn transient(message: impl Into<String>) -> Self {
        LlmError::Transient {
            message: message.into(),
        }
    }

    /// A permanent failure with `message` and no HTTP status.
    pub fn permanent(message: impl Into<String>) -> Self {
        LlmError::Permanent {
            status: None,
            message: message.into(),
        }
    }

    /// An unreadable answer.
    pub fn invalid_response(message: impl Into<String>) -> Self {
        LlmError::InvalidResponse {
            message: message.into(),
        }
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlmError::ContextLengthExceeded { message } => write!(
                f,
                "the prompt is longer than the model's context window; shorten it: {message}"
            ),
            LlmError::RateLimited {
                retry_after: Some(wait),
                message,
            } => write!(
                f,
                "rate limited by the provider, retry after {:.1}s: {message}",
                wait.as_secs_f64()
            ),
            LlmError::RateLimited {
                retry_after: None,
                message,
            } => write!(f, "rate limited by the provider: {message}"),
            LlmError::Timeout { after } => {
                write!(
                    f,
                    "the model did not answer within {:.1}s",
                    after.as_secs_f64()
                )
            }
            LlmError::Transient { message } => {
                write!(f, "temporary failure talking to the model: {message}")
            }
            LlmError::Permanent {
                status: Some(status),
                message,
            } => write!(
                f,
                "the provider refused the request (HTTP {status}): {message}"
            ),
            LlmError::Permanent {
                status: None,
                message,
            } => write!(f, "the provider refused the request: {message}"),
            LlmError::InvalidResponse { message } => {
                write!(f, "the provider's answer could not be read: {message}")
            }
        }
    }
}

impl std::error::Error for LlmError {}

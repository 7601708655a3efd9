#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod errors;
mod sse;
#[cfg(feature = "test-util")]
pub mod testing;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_port::LlmError;

pub use errors::{
    MAX_RETRY_AFTER, error_for_status, excerpt, is_context_overflow, provider_message, retry_after,
};
pub use sse::{SseEvent, SseParser};

/// An API key. It never appears in `Debug`, `Display`, logs or error messages.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// A key from its text; `None` when empty or blank.
    pub fn new(key: impl AsRef<str>) -> Option<ApiKey> {
        let key = key.as_ref().trim();
        (!key.is_empty()).then(|| ApiKey(Arc::from(key)))
    }

    /// The key in environment variable `name`, if set and not blank.
    pub fn from_env(name: &str) -> Option<ApiKey> {
        std::env::var(name).ok().and_then(ApiKey::new)
    }

    /// The key itself, for the one header that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `***`. A key shorter than
    /// [`ApiKey::REDACTED_FROM`] bytes is a local server's placeholder (`x`, `EMPTY`), not
    /// a secret: replacing it would garble every message that holds its letters.
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < Self::REDACTED_FROM {
            return text.to_owned();
        }
        text.replace(&*self.0, "***")
    }

    /// Keys of at least this many bytes are redacted from messages.
    pub const REDACTED_FROM: usize = 8;

    /// `error` with the key redacted from its message (a server may echo the key back),
    /// its kind kept.
    pub fn scrub(&self, error: LlmError) -> LlmError {
        if self.0.len() < Self::REDACTED_FROM || !error.to_string().contains(&*self.0) {
            return error;
        }
        match error {
            LlmError::ContextLengthExceeded { message } => LlmError::ContextLengthExceeded {
                message: self.redact(&message),
            },
            LlmError::RateLimited {
                retry_after,
                message,
            } => LlmError::RateLimited {
                retry_after,
                message: self.redact(&message),
            },
            LlmError::Transient { message } => LlmError::transient(self.redact(&message)),
            LlmError::Permanent { status, message } => LlmError::Permanent {
                status,
                message: self.redact(&message),
            },
            LlmError::InvalidResponse { message } => {
                LlmError::invalid_response(self.redact(&message))
            }
            other => LlmError::permanent(self.redact(&other.to_string())),
        }
    }
}

/// Refuses a base URL that is not HTTP(S), before any request is made.
pub fn check_base_url(url: &str) -> Result<(), LlmError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(LlmError::permanent(format!(
            "the base URL {url:?} must start with http:// or https://"
        )))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// Establishing the connection.
    pub connect: Duration,
    /// Between two pieces of the answer (a stalled server is given up after this).
    pub idle: Duration,
}

impl Timeouts {
    /// `connect` to connect, and at most `idle` between two pieces of an answer.
    pub fn new(connect: Duration, idle: Duration) -> Self {
        Timeouts { connect, idle }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(120),
        }
    }
}

/// The largest answer read (a misbehaving server cannot exhaust memory).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// An HTTP/1.1 client with rustls (ring) and the system's certificates.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    timeouts: Timeouts,
}

impl HttpClient {
    /// A client with these timeouts.
    pub fn new(timeouts: Timeouts) -> Result<HttpClient, LlmError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = reqwest::Client::builder()
            .tls_backend_rustls()
            .connect_timeout(timeouts.connect)
            .read_timeout(timeouts.idle)
            .http1_only()
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("nanobot-rs/", env!("CARGO_PKG_VERSION")));
        let client = match rustls_client_config(provider) {
            Ok(config) => client.tls_backend_preconfigured(config),
            Err(e) => return Err(LlmError::permanent(format!("TLS setup failed: {e}"))),
        };
        let client = client
            .build()
            .map_err(|e| LlmError::permanent(format!("the HTTP client could not be built: {e}")))?;
        Ok(HttpClient { client, timeouts })
    }

    /// POSTs `body` (JSON) to `url` with `headers`.
    pub async fn post_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<HttpResponse, LlmError> {
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.transport_error(&e, url))?;
        Ok(HttpResponse {
            status: response.status().as_u16(),
            headers: response
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            inner: response,
            timeouts: self.timeouts,
            read: 0,
        })
    }

    fn transport_error(&self, e: &reqwest::Error, url: &str) -> LlmError {
        let host = url.split('/').nth(2).unwrap_or(url);
        if e.is_timeout() {
            LlmError::Timeout {
                after: self.timeouts.idle,
            }
        } else if e.is_connect() {
            LlmError::transient(format!("could not connect to {host}: {}", source_chain(e)))
        } else {
            LlmError::transient(format!("the request to {host} failed: {}", source_chain(e)))
        }
    }
}

fn rustls_client_config(
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<rustls::ClientConfig, String> {
    use rustls_platform_verifier::BuilderVerifierExt;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_platform_verifier()
        .map_err(|e| e.to_string())
        .map(|builder| builder.with_no_client_auth())
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A successful answer.
#[derive(Debug)]
pub enum Answer {
    /// A whole JSON body.
    Whole(Vec<u8>),
    /// Server-sent events still arriving.
    Stream(HttpResponse),
}

/// Hands a non-streamed answer's whole text to `sink`, so streaming callers see every
/// answer once.
pub fn deliver(sink: Option<&nanobot_llm_port::TextSink>, text: &str) {
    if let (Some(sink), false) = (sink, text.is_empty()) {
        sink(text);
    }
}

/// A response whose head has arrived.
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    inner: reqwest::Response,
    timeouts: Timeouts,
    read: usize,
}

impl HttpResponse {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The next piece of the body; `None` at its end. A body cut before its declared end is
    /// an invalid response; a server silent for the idle timeout, a timeout.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, LlmError> {
        let chunk = tokio::time::timeout(self.timeouts.idle, self.inner.chunk())
            .await
            .map_err(|_| LlmError::Timeout {
                after: self.timeouts.idle,
            })?;
        match chunk {
            Ok(Some(bytes)) => {
                self.read += bytes.len();
                if self.read > MAX_BODY_BYTES {
                    return Err(LlmError::invalid_response(format!(
                        "the answer is larger than {} MB; refused",
                        MAX_BODY_BYTES / (1024 * 1024)
                    )));
                }
                Ok(Some(bytes.to_vec()))
            }
            Ok(None) => Ok(None),
            Err(e) if e.is_timeout() => Err(LlmError::Timeout {
                after: self.timeouts.idle,
            }),
            Err(e) => Err(LlmError::invalid_response(format!(
                "the answer was cut off after {} bytes: {}",
                self.read,
                source_chain(&e)
            ))),
        }
    }

    /// Whether the body is a stream of server-sent events.
    pub fn is_event_stream(&self) -> bool {
        self.header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
    }

    /// The answer of a successful response, whole or as a stream; for a failed one the
    /// error, by remedy, with `provider` named. `status_of` maps a provider's own statuses
    /// onto standard ones (Anthropic's 529 "overloaded" is a 503).
    pub async fn into_answer(
        self,
        provider: &str,
        status_of: fn(u16) -> u16,
    ) -> Result<Answer, LlmError> {
        if (200..300).contains(&self.status) {
            return Ok(if self.is_event_stream() {
                Answer::Stream(self)
            } else {
                Answer::Whole(self.body().await?)
            });
        }
        let status = status_of(self.status);
        let headers = self.headers.clone();
        let body = self.body().await.unwrap_or_default();
        Err(error_for_status(
            provider,
            status,
            &headers,
            &body,
            chrono::Utc::now(),
        ))
    }

    /// Feeds each server-sent event to `on_event` until it returns `true` (the stream's
    /// end) or the body ends; the piece left without its closing blank line, if any (the
    /// tail of a cut stream).
    pub async fn each_event(
        mut self,
        mut on_event: impl FnMut(SseEvent) -> Result<bool, LlmError>,
    ) -> Result<Option<SseEvent>, LlmError> {
        let mut parser = SseParser::new();
        while let Some(chunk) = self.next_chunk().await? {
            for event in parser.feed(&chunk) {
                if on_event(event)? {
                    return Ok(None);
                }
            }
        }
        Ok(parser.finish())
    }

    /// The whole body.
    pub async fn body(mut self) -> Result<Vec<u8>, LlmError> {
        let mut body = Vec::new();
        while let Some(chunk) = self.next_chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::ApiKey;

    #[test]
    fn a_real_key_is_redacted_and_a_placeholder_garbles_nothing() {
        let key = ApiKey::new("sk-live-SECRET-42").unwrap_or_else(|| unreachable!());
        assert_eq!(
            key.redact("bad key sk-live-SECRET-42 given"),
            "bad key *** given"
        );
        let placeholder = ApiKey::new("x").unwrap_or_else(|| unreachable!());
        assert_eq!(
            placeholder.redact("expected value at line 1"),
            "expected value at line 1"
        );
    }
}

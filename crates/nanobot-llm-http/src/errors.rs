//! HTTP failures mapped onto `LlmError`, by what a caller can do about them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use nanobot_llm_port::LlmError;
use serde_json::Value;

/// The longest wait a `retry-after` header is taken at its word for. Anything longer (a day
/// is already absurd for a rate limit) is clamped here; the retry decorator then refuses to
/// wait that long and returns the error instead.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// How long the server asks to wait: `retry-after-ms`, or `retry-after` in seconds or as an
/// HTTP date (measured from `now`). The value comes from the network, so any text gives a
/// bounded answer: negative, NaN and unparsable values are ignored, infinite and huge ones
/// are clamped to [`MAX_RETRY_AFTER`].
pub fn retry_after(headers: &[(String, String)], now: DateTime<Utc>) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return bounded_seconds(ms / 1000.0);
    }
    let value = get("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return bounded_seconds(seconds);
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some(
        at.signed_duration_since(now)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// A wait of `seconds` from a header: `None` for NaN or a negative number, clamped to
/// [`MAX_RETRY_AFTER`] (infinity included); never panics.
fn bounded_seconds(seconds: f64) -> Option<Duration> {
    if seconds.is_nan() || seconds < 0.0 {
        return None;
    }
    Some(
        Duration::try_from_secs_f64(seconds)
            .unwrap_or(MAX_RETRY_AFTER)
            .min(MAX_RETRY_AFTER),
    )
}

/// The provider's own error message in a JSON error body (`{"error": {"message": …}}`,
/// `{"error": "…"}`, `{"message": …}`), else an excerpt of the body.
pub fn provider_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail"))
            .and_then(Value::as_str);
        if let Some(message) = found {
            return excerpt(message.as_bytes(), 500);
        }
    }
    excerpt(body, 500)
}

/// At most `max` characters of `bytes` as text, on one line.
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else if flat.is_empty() {
        "(empty body)".to_owned()
    } else {
        flat
    }
}

/// Phrases providers use for a prompt over the context window (OpenAI, vLLM, llama.cpp,
/// Ollama, OpenRouter, DeepSeek, Anthropic, ...), compared lower-cased.
const CONTEXT_PHRASES: [&str; 14] = [
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "context size",
    "exceed_context_size",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
    "input is too long",
    "tokens exceeds",
    "exceeds the maximum",
    "too long for the model",
    "request too large",
];

/// Whether an error text says the prompt did not fit.
pub fn is_context_overflow(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    CONTEXT_PHRASES.iter().any(|p| lower.contains(p))
}

/// The error for a non-success `status` with `body`, from `provider` (named in messages).
pub fn error_for_status(
    provider: &str,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    now: DateTime<Utc>,
) -> LlmError {
    let message = format!("{provider}: {}", provider_message(body));
    let raw = String::from_utf8_lossy(body);
    match status {
        400 | 413 | 422 if is_context_overflow(&raw) || status == 413 => {
            LlmError::ContextLengthExceeded { message }
        }
        429 if raw.contains("insufficient_quota") => LlmError::Permanent {
            status: Some(status),
            message: format!("{message} (the account's quota is used up; retrying will not help)"),
        },
        429 => LlmError::RateLimited {
            retry_after: retry_after(headers, now),
            message,
        },
        // 501: the server does not do this at all (llama.cpp without `--embeddings`); asking
        // again cannot help.
        501 => LlmError::Permanent {
            status: Some(status),
            message: format!("{message} (the server does not offer this)"),
        },
        408 | 409 | 425 | 500..=599 => LlmError::transient(format!("HTTP {status}: {message}")),
        401 | 403 => LlmError::Permanent {
            status: Some(status),
            message: format!("{message} (check the API key and its permissions)"),
        },
        _ => LlmError::Permanent {
            status: Some(status),
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn retry_after_forms() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
        assert_eq!(
            retry_after(&h(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&h(&[("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&h(&[("retry-after", "Mon, 30 Nov 2026 09:00:30 GMT")]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after(&h(&[("retry-after", "soon")]), now), None);
        // Hostile values from the network: bounded, never a panic.
        for huge in [
            "1e20",
            "inf",
            "+inf",
            "Infinity",
            "99999999999999999999",
            "1.8e308",
        ] {
            assert_eq!(
                retry_after(&h(&[("retry-after", huge)]), now),
                Some(MAX_RETRY_AFTER),
                "{huge}"
            );
            assert_eq!(
                retry_after(&h(&[("retry-after-ms", huge)]), now),
                Some(MAX_RETRY_AFTER),
                "{huge} ms"
            );
        }
        for ignored in ["-1", "nan", "NaN", "-inf", "", "1e", "0x10"] {
            assert_eq!(
                retry_after(&h(&[("retry-after", ignored)]), now),
                None,
                "{ignored}"
            );
        }
        assert_eq!(
            retry_after(&h(&[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")]), now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(retry_after(&[], now), None);
    }

    #[test]
    fn statuses_by_remedy() {
        let now = Utc::now();
        let ctx = br#"{"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}}"#;
        assert!(error_for_status("p", 400, &[], ctx, now).is_context_length_exceeded());
        assert!(error_for_status("p", 413, &[], b"too big", now).is_context_length_exceeded());
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert!(error_for_status("p", 400, &[], llama, now).is_context_length_exceeded());
        assert!(
            !error_for_status(
                "p",
                400,
                &[],
                br#"{"error": {"message": "bad tool schema"}}"#,
                now
            )
            .is_retryable()
        );
        let limited = error_for_status("p", 429, &h(&[("retry-after", "2")]), b"{}", now);
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(2)));
        assert!(
            !error_for_status(
                "p",
                429,
                &[],
                br#"{"error": {"code": "insufficient_quota"}}"#,
                now
            )
            .is_retryable()
        );
        for status in [500, 502, 503, 529] {
            assert!(
                error_for_status("p", status, &[], b"", now).is_retryable(),
                "{status}"
            );
        }
        let auth = error_for_status(
            "p",
            401,
            &[],
            br#"{"error": {"message": "Incorrect API key"}}"#,
            now,
        );
        assert!(
            auth.to_string().contains("HTTP 401") && auth.to_string().contains("check the API key")
        );
    }
}

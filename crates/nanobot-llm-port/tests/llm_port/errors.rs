//! Error classification: what is retried, what asks for compaction, what is reported.

use std::time::Duration;

use nanobot_llm_port::LlmError;

fn all() -> Vec<LlmError> {
    vec![
        LlmError::ContextLengthExceeded {
            message: "maximum context length is 8192 tokens".into(),
        },
        LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(3)),
            message: "429".into(),
        },
        LlmError::RateLimited {
            retry_after: None,
            message: "429".into(),
        },
        LlmError::Timeout {
            after: Duration::from_secs(30),
        },
        LlmError::transient("connection reset"),
        LlmError::Permanent {
            status: Some(401),
            message: "invalid api key".into(),
        },
        LlmError::permanent("unknown model"),
        LlmError::invalid_response("no choices in body"),
    ]
}

#[test]
fn retryable_is_rate_limit_timeout_and_transient() {
    let retryable: Vec<bool> = all().iter().map(LlmError::is_retryable).collect();
    assert_eq!(
        retryable,
        [false, true, true, true, true, false, false, false]
    );
}

#[test]
fn retry_after_and_context_length_accessors() {
    let errors = all();
    assert_eq!(errors[1].retry_after(), Some(Duration::from_secs(3)));
    assert_eq!(errors[2].retry_after(), None);
    assert_eq!(errors[3].retry_after(), None);
    assert!(errors[0].is_context_length_exceeded());
    assert!(!errors[4].is_context_length_exceeded());
}

#[test]
fn messages_read_as_sentences() {
    let rendered: Vec<String> = all().iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(rendered.join("\n"));
}

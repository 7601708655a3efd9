//! Retry and timeout decorators, in tokio's paused time: nothing really sleeps, and the
//! virtual clock shows exactly how long each waited.

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{
    Capabilities, Clock, LlmClient, LlmClientExt, LlmError, LlmRequest, Message, RetryPolicy,
    TokioClock,
};
use tokio::time::Instant;

fn request() -> LlmRequest {
    LlmRequest::new("m", vec![Message::user("hi")])
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock::system())
}

fn no_jitter() -> RetryPolicy {
    {
        let mut value = RetryPolicy::default();
        value.jitter = 0.0;
        value
    }
}

fn transient() -> LlmError {
    LlmError::transient("502 bad gateway")
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_between_attempts() {
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_error(transient())
            .then_error(transient())
            .then_text("ok"),
    );
    let client = llm.clone().with_retry(no_jitter(), clock());
    let start = Instant::now();
    let answer = client.complete(&request()).await.unwrap();
    assert_eq!(answer.text_content(), "ok");
    // 1 s, then 2 s.
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(llm.call_count(), 3);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_exactly() {
    let limited = LlmError::RateLimited {
        retry_after: Some(Duration::from_millis(7_500)),
        message: "slow down".into(),
    };
    let llm = Arc::new(ScriptedLlm::new().then_error(limited).then_text("ok"));
    let client = llm.clone().with_retry(RetryPolicy::default(), clock());
    let start = Instant::now();
    client.complete(&request()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(7_500));
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_limit_is_returned_at_once() {
    let limited = LlmError::RateLimited {
        retry_after: Some(Duration::from_secs(3600)),
        message: "daily quota".into(),
    };
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_error(limited.clone())
            .then_text("never"),
    );
    let client = llm.clone().with_retry(RetryPolicy::default(), clock());
    let start = Instant::now();
    assert_eq!(client.complete(&request()).await.unwrap_err(), limited);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(llm.call_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_retries_with_the_last_error() {
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_error(transient())
            .then_error(transient())
            .then_error(transient())
            .then_error(LlmError::transient("still down"))
            .then_text("too late"),
    );
    let client = llm.clone().with_retry(no_jitter(), clock());
    let start = Instant::now();
    let error = client.complete(&request()).await.unwrap_err();
    assert_eq!(error, LlmError::transient("still down"));
    assert_eq!(llm.call_count(), 4);
    assert_eq!(start.elapsed(), Duration::from_secs(1 + 2 + 4));
}

#[tokio::test(start_paused = true)]
async fn permanent_and_context_errors_are_not_retried() {
    for error in [
        LlmError::permanent("bad key"),
        LlmError::ContextLengthExceeded {
            message: "too long".into(),
        },
        LlmError::invalid_response("garbage"),
    ] {
        let llm = Arc::new(ScriptedLlm::new().then_error(error.clone()).then_text("no"));
        let client = llm.clone().with_retry(no_jitter(), clock());
        assert_eq!(client.complete(&request()).await.unwrap_err(), error);
        assert_eq!(llm.call_count(), 1);
    }
}

#[test]
fn backoff_is_capped_and_jitter_stays_in_its_band() {
    let policy = {
        let mut value = RetryPolicy::default();
        value.max_retries = 100;
        value.initial_backoff = Duration::from_millis(500);
        value.max_backoff = Duration::from_secs(10);
        value.multiplier = 3.0;
        value.jitter = 0.5;
        value.max_retry_after = Duration::from_secs(60);
        value
    };
    assert_eq!(policy.backoff(0), Duration::from_millis(500));
    assert_eq!(policy.backoff(1), Duration::from_millis(1500));
    assert_eq!(policy.backoff(5), Duration::from_secs(10));
    assert_eq!(policy.backoff(1000), Duration::from_secs(10));
    let error = LlmError::transient("x");
    for unit in [0.0, 0.25, 0.999] {
        let wait = policy.delay_after(&error, 1, unit).unwrap();
        assert!(
            wait <= Duration::from_millis(1500) && wait >= Duration::from_millis(750),
            "{wait:?}"
        );
    }
    assert_eq!(
        policy.delay_after(&error, 1, 0.5),
        Some(Duration::from_millis(1125))
    );
    assert_eq!(policy.delay_after(&error, 100, 0.0), None);
}

#[tokio::test(start_paused = true)]
async fn jittered_waits_are_within_the_band_and_seeded() {
    let policy = {
        let mut value = RetryPolicy::default();
        value.jitter = 1.0;
        value
    };
    let mut elapsed = Vec::new();
    for _ in 0..2 {
        let llm = ScriptedLlm::new()
            .then_error(transient())
            .then_error(transient())
            .then_text("ok");
        let client = llm.with_retry(policy.clone(), clock()).with_seed(7);
        let start = Instant::now();
        client.complete(&request()).await.unwrap();
        elapsed.push(start.elapsed());
    }
    assert_eq!(elapsed[0], elapsed[1], "the same seed waits the same");
    assert!(elapsed[0] <= Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn timeout_fails_a_hanging_call_at_the_limit() {
    let client = ScriptedLlm::new()
        .then_hang()
        .with_timeout(Duration::from_secs(30), clock());
    let start = Instant::now();
    let error = client.complete(&request()).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::Timeout {
            after: Duration::from_secs(30)
        }
    );
    assert!(error.is_retryable());
    assert_eq!(start.elapsed(), Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn timeout_lets_a_fast_answer_through() {
    let client = ScriptedLlm::new()
        .then_text("quick")
        .with_timeout(Duration::from_secs(30), clock());
    assert_eq!(
        client.complete(&request()).await.unwrap().text_content(),
        "quick"
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_inside_retry_retries_the_stalled_attempt() {
    let llm = Arc::new(ScriptedLlm::new().then_hang().then_text("second try"));
    let client = llm
        .clone()
        .with_timeout(Duration::from_secs(10), clock())
        .with_retry(no_jitter(), clock());
    let start = Instant::now();
    assert_eq!(
        client.complete(&request()).await.unwrap().text_content(),
        "second try"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(11));
    assert_eq!(llm.call_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn decorators_forward_capabilities_and_work_as_trait_objects() {
    let caps = Capabilities::new(8192)
        .with_max_output_tokens(1024)
        .with_images(true);
    let client: Arc<dyn LlmClient> = Arc::new(
        ScriptedLlm::new()
            .with_capabilities(caps)
            .then_text("x")
            .with_timeout(Duration::from_secs(5), clock())
            .with_retry(RetryPolicy::default(), clock()),
    );
    assert_eq!(client.capabilities(), caps);
    let boxed: Box<dyn LlmClient> = Box::new(client.clone());
    assert_eq!(boxed.capabilities().context_window, 8192);
    assert_eq!(
        client.complete(&request()).await.unwrap().text_content(),
        "x"
    );
}

#[tokio::test(start_paused = true)]
async fn tokio_clock_follows_paused_time() {
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let clock = TokioClock::starting_at(start);
    assert_eq!(clock.now(), start);
    clock.sleep(Duration::from_secs(15 * 60)).await;
    assert_eq!(clock.now(), start + chrono::Duration::minutes(15));
}

#[test]
fn system_clock_sleeps_without_a_runtime() {
    use nanobot_llm_port::SystemClock;
    // Poll by hand with a thread-parking waker: no executor is involved.
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let before = SystemClock.now();
    let started = std::time::Instant::now();
    let mut sleep = SystemClock.sleep(Duration::from_millis(20));
    while sleep.as_mut().poll(&mut cx).is_pending() {
        std::thread::park();
    }
    assert!(started.elapsed() >= Duration::from_millis(20));
    assert!(SystemClock.now() >= before);
    let mut zero = SystemClock.sleep(Duration::ZERO);
    assert!(zero.as_mut().poll(&mut cx).is_ready());
}

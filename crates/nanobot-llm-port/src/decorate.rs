//! Decorators that wrap any [`LlmClient`]: retry with backoff, and a per-call timeout.
//!
//! Both wait through an injected [`Clock`], so they run on any executor and their tests run
//! in virtual time. Put the timeout inside the retry (`client.with_timeout(..).with_retry(..)`)
//! so each attempt gets its own deadline and a timed-out attempt is retried.

use std::collections::hash_map::RandomState;
use std::future::poll_fn;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;

use crate::client::{Capabilities, LlmClient, TextSink};
use crate::error::LlmError;
use crate::request::{LlmRequest, LlmResponse};
use crate::time::Clock;

/// How [`Retry`] waits between attempts.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 turns retrying off.
    pub max_retries: u32,
    /// The wait before the first retry.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts, before jitter.
    pub max_backoff: Duration,
    /// How much each wait grows over the previous one.
    pub multiplier: f64,
    /// The share of each wait that is random, from 0 (none) to 1 (anywhere between zero
    /// and the full wait). Spreads out clients that failed together.
    pub jitter: f64,
    /// A provider's `Retry-After` longer than this is not waited for: the error is returned
    /// at once so the caller can decide (a bot should not hang for an hour).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: 0.2,
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 for the first), without jitter:
    /// `initial_backoff * multiplier^retry`, capped at `max_backoff`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(retry.min(64) as i32);
        let secs = self.initial_backoff.as_secs_f64() * factor;
        if !secs.is_finite() || secs >= self.max_backoff.as_secs_f64() {
            self.max_backoff
        } else {
            Duration::from_secs_f64(secs)
        }
    }

    /// The wait before retry number `retry` after `error`, or `None` when the error must be
    /// returned instead. `unit` is a random number in `[0, 1)` that picks the jitter.
    pub fn delay_after(&self, error: &LlmError, retry: u32, unit: f64) -> Option<Duration> {
        if retry >= self.max_retries || !error.is_retryable() {
            return None;
        }
        match error.retry_after() {
            Some(wait) if wait > self.max_retry_after => None,
            Some(wait) => Some(wait),
            None => {
                let jitter = self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
                Some(self.backoff(retry).mul_f64(1.0 - jitter))
            }
        }
    }
}

/// Retries retryable failures with exponential backoff and jitter, honouring `Retry-After`.
pub struct Retry<C> {
    inner: C,
    policy: RetryPolicy,
    clock: Arc<dyn Clock>,
    rng: AtomicU64,
}

impl<C> Retry<C> {
    /// Wraps `inner`.
    pub fn new(inner: C, policy: RetryPolicy, clock: Arc<dyn Clock>) -> Self {
        let seed = RandomState::new().hash_one("nanobot-rs retry jitter");
        Retry {
            inner,
            policy,
            clock,
            rng: AtomicU64::new(seed),
        }
    }

    /// Fixes the jitter's random sequence, for reproducible tests.
    pub fn with_seed(self, seed: u64) -> Self {
        self.rng.store(seed, Ordering::Relaxed);
        self
    }

    /// The wrapped client.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// A random number in `[0, 1)` (SplitMix64; quality is ample for jitter).
    fn next_unit(&self) -> f64 {
        let state = self
            .rng
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[async_trait]
impl<C: LlmClient> LlmClient for Retry<C> {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let mut retry = 0;
        loop {
            match self.inner.complete(request).await {
                Ok(response) => return Ok(response),
                Err(error) => {
                    let Some(wait) = self.policy.delay_after(&error, retry, self.next_unit())
                    else {
                        return Err(error);
                    };
                    self.clock.sleep(wait).await;
                    retry += 1;
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// Retries only while nothing has been shown: once text reached the sink, a failure is
    /// returned rather than repeating the answer from its start.
    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        let shown = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watched: TextSink = {
            let (shown, sink) = (Arc::clone(&shown), Arc::clone(sink));
            Arc::new(move |text: &str| {
                shown.store(true, std::sync::atomic::Ordering::Relaxed);
                sink(text);
            })
        };
        let mut retry = 0;
        loop {
            match self.inner.complete_streaming(request, &watched).await {
                Ok(response) => return Ok(response),
                Err(error) => {
                    let wait = (!shown.load(std::sync::atomic::Ordering::Relaxed))
                        .then(|| self.policy.delay_after(&error, retry, self.next_unit()))
                        .flatten();
                    let Some(wait) = wait else {
                        return Err(error);
                    };
                    self.clock.sleep(wait).await;
                    retry += 1;
                }
            }
        }
    }
}

/// Fails a call with [`LlmError::Timeout`] when it takes longer than a limit.
pub struct Timeout<C> {
    inner: C,
    limit: Duration,
    clock: Arc<dyn Clock>,
}

impl<C> Timeout<C> {
    /// Wraps `inner`; each call may take at most `limit`.
    pub fn new(inner: C, limit: Duration, clock: Arc<dyn Clock>) -> Self {
        Timeout {
            inner,
            limit,
            clock,
        }
    }

    /// The wrapped client.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

#[async_trait]
impl<C: LlmClient> LlmClient for Timeout<C> {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.within_limit(self.inner.complete(request)).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        self.within_limit(self.inner.complete_streaming(request, sink))
            .await
    }
}

impl<C> Timeout<C> {
    /// `call`'s result, or a timeout error when the limit passes first. The call is polled
    /// first, so an answer that is ready at the deadline wins.
    async fn within_limit<'a>(
        &self,
        mut call: crate::time::BoxFuture<'a, Result<LlmResponse, LlmError>>,
    ) -> Result<LlmResponse, LlmError> {
        let mut deadline = self.clock.sleep(self.limit);
        poll_fn(|cx| {
            if let Poll::Ready(result) = call.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(LlmError::Timeout { after: self.limit }));
            }
            Poll::Pending
        })
        .await
    }
}

/// Wrapping methods for every client.
pub trait LlmClientExt: LlmClient + Sized {
    /// Retries retryable failures as `policy` says, waiting on `clock`.
    fn with_retry(self, policy: RetryPolicy, clock: Arc<dyn Clock>) -> Retry<Self> {
        Retry::new(self, policy, clock)
    }

    /// Fails calls that take longer than `limit`.
    fn with_timeout(self, limit: Duration, clock: Arc<dyn Clock>) -> Timeout<Self> {
        Timeout::new(self, limit, clock)
    }
}

impl<C: LlmClient + Sized> LlmClientExt for C {}

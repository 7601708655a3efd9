//! Model calls counted for an operator's monitoring: [`Metered`] records each call's
//! outcome, latency and tokens through the `metrics` facade, labelled with what the call is
//! for. Without a recorder installed (the app installs one for `nanobot serve`) this costs
//! a few loads per call.

use std::time::Instant;

use async_trait::async_trait;

use crate::client::{Capabilities, LlmClient, TextSink};
use crate::error::LlmError;
use crate::request::{LlmRequest, LlmResponse};

/// Model calls, by `purpose` and `outcome` (`ok`, `error`).
pub const MODEL_CALLS: &str = "nanobot_model_calls_total";
/// Each model call's latency in seconds, by `purpose`.
pub const MODEL_CALL_SECONDS: &str = "nanobot_model_call_duration_seconds";
/// Tokens the provider reported, by `purpose` and `kind` (`prompt`, `completion`).
pub const MODEL_TOKENS: &str = "nanobot_model_tokens_total";

/// Records every call of the wrapped client as a call made for `purpose` (`turn`,
/// `archive`, `dream`).
pub struct Metered<C> {
    inner: C,
    purpose: &'static str,
}

impl<C> Metered<C> {
    /// Wraps `inner`; its calls are counted under `purpose`.
    pub fn new(inner: C, purpose: &'static str) -> Self {
        Metered { inner, purpose }
    }

    /// The wrapped client.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    fn record(&self, started: Instant, result: &Result<LlmResponse, LlmError>) {
        let purpose = self.purpose;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!(MODEL_CALLS, "purpose" => purpose, "outcome" => outcome).increment(1);
        metrics::histogram!(MODEL_CALL_SECONDS, "purpose" => purpose)
            .record(started.elapsed().as_secs_f64());
        if let Ok(LlmResponse {
            usage: Some(usage), ..
        }) = result
        {
            metrics::counter!(MODEL_TOKENS, "purpose" => purpose, "kind" => "prompt")
                .increment(usage.prompt_tokens);
            metrics::counter!(MODEL_TOKENS, "purpose" => purpose, "kind" => "completion")
                .increment(usage.completion_tokens);
        }
    }
}

#[async_trait]
impl<C: LlmClient> LlmClient for Metered<C> {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let started = Instant::now();
        let result = self.inner.complete(request).await;
        self.record(started, &result);
        result
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        let started = Instant::now();
        let result = self.inner.complete_streaming(request, sink).await;
        self.record(started, &result);
        result
    }
}

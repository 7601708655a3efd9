//! Test doubles for crates built on this port (feature `test-util`): a scripted fake LLM for
//! behaviour tests and mockall mocks for interaction tests.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value;

use crate::client::{Capabilities, LlmClient};
use crate::error::LlmError;
use crate::message::ToolCall;
use crate::request::{FinishReason, LlmRequest, LlmResponse, Usage};

pub use crate::client::MockLlmClient;
pub use crate::time::MockClock;
pub use crate::tokens::MockTokenCounter;

/// One scripted step of a [`ScriptedLlm`].
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer with this response.
    Reply(Box<LlmResponse>),
    /// Fail with this error.
    Fail(LlmError),
    /// Never answer (for timeout and cancellation tests).
    Hang,
}

impl From<LlmResponse> for Step {
    fn from(response: LlmResponse) -> Self {
        Step::Reply(Box::new(response))
    }
}

impl From<LlmError> for Step {
    fn from(error: LlmError) -> Self {
        Step::Fail(error)
    }
}

/// A fake model that answers from a queue and records every request it gets.
///
/// Each call takes the next step; a call after the last step fails with
/// [`LlmError::Permanent`] naming the call, so a test that calls more often than it scripted
/// fails loudly instead of hanging.
///
/// ```
/// # tokio_test_block(async {
/// use nanobot_llm_port::testing::ScriptedLlm;
/// use nanobot_llm_port::{LlmClient, LlmRequest, Message};
///
/// let llm = ScriptedLlm::new().then_text("- the user likes tea");
/// let answer = llm.complete(&LlmRequest::new("m", vec![Message::user("hi")])).await.unwrap();
/// assert_eq!(answer.text_content(), "- the user likes tea");
/// assert_eq!(llm.requests().len(), 1);
/// # });
/// # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
/// #     let mut f = std::pin::pin!(f);
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     assert!(f.as_mut().poll(&mut cx).is_ready());
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedLlm {
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<LlmRequest>>,
    capabilities: Capabilities,
}

impl Default for ScriptedLlm {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedLlm {
    /// An empty script and a 128k-token window with tool support.
    pub fn new() -> Self {
        ScriptedLlm {
            steps: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            capabilities: Capabilities::new(128_000),
        }
    }

    /// Reports these capabilities.
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Appends a step.
    pub fn then(self, step: impl Into<Step>) -> Self {
        self.push(step);
        self
    }

    /// Appends a text answer.
    pub fn then_text(self, text: impl Into<String>) -> Self {
        self.then(LlmResponse::text(text))
    }

    /// Appends a text answer with usage.
    pub fn then_text_with_usage(self, text: impl Into<String>, usage: Usage) -> Self {
        self.then(LlmResponse::text(text).with_usage(usage))
    }

    /// Appends an answer cut by the output limit (finish reason `length`).
    pub fn then_truncated(self, text: impl Into<String>) -> Self {
        self.then(LlmResponse::text(text).with_finish_reason(FinishReason::Length))
    }

    /// Appends an answer that calls one tool with JSON arguments.
    pub fn then_tool_call(self, id: &str, name: &str, arguments: Value) -> Self {
        self.then(LlmResponse::tool_calls(vec![ToolCall::with_json(
            id, name, &arguments,
        )]))
    }

    /// Appends a failure.
    pub fn then_error(self, error: LlmError) -> Self {
        self.then(Step::Fail(error))
    }

    /// Appends a call that never answers.
    pub fn then_hang(self) -> Self {
        self.then(Step::Hang)
    }

    /// Appends a step to a shared fake.
    pub fn push(&self, step: impl Into<Step>) {
        lock(&self.steps).push_back(step.into());
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<LlmRequest> {
        lock(&self.requests).clone()
    }

    /// How many calls were made.
    pub fn call_count(&self) -> usize {
        lock(&self.requests).len()
    }

    /// How many scripted steps are left.
    pub fn remaining(&self) -> usize {
        lock(&self.steps).len()
    }
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let call = {
            let mut requests = lock(&self.requests);
            requests.push(request.clone());
            requests.len()
        };
        let step = lock(&self.steps).pop_front();
        match step {
            Some(Step::Reply(response)) => Ok(*response),
            Some(Step::Fail(error)) => Err(error),
            Some(Step::Hang) => std::future::pending().await,
            None => Err(LlmError::permanent(format!(
                "ScriptedLlm: call {call} found the script empty; script one more step"
            ))),
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
}

/// Locks a test double's state; a panic in another test thread does not poison it for us.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

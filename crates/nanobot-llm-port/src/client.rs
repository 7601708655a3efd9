//! The trait every model backend implements, and what a backend can do.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::LlmError;
use crate::request::{LlmRequest, LlmResponse};

/// A chat model. Backends (OpenAI-compatible, Anthropic, fakes) implement it; policies hold an
/// `Arc<dyn LlmClient>` and never know which one they talk to.
#[cfg_attr(feature = "test-util", mockall::automock)]
#[async_trait]
pub trait LlmClient: Send + Sync {
    /// Sends one request and waits for the whole answer.
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError>;

    /// What this model can do: its window, tool support, images.
    fn capabilities(&self) -> Capabilities;

    /// Like [`LlmClient::complete`], handing the answer's text to `sink` as it is generated
    /// (for a terminal or a chat that shows the answer growing). Backends that stream
    /// override it; the default delivers the whole text once, when the answer is complete.
    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        let response = self.complete(request).await?;
        let text = response.message.text_content();
        if !text.is_empty() {
            sink(&text);
        }
        Ok(response)
    }
}

/// Receives pieces of an answer's text, in order, as they are generated.
pub type TextSink = Arc<dyn Fn(&str) + Send + Sync>;

/// What a model can do, so policies can size prompts and choose features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The context window in tokens (prompt plus answer).
    pub context_window: u32,
    /// The most tokens one answer may have, if the model has its own cap.
    pub max_output_tokens: Option<u32>,
    /// Whether the model accepts tool definitions and makes tool calls.
    pub supports_tools: bool,
    /// Whether the model accepts image parts.
    pub supports_images: bool,
    /// Whether the backend holds an answer to [`LlmRequest::response_format`]'s JSON schema
    /// (OpenAI-compatible servers through `response_format`, llama.cpp's with a grammar,
    /// Anthropic through a forced tool). Policies ask for structured answers only where
    /// this is true; elsewhere they parse free text.
    pub supports_structured_output: bool,
}

impl Capabilities {
    /// A model with `context_window` tokens that supports tools and not images.
    pub fn new(context_window: u32) -> Self {
        Capabilities {
            context_window,
            max_output_tokens: None,
            supports_tools: true,
            supports_images: false,
            supports_structured_output: false,
        }
    }

    /// Sets the cap on one answer's tokens.
    pub fn with_max_output_tokens(mut self, max_output_tokens: u32) -> Self {
        self.max_output_tokens = Some(max_output_tokens);
        self
    }

    /// Sets tool support.
    pub fn with_tools(mut self, supports_tools: bool) -> Self {
        self.supports_tools = supports_tools;
        self
    }

    /// Sets image support.
    pub fn with_images(mut self, supports_images: bool) -> Self {
        self.supports_images = supports_images;
        self
    }

    /// Sets structured-output support (see [`Capabilities::supports_structured_output`]).
    pub fn with_structured_output(mut self, supported: bool) -> Self {
        self.supports_structured_output = supported;
        self
    }
}

macro_rules! forward_llm_client {
    ($($wrapper:ty),*) => {$(
        #[async_trait]
        impl<T: LlmClient + ?Sized> LlmClient for $wrapper {
            async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
                (**self).complete(request).await
            }

            async fn complete_streaming(
                &self,
                request: &LlmRequest,
                sink: &TextSink,
            ) -> Result<LlmResponse, LlmError> {
                (**self).complete_streaming(request, sink).await
            }

            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
        }
    )*};
}

forward_llm_client!(Arc<T>, Box<T>, &T);

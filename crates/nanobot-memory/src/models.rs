//! The model stack a bot talks to: a provider's client (OpenAI-compatible or Anthropic)
//! wrapped in a per-call timeout and a retry policy.

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_port::{LlmClient, Retry, RetryPolicy, Timeout, TokioClock};

use crate::AssemblyError;

/// Which API a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI's chat completions, as OpenAI, OpenRouter, vLLM, Ollama or llama.cpp serve it.
    #[cfg(feature = "openai")]
    OpenAi,
    /// Anthropic's Messages API.
    #[cfg(feature = "anthropic")]
    Anthropic,
}

/// Where a model is and how to call it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelOptions {
    /// The API it speaks.
    pub provider: Provider,
    /// The API's base URL (`http://127.0.0.1:8088/v1`, `https://api.anthropic.com`).
    pub base_url: String,
    /// The model's name as the server knows it.
    pub model: String,
    /// The key, if the server wants one.
    pub api_key: Option<ApiKey>,
    /// Whether answers are streamed (default: no; a streamed answer reaches
    /// `Bot::turn_streaming`'s sink as the model writes it).
    pub stream: bool,
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// The most tokens an answer may take.
    pub max_output_tokens: usize,
    /// How long one call may go without progress, and at most in all.
    pub request_timeout: Duration,
    /// Whether the server takes tools natively (OpenAI-compatible servers only; otherwise
    /// tools are described in the prompt and calls read from the text).
    pub native_tools: bool,
}

impl ModelOptions {
    fn new(provider: Provider, base_url: &str, model: &str) -> Self {
        ModelOptions {
            provider,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            api_key: None,
            stream: false,
            context_window: 65_536,
            max_output_tokens: 8_192,
            request_timeout: Duration::from_secs(120),
            native_tools: true,
        }
    }

    /// An OpenAI-compatible server at `base_url` serving `model`.
    #[cfg(feature = "openai")]
    pub fn openai(base_url: &str, model: &str) -> Self {
        ModelOptions::new(Provider::OpenAi, base_url, model)
    }

    /// Anthropic's API serving `model`.
    #[cfg(feature = "anthropic")]
    pub fn anthropic(model: &str) -> Self {
        ModelOptions::new(Provider::Anthropic, "https://api.anthropic.com", model)
    }

    /// The same options with `key` (an empty key is no key).
    pub fn api_key(mut self, key: Option<ApiKey>) -> Self {
        self.api_key = key;
        self
    }

    /// The same options with another base URL.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The same options with the model's context window and answer size.
    pub fn window(mut self, context_window: usize, max_output_tokens: usize) -> Self {
        self.context_window = context_window;
        self.max_output_tokens = max_output_tokens;
        self
    }

    /// The same options with answers streamed or not.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The same options with another per-call timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same options with tools passed natively or through the prompt.
    pub fn native_tools(mut self, native: bool) -> Self {
        self.native_tools = native;
        self
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts::new(Duration::from_secs(10), self.request_timeout)
    }
}

/// The client `options` name, with a per-call timeout and the default retry policy.
pub fn model_client(options: &ModelOptions) -> Result<Arc<dyn LlmClient>, AssemblyError> {
    let client = provider_client(options)?;
    let clock = Arc::new(TokioClock::system());
    Ok(Arc::new(Retry::new(
        Timeout::new(client, options.request_timeout, clock.clone()),
        RetryPolicy::default(),
        clock,
    )))
}

fn provider_client(options: &ModelOptions) -> Result<Arc<dyn LlmClient>, AssemblyError> {
    Ok(match options.provider {
        #[cfg(feature = "openai")]
        Provider::OpenAi => Arc::new(nanobot_llm_openai::OpenAiClient::new(
            nanobot_llm_openai::OpenAiConfig::new(&options.base_url, &options.model)
                .with_api_key(options.api_key.clone())
                .streaming(options.stream)
                .with_context_window(&options.model, saturating_u32(options.context_window))
                .with_timeouts(options.timeouts())
                .with_native_tools(options.native_tools),
        )?),
        #[cfg(feature = "anthropic")]
        Provider::Anthropic => {
            let mut anthropic = nanobot_llm_anthropic::AnthropicConfig::new(&options.model)
                .with_base_url(&options.base_url)
                .with_api_key(options.api_key.clone())
                .streaming(options.stream)
                .with_timeouts(options.timeouts());
            anthropic.context_window = saturating_u32(options.context_window);
            anthropic.default_max_tokens = saturating_u32(options.max_output_tokens);
            Arc::new(nanobot_llm_anthropic::AnthropicClient::new(anthropic)?)
        }
    })
}

/// A `u32` setting from a `usize` one, saturating instead of wrapping.
fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

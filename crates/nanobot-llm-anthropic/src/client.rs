//! The client.

use async_trait::async_trait;
use nanobot_llm_http::{Answer, ApiKey, HttpClient, Timeouts, check_base_url, deliver};
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, TextSink};

use crate::wire::{Assembly, body, into_structured, parse_response, structured_tool};

/// The API version sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Where and how to reach the Messages API.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// The API root (`https://api.anthropic.com`).
    pub base_url: String,
    /// Sent as `x-api-key`; never printed.
    pub api_key: Option<ApiKey>,
    /// The model `capabilities()` describes.
    pub model: String,
    /// Its context window.
    pub context_window: u32,
    /// `max_tokens` when a request sets none (the API requires one).
    pub default_max_tokens: u32,
    /// Prompt caching: a breakpoint after the system prompt's stable prefix (or the whole
    /// system prompt), on the last tool, and on the conversation so far.
    pub cache: bool,
    /// Stream answers (server-sent events).
    pub stream: bool,
    /// More headers (`anthropic-beta`, ...).
    pub extra_headers: Vec<(String, String)>,
    /// Connect and idle timeouts.
    pub timeouts: Timeouts,
}

impl AnthropicConfig {
    /// The public API for `model`, a 200k window, caching on, no streaming.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicConfig {
            base_url: "https://api.anthropic.com".into(),
            api_key: None,
            model: model.into(),
            context_window: 200_000,
            default_max_tokens: 4_096,
            cache: true,
            stream: false,
            extra_headers: Vec::new(),
            timeouts: Timeouts::default(),
        }
    }

    /// Another API root (a proxy, a test server).
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Uses `key`.
    pub fn with_api_key(mut self, key: Option<ApiKey>) -> Self {
        self.api_key = key;
        self
    }

    /// Streams answers.
    pub fn streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

/// An `LlmClient` over `POST {base_url}/v1/messages`.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    config: AnthropicConfig,
    http: HttpClient,
}

impl AnthropicClient {
    /// A client for `config`.
    pub fn new(config: AnthropicConfig) -> Result<Self, LlmError> {
        check_base_url(&config.base_url)?;
        Ok(AnthropicClient {
            http: HttpClient::new(config.timeouts)?,
            config,
        })
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("anthropic-version".to_owned(), ANTHROPIC_VERSION.to_owned())];
        headers.extend(self.config.extra_headers.iter().cloned());
        if let Some(key) = &self.config.api_key {
            headers.push(("x-api-key".into(), key.expose().to_owned()));
        }
        headers
    }

    /// Keeps the key out of every error.
    fn scrub(&self, result: Result<LlmResponse, LlmError>) -> Result<LlmResponse, LlmError> {
        match &self.config.api_key {
            Some(key) => result.map_err(|e| key.scrub(e)),
            None => result,
        }
    }

    async fn call(
        &self,
        request: &LlmRequest,
        sink: Option<&TextSink>,
    ) -> Result<LlmResponse, LlmError> {
        let url = format!("{}/v1/messages", self.config.base_url);
        let payload = body(
            request,
            self.config.default_max_tokens,
            self.config.cache,
            self.config.stream,
        )?;
        let response = self.http.post_json(&url, &self.headers(), payload).await?;
        // 529: Anthropic is overloaded; worth a retry, like a 503.
        let overloaded = |status| if status == 529 { 503 } else { status };
        let structured = structured_tool(request).map(|(name, _)| name);
        let stream = match response.into_answer("anthropic", overloaded).await? {
            Answer::Whole(body) => {
                let mut answer = parse_response(&body)?;
                if let Some(tool) = &structured {
                    answer = into_structured(answer, tool);
                }
                deliver(sink, &answer.message.text_content());
                return Ok(answer);
            }
            Answer::Stream(stream) => stream,
        };
        let mut answer = Assembly::default();
        stream
            .each_event(|event| answer.event(event.event.as_deref(), &event.data, sink))
            .await?;
        let answer = answer.finish()?;
        Ok(match &structured {
            Some(tool) => {
                let answer = into_structured(answer, tool);
                // The JSON arrived as tool input, which is not streamed as text: hand it
                // over whole.
                deliver(sink, &answer.message.text_content());
                answer
            }
            None => answer,
        })
    }
}

#[async_trait]
impl LlmClient for AnthropicClient {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let result = self.call(request, None).await;
        self.scrub(result)
    }

    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        let result = self.call(request, Some(sink)).await;
        self.scrub(result)
    }

    fn capabilities(&self) -> Capabilities {
        let mut capabilities = Capabilities::new(self.config.context_window);
        capabilities.max_output_tokens = Some(self.config.default_max_tokens);
        capabilities.supports_tools = true;
        capabilities.supports_images = true;
        capabilities.supports_structured_output = true;
        capabilities
    }
}

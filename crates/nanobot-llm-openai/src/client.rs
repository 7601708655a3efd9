//! The client.

use std::collections::BTreeMap;

use async_trait::async_trait;
use nanobot_llm_http::{Answer, ApiKey, HttpClient, Timeouts, check_base_url, deliver};
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, TextSink};

use crate::wire::{StreamAssembler, body, parse_response};

/// Where and how to reach an OpenAI-compatible server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The API root, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8088/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set; never printed.
    pub api_key: Option<ApiKey>,
    /// More headers (OpenRouter's `HTTP-Referer`, an organisation id, ...).
    pub extra_headers: Vec<(String, String)>,
    /// Ask for server-sent events and assemble them (the same answer either way).
    pub stream: bool,
    /// The model `capabilities()` describes.
    pub model: String,
    /// Context windows by model; others get `default_context_window`.
    pub context_windows: BTreeMap<String, u32>,
    /// The window of models not listed.
    pub default_context_window: u32,
    /// The provider's name in error messages.
    pub provider: String,
    /// Connect and idle timeouts.
    pub timeouts: Timeouts,
    /// Whether the model makes native tool calls (`capabilities().supports_tools`). The
    /// protocol always carries them, but small local models behind llama.cpp answer tool
    /// requests with prose: saying so lets policies (Dream) use an edit plan instead.
    pub native_tools: bool,
}

impl OpenAiConfig {
    /// A server at `base_url` serving `model`, no key, no streaming, a 128k window.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            extra_headers: Vec::new(),
            stream: false,
            model: model.into(),
            context_windows: BTreeMap::new(),
            default_context_window: 128_000,
            provider: "openai-compatible".into(),
            timeouts: Timeouts::default(),
            native_tools: true,
        }
    }

    /// Says whether the model makes native tool calls.
    pub fn with_native_tools(mut self, native_tools: bool) -> Self {
        self.native_tools = native_tools;
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

    /// Sets `model`'s context window.
    pub fn with_context_window(mut self, model: impl Into<String>, tokens: u32) -> Self {
        self.context_windows.insert(model.into(), tokens);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_headers.push((name.into(), value.into()));
        self
    }

    /// Sets the timeouts.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

/// An `LlmClient` over `POST {base_url}/chat/completions`.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    http: HttpClient,
}

impl OpenAiClient {
    /// A client for `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        check_base_url(&config.base_url)?;
        Ok(OpenAiClient {
            http: HttpClient::new(config.timeouts)?,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = self.config.extra_headers.clone();
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization".into(), format!("Bearer {}", key.expose())));
        }
        if self.config.stream {
            headers.push(("accept".into(), "text/event-stream".into()));
        }
        headers
    }

    /// Keeps the key out of every error.
    fn scrub(&self, error: LlmError) -> LlmError {
        match &self.config.api_key {
            Some(key) => key.scrub(error),
            None => error,
        }
    }

    async fn call(
        &self,
        request: &LlmRequest,
        sink: Option<&TextSink>,
    ) -> Result<LlmResponse, LlmError> {
        let url = format!("{}/chat/completions", self.config.base_url);
        let payload = body(request, self.config.stream)?;
        let response = self.http.post_json(&url, &self.headers(), payload).await?;
        let stream = match response.into_answer(&self.config.provider, |s| s).await? {
            Answer::Whole(body) => {
                let answer = parse_response(&body)?;
                deliver(sink, &answer.message.text_content());
                return Ok(answer);
            }
            Answer::Stream(stream) => stream,
        };
        let mut answer = StreamAssembler::default();
        let tail = stream
            .each_event(|event| answer.push(&event.data, sink))
            .await?;
        // A piece without its closing blank line is the end of a cut stream.
        if let Some(event) = tail
            && answer.push(&event.data, sink).is_err()
        {
            return Err(LlmError::invalid_response(
                "the stream was cut off in the middle of a piece",
            ));
        }
        answer.finish()
    }
}

#[async_trait]
impl LlmClient for OpenAiClient {
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.call(request, None).await.map_err(|e| self.scrub(e))
    }

    async fn complete_streaming(
        &self,
        request: &LlmRequest,
        sink: &TextSink,
    ) -> Result<LlmResponse, LlmError> {
        self.call(request, Some(sink))
            .await
            .map_err(|e| self.scrub(e))
    }

    fn capabilities(&self) -> Capabilities {
        let window = self
            .config
            .context_windows
            .get(&self.config.model)
            .copied()
            .unwrap_or(self.config.default_context_window);
        let mut capabilities = Capabilities::new(window);
        capabilities.supports_tools = self.config.native_tools;
        capabilities.supports_images = true;
        capabilities.supports_structured_output = true;
        capabilities
    }
}

//! The embedder of search by meaning: an OpenAI-compatible `/v1/embeddings` server.

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_port::Embedder;

use crate::AssemblyError;

/// An OpenAI-compatible `/v1/embeddings` server, for search by meaning.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbeddingOptions {
    /// The API's base URL.
    pub base_url: String,
    /// The embedding model's name.
    pub model: String,
    /// The length of its vectors.
    pub dimensions: usize,
    /// The key, if the server wants one.
    pub api_key: Option<ApiKey>,
    /// How long one call may go without progress.
    pub request_timeout: Duration,
}

impl EmbeddingOptions {
    /// `model` at `base_url`, answering vectors of `dimensions`.
    pub fn new(base_url: &str, model: &str, dimensions: usize) -> Self {
        EmbeddingOptions {
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            dimensions,
            api_key: None,
            request_timeout: Duration::from_secs(120),
        }
    }

    /// The same options with `key`.
    pub fn api_key(mut self, key: Option<ApiKey>) -> Self {
        self.api_key = key;
        self
    }

    /// The same options with another per-call timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// The embedder `options` name.
pub fn embedder(options: &EmbeddingOptions) -> Result<Arc<dyn Embedder>, AssemblyError> {
    let mut openai = nanobot_llm_openai::OpenAiConfig::new(&options.base_url, &options.model)
        .with_api_key(options.api_key.clone())
        .with_timeouts(Timeouts::new(
            Duration::from_secs(10),
            options.request_timeout,
        ));
    openai.provider = "the embeddings server".into();
    Ok(Arc::new(nanobot_llm_openai::OpenAiEmbedder::new(
        openai,
        options.dimensions,
    )?))
}

//! The embedder of search by meaning: an OpenAI-compatible `/v1/embeddings` server, or
//! (feature `embeddings-local`) a model's folder run in this process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_http::{ApiKey, Timeouts};
use nanobot_llm_port::Embedder;

use crate::AssemblyError;

/// An OpenAI-compatible `/v1/embeddings` server, or a model's folder, for search by
/// meaning.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbeddingOptions {
    /// The model's folder (`config.json`, `vocab.txt`, `model.safetensors`) when it runs in
    /// this process (then `base_url` is unused).
    pub model_dir: Option<PathBuf>,
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
            model_dir: None,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            dimensions,
            api_key: None,
            request_timeout: Duration::from_secs(120),
        }
    }

    /// `model` run in this process from its folder `dir`; `dimensions` 0 takes the
    /// model's own (feature `embeddings-local`).
    pub fn local(dir: impl Into<PathBuf>, model: &str, dimensions: usize) -> Self {
        EmbeddingOptions {
            model_dir: Some(dir.into()),
            ..EmbeddingOptions::new("", model, dimensions)
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

/// The embedder `options` name. A model folder that is missing, damaged or of another
/// length than configured is not an error here: the embedder then refuses every call with
/// the reason (naming the file), logged once as a warning, and search answers by words
/// with a note.
pub fn embedder(options: &EmbeddingOptions) -> Result<Arc<dyn Embedder>, AssemblyError> {
    if let Some(dir) = &options.model_dir {
        return local_embedder(dir, &options.model, options.dimensions);
    }
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

#[cfg(feature = "embeddings-local")]
fn local_embedder(
    dir: &std::path::Path,
    model: &str,
    dimensions: usize,
) -> Result<Arc<dyn Embedder>, AssemblyError> {
    let loaded = nanobot_embed_local::LocalEmbedder::load(dir, model).map_err(|e| e.to_string());
    let checked = loaded.and_then(|embedder| {
        let made = embedder.model().dimensions;
        if dimensions == 0 || made == dimensions {
            Ok(embedder)
        } else {
            Err(format!(
                "embedding model {}: it makes vectors of {made} numbers, embeddings_dimensions says {dimensions}",
                dir.display()
            ))
        }
    });
    Ok(match checked {
        Ok(embedder) => Arc::new(embedder),
        Err(reason) => {
            tracing::warn!("{reason}; memory search answers by words only");
            // The length the model would make, so the lane fails (and says so) rather
            // than reads as paused by a model change.
            let dimensions = match dimensions {
                0 => configured_width(dir).unwrap_or(0),
                given => given,
            };
            Arc::new(Unavailable {
                model: nanobot_llm_port::EmbeddingModel {
                    name: model.to_owned(),
                    dimensions,
                },
                reason,
            })
        }
    })
}

#[cfg(not(feature = "embeddings-local"))]
fn local_embedder(
    dir: &std::path::Path,
    _model: &str,
    _dimensions: usize,
) -> Result<Arc<dyn Embedder>, AssemblyError> {
    Err(AssemblyError::Refused {
        why: format!(
            "embedding model {}: this build runs no model in process (nanobot-memory's feature embeddings-local)",
            dir.display()
        ),
    })
}

/// The `hidden_size` a model folder's `config.json` gives, when it can be read.
#[cfg(feature = "embeddings-local")]
fn configured_width(dir: &std::path::Path) -> Option<usize> {
    let config = std::fs::read(dir.join("config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&config).ok()?;
    usize::try_from(config["hidden_size"].as_u64()?).ok()
}

/// An embedder whose model could not be loaded: every call is refused with the reason.
#[cfg(feature = "embeddings-local")]
struct Unavailable {
    model: nanobot_llm_port::EmbeddingModel,
    reason: String,
}

#[cfg(feature = "embeddings-local")]
#[async_trait::async_trait]
impl Embedder for Unavailable {
    fn model(&self) -> nanobot_llm_port::EmbeddingModel {
        self.model.clone()
    }

    async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, nanobot_llm_port::LlmError> {
        Err(nanobot_llm_port::LlmError::permanent(self.reason.clone()))
    }
}

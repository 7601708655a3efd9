//! An `Embedder` over `POST {base_url}/embeddings` (OpenAI, llama.cpp's server started with
//! `--embeddings`, any compatible server).

use async_trait::async_trait;
use nanobot_llm_http::{Answer, HttpClient, check_base_url};
use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};
use serde_json::{Value, json};

use crate::client::OpenAiConfig;

/// Texts sent per request: servers cap a request's inputs (OpenAI at 2,048), local ones
/// by their batch size.
pub const EMBEDDING_BATCH: usize = 64;

/// Vectors from an OpenAI-compatible server. The model's dimensions are configured, not
/// guessed: they name the vectors' model together with its name, and a server answering
/// with another length is an error, never a silent mix.
#[derive(Debug, Clone)]
pub struct OpenAiEmbedder {
    config: OpenAiConfig,
    dimensions: usize,
    http: HttpClient,
}

impl OpenAiEmbedder {
    /// An embedder asking the server of `config` for `config.model`'s vectors, each of
    /// `dimensions` numbers. (`config.stream` and the tool settings do not apply.)
    pub fn new(config: OpenAiConfig, dimensions: usize) -> Result<Self, LlmError> {
        check_base_url(&config.base_url)?;
        if dimensions == 0 {
            return Err(LlmError::permanent(
                "an embedding model's dimensions must be at least 1",
            ));
        }
        Ok(OpenAiEmbedder {
            http: HttpClient::new(config.timeouts)?,
            config,
            dimensions,
        })
    }

    async fn batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let url = format!("{}/embeddings", self.config.base_url);
        let payload = json!({
            "model": self.config.model,
            "input": texts,
            "encoding_format": "float",
        });
        let mut headers = self.config.extra_headers.clone();
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization".into(), format!("Bearer {}", key.expose())));
        }
        let body = serde_json::to_vec(&payload)
            .map_err(|e| LlmError::permanent(format!("the request could not be written: {e}")))?;
        let response = self.http.post_json(&url, &headers, body).await?;
        let body = match response.into_answer(&self.config.provider, |s| s).await? {
            Answer::Whole(body) => body,
            Answer::Stream(stream) => stream.body().await?,
        };
        parse_embeddings(&body, texts.len(), self.dimensions)
    }
}

/// Reads an embeddings answer: `data` holds one `{index, embedding}` per input, each
/// `dimensions` finite numbers; in any order (put back in the inputs' order).
pub(crate) fn parse_embeddings(
    body: &[u8],
    expected: usize,
    dimensions: usize,
) -> Result<Vec<Vec<f32>>, LlmError> {
    let bad = |what: String| LlmError::invalid_response(format!("embeddings answer: {what}"));
    let value: Value = serde_json::from_slice(body).map_err(|e| bad(format!("not JSON ({e})")))?;
    let data = value
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `data` list".into()))?;
    if data.len() != expected {
        return Err(bad(format!("{} vectors for {expected} texts", data.len())));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None => position,
            Some(index) => index
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < expected)
                .ok_or_else(|| bad(format!("index {index} out of range")))?,
        };
        let numbers = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("item {index} has no `embedding` list")))?;
        if numbers.len() != dimensions {
            return Err(bad(format!(
                "{} numbers per vector; the model is configured with {dimensions}",
                numbers.len()
            )));
        }
        let vector = numbers
            .iter()
            .map(|n| n.as_f64().filter(|v| v.is_finite()).map(|v| v as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad(format!("item {index} holds something other than numbers")))?;
        if vectors[index].replace(vector).is_some() {
            return Err(bad(format!("index {index} given twice")));
        }
    }
    vectors
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("an input got no vector".into()))
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel {
            name: self.config.model.clone(),
            dimensions: self.dimensions,
        }
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(EMBEDDING_BATCH) {
            let answered = self
                .batch(batch)
                .await
                .map_err(|e| match &self.config.api_key {
                    Some(key) => key.scrub(e),
                    None => e,
                })?;
            vectors.extend(answered);
        }
        Ok(vectors)
    }
}

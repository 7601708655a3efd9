//! Embeddings: the port a vector search asks for vectors through.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::LlmError;

/// The model that made a set of vectors. Two models' vectors are not comparable, even of
/// one dimension: an index records the model of its vectors and a search with another one
/// must not mix them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EmbeddingModel {
    /// The model's name as its provider calls it (`text-embedding-3-small`,
    /// `all-MiniLM-L6-v2`, `hashing-v1`).
    pub name: String,
    /// The length of its vectors.
    pub dimensions: usize,
}

impl std::fmt::Display for EmbeddingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} dimensions)", self.name, self.dimensions)
    }
}

/// Turns text into vectors (an OpenAI-compatible `/v1/embeddings` server, a local model, a
/// hashing embedder).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model its vectors come from.
    fn model(&self) -> EmbeddingModel;

    /// One vector per text, in order, each of `model().dimensions` numbers.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError>;
}

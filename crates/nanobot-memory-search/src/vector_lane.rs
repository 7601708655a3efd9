//! The vector lane: an embedder and an index's vectors, fused with the lexical lane by
//! reciprocal rank. Vectors of one model only: when the embedder's model is not the one the
//! index holds vectors of, the lane pauses (searches are lexical, and say why) until the
//! vectors are made again with [`VectorLane::reembed`].

use std::sync::Arc;

use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};
use nanobot_memory_index::{ChunkVector, Hit, IndexError, SearchRequest, VectorIndex};

use crate::IndexingError;

/// Chunks embedded per request to the embedder.
pub const EMBED_BATCH: usize = 64;

/// Whether the vector lane can be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneState {
    /// Searches use it.
    Ready,
    /// The index holds vectors of another model than the embedder's; searches are lexical
    /// until the vectors are made again.
    Paused {
        /// The model of the vectors held.
        held: EmbeddingModel,
        /// The embedder's.
        configured: EmbeddingModel,
    },
}

impl LaneState {
    /// A sentence for the user (and the model) when the lane is not in use.
    pub fn note(&self) -> Option<String> {
        match self {
            LaneState::Ready => None,
            LaneState::Paused { held, configured } => Some(format!(
                "vector search is paused: the index holds vectors of {held}, the embedder is {configured}; `nanobot memory reindex` embeds again"
            )),
        }
    }
}

/// What an embedding pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmbedPass {
    /// Chunks given a vector.
    pub embedded: usize,
    /// Whether chunks without a vector remain (the budget ran out).
    pub more: bool,
}

/// One scope's vector lane.
#[derive(Clone)]
pub struct VectorLane {
    index: Arc<dyn VectorIndex>,
    embedder: Arc<dyn Embedder>,
}

impl VectorLane {
    /// The lane over `index`'s vectors, made by `embedder`.
    pub fn new(index: Arc<dyn VectorIndex>, embedder: Arc<dyn Embedder>) -> Self {
        VectorLane { index, embedder }
    }

    /// The model whose vectors this lane makes.
    pub fn model(&self) -> nanobot_llm_port::EmbeddingModel {
        self.embedder.model()
    }

    /// Ready, or paused by a model change.
    pub async fn state(&self) -> Result<LaneState, IndexError> {
        let configured = self.embedder.model();
        Ok(match self.index.vector_model().await? {
            Some(held) if held != configured => LaneState::Paused { held, configured },
            _ => LaneState::Ready,
        })
    }

    /// Gives vectors to up to `budget` chunks that have none (after an indexing pass). Does
    /// nothing while paused: vectors of two models never mix.
    pub async fn embed_missing(&self, budget: usize) -> Result<EmbedPass, IndexingError> {
        let mut pass = EmbedPass::default();
        if self.state().await? != LaneState::Ready {
            return Ok(pass);
        }
        let model = self.embedder.model();
        while pass.embedded < budget {
            let want = EMBED_BATCH.min(budget - pass.embedded);
            let chunks = self.index.missing_vectors(want).await?;
            if chunks.is_empty() {
                return Ok(pass);
            }
            let texts: Vec<String> = chunks.iter().map(|c| c.text.clone()).collect();
            let vectors = self
                .embedder
                .embed(&texts)
                .await
                .map_err(embedding_failed)?;
            if vectors.len() != chunks.len() {
                return Err(embedding_failed(LlmError::invalid_response(format!(
                    "{} vectors for {} texts",
                    vectors.len(),
                    chunks.len()
                ))));
            }
            let puts = chunks
                .iter()
                .zip(vectors)
                .map(|(chunk, vector)| ChunkVector {
                    group: chunk.group.clone(),
                    part: chunk.part,
                    vector,
                })
                .collect();
            self.index.put_vectors(&model, puts).await?;
            pass.embedded += chunks.len();
        }
        pass.more = !self.index.missing_vectors(1).await?.is_empty();
        Ok(pass)
    }

    /// Drops every vector and embeds everything with the embedder's model (a model change,
    /// `nanobot memory reindex`).
    pub async fn reembed(&self) -> Result<EmbedPass, IndexingError> {
        self.index.clear_vectors().await?;
        self.embed_missing(usize::MAX).await
    }

    /// The lane's hits for `request` (`None` while paused).
    pub async fn search(&self, request: &SearchRequest) -> Result<Option<Vec<Hit>>, IndexingError> {
        if self.state().await? != LaneState::Ready {
            return Ok(None);
        }
        let query = self
            .embedder
            .embed(std::slice::from_ref(&request.query))
            .await
            .map_err(embedding_failed)?;
        let Some(vector) = query.into_iter().next() else {
            return Err(embedding_failed(LlmError::invalid_response(
                "no vector for the query",
            )));
        };
        Ok(Some(self.index.nearest(&vector, request).await?))
    }
}

fn embedding_failed(error: LlmError) -> IndexingError {
    IndexingError::Embedding(error)
}

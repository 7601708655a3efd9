//! The vector lane's rules: a deterministic [`HashingEmbedder`] (an `nanobot_llm_port::Embedder`)
//! for tests and for bots without an embedding model, [`cosine`], and
//! [`reciprocal_rank_fusion`], which merges the lexical and the vector lane's rankings.

use std::collections::BTreeMap;

use async_trait::async_trait;
use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};

use crate::chunk::Chunk;
use crate::normalize::tokens;
use crate::port::{Hit, IndexError, SearchRequest};

/// Reciprocal-rank fusion's constant: a hit at rank `r` (1-based) of a lane adds
/// `1 / (RRF_K + r)` (the value of Cormack et al., used by most hybrid search engines).
pub const RRF_K: f64 = 60.0;

/// A deterministic embedder with no model: each normalised token (the index's own
/// tokens, CJK bigrams included) is hashed to one of `dimensions` slots with a sign, counts
/// are dampened (`1 + ln n`) and the vector is scaled to length 1. Texts sharing words
/// are close; paraphrases are not (that takes a real model). For tests, and for trying the
/// vector lane without an embedding server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashingEmbedder {
    dimensions: usize,
}

impl HashingEmbedder {
    /// Vectors of `dimensions` numbers (at least 1).
    pub fn new(dimensions: usize) -> Self {
        HashingEmbedder {
            dimensions: dimensions.max(1),
        }
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for token in tokens(text) {
            *counts.entry(token).or_insert(0) += 1;
        }
        let mut vector = vec![0f32; self.dimensions];
        for (token, count) in counts {
            let hash = fnv1a(token.as_bytes());
            let slot = (hash % self.dimensions as u64) as usize;
            let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
            vector[slot] += sign * (1.0 + (count as f32).ln());
        }
        let length = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        if length > 0.0 {
            vector.iter_mut().for_each(|v| *v /= length);
        }
        vector
    }
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel {
            name: "hashing-v1".to_owned(),
            dimensions: self.dimensions,
        }
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        Ok(texts.iter().map(|text| self.vector(text)).collect())
    }
}

/// FNV-1a, 64 bits: stable across platforms and releases (the std hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The cosine similarity of two vectors (0 when either is all zeros or their lengths
/// differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut aa, mut bb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        dot / (aa.sqrt() * bb.sqrt())
    }
}

/// Merges rankings of the same request (the lexical lane's, the vector lane's), each best
/// first with one hit per source, by reciprocal rank: a source's score is the sum over the
/// lanes that found it of `1 / (RRF_K + rank)`. The first `limit` by that score, ties broken
/// by source, so the same lanes always give the same list. A hit keeps the snippet of the
/// first lane that found it (the lexical one's shows the words that matched).
pub fn reciprocal_rank_fusion(lanes: &[Vec<Hit>], limit: usize) -> Vec<Hit> {
    let mut fused: BTreeMap<&str, (f64, &Hit)> = BTreeMap::new();
    for lane in lanes {
        for (rank, hit) in lane.iter().enumerate() {
            let share = 1.0 / (RRF_K + rank as f64 + 1.0);
            fused
                .entry(hit.source.as_str())
                .and_modify(|(score, _)| *score += share)
                .or_insert((share, hit));
        }
    }
    let mut ranked: Vec<(f64, &Hit)> = fused.into_values().collect();
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.source.cmp(&b.1.source))
    });
    ranked
        .into_iter()
        .take(limit)
        .map(|(score, hit)| Hit {
            score,
            ..hit.clone()
        })
        .collect()
}

/// A vector as stored by the backends: its numbers as little-endian `f32`, one after the
/// other.
pub fn encode_vector(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The vector [`encode_vector`] stored (trailing bytes short of a number are ignored).
pub fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The vector of one chunk of an index: the chunk named by its group and its part.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkVector {
    /// The chunk's group (`history#12`, `MEMORY.md`).
    pub group: String,
    /// Its position in the group.
    pub part: u32,
    /// The vector.
    pub vector: Vec<f32>,
}

/// The vector lane of a search index: vectors kept beside the index's own chunks (so a
/// replaced or removed group loses its vectors with its text), all of one model.
///
/// Contract (checked by `conformance::vector_suite`):
/// - `put_vectors` stores vectors of one model only: vectors of another model than those
///   held are refused ([`IndexError::InvalidUpdate`]); `clear_vectors` first.
/// - a chunk replaced or removed in the index loses its vector; `missing_vectors` lists
///   the chunks without one, in a fixed order, so an embedding pass can resume;
/// - `nearest` is deterministic (ties by source, then part), one hit per source, within
///   the request's sources, time bound and limit.
#[async_trait]
pub trait VectorIndex: Send + Sync {
    /// The model of the vectors held (`None`: none held).
    async fn vector_model(&self) -> Result<Option<EmbeddingModel>, IndexError>;

    /// Stores vectors of `model` for chunks the index holds (vectors for chunks it does not
    /// hold, replaced since they were read, are skipped).
    async fn put_vectors(
        &self,
        model: &EmbeddingModel,
        vectors: Vec<ChunkVector>,
    ) -> Result<(), IndexError>;

    /// Up to `limit` chunks without a vector, in (group, part) order.
    async fn missing_vectors(&self, limit: usize) -> Result<Vec<Chunk>, IndexError>;

    /// Drops every vector (the embedding model changed).
    async fn clear_vectors(&self) -> Result<(), IndexError>;

    /// The chunks nearest to `query` (cosine), best first, one hit per source.
    async fn nearest(&self, query: &[f32], request: &SearchRequest)
    -> Result<Vec<Hit>, IndexError>;
}

/// An index with both lanes: what the backends shipped here give (in memory, SQLite,
/// PostgreSQL). An `Arc<dyn SearchIndex>` coerces to either port, so one open index serves
/// the words and the vectors of a scope.
pub trait SearchIndex: crate::MemoryIndex + VectorIndex {}

impl<T: crate::MemoryIndex + VectorIndex + ?Sized> SearchIndex for T {}

/// Ranks `(score, chunk)` pairs into hits: best first, ties by source then part, one hit
/// per source, at most `limit`. Shared by the vector lanes of every backend.
pub fn best_hits<'a>(
    mut scored: Vec<(f64, &'a Chunk)>,
    limit: usize,
    snippet_of: impl Fn(&'a Chunk) -> String,
) -> Vec<Hit> {
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.source.cmp(&b.1.source))
            .then_with(|| a.1.part.cmp(&b.1.part))
    });
    let mut hits: Vec<Hit> = Vec::new();
    for (score, chunk) in scored {
        if hits.len() == limit {
            break;
        }
        if hits.iter().any(|hit| hit.source == chunk.source) {
            continue;
        }
        hits.push(Hit {
            source: chunk.source.clone(),
            kind: chunk.kind,
            at: chunk.at,
            score,
            snippet: snippet_of(chunk),
        });
    }
    hits
}

/// The refusal of vectors of `offered` by an index that holds vectors of `held` (every
/// backend says it the same way).
pub fn other_model(held: &EmbeddingModel, offered: &EmbeddingModel) -> IndexError {
    IndexError::InvalidUpdate {
        reason: format!("the index holds vectors of {held}, not {offered}; clear them first"),
    }
}

/// Refuses vectors that are not `model`'s: of another length, or not finite.
pub fn check_vectors(model: &EmbeddingModel, vectors: &[ChunkVector]) -> Result<(), IndexError> {
    for put in vectors {
        if put.vector.len() != model.dimensions {
            return Err(IndexError::InvalidUpdate {
                reason: format!(
                    "a vector of {} numbers for {}#{} ({model})",
                    put.vector.len(),
                    put.group,
                    put.part
                ),
            });
        }
        if put.vector.iter().any(|v| !v.is_finite()) {
            return Err(IndexError::InvalidUpdate {
                reason: format!(
                    "a vector with a non-finite number for {}#{}",
                    put.group, put.part
                ),
            });
        }
    }
    Ok(())
}

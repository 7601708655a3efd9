#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bert;
mod gemm;
mod safetensors;
mod tokenizer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};

use bert::{Bert, Shape};
use safetensors::Tensors;
use tokenizer::WordPiece;

/// The most tokens of a text embedded (sentence-transformers' `max_seq_length` for
/// all-MiniLM-L6-v2, and the reference server's): longer texts are cut.
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// Texts embedded together: each worker thread's share of a call is cut into batches of
/// at most this many tokens, so memory stays bounded whatever a caller passes.
const BATCH_TOKENS: usize = 4_096;

/// What went wrong loading a model; every variant names the file.
#[derive(Debug)]
#[non_exhaustive]
pub enum EmbedError {
    /// A file of the model is missing or cannot be read.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not what its format says (a truncated download, another file renamed).
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The files do not describe one model this embedder runs (a tensor missing or of
    /// another shape than the configuration's, an architecture other than BERT, a
    /// configured length of vectors the model does not make).
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
}

impl fmt::Display for EmbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbedError::Unreadable { path, source } => {
                write!(f, "embedding model {}: {source}", path.display())
            }
            EmbedError::Damaged { path, reason } => {
                write!(f, "embedding model {} is damaged: {reason}", path.display())
            }
            EmbedError::Mismatch { path, reason } => {
                write!(
                    f,
                    "embedding model {} does not match: {reason}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for EmbedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EmbedError::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A sentence-embedding model run in this process: BERT weights from a sentence-transformers
/// folder (`config.json`, `vocab.txt`, `model.safetensors`), mean pooling, unit-length
/// vectors. Calls run on blocking threads, the texts of one call spread over the machine's
/// cores.
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Model>,
    threads: usize,
}

struct Model {
    name: String,
    bert: Bert,
    tokenizer: WordPiece,
    hidden: usize,
    max_tokens: usize,
}

impl LocalEmbedder {
    /// Loads the model in `dir` under the name its vectors are recorded with (use the
    /// same name as a server of the same model, so the two can share an index's vectors).
    pub fn load(dir: &Path, name: &str) -> Result<LocalEmbedder, EmbedError> {
        let config_path = dir.join("config.json");
        let config: serde_json::Value =
            serde_json::from_slice(&read(&config_path)?).map_err(|e| EmbedError::Damaged {
                path: config_path.clone(),
                reason: format!("not JSON: {e}"),
            })?;
        let shape = shape(&config, &config_path)?;
        let vocab_path = dir.join("vocab.txt");
        let vocab = String::from_utf8(read(&vocab_path)?).map_err(|e| EmbedError::Damaged {
            path: vocab_path.clone(),
            reason: format!("not UTF-8: {e}"),
        })?;
        let tokenizer = WordPiece::new(&vocab).map_err(|reason| EmbedError::Damaged {
            path: vocab_path.clone(),
            reason,
        })?;
        if tokenizer.len() != shape.vocab {
            return Err(EmbedError::Mismatch {
                path: vocab_path,
                reason: format!(
                    "{} pieces, the config says {}",
                    tokenizer.len(),
                    shape.vocab
                ),
            });
        }
        let mut tensors = Tensors::read(&dir.join("model.safetensors"))?;
        let bert = Bert::new(shape, &mut tensors)?;
        Ok(LocalEmbedder {
            inner: Arc::new(Model {
                name: name.to_owned(),
                bert,
                tokenizer,
                hidden: shape.hidden,
                max_tokens: DEFAULT_MAX_TOKENS.min(shape.positions),
            }),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    /// The same embedder, on at most `threads` threads per call (at least one).
    pub fn with_threads(self, threads: usize) -> LocalEmbedder {
        LocalEmbedder {
            threads: threads.max(1),
            ..self
        }
    }

    /// One vector per text, computed on the calling thread (and as many more as the
    /// embedder may use).
    pub fn embed_now(&self, texts: &[String]) -> Vec<Vec<f32>> {
        self.inner.embed(texts, self.threads)
    }
}

impl Model {
    fn embed(&self, texts: &[String], threads: usize) -> Vec<Vec<f32>> {
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|text| self.tokenizer.ids(text, self.max_tokens))
            .collect();
        let shares = split_by_tokens(&ids, threads);
        let mut out: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
        std::thread::scope(|scope| {
            let running: Vec<_> = shares
                .iter()
                .map(|share| scope.spawn(|| self.embed_share(share)))
                .collect();
            for handle in running {
                // A panic in the forward pass is a bug; the caller gets no vectors for
                // those texts rather than a crash, and the length check reports it.
                out.extend(handle.join().unwrap_or_default());
            }
        });
        out
    }

    fn embed_share(&self, share: &[Vec<u32>]) -> Vec<Vec<f32>> {
        let mut out = Vec::with_capacity(share.len());
        let mut start = 0;
        while start < share.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < share.len() && (end == start || tokens + share[end].len() <= BATCH_TOKENS) {
                tokens += share[end].len();
                end += 1;
            }
            out.extend(self.bert.embed(&share[start..end]));
            start = end;
        }
        out
    }
}

/// `ids` cut into at most `parts` runs of consecutive texts with about equal tokens.
fn split_by_tokens(ids: &[Vec<u32>], parts: usize) -> Vec<&[Vec<u32>]> {
    let total: usize = ids.iter().map(Vec::len).sum();
    let target = total.div_ceil(parts.max(1)).max(1);
    let mut shares = Vec::new();
    let mut start = 0;
    let mut tokens = 0;
    for (i, text) in ids.iter().enumerate() {
        tokens += text.len();
        if tokens >= target && shares.len() + 1 < parts {
            shares.push(&ids[start..=i]);
            start = i + 1;
            tokens = 0;
        }
    }
    if start < ids.len() {
        shares.push(&ids[start..]);
    }
    shares
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| EmbedError::Unreadable {
        path: path.to_owned(),
        source,
    })
}

/// The model's shape from its `config.json`; a model other than BERT is refused.
fn shape(config: &serde_json::Value, path: &Path) -> Result<Shape, EmbedError> {
    let mismatch = |reason: String| EmbedError::Mismatch {
        path: path.to_owned(),
        reason,
    };
    let kind = config["model_type"].as_str().unwrap_or("bert");
    if kind != "bert" {
        return Err(mismatch(format!(
            "model_type {kind:?}: only BERT models run here"
        )));
    }
    let number = |key: &str| {
        config[key]
            .as_u64()
            .map(|n| n as usize)
            .filter(|&n| n > 0)
            .ok_or_else(|| mismatch(format!("no {key}")))
    };
    let shape = Shape {
        hidden: number("hidden_size")?,
        heads: number("num_attention_heads")?,
        layers: number("num_hidden_layers")?,
        intermediate: number("intermediate_size")?,
        positions: number("max_position_embeddings")?,
        vocab: number("vocab_size")?,
        eps: config["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
    };
    if !shape.hidden.is_multiple_of(shape.heads) {
        return Err(mismatch(format!(
            "hidden_size {} is not a multiple of {} heads",
            shape.hidden, shape.heads
        )));
    }
    Ok(shape)
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel {
            name: self.inner.name.clone(),
            dimensions: self.inner.hidden,
        }
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let model = self.inner.clone();
        let threads = self.threads;
        let texts = texts.to_vec();
        let count = texts.len();
        let vectors = tokio::task::spawn_blocking(move || model.embed(&texts, threads))
            .await
            .map_err(|e| LlmError::permanent(format!("the local embedder failed: {e}")))?;
        if vectors.len() != count {
            return Err(LlmError::permanent(format!(
                "the local embedder made {} vectors for {count} texts",
                vectors.len()
            )));
        }
        Ok(vectors)
    }
}

//! The meaning lane's embedder for the eval: all-MiniLM-L6-v2 in process, each distinct
//! text embedded once for every backend and storage of the run.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_embed_local::LocalEmbedder;
use nanobot_llm_port::{Embedder, EmbeddingModel, LlmError};

/// The local embedder with a memory of what it embedded.
#[derive(Clone)]
pub(crate) struct CachedEmbedder {
    embedder: LocalEmbedder,
    known: Arc<Mutex<HashMap<String, Vec<f32>>>>,
}

impl CachedEmbedder {
    /// all-MiniLM-L6-v2 from `dir`.
    pub(crate) fn load(dir: &Path) -> Result<CachedEmbedder, String> {
        let embedder = LocalEmbedder::load(dir, "all-MiniLM-L6-v2").map_err(|e| e.to_string())?;
        Ok(CachedEmbedder {
            embedder,
            known: Arc::default(),
        })
    }
}

#[async_trait]
impl Embedder for CachedEmbedder {
    fn model(&self) -> EmbeddingModel {
        self.embedder.model()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        let missing: Vec<String> = {
            let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            texts
                .iter()
                .filter(|t| !known.contains_key(*t))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            let vectors = self.embedder.embed(&missing).await?;
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            known.extend(missing.into_iter().zip(vectors));
        }
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        texts
            .iter()
            .map(|t| {
                known
                    .get(t)
                    .cloned()
                    .ok_or_else(|| LlmError::permanent("a text was not embedded"))
            })
            .collect()
    }
}

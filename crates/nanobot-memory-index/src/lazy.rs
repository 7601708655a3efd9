//! An index opened on first use, so a scope whose memory is never searched costs no index
//! file and no open.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use nanobot_llm_port::EmbeddingModel;

use crate::chunk::Chunk;
use crate::port::{GroupUpdate, Hit, IndexError, IndexStats, MemoryIndex, SearchRequest};
use crate::vectors::{ChunkVector, SearchIndex, VectorIndex};

/// Opens the index behind a [`LazyIndex`].
pub type IndexOpener = Box<dyn Fn() -> Result<Arc<dyn SearchIndex>, IndexError> + Send + Sync>;

/// A [`MemoryIndex`] and [`VectorIndex`] opened by its opener on the first call of either
/// lane. A failed open is the call's error and is tried again on the next call (the
/// directory may become writable).
pub struct LazyIndex {
    open: IndexOpener,
    opened: Mutex<Option<Arc<dyn SearchIndex>>>,
}

impl LazyIndex {
    /// An index that `open` opens when first used. `open` runs on the calling task: keep
    /// it short (opening a file, not indexing).
    pub fn new(open: IndexOpener) -> Self {
        LazyIndex {
            open,
            opened: Mutex::new(None),
        }
    }

    /// The index, opened now if it was not yet.
    pub fn get(&self) -> Result<Arc<dyn SearchIndex>, IndexError> {
        let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = &*opened {
            return Ok(index.clone());
        }
        let index = (self.open)()?;
        *opened = Some(index.clone());
        Ok(index)
    }

    /// Whether the index has been opened.
    pub fn is_open(&self) -> bool {
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

impl std::fmt::Debug for LazyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyIndex")
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl MemoryIndex for LazyIndex {
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError> {
        self.get()?.replace(updates).await
    }

    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError> {
        self.get()?.remove_prefix(prefix).await
    }

    async fn purge(&self) -> Result<(), IndexError> {
        self.get()?.purge().await
    }

    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError> {
        self.get()?.search(request).await
    }

    async fn stats(&self) -> Result<IndexStats, IndexError> {
        self.get()?.stats().await
    }

    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError> {
        self.get()?.marks().await
    }

    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError> {
        self.get()?.set_marks(marks).await
    }
}

#[async_trait]
impl VectorIndex for LazyIndex {
    async fn vector_model(&self) -> Result<Option<EmbeddingModel>, IndexError> {
        self.get()?.vector_model().await
    }

    async fn put_vectors(
        &self,
        model: &EmbeddingModel,
        vectors: Vec<ChunkVector>,
    ) -> Result<(), IndexError> {
        self.get()?.put_vectors(model, vectors).await
    }

    async fn missing_vectors(&self, limit: usize) -> Result<Vec<Chunk>, IndexError> {
        self.get()?.missing_vectors(limit).await
    }

    async fn clear_vectors(&self) -> Result<(), IndexError> {
        self.get()?.clear_vectors().await
    }

    async fn nearest(
        &self,
        query: &[f32],
        request: &SearchRequest,
    ) -> Result<Vec<Hit>, IndexError> {
        self.get()?.nearest(query, request).await
    }
}

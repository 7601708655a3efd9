//! An index opened on first use, so a scope whose memory is never searched costs no index
//! file and no open.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::port::{GroupUpdate, Hit, IndexError, IndexStats, MemoryIndex, SearchRequest};

/// Opens the index behind a [`LazyIndex`].
pub type IndexOpener = Box<dyn Fn() -> Result<Arc<dyn MemoryIndex>, IndexError> + Send + Sync>;

/// A [`MemoryIndex`] opened by its opener on the first call. A failed open is the call's
/// error and is tried again on the next call (the directory may become writable).
pub struct LazyIndex {
    open: IndexOpener,
    opened: Mutex<Option<Arc<dyn MemoryIndex>>>,
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
    pub fn get(&self) -> Result<Arc<dyn MemoryIndex>, IndexError> {
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

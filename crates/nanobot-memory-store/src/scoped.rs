//! The documents of a user's or a chat's scope: its own `USER.md`, `memory/MEMORY.md` and
//! Dream records, with the agent's `SOUL.md` and skills shared and read-only.

use std::sync::Arc;

use async_trait::async_trait;

use crate::documents::{
    AuxFile, DocVersion, Document, DocumentCapabilities, DocumentText, DocumentsStamp, Expected,
    MemoryDocuments, SkillSet, skill_path,
};
use crate::error::MemoryError;

/// A scope's documents over two stores: reads go to the scope's own store, except
/// `SOUL.md` and skills, which come from the agent's; writes to those are refused with
/// [`MemoryError::ReadOnly`]. Reads go upward only (scope → agent), never sideways, so two
/// scopes never see each other's files.
pub struct ScopedDocuments {
    own: Arc<dyn MemoryDocuments>,
    shared: Arc<dyn MemoryDocuments>,
}

impl std::fmt::Debug for ScopedDocuments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedDocuments").finish_non_exhaustive()
    }
}

impl ScopedDocuments {
    /// `own` documents, with `SOUL.md` and skills read from the agent's `shared` ones.
    pub fn new(own: Arc<dyn MemoryDocuments>, shared: Arc<dyn MemoryDocuments>) -> Self {
        ScopedDocuments { own, shared }
    }

    /// Whether `document` is the agent's, shared by every scope.
    pub fn is_shared(document: Document) -> bool {
        document == Document::Soul
    }
}

#[async_trait]
impl MemoryDocuments for ScopedDocuments {
    async fn read(&self, document: Document) -> Result<Option<DocumentText>, MemoryError> {
        if Self::is_shared(document) {
            self.shared.read(document).await
        } else {
            self.own.read(document).await
        }
    }

    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        if Self::is_shared(document) {
            return Err(MemoryError::ReadOnly {
                path: document.path().to_owned(),
            });
        }
        self.own.write(document, text, expected).await
    }

    async fn skills(&self) -> Result<SkillSet, MemoryError> {
        self.shared.skills().await
    }

    async fn read_skill(&self, name: &str) -> Result<Option<DocumentText>, MemoryError> {
        self.shared.read_skill(name).await
    }

    async fn write_skill(
        &self,
        name: &str,
        _text: &str,
        _expected: Expected,
    ) -> Result<DocVersion, MemoryError> {
        Err(MemoryError::ReadOnly {
            path: skill_path(name),
        })
    }

    async fn delete_skill(&self, name: &str, _expected: Expected) -> Result<bool, MemoryError> {
        Err(MemoryError::ReadOnly {
            path: skill_path(name),
        })
    }

    async fn read_aux(&self, file: AuxFile) -> Result<Option<String>, MemoryError> {
        match self.own.read_aux(file).await? {
            // The operator's Dream instructions apply to every scope unless it has its own.
            None if file == AuxFile::DreamPrompt => self.shared.read_aux(file).await,
            found => Ok(found),
        }
    }

    async fn write_aux(&self, file: AuxFile, text: &str) -> Result<(), MemoryError> {
        self.own.write_aux(file, text).await
    }

    async fn stamp(&self) -> Result<Option<DocumentsStamp>, MemoryError> {
        // Both stores are read together: a stamp only when both give one.
        let Some(own) = self.own.stamp().await? else {
            return Ok(None);
        };
        Ok(self.shared.stamp().await?.map(|shared| own.combine(shared)))
    }

    fn capabilities(&self) -> DocumentCapabilities {
        self.own.capabilities()
    }
}

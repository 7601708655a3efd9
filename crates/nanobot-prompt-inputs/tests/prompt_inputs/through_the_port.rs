//! Issue 14, "prompt inputs through the ports": what the prompt shows is what the document
//! port holds, whatever the backend: here an in-memory store, and a user's scope over it.

use std::sync::Arc;

use nanobot_memory_store::{
    Document, Expected, InMemoryDocuments, MemoryDocuments, ScopedDocuments,
};
use nanobot_prompt_inputs::PromptLoader;

#[tokio::test]
async fn a_non_file_backend_changes_what_the_prompt_shows() {
    let store = Arc::new(InMemoryDocuments::new());
    let loader = PromptLoader::new(store.clone());
    let empty = loader.load().await.unwrap();
    assert_eq!(empty.user_md, None);
    assert!(empty.skills.is_empty());

    let user = store
        .write(Document::User, "# User\n- Name: Ada\n", Expected::Absent)
        .await
        .unwrap();
    store
        .write_skill(
            "tea",
            "---\ndescription: Brews tea.\n---\nBoil water.\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    let loaded = loader.load().await.unwrap();
    assert_eq!(loaded.user_md.as_deref(), Some("# User\n- Name: Ada\n"));
    assert_eq!(loaded.skills.len(), 1);
    assert_eq!(loaded.skills[0].description(), "Brews tea.");
    assert_eq!(loaded.skills[0].body, "Boil water.");

    store
        .write(
            Document::User,
            "# User\n- Name: Ada\n- Likes tea\n",
            Expected::Version(user),
        )
        .await
        .unwrap();
    let again = loader.load().await.unwrap();
    assert_eq!(
        again.user_md.as_deref(),
        Some("# User\n- Name: Ada\n- Likes tea\n")
    );
    assert!(
        Arc::ptr_eq(&loaded.skills[0], &again.skills[0]),
        "an unchanged skill is not parsed again"
    );
}

#[tokio::test]
async fn a_scope_reads_its_own_private_files_and_the_agents_shared_ones() {
    let agent = Arc::new(InMemoryDocuments::new());
    agent
        .write(Document::Soul, "# Soul\nCalm.\n", Expected::Absent)
        .await
        .unwrap();
    agent
        .write(Document::User, "# User\n- the operator\n", Expected::Absent)
        .await
        .unwrap();
    agent
        .write_skill(
            "shared",
            "---\ndescription: For all.\n---\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    let own = Arc::new(InMemoryDocuments::new());
    own.write(Document::User, "# User\n- Bob\n", Expected::Absent)
        .await
        .unwrap();
    let scoped = Arc::new(ScopedDocuments::new(own, agent));
    let loaded = PromptLoader::new(scoped).load().await.unwrap();
    assert_eq!(loaded.soul_md.as_deref(), Some("# Soul\nCalm.\n"));
    assert_eq!(loaded.user_md.as_deref(), Some("# User\n- Bob\n"));
    assert_eq!(loaded.memory_md, None, "never the agent's private files");
    assert_eq!(loaded.skills[0].name(), "shared");
}

/// A document port that counts its reads, over an in-memory store; `stamps` says whether
/// it passes the store's stamp on or has none.
struct Counting {
    inner: Arc<InMemoryDocuments>,
    reads: std::sync::atomic::AtomicUsize,
    stamps: bool,
}

impl Counting {
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn count(&self) {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl MemoryDocuments for Counting {
    async fn read(
        &self,
        document: Document,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, nanobot_memory_store::MemoryError> {
        self.count();
        self.inner.read(document).await
    }
    async fn write(
        &self,
        document: Document,
        text: &str,
        expected: Expected,
    ) -> Result<nanobot_memory_store::DocVersion, nanobot_memory_store::MemoryError> {
        self.inner.write(document, text, expected).await
    }
    async fn skills(
        &self,
    ) -> Result<nanobot_memory_store::SkillSet, nanobot_memory_store::MemoryError> {
        self.count();
        self.inner.skills().await
    }
    async fn read_skill(
        &self,
        name: &str,
    ) -> Result<Option<nanobot_memory_store::DocumentText>, nanobot_memory_store::MemoryError> {
        self.count();
        self.inner.read_skill(name).await
    }
    async fn write_skill(
        &self,
        name: &str,
        text: &str,
        expected: Expected,
    ) -> Result<nanobot_memory_store::DocVersion, nanobot_memory_store::MemoryError> {
        self.inner.write_skill(name, text, expected).await
    }
    async fn delete_skill(
        &self,
        name: &str,
        expected: Expected,
    ) -> Result<bool, nanobot_memory_store::MemoryError> {
        self.inner.delete_skill(name, expected).await
    }
    async fn read_aux(
        &self,
        file: nanobot_memory_store::AuxFile,
    ) -> Result<Option<String>, nanobot_memory_store::MemoryError> {
        self.inner.read_aux(file).await
    }
    async fn write_aux(
        &self,
        file: nanobot_memory_store::AuxFile,
        text: &str,
    ) -> Result<(), nanobot_memory_store::MemoryError> {
        self.inner.write_aux(file, text).await
    }
    async fn stamp(
        &self,
    ) -> Result<Option<nanobot_memory_store::DocumentsStamp>, nanobot_memory_store::MemoryError>
    {
        if self.stamps {
            self.inner.stamp().await
        } else {
            Ok(None)
        }
    }
    fn capabilities(&self) -> nanobot_memory_store::DocumentCapabilities {
        self.inner.capabilities()
    }
}

#[tokio::test]
async fn with_a_stamp_unchanged_documents_are_not_read_again_and_changes_are_seen() {
    for stamps in [true, false] {
        let store = Arc::new(InMemoryDocuments::new());
        let port = Arc::new(Counting {
            inner: store.clone(),
            reads: 0.into(),
            stamps,
        });
        store
            .write(Document::Memory, "# Memory\n- one\n", Expected::Absent)
            .await
            .unwrap();
        let loader = PromptLoader::new(port.clone());
        let first = loader.load().await.unwrap();
        let per_load = port.reads();
        assert_eq!(per_load, 4, "three documents and the skill listing");
        let second = loader.load().await.unwrap();
        assert_eq!(second.memory_md, first.memory_md);
        let expected_reads = if stamps { per_load } else { 2 * per_load };
        assert_eq!(port.reads(), expected_reads, "stamps: {stamps}");

        store
            .write(Document::Memory, "# Memory\n- two\n", Expected::Any)
            .await
            .unwrap();
        store
            .write_skill("tea", "---\ndescription: Tea.\n---\n", Expected::Absent)
            .await
            .unwrap();
        let changed = loader.load().await.unwrap();
        assert_eq!(changed.memory_md.as_deref(), Some("# Memory\n- two\n"));
        assert_eq!(changed.skills.len(), 1);
        assert_eq!(port.reads(), expected_reads + per_load);
    }
}

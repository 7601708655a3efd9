//! Issue 14, "prompt inputs through the ports": what the prompt shows is what the document
//! port holds, whatever the backend: here an in-memory store, and a user's scope over it.

use std::sync::Arc;

use memory_store::{Document, Expected, MemoryDocumentStore, MemoryDocuments, ScopedDocuments};
use prompt_inputs::PromptLoader;

#[tokio::test]
async fn a_non_file_backend_changes_what_the_prompt_shows() {
    let store = Arc::new(MemoryDocumentStore::new());
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
    let agent = Arc::new(MemoryDocumentStore::new());
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
    let own = Arc::new(MemoryDocumentStore::new());
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

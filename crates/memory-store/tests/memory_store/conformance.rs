//! Both journals run the whole conformance suite.

use memory_store::{FileJournal, MemoryJournal};

use crate::support::TempDir;

memory_store::journal_conformance!(memory, || async { MemoryJournal::default() });

memory_store::journal_conformance!(files, || async {
    // Leaked on purpose: the directory must outlive the journal the case receives.
    let dir = Box::leak(Box::new(TempDir::new("conformance")));
    FileJournal::open(dir.path()).unwrap()
});

memory_store::documents_conformance!(memory_documents, || async {
    memory_store::MemoryDocumentStore::new()
});

memory_store::documents_conformance!(file_documents, || async {
    let dir = Box::leak(Box::new(TempDir::new("documents")));
    memory_store::FileDocuments::open(dir.path()).unwrap()
});

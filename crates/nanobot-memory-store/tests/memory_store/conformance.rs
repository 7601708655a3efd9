//! Every backend runs the whole conformance suites: in memory and on files.

use nanobot_memory_store::conformance::ScopeParts;
use nanobot_memory_store::{
    FileDocuments, FileJournal, FileLease, GitVersions, InMemoryDocuments, InMemoryJournal,
    InMemoryLease, InMemoryVersions,
};

use crate::support::TempDir;

/// A directory that outlives the case (the temp root is cleaned by the OS).
fn leaked_dir(name: &str) -> std::path::PathBuf {
    Box::leak(Box::new(TempDir::new(name))).path().to_owned()
}

nanobot_memory_store::journal_conformance!(
    memory,
    || async { InMemoryJournal::default() },
    skips = [shared_cursors]
);

nanobot_memory_store::journal_import_conformance!(memory_import, || async {
    InMemoryJournal::default()
});

nanobot_memory_store::journal_import_conformance!(files_import, || async {
    FileJournal::open(&leaked_dir("journal-import")).unwrap()
});

nanobot_memory_store::journal_conformance!(
    files,
    || async { FileJournal::open(&leaked_dir("journal")).unwrap() },
    reopen = |first: &FileJournal| {
        let workspace = first.dir().parent().unwrap().to_owned();
        async move { FileJournal::open(&workspace).unwrap() }
    }
);

nanobot_memory_store::documents_conformance!(
    memory_documents,
    || async { InMemoryDocuments::new() },
    skips = [shared_documents]
);

nanobot_memory_store::documents_conformance!(
    file_documents,
    || async { FileDocuments::open(&leaked_dir("documents")).unwrap() },
    reopen = |first: &FileDocuments| {
        let workspace = first.workspace().to_owned();
        async move { FileDocuments::open(&workspace).unwrap() }
    }
);

nanobot_memory_store::versions_conformance!(
    memory_versions,
    || async { InMemoryVersions::new() },
    skips = [shared_versions]
);

nanobot_memory_store::versions_conformance!(
    git_versions,
    || async { GitVersions::open(&leaked_dir("versions")).unwrap() },
    reopen = |first: &GitVersions| {
        let workspace = first.dir().parent().unwrap().parent().unwrap().to_owned();
        async move { GitVersions::open(&workspace).unwrap() }
    }
);

nanobot_memory_store::lease_conformance!(
    memory_lease,
    || async { InMemoryLease::new() },
    skips = [shared_lease]
);

nanobot_memory_store::lease_conformance!(
    file_lease,
    || async { FileLease::open(&leaked_dir("lease")).unwrap() },
    reopen = |first: &FileLease| {
        let workspace = first.workspace().to_owned();
        async move { FileLease::open(&workspace).unwrap() }
    },
    skips = [lease_expiry, lease_renewal]
);

nanobot_memory_store::scope_conformance!(memory_scope, || async { ScopeParts::in_memory(None) });

nanobot_memory_store::scope_conformance!(file_scope, || async { file_scope(&leaked_dir("scope")) });

/// Every part of a scope on files, as the app opens them.
fn file_scope(workspace: &std::path::Path) -> ScopeParts {
    use std::sync::Arc;
    let sessions: Arc<dyn nanobot_session_store::SessionStore> = Arc::new(
        nanobot_session_store::FileSessionStore::open_workspace(workspace, Default::default())
            .unwrap(),
    );
    let journal = Arc::new(FileJournal::open(workspace).unwrap());
    let documents: Arc<dyn nanobot_memory_store::MemoryDocuments> =
        Arc::new(FileDocuments::open(workspace).unwrap());
    let versions: Arc<dyn nanobot_memory_store::MemoryVersions> =
        Arc::new(GitVersions::open(workspace).unwrap());
    let lease: Arc<dyn nanobot_memory_store::MemoryLease> =
        Arc::new(FileLease::open(workspace).unwrap());
    ScopeParts {
        archive: Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.clone(),
        )),
        commit: Arc::new(nanobot_memory_store::StepwiseCommit::new(
            documents.clone(),
            journal.clone(),
            Some(versions.clone()),
            lease.clone(),
        )),
        sessions,
        journal,
        documents,
        versions,
        lease,
    }
}

/// The method lists the isolation suite enumerates are the traits', method for method.
#[test]
fn the_port_method_lists_are_the_traits() {
    use nanobot_memory_store::conformance::PORT_METHODS;
    use nanobot_session_store::conformance::declared_methods;
    let sources = [
        ("HistoryJournal", include_str!("../../src/journal.rs")),
        ("MemoryDocuments", include_str!("../../src/documents.rs")),
        ("MemoryVersions", include_str!("../../src/versions.rs")),
        ("MemoryLease", include_str!("../../src/lease.rs")),
        ("SessionArchive", include_str!("../../src/archive.rs")),
        ("MemoryCommit", include_str!("../../src/commit.rs")),
    ];
    assert_eq!(PORT_METHODS.len(), sources.len());
    for ((port, listed), (name, source)) in PORT_METHODS.iter().zip(sources) {
        assert_eq!(*port, name);
        assert_eq!(declared_methods(source, port), *listed, "{port}");
    }
}

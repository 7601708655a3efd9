//! Both backends run the whole conformance suite.

use nanobot_session_store::InMemorySessionStore;

use crate::support::{TempDir, file_store};

nanobot_session_store::session_store_conformance!(
    memory,
    || async { InMemorySessionStore::new() },
    skips = [shared_turn_locks, shared_stale_writers]
);

nanobot_session_store::session_store_conformance!(
    files,
    || async {
        // Leaked on purpose: the directory must outlive the store the case receives; the
        // temp root is cleaned by the OS.
        let dir = Box::leak(Box::new(TempDir::new("conformance")));
        file_store(dir.path())
    },
    reopen = |first: &nanobot_session_store::FileSessionStore| {
        let dir = first.dir().to_owned();
        async move { file_store(&dir) }
    }
);

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

/// The method list the isolation suite enumerates is the trait's, method for method.
#[test]
fn the_port_method_list_is_the_traits() {
    use nanobot_session_store::conformance::{PORT_METHODS, declared_methods};
    let source = include_str!("../../src/store.rs");
    for (port, listed) in PORT_METHODS {
        assert_eq!(declared_methods(source, port), *listed, "{port}");
    }
}

#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Sessions: the [`SessionStore`](nanobot_session_store::SessionStore) suite, one test per
/// case through [`session_store_conformance!`](sessions::session_store_conformance).
pub mod sessions {
    pub use nanobot_session_store::conformance::*;
    pub use nanobot_session_store::session_store_conformance;
}

/// The memory ports: journal, documents, versions, lease, and the archive and memory
/// commits that span them, one test per case through their macros.
pub mod memory {
    pub use nanobot_memory_store::conformance::*;
    pub use nanobot_memory_store::{
        documents_conformance, journal_conformance, journal_import_conformance, lease_conformance,
        scope_conformance, versions_conformance,
    };
}

/// Scopes: the operator's identity links
/// ([`LinkTable`](nanobot_memory_scope::LinkTable)), through
/// [`links_conformance!`](scopes::links_conformance).
pub mod scopes {
    pub use nanobot_memory_scope::conformance::*;
    pub use nanobot_memory_scope::links_conformance;
}

/// Search: a [`MemoryIndex`](nanobot_memory_index::MemoryIndex) over the labelled corpus
/// this suite carries ([`index::run`]), and a
/// [`VectorIndex`](nanobot_memory_index::VectorIndex) ([`index::vector_suite`]).
pub mod index {
    pub use nanobot_memory_index::conformance::*;
}

/// A whole [`MemoryBackend`](nanobot_turn::MemoryBackend): two users and a group chat must
/// never see each other's memory through any port method
/// ([`isolation::isolation_suite`]).
pub mod isolation {
    pub use nanobot_turn::conformance::*;
}

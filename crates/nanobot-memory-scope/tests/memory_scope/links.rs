//! The link-table suite on both backends (PostgreSQL runs it in store-postgres).

use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_memory_scope::{FileLinks, InMemoryLinks};

nanobot_memory_scope::links_conformance!(
    memory,
    || async { Arc::new(InMemoryLinks::new()) },
    reopen = |first: &Arc<InMemoryLinks>| {
        let first = first.clone();
        async move { first }
    }
);

nanobot_memory_scope::links_conformance!(
    files,
    || async {
        // Leaked: the directory must outlive the case (the temp root is cleaned by the OS).
        let dir = Box::leak(Box::new(TempDir::new("links")));
        Arc::new(FileLinks::new(dir.path()))
    },
    reopen = |first: &Arc<FileLinks>| {
        let workspace = first.path().parent().unwrap().parent().unwrap().to_owned();
        async move { Arc::new(FileLinks::new(&workspace)) }
    }
);

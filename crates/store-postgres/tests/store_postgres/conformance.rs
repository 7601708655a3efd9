//! Every conformance suite on PostgreSQL, with no skips: the session, journal, document,
//! versions and lease suites (each with its two-instance cases run through a second pool),
//! and the archive and memory commits.

use memory_store::conformance::ScopeParts;
use std::sync::Arc;
use store_postgres::PgScope;

use crate::support::{available, reopen, scope};

session_store::session_store_conformance!(
    pg_sessions,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

memory_store::journal_conformance!(
    pg_journal,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

memory_store::documents_conformance!(
    pg_documents,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

memory_store::versions_conformance!(
    pg_versions,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

memory_store::lease_conformance!(
    pg_lease,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

memory_store::scope_conformance!(
    pg_scope,
    || async {
        let scope = Arc::new(scope().await);
        ScopeParts {
            sessions: scope.clone(),
            journal: scope.clone(),
            documents: scope.clone(),
            versions: scope.clone(),
            lease: scope.clone(),
            archive: scope.clone(),
            commit: scope,
        }
    },
    available = available
);

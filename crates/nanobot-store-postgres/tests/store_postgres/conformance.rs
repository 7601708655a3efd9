//! Every conformance suite on PostgreSQL, with no skips: the session, journal, document,
//! versions and lease suites (each with its two-instance cases run through a second pool),
//! and the archive and memory commits.

use nanobot_memory_store::conformance::ScopeParts;
use nanobot_store_postgres::{PgLinks, PgScope};
use std::sync::Arc;

use crate::support::{available, reopen, scope, store};

nanobot_session_store::session_store_conformance!(
    pg_sessions,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

nanobot_memory_store::journal_import_conformance!(
    pg_journal_import,
    || async { scope().await },
    available = available
);

nanobot_memory_store::journal_conformance!(
    pg_journal,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

nanobot_memory_store::documents_conformance!(
    pg_documents,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

nanobot_memory_store::versions_conformance!(
    pg_versions,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

nanobot_memory_store::lease_conformance!(
    pg_lease,
    || async { scope().await },
    reopen = |first: &PgScope| {
        let first = first.clone();
        async move { reopen(&first).await }
    },
    available = available
);

nanobot_memory_store::scope_conformance!(
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

nanobot_memory_scope::links_conformance!(
    pg_links,
    || async { Arc::new(store().await.links()) },
    reopen = |first: &Arc<PgLinks>| {
        let store = first.store();
        async move {
            Arc::new(
                nanobot_store_postgres::testing::second_instance(&store)
                    .await
                    .links(),
            )
        }
    },
    available = available
);

//! Shared fixtures: a fresh schema per test, and a second instance over it.

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_store_postgres::testing::{TestSchema, second_instance, url};
use nanobot_store_postgres::{PgScope, PgStore};

/// Whether the test database is named; records the skip when it is not.
pub(crate) fn available() -> bool {
    if url().is_some() {
        return true;
    }
    nanobot_bench_workload::testing::skip(
        "store-postgres",
        "NANOBOT_TEST_PG_URL is not set (`cargo xtask ci` sets it to the local PostgreSQL)",
    );
    false
}

/// A store over a fresh schema, dropped with its last handle.
pub(crate) async fn store() -> PgStore {
    let url = url().expect("the test database");
    TestSchema::new(&url).store().await
}

/// The agent scope of a fresh store.
pub(crate) async fn scope() -> PgScope {
    store()
        .await
        .scope(&ScopeKey::local(Subject::Agent))
        .await
        .unwrap()
}

/// The same scope through a second instance (a pool of its own).
pub(crate) async fn reopen(scope: &PgScope) -> PgScope {
    let other = second_instance(&scope.store()).await;
    other.scope(scope.key()).await.unwrap()
}

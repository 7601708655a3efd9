//! The migrator's refusals and the test-schema sweep: a schema a newer release migrated is
//! read when that release says older ones may, refused with `TooNew` when it says they may
//! not; an applied migration whose SQL differs is refused with `ChecksumMismatch`; schemas
//! killed test runs left behind are dropped after an hour, fresh ones are kept.

use std::time::Duration;

use nanobot_store_postgres::testing::{TestSchema, sweep, url};
use nanobot_store_postgres::{PgStore, StoreError, latest_migration as latest};
use sqlx::postgres::PgPoolOptions;

use crate::support::{available, store};

async fn pool() -> sqlx::PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url().unwrap())
        .await
        .unwrap()
}

/// A statement built at run time (test code names its own schemas).
fn sql(text: String) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(text))
}

async fn schema_exists(pool: &sqlx::PgPool, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Records in `store`'s schema a migration newer than this release knows, with the given
/// `min_reader`.
async fn pretend_newer_release(store: &PgStore, min_reader: i64) {
    let q = store.schema().quoted();
    sql(format!(
        "INSERT INTO {q}.migrations (version, name, checksum) VALUES ($1, 'from the future', 'x') ON CONFLICT (version) DO NOTHING"
    ))
    .bind(latest() + 1)
    .execute(&store.pool())
    .await
    .unwrap();
    sql(format!(
        "INSERT INTO {q}.meta (key, value) VALUES ('min_reader', $1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
    ))
    .bind(min_reader.to_string())
    .execute(&store.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn a_newer_additive_schema_opens_and_a_newer_breaking_one_is_refused() {
    if !available() {
        return;
    }
    let store = store().await;
    let name = store.schema().name().to_owned();

    pretend_newer_release(&store, latest()).await;
    let reopened = PgStore::with_pool(store.pool(), &name).await;
    assert!(reopened.is_ok(), "additive: {:?}", reopened.err());

    pretend_newer_release(&store, latest() + 1).await;
    match PgStore::with_pool(store.pool(), &name).await {
        Err(StoreError::TooNew {
            known,
            applied,
            min_reader,
        }) => {
            assert_eq!(
                (known, applied, min_reader),
                (latest(), latest() + 1, latest() + 1)
            );
        }
        other => panic!("expected TooNew, got {:?}", other.map(|_| ())),
    }
    let message = PgStore::with_pool(store.pool(), &name)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("upgrade nanobot-rs"), "{message}");
}

#[tokio::test]
async fn an_applied_migration_whose_sql_changed_is_refused() {
    if !available() {
        return;
    }
    let store = store().await;
    let q = store.schema().quoted();
    sql(format!(
        "UPDATE {q}.migrations SET checksum = 'edited' WHERE version = 1"
    ))
    .execute(&store.pool())
    .await
    .unwrap();
    match PgStore::with_pool(store.pool(), store.schema().name()).await {
        Err(StoreError::ChecksumMismatch { version, name }) => {
            assert_eq!((version, name.as_str()), (1, "initial"));
        }
        other => panic!("expected ChecksumMismatch, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn the_sweep_drops_abandoned_test_schemas_and_keeps_fresh_ones() {
    if !available() {
        return;
    }
    let pool = pool().await;
    let abandoned = format!("t_1000_{}_sweep", std::process::id());
    sql(format!("CREATE SCHEMA IF NOT EXISTS \"{abandoned}\""))
        .execute(&pool)
        .await
        .unwrap();
    sql(format!("CREATE TABLE \"{abandoned}\".left_behind (x int)"))
        .execute(&pool)
        .await
        .unwrap();
    let fresh = store().await;
    let fresh_name = fresh.schema().name().to_owned();

    sweep(&url().unwrap()).await;

    assert!(
        !schema_exists(&pool, &abandoned).await,
        "the abandoned schema stays"
    );
    assert!(
        schema_exists(&pool, &fresh_name).await,
        "a fresh schema went"
    );
    drop(fresh);
    assert!(
        !schema_exists(&pool, &fresh_name).await,
        "a test's schema outlives its store"
    );
    // A fresh name from the harness carries the current time, so the sweep keeps it.
    let next = TestSchema::new(&url().unwrap());
    assert!(next.name().starts_with("t_"), "{}", next.name());
    pool.close().await;
}

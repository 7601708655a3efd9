//! Test support (feature `test-util`): a fresh schema per test in the database
//! `NANOBOT_TEST_PG_URL` names, dropped when the last handle on it goes, and a sweep of the
//! schemas earlier runs left behind. Test code only: failures panic with the reason.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::PgPoolOptions;

use crate::{Inner, PgStore, Schema};

/// The variable naming the test database (`postgres://postgres@127.0.0.1:5432/test`).
pub const URL_VAR: &str = "NANOBOT_TEST_PG_URL";

/// The test database's URL, if the environment names one.
pub fn url() -> Option<String> {
    std::env::var(URL_VAR).ok().filter(|v| !v.is_empty())
}

/// The most connections a test's pool opens (the suite runs a few tests at once, well under
/// the server's `max_connections`).
pub const TEST_POOL: u32 = 4;

/// Drops its schema when dropped: the last handle on a test's store takes its tables with
/// it. The drop runs on a thread of its own, so it works inside and outside a runtime.
struct DropSchema {
    url: String,
    schema: String,
}

impl Drop for DropSchema {
    fn drop(&mut self) {
        let (url, schema) = (self.url.clone(), self.schema.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleanup");
            runtime.block_on(async move {
                if let Ok(pool) = PgPoolOptions::new().max_connections(1).connect(&url).await {
                    let _ = crate::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .execute(&pool)
                        .await;
                    pool.close().await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// A fresh schema for one test.
pub struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// A new, empty schema name: `t_<unix seconds>_<pid>_<n>` (the sweep reads the time).
    pub fn new(url: &str) -> TestSchema {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        TestSchema {
            url: url.to_owned(),
            name: format!(
                "t_{seconds}_{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store over this schema (migrated), which drops the schema when its last handle
    /// goes.
    pub async fn store(self) -> PgStore {
        self.store_with_faults(None).await
    }

    /// [`TestSchema::store`] whose commits ask `fault` before each statement whether to
    /// kill the connection there.
    pub async fn store_with_faults(self, fault: Option<crate::FaultHook>) -> PgStore {
        let store = self.open().await;
        let inner = Arc::into_inner(store.inner).expect("a fresh store has one handle");
        PgStore {
            inner: Arc::new(Inner {
                fault,
                cleanup: Some(Box::new(DropSchema {
                    url: self.url,
                    schema: self.name,
                })),
                ..inner
            }),
        }
    }

    /// [`TestSchema::store`] whose port transactions ask `forced` at each start which
    /// SQLSTATE to raise there.
    pub async fn store_with_forced_errors(self, forced: crate::ForcedErrors) -> PgStore {
        let store = self.open().await;
        let inner = Arc::into_inner(store.inner).expect("a fresh store has one handle");
        PgStore {
            inner: Arc::new(Inner {
                forced: Some(forced),
                cleanup: Some(Box::new(DropSchema {
                    url: self.url,
                    schema: self.name,
                })),
                ..inner
            }),
        }
    }

    async fn open(&self) -> PgStore {
        // Once per test process: drop what killed runs of earlier hours left behind.
        static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        SWEPT.get_or_init(|| sweep(&self.url)).await;
        let pool = PgPoolOptions::new()
            .max_connections(TEST_POOL)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&self.url)
            .await
            .expect("connect to the test database");
        PgStore::with_pool(pool, &self.name)
            .await
            .expect("migrate a test schema")
    }
}

/// Another store over `store`'s schema through a pool of its own: what a second instance
/// of the program sees. It does not drop the schema.
pub async fn second_instance(store: &PgStore) -> PgStore {
    let url = url().expect("a second instance needs the test database");
    let pool = PgPoolOptions::new()
        .max_connections(TEST_POOL)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&url)
        .await
        .expect("connect to the test database");
    PgStore::with_pool(pool, store.schema().name())
        .await
        .expect("open the same schema")
}

/// Drops the test schemas earlier runs left (named `t_<seconds>_…`, older than an hour).
pub async fn sweep(url: &str) {
    let Ok(pool) = PgPoolOptions::new().max_connections(1).connect(url).await else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let names: Vec<String> =
        crate::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 't\\_%'")
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
    for name in names {
        let stale = name
            .split('_')
            .nth(1)
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|created| created + 3600 < now);
        if stale && Schema::new(&name).is_ok() {
            let _ = crate::query(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                .execute(&pool)
                .await;
        }
    }
    pool.close().await;
}

/// The `synchronous_commit` setting of the connections `store` appends messages through
/// (`off` unless its durability is `Always`).
pub async fn append_commit_mode(store: &PgStore) -> String {
    crate::query_scalar("SHOW synchronous_commit")
        .fetch_one(&store.inner.relaxed())
        .await
        .expect("read the setting")
}

#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod archive;
mod documents;
mod error;
mod index;
mod journal;
mod lease;
mod links;
mod migrate;
mod options;
mod pool;
#[cfg(feature = "test-util")]
pub mod proxy;
mod schema;
mod scope;
mod sessions;
#[cfg(feature = "test-util")]
pub mod testing;
mod transaction;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_port::{Clock, SystemClock};
use nanobot_memory_scope::{ScopeKey, Subject};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Row};

pub use error::{StoreError, is_transient};
pub use index::PgIndex;
pub use links::PgLinks;
pub use migrate::{MIGRATIONS, Migration, latest as latest_migration, migrate};
pub use options::PgOptions;
pub use pool::released_within;
pub(crate) use pool::{Inner, Pools, TimedOut, stalled};
pub use schema::Schema;
pub use scope::PgScope;
pub(crate) use scope::{canonical, scope_key};
pub use transaction::TRANSACTION_ATTEMPTS;
#[cfg(feature = "test-util")]
pub use transaction::{FaultHook, ForcedErrors};
pub(crate) use transaction::{
    fault_point, forced_point, query, query_scalar, retrying, transaction,
};

/// When an acknowledged message append reaches stable storage: the one setting every
/// session backend shares, mapped here onto PostgreSQL's `synchronous_commit`. Whatever the
/// choice, a server crash never leaves a write half done, and the journal, documents,
/// versions, leases, archive and Dream commits always wait for the disk.
pub use nanobot_session_store::Durability;

/// Sessions and memory in PostgreSQL, shared by every instance that opens the same
/// database and schema.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema.name())
            .finish_non_exhaustive()
    }
}

/// A scope as the store lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeInfo {
    /// Its key.
    pub key: ScopeKey,
    /// Its sessions.
    pub sessions: u64,
    /// The latest journal cursor.
    pub latest: u64,
    /// Dream's cursor.
    pub dream_cursor: u64,
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/database`), creates the schema when
    /// missing and applies this release's migrations.
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        let schema = Schema::new(&options.schema)?;
        let connect: PgConnectOptions =
            url.parse()
                .map_err(|e: sqlx::Error| StoreError::InvalidUrl {
                    reason: e.to_string(),
                })?;
        let timeout_ms = options.statement_timeout.as_millis().to_string();
        let call_timeout = options.effective_call_timeout();
        // A transaction whose client went silent (a call given up at its deadline behind a
        // partition) would keep its row locks until the server notices the connection is
        // gone, which can take hours; the server ends it once it has idled that long.
        let idle_ms = call_timeout.as_millis().to_string();
        let connect = connect.application_name("nanobot-rs").options([
            ("statement_timeout", timeout_ms.as_str()),
            ("idle_in_transaction_session_timeout", idle_ms.as_str()),
        ]);
        let pool = released_within(PgPoolOptions::new(), call_timeout)
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(StoreError::db("connect to the database"))?;
        Self::open(
            pool,
            schema,
            options.turn_ttl,
            options.durability,
            call_timeout,
        )
        .await
    }

    /// A store over a caller's pool, in `schema` (created when missing, migrated), with
    /// the default [`PgOptions`] otherwise. Appends go through a second, smaller pool made
    /// from the same connection options with `synchronous_commit = off` (see
    /// [`Durability`]). Build the pool with [`released_within`] so a connection that a
    /// stalled network left behind cannot hold a slot of it forever.
    pub async fn with_pool(pool: PgPool, schema: &str) -> Result<PgStore, StoreError> {
        let defaults = PgOptions::default();
        Self::with_pool_and_durability(pool, schema, defaults.durability).await
    }

    /// [`PgStore::with_pool`] with the given durability.
    pub async fn with_pool_and_durability(
        pool: PgPool,
        schema: &str,
        durability: Durability,
    ) -> Result<PgStore, StoreError> {
        let schema = Schema::new(schema)?;
        let defaults = PgOptions::default();
        let call_timeout = defaults.effective_call_timeout();
        Self::open(pool, schema, defaults.turn_ttl, durability, call_timeout).await
    }

    async fn open(
        pool: PgPool,
        schema: Schema,
        turn_ttl: Duration,
        durability: Durability,
        call_timeout: Duration,
    ) -> Result<PgStore, StoreError> {
        migrate(&pool, &schema).await?;
        let relaxed = match durability {
            Durability::Always => pool.clone(),
            _ => {
                let connect = (*pool.connect_options())
                    .clone()
                    .options([("synchronous_commit", "off")]);
                released_within(PgPoolOptions::new(), call_timeout)
                    .max_connections(pool.options().get_max_connections().div_ceil(2))
                    .acquire_timeout(pool.options().get_acquire_timeout())
                    .connect_lazy_with(connect)
            }
        };
        Ok(PgStore {
            inner: Arc::new(Inner {
                pools: std::sync::RwLock::new(Pools {
                    main: pool,
                    relaxed,
                }),
                last_progress: std::sync::Mutex::new(std::time::Instant::now()),
                renewals: std::sync::atomic::AtomicU64::new(0),
                durability,
                schema,
                turn_ttl,
                call_timeout,
                released: std::sync::Mutex::new(std::collections::HashMap::new()),
                #[cfg(feature = "test-util")]
                fault: None,
                #[cfg(feature = "test-util")]
                forced: None,
                cleanup: None,
            }),
        })
    }

    /// When appended messages reach stable storage.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// Refreshes the planner's statistics of every table (`ANALYZE`). The server's
    /// autovacuum does it on its own within a minute or so of a large change; until then a
    /// table filled at once (an import) has none, and a query can take a plan that reads a
    /// whole session where it needed its tail. `nanobot import` calls it when it is done.
    pub async fn analyze(&self) -> Result<(), StoreError> {
        let tables = [
            "scopes",
            "sessions",
            "messages",
            "journal_heads",
            "journal",
            "documents",
            "versions",
            "leases",
        ]
        .map(|table| self.inner.t(table))
        .join(", ");
        query(&format!("ANALYZE {tables}"))
            .execute(&self.inner.pool())
            .await
            .map_err(StoreError::db("analyze the tables"))?;
        Ok(())
    }

    /// The pool (a handle on it: the store replaces a pool whose every connection a
    /// stalled network took, so take it again rather than keeping it).
    pub fn pool(&self) -> PgPool {
        self.inner.pool()
    }

    /// How many times the store replaced a pool whose every connection a stalled network
    /// had taken (a warning is logged each time; see [`released_within`]).
    pub fn pools_renewed(&self) -> u64 {
        self.inner
            .renewals
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.inner.schema
    }

    /// The stores of `scope` (created on first use, with its agent scope), stamping journal
    /// entries and sessions with the system clock.
    pub async fn scope(&self, scope: &ScopeKey) -> Result<PgScope, StoreError> {
        self.scope_with_clock(scope, Arc::new(SystemClock)).await
    }

    /// [`PgStore::scope`] with the clock journal timestamps and session times come from.
    pub async fn scope_with_clock(
        &self,
        scope: &ScopeKey,
        clock: Arc<dyn Clock>,
    ) -> Result<PgScope, StoreError> {
        let parent = if scope.subject.is_agent() {
            None
        } else {
            Some(self.scope_id(&scope.agent_scope(), None).await?)
        };
        let scope_id = self.scope_id(scope, parent).await?;
        Ok(PgScope {
            inner: self.inner.clone(),
            scope_id,
            key: scope.clone(),
            clock,
        })
    }

    /// The row of `scope`, created when missing (any number of instances may race).
    async fn scope_id(&self, scope: &ScopeKey, parent: Option<i64>) -> Result<i64, StoreError> {
        let inner = &self.inner;
        let row = crate::query(&format!(
            "INSERT INTO {} (canonical, tenant, agent, subject, parent_scope_id) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (canonical) DO UPDATE SET canonical = EXCLUDED.canonical RETURNING scope_id",
            inner.t("scopes")
        ))
        .bind(canonical(scope))
        .bind(&scope.tenant)
        .bind(&scope.agent)
        .bind(scope.subject.canonical())
        .bind(parent)
        .fetch_one(&inner.pool())
        .await
        .map_err(StoreError::db("open a scope"))?;
        let scope_id: i64 = row.get(0);
        crate::query(&format!(
            "INSERT INTO {} (scope_id) VALUES ($1) ON CONFLICT DO NOTHING",
            inner.t("journal_heads")
        ))
        .bind(scope_id)
        .execute(&inner.pool())
        .await
        .map_err(StoreError::db("open a scope's journal"))?;
        Ok(scope_id)
    }

    /// Every scope with its sessions and journal entries, by key.
    pub async fn scopes(&self) -> Result<Vec<ScopeInfo>, StoreError> {
        let inner = &self.inner;
        let rows = crate::query(&format!(
            "SELECT s.tenant, s.agent, s.subject, \
               (SELECT count(*) FROM {sessions} x WHERE x.scope_id = s.scope_id), \
               COALESCE(h.latest, 0), COALESCE(h.dream_cursor, 0) \
             FROM {scopes} s LEFT JOIN {heads} h USING (scope_id) ORDER BY s.canonical",
            sessions = inner.t("sessions"),
            heads = inner.t("journal_heads"),
            scopes = inner.t("scopes"),
        ))
        .fetch_all(&inner.pool())
        .await
        .map_err(StoreError::db("list the scopes"))?;
        let mut scopes = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(key) = scope_key(row.get(0), row.get(1), row.get(2)) else {
                continue;
            };
            scopes.push(ScopeInfo {
                key,
                sessions: u64::try_from(row.get::<i64, _>(3)).unwrap_or(0),
                latest: u64::try_from(row.get::<i64, _>(4)).unwrap_or(0),
                dream_cursor: u64::try_from(row.get::<i64, _>(5)).unwrap_or(0),
            });
        }
        Ok(scopes)
    }

    /// The scopes whose journal holds entries Dream has not read (one query over the
    /// journal heads: a thousand idle scopes cost nothing).
    pub async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, StoreError> {
        let inner = &self.inner;
        let rows = crate::query(&format!(
            "SELECT s.tenant, s.agent, s.subject FROM {scopes} s JOIN {heads} h USING (scope_id) \
             WHERE h.latest > h.dream_cursor ORDER BY s.canonical",
            scopes = inner.t("scopes"),
            heads = inner.t("journal_heads"),
        ))
        .fetch_all(&inner.pool())
        .await
        .map_err(StoreError::db("find the scopes with work for Dream"))?;
        Ok(rows
            .into_iter()
            .filter_map(|row| scope_key(row.get(0), row.get(1), row.get(2)))
            .collect())
    }

    /// Deletes `scope` and everything it holds (sessions, messages, journal, documents,
    /// versions, leases): one statement, cascading. Whether it existed. The agent scope
    /// takes every user's and chat's scope of its agent with it.
    pub async fn delete_scope(&self, scope: &ScopeKey) -> Result<bool, StoreError> {
        let inner = &self.inner;
        let deleted = crate::query(&format!(
            "DELETE FROM {} WHERE canonical = $1",
            inner.t("scopes")
        ))
        .bind(canonical(scope))
        .execute(&inner.pool())
        .await
        .map_err(StoreError::db("delete a scope"))?;
        Ok(deleted.rows_affected() > 0)
    }

    /// A value this deployment recorded about itself (`workspace_id`).
    pub async fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        query(&format!(
            "SELECT value FROM {} WHERE key = $1",
            self.inner.t("store_meta")
        ))
        .bind(key)
        .fetch_optional(&self.inner.pool())
        .await
        .map(|row| row.map(|row| row.get(0)))
        .map_err(StoreError::db("read the store's records"))
    }

    /// Records `value` under `key`.
    pub async fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        query(&format!(
            "INSERT INTO {} (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            self.inner.t("store_meta")
        ))
        .bind(key)
        .bind(value)
        .execute(&self.inner.pool())
        .await
        .map(|_| ())
        .map_err(StoreError::db("record the store's records"))
    }

    /// The operator links of this deployment.
    pub fn links(&self) -> PgLinks {
        PgLinks::new(self.inner.clone())
    }
}

#![doc = include_str!("../README.md")]

mod archive;
mod documents;
mod error;
mod index;
mod journal;
mod lease;
mod links;
mod migrate;
#[cfg(feature = "test-util")]
pub mod proxy;
mod schema;
mod sessions;
#[cfg(feature = "test-util")]
pub mod testing;
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
pub use schema::Schema;

/// How a store connects and behaves.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The schema every table lives in (created when missing).
    pub schema: String,
    /// The most connections the pool opens.
    pub max_connections: u32,
    /// How long a caller waits for a free connection before the call fails (retryable).
    pub acquire_timeout: Duration,
    /// The longest any statement may run (`statement_timeout`); 0 for none.
    pub statement_timeout: Duration,
    /// The longest a whole store call may wait, on this side: the server's
    /// `statement_timeout` cannot fire when the network stalls (a blackhole, a half-open
    /// connection), so every call also has this deadline. When it passes, the call fails
    /// with a retryable error; a write may or may not have committed, as when a connection
    /// drops. `None`: one and a half times `statement_timeout` (45 s by default).
    pub call_timeout: Option<Duration>,
    /// How long a turn lock lasts unless renewed. It is renewed every third of this while
    /// its turn runs, however long the model takes, so this only bounds how long an
    /// instance that crashed mid-turn keeps the session busy for the others.
    pub turn_ttl: Duration,
    /// When appended messages reach stable storage.
    pub durability: Durability,
}

/// When an acknowledged message append reaches stable storage: the one setting every
/// session backend shares, mapped here onto PostgreSQL's `synchronous_commit`. Whatever the
/// choice, a server crash never leaves a write half done, and the journal, documents,
/// versions, leases, archive and Dream commits always wait for the disk.
pub use nanobot_session_store::Durability;

impl PgOptions {
    /// [`PgOptions::call_timeout`], or one and a half times the statement timeout (45 s
    /// when there is none).
    pub fn effective_call_timeout(&self) -> Duration {
        self.call_timeout
            .unwrap_or(if self.statement_timeout.is_zero() {
                Duration::from_secs(45)
            } else {
                self.statement_timeout.mul_f64(1.5)
            })
    }
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: "nanobot".into(),
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
            call_timeout: None,
            turn_ttl: Duration::from_secs(30),
            durability: Durability::default(),
        }
    }
}

/// The store's two pools (see [`Inner::pool`] and [`Inner::relaxed`]).
#[derive(Clone)]
pub(crate) struct Pools {
    main: PgPool,
    relaxed: PgPool,
}

pub(crate) struct Inner {
    /// Replaced as a whole when every slot of a pool is lost (see [`Inner::deadline`]).
    pools: std::sync::RwLock<Pools>,
    /// When a store call last got a connection and came back (for [`Inner::deadline`]).
    last_progress: std::sync::Mutex<std::time::Instant>,
    /// How many times a pool was replaced that way.
    renewals: std::sync::atomic::AtomicU64,
    pub(crate) durability: Durability,
    pub(crate) schema: Schema,
    pub(crate) turn_ttl: Duration,
    /// Every store call's deadline on this side ([`PgOptions::call_timeout`]).
    pub(crate) call_timeout: Duration,
    /// Leases this process dropped whose release may not have reached the database yet:
    /// (scope, job) to fence. Only this process ever held those fences, so it may take such
    /// a lease over at once; another process waits for the release.
    pub(crate) released:
        std::sync::Mutex<std::collections::HashMap<(i64, String), nanobot_memory_store::Fence>>,
    /// Where a test kills the connection: asked before each statement of a commit with the
    /// operation and the statement's number (feature `test-util`).
    pub(crate) fault: Option<FaultHook>,
    /// Errors a test forces at the start of a port call's transaction (feature `test-util`).
    pub(crate) forced: Option<ForcedErrors>,
    /// Dropped with the last handle on the store (a test's schema); held for its `Drop`.
    #[allow(dead_code)]
    pub(crate) cleanup: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Inner {
    /// The pool every call goes through.
    pub(crate) fn pool(&self) -> PgPool {
        self.pools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .main
            .clone()
    }

    /// Where message appends and lease releases go: connections with
    /// `synchronous_commit = off` unless the durability is [`Durability::Always`] (then
    /// the pool itself).
    pub(crate) fn relaxed(&self) -> PgPool {
        self.pools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .relaxed
            .clone()
    }

    /// `name` qualified with the schema (`"nanobot".sessions`).
    pub(crate) fn t(&self, name: &str) -> String {
        format!("{}.{name}", self.schema.quoted())
    }

    /// Runs a store call under its deadline ([`PgOptions::call_timeout`]); past it, the
    /// call's work is dropped (a transaction under way is rolled back by the server when its
    /// connection goes) and a retryable error says so.
    pub(crate) async fn deadline<T, E>(
        &self,
        call: &str,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        E: TimedOut + std::error::Error + 'static,
    {
        let outcome = match tokio::time::timeout(self.call_timeout, work).await {
            Ok(result) => result,
            Err(_) => return Err(E::timed_out(call, self.call_timeout)),
        };
        match &outcome {
            Err(error) if waited_for_a_connection(error) => self.heal_starved_pools(),
            _ => {
                *self
                    .last_progress
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = std::time::Instant::now();
            }
        }
        outcome
    }

    /// Called when a call found no free connection. Every call gives its connection back
    /// within its deadline, and the check on the way back is bounded too
    /// ([`released_within`]) except for one round trip of the pool's own that sqlx does not
    /// bound: a connection whose peer goes silent in that moment holds its slot until the
    /// operating system gives up on the socket, which can be never. When no call has come
    /// back for longer than any call and its check may take, and a pool is full with none
    /// idle, its slots are lost: that pool is replaced by a new one with the same options
    /// (the old one is left to its stuck tasks), so the store works again without a restart.
    fn heal_starved_pools(&self) {
        let now = std::time::Instant::now();
        let mut last = self
            .last_progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut pools = self
            .pools
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let patience = self.call_timeout * 2 + pools.main.options().get_acquire_timeout();
        if now.duration_since(*last) < patience {
            return;
        }
        let shared = pools.relaxed.options().get_max_connections()
            == pools.main.options().get_max_connections()
            && Arc::ptr_eq(
                &pools.main.connect_options(),
                &pools.relaxed.connect_options(),
            );
        let mut replaced = Vec::new();
        if starved(&pools.main) {
            let fresh = renewed(&pools.main);
            if shared {
                pools.relaxed = fresh.clone();
            }
            pools.main = fresh;
            replaced.push("main");
        }
        if !shared && starved(&pools.relaxed) {
            pools.relaxed = renewed(&pools.relaxed);
            replaced.push("relaxed");
        }
        if !replaced.is_empty() {
            self.renewals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                pools = ?replaced,
                stalled_ms = now.duration_since(*last).as_millis() as u64,
                "every connection of a pool was lost to a stalled network; the pool is replaced"
            );
            *last = now;
        }
    }
}

/// Whether `error` (a port's error) comes from waiting for a free connection in vain.
fn waited_for_a_connection(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(sqlx::Error::PoolTimedOut) = current.downcast_ref::<sqlx::Error>() {
            return true;
        }
        next = current.source();
    }
    false
}

/// A pool whose every slot is taken and none idle.
fn starved(pool: &PgPool) -> bool {
    pool.size() >= pool.options().get_max_connections() && pool.num_idle() == 0
}

/// A new pool with `pool`'s options, connecting when first used.
fn renewed(pool: &PgPool) -> PgPool {
    pool.options()
        .clone()
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// The error of a store call that outlived its deadline.
pub(crate) trait TimedOut {
    fn timed_out(call: &str, after: Duration) -> Self;
}

pub(crate) fn stalled(call: &str, after: Duration) -> (String, std::io::Error) {
    (
        format!(
            "the database did not answer ({call}) within {} ms: the network or the server is stalled; the call may or may not have taken effect",
            after.as_millis()
        ),
        std::io::Error::from(std::io::ErrorKind::TimedOut),
    )
}

impl TimedOut for nanobot_session_store::SessionError {
    fn timed_out(call: &str, after: Duration) -> Self {
        let (message, source) = stalled(call, after);
        nanobot_session_store::SessionError::backend_caused_by(message, true, source)
    }
}

impl TimedOut for nanobot_memory_store::MemoryError {
    fn timed_out(call: &str, after: Duration) -> Self {
        let (message, source) = stalled(call, after);
        nanobot_memory_store::MemoryError::backend_caused_by(message, true, source)
    }
}

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
                fault: None,
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

/// `options` with a bounded check of each connection given back to the pool: the check
/// (a round trip that also flushes the rollback of a call given up at its deadline) must
/// answer within `limit`, or the connection is closed and its slot freed. Without it, the
/// pool's own check waits forever on a connection whose peer went silent (a half-open
/// connection, a partition that never heals), and each such call takes one slot of the pool
/// for good until no call can get a connection.
pub fn released_within(options: PgPoolOptions, limit: Duration) -> PgPoolOptions {
    options.after_release(move |conn, _| {
        Box::pin(async move {
            use sqlx::Connection;
            match tokio::time::timeout(limit, conn.ping()).await {
                Ok(answer) => answer.map(|()| true),
                Err(_) => {
                    tracing::warn!(
                        limit_ms = limit.as_millis() as u64,
                        "a connection given back to the pool did not answer its check; it is closed"
                    );
                    Err(sqlx::Error::Io(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    )))
                }
            }
        })
    })
}

/// A statement of this crate. Only the validated schema name and this crate's own table
/// names are ever interpolated into SQL (see [`Schema`]); every value is bound.
pub(crate) fn query(
    sql: &str,
) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
}

/// [`query`] for one value per row.
pub(crate) fn query_scalar<O>(
    sql: &str,
) -> sqlx::query::QueryScalar<'static, sqlx::Postgres, O, sqlx::postgres::PgArguments>
where
    (O,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
}

/// Runs `body` in a transaction: committed when it succeeds; when it fails, rolled back and
/// the rollback awaited, so no lock it took outlives the call (a dropped transaction is
/// rolled back only when its connection is next used, and until then its row and advisory
/// locks stall everyone else).
pub(crate) async fn transaction<T, E>(
    pool: PgPool,
    fail: impl Fn(sqlx::Error) -> E,
    body: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = pool.begin().await.map_err(&fail)?;
    match body(&mut tx).await {
        Ok(value) => {
            tx.commit().await.map_err(&fail)?;
            Ok(value)
        }
        Err(error) => {
            if let Err(e) = tx.rollback().await {
                tracing::debug!(error = %e, "a failed transaction could not be rolled back; its connection is dropped");
            }
            Err(error)
        }
    }
}

/// How many times a transaction that met a serialization failure (SQLSTATE 40001) or a
/// deadlock (40P01) is run in all before its error is returned (retryable).
pub const TRANSACTION_ATTEMPTS: u32 = 3;

/// Runs a port call's transaction (`run` makes one run of it: [`transaction`]) again when
/// the database refused it for a serialization failure or a deadlock: at most
/// [`TRANSACTION_ATTEMPTS`] runs in all, after a short random pause (5 to 25 ms times the
/// attempt), so two rivals do not collide again in step. Any other error returns at once.
pub(crate) async fn retrying<T, E, F>(mut run: impl FnMut() -> F) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    let mut attempt = 1u32;
    loop {
        match run().await {
            Err(error)
                if attempt < TRANSACTION_ATTEMPTS && error::is_refused_for_a_rival(&error) =>
            {
                let spread = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let pause = 5 + u64::from(spread % 21);
                tokio::time::sleep(Duration::from_millis(pause * u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Where a test may force an error at the start of a port call's transaction: asks the
/// [`ForcedErrors`] hook with the operation and the attempt (counted in `attempts`) and
/// raises the SQLSTATE it names, as the database would (feature `test-util`; a no-op
/// otherwise).
pub(crate) async fn forced_point(
    inner: &Inner,
    conn: &mut sqlx::PgConnection,
    operation: &str,
    attempts: &std::sync::atomic::AtomicU32,
) -> Result<(), sqlx::Error> {
    let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if let Some(code) = inner
        .forced
        .as_ref()
        .and_then(|hook| hook(operation, attempt))
    {
        let code: String = code.chars().filter(char::is_ascii_alphanumeric).collect();
        query(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'forced by a test' USING ERRCODE = '{code}'; END $$"
        ))
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Asked at the start of each run of a port call's transaction with its operation
/// (`"archive"`, `"memory commit"`, `"version commit"`, `"rewrite"`) and the attempt (from
/// 1): a SQLSTATE to raise there, as the database would (feature `test-util`).
pub type ForcedErrors = Arc<dyn Fn(&str, u32) -> Option<&'static str> + Send + Sync>;

/// Asked before each statement of a commit (`"memory commit"`, `"archive"`) with its
/// number: `true` kills the connection there, as a crash or a network fault would.
pub type FaultHook = Arc<dyn Fn(&str, usize) -> bool + Send + Sync>;

/// A point of `operation` where a test may kill the connection (feature `test-util`; a
/// no-op otherwise): the transaction's backend terminates itself, so the statement fails as
/// it would when the connection drops.
pub(crate) async fn fault_point(
    inner: &Inner,
    conn: &mut sqlx::PgConnection,
    operation: &str,
    step: usize,
) -> Result<(), sqlx::Error> {
    if let Some(hook) = &inner.fault
        && hook(operation, step)
    {
        query("SELECT pg_terminate_backend(pg_backend_pid())")
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// The unique text of a scope key.
fn canonical(scope: &ScopeKey) -> String {
    format!(
        "{}/{}/{}",
        scope.tenant,
        scope.agent,
        scope.subject.canonical()
    )
}

fn scope_key(tenant: String, agent: String, subject: String) -> Option<ScopeKey> {
    let subject = Subject::parse(&subject).ok()?;
    ScopeKey::new(&tenant, &agent, subject).ok()
}

/// The stores of one scope in PostgreSQL: it implements every storage port (sessions,
/// journal, documents, versions, lease, the archive and memory commits), and every
/// statement names its scope, so nothing read or written through it can belong to another.
#[derive(Clone)]
pub struct PgScope {
    pub(crate) inner: Arc<Inner>,
    pub(crate) scope_id: i64,
    pub(crate) key: ScopeKey,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PgScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgScope")
            .field("scope", &self.key)
            .field("schema", &self.inner.schema.name())
            .finish_non_exhaustive()
    }
}

impl PgScope {
    /// The scope's key.
    pub fn key(&self) -> &ScopeKey {
        &self.key
    }

    /// The store this scope belongs to.
    pub fn store(&self) -> PgStore {
        PgStore {
            inner: self.inner.clone(),
        }
    }

    /// Another handle on the same scope through `store` (another pool: as another
    /// instance would open it).
    pub async fn reopen_through(&self, store: &PgStore) -> Result<PgScope, StoreError> {
        store.scope_with_clock(&self.key, self.clock.clone()).await
    }
}

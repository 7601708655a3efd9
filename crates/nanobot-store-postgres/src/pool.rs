//! The connection pools every call goes through, their deadlines, and their renewal when every slot is lost.

use super::*;

/// The store's two pools (see [`Inner::pool`] and [`Inner::relaxed`]).
#[derive(Clone)]
pub(crate) struct Pools {
    pub(crate) main: PgPool,
    pub(crate) relaxed: PgPool,
}

pub(crate) struct Inner {
    /// Replaced as a whole when every slot of a pool is lost (see [`Inner::deadline`]).
    pub(crate) pools: std::sync::RwLock<Pools>,
    /// When a store call last got a connection and came back (for [`Inner::deadline`]).
    pub(crate) last_progress: std::sync::Mutex<std::time::Instant>,
    /// How many times a pool was replaced that way.
    pub(crate) renewals: std::sync::atomic::AtomicU64,
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
    #[cfg(feature = "test-util")]
    pub(crate) fault: Option<crate::FaultHook>,
    /// Errors a test forces at the start of a port call's transaction (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub(crate) forced: Option<crate::ForcedErrors>,
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
pub(super) fn waited_for_a_connection(error: &(dyn std::error::Error + 'static)) -> bool {
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
pub(super) fn starved(pool: &PgPool) -> bool {
    pool.size() >= pool.options().get_max_connections() && pool.num_idle() == 0
}

/// A new pool with `pool`'s options, connecting when first used.
pub(super) fn renewed(pool: &PgPool) -> PgPool {
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

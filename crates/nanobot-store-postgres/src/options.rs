//! How a store connects: pool sizes, timeouts, durability.

use super::*;

/// How a store connects and behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
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

impl PgOptions {
    /// The same options in another schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The same options with another durability.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same options with a pool of at most `connections`, each waited for at most
    /// `acquire_timeout`.
    pub fn pool(mut self, connections: u32, acquire_timeout: Duration) -> Self {
        self.max_connections = connections;
        self.acquire_timeout = acquire_timeout;
        self
    }

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

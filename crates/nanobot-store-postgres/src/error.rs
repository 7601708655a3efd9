//! The crate's error, and how a database error becomes a port's error: with its source kept
//! and whether trying again can help.

use std::fmt;

use nanobot_memory_store::MemoryError;
use nanobot_session_store::SessionError;

/// Why the store could not be opened or managed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The schema name is not a plain identifier.
    InvalidSchema {
        /// The name given.
        name: String,
    },
    /// The database URL could not be used.
    InvalidUrl {
        /// Why.
        reason: String,
    },
    /// The database was not reachable, or a statement failed.
    Database {
        /// What was being done.
        action: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// The database's schema was made by a newer release that this one cannot read.
    TooNew {
        /// The newest migration this release knows.
        known: i64,
        /// The newest migration applied.
        applied: i64,
        /// The oldest release version that can read it.
        min_reader: i64,
    },
    /// A migration applied earlier differs from the one this release carries under the
    /// same number (a released migration was edited).
    ChecksumMismatch {
        /// The migration's number.
        version: i64,
        /// Its name.
        name: String,
    },
}

impl StoreError {
    pub(crate) fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { action, source }
    }

    /// Whether trying again later may succeed (the server was down or busy).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Database { source, .. } => is_transient(source),
            _ => false,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::InvalidSchema { name } => write!(
                f,
                "the schema name {name:?} is refused: use 1 to 48 ASCII letters, digits or '_', starting with a letter or '_'"
            ),
            StoreError::InvalidUrl { reason } => {
                write!(f, "the database URL is not usable: {reason}")
            }
            StoreError::Database { action, source } => {
                write!(f, "could not {action}: {}", describe(source))
            }
            StoreError::TooNew {
                known,
                applied,
                min_reader,
            } => write!(
                f,
                "the database schema is at migration {applied}, which needs a release that knows at least migration {min_reader}; this one knows up to {known}: upgrade nanobot-rs"
            ),
            StoreError::ChecksumMismatch { version, name } => write!(
                f,
                "migration {version} ({name}) applied to this database differs from the one this release carries; a released migration must never change"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Database { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The database error's message with its SQLSTATE, for people.
fn describe(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (SQLSTATE {code})", db.message()),
            None => db.message().to_owned(),
        },
        other => other.to_string(),
    }
}

/// Whether an error may pass when the same call is made again: a dropped or refused
/// connection, a pool that timed out, a serialization failure, a deadlock, a server that is
/// shutting down or starting.
pub fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exceptions; 40001 serialization failure; 40P01 deadlock;
            // 57P01-03: admin shutdown, crash shutdown, cannot connect now; 53300: too
            // many connections.
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300"
                )
        }),
        _ => false,
    }
}

/// Whether `error` (or an error it was caused by) is the database refusing a transaction
/// because of a rival one: a serialization failure (40001) or a deadlock (40P01).
pub(crate) fn is_refused_for_a_rival(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if let Some(sqlx::Error::Database(db)) = e.downcast_ref::<sqlx::Error>()
            && matches!(db.code().as_deref(), Some("40001" | "40P01"))
        {
            return true;
        }
        at = e.source();
    }
    false
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// A database error as the memory ports report it. A unique violation (23505) means a rival
/// wrote the same record first: a [`MemoryError::Conflict`], to read again and redo.
pub(crate) fn memory(action: &str) -> impl Fn(sqlx::Error) -> MemoryError + '_ {
    move |error| {
        if is_unique_violation(&error) {
            return MemoryError::Conflict {
                what: format!(
                    "could not {action}: another writer stored the same record first ({})",
                    describe(&error)
                ),
            };
        }
        let retryable = is_transient(&error);
        MemoryError::backend_caused_by(
            format!("could not {action}: {}", describe(&error)),
            retryable,
            error,
        )
    }
}

/// A database error as the session port reports it. A unique violation (23505) means a
/// rival wrote first; the session port's compare-and-set turns the next try into a
/// `Conflict`, so it counts as retryable.
pub(crate) fn session(action: &str) -> impl Fn(sqlx::Error) -> SessionError + '_ {
    move |error| {
        let retryable = is_transient(&error) || is_unique_violation(&error);
        SessionError::backend_caused_by(
            format!("could not {action}: {}", describe(&error)),
            retryable,
            error,
        )
    }
}

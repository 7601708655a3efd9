#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDateTime;
use nanobot_memory_index::{
    CANDIDATES, COMMON_QUERY_WINDOW, Chunk, GroupUpdate, Hit, IndexError, IndexStats, LexicalQuery,
    MemoryIndex, QueryTerm, SearchRequest, SourceKind, VectorCache, VocabularyLookup,
    check_updates, normalize,
};
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};

mod lexical;
mod vectors;

use lexical::search;

/// Where the index lives inside a scope directory (the workspace root for the agent
/// scope). Derived data: deleting it loses nothing, the next indexing pass rebuilds it.
pub const INDEX_FILE: &str = ".nanobot-rs/index.sqlite";

/// The schema this build writes; an index of any other version is rebuilt.
pub const SCHEMA_VERSION: i64 = 3;

/// How long a write waits for another process's write to finish.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,
        grp TEXT NOT NULL,
        source TEXT NOT NULL,
        part INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        at TEXT,
        text TEXT NOT NULL
    );
    CREATE INDEX chunks_by_group ON chunks (grp);
    CREATE VIRTUAL TABLE chunk_terms USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0');
    CREATE VIRTUAL TABLE chunk_vocab USING fts5vocab (chunk_terms, 'row');
    CREATE TABLE marks (name TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE vectors (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        chunk INTEGER NOT NULL UNIQUE,
        vector BLOB NOT NULL
    );
    CREATE TABLE vector_epoch (only INTEGER PRIMARY KEY CHECK (only = 1), epoch INTEGER NOT NULL);
    CREATE TABLE vector_model (
        only INTEGER PRIMARY KEY CHECK (only = 1),
        name TEXT NOT NULL,
        dimensions INTEGER NOT NULL
    );
";

/// The chunk count every search needs, kept by triggers in the writing transaction:
/// `count(*)` reads a whole index b-tree, about 0.45 ms of each search at 100,000 chunks.
/// Files of schema 3 made before it get it when opened (same version: it is added, not
/// changed, and an older build's writes keep it right, the triggers being in the file).
const CHUNK_COUNT: &str = "
    CREATE TABLE IF NOT EXISTS chunk_count (only INTEGER PRIMARY KEY CHECK (only = 1), n INTEGER NOT NULL);
    INSERT OR IGNORE INTO chunk_count (only, n) SELECT 1, count(*) FROM chunks;
    CREATE TRIGGER IF NOT EXISTS chunk_count_up AFTER INSERT ON chunks
        BEGIN UPDATE chunk_count SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS chunk_count_down AFTER DELETE ON chunks
        BEGIN UPDATE chunk_count SET n = n - 1; END;
";

/// Something the index found wrong with its file and mended by starting again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repair {
    /// The index file.
    pub path: PathBuf,
    /// What was wrong (not a database, a failed check, another schema version).
    pub reason: String,
}

/// The SQLite FTS5 side index of one scope.
///
/// Safe to share between processes (WAL, a busy timeout; every `replace` is one
/// transaction). A damaged file, or one of another schema version, is deleted and started
/// again, never an error: [`SqliteIndex::repairs`] reports it, and the index is empty until
/// it is fed again.
#[derive(Debug, Clone)]
pub struct SqliteIndex {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
    repairs: Arc<Mutex<Vec<Repair>>>,
    /// This process's copy of the vectors (`nanobot_memory_index::VectorCache`).
    vectors: Arc<Mutex<VectorCache>>,
}

impl SqliteIndex {
    /// The index of the scope whose directory is `scope_dir` (`<scope_dir>/.nanobot-rs/`).
    pub fn open_in(scope_dir: &Path) -> Result<SqliteIndex, IndexError> {
        SqliteIndex::open(&scope_dir.join(INDEX_FILE))
    }

    /// The index in file `path`, created when missing, rebuilt when damaged.
    pub fn open(path: &Path) -> Result<SqliteIndex, IndexError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| storage("creating the index directory", e))?;
            // Derived data: no repository should ever pick it up.
            let ignore = dir.join(".gitignore");
            if !ignore.exists() {
                std::fs::write(&ignore, "*\n").map_err(|e| storage("writing .gitignore", e))?;
            }
        }
        let mut repairs = Vec::new();
        let connection = open_checked(path, &mut repairs)?;
        Ok(SqliteIndex {
            path: path.to_owned(),
            connection: Arc::new(Mutex::new(connection)),
            repairs: Arc::new(Mutex::new(repairs)),
            vectors: Arc::new(Mutex::new(VectorCache::new())),
        })
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every repair since this index was opened (the file was damaged or of another
    /// version and was started again): the caller should feed it everything again.
    pub fn repairs(&self) -> Vec<Repair> {
        lock(&self.repairs).clone()
    }

    /// Runs `work` on the connection off the async threads; if the file turns out to be
    /// damaged, starts it again, reports the repair, and runs `work` once more on the
    /// empty index.
    async fn with_connection<T, F>(&self, action: &'static str, work: F) -> Result<T, IndexError>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let connection = self.connection.clone();
        let repairs = self.repairs.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = lock(&connection);
            match work(&mut guard) {
                Err(error) if is_damage(&error) => {
                    let mut found = lock(&repairs);
                    *guard = reopen_empty(&path, format!("{action}: {error}"), &mut found)?;
                    drop(found);
                    work(&mut guard).map_err(|e| sqlite_error(action, e))
                }
                other => other.map_err(|e| sqlite_error(action, e)),
            }
        })
        .await
        .map_err(|e| storage(action, e))?
    }
}

#[async_trait]
impl MemoryIndex for SqliteIndex {
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError> {
        check_updates(&updates)?;
        self.with_connection("replacing chunks", move |connection| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for update in &updates {
                remove_groups(&transaction, "grp = ?1", &update.group)?;
                let mut insert = transaction.prepare(
                    "INSERT INTO chunks (grp, source, part, kind, at, text) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                let mut terms =
                    transaction.prepare("INSERT INTO chunk_terms (rowid, terms) VALUES (?1, ?2)")?;
                for chunk in &update.chunks {
                    insert.execute(params![
                        chunk.group,
                        chunk.source,
                        chunk.part,
                        kind_number(chunk.kind),
                        chunk.at.map(|at| at.format(TIME_FORMAT).to_string()),
                        chunk.text,
                    ])?;
                    terms.execute(params![transaction.last_insert_rowid(), normalize(&chunk.text)])?;
                }
            }
            transaction.commit()
        })
        .await
    }

    async fn purge(&self) -> Result<(), IndexError> {
        self.with_connection("purging removed text", |connection| {
            // The full-text index keeps removed terms in its segments until they are
            // merged; freed pages keep their bytes unless zeroed; the WAL keeps old pages.
            connection.execute(
                "INSERT INTO chunk_terms (chunk_terms) VALUES ('optimize')",
                [],
            )?;
            connection.pragma_update(None, "secure_delete", "ON")?;
            connection.execute_batch("VACUUM")?;
            connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        })
        .await
    }

    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError> {
        let prefix = prefix.to_owned();
        self.with_connection("removing chunks", move |connection| {
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            remove_groups(
                &transaction,
                "grp >= ?1 AND grp < ?1 || char(1114111)",
                &prefix,
            )?;
            transaction.commit()
        })
        .await
    }

    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        let request = request.clone();
        self.with_connection("searching", move |connection| search(connection, &request))
            .await
    }

    async fn stats(&self) -> Result<IndexStats, IndexError> {
        self.with_connection("counting chunks", |connection| {
            connection.query_row(
                "SELECT count(*), count(DISTINCT grp) FROM chunks",
                [],
                |row| {
                    let count = |i: usize| row.get::<_, i64>(i).map(|n| n as usize);
                    Ok(IndexStats::new(count(0)?, count(1)?))
                },
            )
        })
        .await
    }

    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError> {
        self.with_connection("reading marks", |connection| {
            let mut statement = connection.prepare("SELECT name, value FROM marks")?;
            let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError> {
        self.with_connection("setting marks", move |connection| {
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (name, value) in &marks {
                match value {
                    Some(value) => transaction.execute(
                        "INSERT INTO marks (name, value) VALUES (?1, ?2)
                         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        params![name, value],
                    )?,
                    None => transaction.execute("DELETE FROM marks WHERE name = ?1", [name])?,
                };
            }
            transaction.commit()
        })
        .await
    }
}

/// Times as stored: sortable text.
const TIME_FORMAT: &str = "%Y-%m-%dT%H:%M:%S";

/// Removes the chunks (and their terms) of the groups `condition` selects with `?1`.
fn remove_groups(
    transaction: &rusqlite::Transaction<'_>,
    condition: &str,
    value: &str,
) -> rusqlite::Result<()> {
    transaction.execute(
        &format!(
            "DELETE FROM chunk_terms WHERE rowid IN (SELECT id FROM chunks WHERE {condition})"
        ),
        [value],
    )?;
    let vectors_gone = transaction.execute(
        &format!("DELETE FROM vectors WHERE chunk IN (SELECT id FROM chunks WHERE {condition})"),
        [value],
    )?;
    if vectors_gone > 0 {
        vectors::bump_epoch(transaction)?;
    }
    transaction.execute(&format!("DELETE FROM chunks WHERE {condition}"), [value])?;
    Ok(())
}

fn kind_number(kind: SourceKind) -> i64 {
    match kind {
        SourceKind::History => 1,
        SourceKind::Memory => 2,
        SourceKind::Sessions => 3,
    }
}

fn kind_of(number: i64) -> SourceKind {
    match number {
        1 => SourceKind::History,
        2 => SourceKind::Memory,
        _ => SourceKind::Sessions,
    }
}

/// How often, and how far apart, an open that found the file busy (another process
/// creating it or switching it to WAL) is tried again: about [`BUSY_TIMEOUT`] in all.
const OPEN_ATTEMPTS: u32 = 100;
const OPEN_PAUSE: Duration = Duration::from_millis(50);

/// Why an open did not give a usable connection.
enum OpenFailure {
    /// The file is damaged, not a database, or of another version: start it again.
    Damaged(String),
    /// Another process holds it for now: try again.
    Busy(rusqlite::Error),
    /// It cannot be opened at all (permissions, a full disk): starting it again would not
    /// help and could lose nothing but time; the caller hears of it.
    Failed(rusqlite::Error),
}

impl From<rusqlite::Error> for OpenFailure {
    fn from(error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => OpenFailure::Busy(error),
            Some(
                ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::OutOfMemory,
            ) => OpenFailure::Failed(error),
            _ => OpenFailure::Damaged(error.to_string()),
        }
    }
}

/// Opens `path`, checks it, and starts it again when it is damaged or of another version;
/// a file another process holds for a moment is waited for, never taken for damage.
fn open_checked(path: &Path, repairs: &mut Vec<Repair>) -> Result<Connection, IndexError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match open_and_check(path) {
            Ok(connection) => return Ok(connection),
            Err(OpenFailure::Damaged(reason)) => return reopen_empty(path, reason, repairs),
            Err(OpenFailure::Busy(error)) if attempt >= OPEN_ATTEMPTS => {
                return Err(sqlite_error("opening the index", error));
            }
            Err(OpenFailure::Busy(_)) => std::thread::sleep(OPEN_PAUSE),
            Err(OpenFailure::Failed(error)) => {
                return Err(sqlite_error("opening the index", error));
            }
        }
    }
}

fn open_and_check(path: &Path) -> Result<Connection, OpenFailure> {
    let connection = Connection::open(path)?;
    configure(&connection)?;
    let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version == 0 {
        // A new file, or one another process is creating at this moment (its tables may
        // already be there when this reads the version, which it sets in the same
        // transaction): `create` reads the version again under the write lock and creates
        // the schema only when it is still 0, so both end with the same index. A file of
        // version 0 that holds our tables anyway fails there and is started again.
        let created = create(&connection)?;
        if created != SCHEMA_VERSION {
            return Err(OpenFailure::Damaged(format!(
                "schema version {created}, this build reads {SCHEMA_VERSION}"
            )));
        }
        return Ok(connection);
    }
    if version != SCHEMA_VERSION {
        return Err(OpenFailure::Damaged(format!(
            "schema version {version}, this build reads {SCHEMA_VERSION}"
        )));
    }
    let verdict: String = connection.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
    if verdict != "ok" {
        return Err(OpenFailure::Damaged(format!("quick_check: {verdict}")));
    }
    add_chunk_count(&connection)?;
    match connection.execute(
        "INSERT INTO chunk_terms (chunk_terms) VALUES ('integrity-check')",
        [],
    ) {
        Ok(_) => Ok(connection),
        Err(error) => match OpenFailure::from(error) {
            OpenFailure::Damaged(reason) => Err(OpenFailure::Damaged(format!(
                "the full-text index: {reason}"
            ))),
            other => Err(other),
        },
    }
}

fn configure(connection: &Connection) -> rusqlite::Result<()> {
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    // The index is derived: after a power loss it may lose its last writes, which the
    // next indexing pass puts back, but it never corrupts.
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

/// Creates the schema under the write lock unless a process that held it first already
/// did; the version the file then has.
fn create(connection: &Connection) -> rusqlite::Result<i64> {
    connection.execute_batch("BEGIN IMMEDIATE")?;
    let created = (|| {
        let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version != 0 {
            return Ok(version);
        }
        connection.execute_batch(&format!(
            "{SCHEMA} {CHUNK_COUNT} PRAGMA user_version = {SCHEMA_VERSION};"
        ))?;
        // A file made again starts at an epoch of its own, so no process's copy of the
        // vectors of the file it replaced passes for current (`vectors::stamp`).
        connection.execute(
            "INSERT INTO vector_epoch (only, epoch) VALUES (1, ?1)",
            [vectors::first_epoch()],
        )?;
        Ok(SCHEMA_VERSION)
    })();
    match created {
        Ok(version) => connection.execute_batch("COMMIT").map(|()| version),
        Err(error) => {
            let _ = connection.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

/// Gives a file made before [`CHUNK_COUNT`] its count, under the write lock (every
/// statement is a no-op when another process did it first).
fn add_chunk_count(connection: &Connection) -> rusqlite::Result<()> {
    let present: i64 = connection.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name IN ('chunk_count', 'chunk_count_up', 'chunk_count_down')",
        [],
        |row| row.get(0),
    )?;
    if present == 3 {
        return Ok(());
    }
    connection
        .execute_batch(&format!("BEGIN IMMEDIATE; {CHUNK_COUNT} COMMIT;"))
        .inspect_err(|_| {
            let _ = connection.execute_batch("ROLLBACK");
        })
}

/// Deletes the index file (and its WAL and shared-memory files) and creates it empty.
fn reopen_empty(
    path: &Path,
    reason: String,
    repairs: &mut Vec<Repair>,
) -> Result<Connection, IndexError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(PathBuf::from(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(storage("deleting a damaged index", e)),
        }
    }
    repairs.push(Repair {
        path: path.to_owned(),
        reason,
    });
    let connection = Connection::open(path).map_err(|e| sqlite_error("creating the index", e))?;
    configure(&connection).map_err(|e| sqlite_error("creating the index", e))?;
    create(&connection).map_err(|e| sqlite_error("creating the index", e))?;
    Ok(connection)
}

fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

fn sqlite_error(action: &str, error: rusqlite::Error) -> IndexError {
    let retryable = matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    IndexError::Storage {
        action: action.to_owned(),
        retryable,
        source: Box::new(error),
    }
}

fn storage(action: &str, error: impl std::error::Error + Send + Sync + 'static) -> IndexError {
    IndexError::Storage {
        action: action.to_owned(),
        retryable: false,
        source: Box::new(error),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing is left half-done under the lock: a transaction that did not commit rolled
    // back when it was dropped.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

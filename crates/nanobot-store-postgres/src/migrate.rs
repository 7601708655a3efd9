//! Embedded, forward-only migrations, applied at start under an advisory lock.
//!
//! Each released migration is pinned by its SHA-256 (a test compares them with a list in
//! the source), recorded in `<schema>.migrations` when applied. `<schema>.meta` keeps
//! `min_reader`: the oldest migration number a release must know to read the schema. A
//! migration that only adds (a table, a nullable column, an index) leaves it; one that an
//! older release would misread raises it. A release opens a schema migrated past what it
//! knows only when it knows at least `min_reader`.

use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row};

use crate::error::StoreError;
use crate::schema::Schema;

/// One migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number: migrations apply in this order, each once.
    pub version: i64,
    /// A short name.
    pub name: &'static str,
    /// The SQL (tables named without the schema; the search path names it).
    pub sql: &'static str,
    /// Whether a release that does not know it can still read the schema.
    pub additive: bool,
}

impl Migration {
    /// The hex SHA-256 of the SQL.
    pub fn checksum(&self) -> String {
        Sha256::digest(self.sql.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Every migration of this release, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
        additive: false,
    },
    Migration {
        version: 2,
        name: "search",
        sql: include_str!("../migrations/0002_search.sql"),
        additive: true,
    },
    Migration {
        version: 3,
        name: "search_vectors",
        sql: include_str!("../migrations/0003_search_vectors.sql"),
        // A release before it would store vectors without numbering them, and copies of
        // the vectors kept by this one would miss them.
        additive: false,
    },
    Migration {
        version: 4,
        name: "search_storage",
        sql: include_str!("../migrations/0004_search_storage.sql"),
        // Where columns are stored: every release reads the rows alike.
        additive: true,
    },
];

/// The newest migration this release knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings `schema` up to this release's migrations (creating it when missing), in one
/// transaction under an advisory lock keyed by the schema, so any number of processes can
/// start together. Refuses a schema migrated by a newer release this one cannot read, and
/// one whose applied migrations differ from this release's.
pub async fn migrate(pool: &PgPool, schema: &Schema) -> Result<(), StoreError> {
    let fail = |source| StoreError::Database {
        action: "migrate the schema",
        source,
    };
    crate::transaction(pool.clone(), fail, async |tx| {        crate::query("SELECT pg_advisory_xact_lock($1)")
            .bind(schema.lock_key("migrate"))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("take the migration lock"))?;
        let q = schema.quoted();
        for statement in [
            format!("CREATE SCHEMA IF NOT EXISTS {q}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {q}.migrations (version bigint PRIMARY KEY, name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ),
            format!("CREATE TABLE IF NOT EXISTS {q}.meta (key text PRIMARY KEY, value text NOT NULL)"),
        ] {
            crate::query(&statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("prepare the schema"))?;
        }
        let applied: Vec<(i64, String, String)> = crate::query(&format!(
            "SELECT version, name, checksum FROM {q}.migrations ORDER BY version"
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("read the applied migrations"))?
        .into_iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
        let newest = applied.last().map_or(0, |(v, _, _)| *v);
        check_applied(tx, q, &applied, newest).await?;
        crate::query(&format!("SET LOCAL search_path TO {q}"))
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("set the search path"))?;
        for migration in MIGRATIONS.iter().filter(|m| m.version > newest) {
            sqlx::raw_sql(migration.sql)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("apply a migration"))?;
            crate::query("INSERT INTO migrations (version, name, checksum) VALUES ($1, $2, $3)")
                .bind(migration.version)
                .bind(migration.name)
                .bind(migration.checksum())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("record a migration"))?;
            if !migration.additive {
                crate::query(
                    "INSERT INTO meta (key, value) VALUES ('min_reader', $1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                )
                .bind(migration.version.to_string())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("record the schema's reader version"))?;
            }
        }
        Ok(())
    })
    .await
}

/// Refuses a schema this build cannot read (migrated by a newer build past what it reads)
/// or whose applied migrations differ from ours.
async fn check_applied(
    tx: &mut sqlx::PgConnection,
    q: &str,
    applied: &[(i64, String, String)],
    newest: i64,
) -> Result<(), StoreError> {
    if newest > latest() {
        let min_reader: i64 = crate::query(&format!(
            "SELECT value FROM {q}.meta WHERE key = 'min_reader'"
        ))
        .fetch_optional(tx)
        .await
        .map_err(StoreError::db("read the schema's meta"))?
        .and_then(|row| row.get::<String, _>(0).parse().ok())
        .unwrap_or(newest);
        if min_reader > latest() {
            return Err(StoreError::TooNew {
                known: latest(),
                applied: newest,
                min_reader,
            });
        }
    }
    for (version, name, checksum) in applied {
        if let Some(known) = MIGRATIONS.iter().find(|m| m.version == *version)
            && known.checksum() != *checksum
        {
            return Err(StoreError::ChecksumMismatch {
                version: *version,
                name: name.clone(),
            });
        }
    }
    Ok(())
}

//! Versions of the tracked memory files on PostgreSQL, replacing git: whole snapshots with
//! a parent chain, as git trees are, in `versions`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nanobot_memory_store::{
    MIN_ID_PREFIX, MemoryError, MemoryVersions, RewriteVersion, Snapshot, Version, resolve_prefix,
};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, Row};

use crate::PgScope;
use crate::error::memory as db;

fn version(row: &sqlx::postgres::PgRow) -> Version {
    Version {
        id: row.get(0),
        parent: row.get(1),
        message: row.get(2),
        time: row.get(3),
    }
}

impl PgScope {
    /// Records `files` as a new version through `conn`, which must hold the scope's journal
    /// head row (`FOR UPDATE`: commits of one scope are serialized); `None` when they equal
    /// the latest version's.
    pub(crate) async fn commit_version(
        &self,
        conn: &mut PgConnection,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
    ) -> Result<Option<Version>, MemoryError> {
        let versions = self.inner.t("versions");
        let latest = crate::query(&format!(
            "SELECT id, seq, files FROM {versions} WHERE scope_id = $1 ORDER BY seq DESC LIMIT 1"
        ))
        .bind(self.scope_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db("read the latest version"))?;
        let (parent, seq) = match &latest {
            Some(row) => {
                let stored: Snapshot =
                    serde_json::from_str(row.get::<&str, _>(2)).unwrap_or_default();
                if stored == *files {
                    return Ok(None);
                }
                (Some(row.get::<String, _>(0)), row.get::<i64, _>(1) + 1)
            }
            None => (None, 1),
        };
        let encoded = serde_json::to_string(files).map_err(|e| {
            MemoryError::backend(format!("the version's files cannot be encoded: {e}"))
        })?;
        let mut hasher = Sha256::new();
        for part in [
            parent.as_deref().unwrap_or(""),
            message,
            &time.to_rfc3339(),
            &encoded,
            &seq.to_string(),
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        let id: String = hasher.finalize()[..20]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        crate::query(&format!(
            "INSERT INTO {versions} (scope_id, seq, id, parent, message, time, files) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(self.scope_id)
        .bind(seq)
        .bind(&id)
        .bind(&parent)
        .bind(message)
        .bind(time)
        .bind(&encoded)
        .execute(&mut *conn)
        .await
        .map_err(db("record a version"))?;
        Ok(Some(Version {
            id,
            parent,
            message: message.to_owned(),
            time,
        }))
    }

    /// Locks the scope's journal head row for the rest of the transaction `conn` is in.
    pub(crate) async fn lock_head(
        &self,
        conn: &mut PgConnection,
    ) -> Result<(u64, u64), MemoryError> {
        let row = crate::query(&format!(
            "SELECT latest, dream_cursor FROM {} WHERE scope_id = $1 FOR UPDATE",
            self.inner.t("journal_heads")
        ))
        .bind(self.scope_id)
        .fetch_one(conn)
        .await
        .map_err(db("lock the scope's journal head"))?;
        Ok((
            row.get::<i64, _>(0).unsigned_abs(),
            row.get::<i64, _>(1).unsigned_abs(),
        ))
    }
}

#[async_trait]
impl MemoryVersions for PgScope {
    async fn commit(
        &self,
        message: &str,
        files: &Snapshot,
        time: DateTime<Utc>,
    ) -> Result<Option<Version>, MemoryError> {
        self.inner
            .deadline("commit", async {
                let attempts = std::sync::atomic::AtomicU32::new(0);
                crate::retrying(|| {
                    crate::transaction(self.inner.pool(), db("record a version"), async |tx| {
                        crate::forced_point(&self.inner, tx, "version commit", &attempts)
                            .await
                            .map_err(db("record a version"))?;
                        self.lock_head(tx).await?;
                        let version = self.commit_version(tx, message, files, time).await?;
                        Ok(version)
                    })
                })
                .await
            })
            .await
    }

    async fn log(&self, limit: usize) -> Result<Vec<Version>, MemoryError> {
        self.inner.deadline("log", async {
        let rows = crate::query(&format!(
            "SELECT id, parent, message, time FROM {} WHERE scope_id = $1 ORDER BY seq DESC LIMIT $2",
            self.inner.t("versions")
        ))
        .bind(self.scope_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.inner.pool())
        .await
        .map_err(db("read the version log"))?;
        Ok(rows.iter().map(version).collect())
        }).await
    }

    async fn resolve(&self, id: &str) -> Result<Version, MemoryError> {
        self.inner.deadline("resolve", async {
        let wanted = id.trim().to_ascii_lowercase();
        if wanted.len() < MIN_ID_PREFIX || !wanted.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MemoryError::UnknownVersion { id: id.to_owned() });
        }
        let rows = crate::query(&format!(
            "SELECT id, parent, message, time FROM {} WHERE scope_id = $1 AND id LIKE $2 || '%' LIMIT 20",
            self.inner.t("versions")
        ))
        .bind(self.scope_id)
        .bind(&wanted)
        .fetch_all(&self.inner.pool())
        .await
        .map_err(db("find a version"))?;
        let found: Vec<Version> = rows.iter().map(version).collect();
        let full = resolve_prefix(id, found.iter().map(|v| v.id.as_str()))?.to_owned();
        found
            .into_iter()
            .find(|v| v.id == full)
            .ok_or_else(|| MemoryError::UnknownVersion { id: id.to_owned() })
        }).await
    }

    async fn files_at(&self, id: &str) -> Result<Snapshot, MemoryError> {
        self.inner
            .deadline("files_at", async {
                let row = crate::query(&format!(
                    "SELECT files FROM {} WHERE scope_id = $1 AND id = $2",
                    self.inner.t("versions")
                ))
                .bind(self.scope_id)
                .bind(id)
                .fetch_optional(&self.inner.pool())
                .await
                .map_err(db("read a version's files"))?;
                let Some(row) = row else {
                    return Err(MemoryError::UnknownVersion { id: id.to_owned() });
                };
                serde_json::from_str(row.get::<&str, _>(0)).map_err(|e| {
                    MemoryError::backend(format!(
                        "version {id} holds files that cannot be read: {e}"
                    ))
                })
            })
            .await
    }

    async fn rewrite(&self, edit: RewriteVersion<'_>) -> Result<usize, MemoryError> {
        self.inner
            .deadline("rewrite", async {
                crate::transaction(self.inner.pool(), db("rewrite the versions"), async |tx| {
                    self.lock_head(tx).await?;
                    let versions = self.inner.t("versions");
                    let rows = crate::query(&format!(
                        "SELECT id, parent, message, time, files FROM {versions} WHERE scope_id = $1 ORDER BY seq"
                    ))
                    .bind(self.scope_id)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(db("read the versions"))?;
                    let mut changed = 0;
                    for row in &rows {
                        let version = version(row);
                        let files: Snapshot = serde_json::from_str(row.get::<&str, _>(4))
                            .map_err(|e| MemoryError::backend(format!("version {} holds files that cannot be read: {e}", version.id)))?;
                        let (message, rewritten) = edit(&version, files.clone());
                        if message == version.message && rewritten == files {
                            continue;
                        }
                        let encoded = serde_json::to_string(&rewritten).map_err(|e| {
                            MemoryError::backend(format!("the version's files cannot be encoded: {e}"))
                        })?;
                        crate::query(&format!(
                            "UPDATE {versions} SET message = $3, files = $4 WHERE scope_id = $1 AND id = $2"
                        ))
                        .bind(self.scope_id)
                        .bind(&version.id)
                        .bind(&message)
                        .bind(&encoded)
                        .execute(&mut *tx)
                        .await
                        .map_err(db("rewrite a version"))?;
                        changed += 1;
                    }
                    Ok(changed)
                })
                .await
            })
            .await
    }
}

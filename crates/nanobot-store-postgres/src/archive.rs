//! The two operations that span several ports, each one transaction: the archive commit
//! (journal entries and the session's pointer move) and the memory commit (a Dream change,
//! checked against the lease's fence).

use async_trait::async_trait;
use nanobot_memory_store::{
    ArchiveCommit, ArchiveCommitted, ArchiveFound, MemoryChange, MemoryCommit, MemoryError,
    MemoryFile, Recovery, SessionArchive, Version, lease_lost, session_failure,
};
use nanobot_session_store::{SessionError, SessionKey};
use sqlx::Row;

use crate::PgScope;
use crate::error::memory as db;
use crate::journal::signed;
use crate::sessions::{SESSION_COLUMNS, revision_of, session_row};

impl PgScope {
    /// Checks the fence and locks its lease row until the commit: a holder that lost the
    /// lease writes nothing.
    async fn hold_fence(
        &self,
        tx: &mut sqlx::PgConnection,
        fence: nanobot_memory_store::Fence,
    ) -> Result<(), MemoryError> {
        let held = crate::query(&format!(
            "SELECT 1 FROM {} l WHERE l.scope_id = $1 AND l.job = $2 AND {} FOR UPDATE",
            self.inner.t("leases"),
            crate::lease::held_condition()
        ))
        .bind(self.scope_id)
        .bind("dream")
        .bind(signed(fence.0))
        .fetch_optional(tx)
        .await
        .map_err(db("check the Dream lease"))?;
        match held {
            Some(_) => Ok(()),
            None => Err(lease_lost(fence, None)),
        }
    }

    /// The cursors of an archive of this very slice already journaled (once per slice).
    async fn journaled_archive(
        &self,
        tx: &mut sqlx::PgConnection,
        commit: &ArchiveCommit<'_>,
    ) -> Result<Vec<u64>, sqlx::Error> {
        Ok(crate::query(&format!(
            "SELECT cursor FROM {} WHERE scope_id = $1 AND session_key = $2 AND range_start = $3 \
             AND range_end = $4 AND digest = $5 ORDER BY cursor",
            self.inner.t("journal")
        ))
        .bind(self.scope_id)
        .bind(commit.session.as_str())
        .bind(signed(commit.from))
        .bind(signed(commit.to))
        .bind(commit.digest)
        .fetch_all(tx)
        .await?
        .iter()
        .map(|row| row.get::<i64, _>(0).unsigned_abs())
        .collect())
    }
}

#[async_trait]
impl SessionArchive for PgScope {
    async fn commit_archive(
        &self,
        commit: &ArchiveCommit<'_>,
    ) -> Result<ArchiveCommitted, MemoryError> {
        self.inner.deadline("commit_archive", async {
        let key = commit.session;
        let attempts = std::sync::atomic::AtomicU32::new(0);
        crate::retrying(|| crate::transaction(self.inner.pool(), db("begin an archive"), async |tx| {
            crate::forced_point(&self.inner, tx, "archive", &attempts).await.map_err(db("begin an archive"))?;
            // The session, locked: its revision must be the one the archive was made from.
            let row = crate::query(&format!(
                "SELECT {SESSION_COLUMNS} FROM {} WHERE scope_id = $1 AND session_key = $2 FOR UPDATE",
                self.inner.t("sessions")
            ))
            .bind(self.scope_id)
            .bind(key.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db("lock the archived session"))?;
            let current = row.as_ref().map(session_row);
            SessionError::check_revision(
                key,
                Some(commit.expected),
                current.as_ref().map(|c| c.revision),
            )
            .map_err(session_failure)?;
            let Some(current) = current else {
                return Err(MemoryError::backend("the archived session disappeared"));
            };
            SessionError::check_append_pointer(
                key,
                Some(current.meta.last_consolidated),
                commit.meta.last_consolidated,
                usize::try_from(current.next_seq).unwrap_or(0),
            )
            .map_err(session_failure)?;
            // Once per slice: an archive of this slice already journaled is reused.
            let existing = self.journaled_archive(&mut *tx, commit).await.map_err(db("look for the archive"))?;
            let reused = !existing.is_empty() && !commit.entries.is_empty();
            let cursors = if reused || commit.entries.is_empty() {
                existing
            } else {
                self.append_entries(&mut *tx, &commit.new_entries())
                    .await
                    .map_err(db("journal the archive"))?
            };
            let meta = commit.meta;
            let row = crate::query(&format!(
                "UPDATE {} SET revision = revision + 1, pointer = $2, created_at = $3, updated_at = $4, \
                   metadata = $5, provider_state = $6, title = $7 WHERE session_id = $1 RETURNING epoch, revision",
                self.inner.t("sessions")
            ))
            .bind(current.id)
            .bind(signed(meta.last_consolidated as u64))
            .bind(meta.created_at)
            .bind(meta.updated_at)
            .bind(serde_json::Value::Object(meta.metadata.clone()).to_string())
            .bind(meta.provider_state.as_ref().map(serde_json::Value::to_string))
            .bind(nanobot_session_store::listing_title(&meta.metadata).map(|t| crate::journal::encode(&t)))
            .fetch_one(&mut *tx)
            .await
            .map_err(db("move the session's pointer"))?;
            let revision = revision_of(row.get(0), row.get(1));
            Ok(ArchiveCommitted {
                cursors,
                revision,
                reused,
            })
        }))
        .await
        }).await
    }

    async fn find_archive(
        &self,
        session: &SessionKey,
        from: u64,
    ) -> Result<Vec<ArchiveFound>, MemoryError> {
        self.inner
            .deadline("find_archive", async {
                let rows = crate::query(&format!(
            "SELECT cursor, range_end, digest FROM {} WHERE scope_id = $1 AND session_key = $2 \
             AND range_start = $3 ORDER BY cursor",
            self.inner.t("journal")
        ))
        .bind(self.scope_id)
        .bind(session.as_str())
        .bind(signed(from))
        .fetch_all(&self.inner.pool())
        .await
        .map_err(db("find an archive"))?;
                let mut found: Vec<ArchiveFound> = Vec::new();
                for row in rows {
                    let cursor = row.get::<i64, _>(0).unsigned_abs();
                    let to = row.get::<Option<i64>, _>(1).unwrap_or(0).unsigned_abs();
                    let digest: Option<String> = row.get(2);
                    match found.last_mut() {
                        Some(last)
                            if last.to == to
                                && last.digest == digest
                                && last.cursors.last().is_some_and(|c| c + 1 == cursor) =>
                        {
                            last.cursors.push(cursor);
                        }
                        _ => found.push(ArchiveFound {
                            cursors: vec![cursor],
                            to,
                            digest,
                        }),
                    }
                }
                Ok(found)
            })
            .await
    }
}

#[async_trait]
impl MemoryCommit for PgScope {
    async fn commit(&self, change: &MemoryChange) -> Result<Option<Version>, MemoryError> {
        self.inner
            .deadline("commit", async {
                let attempts = std::sync::atomic::AtomicU32::new(0);
                crate::retrying(|| {
                    crate::transaction(self.inner.pool(), db("begin a memory commit"), async |tx| {
                        crate::forced_point(&self.inner, tx, "memory commit", &attempts)
                            .await
                            .map_err(db("begin a memory commit"))?;
                        let mut step = 0;
                        let mut fault = async |tx: &mut sqlx::PgConnection| {
                            step += 1;
                            crate::fault_point(&self.inner, tx, "memory commit", step - 1)
                                .await
                                .map_err(db("commit a memory change"))
                        };
                        fault(tx).await?;
                        self.hold_fence(tx, change.fence).await?;
                        fault(tx).await?;
                        let (latest, _) = self.lock_head(tx).await?;
                        for file in &change.files {
                            fault(tx).await?;
                            let path = file.file.path();
                            match (&file.file, &file.text) {
                                (MemoryFile::Skill(_), None) => {
                                    self.delete_path(tx, &path, file.expected).await?;
                                }
                                (_, text) => {
                                    self.write_path(
                                        tx,
                                        &path,
                                        text.as_deref().unwrap_or(""),
                                        file.expected,
                                    )
                                    .await?;
                                }
                            }
                        }
                        fault(tx).await?;
                        let version = match &change.version {
                            Some(record) => {
                                self.commit_version(tx, &record.message, &record.files, change.time)
                                    .await?
                            }
                            None => None,
                        };
                        fault(tx).await?;
                        if let Some(cursor) = change.cursor {
                            crate::query(&format!(
                                "UPDATE {} SET dream_cursor = $2 WHERE scope_id = $1",
                                self.inner.t("journal_heads")
                            ))
                            .bind(self.scope_id)
                            .bind(signed(cursor.min(latest)))
                            .execute(&mut *tx)
                            .await
                            .map_err(db("move Dream's cursor"))?;
                        }
                        fault(tx).await?;
                        Ok(version)
                    })
                })
                .await
            })
            .await
    }

    async fn recover(&self, _fence: nanobot_memory_store::Fence) -> Result<Recovery, MemoryError> {
        self.inner
            .deadline("recover", async {
                // A commit is one transaction: there is never a half-applied change to finish.
                Ok(Recovery::Nothing)
            })
            .await
    }
}

//! Operator links between identities on PostgreSQL: append-only records, checked and
//! appended under a transaction-scoped advisory lock so two operators cannot build a chain
//! between them.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_memory_scope::{LinkRecord, LinkTable, ScopeError, UserKey, check_record};
use sqlx::Row;

use crate::Inner;

/// The link table of a deployment.
#[derive(Clone)]
pub struct PgLinks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLinks").finish_non_exhaustive()
    }
}

fn failed(action: &'static str) -> impl Fn(sqlx::Error) -> ScopeError {
    move |error| ScopeError::Storage {
        action: action.to_owned(),
        path: None,
        retryable: crate::error::is_transient(&error),
        source: Box::new(error),
    }
}

impl PgLinks {
    pub(crate) fn new(inner: Arc<Inner>) -> PgLinks {
        PgLinks { inner }
    }

    /// The store these links belong to.
    pub fn store(&self) -> crate::PgStore {
        crate::PgStore {
            inner: self.inner.clone(),
        }
    }

    async fn read(&self, conn: &mut sqlx::PgConnection) -> Result<Vec<LinkRecord>, ScopeError> {
        let rows = crate::query(&format!(
            "SELECT record FROM {} ORDER BY seq",
            self.inner.t("links")
        ))
        .fetch_all(conn)
        .await
        .map_err(failed("read the identity links"))?;
        rows.iter()
            .map(|row| {
                serde_json::from_str(row.get::<&str, _>(0)).map_err(|e| ScopeError::Corrupt {
                    what: "a stored identity link".into(),
                    reason: e.to_string(),
                })
            })
            .collect()
    }
}

#[async_trait]
impl LinkTable for PgLinks {
    async fn records(&self) -> Result<Vec<LinkRecord>, ScopeError> {
        let mut conn = self
            .inner
            .pool()
            .acquire()
            .await
            .map_err(failed("reach the database"))?;
        self.read(&mut conn).await
    }

    async fn append(&self, record: LinkRecord) -> Result<(), ScopeError> {
        crate::transaction(self.inner.pool(), failed("record a link"), async |tx| {
            crate::query("SELECT pg_advisory_xact_lock($1)")
                .bind(self.inner.schema.lock_key("links"))
                .execute(&mut *tx)
                .await
                .map_err(failed("lock the identity links"))?;
            let records = self.read(tx).await?;
            check_record(&records, &record)?;
            let text = serde_json::to_string(&record).map_err(|e| ScopeError::Corrupt {
                what: "a new identity link".into(),
                reason: e.to_string(),
            })?;
            crate::query(&format!(
                "INSERT INTO {} (record, identity, target) VALUES ($1, $2, $3)",
                self.inner.t("links")
            ))
            .bind(text)
            .bind(record.identity.to_string())
            .bind(record.target.to_string())
            .execute(&mut *tx)
            .await
            .map_err(failed("record a link"))?;
            Ok(())
        })
        .await
    }

    async fn forget(&self, user: &UserKey) -> Result<usize, ScopeError> {
        let deleted = crate::query(&format!(
            "DELETE FROM {} WHERE identity = $1 OR target = $1",
            self.inner.t("links")
        ))
        .bind(user.to_string())
        .execute(&self.inner.pool())
        .await
        .map_err(failed("forget a user's links"))?;
        Ok(usize::try_from(deleted.rows_affected()).unwrap_or(0))
    }
}

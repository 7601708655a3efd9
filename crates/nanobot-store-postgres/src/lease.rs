//! Leases with fencing on PostgreSQL: the Dream lease of a scope and the turn lock of a
//! session are rows of `leases`, claimed by one conditional upsert that succeeds only when
//! the row is free (released or expired), each claim with a fence one larger. The clock is
//! the database's `now()`, so instances' clocks never matter. The row stays when released,
//! so fences only grow. No session-level advisory lock is ever held across a model call.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nanobot_memory_store::{
    Fence, Lease, LeaseCapabilities, LeaseHolder, MemoryError, MemoryLease, lease_lost,
};
use nanobot_session_store::{SessionError, SessionKey, TurnLock};
use sqlx::Row;

use crate::error::memory as db;
use crate::{Inner, PgScope};

/// The job name of Dream's lease.
const DREAM: &str = "dream";

/// A claim: the fence and when it runs out.
pub(crate) struct Claim {
    pub(crate) fence: Fence,
    pub(crate) expires_at: DateTime<Utc>,
}

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// The fence of `job` this process dropped and may not have released in the database yet.
fn released_here(inner: &Inner, scope_id: i64, job: &str) -> Option<Fence> {
    inner
        .released
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(scope_id, job.to_owned()))
        .copied()
}

/// Claims `job` of `scope_id` for `holder` for `ttl`, if it is free: released, expired, or
/// dropped by this process.
pub(crate) async fn claim(
    inner: &Inner,
    scope_id: i64,
    job: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Claim>, sqlx::Error> {
    let ours = released_here(inner, scope_id, job);
    let sql = format!(
        "INSERT INTO {leases} AS l (scope_id, job, holder, fence, expires_at) \
         VALUES ($1, $2, $3, 1, now() + $4 * interval '1 millisecond') \
         ON CONFLICT (scope_id, job) DO UPDATE SET holder = EXCLUDED.holder, \
           fence = l.fence + 1, expires_at = EXCLUDED.expires_at \
         WHERE l.holder IS NULL OR l.expires_at <= now() OR l.fence = $5 \
         RETURNING fence, expires_at",
        leases = inner.t("leases")
    );
    let row = crate::query(&sql)
        .bind(scope_id)
        .bind(job)
        .bind(holder)
        .bind(millis(ttl))
        .bind(ours.map(|f| i64::try_from(f.0).unwrap_or(i64::MAX)))
        .fetch_optional(&inner.pool())
        .await?;
    if row.is_some() && ours.is_some() {
        inner
            .released
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(scope_id, job.to_owned()));
    }
    Ok(row.map(|row| Claim {
        fence: Fence(u64::try_from(row.get::<i64, _>(0)).unwrap_or(0)),
        expires_at: row.get(1),
    }))
}

/// Extends the claim `fence` of `job` by `ttl` when it is still the current one (even past
/// its expiry, as long as nobody took it); the new expiry, `None` when it was lost.
pub(crate) async fn renew(
    inner: &Inner,
    scope_id: i64,
    job: &str,
    fence: Fence,
    ttl: Duration,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let sql = format!(
        "UPDATE {} SET expires_at = now() + $4 * interval '1 millisecond' \
         WHERE scope_id = $1 AND job = $2 AND fence = $3 AND holder IS NOT NULL RETURNING expires_at",
        inner.t("leases")
    );
    let row = crate::query(&sql)
        .bind(scope_id)
        .bind(job)
        .bind(i64::try_from(fence.0).unwrap_or(i64::MAX))
        .bind(millis(ttl))
        .fetch_optional(&inner.pool())
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Gives the claim `fence` of `job` back (nothing when it is no longer the current one).
pub(crate) async fn release(
    inner: &Inner,
    scope_id: i64,
    job: &str,
    fence: Fence,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "UPDATE {} SET holder = NULL WHERE scope_id = $1 AND job = $2 AND fence = $3",
        inner.t("leases")
    );
    crate::query(&sql)
        .bind(scope_id)
        .bind(job)
        .bind(i64::try_from(fence.0).unwrap_or(i64::MAX))
        // Need not wait for the disk: a release lost in a server crash only makes the
        // others wait for the expiry.
        .execute(&inner.relaxed())
        .await?;
    let mut released = inner.released.lock().unwrap_or_else(|p| p.into_inner());
    if released.get(&(scope_id, job.to_owned())) == Some(&fence) {
        released.remove(&(scope_id, job.to_owned()));
    }
    Ok(())
}

/// The SQL condition (on alias `l`) that `$fence` is the current, unexpired claim: what
/// every commit made under a lease checks inside its own transaction.
pub(crate) fn held_condition() -> &'static str {
    "l.fence = $3 AND l.holder IS NOT NULL AND l.expires_at > now()"
}

/// Releases a claim when its holder drops it: a task on the runtime, best effort (the
/// expiry frees it anyway).
struct Releaser {
    inner: Arc<Inner>,
    scope_id: i64,
    job: String,
    fence: Fence,
    renewal: Option<tokio::task::JoinHandle<()>>,
    /// Set when the holder gave the lease back itself (and waited for it).
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Releaser {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        if self.done.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // Free at once for this process; for the others when the release lands.
        self.inner
            .released
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((self.scope_id, self.job.clone()), self.fence);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (inner, scope_id, job, fence) = (
                self.inner.clone(),
                self.scope_id,
                std::mem::take(&mut self.job),
                self.fence,
            );
            runtime.spawn(async move {
                if let Err(e) = release(&inner, scope_id, &job, fence).await {
                    tracing::debug!(error = %e, "a lease was not released; it will expire");
                }
            });
        }
    }
}

fn holder_text() -> String {
    format!(
        "pid {} at {}",
        std::process::id(),
        Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
    )
}

impl PgScope {
    /// The session's turn lock: a lease renewed in the background while held (so a long
    /// model call keeps it) and lasting `turn_ttl` past a crash.
    pub(crate) async fn lock_turn(
        &self,
        key: &SessionKey,
    ) -> Result<Option<TurnLock>, SessionError> {
        let job = format!("turn:{}", key.as_str());
        let ttl = self.inner.turn_ttl;
        let claim = claim(&self.inner, self.scope_id, &job, &holder_text(), ttl)
            .await
            .map_err(crate::error::session("take a session's turn"))?;
        let Some(claim) = claim else {
            return Ok(None);
        };
        let renewal = {
            let (inner, scope_id, job, fence) =
                (self.inner.clone(), self.scope_id, job.clone(), claim.fence);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    match renew(&inner, scope_id, &job, fence, ttl).await {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            tracing::warn!(
                                "a turn lock was lost; another instance may take the session"
                            );
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "a turn lock could not be renewed"),
                    }
                }
            })
        };
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let release_now = {
            let (inner, scope_id, job, fence, done, abort) = (
                self.inner.clone(),
                self.scope_id,
                job.clone(),
                claim.fence,
                done.clone(),
                renewal.abort_handle(),
            );
            move || -> nanobot_llm_port::BoxFuture<'static, ()> {
                Box::pin(async move {
                    abort.abort();
                    match release(&inner, scope_id, &job, fence).await {
                        Ok(()) => done.store(true, std::sync::atomic::Ordering::SeqCst),
                        Err(e) => {
                            tracing::debug!(error = %e, "a turn lock was not released; it will expire");
                        }
                    }
                })
            }
        };
        Ok(Some(TurnLock::with_release(
            Releaser {
                inner: self.inner.clone(),
                scope_id: self.scope_id,
                job,
                fence: claim.fence,
                renewal: Some(renewal),
                done,
            },
            release_now,
        )))
    }
}

#[async_trait]
impl MemoryLease for PgScope {
    async fn try_acquire(&self, holder: &str, ttl: Duration) -> Result<Option<Lease>, MemoryError> {
        self.inner
            .deadline("try_acquire", async {
                let claim = claim(&self.inner, self.scope_id, DREAM, holder, ttl)
                    .await
                    .map_err(db("claim the Dream lease"))?;
                Ok(claim.map(|claim| {
                    let releaser = Releaser {
                        inner: self.inner.clone(),
                        scope_id: self.scope_id,
                        job: DREAM.to_owned(),
                        fence: claim.fence,
                        renewal: None,
                        done: Arc::new(std::sync::atomic::AtomicBool::new(false)),
                    };
                    Lease::new(
                        claim.fence,
                        holder,
                        ttl,
                        Some(claim.expires_at),
                        Some(Box::new(releaser)),
                    )
                }))
            })
            .await
    }

    async fn renew(&self, lease: &mut Lease) -> Result<(), MemoryError> {
        self.inner
            .deadline("renew", async {
                if released_here(&self.inner, self.scope_id, DREAM) == Some(lease.fence) {
                    return Err(lease_lost(lease.fence, None));
                }
                match renew(&self.inner, self.scope_id, DREAM, lease.fence, lease.ttl)
                    .await
                    .map_err(db("renew the Dream lease"))?
                {
                    Some(expires) => {
                        lease.expires_at = Some(expires);
                        Ok(())
                    }
                    None => Err(lease_lost(lease.fence, self.current_fence().await?)),
                }
            })
            .await
    }

    async fn check(&self, fence: Fence) -> Result<(), MemoryError> {
        self.inner
            .deadline("check", async {
                if released_here(&self.inner, self.scope_id, DREAM) == Some(fence) {
                    return Err(lease_lost(fence, None));
                }
                let sql = format!(
                    "SELECT 1 FROM {} l WHERE l.scope_id = $1 AND l.job = $2 AND {}",
                    self.inner.t("leases"),
                    held_condition()
                );
                let held = crate::query(&sql)
                    .bind(self.scope_id)
                    .bind(DREAM)
                    .bind(i64::try_from(fence.0).unwrap_or(i64::MAX))
                    .fetch_optional(&self.inner.pool())
                    .await
                    .map_err(db("check the Dream lease"))?;
                match held {
                    Some(_) => Ok(()),
                    None => Err(lease_lost(fence, self.current_fence().await?)),
                }
            })
            .await
    }

    async fn release(&self, lease: Lease) -> Result<(), MemoryError> {
        self.inner
            .deadline("release", async {
                release(&self.inner, self.scope_id, DREAM, lease.fence)
                    .await
                    .map_err(db("release the Dream lease"))?;
                drop(lease);
                Ok(())
            })
            .await
    }

    async fn holder(&self) -> Result<Option<LeaseHolder>, MemoryError> {
        self.inner
            .deadline("holder", async {
                let sql = format!(
                    "SELECT holder, fence, expires_at FROM {} WHERE scope_id = $1 AND job = $2 \
             AND holder IS NOT NULL AND expires_at > now()",
                    self.inner.t("leases")
                );
                let row = crate::query(&sql)
                    .bind(self.scope_id)
                    .bind(DREAM)
                    .fetch_optional(&self.inner.pool())
                    .await
                    .map_err(db("read the Dream lease"))?;
                let released = released_here(&self.inner, self.scope_id, DREAM);
                Ok(row
                    .map(|row| LeaseHolder {
                        holder: row.get(0),
                        fence: Fence(u64::try_from(row.get::<i64, _>(1)).unwrap_or(0)),
                        expires_at: Some(row.get(2)),
                    })
                    .filter(|h| Some(h.fence) != released))
            })
            .await
    }

    fn capabilities(&self) -> LeaseCapabilities {
        LeaseCapabilities {
            expires: true,
            shared_storage: true,
        }
    }
}

impl PgScope {
    /// The fence of the Dream lease's current holder, if any.
    async fn current_fence(&self) -> Result<Option<Fence>, MemoryError> {
        Ok(self.holder().await?.map(|h| h.fence))
    }
}

//! One Dream run at a time per scope, across processes and machines too: a lease with a
//! fencing token, so work done under a lease that was lost can never be committed.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nanobot_llm_port::{Clock, SystemClock};

use crate::error::MemoryError;

/// A fencing token: it grows with every grant of the lease, so a store can tell the holder
/// of now from an earlier one that still believes it holds the lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub u64);

impl std::fmt::Display for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fence {}", self.0)
    }
}

/// A held lease. Dropping it releases it where the backend can do so at once (a lock file,
/// memory); elsewhere (a database) it lapses at its expiry unless given back with
/// [`MemoryLease::release`].
pub struct Lease {
    /// Its fencing token: every commit made under the lease names it.
    pub fence: Fence,
    /// Who holds it (pid, start time, trigger).
    pub holder: String,
    /// How long a grant or a renewal lasts.
    pub ttl: Duration,
    /// When it runs out unless renewed; `None` for a lease that lasts as long as its holder
    /// lives (a file lock, which the holder's death releases).
    pub expires_at: Option<DateTime<Utc>>,
    _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Lease {
    /// A lease as a backend grants it; `guard` is whatever releases it when dropped.
    pub fn new(
        fence: Fence,
        holder: impl Into<String>,
        ttl: Duration,
        expires_at: Option<DateTime<Utc>>,
        guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Lease {
        Lease {
            fence,
            holder: holder.into(),
            ttl,
            expires_at,
            _guard: guard,
        }
    }

    /// Whether a renewal is due at `now`: a third of the time-to-live has passed since the
    /// grant or the last renewal (never for a lease without expiry).
    pub fn renewal_due(&self, now: DateTime<Utc>) -> bool {
        match self.expires_at {
            None => false,
            Some(expires) => {
                let left = (expires - now).to_std().unwrap_or(Duration::ZERO);
                left < self.ttl.saturating_sub(self.ttl / 3)
            }
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("fence", &self.fence)
            .field("holder", &self.holder)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Who holds a lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder's description.
    pub holder: String,
    /// Its fence.
    pub fence: Fence,
    /// When it runs out unless renewed.
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a lease backend offers beyond the contract every backend keeps.
/// Build it with `..Default::default()`, so a capability added later keeps compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseCapabilities {
    /// A grant runs out after its time-to-live unless renewed, so a holder that stalls
    /// loses it (memory, a database). A file lock instead lasts while its holder lives.
    pub expires: bool,
    /// Several instances over the same storage (processes, machines) exclude each other.
    pub shared_storage: bool,
}

/// An exclusive lease on a scope's memory: a scheduled Dream and a manual one never race,
/// and a holder that lost its lease cannot commit.
///
/// Contract (conformance suite, feature `conformance`):
///
/// - At most one holder at a time: while a lease is held and not expired, `try_acquire`
///   from anywhere returns `None`.
/// - Every grant carries a fence larger than any earlier grant's.
/// - `check(fence)` succeeds only for the current, unexpired grant; `renew` extends it by
///   its time-to-live. Both fail with [`MemoryError::LeaseLost`] once the lease expired and
///   someone else took it, or it was released.
/// - Every commit made under a lease checks its fence (in a transactional backend, inside
///   the commit's own transaction).
#[async_trait]
pub trait MemoryLease: Send + Sync {
    /// Takes the lease for `holder` (a short description: pid, start time, trigger) for
    /// `ttl`, or `None` when someone else holds it.
    async fn try_acquire(&self, holder: &str, ttl: Duration) -> Result<Option<Lease>, MemoryError>;

    /// Extends a held lease by its time-to-live; [`MemoryError::LeaseLost`] when it is no
    /// longer held.
    async fn renew(&self, lease: &mut Lease) -> Result<(), MemoryError>;

    /// Succeeds when `fence` is the current, unexpired grant; [`MemoryError::LeaseLost`]
    /// otherwise.
    async fn check(&self, fence: Fence) -> Result<(), MemoryError>;

    /// Gives the lease back at once.
    async fn release(&self, lease: Lease) -> Result<(), MemoryError>;

    /// Who holds the lease now, if anyone.
    async fn holder(&self) -> Result<Option<LeaseHolder>, MemoryError>;

    /// What this backend offers beyond the contract.
    fn capabilities(&self) -> LeaseCapabilities;
}

/// The refusal for a commit or renewal under `fence`, which no longer holds the lease.
pub fn lease_lost(fence: Fence, current: Option<Fence>) -> MemoryError {
    MemoryError::LeaseLost {
        what: match current {
            Some(now) => format!("{fence} was superseded by {now}"),
            None => format!("{fence} expired or was released"),
        },
    }
}

#[derive(Debug, Default)]
struct Grant {
    holder: String,
    fence: Fence,
    expires_at: DateTime<Utc>,
}

#[derive(Debug, Default)]
struct LeaseState {
    grant: Option<Grant>,
    last_fence: u64,
}

/// A lease within one process, expiring by its clock: the reference backend.
#[derive(Clone)]
pub struct InMemoryLease {
    state: Arc<Mutex<LeaseState>>,
    clock: Arc<dyn Clock>,
    broken: crate::broken::Switch,
}

impl std::fmt::Debug for InMemoryLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryLease").finish_non_exhaustive()
    }
}

impl Default for InMemoryLease {
    fn default() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }
}

impl InMemoryLease {
    /// A free lease on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// A free lease whose grants expire by `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        InMemoryLease {
            state: Arc::new(Mutex::new(LeaseState::default())),
            clock,
            broken: crate::broken::Switch::default(),
        }
    }

    /// A lease with one contract rule switched off, to show that the conformance suite
    /// notices (feature `conformance`; never for real use).
    #[cfg(feature = "conformance")]
    pub fn broken(rule: crate::BrokenRule, clock: Arc<dyn Clock>) -> Self {
        InMemoryLease {
            broken: crate::broken::Switch::on(rule),
            ..Self::with_clock(clock)
        }
    }

    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The grant in force at `now`, if any.
    fn current(state: &LeaseState, now: DateTime<Utc>) -> Option<&Grant> {
        state.grant.as_ref().filter(|g| g.expires_at > now)
    }
}

/// Releases an in-memory grant when its lease is dropped, if it is still that grant.
struct Release {
    state: Arc<Mutex<LeaseState>>,
    fence: Fence,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.grant.as_ref().is_some_and(|g| g.fence == self.fence) {
            state.grant = None;
        }
    }
}

fn expiry(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX)
}

#[async_trait]
impl MemoryLease for InMemoryLease {
    async fn try_acquire(&self, holder: &str, ttl: Duration) -> Result<Option<Lease>, MemoryError> {
        let now = self.clock.now();
        let mut state = self.lock();
        if Self::current(&state, now).is_some() {
            return Ok(None);
        }
        state.last_fence += 1;
        let fence = Fence(state.last_fence);
        let expires_at = expiry(now, ttl);
        state.grant = Some(Grant {
            holder: holder.to_owned(),
            fence,
            expires_at,
        });
        let release = Release {
            state: self.state.clone(),
            fence,
        };
        Ok(Some(Lease::new(
            fence,
            holder,
            ttl,
            Some(expires_at),
            Some(Box::new(release)),
        )))
    }

    async fn renew(&self, lease: &mut Lease) -> Result<(), MemoryError> {
        let now = self.clock.now();
        let mut state = self.lock();
        match state.grant.as_mut() {
            // Still ours (even past its expiry, as long as nobody took it).
            Some(grant) if grant.fence == lease.fence => {
                grant.expires_at = expiry(now, lease.ttl);
                lease.expires_at = Some(grant.expires_at);
                Ok(())
            }
            other => Err(lease_lost(lease.fence, other.map(|g| g.fence))),
        }
    }

    async fn check(&self, fence: Fence) -> Result<(), MemoryError> {
        if self.broken.is(crate::broken::Rule::LeaseFence) {
            return Ok(());
        }
        let now = self.clock.now();
        let state = self.lock();
        match Self::current(&state, now) {
            Some(grant) if grant.fence == fence => Ok(()),
            other => Err(lease_lost(fence, other.map(|g| g.fence))),
        }
    }

    async fn release(&self, lease: Lease) -> Result<(), MemoryError> {
        drop(lease);
        Ok(())
    }

    async fn holder(&self) -> Result<Option<LeaseHolder>, MemoryError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(Self::current(&state, now).map(|g| LeaseHolder {
            holder: g.holder.clone(),
            fence: g.fence,
            expires_at: Some(g.expires_at),
        }))
    }

    fn capabilities(&self) -> LeaseCapabilities {
        LeaseCapabilities {
            expires: true,
            shared_storage: false,
        }
    }
}

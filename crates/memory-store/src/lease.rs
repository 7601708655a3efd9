//! One Dream run at a time per workspace, across processes too.

use std::sync::{Arc, Mutex};

use crate::error::MemoryError;

/// Held while a run works; dropping it releases the lease.
pub struct LeaseGuard {
    _release: Box<dyn Send + Sync>,
}

impl LeaseGuard {
    /// A guard that runs `release` when dropped (for backends).
    pub fn new(release: impl Send + Sync + 'static) -> Self {
        LeaseGuard {
            _release: Box::new(release),
        }
    }
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseGuard")
    }
}

/// An exclusive lease on a workspace's memory (a scheduled Dream and a manual one never
/// race). Contract: while a guard lives, `try_acquire` from anywhere returns `None`.
pub trait MemoryLease: Send + Sync {
    /// Takes the lease for `holder` (a short description: pid, start time, trigger), or
    /// `None` when someone else holds it.
    fn try_acquire(&self, holder: &str) -> Result<Option<LeaseGuard>, MemoryError>;

    /// Who holds the lease now, if anyone.
    fn holder(&self) -> Result<Option<String>, MemoryError>;
}

/// A lease within one process.
#[derive(Debug, Clone, Default)]
pub struct MemoryLeaseStore {
    held: Arc<Mutex<Option<String>>>,
}

impl MemoryLeaseStore {
    /// A free lease.
    pub fn new() -> Self {
        Self::default()
    }
}

struct Release(Arc<Mutex<Option<String>>>);

impl Drop for Release {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl MemoryLease for MemoryLeaseStore {
    fn try_acquire(&self, holder: &str) -> Result<Option<LeaseGuard>, MemoryError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_some() {
            return Ok(None);
        }
        *held = Some(holder.to_owned());
        Ok(Some(LeaseGuard::new(Release(self.held.clone()))))
    }

    fn holder(&self) -> Result<Option<String>, MemoryError> {
        Ok(self.held.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

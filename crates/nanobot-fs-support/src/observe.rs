//! Watching the file operations of [`crate::io`] (feature `test-util`): a test installs an
//! [`Observer`] for a directory, and every watched operation below it is shown to the
//! observer before it runs (which may fail it, or cut a write short) and after it succeeded.
//!
//! [`FaultPlan`] counts the operations of a workload and fails the N-th one; the
//! [`crate::crash::Recorder`] records them for simulated power losses. Observers are
//! process-wide and matched by directory, so tests in other directories are not touched.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

pub use crate::io::{EIO, ENOSPC, Op};

/// Something that watches the file operations below a directory.
pub trait Observer: Send + Sync {
    /// Called before `op` runs. `Err` fails the operation with that error (nothing is done);
    /// `Ok(Some(n))` on a write writes only its first `n` bytes and fails it with ENOSPC;
    /// `Ok(None)` lets it run.
    fn before(&self, op: &Op<'_>) -> io::Result<Option<usize>>;
    /// Called after `op` succeeded (a write cut short is shown with the bytes written).
    fn after(&self, op: &Op<'_>);
}

type Registered = Vec<(u64, PathBuf, Arc<dyn Observer>)>;

static OBSERVERS: Mutex<Registered> = Mutex::new(Vec::new());
static ACTIVE: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Removes its observer when dropped.
#[must_use = "the observer is removed when the guard is dropped"]
pub struct Watching {
    id: u64,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut all = OBSERVERS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(id, _, _)| *id != self.id);
        ACTIVE.store(!all.is_empty(), Ordering::SeqCst);
    }
}

/// Shows every watched operation below `root` to `observer` until the guard is dropped.
/// `root` is compared as given: pass the path the stores were opened with (canonical, if
/// they canonicalise).
pub fn watch(root: &Path, observer: Arc<dyn Observer>) -> Watching {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut all = OBSERVERS.lock().unwrap_or_else(PoisonError::into_inner);
    all.push((id, root.to_path_buf(), observer));
    ACTIVE.store(true, Ordering::SeqCst);
    Watching { id }
}

fn matching(op: &Op<'_>) -> Vec<Arc<dyn Observer>> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let all = OBSERVERS.lock().unwrap_or_else(PoisonError::into_inner);
    all.iter()
        .filter(|(_, root, _)| op.is_under(root))
        .map(|(_, _, observer)| Arc::clone(observer))
        .collect()
}

pub(crate) fn before(op: &Op<'_>) -> io::Result<Option<usize>> {
    let mut short = None;
    for observer in matching(op) {
        if let Some(n) = observer.before(op)? {
            short = Some(short.map_or(n, |s: usize| s.min(n)));
        }
    }
    Ok(short)
}

pub(crate) fn after(op: &Op<'_>) {
    for observer in matching(op) {
        observer.after(op);
    }
}

/// How [`FaultPlan`] fails its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The device failed (`EIO`).
    Io,
    /// The disk is full (`ENOSPC`).
    NoSpace,
    /// A write reaches the file only in part (half its bytes), then fails with `ENOSPC`;
    /// any other operation fails with `EIO`.
    ShortWrite,
}

impl Fault {
    /// Every fault, in a fixed order.
    pub const ALL: [Fault; 3] = [Fault::Io, Fault::NoSpace, Fault::ShortWrite];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Io => "eio",
            Fault::NoSpace => "enospc",
            Fault::ShortWrite => "short-write",
        }
    }
}

/// Counts the operations below its directory and fails the one numbered `fail_at` (from 0)
/// once, with `fault`; without `fail_at` it only counts.
#[derive(Debug)]
pub struct FaultPlan {
    fail_at: Option<u64>,
    fault: Fault,
    seen: AtomicU64,
    fired: Mutex<Option<String>>,
}

impl FaultPlan {
    /// A plan that only counts.
    pub fn counting() -> Self {
        FaultPlan {
            fail_at: None,
            fault: Fault::Io,
            seen: AtomicU64::new(0),
            fired: Mutex::new(None),
        }
    }

    /// A plan that fails operation `n` (from 0) with `fault`.
    pub fn failing(n: u64, fault: Fault) -> Self {
        FaultPlan {
            fail_at: Some(n),
            ..FaultPlan::counting()
        }
        .with_fault(fault)
    }

    fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// How many operations it has seen.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// The operation it failed, described (`None` while it has not).
    pub fn fired(&self) -> Option<String> {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Observer for FaultPlan {
    fn before(&self, op: &Op<'_>) -> io::Result<Option<usize>> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        if Some(n) != self.fail_at {
            return Ok(None);
        }
        *self.fired.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(format!("{} on operation {n}: {op:?}", self.fault.name()));
        match (self.fault, op) {
            (Fault::Io, _) => Err(io::Error::from_raw_os_error(EIO)),
            (Fault::NoSpace, _) => Err(io::Error::from_raw_os_error(ENOSPC)),
            (Fault::ShortWrite, Op::Write { bytes, .. }) => Ok(Some(bytes.len() / 2)),
            (Fault::ShortWrite, _) => Err(io::Error::from_raw_os_error(EIO)),
        }
    }

    fn after(&self, _op: &Op<'_>) {}
}

//! AutoCompact: a session idle longer than its TTL is archived through the Consolidator.
//!
//! Unlike nanobot-ai, which lists every session file on disk once a minute to find idle
//! ones, each session has a deadline in memory, set when it was last active; one task
//! sleeps until the earliest deadline. An idle bot with 10,000 sessions does no work until a
//! deadline passes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nanobot_session_store::SessionKey;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::consolidator::{ArchiveRecord, Consolidator};
use crate::error::ConsolidationError;

/// nanobot's default idle time before compaction.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Default)]
struct Schedule {
    /// Deadline of each tracked session.
    deadlines: HashMap<SessionKey, (Instant, u64)>,
    /// The same, ordered by deadline (the sequence number breaks ties).
    queue: BTreeMap<(Instant, u64), SessionKey>,
    /// Sessions with a turn in flight, and how many.
    in_flight: HashMap<SessionKey, usize>,
    /// Sessions being compacted now.
    compacting: HashSet<SessionKey>,
    sequence: u64,
}

impl Schedule {
    fn set(&mut self, key: &SessionKey, deadline: Instant) {
        self.clear(key);
        self.sequence += 1;
        self.deadlines
            .insert(key.clone(), (deadline, self.sequence));
        self.queue.insert((deadline, self.sequence), key.clone());
    }

    fn clear(&mut self, key: &SessionKey) {
        if let Some(slot) = self.deadlines.remove(key) {
            self.queue.remove(&slot);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.queue.keys().next().map(|(deadline, _)| *deadline)
    }
}

/// What one compaction pass did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Compacted {
    /// The session.
    pub key: SessionKey,
    /// The archive made (`None`: nothing was left to archive), or why it failed.
    pub result: Result<Option<ArchiveRecord>, ConsolidationError>,
}

/// Metric: idle compactions, by `outcome` (`archived`, `nothing`, `failed`).
pub const IDLE_COMPACTIONS: &str = "nanobot_idle_compactions_total";

/// Idle compaction with a deadline per session.
pub struct AutoCompact {
    consolidator: Arc<Consolidator>,
    ttl: Duration,
    schedule: Mutex<Schedule>,
    changed: Notify,
    wakeups: AtomicU64,
}

impl std::fmt::Debug for AutoCompact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoCompact")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Marks a turn in flight: its session is not compacted until the guard drops, and its idle
/// time starts then.
#[derive(Debug)]
pub struct TurnGuard {
    compact: Arc<AutoCompact>,
    key: SessionKey,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        let mut schedule = self.compact.schedule();
        if let Some(count) = schedule.in_flight.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                schedule.in_flight.remove(&self.key);
            }
        }
        drop(schedule);
        self.compact.touch(&self.key);
    }
}

impl AutoCompact {
    /// Compacts sessions idle for `ttl` (a zero TTL disables it).
    pub fn new(consolidator: Arc<Consolidator>, ttl: Duration) -> Arc<Self> {
        Arc::new(AutoCompact {
            consolidator,
            ttl,
            schedule: Mutex::new(Schedule::default()),
            changed: Notify::new(),
            wakeups: AtomicU64::new(0),
        })
    }

    fn schedule(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// Records activity: the session's idle time starts now. Internal sessions (`dream:`)
    /// are never tracked.
    pub fn touch(&self, key: &SessionKey) {
        self.touch_at(key, Instant::now());
    }

    /// Records that the session was last active `idle_for` ago (a restart: sessions already
    /// idle are compacted when their time is up, not a full TTL later).
    pub fn touch_since(&self, key: &SessionKey, idle_for: Duration) {
        let now = Instant::now();
        self.touch_at(key, now.checked_sub(idle_for).unwrap_or(now));
    }

    fn touch_at(&self, key: &SessionKey, active_at: Instant) {
        if !self.enabled() || key.is_internal() {
            return;
        }
        let earliest = {
            let mut schedule = self.schedule();
            schedule.set(key, active_at + self.ttl);
            schedule.next_deadline()
        };
        if earliest == Some(active_at + self.ttl) {
            self.changed.notify_one();
        }
    }

    /// Stops tracking a session (deleted, or cleared by `/new`).
    pub fn forget(&self, key: &SessionKey) {
        self.schedule().clear(key);
    }

    /// Marks a turn of `key` in flight until the guard drops.
    pub fn turn_started(self: &Arc<Self>, key: &SessionKey) -> TurnGuard {
        *self.schedule().in_flight.entry(key.clone()).or_insert(0) += 1;
        TurnGuard {
            compact: Arc::clone(self),
            key: key.clone(),
        }
    }

    /// How many sessions wait for their deadline.
    pub fn tracked(&self) -> usize {
        self.schedule().deadlines.len()
    }

    /// How many times the background task woke up (to show an idle bot does no work).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Compacts every session whose deadline has passed and has no turn in flight; a
    /// session in flight keeps its place and is looked at again when its turn ends.
    pub async fn compact_due(&self) -> Vec<Compacted> {
        let now = Instant::now();
        let due: Vec<SessionKey> = {
            let mut schedule = self.schedule();
            let due: Vec<SessionKey> = schedule
                .queue
                .range(..=(now, u64::MAX))
                .map(|(_, key)| key.clone())
                .filter(|key| {
                    !schedule.in_flight.contains_key(key) && !schedule.compacting.contains(key)
                })
                .collect();
            for key in &due {
                schedule.clear(key);
                schedule.compacting.insert(key.clone());
            }
            due
        };
        let mut done = Vec::with_capacity(due.len());
        for key in due {
            let result = self.consolidator.compact_idle(&key).await;
            self.schedule().compacting.remove(&key);
            let outcome = match &result {
                Ok(Some(_)) => "archived",
                Ok(None) => "nothing",
                Err(_) => "failed",
            };
            metrics::counter!(IDLE_COMPACTIONS, "outcome" => outcome).increment(1);
            done.push(Compacted { key, result });
        }
        done
    }

    /// Runs until `shutdown` completes: sleeps until the earliest deadline, compacts what is
    /// due, and reports each compaction to `on_compacted`.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()>,
        mut on_compacted: impl FnMut(Compacted),
    ) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let next = self.schedule().next_deadline();
            let changed = self.changed.notified();
            tokio::select! {
                () = &mut shutdown => return,
                () = changed => continue,
                () = sleep_until(next) => {}
            }
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            for compacted in self.compact_due().await {
                on_compacted(compacted);
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

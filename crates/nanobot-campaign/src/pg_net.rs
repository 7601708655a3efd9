//! Family 7 (its network part): the PostgreSQL store behind the loopback fault proxy
//! (`nanobot_store_postgres::proxy`), with a statement timeout and a pool timeout of one second,
//! while two workers append journal entries and session messages and a chaos task switches
//! the network between added latency, a blackhole, a half-open connection, resets in the
//! middle of statements and health. Every call must end within twice the timeouts set; a
//! call that fails may or may not have committed, so a worker reads back before it writes
//! again; afterwards a fresh pool checks that every acknowledged write is there exactly
//! once and that no task was left behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{HistoryJournal, NewEntry};
use nanobot_store_postgres::proxy::{FaultProxy, NetFault};
use nanobot_store_postgres::{Durability, PgOptions, PgScope, PgStore};

use crate::Plan;
use crate::pg::{drop_schema, reopen_fresh, run_against_the_database};
use crate::report::{Family, percentiles_ms};
use crate::rng::Rng;

const WORKERS: u64 = 2;
/// The statement and pool timeouts set; every call must end within twice this.
const TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn run(plan: &Plan) -> Family {
    run_against_the_database(async |url: String, family: &mut Family| {
        network(plan, &url, family).await
    })
}

#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    failed: AtomicU64,
    over_limit: AtomicU64,
    slowest_failure_us: AtomicU64,
}

async fn network(plan: &Plan, url: &str, family: &mut Family) -> Result<(), String> {
    let schema = format!(
        "campaign_net_{}_{}",
        std::process::id(),
        plan.seed % 100_000
    );
    let upstream =
        FaultProxy::upstream_of(url).ok_or_else(|| format!("no server address in {url}"))?;
    let proxy = FaultProxy::start(upstream)
        .await
        .map_err(|e| format!("the fault proxy did not start: {e}"))?;
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    let mut options = PgOptions::default();
    options.schema = schema.clone();
    options.max_connections = 4;
    options.statement_timeout = TIMEOUT;
    options.acquire_timeout = TIMEOUT;
    options.durability = Durability::Always;
    let store = PgStore::connect(&proxy.url(url), options)
        .await
        .map_err(|e| e.to_string())?;
    let scope = store
        .scope(&ScopeKey::local(Subject::Agent))
        .await
        .map_err(|e| e.to_string())?;
    let result = faults(plan, url, &proxy, &scope, family).await;
    drop(scope);
    drop(store);
    drop(proxy);
    // Everything the store and the proxy started must end with them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tasks_after = metrics.num_alive_tasks();
    family.zero(
        "tasks_left_behind",
        tasks_after.saturating_sub(tasks_before) as u64,
    );
    drop_schema(url, &schema).await;
    result
}

async fn faults(
    plan: &Plan,
    url: &str,
    proxy: &FaultProxy,
    scope: &PgScope,
    family: &mut Family,
) -> Result<(), String> {
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let scope = scope.clone();
        let counts = counts.clone();
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            worker(w, &scope, &counts, &stop).await
        }));
    }
    let mut rng = Rng::new(plan.seed ^ 0x4e7);
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    let mut durations = Vec::new();
    let started = Instant::now();
    // Every kind in turn, each for a seeded time.
    let mut turn = rng.below(5);
    while started.elapsed() < plan.pg_net_time {
        turn += 1;
        let (name, fault, hold) = match turn % 5 {
            0 => (
                "latency",
                NetFault::Latency(Duration::from_millis(50 + rng.below(250))),
                1_000 + rng.below(1_000),
            ),
            1 => ("blackhole", NetFault::Blackhole, 1_000 + rng.below(2_000)),
            2 => ("half_open", NetFault::HalfOpen, 1_000 + rng.below(2_000)),
            3 => (
                "reset_mid_statement",
                NetFault::ResetAfter(64 + rng.below(4_000)),
                500 + rng.below(1_000),
            ),
            _ => ("healthy", NetFault::None, 500 + rng.below(1_000)),
        };
        *kinds.entry(name).or_default() += 1;
        proxy.set(fault);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        if rng.below(4) == 0 {
            proxy.reset_all();
            *kinds.entry("reset_all").or_default() += 1;
        }
        durations.push(hold as f64);
    }
    proxy.set(NetFault::None);
    stop.store(true, Ordering::SeqCst);
    let mut acked: Vec<String> = Vec::new();
    for worker in workers {
        match tokio::time::timeout(Duration::from_secs(60), worker).await {
            Ok(Ok(Ok(mine))) => acked.extend(mine),
            Ok(Ok(Err(problem))) => return Err(problem),
            Ok(Err(panic)) => return Err(format!("a worker panicked: {panic}")),
            Err(_) => return Err("a worker hung after the faults were lifted".into()),
        }
    }

    // A fresh pool, not one that lived through the faults, checks.
    let fresh = reopen_fresh(url, scope).await?;
    let entries = fresh.read_since(0, None).await.map_err(|e| e.to_string())?;
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    let mut previous = 0;
    let mut disorder = 0;
    for entry in &entries {
        *seen.entry(entry.content.as_str()).or_default() += 1;
        if entry.cursor <= previous {
            disorder += 1;
        }
        previous = entry.cursor;
    }
    let lost = acked
        .iter()
        .filter(|id| !seen.contains_key(id.as_str()))
        .count() as u64;
    let doubled = seen.values().filter(|n| **n > 1).count() as u64;
    for id in acked
        .iter()
        .filter(|id| !seen.contains_key(id.as_str()))
        .take(5)
    {
        family.fail(format!(
            "acknowledged entry {id:?} lost (seed {})",
            plan.seed
        ));
    }
    for (kind, n) in &kinds {
        family.set(&format!("faults_{kind}"), *n);
    }
    family.set("fault_hold_ms", percentiles_ms(&mut durations));
    family.set("proxy_connections", proxy.connections());
    family.set("proxy_resets", proxy.resets());
    family.set("calls", counts.calls.load(Ordering::Relaxed));
    family.set("calls_failed", counts.failed.load(Ordering::Relaxed));
    family.set(
        "slowest_failed_call_ms",
        counts.slowest_failure_us.load(Ordering::Relaxed) / 1_000,
    );
    family.set("timeouts_set_ms", TIMEOUT.as_millis() as u64);
    family.set("acknowledged_entries", acked.len() as u64);
    family.zero(
        "calls_over_twice_their_timeout",
        counts.over_limit.load(Ordering::Relaxed),
    );
    family.zero("acknowledged_lost", lost);
    family.zero("written_twice", doubled);
    family.zero("cursors_out_of_order", disorder);
    Ok(())
}

/// Appends entries (`net w<w> <n>`) until told to stop, timing every call; returns the
/// acknowledged ones. After a failure the entry may be there: the worker reads back before
/// it appends again, so nothing is written twice.
async fn worker(
    w: u64,
    scope: &PgScope,
    counts: &Counts,
    stop: &AtomicBool,
) -> Result<Vec<String>, String> {
    let mut acked = Vec::new();
    let mut n = 0u64;
    let mut unsure = false;
    let limit = TIMEOUT * 2;
    let timed = |started: Instant, failed: bool| {
        counts.calls.fetch_add(1, Ordering::Relaxed);
        let took = started.elapsed();
        if failed {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            counts
                .slowest_failure_us
                .fetch_max(took.as_micros() as u64, Ordering::Relaxed);
        }
        if took > limit {
            counts.over_limit.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let id = format!("net w{w} {n}");
        if unsure {
            // Did the failed append commit? Ask before writing it again.
            let started = Instant::now();
            match scope.read_last(1_000).await {
                Ok(last) => {
                    timed(started, false);
                    unsure = false;
                    if last.iter().any(|e| e.content == id) {
                        acked.push(id);
                        n += 1;
                        continue;
                    }
                }
                Err(e) => {
                    timed(started, true);
                    if !e.is_retryable() {
                        return Err(format!("worker {w}: a read failed for good: {e}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let started = Instant::now();
        match scope.append(&[NewEntry::text(&id)]).await {
            Ok(_) => {
                timed(started, false);
                acked.push(id);
                n += 1;
            }
            Err(e) => {
                timed(started, true);
                if !e.is_retryable() {
                    return Err(format!("worker {w}: an append failed for good: {e}"));
                }
                unsure = true;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(acked)
}

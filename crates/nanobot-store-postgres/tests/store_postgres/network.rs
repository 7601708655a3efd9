//! The store behind the loopback fault proxy (`nanobot_store_postgres::proxy`): added latency, a
//! blackhole, a half-open connection and a reset in the middle of a statement. Every call
//! ends within twice the timeouts set (statement 1 s, pool 1 s; the call deadline is then
//! 1.5 s), with a retryable error when it fails; a write cut by a reset is all or nothing;
//! the store works again once the network does, without reopening it; no task is left
//! hanging.

use std::time::{Duration, Instant};

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{HistoryJournal, NewEntry};
use nanobot_store_postgres::proxy::{FaultProxy, NetFault};
use nanobot_store_postgres::testing::{TestSchema, url};
use nanobot_store_postgres::{PgOptions, PgStore};

use crate::support::available;

const LIMIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_fire_within_twice_their_setting_and_the_store_recovers() {
    if !available() {
        return;
    }
    let (owner, proxy, store) = behind_proxy(2).await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    scope.append(&[NewEntry::text("healthy")]).await.unwrap();

    // Latency: slower, not failing.
    proxy.set(NetFault::Latency(Duration::from_millis(200)));
    let started = Instant::now();
    scope.append(&[NewEntry::text("slow")]).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));

    for fault in [NetFault::Blackhole, NetFault::HalfOpen] {
        settled(&store).await;
        proxy.set(fault);
        let started = Instant::now();
        let error = scope
            .append(&[NewEntry::text("into the void")])
            .await
            .expect_err("no answer can come back");
        let took = started.elapsed();
        assert!(took <= LIMIT, "{fault:?}: the call took {took:?}");
        assert!(error.is_retryable(), "{fault:?}: {error}");
        proxy.set(NetFault::None);
        recovers(&scope, &format!("{fault:?}")).await;
    }

    // A call already in flight when the network stalls: its connection was acquired and its
    // statement sent, so only the call's own deadline can end it.
    for fault in [NetFault::Blackhole, NetFault::HalfOpen] {
        settled(&store).await;
        proxy.set(NetFault::Latency(Duration::from_millis(300)));
        let started = Instant::now();
        let entry = [NewEntry::text("in flight")];
        // Once two of the call's writes (of the four an append makes) have reached the
        // server, the proxy itself sets the fault: inside the transaction, at the same point
        // of the exchange however loaded the machine is.
        proxy.set_after_writes(proxy.forwarded_upstream() + 2, fault);
        let outcome = tokio::time::timeout(Duration::from_secs(10), scope.append(&entry))
            .await
            .unwrap_or_else(|_| panic!("{fault:?}: a call in flight hung"));
        let took = started.elapsed();
        let error = outcome.expect_err("the answer cannot come back");
        assert!(
            error.to_string().contains("did not answer"),
            "{fault:?} in flight: the call's deadline should end it: {error}"
        );
        assert!(took <= LIMIT, "{fault:?} in flight: the call took {took:?}");
        assert!(error.is_retryable(), "{fault:?} in flight: {error}");
        proxy.set(NetFault::None);
        recovers(&scope, &format!("{fault:?} in flight")).await;
    }

    // A reset in the middle of a multi-entry append: all of it or none of it.
    let before = scope.latest_cursor().await.unwrap();
    let big: Vec<String> = (0..40)
        .map(|i| format!("entry {i} {}", "x".repeat(2_000)))
        .collect();
    let entries: Vec<NewEntry<'_>> = big.iter().map(|t| NewEntry::text(t)).collect();
    proxy.set(NetFault::ResetAfter(30_000));
    let outcome = scope.append(&entries).await;
    proxy.set(NetFault::None);
    let error = outcome.expect_err("the connection was reset mid-statement");
    assert!(error.is_retryable(), "{error}");
    assert!(proxy.resets() > 0);
    recovers(&scope, "a reset").await;
    let written: Vec<_> = scope
        .read_since(before, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.content.starts_with("entry "))
        .collect();
    assert!(
        written.is_empty() || written.len() == 40,
        "{} of 40 entries",
        written.len()
    );

    drop(scope);
    drop(store);
    drop(proxy);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tasks_after = metrics.num_alive_tasks();
    assert!(
        tasks_after <= tasks_before,
        "tasks alive: {tasks_before} before, {tasks_after} after"
    );
    drop(owner);
}

/// A connection whose peer goes silent during the pool's own check of it on its way back
/// (a round trip sqlx does not bound) holds its slot for good. Once every slot is lost that
/// way and no call has come back for longer than any call may take, the store replaces the
/// pool and works again, without reopening it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_every_connection_is_lost_is_replaced() {
    if !available() {
        return;
    }
    let (owner, proxy, store) = behind_proxy(1).await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    scope.append(&[NewEntry::text("healthy")]).await.unwrap();
    settled(&store).await;

    // Each chunk waits 200 ms in the proxy, so when the call returns, the two checks of its
    // connection on the way back (the store's bounded one, then sqlx's) have not reached the
    // server yet: the network goes silent right after the second one does.
    proxy.set(NetFault::Latency(Duration::from_millis(200)));
    scope
        .append(&[NewEntry::text("last before the stall")])
        .await
        .unwrap();
    proxy.set_after_writes(proxy.forwarded_upstream() + 2, NetFault::HalfOpen);
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set(NetFault::None);
    let pool = store.pool();
    assert_eq!(
        (pool.size(), pool.num_idle()),
        (1, 0),
        "the only connection should be held by the stalled check"
    );

    let started = Instant::now();
    recovers(&scope, "every connection was lost").await;
    assert_eq!(store.pools_renewed(), 1);
    // Call deadline 1.5 s twice, plus the pool's 1 s wait, since the last call came back.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    scope.append(&[NewEntry::text("after")]).await.unwrap();
    drop(owner);
}

/// Waits until every connection of the store's pool is idle again (a connection goes back
/// to the pool in the background after its call), so the next fault meets a call and not
/// the pool's own check of a connection given back.
async fn settled(store: &PgStore) {
    let started = Instant::now();
    let pool = store.pool();
    while pool.num_idle() < pool.size() as usize {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a connection never came back to the pool: {} open, {} idle",
            pool.size(),
            pool.num_idle()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A fresh schema (its owner store, dropped last), the fault proxy in front of the server,
/// and a store connecting through it with `max_connections`, statement and pool timeouts of
/// 1 s.
async fn behind_proxy(max_connections: u32) -> (PgStore, FaultProxy, PgStore) {
    let url = url().unwrap();
    let owner = TestSchema::new(&url).store().await;
    let upstream = FaultProxy::upstream_of(&url).expect("the test database's address");
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let store = PgStore::connect(&proxy.url(&url), {
        let mut value = PgOptions::default();
        value.schema = owner.schema().name().to_owned();
        value.max_connections = max_connections;
        value.statement_timeout = Duration::from_secs(1);
        value.acquire_timeout = Duration::from_secs(1);
        value
    })
    .await
    .unwrap();
    (owner, proxy, store)
}

/// The same store answers again within a few seconds of the network coming back.
async fn recovers(scope: &nanobot_store_postgres::PgScope, after: &str) {
    let started = Instant::now();
    loop {
        match scope.append(&[NewEntry::text("back")]).await {
            Ok(_) => return,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                assert!(e.is_retryable(), "after {after}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after {after}, the store did not recover: {e}"),
        }
    }
}

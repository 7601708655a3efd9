//! The store behind the loopback fault proxy (`store_postgres::proxy`): added latency, a
//! blackhole, a half-open connection and a reset in the middle of a statement. Every call
//! ends within twice the timeouts set (statement 1 s, pool 1 s; the call deadline is then
//! 1.5 s), with a retryable error when it fails; a write cut by a reset is all or nothing;
//! the store works again once the network does, without reopening it; no task is left
//! hanging.

use std::time::{Duration, Instant};

use memory_scope::{ScopeKey, Subject};
use memory_store::{HistoryJournal, NewEntry};
use store_postgres::proxy::{FaultProxy, NetFault};
use store_postgres::testing::{TestSchema, url};
use store_postgres::{PgOptions, PgStore};

use crate::support::available;

const LIMIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_fire_within_twice_their_setting_and_the_store_recovers() {
    if !available() {
        return;
    }
    let url = url().unwrap();
    let owner = TestSchema::new(&url).store().await;
    let upstream = FaultProxy::upstream_of(&url).expect("the test database's address");
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let store = PgStore::connect(
        &proxy.url(&url),
        PgOptions {
            schema: owner.schema().name().to_owned(),
            max_connections: 2,
            statement_timeout: Duration::from_secs(1),
            acquire_timeout: Duration::from_secs(1),
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
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

/// The same store answers again within a few seconds of the network coming back.
async fn recovers(scope: &store_postgres::PgScope, after: &str) {
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

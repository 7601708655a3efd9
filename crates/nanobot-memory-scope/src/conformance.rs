//! The conformance suite every [`LinkTable`] backend runs (feature `conformance`): links
//! and unlinks in order, the refusals (self links, chains, unlinking what is not linked),
//! erasure, and two instances over one storage that cannot build a chain between them.
//!
//! ```ignore
//! nanobot_memory_scope::links_conformance!(memory, || async { Arc::new(InMemoryLinks::new()) as _ },
//!     reopen = |first: &Arc<dyn LinkTable>| { let first = first.clone(); async move { first } });
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use chrono::{TimeZone, Utc};

use crate::{LinkAction, LinkRecord, LinkTable, UserKey, canonical_user, links_in_force};

fn user(text: &str) -> UserKey {
    UserKey::parse(text).unwrap()
}

fn record(identity: &str, target: &str, action: LinkAction, minute: u32) -> LinkRecord {
    LinkRecord {
        action,
        identity: user(identity),
        target: user(target),
        by: "operator".into(),
        at: Utc.with_ymd_and_hms(2026, 12, 1, 9, minute, 0).unwrap(),
    }
}

/// A new table is empty; links and unlinks come back in order, with who and when, and the
/// links in force follow them.
pub async fn link_and_unlink(links: Arc<dyn LinkTable>) {
    assert!(links.records().await.unwrap().is_empty());
    let first = record("discord:9", "telegram:1", LinkAction::Link, 1);
    links.append(first.clone()).await.unwrap();
    links
        .append(record("slack:3", "telegram:1", LinkAction::Link, 2))
        .await
        .unwrap();
    let records = links.records().await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0], first);
    let force = links_in_force(&records);
    assert_eq!(
        canonical_user(&force, &user("discord:9")),
        user("telegram:1")
    );
    assert_eq!(canonical_user(&force, &user("slack:3")), user("telegram:1"));
    links
        .append(record("discord:9", "telegram:1", LinkAction::Unlink, 3))
        .await
        .unwrap();
    let force = links_in_force(&links.records().await.unwrap());
    assert_eq!(
        canonical_user(&force, &user("discord:9")),
        user("discord:9")
    );
    assert_eq!(canonical_user(&force, &user("slack:3")), user("telegram:1"));
}

/// No self links, no chains (links stay one step deep), no unlinking what is not linked;
/// a refused record leaves the table as it was.
pub async fn refusals(links: Arc<dyn LinkTable>) {
    links
        .append(record("discord:9", "telegram:1", LinkAction::Link, 1))
        .await
        .unwrap();
    for bad in [
        record("telegram:1", "telegram:1", LinkAction::Link, 2),
        record("slack:3", "discord:9", LinkAction::Link, 2),
        record("telegram:1", "slack:3", LinkAction::Link, 2),
        record("discord:9", "telegram:1", LinkAction::Link, 2),
        record("slack:3", "telegram:1", LinkAction::Unlink, 2),
        record("discord:9", "slack:3", LinkAction::Unlink, 2),
    ] {
        assert!(links.append(bad.clone()).await.is_err(), "{bad:?}");
    }
    assert_eq!(links.records().await.unwrap().len(), 1);
}

/// Erasure: every record naming a user goes, as identity or as target.
pub async fn forget(links: Arc<dyn LinkTable>) {
    links
        .append(record("discord:9", "telegram:1", LinkAction::Link, 1))
        .await
        .unwrap();
    links
        .append(record("slack:3", "matrix:4", LinkAction::Link, 2))
        .await
        .unwrap();
    assert_eq!(links.forget(&user("telegram:1")).await.unwrap(), 1);
    let left = links.records().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].identity, user("slack:3"));
    assert_eq!(links.forget(&user("nobody:0")).await.unwrap(), 0);
}

/// Two instances over one storage see each other's links, and the checks hold across them:
/// a chain cannot be built by linking through one and then the other.
pub async fn shared_links(first: Arc<dyn LinkTable>, second: Arc<dyn LinkTable>) {
    first
        .append(record("discord:9", "telegram:1", LinkAction::Link, 1))
        .await
        .unwrap();
    assert_eq!(second.records().await.unwrap().len(), 1);
    assert!(
        second
            .append(record("telegram:1", "slack:3", LinkAction::Link, 2))
            .await
            .is_err(),
        "a chain built across two instances"
    );
    // Racing links that would form a chain between them: at most one lands.
    let (a, b) = tokio_free_join(
        first.append(record("matrix:5", "irc:6", LinkAction::Link, 3)),
        second.append(record("irc:6", "xmpp:7", LinkAction::Link, 3)),
    )
    .await;
    assert!(a.is_err() || b.is_err(), "both halves of a chain landed");
    let records = first.records().await.unwrap();
    let force = links_in_force(&records);
    for target in force.values() {
        assert!(!force.contains_key(target), "a chain: {records:?}");
    }
}

/// Both futures, polled in turn on the caller's task (no runtime needed).
async fn tokio_free_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

/// Makes one `#[tokio::test]` per case. `$make` evaluates to an async closure returning a
/// fresh, empty `Arc<dyn LinkTable>`; `reopen`, an async closure taking it and returning
/// another instance over the same storage (for memory: the same table); `available`, a
/// `fn() -> bool` saying whether the backend's service is there.
#[macro_export]
macro_rules! links_conformance {
    ($name:ident, $make:expr, reopen = $reopen:expr $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const AVAILABLE: fn() -> bool = {
                let check: fn() -> bool = || true;
                $( let check: fn() -> bool = $available; )?
                check
            };
            $crate::links_conformance!(@case $make, link_and_unlink, refusals, forget);
            #[tokio::test]
            async fn shared_links() {
                if !AVAILABLE() {
                    return;
                }
                let make = $make;
                let first = make().await;
                let second = ($reopen)(&first).await;
                $crate::conformance::shared_links(first, second).await;
            }
        }
    };
    (@case $make:expr, $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            $crate::conformance::$case(make().await).await;
        }
    )*};
}

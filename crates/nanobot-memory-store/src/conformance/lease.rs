//! The Dream lease's cases: exclusion, fencing, expiry, renewal.

use super::*;

pub(super) const SECOND: Duration = Duration::from_secs(1);

/// One holder at a time; fences grow with every grant; released on drop.
pub async fn lease_exclusive(lease: impl MemoryLease) {
    assert_eq!(lease.holder().await.unwrap(), None);
    let first = lease
        .try_acquire("pid 1, scheduled run", 60 * SECOND)
        .await
        .unwrap()
        .expect("free at first");
    assert!(
        lease
            .try_acquire("pid 2", 60 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    let holder = lease.holder().await.unwrap().expect("held");
    assert_eq!(holder.holder, "pid 1, scheduled run");
    assert_eq!(holder.fence, first.fence);
    let fence = first.fence;
    drop(first);
    assert_eq!(lease.holder().await.unwrap(), None);
    let second = lease
        .try_acquire("pid 2", 60 * SECOND)
        .await
        .unwrap()
        .expect("free after release");
    assert!(
        second.fence > fence,
        "fences grow: {} then {}",
        fence,
        second.fence
    );
    lease.release(second).await.unwrap();
    assert_eq!(lease.holder().await.unwrap(), None);
}

/// A commit checks its fence: the current grant passes, an earlier one is refused with
/// `LeaseLost` (released, superseded), and renewing it is refused too.
pub async fn lease_fencing(lease: impl MemoryLease) {
    let mut first = lease
        .try_acquire("first", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    lease.check(first.fence).await.unwrap();
    lease.renew(&mut first).await.unwrap();
    let old = first.fence;
    lease.release(first).await.unwrap();
    let error = lease.check(old).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    let mut second = lease
        .try_acquire("second", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    lease.check(second.fence).await.unwrap();
    let error = lease.check(old).await.unwrap_err();
    assert!(
        matches!(error, MemoryError::LeaseLost { .. }),
        "a superseded fence passed the check: {error}"
    );
    lease.renew(&mut second).await.unwrap();
}

/// A grant runs out after its time-to-live: another holder takes it, and the stalled
/// holder's check and renewal are refused. (Sleeps past a short time-to-live.)
pub async fn lease_expiry(lease: impl MemoryLease) -> Outcome {
    if !lease.capabilities().expires {
        return Outcome::Skipped(
            "this lease lasts as long as its holder lives (a file lock); it never expires".into(),
        );
    }
    let ttl = Duration::from_millis(1_500);
    let mut stalled = lease.try_acquire("stalled", ttl).await.unwrap().unwrap();
    std::thread::sleep(ttl + Duration::from_millis(600));
    let taken = lease
        .try_acquire("next", 60 * SECOND)
        .await
        .unwrap()
        .expect("an expired lease can be taken");
    assert!(taken.fence > stalled.fence);
    let error = lease.check(stalled.fence).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    let error = lease.renew(&mut stalled).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    lease.check(taken.fence).await.unwrap();
    Outcome::Ran
}

/// Renewing extends a grant: renewed before it ran out, it is still held after its first
/// time-to-live.
pub async fn lease_renewal(lease: impl MemoryLease) -> Outcome {
    if !lease.capabilities().expires {
        return Outcome::Skipped(
            "this lease lasts as long as its holder lives (a file lock); renewal only confirms it"
                .into(),
        );
    }
    let ttl = Duration::from_millis(1_500);
    let mut held = lease.try_acquire("renewing", ttl).await.unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(900));
    lease.renew(&mut held).await.unwrap();
    std::thread::sleep(Duration::from_millis(900));
    lease.check(held.fence).await.unwrap();
    assert!(lease.try_acquire("other", ttl).await.unwrap().is_none());
    Outcome::Ran
}

/// Two instances over one storage exclude each other, and share one fence sequence.
pub async fn shared_lease(first: impl MemoryLease, second: impl MemoryLease) {
    let held = first
        .try_acquire("first instance", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert!(
        second
            .try_acquire("second instance", 60 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        second.holder().await.unwrap().map(|h| h.holder).as_deref(),
        Some("first instance")
    );
    let fence = held.fence;
    first.release(held).await.unwrap();
    let taken = second
        .try_acquire("second instance", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert!(taken.fence > fence);
    assert!(matches!(
        first.check(fence).await,
        Err(MemoryError::LeaseLost { .. })
    ));
    first.check(taken.fence).await.unwrap();
}

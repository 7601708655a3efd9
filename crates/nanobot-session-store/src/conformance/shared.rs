//! The cases two instances over one storage run: turn locks and stale writers across them.

use super::*;

/// Two instances over one storage: a turn held through one is refused through the other,
/// and free again for it once the release reaches the storage (at once for a file lock; a
/// database's release lands a moment after the drop).
pub async fn shared_turn_locks(first: impl SessionStore, second: impl SessionStore) {
    let k = key("turn:shared");
    let held = first
        .try_lock_turn(&k)
        .await
        .unwrap()
        .expect("free at first");
    assert!(
        second.try_lock_turn(&k).await.unwrap().is_none(),
        "the other instance took a turn the first holds"
    );
    drop(held);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if second.try_lock_turn(&k).await.unwrap().is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "a dropped turn lock was never released for the other instance"
        );
        YieldOnce(false).await;
    }
}

/// Pending once, waking itself: lets the runtime run other tasks (a release in flight).
pub(super) struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

/// Two instances over one storage: each sees the other's writes, and a write from a stale
/// revision is refused whichever instance makes it.
pub async fn shared_stale_writers(first: impl SessionStore, second: impl SessionStore) {
    let k = key("stale:shared");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(message(0), at(0));
    let created = first.save_changes(&mut session, None).await.unwrap();
    assert_eq!(second.current_revision(&k).await.unwrap(), created);
    let mut theirs = second
        .load(&k)
        .await
        .unwrap()
        .expect("seen by the other")
        .session;
    theirs.add_message(message(1), at(1));
    let moved = second.save_changes(&mut theirs, created).await.unwrap();
    assert_ne!(moved, created);
    session.add_message(message(2), at(2));
    let error = first.save_changes(&mut session, created).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    let reloaded = first.load(&k).await.unwrap().unwrap();
    assert_eq!(reloaded.session.messages().len(), 2);
    assert_eq!(reloaded.revision, moved.unwrap());
    assert_eq!(
        first.list().await.unwrap().len(),
        second.list().await.unwrap().len()
    );
}

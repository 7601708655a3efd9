//! The conformance suite every [`SessionStore`] backend runs (feature `conformance`).
//!
//! Each case is a public async function taking a fresh, empty store. The
//! [`session_store_conformance!`](crate::session_store_conformance) macro makes one test per
//! case:
//!
//! ```ignore
//! nanobot_session_store::session_store_conformance!(memory, || async {
//!     nanobot_session_store::InMemorySessionStore::new()
//! }, skips = [shared_turn_locks, shared_stale_writers]);
//! ```
//!
//! Cases that need two store instances over the same storage (two processes, two machines)
//! take both; the macro makes the second with `reopen = |first| async { .. }`. A case a
//! backend cannot run is skipped loudly, and only when the backend's test declares it in
//! `skips = [..]`: an undeclared skip fails, and so does a declared skip that ran, so the
//! list in each backend's test is exactly what that backend cannot do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

use chrono::NaiveDate;
use serde_json::json;

use crate::{
    Append, Session, SessionError, SessionKey, SessionMeta, SessionStore, SessionStoreExt,
    StoredMessage,
};

/// What a conformance case did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran its checks.
    Ran,
    /// It could not run on this backend, for this reason.
    Skipped(String),
}

/// A case's return value as an [`Outcome`] (a case that always runs returns `()`).
pub trait IntoOutcome {
    /// The outcome.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Ran
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

/// Settles a case's outcome against the skips a backend's test declares: a skip it did not
/// declare fails, and so does a declared skip that ran. Skips are printed.
pub fn settle(case: &str, outcome: impl IntoOutcome, declared: &[&str]) {
    match (outcome.into_outcome(), declared.contains(&case)) {
        (Outcome::Ran, false) => {}
        (Outcome::Skipped(reason), true) => {
            eprintln!("conformance case {case} skipped: {reason}");
        }
        (Outcome::Skipped(reason), false) => {
            panic!("conformance case {case} skipped but not declared in skips: {reason}")
        }
        (Outcome::Ran, true) => {
            panic!("conformance case {case} is declared in skips but ran; take it off the list")
        }
    }
}

/// `second`, typed as another instance of `first`'s kind (for the suites' macros).
pub fn same_kind<T>(_first: &T, second: Option<T>) -> Option<T> {
    second
}

/// Why a two-instance case is skipped when the backend's test gives no second instance.
pub const NO_SECOND_INSTANCE: &str = "the backend's test gives no second instance over the same storage (its state lives in one process)";

fn at(second: u32) -> chrono::NaiveDateTime {
    NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, second)
        .unwrap()
}

fn key(name: &str) -> SessionKey {
    SessionKey::new(name).unwrap()
}

fn message(i: usize) -> StoredMessage {
    let role = if i.is_multiple_of(2) {
        nanobot_llm_port::Role::User
    } else {
        nanobot_llm_port::Role::Assistant
    };
    StoredMessage::new(role, format!("message {i}"))
        .with("timestamp", format!("2026-01-02T03:04:{:02}", i % 60))
}

/// Unknown keys: load gives nothing, delete says false.
pub async fn unknown_key(store: impl SessionStore) {
    assert!(store.load(&key("nobody:0")).await.unwrap().is_none());
    assert!(!store.delete(&key("nobody:0")).await.unwrap());
}

/// What is written comes back: unicode, large payloads, every field, metadata.
pub async fn round_trip(store: impl SessionStore) {
    let k = key("telegram:héllo 日本 🚀");
    let mut session = Session::new(k.clone(), at(0));
    session.add_message(
        StoredMessage::user("héllo 日本\n\"quoted\" \u{1b}[0m 🚀")
            .with("media", json!(["/m/a.png"])),
        at(1),
    );
    let big = "x".repeat(1 << 20);
    session.add_message(
        StoredMessage::assistant(big.clone())
            .with("tool_calls", json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]))
            .with("reasoning_content", "why")
            .with("unknown_field", json!({"nested": [1, 2.5, null, true]})),
        at(2),
    );
    session.metadata_mut().insert("title".into(), json!("标题"));
    let revision = store.save_changes(&mut session, None).await.unwrap();
    assert!(revision.is_some());
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session, session);
    assert_eq!(Some(loaded.revision), revision);
    assert!(loaded.repairs.is_empty());
    assert_eq!(
        loaded.session.messages()[1]
            .content()
            .unwrap()
            .as_str()
            .unwrap()
            .len(),
        big.len()
    );
}

/// Appends keep their order across many writes, and revisions chain.
pub async fn ordering(store: impl SessionStore) {
    let k = key("cli:order");
    let mut session = Session::new(k.clone(), at(0));
    let mut revision = None;
    for i in 0..50 {
        session.add_message(message(i), at(1));
        revision = store.save_changes(&mut session, revision).await.unwrap();
    }
    let loaded = store.load(&k).await.unwrap().unwrap();
    let contents: Vec<String> = loaded
        .session
        .messages()
        .iter()
        .map(|m| m.content().unwrap().as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..50).map(|i| format!("message {i}")).collect();
    assert_eq!(contents, expected);
    assert_eq!(Some(loaded.revision), revision);
}

/// A writer holding an old revision gets a conflict and writes nothing.
pub async fn conflict_detection(store: impl SessionStore) {
    let k = key("cli:conflict");
    let mut first = Session::new(k.clone(), at(0));
    first.add_message(message(0), at(1));
    let base = store.save_changes(&mut first, None).await.unwrap();
    let mut second = store.load(&k).await.unwrap().unwrap().session;

    first.add_message(message(1), at(2));
    store.save_changes(&mut first, base).await.unwrap();

    second.add_message(message(2), at(3));
    let error = store.save_changes(&mut second, base).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    // Creating a session that exists is a conflict too.
    let mut again = Session::new(k.clone(), at(0));
    again.add_message(message(9), at(1));
    assert!(
        store
            .save_changes(&mut again, None)
            .await
            .unwrap_err()
            .is_conflict()
    );

    let stored = store.load(&k).await.unwrap().unwrap().session;
    assert_eq!(stored.messages().len(), 2);
}

/// The pointer can never pass the message count.
pub async fn pointer_bounds(store: impl SessionStore) {
    let k = key("cli:pointer");
    let mut session = Session::new(k.clone(), at(0));
    for i in 0..4 {
        session.add_message(message(i), at(1));
    }
    let revision = store.save_changes(&mut session, None).await.unwrap();
    let mut meta = session.meta().clone();
    meta.last_consolidated = 5;
    let error = store
        .append(
            &k,
            revision,
            Append {
                messages: &[],
                meta: Some(&meta),
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            SessionError::InvalidPointer {
                pointer: 5,
                messages: 4,
                ..
            }
        ),
        "{error}"
    );
    session.set_last_consolidated(4).unwrap();
    assert!(session.set_last_consolidated(5).is_err());
    // A new session may be created with its pointer already set.
    let mut fresh = Session::new(key("cli:pointer-new"), at(0));
    fresh.add_message(message(0), at(1));
    fresh.add_message(message(1), at(1));
    fresh.set_last_consolidated(2).unwrap();
    store.save_changes(&mut fresh, None).await.unwrap();
    assert_eq!(
        store
            .load(&key("cli:pointer-new"))
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        2
    );
    let revision = store.save_changes(&mut session, revision).await.unwrap();
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session.last_consolidated(), 4);
    // Monotonic: an append cannot move the pointer back; a rewrite (clear) can.
    let mut meta = session.meta().clone();
    meta.last_consolidated = 2;
    let error = store
        .append(
            &k,
            revision,
            Append {
                messages: &[],
                meta: Some(&meta),
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, SessionError::PointerMovedBack { from: 4, to: 2, .. }),
        "{error}"
    );
    session.clear(at(5));
    store.save_changes(&mut session, revision).await.unwrap();
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        0
    );
}

/// A rewrite replaces the whole session atomically; metadata's last write wins.
pub async fn rewrite_and_metadata(store: impl SessionStore) {
    let k = key("cli:rewrite");
    let mut session = Session::new(k.clone(), at(0));
    for i in 0..6 {
        session.add_message(message(i), at(1));
    }
    session.set_last_consolidated(3).unwrap();
    session
        .metadata_mut()
        .insert("title".into(), json!("first"));
    let mut revision = store.save_changes(&mut session, None).await.unwrap();
    session
        .metadata_mut()
        .insert("title".into(), json!("second"));
    revision = store.save_changes(&mut session, revision).await.unwrap();
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .meta()
            .metadata["title"],
        "second"
    );

    session.clear(at(9));
    session.add_message(message(100), at(10));
    revision = store.save_changes(&mut session, revision).await.unwrap();
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session.messages().len(), 1);
    assert_eq!(loaded.session.last_consolidated(), 0);
    assert_eq!(loaded.session.meta().metadata["title"], "second");
    assert_eq!(Some(loaded.revision), revision);

    let meta = SessionMeta {
        last_consolidated: 1,
        ..loaded.session.meta().clone()
    };
    store
        .append(
            &k,
            revision,
            Append {
                messages: &[],
                meta: Some(&meta),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        1
    );
}

/// Concurrent appends to different sessions, and racing appends to one: every accepted
/// message is stored exactly once.
pub async fn concurrent_appends(store: impl SessionStore + 'static) {
    let store = std::sync::Arc::new(store);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = std::sync::Arc::clone(&store);
        tasks.push(async move {
            let k = key(&format!("cli:concurrent-{t}"));
            let mut session = Session::new(k, at(0));
            let mut revision = None;
            for i in 0..20 {
                session.add_message(message(i), at(1));
                revision = store.save_changes(&mut session, revision).await.unwrap();
            }
        });
    }
    join_all(tasks).await;
    for t in 0..8 {
        let loaded = store
            .load(&key(&format!("cli:concurrent-{t}")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(loaded.session.messages().len(), 20);
    }
    // Two writers race on one session from the same revision: exactly one wins.
    let k = key("cli:race");
    let mut base = Session::new(k.clone(), at(0));
    base.add_message(message(0), at(1));
    let revision = store.save_changes(&mut base, None).await.unwrap();
    let mut a = store.load(&k).await.unwrap().unwrap().session;
    let mut b = a.clone();
    a.add_message(message(1), at(2));
    b.add_message(message(2), at(2));
    let (ra, rb) = (
        store.save_changes(&mut a, revision).await,
        store.save_changes(&mut b, revision).await,
    );
    assert!(ra.is_ok() != rb.is_ok());
    assert_eq!(
        store
            .load(&k)
            .await
            .unwrap()
            .unwrap()
            .session
            .messages()
            .len(),
        2
    );
}

/// Listing: every session with its count, title and preview, newest first; delete removes.
pub async fn list_and_delete(store: impl SessionStore) {
    for (i, name) in ["cli:a", "cli:b", "cli:c"].iter().enumerate() {
        let mut session = Session::new(key(name), at(0));
        session.add_message(
            StoredMessage::user(format!("  hello\n  from {name}  ")),
            at(i as u32 + 1),
        );
        session.add_message(StoredMessage::assistant("answer"), at(i as u32 + 1));
        if i == 1 {
            session
                .metadata_mut()
                .insert("title".into(), json!("<think>hmm</think>Trip plans"));
        }
        store.save_changes(&mut session, None).await.unwrap();
    }
    let rows = store.list().await.unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["cli:c", "cli:b", "cli:a"]);
    assert_eq!(rows[0].message_count, 2);
    assert_eq!(rows[0].preview, "hello from cli:c");
    assert_eq!(rows[1].title.as_deref(), Some("Trip plans"));
    assert_eq!(rows[0].updated_at, at(3));
    assert!(store.delete(&key("cli:b")).await.unwrap());
    assert!(store.load(&key("cli:b")).await.unwrap().is_none());
    assert_eq!(store.list().await.unwrap().len(), 2);
}

/// Flush keeps everything and the revision it returns is the one to write at next; after a
/// flush even `updated_at` (which a backend may record lazily) is current.
pub async fn flush_keeps_everything(store: impl SessionStore) {
    let k = key("cli:flush");
    let mut session = Session::new(k.clone(), at(0));
    let mut revision = None;
    for i in 0..30 {
        session.add_message(message(i), at(i as u32 + 1));
        if i % 3 == 0 {
            session.metadata_mut().insert("turn".into(), json!(i));
        }
        revision = store.save_changes(&mut session, revision).await.unwrap();
        if i % 7 == 0 {
            revision = Some(store.flush(&k, revision.unwrap()).await.unwrap());
        }
    }
    revision = Some(store.flush(&k, revision.unwrap()).await.unwrap());
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded.session, session);
    assert_eq!(Some(loaded.revision), revision);
}

/// A replay view gives the same history as the whole session, and names its size.
pub async fn replay_view(store: impl SessionStore) {
    let k = key("cli:view");
    let mut session = Session::new(k.clone(), at(0));
    for i in 0..40 {
        session.add_message(message(i), at(1));
    }
    session.set_last_consolidated(36).unwrap();
    let revision = store
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    store.flush(&k, revision).await.unwrap();
    let view = store.open_for_replay(&k).await.unwrap().unwrap();
    assert_eq!(view.message_count, 40);
    let counter = nanobot_llm_port::Utf8Bytes;
    for options in [
        crate::HistoryOptions::default(),
        crate::HistoryOptions::with_token_budget(60),
    ] {
        assert_eq!(
            view.history(&options, &counter),
            crate::get_history(session.messages(), 36, &options, &counter)
        );
    }
    assert!(
        store
            .open_for_replay(&key("nobody:0"))
            .await
            .unwrap()
            .is_none()
    );
}

/// Polls every future in turn until all are done (no runtime needed).
async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut futures: Vec<Option<std::pin::Pin<Box<F>>>> =
        futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in futures.iter_mut() {
            if let Some(future) = slot {
                if future.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
}

/// Turn locks: one holder per session, released when dropped, independent per key and
/// available for a session that does not exist yet.
pub async fn turn_locks(store: impl SessionStore) {
    let one = key("turn:1");
    let held = store
        .try_lock_turn(&one)
        .await
        .unwrap()
        .expect("free at first");
    assert!(
        store.try_lock_turn(&one).await.unwrap().is_none(),
        "a second holder while the first holds it"
    );
    let other = store.try_lock_turn(&key("turn:2")).await.unwrap();
    assert!(other.is_some(), "another session's lock is independent");
    drop(held);
    assert!(
        store.try_lock_turn(&one).await.unwrap().is_some(),
        "released when dropped"
    );
}

/// The current revision is the one the last write returned, without a load.
pub async fn current_revision(store: impl SessionStore) {
    let k = key("revision:1");
    assert_eq!(store.current_revision(&k).await.unwrap(), None);
    let mut session = Session::new(k.clone(), at(1));
    session.add_message(message(0), at(1));
    let first = store.save_changes(&mut session, None).await.unwrap();
    assert_eq!(store.current_revision(&k).await.unwrap(), first);
    session.add_message(message(1), at(2));
    let second = store.save_changes(&mut session, first).await.unwrap();
    assert_ne!(first, second);
    assert_eq!(store.current_revision(&k).await.unwrap(), second);
    assert_eq!(
        store.current_revision(&k).await.unwrap(),
        store.load(&k).await.unwrap().map(|l| l.revision)
    );
}

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
struct YieldOnce(bool);

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

/// Makes one `#[tokio::test]` per conformance case for a backend. `$make` is an expression
/// that evaluates to an async closure (or fn) returning a fresh, empty store; `reopen`, an
/// async closure taking `&store` and returning a second instance over the same storage;
/// `skips`, the cases this backend cannot run; `available`, a `fn() -> bool` that says
/// whether the backend's service is there (it records the skip itself when not).
#[macro_export]
macro_rules! session_store_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance_available!($($available)?);
            $crate::session_store_conformance!(@case $make, unknown_key, round_trip, ordering,
                conflict_detection, pointer_bounds, rewrite_and_metadata, concurrent_appends,
                list_and_delete, flush_keeps_everything, replay_view, turn_locks,
                current_revision);
            $crate::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_turn_locks, shared_stale_writers);
        }
    };
    (@case $make:expr, $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            $crate::conformance::settle(
                stringify!($case),
                $crate::conformance::$case(make().await).await,
                SKIPS,
            );
        }
    )*};
}

/// The suites' `available = ..` check (used by their macros): a `fn() -> bool` each test
/// calls first, returning `false` (after recording its skip) when the backend's service is
/// missing; without one, always available.
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_available {
    () => {
        const AVAILABLE: fn() -> bool = || true;
    };
    ($available:expr) => {
        const AVAILABLE: fn() -> bool = $available;
    };
}

/// The two-instance cases of a suite (used by the suites' macros): each gets a fresh store
/// and, when the backend's test gives `reopen`, a second instance over the same storage;
/// without one the case is skipped (and must be declared).
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_pair_cases {
    ($module:path, $make:expr, $reopen:tt, $($case:ident),*) => {$(
        $crate::conformance_pair_cases!(@one $module, $make, $reopen, $case);
    )*};
    (@one $module:path, $make:expr, [$($reopen:expr)?], $case:ident) => {
        #[tokio::test]
        async fn $case() {
            use $module as cases;
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            let first = make().await;
            let second = $crate::conformance::same_kind(&first, {
                #[allow(unused_mut)]
                let mut second = None;
                $( second = Some(($reopen)(&first).await); )?
                second
            });
            let outcome = match second {
                Some(second) => $crate::conformance::IntoOutcome::into_outcome(
                    cases::$case(first, second).await,
                ),
                None => $crate::conformance::Outcome::Skipped(
                    $crate::conformance::NO_SECOND_INSTANCE.to_owned(),
                ),
            };
            $crate::conformance::settle(stringify!($case), outcome, SKIPS);
        }
    };
}

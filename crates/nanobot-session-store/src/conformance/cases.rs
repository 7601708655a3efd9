//! The cases one store runs: round trips, ordering, conflicts, the pointer, rewrites, concurrency, listing, replay, turn locks.

use super::*;

pub(super) fn at(second: u32) -> chrono::NaiveDateTime {
    NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, second)
        .unwrap()
}

pub(super) fn key(name: &str) -> SessionKey {
    SessionKey::new(name).unwrap()
}

pub(super) fn message(i: usize) -> StoredMessage {
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
    a_new_session_may_start_consolidated(&store).await;
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

/// A new session may be created with its pointer already set.
pub(super) async fn a_new_session_may_start_consolidated(store: &impl SessionStore) {
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
pub(super) async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
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

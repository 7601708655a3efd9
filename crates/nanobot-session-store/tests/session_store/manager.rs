//! The manager: one live copy per session, a bounded cache, saves, clear, list, delete.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use nanobot_session_store::{
    Append, HistoryOptions, InMemorySessionStore, Loaded, Revision, Session, SessionError,
    SessionInfo, SessionKey, SessionManager, SessionStore, TurnLock,
};
use serde_json::json;

use crate::support::{FixedClock, TempDir, a, counter, file_store, key, u};

/// Counts loads, to prove the cache answers.
#[derive(Default)]
struct Counting {
    inner: InMemorySessionStore,
    loads: AtomicUsize,
}

#[async_trait]
impl SessionStore for Counting {
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load(key).await
    }
    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        self.inner.append(key, expected, append).await
    }
    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        self.inner.rewrite(session, expected).await
    }
    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        self.inner.list().await
    }
    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.inner.delete(key).await
    }
    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        self.inner.try_lock_turn(key).await
    }
    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        self.inner.current_revision(key).await
    }
    async fn open_for_replay(
        &self,
        key: &SessionKey,
    ) -> Result<Option<nanobot_session_store::ReplayView>, SessionError> {
        // Counted as a load: the in-memory store reads the whole session for a replay.
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.inner.open_for_replay(key).await
    }
    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        self.inner.flush(key, expected).await
    }
    fn capabilities(&self) -> nanobot_session_store::SessionCapabilities {
        self.inner.capabilities()
    }
}

fn manager(store: Arc<dyn SessionStore>) -> SessionManager {
    SessionManager::new(store, Arc::new(FixedClock), counter())
}

#[tokio::test]
async fn case_34_one_live_copy_one_load() {
    let store = Arc::new(Counting::default());
    let manager = manager(store.clone());
    let one = manager.get_or_create(&key("c:1")).await.unwrap();
    let two = manager.get_or_create(&key("c:1")).await.unwrap();
    assert!(Arc::ptr_eq(&one, &two));
    assert_eq!(store.loads.load(Ordering::SeqCst), 1);
    assert_eq!(one.message_count(), 0);
    assert_eq!(one.last_consolidated(), 0);
}

#[tokio::test]
async fn case_37_evicted_but_held_stays_the_same_copy() {
    let store = Arc::new(Counting::default());
    let manager = manager(store.clone()).with_cache_capacity(1);
    let first = manager.get_or_create(&key("c:first")).await.unwrap();
    first.add_message(u("remember me"));
    manager.save(&first).await.unwrap();
    let _second = manager.get_or_create(&key("c:second")).await.unwrap();
    // `first` was evicted from the strong cache but is still held: same object.
    let again = manager.get_or_create(&key("c:first")).await.unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    drop((first, again));
    let _third = manager.get_or_create(&key("c:third")).await.unwrap();
    // Unreferenced and evicted: reloaded from the store with its content.
    let loads = store.loads.load(Ordering::SeqCst);
    let reloaded = manager.get_or_create(&key("c:first")).await.unwrap();
    assert_eq!(store.loads.load(Ordering::SeqCst), loads + 1);
    assert_eq!(reloaded.message_count(), 1);
}

#[tokio::test]
async fn case_18_saves_survive_a_reload() {
    let dir = TempDir::new("manager-save");
    let manager = manager(Arc::new(file_store(dir.path())));
    let k = key("cli:reload");
    let handle = manager.get_or_create(&k).await.unwrap();
    for text in ["first", "second", "third", "fourth", "fifth"] {
        handle.add_message(u(text));
        manager.save(&handle).await.unwrap();
    }
    manager.end_turn(&handle).await.unwrap();
    manager.invalidate(&k);
    let reloaded = manager.get_or_create(&k).await.unwrap();
    assert!(!Arc::ptr_eq(&handle, &reloaded));
    let texts: Vec<String> = reloaded.read(|s| {
        s.messages()
            .iter()
            .map(|m| m.content().unwrap().as_str().unwrap().to_owned())
            .collect()
    });
    assert_eq!(texts, ["first", "second", "third", "fourth", "fifth"]);
    assert!(reloaded.read(|s| s.messages()[0].get("timestamp").is_some()));
}

#[tokio::test]
async fn case_5_clear_keeps_other_metadata() {
    let manager = manager(Arc::new(InMemorySessionStore::new()));
    let handle = manager.get_or_create(&key("c:clear")).await.unwrap();
    for i in 0..10 {
        handle.add_message(u(&format!("m{i}")));
    }
    handle.update(|s| {
        s.set_last_consolidated(5).unwrap();
        s.set_provider_state(Some(json!({"kind": "k"})));
        s.metadata_mut().insert("title".into(), json!("T"));
        s.metadata_mut()
            .insert("_last_summary".into(), json!({"text": "x"}));
    });
    manager.save(&handle).await.unwrap();
    manager.clear(&handle).await.unwrap();
    manager.invalidate(handle.key());
    let cleared = manager.get_or_create(&key("c:clear")).await.unwrap();
    cleared.read(|s| {
        assert!(s.messages().is_empty());
        assert_eq!(s.last_consolidated(), 0);
        assert!(s.meta().provider_state.is_none());
        assert_eq!(
            s.meta().metadata,
            *json!({"title": "T"}).as_object().unwrap()
        );
    });
}

#[tokio::test]
async fn case_40_delete_list_and_history() {
    let manager = manager(Arc::new(InMemorySessionStore::new()));
    let handle = manager.get_or_create(&key("c:del")).await.unwrap();
    handle.add_message(u("question"));
    handle.add_message(a("answer"));
    manager.save(&handle).await.unwrap();
    assert_eq!(handle.history(&HistoryOptions::default()).len(), 2);
    let rows = manager.list().await.unwrap();
    assert_eq!(
        (rows.len(), rows[0].message_count, rows[0].preview.as_str()),
        (1, 2, "question")
    );
    assert!(manager.delete(&key("c:del")).await.unwrap());
    assert!(!manager.delete(&key("c:del")).await.unwrap());
    assert_eq!(
        manager
            .get_or_create(&key("c:del"))
            .await
            .unwrap()
            .message_count(),
        0
    );
}

#[tokio::test]
async fn flush_all_saves_every_live_session() {
    let dir = TempDir::new("flush-all");
    let manager = manager(Arc::new(file_store(dir.path())));
    let handles: Vec<_> = futures_like_join(&manager, &["a:1", "a:2", "a:3"]).await;
    for handle in &handles {
        handle.add_message(u("unsaved"));
    }
    let (flushed, error) = manager.flush_all().await;
    assert_eq!((flushed, error.is_none()), (3, true));
    let fresh = self::manager(Arc::new(file_store(dir.path())));
    assert_eq!(fresh.list().await.unwrap().len(), 3);
}

async fn futures_like_join(
    manager: &SessionManager,
    keys: &[&str],
) -> Vec<Arc<nanobot_session_store::SessionHandle>> {
    let mut out = Vec::new();
    for k in keys {
        out.push(manager.get_or_create(&key(k)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_on_one_session_lose_nothing() {
    let dir = TempDir::new("tasks");
    let manager = Arc::new(manager(Arc::new(file_store(dir.path()))));
    let k = key("cli:busy");
    let mut tasks = Vec::new();
    for t in 0..4 {
        let manager = Arc::clone(&manager);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let handle = manager.get_or_create(&k).await.unwrap();
                handle.add_message(u(&format!("t{t}-{i}")));
                manager.save(&handle).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let fresh = self::manager(Arc::new(file_store(dir.path())));
    assert_eq!(fresh.get_or_create(&k).await.unwrap().message_count(), 100);
}

#[tokio::test]
async fn case_4_timestamp_follows_role_and_content() {
    let manager = manager(Arc::new(InMemorySessionStore::new()));
    let handle = manager.get_or_create(&key("c:order")).await.unwrap();
    handle.add_message(u("hi").with("media", json!(["/m/a.png"])));
    handle.add_message(u("sdk").with("timestamp", "2023/05/30 (Tue) 17:27"));
    handle.read(|s| {
        let keys: Vec<&str> = s.messages()[0]
            .fields()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["role", "content", "timestamp", "media"]);
        let stamp = s.messages()[0].get("timestamp").unwrap().as_str().unwrap();
        assert!(
            nanobot_session_store::parse_isoformat(stamp).is_some(),
            "{stamp}"
        );
        assert_eq!(
            s.messages()[1].get("timestamp").unwrap(),
            "2023/05/30 (Tue) 17:27"
        );
    });
}

#[tokio::test]
async fn case_39_transient_sessions_are_never_written() {
    let dir = TempDir::new("transient");
    let manager = manager(Arc::new(file_store(dir.path())));
    let k = key("websocket:tmp");
    let persistent = manager.get_or_create(&k).await.unwrap();
    persistent.add_message(u("kept"));
    manager.save(&persistent).await.unwrap();

    let transient = manager.get_or_create_transient(&k);
    assert!(!transient.is_persistent());
    assert_eq!(transient.message_count(), 0, "no history is loaded");
    transient.add_message(u("secret"));
    manager.end_turn(&transient).await.unwrap();
    assert!(Arc::ptr_eq(&manager.get_cached(&k).unwrap(), &transient));
    assert!(Arc::ptr_eq(
        &manager.get_or_create_transient(&k),
        &transient
    ));
    let on_disk =
        std::fs::read_to_string(dir.path().join(format!("{}.jsonl", k.storage_stem()))).unwrap();
    assert!(!on_disk.contains("secret"));
    manager.invalidate(&k);
    assert!(manager.get_cached(&k).is_none());
    assert_eq!(manager.get_or_create(&k).await.unwrap().message_count(), 1);
}

#[tokio::test]
async fn case_40_delete_tells_the_observer() {
    let manager = manager(Arc::new(InMemorySessionStore::new()));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    manager.set_delete_observer(Box::new(move |k| log.lock().unwrap().push(k.to_string())));
    let handle = manager.get_or_create(&key("c:gone")).await.unwrap();
    handle.add_message(u("x"));
    manager.save(&handle).await.unwrap();
    assert!(manager.delete(&key("c:gone")).await.unwrap());
    assert!(!manager.delete(&key("c:never")).await.unwrap());
    assert_eq!(*seen.lock().unwrap(), ["c:gone", "c:never"]);
}

fn texts(handle: &nanobot_session_store::SessionHandle) -> Vec<String> {
    handle.read(|s| {
        s.messages()
            .iter()
            .map(|m| m.content().unwrap().as_str().unwrap_or("").to_owned())
            .collect()
    })
}

#[tokio::test]
async fn case_45_46_47_fork_before_a_user_turn() {
    let dir = TempDir::new("fork");
    let manager = manager(Arc::new(file_store(dir.path())));
    let source = manager.get_or_create(&key("c:src")).await.unwrap();
    for text in ["u1", "a1", "u2", "a2", "u3"] {
        let message = if text.starts_with('u') {
            u(text)
        } else {
            a(text)
        };
        source.add_message(message);
    }
    source.update(|s| {
        for (k, v) in [
            ("webui", json!({"pinned": true})),
            ("title", json!("T")),
            ("goal_state", json!({})),
        ] {
            s.metadata_mut().insert(k.into(), v);
        }
        s.metadata_mut()
            .insert("_last_summary".into(), json!({"text": "s"}));
        s.set_last_consolidated(4).unwrap();
        s.set_provider_state(Some(json!({"kind": "k"})));
    });
    manager.save(&source).await.unwrap();

    let fork = manager
        .fork(&key("c:src"), &key("c:fork"), 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(texts(&fork), ["u1", "a1"]);
    fork.read(|s| {
        assert_eq!(
            s.meta().metadata,
            *json!({"webui": {"pinned": true}}).as_object().unwrap()
        );
        assert_eq!(
            s.last_consolidated(),
            0,
            "the pointer passed the copy: reset, summary dropped"
        );
        assert!(s.meta().provider_state.is_none());
    });
    // Persisted at once.
    let fresh = self::manager(Arc::new(file_store(dir.path())));
    assert_eq!(
        texts(&fresh.get_or_create(&key("c:fork")).await.unwrap()),
        ["u1", "a1"]
    );

    assert_eq!(
        texts(
            &manager
                .fork(&key("c:src"), &key("c:all"), 3)
                .await
                .unwrap()
                .unwrap()
        )
        .len(),
        5
    );
    assert!(
        manager
            .fork(&key("c:src"), &key("c:x"), 4)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        manager
            .fork(&key("c:missing"), &key("c:x"), 0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        manager
            .fork(&key("c:src"), &key("c:none"), 0)
            .await
            .unwrap()
            .unwrap()
            .message_count()
            == 0
    );

    // A pointer that still fits is kept with its summary.
    source.update(|s| s.set_last_consolidated(2).unwrap());
    let kept = manager
        .fork(&key("c:src"), &key("c:kept"), 1)
        .await
        .unwrap()
        .unwrap();
    kept.read(|s| {
        assert_eq!(s.last_consolidated(), 2);
        assert!(s.meta().metadata.contains_key("_last_summary"));
    });

    // Runtime context is not copied.
    let ctx = manager.get_or_create(&key("c:ctx")).await.unwrap();
    ctx.add_message(u("hi\n\nRUNTIME").with(
        "_runtime_context",
        json!({"version": 1, "sources": [], "suffix": "RUNTIME"}),
    ));
    ctx.add_message(u("next"));
    let copy = manager
        .fork(&key("c:ctx"), &key("c:ctx2"), 1)
        .await
        .unwrap()
        .unwrap();
    copy.read(|s| {
        assert_eq!(s.messages()[0].content().unwrap(), "hi");
        assert!(s.messages()[0].get("_runtime_context").is_none());
    });
}

#[tokio::test]
async fn a_merge_keeps_the_higher_pointer_over_shared_messages() {
    let dir = TempDir::new("merge-pointer");
    let one = manager(Arc::new(file_store(dir.path())));
    let two = manager(Arc::new(file_store(dir.path())));
    let k = key("cli:merge");
    let first = one.get_or_create(&k).await.unwrap();
    for i in 0..6 {
        first.add_message(u(&format!("m{i}")));
    }
    one.save(&first).await.unwrap();
    let second = two.get_or_create(&k).await.unwrap();
    second.add_message(u("from two"));
    two.save(&second).await.unwrap();
    // `one` archived four messages meanwhile; its save merges onto two's version.
    first.update(|s| s.set_last_consolidated(4)).unwrap();
    first.add_message(a("from one"));
    one.save(&first).await.unwrap();
    let fresh = manager(Arc::new(file_store(dir.path())));
    let all = fresh.get_or_create(&k).await.unwrap();
    assert_eq!(all.message_count(), 8);
    assert_eq!(all.last_consolidated(), 4);
}

#[tokio::test]
async fn token_counts_are_recorded_once_and_survive_a_reload() {
    use nanobot_llm_port::testing::MockTokenCounter;
    let dir = TempDir::new("recorded-tokens");
    let mut counting = MockTokenCounter::new();
    counting
        .expect_count()
        .times(2)
        .returning(|text| text.len());
    counting.expect_encoding().return_const("bytes".to_owned());
    let manager = SessionManager::new(
        Arc::new(file_store(dir.path())),
        Arc::new(FixedClock),
        Arc::new(counting),
    )
    .with_recorded_token_counts(true);
    let handle = manager.get_or_create(&key("cli:tokens")).await.unwrap();
    handle.add_message(u("hello"));
    handle.add_message(a("hi there"));
    manager.end_turn(&handle).await.unwrap();
    assert_eq!(
        handle.read(|s| s.messages()[0].get("_tokens").cloned()),
        Some(json!({"bytes": 9}))
    );

    // Another process with a counter that must not count: the recorded numbers serve.
    let mut silent = MockTokenCounter::new();
    silent.expect_count().times(0);
    silent.expect_encoding().return_const("bytes".to_owned());
    let other = SessionManager::new(
        Arc::new(file_store(dir.path())),
        Arc::new(FixedClock),
        Arc::new(silent),
    );
    let reloaded = other.get_or_create(&key("cli:tokens")).await.unwrap();
    let (history, tokens) = reloaded.read(|s| {
        nanobot_session_store::get_history_counted(
            s.messages(),
            0,
            &HistoryOptions::default(),
            &*other_counter(),
        )
    });
    assert_eq!((history.len(), tokens), (2, 9 + 12));
    // A change to a message drops its recorded count.
    let mut changed = reloaded.read(|s| s.messages()[0].clone());
    changed.insert("content", "changed");
    assert!(changed.get("_tokens").is_none());
}

fn other_counter() -> Arc<dyn nanobot_llm_port::TokenCounter> {
    let mut silent = nanobot_llm_port::testing::MockTokenCounter::new();
    silent.expect_count().times(0);
    silent.expect_encoding().return_const("bytes".to_owned());
    Arc::new(silent)
}

//! Profiling helper: cold loads of a 10,000-message session file, repeated.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]
use std::sync::Arc;

use nanobot_bench_workload::{SEED, message_stream};
use nanobot_llm_port::SystemClock;
use nanobot_session_store::{
    FileSessionStore, FileStoreOptions, Session, SessionKey, SessionStore, SessionStoreExt,
    StoredMessage,
};

fn main() {
    let dir = std::env::temp_dir().join(format!("w2-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let key = SessionKey::new("bench:load").unwrap();
    let options = || {
        let mut value = FileStoreOptions::default();
        value.clock = Arc::new(SystemClock);
        value
    };
    rt.block_on(async {
        let store = FileSessionStore::open(&dir, options()).unwrap();
        let mut session = Session::new(key.clone(), chrono::NaiveDateTime::default());
        for m in message_stream(SEED, 10_000) {
            session.add_message(
                StoredMessage::from_map(m.as_object().cloned().unwrap()),
                chrono::NaiveDateTime::default(),
            );
        }
        store.save_changes(&mut session, None).await.unwrap();
        let mut total = 0;
        for _ in 0..100 {
            let store = FileSessionStore::open(&dir, options()).unwrap();
            total += store
                .load(&key)
                .await
                .unwrap()
                .unwrap()
                .session
                .messages()
                .len();
        }
        println!("{total}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

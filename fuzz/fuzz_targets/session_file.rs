//! The session file reader on any bytes: it opens (or says why not), repairs what it cuts
//! into the sidecar, and a second load of the repaired file needs no repair.
#![no_main]

use std::sync::OnceLock;

use nanobot_session_store::{FileSessionStore, FileStoreOptions, SessionKey, SessionStore};

#[path = "common.rs"]
mod common;
use common::block_on;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    common::scratch("session", &DIR)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let key = SessionKey::new("fuzz:1").unwrap();
    let store = FileSessionStore::open(dir(), FileStoreOptions::default()).unwrap();
    let path = store.path_of(&key);
    let _ = std::fs::remove_file(store.sidecar_of(&key));
    std::fs::write(&path, data).unwrap();
    if let Ok(Some(first)) = block_on(store.load(&key)) {
        let fresh = FileSessionStore::open(dir(), FileStoreOptions::default()).unwrap();
        let again = block_on(fresh.load(&key)).unwrap().unwrap();
        // Cut and moved lines went to the sidecar: they are never found twice.
        assert!(
            !again.repairs.iter().any(|r| matches!(
                r,
                nanobot_session_store::Repair::TornTail { .. }
                    | nanobot_session_store::Repair::CorruptLine { .. }
                    | nanobot_session_store::Repair::TornLine1 { .. }
            )),
            "{:?} after {:?}",
            again.repairs,
            first.repairs
        );
        assert_eq!(
            again.session.messages().len(),
            first.session.messages().len()
        );
    }
});

//! Random damage to a session file (cuts, overwritten bytes, inserted garbage): loading
//! never fails or panics, and no message line is lost: each stays in the session file or
//! moves to the sidecar.

use std::fs;
use std::sync::Arc;

use nanobot_bench_workload::{SplitMix64, contains_bytes as contains, damage};
use nanobot_session_store::{SessionManager, SessionStore};

use crate::support::{FixedClock, TempDir, a, counter, file_store, key, u};

#[tokio::test]
async fn random_damage_loses_no_message() {
    let template = TempDir::new("session-damage-template");
    let k = key("cli:damage");
    {
        let manager = SessionManager::new(
            Arc::new(file_store(template.path())),
            Arc::new(FixedClock),
            counter(),
        );
        let handle = manager.get_or_create(&k).await.unwrap();
        for i in 0..15 {
            handle.add_message(u(&format!("question {i} — ünïcode")));
            handle.add_message(a(&format!("answer {i}")));
        }
        manager.save(&handle).await.unwrap();
    }
    let original = fs::read(file_store(template.path()).path_of(&k)).unwrap();
    let mut rng = SplitMix64::new(11);
    for round in 0..150 {
        let dir = TempDir::new(&format!("session-damage-{round}"));
        let store = file_store(dir.path());
        let path = store.path_of(&k);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let damaged = damage(&mut rng, &original);
        fs::write(&path, &damaged).unwrap();

        let loaded = store
            .load(&k)
            .await
            .unwrap_or_else(|e| panic!("round {round}: load failed: {e}"));
        let messages = loaded.map_or(0, |l| l.session.messages().len());
        assert!(messages <= 31, "round {round}");

        let kept = fs::read(&path).unwrap_or_default();
        let sidecar = fs::read(store.sidecar_of(&k)).unwrap_or_default();
        // Line 1 is the metadata record, which a load may rewrite; every other line is a
        // message and must survive byte for byte somewhere.
        for line in damaged
            .split(|&b| b == b'\n')
            .skip(1)
            .filter(|l| !l.trim_ascii().is_empty())
        {
            assert!(
                contains(&kept, line) || contains(&sidecar, line),
                "round {round}: lost {:?}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

/// Issue 12.4: every input of the `session_file` fuzz corpus (`fuzz/corpus/`) loads without
/// a panic, and what it cut or moved is not found again on the next load.
#[tokio::test]
async fn the_fuzz_corpus_replays() {
    use nanobot_session_store::{FileSessionStore, FileStoreOptions, Repair, SessionKey};
    for (input, _) in nanobot_bench_workload::testing::fuzz_corpus("session_file") {
        let dir = crate::support::TempDir::new("fuzz-replay");
        let key = SessionKey::new("fuzz:1").unwrap();
        let store = FileSessionStore::open(dir.path(), FileStoreOptions::default()).unwrap();
        std::fs::write(store.path_of(&key), std::fs::read(&input).unwrap()).unwrap();
        if let Ok(Some(first)) = store.load(&key).await {
            let fresh = FileSessionStore::open(dir.path(), FileStoreOptions::default()).unwrap();
            let again = fresh.load(&key).await.unwrap().unwrap();
            assert!(
                !again
                    .repairs
                    .iter()
                    .any(|r| matches!(r, Repair::TornTail { .. } | Repair::CorruptLine { .. })),
                "{}: {:?}",
                input.display(),
                again.repairs
            );
            assert_eq!(
                again.session.messages().len(),
                first.session.messages().len()
            );
        }
    }
}

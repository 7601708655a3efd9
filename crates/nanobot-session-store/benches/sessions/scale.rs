//! Scale workloads beyond the peer's sizes (issue 36): many sessions in one directory, and
//! one session of a million messages whose past is archived. Each runs in its own worker,
//! like the W1-W4 workloads, so its peak RSS is its own.

use std::sync::Arc;
use std::time::Instant;

use nanobot_llm_port::{Cl100kBase, SystemClock};
use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, HistoryOptions, SessionKey, SessionManager,
    SessionStore,
};
use serde_json::{Value, json};

use super::{Params, TempDir, manager, peak_rss_kib, runtime, specs, summarize};

/// `--scale-sessions` sessions of two messages each: the first listing (which reads every
/// file), a fresh store's listing (a new process: the index from disk), and the same
/// store's listing again (warm).
pub(super) fn scale_list(p: &Params) -> Value {
    let rt = runtime();
    let dir = TempDir::new(&p.tmp_root, "scale-list");
    let count = p.scale_sessions;
    let corpus = specs(super::SEED + 4, 2 * count.min(50_000));
    let writing = Instant::now();
    {
        let manager = manager(&dir.0, Durability::None);
        rt.block_on(async {
            for i in 0..count {
                let key = SessionKey::new(format!("bench:scale:{i:07}")).unwrap();
                let handle = manager.get_or_create(&key).await.unwrap();
                let at = (2 * i) % corpus.len();
                handle.add_message(corpus[at].clone());
                handle.add_message(corpus[at + 1].clone());
                manager.end_turn(&handle).await.unwrap();
                manager.invalidate(&key);
            }
        });
    }
    let write_s = writing.elapsed().as_secs_f64();
    // Let the directory settle past the file system's timestamp granularity.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let store = || FileSessionStore::open(&dir.0, FileStoreOptions::default()).unwrap();
    let timed = |store: &FileSessionStore| {
        let t = Instant::now();
        let rows = rt.block_on(store.list()).unwrap();
        assert_eq!(rows.len(), count);
        t.elapsed().as_secs_f64()
    };
    let first_s = timed(&store());
    let cold: Vec<f64> = (0..p.reps).map(|_| timed(&store())).collect();
    let warm_store = store();
    timed(&warm_store);
    let warm: Vec<f64> = (0..p.reps).map(|_| timed(&warm_store)).collect();
    json!({
        "count": count,
        "write_s": write_s,
        "first_list_s": first_s,
        "cold_list_s": summarize(cold),
        "warm_list_s": summarize(warm),
    })
}

/// One session of `--scale-messages` messages, all but the last 100 archived (a long-lived
/// bot): opening it for replay, and a first turn through the manager (load, history,
/// one message, save), with the peak RSS of each.
pub(super) fn scale_replay(p: &Params, dir: &std::path::Path, write_s: f64) -> Value {
    let rt = runtime();
    let n = p.scale_messages;
    let key = SessionKey::new(LONG_KEY).unwrap();
    let file_bytes = std::fs::metadata(dir.join(format!("{}.jsonl", key.storage_stem())))
        .map(|m| m.len())
        .unwrap_or(0);
    let baseline = peak_rss_kib();
    let mut open = Vec::new();
    for _ in 0..p.reps {
        let store = FileSessionStore::open(dir, FileStoreOptions::default()).unwrap();
        let t = Instant::now();
        let view = rt.block_on(store.open_for_replay(&key)).unwrap().unwrap();
        open.push(t.elapsed().as_secs_f64());
        assert_eq!(view.message_count, n);
    }
    let after_open = peak_rss_kib();
    let manager = manager(dir, Durability::None);
    let t = Instant::now();
    let returned = rt.block_on(async {
        let handle = manager.get_or_create(&key).await.unwrap();
        let history = handle.history(&HistoryOptions::with_token_budget(190_784));
        handle.add_message(specs(super::SEED + 5, 1).remove(0));
        manager.end_turn(&handle).await.unwrap();
        history.len()
    });
    let turn_s = t.elapsed().as_secs_f64();
    json!({
        "n": n,
        "file_bytes": file_bytes,
        "write_s": write_s,
        "baseline_rss_kib": baseline,
        "replay_open_s": summarize(open),
        "peak_rss_after_open_kib": after_open,
        "first_turn_s": turn_s,
        "first_turn_history_messages": returned,
        "peak_rss_after_first_turn_kib": peak_rss_kib(),
    })
}

const LONG_KEY: &str = "bench:scale:long";

/// Writes the long session in the parent process (so the worker's peak RSS is its own):
/// `n` messages in saves of 10,000 (the stream repeats every 100,000), then the pointer
/// 100 before the end. Returns the directory and the seconds it took.
pub(super) fn write_long_session(p: &Params) -> (TempDir, f64) {
    let dir = TempDir::new(&p.tmp_root, "scale-replay");
    let started = Instant::now();
    let rt = runtime();
    let n = p.scale_messages;
    let key = SessionKey::new(LONG_KEY).unwrap();
    let key = &key;
    let block = specs(super::SEED, n.min(100_000));
    let manager = SessionManager::new(
        Arc::new(FileSessionStore::open(&dir.0, FileStoreOptions::default()).unwrap())
            as Arc<dyn SessionStore>,
        Arc::new(SystemClock),
        Arc::new(Cl100kBase),
    );
    rt.block_on(async {
        let handle = manager.get_or_create(key).await.unwrap();
        for start in (0..n).step_by(10_000) {
            for i in start..(start + 10_000).min(n) {
                handle.add_message(block[i % block.len()].clone());
            }
            manager.save(&handle).await.unwrap();
        }
        handle
            .update(|s| s.set_last_consolidated(n.saturating_sub(100)))
            .unwrap();
        manager.end_turn(&handle).await.unwrap();
    });
    (dir, started.elapsed().as_secs_f64())
}

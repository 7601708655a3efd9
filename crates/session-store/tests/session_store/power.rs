//! The file store under the crash-filesystem double and the I/O-fault plan of
//! `fs_support` (feature `test-util`): what a power loss or a failing disk can do to it.

use std::path::Path;
use std::sync::Arc;

use fs_support::crash::Recorder;
use fs_support::observe::{self, Fault, FaultPlan};
use session_store::{
    Durability, FileSessionStore, FileStoreOptions, Repair, Session, SessionStore, SessionStoreExt,
};

use crate::support::{TempDir, a, at, key, u};

fn store(dir: &Path, durability: Durability) -> FileSessionStore {
    FileSessionStore::open(
        dir.join("sessions"),
        FileStoreOptions {
            durability,
            ..FileStoreOptions::default()
        },
    )
    .unwrap()
}

/// Ten turns of two messages, each save acknowledged (`ack(n)`: n messages are saved), a
/// flush after every second turn.
async fn ten_turns(store: &FileSessionStore, ack: &dyn Fn(usize)) -> Result<(), String> {
    let key = key("cli:power");
    let mut session = Session::new(key.clone(), at(0));
    let mut revision = None;
    for turn in 0..10 {
        session.add_message(
            u(&format!("question {turn} {}", "q".repeat(turn * 300))),
            at(1),
        );
        session.add_message(a(&format!("answer {turn}")), at(2));
        revision = store
            .save_changes(&mut session, revision)
            .await
            .map_err(|e| e.to_string())?;
        ack(session.messages().len());
        if turn % 2 == 1
            && let Some(current) = revision
        {
            revision = Some(
                store
                    .flush(&key, current)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(())
}

fn canonical(dir: &TempDir) -> std::path::PathBuf {
    std::fs::canonicalize(dir.path()).unwrap()
}

#[tokio::test]
async fn an_acknowledged_append_at_always_survives_a_power_loss_at_every_point() {
    let dir = TempDir::new("power-always");
    let root = canonical(&dir);
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    {
        let _watching = observe::watch(&root, recorder.clone());
        let store = store(&root, Durability::Always);
        ten_turns(&store, &|n| recorder.mark(n as u64))
            .await
            .unwrap();
    }
    let trace = recorder.trace();
    assert_eq!(trace.untracked(), 0);
    let mut torn = 0;
    for point in 0..=trace.operations() {
        for seed in 0..8 {
            let after = TempDir::new("power-always-after");
            trace
                .crash_state(point, seed)
                .materialize(after.path())
                .unwrap();
            let acknowledged = trace.marks_before(point).last().copied().unwrap_or(0) as usize;
            let loaded = store(after.path(), Durability::Always)
                .load(&key("cli:power"))
                .await
                .unwrap();
            let Some(loaded) = loaded else {
                assert_eq!(
                    acknowledged, 0,
                    "point {point} seed {seed}: the session is gone"
                );
                continue;
            };
            for repair in &loaded.repairs {
                assert!(
                    matches!(repair, Repair::TornTail { .. }),
                    "point {point} seed {seed}: {repair:?}"
                );
                torn += 1;
            }
            let messages = loaded.session.messages();
            assert!(
                messages.len() >= acknowledged,
                "point {point} seed {seed}: {} messages, {acknowledged} acknowledged",
                messages.len()
            );
            for (i, message) in messages.iter().enumerate() {
                let text = message
                    .content()
                    .and_then(|c| c.as_str())
                    .unwrap_or_default();
                let expected = if i % 2 == 0 { "question " } else { "answer " };
                assert!(
                    text.starts_with(&format!("{expected}{}", i / 2)),
                    "point {point} seed {seed}: message {i} is {text:?}"
                );
            }
        }
    }
    assert!(torn > 0, "no crash state tore an append");
}

#[tokio::test]
async fn every_failed_operation_is_an_error_and_nothing_acknowledged_is_lost() {
    let counting = TempDir::new("faults-count");
    let root = canonical(&counting);
    let counter = Arc::new(FaultPlan::counting());
    {
        let _watching = observe::watch(&root, counter.clone());
        ten_turns(&store(&root, Durability::TurnEnd), &|_| {})
            .await
            .unwrap();
    }
    let operations = counter.seen();
    assert!(operations > 40, "{operations}");
    for n in 0..operations {
        for fault in Fault::ALL {
            let dir = TempDir::new("faults");
            let root = canonical(&dir);
            let plan = Arc::new(FaultPlan::failing(n, fault));
            let acknowledged = std::sync::atomic::AtomicUsize::new(0);
            let outcome = {
                let _watching = observe::watch(&root, plan.clone());
                let store = FileSessionStore::open(
                    root.join("sessions"),
                    FileStoreOptions {
                        durability: Durability::TurnEnd,
                        ..FileStoreOptions::default()
                    },
                );
                match store {
                    Ok(store) => {
                        ten_turns(&store, &|count| {
                            acknowledged.store(count, std::sync::atomic::Ordering::SeqCst)
                        })
                        .await
                    }
                    Err(e) => Err(e.to_string()),
                }
            };
            let fired = plan.fired();
            assert!(fired.is_some(), "operation {n} was never reached");
            let acknowledged = acknowledged.into_inner();
            // The workload stops at the first error; a fault whose error nobody reports (a
            // temporary file's removal) lets it finish.
            if outcome.is_ok() {
                assert_eq!(acknowledged, 20);
            }
            let loaded = store(&root, Durability::TurnEnd)
                .load(&key("cli:power"))
                .await
                .unwrap();
            let count = loaded.as_ref().map_or(0, |l| l.session.messages().len());
            assert!(
                count >= acknowledged,
                "{fired:?}: {count} messages, {acknowledged} acknowledged"
            );
            for repair in loaded.iter().flat_map(|l| l.repairs.iter()) {
                assert!(
                    matches!(repair, Repair::TornTail { .. }),
                    "{fired:?}: {repair:?}"
                );
            }
        }
    }
}

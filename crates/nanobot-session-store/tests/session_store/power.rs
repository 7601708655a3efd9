//! The file store under the crash-filesystem double and the I/O-fault plan of
//! `fs_support` (feature `test-util`): what a power loss or a failing disk can do to it.

use std::path::Path;
use std::sync::Arc;

use nanobot_fs_support::crash::Recorder;
use nanobot_fs_support::observe::{self, Fault, FaultPlan};
use nanobot_session_store::{
    Durability, FileSessionStore, FileStoreOptions, Repair, Session, SessionStore, SessionStoreExt,
};

use crate::support::{TempDir, a, at, key, u};

fn store(dir: &Path, durability: Durability) -> FileSessionStore {
    FileSessionStore::open(dir.join("sessions"), {
        let mut value = FileStoreOptions::default();
        value.durability = durability;
        value
    })
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
                let store = FileSessionStore::open(root.join("sessions"), {
                    let mut value = FileStoreOptions::default();
                    value.durability = Durability::TurnEnd;
                    value
                });
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

/// A session whose metadata makes line 1 span sectors: each turn moves `updated_at` (with
/// and without microseconds, so line 1's text shifts), every second turn the note changes
/// (turn 1 changes nothing else, so line 1 is then the metadata's only copy), and every
/// turn ends with a flush, which rewrites line 1 in place.
async fn long_metadata_turns(
    store: &FileSessionStore,
    ack: &dyn Fn(usize, usize),
) -> Result<(), String> {
    let key = key("cli:power");
    let mut session = Session::new(key.clone(), at(0));
    let mut revision = None;
    for turn in 0..6u32 {
        if turn % 2 == 0 {
            let note = "n".repeat(900 - turn as usize * 150);
            session.metadata_mut().insert("note".into(), note.into());
        }
        let time = at(turn + 1) + chrono::Duration::microseconds(i64::from(turn % 2) * 250_000);
        session.add_message(u(&format!("question {turn}")), time);
        session.add_message(a(&format!("answer {turn}")), time);
        if turn == 3 {
            session
                .set_last_consolidated(2)
                .map_err(|e| e.to_string())?;
        }
        revision = store
            .save_changes(&mut session, revision)
            .await
            .map_err(|e| e.to_string())?;
        let note = session.meta().metadata["note"].as_str().map_or(0, str::len);
        ack(session.messages().len(), note);
        if let Some(current) = revision {
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

#[tokio::test]
async fn a_line_1_torn_mid_rewrite_loses_no_metadata() {
    let dir = TempDir::new("power-line1");
    let root = canonical(&dir);
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    let notes = std::sync::Mutex::new(Vec::new());
    {
        let _watching = observe::watch(&root, recorder.clone());
        let store = store(&root, Durability::Always);
        long_metadata_turns(&store, &|messages, note| {
            let mut notes = notes.lock().unwrap();
            notes.push(note);
            recorder.mark((notes.len() - 1) as u64);
            assert_eq!(messages, notes.len() * 2);
        })
        .await
        .unwrap();
    }
    let notes = notes.into_inner().unwrap();
    let trace = recorder.trace();
    let mut rebuilt = 0;
    for point in 0..=trace.operations() {
        for seed in 0..64 {
            let after = TempDir::new("power-line1-after");
            let state = trace.crash_state(point, seed);
            state.materialize(after.path()).unwrap();
            let acknowledged = trace.marks_before(point);
            let loaded = store(after.path(), Durability::Always)
                .load(&key("cli:power"))
                .await
                .unwrap();
            let Some(loaded) = loaded else {
                assert!(acknowledged.is_empty(), "point {point} seed {seed}: gone");
                continue;
            };
            for repair in &loaded.repairs {
                match repair {
                    Repair::TornLine1 { .. } => rebuilt += 1,
                    Repair::TornTail { .. } => {}
                    other => panic!("point {point} seed {seed}: {other:?}"),
                }
            }
            let note = loaded
                .session
                .meta()
                .metadata
                .get("note")
                .and_then(|n| n.as_str());
            let Some(&last) = acknowledged.last() else {
                continue;
            };
            let last = last as usize;
            // The acknowledged note, or one written after it (not yet acknowledged).
            let allowed = &notes[last..];
            assert!(
                note.is_some_and(|n| allowed.contains(&n.len())),
                "point {point} seed {seed}: note of {:?} bytes, acknowledged {}",
                note.map(str::len),
                notes[last]
            );
            assert!(loaded.session.messages().len() >= (last + 1) * 2);
            if last >= 3 {
                assert_eq!(loaded.session.last_consolidated(), 2, "point {point}");
            }
        }
    }
    assert!(rebuilt > 0, "no crash state tore line 1");
}

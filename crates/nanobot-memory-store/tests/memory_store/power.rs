//! The journal and the documents under the crash-filesystem double and the I/O-fault plan
//! of `fs_support` (feature `test-util`).

use std::path::Path;
use std::sync::Arc;

use nanobot_fs_support::crash::Recorder;
use nanobot_fs_support::observe::{self, Fault, FaultPlan};
use nanobot_llm_port::SystemClock;
use nanobot_memory_store::{
    Document, Expected, FileDocuments, FileJournal, HistoryJournal, HistoryJournalExt,
    JournalDurability, JournalRepair, MemoryDocuments, NewEntry,
};

use crate::support::TempDir;

fn journal(dir: &Path) -> Result<FileJournal, String> {
    FileJournal::open_with(dir, Arc::new(SystemClock), JournalDurability::Always)
        .map_err(|e| e.to_string())
}

/// Twelve entries (each acknowledged with its cursor) and, after every fourth, a new
/// `MEMORY.md` (acknowledged as 1000 + its version).
async fn workload(dir: &Path, ack: &dyn Fn(u64)) -> Result<(), String> {
    let journal = journal(dir)?;
    let documents = FileDocuments::open(dir).map_err(|e| e.to_string())?;
    for i in 0..12u64 {
        let text = format!("entry {i} {}", "e".repeat(i as usize * 97));
        let cursor = journal
            .append_one(NewEntry::text(&text))
            .await
            .map_err(|e| e.to_string())?;
        ack(cursor);
        if i % 4 == 3 {
            let read = documents
                .read(Document::Memory)
                .await
                .map_err(|e| e.to_string())?;
            let version = i / 4 + 1;
            documents
                .write(
                    Document::Memory,
                    &format!("# v{version}\n{}", "fact\n".repeat(version as usize * 200)),
                    Expected::from_read(read.as_ref()),
                )
                .await
                .map_err(|e| e.to_string())?;
            ack(1000 + version);
        }
    }
    Ok(())
}

fn canonical(dir: &TempDir) -> std::path::PathBuf {
    std::fs::canonicalize(dir.path()).unwrap()
}

/// What the reopened stores of `dir` hold: every acknowledged entry and document version
/// (or a newer one), whole.
async fn holds(dir: &Path, acknowledged: &[u64], context: &str) {
    let journal = journal(dir).unwrap();
    for repair in journal.repairs() {
        assert!(
            matches!(repair, JournalRepair::TornTail { .. }),
            "{context}: {repair:?}"
        );
    }
    let entries = journal.read_since(0, None).await.unwrap();
    for entry in &entries {
        let i: usize = entry.content.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(
            entry.content,
            format!("entry {i} {}", "e".repeat(i * 97)),
            "{context}"
        );
    }
    for cursor in acknowledged.iter().filter(|c| **c < 1000) {
        assert!(
            entries.iter().any(|e| e.cursor == *cursor),
            "{context}: entry {cursor} lost"
        );
    }
    let version = acknowledged
        .iter()
        .filter(|c| **c > 1000)
        .max()
        .map(|v| v - 1000);
    let document = FileDocuments::open(dir)
        .unwrap()
        .read(Document::Memory)
        .await
        .unwrap();
    match (version, document) {
        (None, _) => {}
        (Some(v), None) => panic!("{context}: MEMORY.md version {v} lost"),
        (Some(v), Some(doc)) => {
            let found: u64 = doc.text[3..doc.text.find('\n').unwrap()].parse().unwrap();
            assert!(
                found >= v,
                "{context}: MEMORY.md went back to {found} from {v}"
            );
            assert_eq!(
                doc.text,
                format!("# v{found}\n{}", "fact\n".repeat(found as usize * 200))
            );
        }
    }
    // The next entry never takes a number that was handed out before.
    let next = journal.append_one(NewEntry::text("next")).await.unwrap();
    assert!(
        entries.iter().all(|e| e.cursor < next),
        "{context}: cursor {next} reused"
    );
}

#[tokio::test]
async fn acknowledged_entries_and_documents_survive_a_power_loss_at_every_point() {
    let dir = TempDir::new("journal-power");
    let root = canonical(&dir);
    let recorder = Arc::new(Recorder::start(&root).unwrap());
    {
        let _watching = observe::watch(&root, recorder.clone());
        workload(&root, &|tag| recorder.mark(tag)).await.unwrap();
    }
    let trace = recorder.trace();
    assert_eq!(trace.untracked(), 0);
    for point in 0..=trace.operations() {
        for seed in 0..6 {
            let after = TempDir::new("journal-power-after");
            trace
                .crash_state(point, seed)
                .materialize(after.path())
                .unwrap();
            let context = format!("crash after operation {point}, seed {seed}");
            holds(after.path(), &trace.marks_before(point), &context).await;
        }
    }
}

#[tokio::test]
async fn every_failed_operation_is_an_error_and_nothing_acknowledged_is_lost() {
    let counting = TempDir::new("journal-faults-count");
    let root = canonical(&counting);
    let counter = Arc::new(FaultPlan::counting());
    {
        let _watching = observe::watch(&root, counter.clone());
        workload(&root, &|_| {}).await.unwrap();
    }
    for n in 0..counter.seen() {
        for fault in Fault::ALL {
            let dir = TempDir::new("journal-faults");
            let root = canonical(&dir);
            let plan = Arc::new(FaultPlan::failing(n, fault));
            let acknowledged = std::sync::Mutex::new(Vec::new());
            {
                let _watching = observe::watch(&root, plan.clone());
                let _ = workload(&root, &|tag| acknowledged.lock().unwrap().push(tag)).await;
            }
            let fired = plan.fired();
            assert!(fired.is_some(), "operation {n} was never reached");
            holds(
                &root,
                &acknowledged.into_inner().unwrap(),
                &format!("{fired:?}"),
            )
            .await;
        }
    }
}

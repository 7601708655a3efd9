//! Random damage to `history.jsonl` (cuts, overwritten bytes, inserted garbage): opening
//! never fails or panics, no byte of the damaged file is lost (each line stays in the
//! journal or moves to the sidecar), reads stay ordered and new cursors stay new.

use std::fs;

use nanobot_bench_workload::{SplitMix64, contains_bytes as contains, damage};
use nanobot_memory_store::{FileJournal, HistoryJournal, HistoryJournalExt, NewEntry};

use crate::support::TempDir;

#[tokio::test]
async fn random_damage_loses_nothing() {
    let template = TempDir::new("damage-template");
    {
        let journal = FileJournal::open(template.path()).unwrap();
        for i in 0..30 {
            journal
                .append_one(NewEntry::text(&format!("entry {i} — ünïcode")).from_session("cli:x"))
                .await
                .unwrap();
        }
    }
    let original = fs::read(template.path().join("memory/history.jsonl")).unwrap();
    let cursor_file = fs::read(template.path().join("memory/.cursor")).unwrap();
    let mut rng = SplitMix64::new(7);
    for round in 0..150 {
        let dir = TempDir::new(&format!("damage-{round}"));
        fs::create_dir_all(dir.path().join("memory")).unwrap();
        let damaged = damage(&mut rng, &original);
        fs::write(dir.path().join("memory/history.jsonl"), &damaged).unwrap();
        fs::write(dir.path().join("memory/.cursor"), &cursor_file).unwrap();

        let journal = FileJournal::open(dir.path())
            .unwrap_or_else(|e| panic!("round {round}: open failed: {e}"));
        let entries = journal.read_since(0, None).await.unwrap();
        assert!(
            entries.windows(2).all(|w| w[0].cursor < w[1].cursor),
            "round {round}: reads are ordered"
        );
        let next = journal.append_one(NewEntry::text("after")).await.unwrap();
        assert!(next > 30, "round {round}: cursor {next} reused");

        let kept = fs::read(dir.path().join("memory/history.jsonl")).unwrap();
        let sidecar = fs::read(dir.path().join("memory/history.jsonl.damaged")).unwrap_or_default();
        for line in damaged.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            assert!(
                contains(&kept, line) || contains(&sidecar, line),
                "round {round}: lost {:?}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

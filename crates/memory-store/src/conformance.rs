//! The conformance suite every [`HistoryJournal`] backend runs (feature `conformance`).
//!
//! Each case is a public async function taking a fresh, empty journal; the
//! [`journal_conformance!`](crate::journal_conformance) macro makes one test per case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::{HistoryJournal, HistoryJournalExt, MemoryError, NewEntry};

fn cursors(entries: &[crate::JournalEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.cursor).collect()
}

/// A new journal is empty, and its cursors start at 0.
pub async fn empty(journal: impl HistoryJournal) {
    assert_eq!(journal.latest_cursor().await.unwrap(), 0);
    assert_eq!(journal.dream_cursor().await.unwrap(), 0);
    assert!(journal.read_since(0, None).await.unwrap().is_empty());
    assert!(journal.read_last(5).await.unwrap().is_empty());
}

/// Cursors are allocated from 1, in order; reads filter and limit in append order.
pub async fn cursors_and_reads(journal: impl HistoryJournal) {
    assert_eq!(
        journal.append_one(NewEntry::text("event 1")).await.unwrap(),
        1
    );
    assert_eq!(
        journal.append_one(NewEntry::text("event 2")).await.unwrap(),
        2
    );
    let batch = [
        NewEntry::text("event 3"),
        NewEntry::text("event 4"),
        NewEntry::text("event 5"),
    ];
    assert_eq!(journal.append(&batch).await.unwrap(), [3, 4, 5]);
    assert_eq!(journal.latest_cursor().await.unwrap(), 5);
    assert_eq!(
        cursors(&journal.read_since(1, None).await.unwrap()),
        [2, 3, 4, 5]
    );
    assert_eq!(
        cursors(&journal.read_since(0, Some(2)).await.unwrap()),
        [1, 2]
    );
    assert_eq!(cursors(&journal.read_last(2).await.unwrap()), [4, 5]);
    assert!(journal.append(&[]).await.unwrap().is_empty());
}

/// Every field comes back: unicode, large text, empty text, session and message range.
pub async fn fields_round_trip(journal: impl HistoryJournal) {
    let large = "长".repeat(100_000);
    let entries = [
        NewEntry::text("- [durable] Uses PostgreSQL\n- likes \"quotes\" and \\ backslashes 🚀")
            .from_session("telegram:123")
            .covering(4, 17),
        NewEntry::text(&large),
        NewEntry::text(""),
    ];
    journal.append(&entries).await.unwrap();
    let read = journal.read_since(0, None).await.unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(read[0].content, entries[0].content);
    assert_eq!(read[0].session_key.as_deref(), Some("telegram:123"));
    assert_eq!(read[0].message_range, Some((4, 17)));
    assert_eq!(read[1].content, large);
    assert_eq!(
        (read[2].content.as_str(), read[2].session_key.as_deref()),
        ("", None)
    );
    let stamp = &read[0].timestamp;
    assert!(
        chrono::NaiveDateTime::parse_from_str(stamp, crate::TIMESTAMP_FORMAT).is_ok(),
        "{stamp}"
    );
}

/// Dream's cursor: set, read, unprocessed entries; never past the latest cursor.
pub async fn dream_cursor(journal: impl HistoryJournal) {
    for i in 0..5 {
        journal
            .append_one(NewEntry::text(&format!("e{i}")))
            .await
            .unwrap();
    }
    journal.set_dream_cursor(3).await.unwrap();
    assert_eq!(journal.dream_cursor().await.unwrap(), 3);
    assert_eq!(cursors(&journal.unprocessed(None).await.unwrap()), [4, 5]);
    let error = journal.set_dream_cursor(6).await.unwrap_err();
    assert!(
        matches!(
            error,
            MemoryError::InvalidCursor {
                cursor: 6,
                latest: 5
            }
        ),
        "{error}"
    );
    assert_eq!(journal.dream_cursor().await.unwrap(), 3);
}

/// Compaction keeps the bound but never what Dream has not read; cursors are not reused.
pub async fn compaction(journal: impl HistoryJournal) {
    for i in 0..5 {
        journal
            .append_one(NewEntry::text(&format!("e{i}")))
            .await
            .unwrap();
    }
    journal.set_dream_cursor(5).await.unwrap();
    let report = journal.compact(2).await.unwrap();
    assert_eq!((report.before, report.dropped, report.kept), (5, 3, 2));
    assert_eq!(cursors(&journal.read_since(0, None).await.unwrap()), [4, 5]);
    for i in 0..95 {
        journal
            .append_one(NewEntry::text(&format!("f{i}")))
            .await
            .unwrap();
    }
    assert_eq!(journal.latest_cursor().await.unwrap(), 100);
    journal.set_dream_cursor(20).await.unwrap();
    let report = journal.compact(50).await.unwrap();
    assert_eq!(report.kept, 80, "entries Dream has not read stay");
    assert_eq!(
        cursors(&journal.read_since(0, None).await.unwrap()),
        (21..=100).collect::<Vec<_>>()
    );
    assert_eq!(
        journal.compact(0).await.unwrap().dropped,
        0,
        "0 disables compaction"
    );
    assert_eq!(
        journal.append_one(NewEntry::text("after")).await.unwrap(),
        101
    );
}

/// Appends racing from many tasks get distinct cursors, all readable.
pub async fn concurrent_appends(journal: impl HistoryJournal + 'static) {
    let journal = std::sync::Arc::new(journal);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let journal = std::sync::Arc::clone(&journal);
        tasks.push(async move {
            journal
                .append_one(NewEntry::text(&format!("task {i}")))
                .await
                .unwrap()
        });
    }
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await);
    }
    got.sort_unstable();
    assert_eq!(got, (1..=16).collect::<Vec<_>>());
    assert_eq!(journal.read_since(0, None).await.unwrap().len(), 16);
}

/// Makes one `#[tokio::test]` per conformance case for a journal backend. `$make` is an
/// expression that evaluates to an async closure returning a fresh, empty journal.
#[macro_export]
macro_rules! journal_conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::journal_conformance!(@case $make, empty, cursors_and_reads, fields_round_trip,
                dream_cursor, compaction, concurrent_appends);
        }
    };
    (@case $make:expr, $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let make = $make;
            $crate::conformance::$case(make().await).await;
        }
    )*};
}

/// Documents: missing reads as `None`, writes replace, templates fill only what is missing.
pub async fn documents_read_write(store: impl crate::MemoryDocuments) {
    use crate::{Document, MemoryDocumentsExt};
    assert_eq!(store.read(Document::Soul).await.unwrap(), None);
    let written = store.initialize().await.unwrap();
    assert_eq!(written, Document::ALL);
    assert_eq!(
        store.read(Document::User).await.unwrap().as_deref(),
        Some(Document::User.template())
    );
    store
        .write(Document::Memory, "# Memory\n- likes tea 🍵\n")
        .await
        .unwrap();
    assert_eq!(
        store.read(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- likes tea 🍵\n")
    );
    // Initializing again touches nothing.
    assert!(store.initialize().await.unwrap().is_empty());
    assert_eq!(
        store.read(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- likes tea 🍵\n")
    );
}

/// Skills: sorted listing with front matter, read, replace, delete; hostile names refused.
pub async fn skills(store: impl crate::MemoryDocuments) {
    assert!(store.list_skills().await.unwrap().is_empty());
    store
        .write_skill(
            "weather",
            "---\nname: weather\ndescription: Current weather.\n---\n# Weather\n",
        )
        .await
        .unwrap();
    store.write_skill("a-first", "---\ndescription: \"Quoted: yes\"\nmetadata: {\"nanobot\": {\"emoji\": \"🦞\"}}\n---\nbody\n").await.unwrap();
    store
        .write_skill("no_front_matter", "just text\n")
        .await
        .unwrap();
    let listed = store.list_skills().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a-first", "no_front_matter", "weather"]);
    assert_eq!(listed[0].description.as_deref(), Some("Quoted: yes"));
    assert_eq!(listed[0].front_matter["metadata"]["nanobot"]["emoji"], "🦞");
    assert_eq!(listed[1].description, None);
    assert_eq!(listed[2].description.as_deref(), Some("Current weather."));
    store
        .write_skill("weather", "---\ndescription: Changed.\n---\n")
        .await
        .unwrap();
    assert_eq!(
        store.read_skill("weather").await.unwrap().as_deref(),
        Some("---\ndescription: Changed.\n---\n")
    );
    assert!(store.delete_skill("weather").await.unwrap());
    assert!(!store.delete_skill("weather").await.unwrap());
    assert_eq!(store.read_skill("weather").await.unwrap(), None);
    for hostile in [
        "",
        "..",
        "../x",
        "a/b",
        "/etc",
        "a b",
        "é",
        &"x".repeat(65),
        "a\0b",
        "C:",
        "skill.md",
    ] {
        let error = store.write_skill(hostile, "x").await.unwrap_err();
        assert!(
            matches!(error, MemoryError::InvalidName { .. }),
            "{hostile:?}: {error}"
        );
        assert!(store.read_skill(hostile).await.is_err());
    }
}

/// Makes one `#[tokio::test]` per document conformance case.
#[macro_export]
macro_rules! documents_conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::journal_conformance!(@case $make, documents_read_write, skills);
        }
    };
}

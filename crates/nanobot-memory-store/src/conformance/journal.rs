//! The history journal's cases.

use super::*;

pub(super) fn cursors(entries: &[crate::JournalEntry]) -> Vec<u64> {
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

/// Every field comes back: unicode, large text, empty text, session, range and digest.
pub async fn fields_round_trip(journal: impl HistoryJournal) {
    let large = "长".repeat(100_000);
    let entries = [
        NewEntry::text("- [durable] Uses PostgreSQL\n- likes \"quotes\" and \\ backslashes 🚀")
            .from_session("telegram:123")
            .covering(4, 17)
            .with_digest("00112233aabbccdd"),
        NewEntry::text(&large),
        NewEntry::text(""),
        NewEntry::text("nul \u{0} inside"),
    ];
    journal.append(&entries).await.unwrap();
    let read = journal.read_since(0, None).await.unwrap();
    assert_eq!(read.len(), 4);
    assert_eq!(read[0].content, entries[0].content);
    assert_eq!(read[0].session_key.as_deref(), Some("telegram:123"));
    assert_eq!(read[0].message_range, Some((4, 17)));
    assert_eq!(read[0].message_digest.as_deref(), Some("00112233aabbccdd"));
    assert_eq!(read[1].content, large);
    assert_eq!(
        (read[2].content.as_str(), read[2].session_key.as_deref()),
        ("", None)
    );
    assert_eq!(read[3].content, "nul \u{0} inside");
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

/// Removing entries (a forgotten conversation) takes exactly those, read by Dream or not;
/// unknown cursors are ignored, Dream's cursor stays, and no cursor is handed out again,
/// not even the newest removed one.
pub async fn removal(journal: impl HistoryJournal) {
    for i in 1..=6 {
        let text = format!("e{i}");
        let session = if i % 2 == 0 { "cli:b" } else { "cli:a" };
        let entry = NewEntry::text(&text).from_session(session);
        journal.append_one(entry).await.unwrap();
    }
    journal.set_dream_cursor(3).await.unwrap();
    assert_eq!(journal.remove_entries(&[2, 4, 6, 99]).await.unwrap(), 3);
    let left = journal.read_since(0, None).await.unwrap();
    assert_eq!(cursors(&left), [1, 3, 5]);
    // Reads from a cursor that was removed start at the next one left.
    assert_eq!(cursors(&journal.read_since(2, None).await.unwrap()), [3, 5]);
    assert_eq!(cursors(&journal.read_since(3, Some(1)).await.unwrap()), [5]);
    assert_eq!(
        cursors(&journal.read_since(1, Some(9)).await.unwrap()),
        [3, 5]
    );
    assert!(journal.read_since(5, None).await.unwrap().is_empty());
    assert!(journal.read_since(6, None).await.unwrap().is_empty());
    assert!(journal.read_since(0, Some(0)).await.unwrap().is_empty());
    assert!(
        left.iter()
            .all(|e| e.session_key.as_deref() == Some("cli:a"))
    );
    assert_eq!(
        journal.remove_entries(&[2, 4, 6]).await.unwrap(),
        0,
        "a second removal finds nothing"
    );
    assert_eq!(journal.remove_entries(&[]).await.unwrap(), 0);
    assert_eq!(journal.dream_cursor().await.unwrap(), 3);
    assert_eq!(journal.latest_cursor().await.unwrap(), 6);
    assert_eq!(
        journal.append_one(NewEntry::text("after")).await.unwrap(),
        7
    );
    assert_eq!(cursors(&journal.read_last(2).await.unwrap()), [5, 7]);
}

/// Appends racing from many writers get distinct cursors, all readable.
pub async fn concurrent_appends(journal: impl HistoryJournal) {
    let got = std::sync::Mutex::new(Vec::new());
    let writers = (0..16)
        .map(|i| {
            let (journal, got) = (&journal, &got);
            Box::pin(async move {
                let cursor = journal
                    .append_one(NewEntry::text(&format!("task {i}")))
                    .await
                    .unwrap();
                got.lock().unwrap().push(cursor);
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    interleave(writers).await;
    let mut got = got.into_inner().unwrap();
    got.sort_unstable();
    assert_eq!(got, (1..=16).collect::<Vec<_>>());
    assert_eq!(journal.read_since(0, None).await.unwrap().len(), 16);
}

/// Journal visibility: four writers append while a reader polls `read_since(x)` with the
/// highest cursor it has seen; the reader sees every entry exactly once, in cursor order.
/// A journal that takes cursors before it commits (a database sequence) fails this.
pub async fn commit_order_visibility(journal: impl HistoryJournal) {
    const WRITERS: usize = 4;
    const EACH: usize = 40;
    let finished = AtomicUsize::new(0);
    let seen = std::sync::Mutex::new(Vec::<u64>::new());
    let mut work: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = Vec::new();
    for w in 0..WRITERS {
        let (journal, finished) = (&journal, &finished);
        work.push(Box::pin(async move {
            for i in 0..EACH {
                journal
                    .append_one(NewEntry::text(&format!("writer {w} entry {i}")))
                    .await
                    .unwrap();
                yield_now().await;
            }
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let (journal_ref, finished_ref, seen_ref) = (&journal, &finished, &seen);
    work.push(Box::pin(async move {
        let mut last = 0;
        loop {
            let done = finished_ref.load(Ordering::SeqCst) == WRITERS;
            let new = journal_ref.read_since(last, None).await.unwrap();
            for entry in &new {
                assert!(
                    entry.cursor > last,
                    "read_since({last}) gave {}",
                    entry.cursor
                );
                last = entry.cursor;
                seen_ref.lock().unwrap().push(entry.cursor);
            }
            if done && new.is_empty() {
                break;
            }
            yield_now().await;
        }
    }));
    interleave(work).await;
    let seen = seen.into_inner().unwrap();
    let all = cursors(&journal.read_since(0, None).await.unwrap());
    assert_eq!(all.len(), WRITERS * EACH);
    assert_eq!(
        seen, all,
        "the polling reader skipped entries that were committed after a higher cursor"
    );
}

/// Two instances over one storage share one cursor sequence and see each other's entries.
pub async fn shared_cursors(first: impl HistoryJournal, second: impl HistoryJournal) {
    let mut got = Vec::new();
    for i in 0..10 {
        let journal: &dyn HistoryJournal = if i % 2 == 0 { &first } else { &second };
        got.push(
            journal
                .append_one(NewEntry::text(&format!("from {}", i % 2)))
                .await
                .unwrap(),
        );
    }
    assert_eq!(got, (1..=10).collect::<Vec<_>>());
    assert_eq!(cursors(&first.read_since(0, None).await.unwrap()), got);
    assert_eq!(cursors(&second.read_since(0, None).await.unwrap()), got);
    second.set_dream_cursor(4).await.unwrap();
    assert_eq!(first.dream_cursor().await.unwrap(), 4);
}

/// [`crate::JournalImport`]: imported entries keep their cursors, timestamps and fields
/// (extra ones too); an import runs again or resumes without copying twice; the cursors
/// rise to what the source says and never fall; appends continue after the imported ones.
pub async fn import_keeps_cursors_and_resumes(journal: impl crate::JournalImport) {
    let mut extra = serde_json::Map::new();
    extra.insert("by".into(), serde_json::json!("nanobot-ai"));
    let mut archived = NewEntry::text("- Ada keeps bees")
        .from_session("cli:ada")
        .covering(0, 4)
        .with_digest("d1")
        .stored(3, "2026-01-02 10:00");
    archived.extra = extra;
    let entries = vec![
        archived,
        NewEntry::text("a note").stored(7, "2026-01-03 11:30"),
    ];
    // A first import cut short after one entry, then the whole again: the rest only.
    assert_eq!(journal.import(&entries[..1], 3, 0).await.unwrap(), 1);
    assert_eq!(journal.import(&entries, 9, 5).await.unwrap(), 1);
    assert_eq!(journal.import(&entries, 9, 5).await.unwrap(), 0);
    assert_eq!(journal.read_since(0, None).await.unwrap(), entries);
    assert_eq!(journal.latest_cursor().await.unwrap(), 9);
    assert_eq!(journal.dream_cursor().await.unwrap(), 5);
    // Nothing is lowered; Dream's cursor never passes the latest.
    assert_eq!(journal.import(&[], 4, 20).await.unwrap(), 0);
    assert_eq!(journal.latest_cursor().await.unwrap(), 9);
    assert_eq!(journal.dream_cursor().await.unwrap(), 9);
    assert_eq!(
        journal.append_one(NewEntry::text("after")).await.unwrap(),
        10
    );
}

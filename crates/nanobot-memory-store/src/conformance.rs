//! The conformance suites every memory backend runs (feature `conformance`): the journal,
//! the documents, the versions, the lease, and the two operations that span several ports
//! (the archive commit and the memory commit).
//!
//! Each case is a public async function; the macros make one `#[tokio::test]` per case:
//!
//! ```ignore
//! nanobot_memory_store::journal_conformance!(memory, || async { MemoryJournal::default() },
//!     skips = [shared_cursors]);
//! nanobot_memory_store::scope_conformance!(memory_scope, || async { ScopeParts::in_memory() });
//! ```
//!
//! As in the session suite ([`nanobot_session_store::conformance`]), a case that needs a second
//! instance over the same storage gets one from `reopen = ..`, a case a backend cannot run
//! is skipped loudly and only when its test declares it in `skips = [..]`.
//!
//! The suites need no runtime of their own: concurrent work is interleaved by
//! [`interleave`], which polls its futures in turn, so they run under any executor.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use nanobot_session_store::conformance::{
    IntoOutcome, NO_SECOND_INSTANCE, Outcome, same_kind, settle,
};
use nanobot_session_store::{Session, SessionKey, SessionStore, SessionStoreExt, StoredMessage};
pub use nanobot_session_store::{conformance_available, conformance_pair_cases};

use crate::{
    ArchiveCommit, Document, DocumentsStamp, Expected, FileChange, HistoryJournal,
    HistoryJournalExt, MemoryChange, MemoryCommit, MemoryDocuments, MemoryDocumentsExt,
    MemoryError, MemoryFile, MemoryLease, MemoryVersions, NewEntry, SessionArchive, Snapshot,
    VersionRecord, archive_digest,
};

/// Runs `futures` to completion together, polling each in turn on the caller's task (a
/// future that yields lets the others run).
pub async fn interleave(futures: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>>) {
    struct All<'a>(Vec<Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>>);
    impl Future for All<'_> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
            let mut pending = false;
            for slot in self.0.iter_mut() {
                if let Some(future) = slot {
                    if future.as_mut().poll(cx).is_ready() {
                        *slot = None;
                    } else {
                        pending = true;
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        }
    }
    All(futures.into_iter().map(Some).collect()).await;
}

/// Lets the other futures of an [`interleave`] run.
pub async fn yield_now() {
    crate::memory::YieldNow(false).await;
}

fn cursors(entries: &[crate::JournalEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.cursor).collect()
}

// ---------------------------------------------------------------------------------------
// The journal.

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

/// Makes the `#[tokio::test]` of [`crate::JournalImport`]'s case for a journal that can
/// import; see [`journal_conformance`](crate::journal_conformance) for the arguments.
#[macro_export]
macro_rules! journal_import_conformance {
    ($name:ident, $make:expr $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, import_keeps_cursors_and_resumes);
        }
    };
}

/// Makes one `#[tokio::test]` per journal case. `$make` evaluates to an async closure
/// returning a fresh, empty journal; see the module for `reopen` and `skips`.
#[macro_export]
macro_rules! journal_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, empty, cursors_and_reads, fields_round_trip,
                dream_cursor, compaction, concurrent_appends, commit_order_visibility);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_cursors);
        }
    };
}

/// One test per case of a suite (used by the suites' macros).
#[macro_export]
#[doc(hidden)]
macro_rules! memory_conformance_cases {
    ($make:expr, $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            $crate::conformance::settle(
                stringify!($case),
                $crate::conformance::$case(make().await).await,
                SKIPS,
            );
        }
    )*};
}

// ---------------------------------------------------------------------------------------
// The documents.

/// Documents: missing reads as `None`, writes replace, templates fill only what is missing.
pub async fn documents_read_write(store: impl MemoryDocuments) {
    assert_eq!(store.read(Document::Soul).await.unwrap(), None);
    let written = store.initialize().await.unwrap();
    assert_eq!(written, Document::ALL);
    assert_eq!(
        store.read_text(Document::User).await.unwrap().as_deref(),
        Some(Document::User.template())
    );
    let before = store.read(Document::Memory).await.unwrap();
    let version = store
        .write(
            Document::Memory,
            "# Memory\n- likes tea 🍵\n",
            Expected::from_read(before.as_ref()),
        )
        .await
        .unwrap();
    let read = store.read(Document::Memory).await.unwrap().unwrap();
    assert_eq!(read.text, "# Memory\n- likes tea 🍵\n");
    assert_eq!(read.version, version);
    assert!(!read.decoded_lossily);
    // Initializing again touches nothing.
    assert!(store.initialize().await.unwrap().is_empty());
    assert_eq!(
        store.read_text(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- likes tea 🍵\n")
    );
}

/// Skills: sorted listing with their text, read, replace, delete; hostile names refused.
pub async fn skills(store: impl MemoryDocuments) {
    assert!(store.skills().await.unwrap().skills.is_empty());
    store
        .write_skill(
            "weather",
            "---\nname: weather\ndescription: Current weather.\n---\n# Weather\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    store.write_skill("a-first", "---\ndescription: \"Quoted: yes\"\nmetadata: {\"nanobot\": {\"emoji\": \"🦞\"}}\n---\nbody\n", Expected::Absent).await.unwrap();
    store
        .write_skill("no_front_matter", "just text\n", Expected::Absent)
        .await
        .unwrap();
    let listed = store.skills().await.unwrap();
    let names: Vec<&str> = listed.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a-first", "no_front_matter", "weather"]);
    assert_eq!(listed.skills[1].document.text, "just text\n");
    assert_eq!(
        store.skill_names().await.unwrap(),
        ["a-first", "no_front_matter", "weather"]
    );
    let weather = store.read_skill("weather").await.unwrap().unwrap();
    store
        .write_skill(
            "weather",
            "---\ndescription: Changed.\n---\n",
            Expected::Version(weather.version),
        )
        .await
        .unwrap();
    let changed = store.read_skill("weather").await.unwrap().unwrap();
    assert_eq!(changed.text, "---\ndescription: Changed.\n---\n");
    assert!(
        store
            .delete_skill("weather", Expected::Version(changed.version))
            .await
            .unwrap()
    );
    assert!(!store.delete_skill("weather", Expected::Any).await.unwrap());
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
        let error = store
            .write_skill(hostile, "x", Expected::Any)
            .await
            .unwrap_err();
        assert!(
            matches!(error, MemoryError::InvalidName { .. }),
            "{hostile:?}: {error}"
        );
        assert!(store.read_skill(hostile).await.is_err());
    }
}

/// Compare-and-set: a write that names a version other than the stored one, or expects no
/// document where there is one, is a conflict and changes nothing.
pub async fn documents_compare_and_set(store: impl MemoryDocuments) {
    let first = store
        .write(Document::User, "# User\n- one\n", Expected::Absent)
        .await
        .unwrap();
    let error = store
        .write(Document::User, "# User\n- again\n", Expected::Absent)
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let second = store
        .write(Document::User, "# User\n- two\n", Expected::Version(first))
        .await
        .unwrap();
    assert_ne!(first, second, "a change gives a new version");
    // A writer that read the first version is stale now.
    let error = store
        .write(
            Document::User,
            "# User\n- lost update\n",
            Expected::Version(first),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let read = store.read(Document::User).await.unwrap().unwrap();
    assert_eq!(read.text, "# User\n- two\n");
    assert_eq!(read.version, second);
    // Skills too.
    let skill = store
        .write_skill("tea", "brew\n", Expected::Absent)
        .await
        .unwrap();
    store
        .write_skill("tea", "brew longer\n", Expected::Version(skill))
        .await
        .unwrap();
    let error = store
        .write_skill("tea", "stale\n", Expected::Version(skill))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    let error = store
        .delete_skill("tea", Expected::Version(skill))
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        store.read_skill("tea").await.unwrap().unwrap().text,
        "brew longer\n"
    );
    // A skill deleted and created again with other text: a writer holding a version from
    // before the deletion is stale (no version comes back for other text; a per-document
    // counter would start again where it started before).
    let held = store
        .write_skill("chai", "spiced\n", Expected::Absent)
        .await
        .unwrap();
    assert!(
        store
            .delete_skill("chai", Expected::Version(held))
            .await
            .unwrap()
    );
    store
        .write_skill("chai", "plain\n", Expected::Absent)
        .await
        .unwrap();
    let error = store
        .write_skill(
            "chai",
            "from before the deletion\n",
            Expected::Version(held),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        store.read_skill("chai").await.unwrap().unwrap().text,
        "plain\n"
    );
    // Racing writers from one version: exactly one wins.
    let base = store.read(Document::Memory).await.unwrap();
    let expected = Expected::from_read(base.as_ref());
    let wins = AtomicUsize::new(0);
    let racers = (0..6)
        .map(|i| {
            let (store, wins) = (&store, &wins);
            Box::pin(async move {
                yield_now().await;
                match store
                    .write(
                        Document::Memory,
                        &format!("# Memory\n- racer {i}\n"),
                        expected,
                    )
                    .await
                {
                    Ok(_) => {
                        wins.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(MemoryError::Conflict { .. }) => {}
                    Err(other) => panic!("{other}"),
                }
            }) as Pin<Box<dyn Future<Output = ()> + Send + '_>>
        })
        .collect();
    interleave(racers).await;
    assert_eq!(wins.load(Ordering::SeqCst), 1, "one writer wins the race");
}

/// The stamp, for a store that gives one: the same while nothing changes (a refused write
/// changes nothing), different after every change to a document or skill, and never the
/// stamp of other contents: a stamp seen again (a skill deleted and created again, say)
/// means the same documents as when it was seen first.
pub async fn documents_stamp(store: impl MemoryDocuments) {
    let Some(start) = store.stamp().await.unwrap() else {
        return; // no stamps: readers read every time, nothing to check
    };
    let stamp = async || {
        store
            .stamp()
            .await
            .unwrap()
            .expect("a stamp once, a stamp always")
    };
    let contents = async || {
        let mut all = Vec::new();
        for document in Document::ALL {
            all.push(store.read_text(document).await.unwrap());
        }
        for skill in store.skills().await.unwrap().skills {
            all.push(Some(format!("{}: {}", skill.name, skill.document.text)));
        }
        all
    };
    assert_eq!(stamp().await, start, "nothing changed");
    let mut seen = vec![(start, contents().await)];
    let changed = async |what: &str, seen: &mut Vec<(DocumentsStamp, Vec<Option<String>>)>| {
        let now = stamp().await;
        let (previous, _) = seen.last().expect("the start");
        assert_ne!(now, *previous, "{what}: the stamp did not change");
        assert_eq!(
            stamp().await,
            now,
            "{what}: the stamp moved with nothing changing"
        );
        let now_contents = contents().await;
        for (earlier, earlier_contents) in seen.iter() {
            if *earlier == now {
                assert_eq!(
                    *earlier_contents, now_contents,
                    "{what}: a stamp seen before, with other documents"
                );
            }
        }
        seen.push((now, now_contents));
    };
    let memory = store
        .write(Document::Memory, "# Memory\n- one\n", Expected::Absent)
        .await
        .unwrap();
    changed("a document created", &mut seen).await;
    store
        .write(
            Document::Memory,
            "# Memory\n- two\n",
            Expected::Version(memory),
        )
        .await
        .unwrap();
    changed("a document replaced", &mut seen).await;
    let before_refusal = stamp().await;
    assert!(
        store
            .write(
                Document::Memory,
                "# Memory\n- stale\n",
                Expected::Version(memory)
            )
            .await
            .is_err()
    );
    assert_eq!(
        stamp().await,
        before_refusal,
        "a refused write changed the stamp"
    );
    let tea = store
        .write_skill("tea", "---\ndescription: Tea.\n---\n", Expected::Absent)
        .await
        .unwrap();
    changed("a skill created", &mut seen).await;
    store
        .write_skill(
            "tea",
            "---\ndescription: Green tea.\n---\n",
            Expected::Version(tea),
        )
        .await
        .unwrap();
    changed("a skill replaced", &mut seen).await;
    assert!(store.delete_skill("tea", Expected::Any).await.unwrap());
    changed("a skill deleted", &mut seen).await;
    store
        .write_skill(
            "tea",
            "---\ndescription: Black tea.\n---\n",
            Expected::Absent,
        )
        .await
        .unwrap();
    changed("a skill created again", &mut seen).await;
    store
        .write(Document::User, "# User\n", Expected::Any)
        .await
        .unwrap();
    changed("another document", &mut seen).await;
}

/// Two instances over one storage: a write through one makes the other's read stale.
pub async fn shared_documents(first: impl MemoryDocuments, second: impl MemoryDocuments) {
    let created = first
        .write(Document::Memory, "# Memory\n", Expected::Absent)
        .await
        .unwrap();
    let seen = second.read(Document::Memory).await.unwrap().unwrap();
    assert_eq!(seen.version, created);
    second
        .write(
            Document::Memory,
            "# Memory\n- from the second\n",
            Expected::Version(created),
        )
        .await
        .unwrap();
    let error = first
        .write(
            Document::Memory,
            "# Memory\n- stale\n",
            Expected::Version(created),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        first.read_text(Document::Memory).await.unwrap().as_deref(),
        Some("# Memory\n- from the second\n")
    );
    // A stamp sees the other instance's changes.
    if let Some(before) = first.stamp().await.unwrap() {
        second
            .write_skill("shared", "---\ndescription: Shared.\n---\n", Expected::Any)
            .await
            .unwrap();
        assert_ne!(first.stamp().await.unwrap(), Some(before));
    }
}

/// Makes one `#[tokio::test]` per document case.
#[macro_export]
macro_rules! documents_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, documents_read_write, skills,
                documents_compare_and_set, documents_stamp);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_documents);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The versions.

fn snapshot(files: &[(&str, &str)]) -> Snapshot {
    files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

fn minute(m: u32) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, m, 0).unwrap()
}

/// Versions: no empty versions, a parent chain, the log newest first, lookup by a unique
/// prefix in any case, the files as of any version.
pub async fn versions_contract(versions: impl MemoryVersions) {
    assert!(versions.log(10).await.unwrap().is_empty());
    let v1 = snapshot(&[
        ("SOUL.md", "soul 1\n"),
        ("memory/MEMORY.md", "m\n"),
        ("memory/.dream_cursor", "0"),
    ]);
    let first = versions
        .commit("dream: first", &v1, minute(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.parent, None);
    assert_eq!(first.short_id().len(), 8);
    assert_eq!(
        versions
            .commit("dream: same", &v1, minute(2))
            .await
            .unwrap(),
        None,
        "no empty versions"
    );
    let v2 = snapshot(&[
        ("SOUL.md", "soul 2\n"),
        ("memory/MEMORY.md", "m\n"),
        ("memory/.dream_cursor", "3"),
        ("skills/tea/SKILL.md", "---\nname: tea\n---\nbrew\n"),
        ("skills/a-b/SKILL.md", "x"),
        ("skills/a/SKILL.md", "y"),
        ("USER.md", "ünïcödé ✓\n"),
    ]);
    let second = versions
        .commit("dream: second\n\nbody", &v2, minute(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.parent.as_deref(), Some(first.id.as_str()));
    assert_eq!(second.subject(), "dream: second");
    assert_eq!(second.time, minute(3));
    let log = versions.log(10).await.unwrap();
    assert_eq!(
        log.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        [second.id.as_str(), first.id.as_str()]
    );
    assert_eq!(versions.log(1).await.unwrap().len(), 1);
    assert_eq!(log[0].message, "dream: second\n\nbody");
    assert_eq!(versions.files_at(&first.id).await.unwrap(), v1);
    assert_eq!(versions.files_at(&second.id).await.unwrap(), v2);
    assert_eq!(
        versions.resolve(&second.id[..8]).await.unwrap().id,
        second.id
    );
    assert_eq!(
        versions
            .resolve(&second.id.to_uppercase())
            .await
            .unwrap()
            .id,
        second.id
    );
    for bad in ["", "abc", "zzzzzzzz", "0000000000"] {
        assert!(
            matches!(
                versions.resolve(bad).await,
                Err(MemoryError::UnknownVersion { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        versions
            .files_at("0000000000000000000000000000000000000000")
            .await,
        Err(MemoryError::UnknownVersion { .. })
    ));
}

/// A long history: the log's limit takes the newest, and every version's files come back.
pub async fn versions_history(versions: impl MemoryVersions) {
    let mut ids = Vec::new();
    for i in 0..25 {
        let files = snapshot(&[
            ("USER.md", &format!("# User\n- fact {i}\n")),
            ("memory/.dream_cursor", &i.to_string()),
        ]);
        ids.push(
            versions
                .commit(&format!("dream: run {i}"), &files, minute(i))
                .await
                .unwrap()
                .unwrap()
                .id,
        );
    }
    let log = versions.log(10).await.unwrap();
    assert_eq!(
        log.iter().map(|v| v.id.clone()).collect::<Vec<_>>(),
        ids.iter().rev().take(10).cloned().collect::<Vec<_>>()
    );
    for (i, id) in ids.iter().enumerate() {
        let files = versions.files_at(id).await.unwrap();
        assert_eq!(files["USER.md"], format!("# User\n- fact {i}\n"));
        assert_eq!(
            versions.resolve(id).await.unwrap().subject(),
            format!("dream: run {i}")
        );
    }
}

/// Two instances over one storage: a version committed through one is the other's latest,
/// and its next version's parent.
pub async fn shared_versions(first: impl MemoryVersions, second: impl MemoryVersions) {
    let one = first
        .commit("dream: one", &snapshot(&[("USER.md", "1")]), minute(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.log(1).await.unwrap()[0].id, one.id);
    let two = second
        .commit("dream: two", &snapshot(&[("USER.md", "2")]), minute(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(two.parent.as_deref(), Some(one.id.as_str()));
    assert_eq!(first.resolve(&two.id).await.unwrap(), two);
}

/// Makes one `#[tokio::test]` per versions case.
#[macro_export]
macro_rules! versions_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, versions_contract, versions_history);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_versions);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The lease.

const SECOND: Duration = Duration::from_secs(1);

/// One holder at a time; fences grow with every grant; released on drop.
pub async fn lease_exclusive(lease: impl MemoryLease) {
    assert_eq!(lease.holder().await.unwrap(), None);
    let first = lease
        .try_acquire("pid 1, scheduled run", 60 * SECOND)
        .await
        .unwrap()
        .expect("free at first");
    assert!(
        lease
            .try_acquire("pid 2", 60 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    let holder = lease.holder().await.unwrap().expect("held");
    assert_eq!(holder.holder, "pid 1, scheduled run");
    assert_eq!(holder.fence, first.fence);
    let fence = first.fence;
    drop(first);
    assert_eq!(lease.holder().await.unwrap(), None);
    let second = lease
        .try_acquire("pid 2", 60 * SECOND)
        .await
        .unwrap()
        .expect("free after release");
    assert!(
        second.fence > fence,
        "fences grow: {} then {}",
        fence,
        second.fence
    );
    lease.release(second).await.unwrap();
    assert_eq!(lease.holder().await.unwrap(), None);
}

/// A commit checks its fence: the current grant passes, an earlier one is refused with
/// `LeaseLost` (released, superseded), and renewing it is refused too.
pub async fn lease_fencing(lease: impl MemoryLease) {
    let mut first = lease
        .try_acquire("first", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    lease.check(first.fence).await.unwrap();
    lease.renew(&mut first).await.unwrap();
    let old = first.fence;
    lease.release(first).await.unwrap();
    let error = lease.check(old).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    let mut second = lease
        .try_acquire("second", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    lease.check(second.fence).await.unwrap();
    let error = lease.check(old).await.unwrap_err();
    assert!(
        matches!(error, MemoryError::LeaseLost { .. }),
        "a superseded fence passed the check: {error}"
    );
    lease.renew(&mut second).await.unwrap();
}

/// A grant runs out after its time-to-live: another holder takes it, and the stalled
/// holder's check and renewal are refused. (Sleeps past a short time-to-live.)
pub async fn lease_expiry(lease: impl MemoryLease) -> Outcome {
    if !lease.capabilities().expires {
        return Outcome::Skipped(
            "this lease lasts as long as its holder lives (a file lock); it never expires".into(),
        );
    }
    let ttl = Duration::from_millis(1_500);
    let mut stalled = lease.try_acquire("stalled", ttl).await.unwrap().unwrap();
    std::thread::sleep(ttl + Duration::from_millis(600));
    let taken = lease
        .try_acquire("next", 60 * SECOND)
        .await
        .unwrap()
        .expect("an expired lease can be taken");
    assert!(taken.fence > stalled.fence);
    let error = lease.check(stalled.fence).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    let error = lease.renew(&mut stalled).await.unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    lease.check(taken.fence).await.unwrap();
    Outcome::Ran
}

/// Renewing extends a grant: renewed before it ran out, it is still held after its first
/// time-to-live.
pub async fn lease_renewal(lease: impl MemoryLease) -> Outcome {
    if !lease.capabilities().expires {
        return Outcome::Skipped(
            "this lease lasts as long as its holder lives (a file lock); renewal only confirms it"
                .into(),
        );
    }
    let ttl = Duration::from_millis(1_500);
    let mut held = lease.try_acquire("renewing", ttl).await.unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(900));
    lease.renew(&mut held).await.unwrap();
    std::thread::sleep(Duration::from_millis(900));
    lease.check(held.fence).await.unwrap();
    assert!(lease.try_acquire("other", ttl).await.unwrap().is_none());
    Outcome::Ran
}

/// Two instances over one storage exclude each other, and share one fence sequence.
pub async fn shared_lease(first: impl MemoryLease, second: impl MemoryLease) {
    let held = first
        .try_acquire("first instance", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert!(
        second
            .try_acquire("second instance", 60 * SECOND)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        second.holder().await.unwrap().map(|h| h.holder).as_deref(),
        Some("first instance")
    );
    let fence = held.fence;
    first.release(held).await.unwrap();
    let taken = second
        .try_acquire("second instance", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    assert!(taken.fence > fence);
    assert!(matches!(
        first.check(fence).await,
        Err(MemoryError::LeaseLost { .. })
    ));
    first.check(taken.fence).await.unwrap();
}

/// Makes one `#[tokio::test]` per lease case.
#[macro_export]
macro_rules! lease_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, lease_exclusive, lease_fencing,
                lease_expiry, lease_renewal);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_lease);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The operations that span several ports.

/// The stores of one scope, for the suites that span several ports.
pub struct ScopeParts {
    /// Sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// The journal.
    pub journal: Arc<dyn HistoryJournal>,
    /// Documents.
    pub documents: Arc<dyn MemoryDocuments>,
    /// Versions.
    pub versions: Arc<dyn MemoryVersions>,
    /// The Dream lease.
    pub lease: Arc<dyn MemoryLease>,
    /// The archive commit over `sessions` and `journal`.
    pub archive: Arc<dyn SessionArchive>,
    /// The memory commit over the others.
    pub commit: Arc<dyn MemoryCommit>,
}

impl ScopeParts {
    /// Every part in memory, with `broken` switched off where it lives (the journal's
    /// commit order, the documents' compare-and-set, the lease's fence, the archive's
    /// once-per-slice), to show that the suites notice.
    pub fn in_memory(broken: Option<crate::BrokenRule>) -> ScopeParts {
        use crate::BrokenRule as Rule;
        let clock: Arc<dyn nanobot_llm_port::Clock> = Arc::new(nanobot_llm_port::SystemClock);
        let sessions: Arc<dyn SessionStore> =
            Arc::new(nanobot_session_store::MemorySessionStore::new());
        let journal = Arc::new(match broken {
            Some(Rule::JournalCommitOrder) => {
                crate::MemoryJournal::broken(Rule::JournalCommitOrder, clock.clone())
            }
            _ => crate::MemoryJournal::new(clock.clone()),
        });
        let documents: Arc<dyn MemoryDocuments> = Arc::new(match broken {
            Some(Rule::DocumentCompareAndSet) => {
                crate::MemoryDocumentStore::broken(Rule::DocumentCompareAndSet)
            }
            _ => crate::MemoryDocumentStore::new(),
        });
        let lease: Arc<dyn MemoryLease> = Arc::new(match broken {
            Some(Rule::LeaseFence) => crate::MemoryLeaseStore::broken(Rule::LeaseFence, clock),
            _ => crate::MemoryLeaseStore::with_clock(clock),
        });
        let versions: Arc<dyn MemoryVersions> = Arc::new(crate::MemoryVersionStore::new());
        let archive: Arc<dyn SessionArchive> = Arc::new(match broken {
            Some(Rule::ArchiveOnce) => {
                crate::TwoStepArchive::broken(Rule::ArchiveOnce, journal.clone(), sessions.clone())
            }
            _ => crate::TwoStepArchive::new(journal.clone(), sessions.clone()),
        });
        let commit = Arc::new(crate::StepwiseCommit::new(
            documents.clone(),
            journal.clone(),
            Some(versions.clone()),
            lease.clone(),
        ));
        ScopeParts {
            sessions,
            journal,
            documents,
            versions,
            lease,
            archive,
            commit,
        }
    }
}

fn turn(i: usize) -> StoredMessage {
    let message = if i.is_multiple_of(2) {
        StoredMessage::user(format!("question {i}"))
    } else {
        StoredMessage::assistant(format!("answer {i}"))
    };
    message.with("timestamp", format!("2026-01-02T03:04:{:02}", i % 60))
}

/// A stored session of `count` messages; its revision.
async fn seed_session(
    sessions: &dyn SessionStore,
    key: &SessionKey,
    count: usize,
) -> (Session, nanobot_session_store::Revision) {
    let now = chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
        .unwrap()
        .and_hms_opt(3, 4, 0)
        .unwrap();
    let mut session = Session::new(key.clone(), now);
    for i in 0..count {
        session.add_message(turn(i), now);
    }
    let revision = sessions
        .save_changes(&mut session, None)
        .await
        .unwrap()
        .unwrap();
    (session, revision)
}

/// The metadata after archiving up to `to`.
fn moved(session: &Session, to: usize) -> nanobot_session_store::SessionMeta {
    let mut after = session.clone();
    after.set_last_consolidated(to).unwrap();
    after.meta().clone()
}

/// The entries of `journal` that archive `session` from `from`.
async fn archives_of(journal: &dyn HistoryJournal, session: &SessionKey, from: u64) -> usize {
    journal
        .read_since(0, None)
        .await
        .unwrap()
        .iter()
        .filter(|e| {
            e.session_key.as_deref() == Some(session.as_str())
                && e.message_range.is_some_and(|(f, _)| f == from)
        })
        .count()
}

/// An archive commit journals the entries (naming the session, the slice and its digest)
/// and moves the pointer; the revision it returns is the session's.
pub async fn archive_commit(parts: ScopeParts) {
    let key = SessionKey::new("telegram:archive").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 6).await;
    let digest = archive_digest(&session.messages()[0..4]);
    let entries = vec!["- [durable] asked four questions".to_owned()];
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &entries,
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(!committed.reused);
    assert_eq!(committed.cursors.len(), 1);
    assert_eq!(
        parts.sessions.current_revision(&key).await.unwrap(),
        Some(committed.revision)
    );
    let loaded = parts.sessions.load(&key).await.unwrap().unwrap();
    assert_eq!(loaded.session.last_consolidated(), 4);
    assert_eq!(loaded.session.messages().len(), 6);
    let journaled = parts.journal.read_since(0, None).await.unwrap();
    assert_eq!(journaled.len(), 1);
    assert_eq!(journaled[0].content, entries[0]);
    assert_eq!(journaled[0].session_key.as_deref(), Some(key.as_str()));
    assert_eq!(journaled[0].message_range, Some((0, 4)));
    assert_eq!(
        journaled[0].message_digest.as_deref(),
        Some(digest.as_str())
    );
    // An archive with nothing worth keeping still moves the pointer.
    let digest = archive_digest(&loaded.session.messages()[4..6]);
    parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: committed.revision,
            from: 4,
            to: 6,
            digest: &digest,
            entries: &[],
            meta: &moved(&loaded.session, 6),
        })
        .await
        .unwrap();
    assert_eq!(
        parts
            .sessions
            .load(&key)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        6
    );
    assert_eq!(parts.journal.latest_cursor().await.unwrap(), 1);
}

/// An archive made from a revision the session has left is refused: nothing is journaled
/// and the pointer stays.
pub async fn archive_stale_refused(parts: ScopeParts) {
    let key = SessionKey::new("telegram:stale").unwrap();
    let (mut session, revision) = seed_session(parts.sessions.as_ref(), &key, 4).await;
    session.add_message(turn(4), session.meta().updated_at);
    parts
        .sessions
        .save_changes(&mut session, Some(revision))
        .await
        .unwrap();
    let digest = archive_digest(&session.messages()[0..2]);
    let error = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 2,
            digest: &digest,
            entries: &["- stale summary".to_owned()],
            meta: &moved(&session, 2),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(parts.journal.latest_cursor().await.unwrap(), 0);
    let loaded = parts.sessions.load(&key).await.unwrap().unwrap();
    assert_eq!(loaded.session.last_consolidated(), 0);
    assert_eq!(loaded.session.messages().len(), 5);
}

/// Once per slice: an archive already journaled (an attempt whose pointer move was lost to
/// a crash) is reused by the commit that repeats it, never appended twice.
pub async fn archive_once_per_slice(parts: ScopeParts) {
    let key = SessionKey::new("telegram:once").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 6).await;
    let digest = archive_digest(&session.messages()[0..4]);
    let text = "- [durable] the lost attempt's summary".to_owned();
    // The earlier attempt: journaled, then the process died before the pointer moved.
    let lost = parts
        .journal
        .append(&[NewEntry::text(&text)
            .from_session(key.as_str())
            .covering(0, 4)
            .with_digest(&digest)])
        .await
        .unwrap();
    let found = parts.archive.find_archive(&key, 0).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].cursors, lost);
    assert_eq!(found[0].to, 4);
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &[text],
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(committed.reused, "the journaled archive was appended again");
    assert_eq!(committed.cursors, lost);
    assert_eq!(archives_of(parts.journal.as_ref(), &key, 0).await, 1);
    assert_eq!(
        parts
            .sessions
            .load(&key)
            .await
            .unwrap()
            .unwrap()
            .session
            .last_consolidated(),
        4
    );
}

/// Archives are found by an index: however many entries other sessions appended since.
/// A slice with the same first message but other messages (after a `/new`) is another
/// archive, told apart by its digest.
pub async fn archive_found_by_index(parts: ScopeParts) {
    let key = SessionKey::new("telegram:indexed").unwrap();
    let (session, revision) = seed_session(parts.sessions.as_ref(), &key, 4).await;
    let old_digest = "0123456789abcdef";
    parts
        .journal
        .append(&[NewEntry::text("- before a /new")
            .from_session(key.as_str())
            .covering(0, 4)
            .with_digest(old_digest)])
        .await
        .unwrap();
    let crowd: Vec<String> = (0..300).map(|i| format!("- other session {i}")).collect();
    for chunk in crowd.chunks(50) {
        let entries: Vec<NewEntry<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, text)| {
                NewEntry::text(text)
                    .from_session("discord:other")
                    .covering(i as u64, i as u64 + 1)
            })
            .collect();
        parts.journal.append(&entries).await.unwrap();
    }
    let digest = archive_digest(&session.messages()[0..4]);
    assert_ne!(digest, old_digest);
    let committed = parts
        .archive
        .commit_archive(&ArchiveCommit {
            session: &key,
            expected: revision,
            from: 0,
            to: 4,
            digest: &digest,
            entries: &["- after the /new".to_owned()],
            meta: &moved(&session, 4),
        })
        .await
        .unwrap();
    assert!(
        !committed.reused,
        "an older slice from message 0 was taken for this one"
    );
    let found = parts.archive.find_archive(&key, 0).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].digest.as_deref(), Some(old_digest));
    assert_eq!(found[1].digest.as_deref(), Some(digest.as_str()));
    assert_eq!(found[1].cursors, committed.cursors);
    assert!(
        parts
            .archive
            .find_archive(&key, 1)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Makes one `#[tokio::test]` per archive-commit and memory-commit case. `$make` evaluates
/// to an async closure returning fresh, empty [`ScopeParts`].
#[macro_export]
macro_rules! scope_conformance {
    ($name:ident, $make:expr $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, archive_commit, archive_stale_refused,
                archive_once_per_slice, archive_found_by_index, commit_applies_everything,
                commit_fenced, commit_compare_and_set, commit_cursor_bounded);
        }
    };
}

/// A memory commit writes the files, records the version and moves Dream's cursor.
pub async fn commit_applies_everything(parts: ScopeParts) {
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    for i in 0..3 {
        parts
            .journal
            .append_one(NewEntry::text(&format!("- fact {i}")))
            .await
            .unwrap();
    }
    let user = parts.documents.read(Document::User).await.unwrap();
    let files = snapshot(&[
        ("USER.md", "# User\n- fact 0\n"),
        ("skills/tea/SKILL.md", "brew\n"),
        ("memory/.dream_cursor", "3"),
    ]);
    let version = parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: vec![
                FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::from_read(user.as_ref()),
                    text: Some("# User\n- fact 0\n".into()),
                },
                FileChange {
                    file: MemoryFile::Skill("tea".into()),
                    expected: Expected::Absent,
                    text: Some("brew\n".into()),
                },
            ],
            cursor: Some(3),
            version: Some(VersionRecord {
                message: "dream: manual run, journal entries 1-3".into(),
                files: files.clone(),
            }),
            time: minute(5),
        })
        .await
        .unwrap()
        .expect("a version");
    assert_eq!(
        parts
            .documents
            .read_text(Document::User)
            .await
            .unwrap()
            .as_deref(),
        Some("# User\n- fact 0\n")
    );
    assert_eq!(
        parts
            .documents
            .read_skill("tea")
            .await
            .unwrap()
            .unwrap()
            .text,
        "brew\n"
    );
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 3);
    assert_eq!(parts.versions.log(1).await.unwrap()[0].id, version.id);
    assert_eq!(parts.versions.files_at(&version.id).await.unwrap(), files);
    assert_eq!(
        parts.commit.recover(lease.fence).await.unwrap(),
        crate::Recovery::Nothing
    );
}

/// A commit under a fence that no longer holds the lease is refused, and writes nothing.
pub async fn commit_fenced(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- fact"))
        .await
        .unwrap();
    let stale = parts
        .lease
        .try_acquire("first run", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let fence = stale.fence;
    parts.lease.release(stale).await.unwrap();
    let _current = parts
        .lease
        .try_acquire("second run", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let error = parts
        .commit
        .commit(&MemoryChange {
            fence,
            files: vec![FileChange {
                file: MemoryFile::Document(Document::Memory),
                expected: Expected::Absent,
                text: Some("# Memory\n- from a lost lease\n".into()),
            }],
            cursor: Some(1),
            version: Some(VersionRecord {
                message: "dream: lost".into(),
                files: snapshot(&[("memory/MEMORY.md", "# Memory\n- from a lost lease\n")]),
            }),
            time: minute(1),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::LeaseLost { .. }), "{error}");
    assert_eq!(parts.documents.read(Document::Memory).await.unwrap(), None);
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 0);
    assert!(parts.versions.log(10).await.unwrap().is_empty());
}

/// A commit made from a file that changed since is a conflict: nothing is written.
pub async fn commit_compare_and_set(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- fact"))
        .await
        .unwrap();
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    let first = parts
        .documents
        .write(Document::Memory, "# Memory\n", Expected::Absent)
        .await
        .unwrap();
    // Someone edits the file while the run thinks.
    parts
        .documents
        .write(
            Document::Memory,
            "# Memory\n- edited by hand\n",
            Expected::Version(first),
        )
        .await
        .unwrap();
    let error = parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: vec![
                FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::Absent,
                    text: Some("# User\n".into()),
                },
                FileChange {
                    file: MemoryFile::Document(Document::Memory),
                    expected: Expected::Version(first),
                    text: Some("# Memory\n- from the run\n".into()),
                },
            ],
            cursor: Some(1),
            version: None,
            time: minute(1),
        })
        .await
        .unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(
        parts
            .documents
            .read_text(Document::Memory)
            .await
            .unwrap()
            .as_deref(),
        Some("# Memory\n- edited by hand\n")
    );
    assert_eq!(parts.documents.read(Document::User).await.unwrap(), None);
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 0);
}

/// The cursor a commit moves never passes the journal's latest cursor.
pub async fn commit_cursor_bounded(parts: ScopeParts) {
    parts
        .journal
        .append_one(NewEntry::text("- one"))
        .await
        .unwrap();
    let lease = parts
        .lease
        .try_acquire("dream", 60 * SECOND)
        .await
        .unwrap()
        .unwrap();
    parts
        .commit
        .commit(&MemoryChange {
            fence: lease.fence,
            files: Vec::new(),
            cursor: Some(9),
            version: None,
            time: minute(1),
        })
        .await
        .unwrap();
    assert_eq!(parts.journal.dream_cursor().await.unwrap(), 1);
}

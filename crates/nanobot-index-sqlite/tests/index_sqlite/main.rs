//! The SQLite side index: the search conformance suite, rebuilds, damage and two writers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use nanobot_bench_workload::testing::TempDir;
use nanobot_index_sqlite::{INDEX_FILE, SqliteIndex};
use nanobot_memory_index::conformance::{self, Fixture, QueryKind};
use nanobot_memory_index::{GroupUpdate, Hit, MemoryIndex, SearchRequest, journal_chunk};

#[tokio::test]
async fn the_sqlite_index_passes_the_conformance_suite() {
    let dir = TempDir::new("index-sqlite-conformance");
    let root = dir.path().to_owned();
    let report = conformance::run(|scope| {
        let index = SqliteIndex::open_in(&root.join(scope)).expect("open");
        async move { Arc::new(index) as Arc<dyn MemoryIndex> }
    })
    .await;
    let report = match report {
        Ok(report) => report,
        Err(message) => panic!("{message}"),
    };
    for (kind, recall) in &report.recall {
        eprintln!(
            "sqlite: {} chunks, recall@5 {kind:?}: {:.2} (missed {:?})",
            report.chunks,
            recall.recall(),
            recall.missed
        );
    }
    assert!(report.recall[&QueryKind::Paraphrase].recall() < 0.5);
}

async fn load(index: &SqliteIndex, fixture: &Fixture) {
    index
        .replace(fixture.updates.clone())
        .await
        .expect("load the fixture");
}

async fn top_fives(index: &SqliteIndex, fixture: &Fixture) -> Vec<Vec<Hit>> {
    let mut all = Vec::new();
    for query in &fixture.queries {
        all.push(
            index
                .search(&SearchRequest::new(&query.query))
                .await
                .expect("search"),
        );
    }
    all
}

/// Acceptance 4: deleting the side index and indexing again gives the same top 5.
#[tokio::test]
async fn a_deleted_index_rebuilt_gives_the_same_top_five_for_every_query() {
    let fixture = Fixture::embedded().expect("fixture");
    let dir = TempDir::new("index-sqlite-rebuild");
    let index = SqliteIndex::open_in(dir.path()).expect("open");
    load(&index, &fixture).await;
    let before = top_fives(&index, &fixture).await;
    drop(index);
    std::fs::remove_dir_all(dir.path().join(".nanobot-rs")).expect("delete the index");
    let index = SqliteIndex::open_in(dir.path()).expect("reopen");
    assert_eq!(index.stats().await.expect("stats").chunks, 0);
    load(&index, &fixture).await;
    assert_eq!(top_fives(&index, &fixture).await, before);
    assert!(index.repairs().is_empty(), "a missing index is not damage");
}

async fn one_entry(index: &SqliteIndex) {
    index
        .replace(GroupUpdate::from_chunks(vec![journal_chunk(
            1,
            "2026-01-01 10:00",
            "The locker code is KOALA-5150.",
        )]))
        .await
        .expect("replace");
}

/// A file that is not a database is started again and reported, never an error.
#[tokio::test]
async fn a_file_that_is_not_a_database_is_rebuilt_and_reported() {
    let dir = TempDir::new("index-sqlite-garbage");
    let path = dir.path().join(INDEX_FILE);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &path,
        b"this is not a database at all, just text".repeat(200),
    )
    .expect("write");
    let index = SqliteIndex::open(&path).expect("open never fails on damage");
    let repairs = index.repairs();
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert_eq!(repairs[0].path, path);
    one_entry(&index).await;
    let hits = index
        .search(&SearchRequest::new("koala-5150"))
        .await
        .expect("search");
    assert_eq!(hits.len(), 1);
}

/// Pages overwritten with garbage (a bad disk, a copy cut short): found by the checks on
/// open, started again and reported.
#[tokio::test]
async fn damaged_pages_are_found_on_open() {
    let fixture = Fixture::embedded().expect("fixture");
    let dir = TempDir::new("index-sqlite-pages");
    let path = dir.path().join(INDEX_FILE);
    {
        let index = SqliteIndex::open(&path).expect("open");
        load(&index, &fixture).await;
    }
    scribble_after_the_second_page(&path);
    let index = SqliteIndex::open(&path).expect("open never fails on damage");
    assert_eq!(index.repairs().len(), 1, "{:?}", index.repairs());
    assert_eq!(index.stats().await.expect("stats").chunks, 0);
    fed_again_finds_the_fixture(&index, &fixture).await;
}

/// An index written by another version of the schema is rebuilt, not misread.
#[tokio::test]
async fn another_schema_version_is_rebuilt() {
    let dir = TempDir::new("index-sqlite-version");
    let path = dir.path().join(INDEX_FILE);
    {
        let index = SqliteIndex::open(&path).expect("open");
        one_entry(&index).await;
        index
            .set_marks(vec![("journal".into(), Some("1".into()))])
            .await
            .expect("marks");
    }
    // Marks are kept across a reopen...
    let index = SqliteIndex::open(&path).expect("open");
    assert_eq!(index.marks().await.expect("marks")["journal"], "1");
    drop(index);
    set_user_version(&path, 99);
    let index = SqliteIndex::open(&path).expect("open");
    let repairs = index.repairs();
    assert_eq!(repairs.len(), 1);
    assert!(repairs[0].reason.contains("99"), "{}", repairs[0].reason);
    assert_eq!(index.stats().await.expect("stats").chunks, 0);
    // ...and gone with a rebuild, so the next indexing pass starts from the beginning.
    assert!(index.marks().await.expect("marks").is_empty());
}

/// An index made before the chunk count was kept gets it on open, right, without a
/// rebuild (nothing re-indexed or re-embedded), and every write keeps it right.
#[tokio::test]
async fn an_index_without_the_kept_chunk_count_gets_it_on_open() {
    let fixture = Fixture::embedded().expect("fixture");
    let dir = TempDir::new("index-sqlite-count");
    let path = dir.path().join(INDEX_FILE);
    let expected = top_fives(
        &{
            let index = SqliteIndex::open(&path).expect("open");
            load(&index, &fixture).await;
            index
        },
        &fixture,
    )
    .await;
    let kept = |path: &Path| -> (i64, i64) {
        let connection = rusqlite::Connection::open(path).expect("open");
        connection
            .query_row(
                "SELECT (SELECT n FROM chunk_count), (SELECT count(*) FROM chunks)",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("counts")
    };
    {
        let connection = rusqlite::Connection::open(&path).expect("open");
        connection
            .execute_batch(
                "DROP TRIGGER chunk_count_up; DROP TRIGGER chunk_count_down; DROP TABLE chunk_count;",
            )
            .expect("the file as an earlier build left it");
    }
    let index = SqliteIndex::open(&path).expect("open");
    assert!(index.repairs().is_empty(), "{:?}", index.repairs());
    let (counted, all) = kept(&path);
    assert!(all > 0 && counted == all, "{counted} kept, {all} held");
    assert_eq!(top_fives(&index, &fixture).await, expected);
    one_entry(&index).await;
    index.remove_prefix("MEMORY.md").await.expect("remove");
    let (counted, all) = kept(&path);
    assert_eq!(counted, all);
}

/// Feeds a rebuilt index the fixture again and finds an answer in it.
async fn fed_again_finds_the_fixture(index: &SqliteIndex, fixture: &Fixture) {
    load(index, fixture).await;
    let hits = index
        .search(&SearchRequest::new("QX7R2P"))
        .await
        .expect("search");
    assert_eq!(hits[0].source, "MEMORY.md#Travel");
}

/// Moves everything into the main file through another connection (so an open one must
/// read it from there), then overwrites every byte after the second page in place.
fn scribble_after_the_second_page(path: &Path) {
    let other = rusqlite::Connection::open(path).expect("open");
    other
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(other);
    let mut bytes = std::fs::read(path).expect("read");
    assert!(bytes.len() > 16_384, "{} bytes", bytes.len());
    for (i, byte) in bytes.iter_mut().enumerate().skip(8192) {
        *byte = (i * 31 % 251) as u8;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &bytes))
        .expect("overwrite in place");
}

fn set_user_version(path: &Path, version: i64) {
    let connection = rusqlite::Connection::open(path).expect("open");
    connection
        .pragma_update(None, "user_version", version)
        .expect("user_version");
}

/// Damage that appears while the index is open (pages overwritten under it) is found by
/// the next call, mended, and that call still answers.
#[tokio::test]
async fn damage_found_in_the_middle_of_a_call_is_mended() {
    let fixture = Fixture::embedded().expect("fixture");
    let dir = TempDir::new("index-sqlite-live");
    let path = dir.path().join(INDEX_FILE);
    let index = SqliteIndex::open(&path).expect("open");
    load(&index, &fixture).await;
    scribble_after_the_second_page(&path);
    let hits = index
        .search(&SearchRequest::new("QX7R2P"))
        .await
        .expect("a damaged index is never an error");
    assert!(
        hits.is_empty(),
        "the rebuilt index is empty until fed: {hits:?}"
    );
    assert_eq!(index.repairs().len(), 1, "{:?}", index.repairs());
    fed_again_finds_the_fixture(&index, &fixture).await;
}

/// Two handles on one file (as two processes would have) writing at once lose nothing.
#[tokio::test]
async fn two_writers_on_one_index_lose_nothing() {
    let dir = TempDir::new("index-sqlite-writers");
    let first = SqliteIndex::open_in(dir.path()).expect("open");
    let second = SqliteIndex::open_in(dir.path()).expect("open");
    let write = |index: SqliteIndex, base: u64| async move {
        for i in 0..200 {
            let cursor = base + i;
            index
                .replace(GroupUpdate::from_chunks(vec![journal_chunk(
                    cursor,
                    "2026-01-01 10:00",
                    &format!("entry {cursor} token{cursor}x"),
                )]))
                .await
                .expect("replace");
        }
    };
    let (a, b) = tokio::join!(
        tokio::spawn(write(first.clone(), 1)),
        tokio::spawn(write(second.clone(), 1001))
    );
    a.expect("first writer");
    b.expect("second writer");
    assert_eq!(first.stats().await.expect("stats").chunks, 400);
    for cursor in [1u64, 200, 1001, 1200] {
        let hits = second
            .search(&SearchRequest::new(format!("token{cursor}x")))
            .await
            .expect("search");
        assert_eq!(hits[0].source, format!("history#{cursor}"));
    }
}

/// Every kind of write from several handles at once (processes indexing, embedding and
/// marking one scope's index together, as searches started beside a reindex do): each
/// waits for the others' transactions instead of failing with "database is locked" (a
/// deferred transaction that read first cannot wait for the write lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_every_kind_from_several_handles_wait_for_each_other() {
    use nanobot_memory_index::{ChunkVector, HashingEmbedder, VectorIndex};
    let dir = TempDir::new("index-sqlite-all-writes");
    let handles: Vec<SqliteIndex> = (0..4)
        .map(|_| SqliteIndex::open_in(dir.path()).expect("open"))
        .collect();
    let embedder = HashingEmbedder::new(16);
    let model = nanobot_llm_port::Embedder::model(&embedder);
    let mut tasks = Vec::new();
    for (n, index) in handles.iter().cloned().enumerate() {
        let model = model.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..60u64 {
                let cursor = (n as u64) * 1_000 + i;
                index
                    .replace(GroupUpdate::from_chunks(vec![journal_chunk(
                        cursor,
                        "2026-01-01 10:00",
                        &format!("entry {cursor} token{cursor}x"),
                    )]))
                    .await?;
                index
                    .set_marks(vec![(format!("mark-{n}"), Some(i.to_string()))])
                    .await?;
                let missing = index.missing_vectors(8).await?;
                let vectors = missing
                    .iter()
                    .map(|chunk| ChunkVector {
                        group: chunk.group.clone(),
                        part: chunk.part,
                        vector: embedder.vector(&chunk.text),
                    })
                    .collect();
                index.put_vectors(&model, vectors).await?;
                index
                    .nearest(&embedder.vector("entry"), &SearchRequest::new("entry"))
                    .await?;
                if i % 20 == 19 {
                    index.remove_prefix(&format!("history#{cursor}")).await?;
                }
            }
            Ok::<_, nanobot_memory_index::IndexError>(())
        }));
    }
    for task in tasks {
        task.await
            .expect("task")
            .expect("every write waits its turn");
    }
    assert_eq!(handles[0].stats().await.expect("stats").chunks, 4 * 57);
}

/// A query whose every term is in most chunks ranks among the newest
/// `COMMON_QUERY_WINDOW` chunks only (`conformance::common_query_window`).
#[tokio::test]
async fn a_query_of_common_words_only_ranks_the_newest_chunks() {
    let dir = TempDir::new("index-window");
    let index = SqliteIndex::open_in(dir.path()).unwrap();
    conformance::common_query_window(&index).await.unwrap();
}

#[tokio::test]
async fn the_sqlite_index_passes_the_vector_suite() {
    let dir = TempDir::new("index-vectors");
    let index = SqliteIndex::open_in(dir.path()).unwrap();
    conformance::vector_suite(&index).await.unwrap();
    // Vectors outlive the process: a second open reads the same model and vectors.
    drop(index);
    let again = SqliteIndex::open_in(dir.path()).unwrap();
    assert!(again.repairs().is_empty());
    assert_eq!(
        nanobot_memory_index::VectorIndex::missing_vectors(&again, 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// Two opens of one file (two processes): each keeps its own copy of the vectors, and
/// each copy follows what the other writes.
#[tokio::test]
async fn copies_of_the_vectors_follow_another_handles_writes() {
    let dir = TempDir::new("index-vector-copies");
    let reader = SqliteIndex::open_in(dir.path()).unwrap();
    let writer = SqliteIndex::open_in(dir.path()).unwrap();
    conformance::vector_copies_follow_other_handles(&reader, &writer)
        .await
        .unwrap();
}

/// Processes that open a scope's index for the first time at once (two `nanobot memory
/// search` started together) share one index: none finds the others' half-made schema
/// damaged and deletes the file under them.
#[test]
fn indexes_created_at_once_are_one_index_and_nothing_is_rebuilt() {
    for round in 0..8 {
        let dir = TempDir::new(&format!("index-created-at-once-{round}"));
        let path = dir.path().to_owned();
        let start = Arc::new(std::sync::Barrier::new(12));
        let openers: Vec<_> = (0..12)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    SqliteIndex::open_in(&path).unwrap().repairs()
                })
            })
            .collect();
        for opener in openers {
            assert_eq!(opener.join().unwrap(), Vec::new(), "round {round}");
        }
        assert!(SqliteIndex::open_in(&path).unwrap().repairs().is_empty());
    }
}

use std::sync::Arc;

use nanobot_memory_index::conformance::{self, QueryKind};
use nanobot_memory_index::{GroupUpdate, InMemoryIndex, MemoryIndex, SearchRequest, journal_chunk};

#[tokio::test]
async fn the_in_memory_index_passes_the_conformance_suite() {
    let report =
        conformance::run(|_scope| async { Arc::new(InMemoryIndex::new()) as Arc<dyn MemoryIndex> })
            .await;
    let report = match report {
        Ok(report) => report,
        Err(message) => panic!("{message}"),
    };
    assert!(report.chunks > 500, "{} chunks", report.chunks);
    for (kind, recall) in &report.recall {
        eprintln!(
            "{} chunks, recall@5 {kind:?}: {:.2} (missed {:?})",
            report.chunks,
            recall.recall(),
            recall.missed
        );
    }
    // Lexical search cannot find what shares no word with the query; the vector lane will.
    let paraphrase = report.recall[&QueryKind::Paraphrase].recall();
    assert!(paraphrase < 0.5, "paraphrase recall {paraphrase}");
}

#[tokio::test]
async fn a_common_word_does_not_drown_a_rare_one() {
    let index = InMemoryIndex::new();
    let mut chunks: Vec<_> = (1..=50)
        .map(|i| {
            journal_chunk(
                i,
                "2026-01-01 10:00",
                &format!("The user said thing number {i}."),
            )
        })
        .collect();
    chunks.push(journal_chunk(
        51,
        "2026-01-01 10:00",
        "Violin lessons on Thursday.",
    ));
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .expect("replace");
    let hits = index
        .search(&SearchRequest::new("the user violin"))
        .await
        .expect("search");
    assert_eq!(hits[0].source, "history#51");
    // A word no chunk holds does not count as rare: the common one is searched instead of
    // nothing (every backend follows this rule: `terms_to_search`).
    let hits = index
        .search(&SearchRequest::new("user zzzunknown"))
        .await
        .expect("search");
    assert_eq!(hits.len(), 5);
    assert_eq!(nanobot_memory_index::terms_to_search(&[0, 40, 3], 51), [2]);
    assert_eq!(nanobot_memory_index::terms_to_search(&[0, 40, 30], 51), [2]);
    assert_eq!(
        nanobot_memory_index::terms_to_search(&[0, 0], 51),
        Vec::<usize>::new()
    );
    // Only common words: the rarest of them still finds something.
    let hits = index
        .search(&SearchRequest::new("the user"))
        .await
        .expect("search");
    assert_eq!(hits.len(), 5);
}

#[tokio::test]
async fn ties_are_broken_by_source_so_results_are_stable() {
    let index = InMemoryIndex::new();
    let chunks: Vec<_> = [5u64, 3, 9, 1]
        .into_iter()
        .map(|i| journal_chunk(i, "2026-01-01 10:00", "same words here"))
        .collect();
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .expect("replace");
    let hits = index
        .search(&SearchRequest::new("same"))
        .await
        .expect("search");
    let sources: Vec<&str> = hits.iter().map(|h| h.source.as_str()).collect();
    assert_eq!(
        sources,
        ["history#1", "history#3", "history#5", "history#9"]
    );
}

#[tokio::test]
async fn a_chunk_filed_under_another_group_is_refused_and_nothing_is_applied() {
    let index = InMemoryIndex::new();
    let stray = journal_chunk(2, "2026-01-01 10:00", "stray");
    let result = index
        .replace(vec![
            GroupUpdate::from_chunks(vec![journal_chunk(1, "2026-01-01 10:00", "fine")]).remove(0),
            GroupUpdate {
                group: "history#1".into(),
                chunks: vec![stray],
            },
        ])
        .await;
    assert!(matches!(
        result,
        Err(nanobot_memory_index::IndexError::InvalidUpdate { .. })
    ));
    assert_eq!(index.stats().await.expect("stats").chunks, 0);
}

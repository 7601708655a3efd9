//! The search index on PostgreSQL (`PgIndex`): the search conformance suite and the vector
//! suite shared with the other backends, the per-scope term counts kept exact under
//! replacements, removals and two instances writing at once, and searches that see only
//! their scope.

use std::collections::BTreeMap;
use std::sync::Arc;

use nanobot_memory_index::conformance::{self, Fixture, QueryKind};
use nanobot_memory_index::{GroupUpdate, MemoryIndex, SearchRequest, journal_chunk};
use nanobot_memory_scope::{ScopeKey, Subject, UserKey};
use nanobot_store_postgres::testing::second_instance;
use nanobot_store_postgres::{PgIndex, PgStore};
use sqlx::Row;

use crate::support::{available, store};

async fn index_of(store: &PgStore, user: &str) -> PgIndex {
    let key = ScopeKey::local(Subject::User(UserKey::new("test", user).unwrap()));
    store.scope(&key).await.unwrap().index()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_index_passes_the_conformance_suite() {
    if !available() {
        return;
    }
    let store = store().await;
    let report = conformance::run(|scope| {
        let store = store.clone();
        async move { Arc::new(index_of(&store, scope).await) as Arc<dyn MemoryIndex> }
    })
    .await;
    let report = match report {
        Ok(report) => report,
        Err(message) => panic!("{message}"),
    };
    for (kind, recall) in &report.recall {
        eprintln!(
            "postgres: {} chunks, recall@5 {kind:?}: {:.2} (missed {:?})",
            report.chunks,
            recall.recall(),
            recall.missed
        );
    }
    assert!(report.recall[&QueryKind::Paraphrase].recall() < 0.5);
    term_counts_are_exact(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_index_passes_the_vector_suite() {
    if !available() {
        return;
    }
    let store = store().await;
    let index = index_of(&store, "vectors").await;
    conformance::vector_suite(&index).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_common_words_only_ranks_the_newest_chunks() {
    if !available() {
        return;
    }
    let store = store().await;
    let index = index_of(&store, "window").await;
    conformance::common_query_window(&index).await.unwrap();
}

/// The same top five from the index as from the in-memory one's contract: loading the
/// fixture twice (the second time over itself) changes no hit, and emptying the index and
/// loading it again gives the same hits for every query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_emptied_and_fed_again_gives_the_same_top_five() {
    if !available() {
        return;
    }
    let fixture = Fixture::embedded().unwrap();
    let store = store().await;
    let index = index_of(&store, "rebuild").await;
    index.replace(fixture.updates.clone()).await.unwrap();
    let before = top_fives(&index, &fixture).await;
    index.replace(fixture.updates.clone()).await.unwrap();
    assert_eq!(top_fives(&index, &fixture).await, before);
    for prefix in ["history#", "session:", "MEMORY.md", "USER.md", "SOUL.md"] {
        index.remove_prefix(prefix).await.unwrap();
    }
    assert_eq!(index.stats().await.unwrap().chunks, 0);
    index.replace(fixture.updates.clone()).await.unwrap();
    assert_eq!(top_fives(&index, &fixture).await, before);
    term_counts_are_exact(&store).await;
}

async fn top_fives(index: &PgIndex, fixture: &Fixture) -> Vec<Vec<nanobot_memory_index::Hit>> {
    let mut all = Vec::new();
    for query in &fixture.queries {
        all.push(
            index
                .search(&SearchRequest::new(&query.query))
                .await
                .unwrap(),
        );
    }
    all
}

/// Two instances feeding the same scope's index at once, the same groups and others: no
/// error reaches them, and the counts the ranking relies on match the chunks held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_indexing_one_scope_at_once_keep_the_counts_exact() {
    if !available() {
        return;
    }
    let store = store().await;
    let other = second_instance(&store).await;
    let a = index_of(&store, "shared").await;
    let b = index_of(&other, "shared").await;
    let batch = |from: u64, word: &str| -> Vec<GroupUpdate> {
        GroupUpdate::from_chunks(
            (from..from + 50)
                .map(|cursor| {
                    journal_chunk(
                        cursor,
                        "2026-01-01 10:00",
                        &format!("entry {cursor} about {word} and tea 茶道"),
                    )
                })
                .collect(),
        )
    };
    let mut tasks = Vec::new();
    for round in 0..6u64 {
        let (a, b) = (a.clone(), b.clone());
        let one = batch(round * 25, "coffee");
        let two = batch(round * 25 + 10, "cocoa");
        tasks.push(tokio::spawn(async move { a.replace(one).await }));
        tasks.push(tokio::spawn(async move { b.replace(two).await }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let stats = a.stats().await.unwrap();
    assert_eq!(stats.chunks, 185, "{stats:?}");
    term_counts_are_exact(&store).await;
    let hits = a
        .search(&SearchRequest::new("entry 12").limit(10))
        .await
        .unwrap();
    assert_eq!(hits[0].source, "history#12");
}

/// What one scope holds is never found from another, whatever they share.
/// Two instances on one scope: each keeps its own copy of the vectors, and the copy
/// follows what the other instance writes (migration 3's stamp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_the_vectors_follow_another_instances_writes() {
    if !available() {
        return;
    }
    let store = store().await;
    let other = second_instance(&store).await;
    let reader = index_of(&store, "shared").await;
    let writer = index_of(&other, "shared").await;
    conformance::vector_copies_follow_other_handles(&reader, &writer)
        .await
        .unwrap();
    term_counts_are_exact(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_sees_its_scope_only() {
    if !available() {
        return;
    }
    let store = store().await;
    let alice = index_of(&store, "alice").await;
    let bob = index_of(&store, "bob").await;
    alice
        .replace(GroupUpdate::from_chunks(vec![journal_chunk(
            1,
            "2026-01-01 10:00",
            "alice's locker code is 4417-B; shared words tea",
        )]))
        .await
        .unwrap();
    bob.replace(GroupUpdate::from_chunks(vec![journal_chunk(
        1,
        "2026-01-01 10:00",
        "bob's bike code is 9921; shared words tea",
    )]))
    .await
    .unwrap();
    for (index, own, other) in [(&alice, "4417", "9921"), (&bob, "9921", "4417")] {
        assert_eq!(
            index.search(&SearchRequest::new(own)).await.unwrap().len(),
            1
        );
        assert!(
            index
                .search(&SearchRequest::new(other))
                .await
                .unwrap()
                .is_empty()
        );
        let shared = index.search(&SearchRequest::new("tea")).await.unwrap();
        assert_eq!(shared.len(), 1);
        assert!(shared[0].snippet.contains(own), "{shared:?}");
    }
    // The vector lane too: the nearest chunks of one scope only, however close the
    // other's are.
    use nanobot_memory_index::{ChunkVector, HashingEmbedder, VectorIndex};
    let hashing = HashingEmbedder::new(64);
    let model = nanobot_llm_port::Embedder::model(&hashing);
    for (index, text) in [
        (&alice, "alice's locker code is 4417-B; shared words tea"),
        (&bob, "bob's bike code is 9921; shared words tea"),
    ] {
        index
            .put_vectors(
                &model,
                vec![ChunkVector {
                    group: "history#1".into(),
                    part: 0,
                    vector: hashing.vector(text),
                }],
            )
            .await
            .unwrap();
    }
    for (index, own) in [(&alice, "4417"), (&bob, "9921")] {
        let other_text = if own == "4417" {
            "bob's bike code is 9921; shared words tea"
        } else {
            "alice's locker code is 4417-B; shared words tea"
        };
        let near = index
            .nearest(&hashing.vector(other_text), &SearchRequest::new("code"))
            .await
            .unwrap();
        assert_eq!(near.len(), 1, "{near:?}");
        assert!(near[0].snippet.contains(own), "{near:?}");
    }
    alice.remove_prefix("history#").await.unwrap();
    assert_eq!(bob.stats().await.unwrap().chunks, 1);
    term_counts_are_exact(&store).await;
}

/// Every scope's term counts and chunk count equal what its chunks hold.
async fn term_counts_are_exact(store: &PgStore) {
    let q = store.schema().quoted().to_owned();
    let pool = store.pool();
    let recount: BTreeMap<(i64, String), i64> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT scope_id, split_part(lexeme, ':', 2) AS term, count(*) \
         FROM {q}.search_chunks, unnest(tsvector_to_array(terms)) AS lexeme GROUP BY 1, 2"
    )))
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| ((row.get(0), row.get(1)), row.get(2)))
    .collect();
    let stored: BTreeMap<(i64, String), i64> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT scope_id, term, chunks FROM {q}.search_terms"
    )))
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| ((row.get(0), row.get(1)), row.get(2)))
    .collect();
    let differ: Vec<_> = recount
        .iter()
        .filter(|(key, count)| stored.get(*key) != Some(*count))
        .chain(stored.iter().filter(|(key, _)| !recount.contains_key(*key)))
        .take(10)
        .collect();
    assert!(
        differ.is_empty(),
        "term counts differ from the chunks: {differ:?}"
    );
    assert_eq!(stored.len(), recount.len(), "terms counted");
    assert!(stored == recount, "the term counts differ from the chunks");
    let heads: Vec<(i64, i64, i64)> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT h.scope_id, h.chunks, (SELECT count(*) FROM {q}.search_chunks c WHERE c.scope_id = h.scope_id) \
         FROM {q}.search_heads h"
    )))
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    for (scope, counted, held) in heads {
        assert_eq!(counted, held, "scope {scope}: chunk count");
    }
}

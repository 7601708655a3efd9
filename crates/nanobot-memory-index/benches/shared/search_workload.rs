//! The search bench's workload and measurement, shared by every backend's bench (each
//! includes this file with `#[path]`, since a port crate may not depend on the workload
//! generator) so their figures compare: the chunks, the query mix and the timing.
//!
//! The chunks are the journal workload's entries (mixed English and Chinese from small
//! vocabularies, so every ordinary word is in most chunks: the slow case) plus, per chunk,
//! one unique id and one topic word from 2,000, so exact and rare queries have answers.
#![allow(clippy::expect_used, dead_code)]

use std::time::Instant;

use nanobot_bench_workload::{SEED, SplitMix64, ZH, history_entries};
use serde_json::{Value, json};

use nanobot_memory_index::{
    ChunkVector, GroupUpdate, HashingEmbedder, MemoryIndex, SearchIndex, SearchRequest,
    VectorIndex, journal_chunk,
};

/// Chunks fed per `replace` (the indexer's journal batch).
pub(crate) const BATCH: usize = 500;

/// The value after `name` among a bench's arguments.
pub(crate) fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// p50, p95 and max of timings in seconds, as milliseconds.
pub(crate) fn summary(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({
        "p50_ms": percentile(&samples, 0.5) * 1e3,
        "p95_ms": percentile(&samples, 0.95) * 1e3,
        "max_ms": samples[samples.len() - 1] * 1e3,
        "count": samples.len(),
    })
}

/// The `n` chunk texts of the bench.
pub(crate) fn corpus(n: usize) -> Vec<String> {
    let mut rng = SplitMix64::new(SEED + 17);
    history_entries(SEED + 16, n)
        .into_iter()
        .enumerate()
        .map(|(i, text)| format!("{text} ref ID{i:06} topic t{}", rng.below(2_000)))
        .collect()
}

/// The query mix, cycled: an exact id, a rare topic, a rare topic beside a word in nearly
/// every chunk, two words in nearly every chunk, a two-character Chinese query.
pub(crate) fn queries(n: usize, count: usize) -> Vec<(&'static str, String)> {
    let mut rng = SplitMix64::new(SEED + 18);
    (0..count)
        .map(|i| match i % 5 {
            0 => ("exact", format!("ID{:06}", rng.below(n as u64))),
            1 => ("rare", format!("t{}", rng.below(2_000))),
            2 => ("rare_and_common", format!("the t{}", rng.below(2_000))),
            3 => ("common", "the memory".to_owned()),
            _ => (
                "chinese",
                format!(
                    "{}{}",
                    ZH[rng.below(ZH.len() as u64) as usize],
                    ZH[rng.below(ZH.len() as u64) as usize]
                ),
            ),
        })
        .collect()
}

/// Feeds `texts` to `index` in batches of [`BATCH`] (the build rate), then times each of
/// `queries` after a warm-up: the figures of one index at one size, as JSON.
pub(crate) async fn measure(
    index: &dyn MemoryIndex,
    texts: &[String],
    queries: &[(&'static str, String)],
) -> Value {
    let started = Instant::now();
    for (b, batch) in texts.chunks(BATCH).enumerate() {
        let chunks = batch
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let cursor = (b * BATCH + i + 1) as u64;
                journal_chunk(cursor, "2026-12-01 10:00", text)
            })
            .collect();
        index
            .replace(GroupUpdate::from_chunks(chunks))
            .await
            .expect("feed the index");
    }
    let build_s = started.elapsed().as_secs_f64();
    let stats = index.stats().await.expect("stats");
    assert_eq!(stats.chunks, texts.len());
    // One warm-up pass (caches, the vocabulary table), then the measured one.
    for (_, query) in queries.iter().take(10) {
        index
            .search(&SearchRequest::new(query.clone()))
            .await
            .expect("search");
    }
    let mut all = Vec::new();
    let mut by_kind: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut answered = 0;
    for (kind, query) in queries {
        let t = Instant::now();
        let hits = index
            .search(&SearchRequest::new(query.clone()))
            .await
            .expect("search");
        let took = t.elapsed().as_secs_f64();
        answered += usize::from(!hits.is_empty());
        all.push(took);
        by_kind.entry(kind).or_default().push(took);
    }
    json!({
        "chunks": texts.len(),
        "build_s": build_s,
        "build_chunks_per_s": texts.len() as f64 / build_s,
        "queries_with_hits": answered,
        "all": summary(all),
        "by_kind": by_kind.into_iter().map(|(k, v)| (k.to_owned(), summary(v))).collect::<serde_json::Map<_, _>>(),
    })
}

/// Dimensions of the vector lane's figures: all-MiniLM-L6-v2's (the model CI serves).
pub(crate) const VECTOR_DIMENSIONS: usize = 384;

/// The vector lane of an index [`measure`] fed: every chunk given a vector of
/// [`VECTOR_DIMENSIONS`] numbers (the hashing embedder's: the cost of ranking does not depend
/// on what the numbers mean) as an embedding pass stores them, then each of `queries`
/// answered by `nearest`, timed.
pub(crate) async fn measure_vectors<I: SearchIndex + ?Sized>(
    index: &I,
    queries: &[(&'static str, String)],
) -> Value {
    let embedder = HashingEmbedder::new(VECTOR_DIMENSIONS);
    let model = nanobot_llm_port::Embedder::model(&embedder);
    let started = Instant::now();
    let mut stored = 0;
    loop {
        let missing = VectorIndex::missing_vectors(index, BATCH)
            .await
            .expect("chunks without vectors");
        if missing.is_empty() {
            break;
        }
        stored += missing.len();
        let vectors = missing
            .into_iter()
            .map(|chunk| ChunkVector {
                vector: embedder.vector(&chunk.text),
                group: chunk.group,
                part: chunk.part,
            })
            .collect();
        index
            .put_vectors(&model, vectors)
            .await
            .expect("store vectors");
    }
    let store_s = started.elapsed().as_secs_f64();
    let query_vectors: Vec<Vec<f32>> = queries.iter().map(|(_, q)| embedder.vector(q)).collect();
    // The first query reads every vector into the process's copy (as the first after a
    // vector went away does); the rest find it current.
    let t = Instant::now();
    index
        .nearest(&query_vectors[0], &SearchRequest::new("first"))
        .await
        .expect("nearest");
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    for vector in query_vectors.iter().take(5) {
        index
            .nearest(vector, &SearchRequest::new("warm-up"))
            .await
            .expect("nearest");
    }
    let mut all = Vec::new();
    for ((_, query), vector) in queries.iter().zip(&query_vectors) {
        let t = Instant::now();
        let hits = index
            .nearest(vector, &SearchRequest::new(query.clone()))
            .await
            .expect("nearest");
        all.push(t.elapsed().as_secs_f64());
        assert!(!hits.is_empty());
    }
    json!({
        "vectors": stored,
        "dimensions": VECTOR_DIMENSIONS,
        "store_vectors_per_s": stored as f64 / store_s,
        "first_query_ms": first_ms,
        "nearest": summary(all),
    })
}

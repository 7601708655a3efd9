//! Memory search latency and index build rate (issue 17, acceptance 5): the SQLite side
//! index and the in-memory index at 10,000 and 100,000 chunks, queried with a mix that
//! includes terms found in nearly every chunk.
//!
//! `cargo bench -p index-sqlite --bench search -- [--sizes 10000,100000] [--queries 300]`
//! prints one JSON report. Targets: p95 ≤ 20 ms at 10,000 chunks, ≤ 100 ms at 100,000.
//!
//! The chunks are the journal workload's entries (mixed English and Chinese from small
//! vocabularies, so every ordinary word is in most chunks: the slow case) plus, per chunk,
//! one unique id and one topic word from 2,000, so exact and rare queries have answers.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::Instant;

use bench_workload::{SEED, SplitMix64, ZH, history_entries};
use index_sqlite::SqliteIndex;
use memory_index::{GroupUpdate, InMemoryIndex, MemoryIndex, SearchRequest, journal_chunk};
use serde_json::{Value, json};

/// Chunks fed per `replace` (the indexer's journal batch).
const BATCH: usize = 500;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({
        "p50_ms": percentile(&samples, 0.5) * 1e3,
        "p95_ms": percentile(&samples, 0.95) * 1e3,
        "max_ms": samples[samples.len() - 1] * 1e3,
        "count": samples.len(),
    })
}

fn corpus(n: usize) -> Vec<String> {
    let mut rng = SplitMix64::new(SEED + 17);
    history_entries(SEED + 16, n)
        .into_iter()
        .enumerate()
        .map(|(i, text)| format!("{text} ref ID{i:06} topic t{}", rng.below(2_000)))
        .collect()
}

/// The query mix, cycled: an exact id, a rare topic, a rare topic beside a word in nearly
/// every chunk, two words in nearly every chunk, a two-character Chinese query.
fn queries(n: usize, count: usize) -> Vec<(&'static str, String)> {
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

fn measure(
    rt: &tokio::runtime::Runtime,
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
        rt.block_on(index.replace(GroupUpdate::from_chunks(chunks)))
            .unwrap();
    }
    let build_s = started.elapsed().as_secs_f64();
    let stats = rt.block_on(index.stats()).unwrap();
    assert_eq!(stats.chunks, texts.len());
    // One warm-up pass (caches, the vocabulary table), then the measured one.
    for (_, query) in queries.iter().take(10) {
        rt.block_on(index.search(&SearchRequest::new(query.clone())))
            .unwrap();
    }
    let mut all = Vec::new();
    let mut by_kind: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut answered = 0;
    for (kind, query) in queries {
        let t = Instant::now();
        let hits = rt
            .block_on(index.search(&SearchRequest::new(query.clone())))
            .unwrap();
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = arg(&args, "--sizes").map_or(vec![10_000, 100_000], |v| {
        v.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    let count: usize = arg(&args, "--queries").map_or(300, |v| v.parse().expect("--queries N"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut report = serde_json::Map::new();
    for n in sizes {
        let texts = corpus(n);
        let queries = queries(n, count);
        let dir =
            std::env::temp_dir().join(format!("nbrs-search-bench-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sqlite = SqliteIndex::open_in(&dir).unwrap();
        let mut figures = measure(&rt, &sqlite, &texts, &queries);
        figures["file_bytes"] = json!(std::fs::metadata(sqlite.path()).map_or(0, |m| m.len()));
        report.insert(format!("sqlite_n{n}"), figures);
        drop(sqlite);
        let _ = std::fs::remove_dir_all(&dir);
        let memory: Arc<dyn MemoryIndex> = Arc::new(InMemoryIndex::new());
        report.insert(
            format!("memory_n{n}"),
            measure(&rt, memory.as_ref(), &texts, &queries),
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&Value::Object(report)).unwrap()
    );
}

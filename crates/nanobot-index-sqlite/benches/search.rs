//! Memory search latency and index build rate (issue 17, acceptance 5): the SQLite side
//! index and the in-memory index at 10,000 and 100,000 chunks, queried with a mix that
//! includes terms found in nearly every chunk (`nanobot_memory_index::bench`).
//!
//! `cargo bench -p nanobot-index-sqlite --bench search -- [--sizes 10000,100000] [--queries 300]`
//! prints one JSON report. Targets: p95 ≤ 20 ms at 10,000 chunks, ≤ 100 ms at 100,000.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

#[path = "../../nanobot-memory-index/benches/shared/search_workload.rs"]
mod search_workload;

use search_workload::{arg, corpus, measure, measure_vectors, queries};
use std::sync::Arc;

use nanobot_index_sqlite::SqliteIndex;
use nanobot_memory_index::InMemoryIndex;
use serde_json::{Value, json};

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
        let mut figures = rt.block_on(measure(&sqlite, &texts, &queries));
        figures["vector_lane"] = rt.block_on(measure_vectors(&sqlite, &queries));
        figures["file_bytes"] = json!(std::fs::metadata(sqlite.path()).map_or(0, |m| m.len()));
        report.insert(format!("sqlite_n{n}"), figures);
        drop(sqlite);
        let _ = std::fs::remove_dir_all(&dir);
        let memory = Arc::new(InMemoryIndex::new());
        let mut figures = rt.block_on(measure(memory.as_ref(), &texts, &queries));
        figures["vector_lane"] = rt.block_on(measure_vectors(memory.as_ref(), &queries));
        report.insert(format!("memory_n{n}"), figures);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&Value::Object(report)).unwrap()
    );
}

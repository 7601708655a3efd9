//! Memory search latency and index build rate on PostgreSQL (issue 17, acceptance 5): a
//! scope's index (`PgIndex`) at 10,000 and 100,000 chunks, with the same chunks and query
//! mix as the SQLite bench (`nanobot_memory_index::bench`), so the two compare.
//!
//! `NANOBOT_TEST_PG_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p
//! store-postgres --bench search -- [--sizes 10000,100000] [--queries 300]` prints one
//! JSON report; the bench works in a schema of its own, dropped afterwards. Targets: p95
//! ≤ 20 ms at 10,000 chunks, ≤ 100 ms at 100,000.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

#[path = "../../nanobot-memory-index/benches/shared/search_workload.rs"]
mod search_workload;

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_store_postgres::testing::{TestSchema, url};
use search_workload::{arg, corpus, measure, measure_vectors, queries};
use serde_json::{Value, json};
use sqlx::Row;

fn main() {
    let Some(url) = url() else {
        println!("skipped: NANOBOT_TEST_PG_URL is not set");
        return;
    };
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = arg(&args, "--sizes").map_or(vec![10_000, 100_000], |v| {
        v.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    let count: usize = arg(&args, "--queries").map_or(300, |v| v.parse().expect("--queries N"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut report = serde_json::Map::new();
    for n in sizes {
        let texts = corpus(n);
        let queries = queries(n, count);
        let figures = rt.block_on(async {
            let store = TestSchema::new(&url).store().await;
            let scope = store
                .scope(&ScopeKey::local(Subject::Agent))
                .await
                .unwrap();
            let index = scope.index();
            let mut figures = measure(&index, &texts, &queries).await;
            figures["vector_lane"] = measure_vectors(&index, &queries).await;
            let bytes: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT pg_total_relation_size('{q}.search_chunks') + pg_total_relation_size('{q}.search_terms')",
                q = store.schema().quoted().replace('\'', "''")
            )))
            .fetch_one(&store.pool())
            .await
            .unwrap()
            .get(0);
            figures["table_bytes"] = json!(bytes);
            figures
        });
        report.insert(format!("postgres_n{n}"), figures);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&Value::Object(report)).unwrap()
    );
}

//! W7 of `../shared/bench/workload.md`: journal appends, replayed with the peer script's
//! JSON shape. `cargo bench -p nanobot-memory-store --bench journal -- [--history-sizes 1000,10000]
//! [--history-window 100] [--reps 5]`.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::time::Instant;

use nanobot_bench_workload::{SEED, history_entries};
use nanobot_memory_store::{FileJournal, HistoryJournal, HistoryJournalExt, NewEntry};
use serde_json::{Value, json};

fn summarize(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({"median": samples[samples.len() / 2], "min": samples[0], "max": samples[samples.len() - 1], "samples": samples})
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = arg(&args, "--reps").map_or(5, |v| v.parse().expect("--reps N"));
    let window: usize =
        arg(&args, "--history-window").map_or(100, |v| v.parse().expect("--history-window N"));
    let sizes: Vec<usize> = arg(&args, "--history-sizes").map_or(vec![1000, 10_000], |v| {
        v.split(',').map(|n| n.parse().expect("a size")).collect()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut workloads = serde_json::Map::new();
    for n in sizes {
        let entries = history_entries(SEED + 1, n);
        let (mut totals, mut at_n, mut first, mut reads) = (vec![], vec![], vec![], vec![]);
        let (mut newest, mut opens) = (vec![], vec![]);
        let mut file_bytes = 0;
        for rep in 0..reps {
            let root =
                std::env::temp_dir().join(format!("nbrs-journal-{}-{n}-{rep}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let journal = FileJournal::open(&root).unwrap();
            let mut per = Vec::with_capacity(n);
            let started = Instant::now();
            rt.block_on(async {
                for entry in &entries {
                    let t = Instant::now();
                    journal
                        .append_one(NewEntry::text(entry).from_session("cli:bench"))
                        .await
                        .unwrap();
                    per.push(t.elapsed().as_secs_f64());
                }
            });
            totals.push(started.elapsed().as_secs_f64());
            let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len().max(1) as f64;
            at_n.push(mean(&per[n.saturating_sub(window)..]));
            first.push(mean(&per[..window.min(n)]));
            // What Dream and the Consolidator ask of a long journal: the newest entries
            // after their cursor (here the last `window`), from a fresh handle.
            let t = Instant::now();
            let fresh = FileJournal::open(&root).unwrap();
            opens.push(t.elapsed().as_secs_f64());
            let cursor = n.saturating_sub(window) as u64;
            let t = Instant::now();
            let tail = rt.block_on(fresh.read_since(cursor, None)).unwrap();
            newest.push(t.elapsed().as_secs_f64());
            assert_eq!(tail.len(), n.min(window));
            drop(fresh);
            let t = Instant::now();
            let unread = rt.block_on(journal.read_since(0, None)).unwrap();
            reads.push(t.elapsed().as_secs_f64());
            assert_eq!(unread.len(), n);
            file_bytes = std::fs::metadata(root.join("memory/history.jsonl"))
                .map(|m| m.len())
                .unwrap_or(0);
            drop(journal);
            let _ = std::fs::remove_dir_all(&root);
            assert!(
                rt.block_on(async { Ok::<_, nanobot_memory_store::MemoryError>(()) })
                    .is_ok()
            );
        }
        workloads.insert(
            format!("history_append_n{n}"),
            json!({
                "n": n, "mode": "full", "window": window,
                "total_s": summarize(totals),
                "per_append_at_n_s": summarize(at_n),
                "per_append_first_window_s": summarize(first),
                "read_unprocessed_all_s": summarize(reads),
                "read_newest_window_s": summarize(newest),
                "open_s": summarize(opens),
                "file_bytes": file_bytes,
            }),
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({"peer": "nanobot-rs memory-store", "reps": reps, "workloads": workloads})
        )
        .unwrap()
    );
}

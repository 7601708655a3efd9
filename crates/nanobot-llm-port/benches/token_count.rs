//! Token counting over the 10,000 messages of the peer workload (`workload.md`, W5).
//!
//! `cargo bench -p nanobot-llm-port --bench token_count` prints one JSON object: the per-message
//! estimate with `cl100k_base` (what budget trimming and consolidation run on), the
//! whole-request estimate, the byte fallback, and the tokenizer's one-time start-up.
#![allow(clippy::print_stdout, clippy::expect_used, missing_docs)]

use std::time::Instant;

use nanobot_bench_workload::{SEED, message_stream, tool_definitions};
use nanobot_llm_port::tokens::{estimate_json_message_tokens, estimate_json_prompt_tokens};
use nanobot_llm_port::{Cl100kBase, TokenCounter, Utf8Bytes};
use serde_json::{Map, Value, json};

const REPS: usize = 5;

fn median_secs(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn time<T>(reps: usize, mut work: impl FnMut() -> T) -> (f64, T) {
    let mut samples = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps {
        let start = Instant::now();
        let out = std::hint::black_box(work());
        samples.push(start.elapsed().as_secs_f64());
        last = Some(out);
    }
    (median_secs(samples), last.expect("at least one repetition"))
}

fn main() {
    let messages: Vec<Map<String, Value>> = message_stream(SEED, 10_000)
        .into_iter()
        .filter_map(|m| m.as_object().cloned())
        .collect();
    let tools = tool_definitions();

    let start = Instant::now();
    Cl100kBase.warm_up();
    let tokenizer_start_s = start.elapsed().as_secs_f64();

    let per_message = |counter: &dyn TokenCounter| -> usize {
        messages
            .iter()
            .map(|m| estimate_json_message_tokens(counter, m))
            .sum()
    };
    // Each repetition on a new thread: the counter's per-thread cache of pieces starts
    // empty, so every repetition is a first count of these messages.
    let (cl100k_s, cl100k_tokens) = time(REPS, || {
        std::thread::scope(|scope| {
            scope
                .spawn(|| per_message(&Cl100kBase))
                .join()
                .expect("the counting thread finishes")
        })
    });
    let (bytes_s, bytes_tokens) = time(REPS, || per_message(&Utf8Bytes));
    let (prompt_s, prompt_tokens) = time(REPS, || {
        estimate_json_prompt_tokens(&Cl100kBase, &messages, &tools)
    });

    let report = json!({
        "workload": "message_stream(42, 10000)",
        "reps": REPS,
        "tokenizer_start_s": tokenizer_start_s,
        "per_message_cl100k": {
            "median_s": cl100k_s,
            "tokens": cl100k_tokens,
            "us_per_message": cl100k_s * 1e6 / messages.len() as f64,
            // nanobot-ai 0.3.5 on the same messages (perf-anchors.md, W5).
            "peer_tokens": 1_087_368,
            "peer_median_s": 0.469,
        },
        "per_message_utf8_bytes": { "median_s": bytes_s, "tokens": bytes_tokens },
        "whole_request_cl100k": { "median_s": prompt_s, "tokens": prompt_tokens },
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}

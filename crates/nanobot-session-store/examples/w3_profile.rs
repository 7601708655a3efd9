//! Profiling helper: get_history with a 190,784-token budget on 10,000 messages, repeated.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]
use nanobot_bench_workload::{SEED, message_stream};
use nanobot_llm_port::Cl100kBase;
use nanobot_session_store::{HistoryOptions, StoredMessage, get_history};
fn main() {
    let messages: Vec<StoredMessage> = message_stream(SEED, 10_000)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    let options = HistoryOptions::with_token_budget(190_784);
    let mut n = 0;
    for _ in 0..500 {
        n += get_history(&messages, 0, &options, &Cl100kBase).len();
    }
    println!("{n}");
}

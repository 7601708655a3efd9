//! W5 and W6 of `../shared/bench/workload.md`, with the peer script's JSON shape:
//! the session's prompt estimate over 10,000 messages, and one idle compaction of 1,000
//! messages with a fake model; and the first turn over a 100,000-message backlog (a
//! 128k window, an instant model): the archives it makes, their time, the journal's bytes
//! and the peak memory. `cargo bench -p nanobot-memory-core --bench memory`.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::Instant;

use nanobot_bench_workload::{SEED, fake_summary, memory_md, message_stream, tool_definitions};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, SystemClock, TokenCounter, ToolDefinition};
use nanobot_memory_core::{Archived, ConsolidationConfig, Consolidator, PlainPrompt};
use nanobot_memory_store::FileJournal;
use nanobot_session_store::{
    FileSessionStore, FileStoreOptions, InMemorySessionStore, SessionKey, SessionManager,
    SessionStore, StoredMessage,
};
use serde_json::{Value, json};

const REPS: usize = 5;

fn summarize(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({"median": samples[samples.len() / 2], "min": samples[0], "max": samples[samples.len() - 1], "samples": samples})
}

fn specs(n: usize) -> Vec<StoredMessage> {
    message_stream(SEED, n)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect()
}

fn prompt() -> PlainPrompt {
    // A system prompt of the peer's size (W8: about 22 k characters with MEMORY.md).
    let tools: Vec<ToolDefinition> = tool_definitions()
        .into_iter()
        .map(|t| serde_json::from_value(t).unwrap())
        .collect();
    PlainPrompt {
        system: memory_md(SEED, 20_480),
        tools,
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counter: Arc<dyn TokenCounter> = Arc::new(Cl100kBase);
    Cl100kBase.warm_up();

    // W5: the prompt estimate of a 10,000-message session.
    let sessions = Arc::new(SessionManager::new(
        Arc::new(InMemorySessionStore::new()),
        Arc::new(SystemClock),
        counter.clone(),
    ));
    let key = SessionKey::new("cli:bench-tokens").unwrap();
    let journal_dir = std::env::temp_dir().join(format!("nbrs-w5-{}", std::process::id()));
    let consolidator = {
        let journal = Arc::new(FileJournal::open(&journal_dir).unwrap());
        let sessions = sessions.clone();
        let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        Consolidator::new(
            ConsolidationConfig::new("bench-model", 200_000, 8_192),
            Arc::new(ScriptedLlm::new()),
            journal,
            archive,
            sessions,
            Arc::new(prompt()),
            counter.clone(),
        )
    }
    .unwrap();
    let handle = rt.block_on(sessions.get_or_create(&key)).unwrap();
    for spec in specs(10_000) {
        handle.add_message(spec);
    }
    let t = Instant::now();
    let first_tokens = handle.read(|s| consolidator.estimate(s));
    let first_call = t.elapsed().as_secs_f64();
    let mut cached = Vec::new();
    let mut tokens = 0;
    for _ in 0..REPS {
        let t = Instant::now();
        tokens = handle.read(|s| consolidator.estimate(s));
        cached.push(t.elapsed().as_secs_f64());
    }
    assert_eq!(tokens, first_tokens);
    let _ = std::fs::remove_dir_all(&journal_dir);

    // W6: one idle compaction of 1,000 messages from files, with a fake model.
    let mut samples = Vec::new();
    let mut path = String::new();
    for rep in 0..REPS {
        let root = std::env::temp_dir().join(format!("nbrs-w6-{}-{rep}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let key = SessionKey::new("cli:bench-compact").unwrap();
        {
            // Written the way a bot writes it: through the manager, which records each
            // message's token count in the file.
            let store = Arc::new(
                FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap(),
            );
            let writer = SessionManager::new(store, Arc::new(SystemClock), Arc::new(Cl100kBase))
                .with_recorded_token_counts(true);
            let handle = rt.block_on(writer.get_or_create(&key)).unwrap();
            for spec in specs(1_000) {
                handle.add_message(spec);
            }
            rt.block_on(writer.end_turn(&handle)).unwrap();
        }
        let store: Arc<dyn SessionStore> =
            Arc::new(FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap());
        let sessions = Arc::new(SessionManager::new(
            store,
            Arc::new(SystemClock),
            counter.clone(),
        ));
        let consolidator = {
            let journal = Arc::new(FileJournal::open(&root).unwrap());
            let sessions = sessions;
            let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
                journal.clone(),
                sessions.store().clone(),
            ));
            Consolidator::new(
                ConsolidationConfig::new("bench-model", 200_000, 8_192),
                Arc::new(ScriptedLlm::new().then_text(fake_summary(SEED))),
                journal,
                archive,
                sessions,
                Arc::new(prompt()),
                counter.clone(),
            )
        }
        .unwrap();
        let t = Instant::now();
        let record = rt
            .block_on(consolidator.compact_idle(&key))
            .unwrap()
            .unwrap();
        samples.push(t.elapsed().as_secs_f64());
        path = match record.outcome {
            Archived::Summary { .. } => "llm_summary".into(),
            Archived::Raw { .. } => "raw_dump".into(),
            other => format!("{other:?}"),
        };
        let _ = std::fs::remove_dir_all(&root);
    }

    let backlog = backlog(&rt, &counter);

    let report = json!({
        "peer": "nanobot-rs memory-core",
        "backlog": backlog,
        "reps": REPS,
        "workloads": {
            "token_estimate": {
                "n": 10_000,
                "estimate_session_prompt_tokens": {"time_s": summarize(cached), "first_call_s": first_call, "tokens": tokens},
            },
            "compact_idle": {"m": 1_000, "time_s": summarize(samples), "path": path},
        },
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}

/// Answers every request at once with the same summary.
struct InstantModel;

#[async_trait::async_trait]
impl nanobot_llm_port::LlmClient for InstantModel {
    async fn complete(
        &self,
        _request: &nanobot_llm_port::LlmRequest,
    ) -> Result<nanobot_llm_port::LlmResponse, nanobot_llm_port::LlmError> {
        Ok(nanobot_llm_port::LlmResponse::text(fake_summary(SEED)))
    }

    fn capabilities(&self) -> nanobot_llm_port::Capabilities {
        nanobot_llm_port::Capabilities::new(128_000)
    }
}

/// The first turn's consolidation of a 100,000-message session from files, then the
/// background's: each archive a summary whose request fits.
fn backlog(rt: &tokio::runtime::Runtime, counter: &Arc<dyn TokenCounter>) -> Value {
    let root = std::env::temp_dir().join(format!("nbrs-backlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let key = SessionKey::new("cli:bench-backlog").unwrap();
    {
        let store =
            Arc::new(FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap());
        let writer = SessionManager::new(store, Arc::new(SystemClock), Arc::new(Cl100kBase))
            .with_recorded_token_counts(true);
        let handle = rt.block_on(writer.get_or_create(&key)).unwrap();
        for spec in specs(100_000) {
            handle.add_message(spec);
        }
        rt.block_on(writer.end_turn(&handle)).unwrap();
    }
    let store: Arc<dyn SessionStore> =
        Arc::new(FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap());
    let sessions = Arc::new(SessionManager::new(
        store,
        Arc::new(SystemClock),
        counter.clone(),
    ));
    let consolidator = Arc::new(
        {
            let journal = Arc::new(FileJournal::open(&root).unwrap());
            let sessions = sessions;
            let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
                journal.clone(),
                sessions.store().clone(),
            ));
            Consolidator::new(
                ConsolidationConfig::new("bench-model", 128_000, 8_192),
                Arc::new(InstantModel),
                journal,
                archive,
                sessions,
                Arc::new(prompt()),
                counter.clone(),
            )
        }
        .unwrap(),
    );
    let t = Instant::now();
    let inline = rt
        .block_on(consolidator.maybe_consolidate(&key, None))
        .unwrap();
    let inline_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let background = rt
        .block_on(consolidator.consolidate_backlog(&key, None))
        .unwrap();
    let background_s = t.elapsed().as_secs_f64();
    let summaries = inline
        .archives
        .iter()
        .chain(&background.archives)
        .filter(|r| matches!(r.outcome, Archived::Summary { .. }))
        .count();
    let journal_bytes = std::fs::metadata(root.join("memory/history.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = std::fs::remove_dir_all(&root);
    json!({
        "messages": 100_000,
        "first_turn": {"archives": inline.archives.len(), "time_s": inline_s,
            "messages_archived": inline.archives.last().map_or(0, |r| r.end)},
        "background": {"archives": background.archives.len(), "time_s": background_s,
            "over_budget_after": background.over_budget},
        "summaries": summaries,
        "journal_bytes": journal_bytes,
        "peak_rss_kib": peak_rss_kib(),
    })
}

/// The process's peak resident memory (Linux), 0 elsewhere.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

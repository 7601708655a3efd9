//! Issue 14, acceptance 6: a Dream tick over 1,000 user scopes of which 10 have new journal
//! entries, on files. Reports the bookkeeping (which scopes have work: cursor files only)
//! and the whole tick with an instant model, whose calls must be 10.
//! `cargo bench -p nanobot-app --bench scopes`.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::Instant;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_turn::MemoryBackend;
use serde_json::json;

#[path = "../tests/cli/fixtures.rs"]
mod fixtures;

const SCOPES: usize = 1_000;
const WITH_WORK: usize = 10;
const REPS: usize = 5;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = std::env::temp_dir().join(format!("nanobot-rs-bench-scopes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    fixtures::seed_scopes(&dir, SCOPES, WITH_WORK);
    let seeded_s = started.elapsed().as_secs_f64();
    let workspace = dir.display().to_string();
    let env = move |name: &str| (name == "NANOBOT_WORKSPACE").then(|| workspace.clone());
    let config = nanobot_app::Config::load(None, &env).unwrap();

    let backend = nanobot_app::bot::file_backend(
        &config,
        Arc::new(nanobot_llm_port::SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    )
    .unwrap();
    let mut bookkeeping = Vec::new();
    for _ in 0..REPS {
        let started = Instant::now();
        let due = backend.scopes_with_dream_work().await.unwrap();
        bookkeeping.push(started.elapsed().as_secs_f64());
        assert_eq!(due.len(), WITH_WORK);
    }
    bookkeeping.sort_by(f64::total_cmp);

    let mut llm = ScriptedLlm::new();
    for _ in 0..WITH_WORK {
        llm = llm.then_text("Nothing to change.");
    }
    let llm = Arc::new(llm);
    let bot = nanobot_app::Bot::open(config, llm.clone(), Arc::new(nanobot_llm_port::SystemClock))
        .await
        .unwrap();
    let started = Instant::now();
    let results = bot
        .agent
        .dream_tick(nanobot_dream::Trigger::Scheduled)
        .await
        .unwrap();
    let tick_s = started.elapsed().as_secs_f64();
    assert_eq!(results.len(), WITH_WORK);
    assert!(results.iter().all(|(_, r)| r.is_ok()));
    let started = Instant::now();
    let idle = bot
        .agent
        .dream_tick(nanobot_dream::Trigger::Scheduled)
        .await
        .unwrap();
    let idle_tick_s = started.elapsed().as_secs_f64();
    assert!(idle.is_empty());
    println!(
        "{}",
        json!({
            "workload": "dream tick over scopes (files)",
            "scopes": SCOPES,
            "with_work": WITH_WORK,
            "model_calls": llm.call_count(),
            "bookkeeping_s": {"median": bookkeeping[REPS / 2], "min": bookkeeping[0], "max": bookkeeping[REPS - 1]},
            "tick_with_work_s": tick_s,
            "tick_idle_s": idle_tick_s,
            "seeding_s": seeded_s,
        })
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! How long a Dream run spends outside the model: a 20-entry batch, a model that answers
//! instantly with real tool calls (list, read, three edits, a final answer), on the file
//! backends with the git repository. `cargo bench -p nanobot-dream --bench dream`.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::sync::Arc;
use std::time::Instant;

use nanobot_bench_workload::{SEED, history_entries, memory_md};
use nanobot_dream::{Dream, DreamConfig, Trigger};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, LlmResponse, SystemClock, ToolCall};
use nanobot_memory_store::{
    Document, FileDocuments, FileJournal, FileLease, GitVersions, HistoryJournal, MemoryDocuments,
    MemoryVersions, NewEntry,
};
use serde_json::{Value, json};

const REPS: usize = 7;

fn summarize(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({"median": samples[samples.len() / 2], "min": samples[0], "max": samples[samples.len() - 1], "samples": samples})
}

fn model(rep: usize) -> ScriptedLlm {
    let call = |id: &str, name: &str, args: Value| ToolCall::with_json(id, name, &args);
    ScriptedLlm::new()
        .then(LlmResponse::tool_calls(vec![
            call("a", "list_files", json!({})),
            call("b", "read_file", json!({"path": "memory/MEMORY.md"})),
        ]))
        .then(LlmResponse::tool_calls(vec![
            call("c", "edit_file", json!({"path": "SOUL.md", "old_text": "- Helpful", "new_text": format!("- Helpful ({rep})")})),
            call("d", "write_file", json!({"path": "USER.md", "content": format!("# User\n\n- Name: Ada\n- Run: {rep}\n")})),
            call("e", "write_file", json!({"path": format!("skills/tea-{rep}/SKILL.md"), "content": "---\nname: tea\ndescription: Brew tea\n---\n\n# Tea\n\n1. Boil water.\n"})),
        ]))
        .then_text("Updated SOUL.md, USER.md and one skill.")
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if !only.is_empty() && !only.iter().any(|o| o == "dream_run") {
        println!("{}", json!({"workloads": {}}));
        return;
    }
    Cl100kBase.warm_up();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = std::env::temp_dir().join(format!("nbrs-dream-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let journal = Arc::new(FileJournal::open(&root).unwrap());
    let documents = Arc::new(FileDocuments::open(&root).unwrap());
    let versions = Arc::new(GitVersions::open(&root).unwrap());
    let entries = history_entries(SEED, 20 * (REPS + 1));
    let (mut runs, mut dry_runs, mut prompts_chars) = (Vec::new(), Vec::new(), 0);
    rt.block_on(async {
        documents
            .write(
                Document::Soul,
                "# Soul\n\n- Helpful\n",
                nanobot_memory_store::Expected::Any,
            )
            .await
            .unwrap();
        documents
            .write(
                Document::Memory,
                &memory_md(SEED, 8_000),
                nanobot_memory_store::Expected::Any,
            )
            .await
            .unwrap();
        for rep in 0..=REPS {
            let batch: Vec<NewEntry<'_>> = entries[rep * 20..(rep + 1) * 20]
                .iter()
                .map(|e| NewEntry::text(e).from_session("cli:bench"))
                .collect();
            journal.append(&batch).await.unwrap();
            let llm = Arc::new(model(rep));
            let dream = Dream::new(
                DreamConfig::new("bench"),
                llm.clone(),
                nanobot_dream::DreamStores::stepwise(
                    journal.clone(),
                    documents.clone(),
                    Ok(versions.clone() as Arc<dyn MemoryVersions>),
                    Arc::new(FileLease::open(&root).unwrap()),
                ),
                Arc::new(SystemClock),
                Arc::new(Cl100kBase),
            )
            .unwrap();
            if rep == 0 {
                // Warm-up, and the initial version.
                dream.run(Trigger::Scheduled).await.unwrap();
                continue;
            }
            let t = Instant::now();
            let dry = dream.dry_run().await.unwrap();
            dry_runs.push(t.elapsed().as_secs_f64());
            assert!(dry.completed());
            let dream = Dream::new(
                DreamConfig::new("bench"),
                Arc::new(model(rep)),
                nanobot_dream::DreamStores::stepwise(
                    journal.clone(),
                    documents.clone(),
                    Ok(versions.clone() as Arc<dyn MemoryVersions>),
                    Arc::new(FileLease::open(&root).unwrap()),
                ),
                Arc::new(SystemClock),
                Arc::new(Cl100kBase),
            )
            .unwrap();
            let t = Instant::now();
            let report = dream.run(Trigger::Scheduled).await.unwrap();
            runs.push(t.elapsed().as_secs_f64());
            assert!(report.completed() && report.version.is_some());
            assert_eq!(report.batch.unwrap().2, 20);
            prompts_chars = llm.requests()[0].messages[1]
                .content()
                .unwrap()
                .as_text()
                .unwrap()
                .len();
        }
    });
    let _ = std::fs::remove_dir_all(&root);
    println!(
        "{}",
        json!({"workloads": {"dream_run": {
            "batch_entries": 20,
            "prompt_bytes": prompts_chars,
            "run_s": summarize(runs),
            "dry_run_s": summarize(dry_runs),
        }}})
    );
}

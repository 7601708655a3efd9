//! W8 of `../shared/bench/workload.md`, with the peer script's JSON shape: building the
//! messages of a turn with a 20 KB MEMORY.md, 50 replayed messages and the current message,
//! per call, with no skills (`skills_disabled`) and with a workspace holding 11 skills
//! (`default_skills`: nanobot-ai's own built-in skills when its install is found, so both
//! sides list the same files). `cargo bench -p nanobot-context-builder --bench context`.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use nanobot_bench_workload::{SEED, current_message, memory_md, message_stream};
use nanobot_context_builder::{BuilderConfig, ContextBuilder, CurrentMessage, Host, Turn};
use nanobot_llm_port::{Cl100kBase, Message, TokenCounter};
use nanobot_prompt_inputs::PromptLoader;
use nanobot_session_store::{HistoryOptions, StoredMessage, get_history_counted};
use serde_json::{Value, json};

const REPS: usize = 5;
const CALLS: usize = 20;

fn summarize(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({"median": samples[samples.len() / 2], "min": samples[0], "max": samples[samples.len() - 1], "samples": samples})
}

/// nanobot-ai's built-in skills directory, when the peer is installed.
fn peer_skills() -> Option<PathBuf> {
    let home = std::env::var_os("NANOBOT_PEER_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/nanobot-peer"))
        })?;
    let lib = home.join(".venv/lib");
    std::fs::read_dir(&lib).ok()?.flatten().find_map(|entry| {
        let dir = entry.path().join("site-packages/nanobot/skills");
        dir.is_dir().then_some(dir)
    })
}

/// 11 skills in `dir/skills`: the peer's, or generated ones of a similar size.
fn install_skills(workspace: &Path) -> &'static str {
    let target = workspace.join("skills");
    if let Some(source) = peer_skills() {
        for entry in std::fs::read_dir(&source).unwrap().flatten() {
            let file = entry.path().join("SKILL.md");
            if file.is_file() {
                let dir = target.join(entry.file_name());
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::copy(&file, dir.join("SKILL.md")).unwrap();
            }
        }
        return "nanobot-ai built-in skills";
    }
    for i in 0..11 {
        let dir = target.join(format!("skill-{i:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        let body = "Use this skill when the user asks for it. ".repeat(60);
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: skill-{i:02}\ndescription: A generated skill number {i} for the benchmark.\nmetadata: {{\"nanobot\": {{\"requires\": {{\"bins\": [\"sh\"]}}}}}}\n---\n\n{body}\n"),
        )
        .unwrap();
    }
    "generated skills"
}

/// The replayed history and its estimate, as a bot gets them from the session store (whose
/// per-message counts are cached, so the estimate costs no tokenization).
fn history() -> (Vec<Message>, usize) {
    let stored: Vec<StoredMessage> = message_stream(SEED, 50)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    let options = HistoryOptions::default();
    let (rows, tokens) = get_history_counted(&stored, 0, &options, &Cl100kBase);
    let messages = rows
        .into_iter()
        .map(|row| serde_json::from_value(Value::Object((*row).clone())).unwrap())
        .collect();
    (messages, tokens)
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if !only.is_empty() && !only.iter().any(|o| o == "build_messages") {
        println!("{}", json!({"workloads": {}}));
        return;
    }
    Cl100kBase.warm_up();
    let counter: Arc<dyn TokenCounter> = Arc::new(Cl100kBase);
    let root = std::env::temp_dir().join(format!("nbrs-w8-{}", std::process::id()));
    let memory = memory_md(SEED, 20_480);
    let (history, history_tokens) = history();
    let current = current_message(SEED);
    let mut out = serde_json::Map::new();
    out.insert("history_messages".into(), json!(history.len()));
    out.insert("memory_md_bytes".into(), json!(memory.len()));
    out.insert("calls_per_rep".into(), json!(CALLS));

    for label in ["skills_disabled", "default_skills"] {
        let workspace = root.join(label);
        std::fs::create_dir_all(workspace.join("memory")).unwrap();
        std::fs::write(workspace.join("memory/MEMORY.md"), &memory).unwrap();
        let skills = (label == "default_skills").then(|| install_skills(&workspace));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let documents =
            std::sync::Arc::new(nanobot_memory_store::FileDocuments::open(&workspace).unwrap());
        let loader = PromptLoader::new(documents)
            .with_agent_dir(&workspace)
            .unwrap();
        let snapshot = runtime.block_on(loader.load()).unwrap();
        let builder = ContextBuilder::new(BuilderConfig::new(Host::this_build()), counter.clone());
        let turn = Turn {
            channel: Some("cli"),
            session_key: Some("cli:bench-context"),
            history: &history,
            history_tokens: Some(history_tokens),
            current: Some(CurrentMessage::user(current.clone())),
            ..Turn::default()
        };
        let warm = builder.build(&snapshot, &turn).unwrap();
        assert!(
            warm.report.truncations.is_empty(),
            "the workload must not be cut"
        );

        let mut samples = Vec::new();
        let mut system_samples = Vec::new();
        let mut with_load = Vec::new();
        for _ in 0..REPS {
            let t = Instant::now();
            for _ in 0..CALLS {
                std::hint::black_box(builder.build(&snapshot, &turn).unwrap());
            }
            samples.push(t.elapsed().as_secs_f64() / CALLS as f64);
            let t = Instant::now();
            for _ in 0..CALLS {
                std::hint::black_box(builder.system_prompt(&snapshot, &turn));
            }
            system_samples.push(t.elapsed().as_secs_f64() / CALLS as f64);
            // Reloading the workspace before every build (the documents read through the
            // port; skills re-parsed only when changed), as a bot that picks up edits each
            // turn does.
            let t = Instant::now();
            for _ in 0..CALLS {
                let snapshot = runtime.block_on(loader.load()).unwrap();
                std::hint::black_box(builder.build(&snapshot, &turn).unwrap());
            }
            with_load.push(t.elapsed().as_secs_f64() / CALLS as f64);
        }
        out.insert(
            label.into(),
            json!({
                "skills": snapshot.skills.len(),
                "skills_source": skills,
                "output_messages": warm.messages.len(),
                "system_prompt_chars": warm.system_prompt().chars().count(),
                "total_tokens": warm.report.total_tokens,
                "build_messages_per_call_s": summarize(samples),
                "build_system_prompt_per_call_s": summarize(system_samples),
                "load_and_build_per_call_s": summarize(with_load),
            }),
        );
    }
    let _ = std::fs::remove_dir_all(&root);
    println!("{}", json!({"workloads": {"build_messages": out}}));
}

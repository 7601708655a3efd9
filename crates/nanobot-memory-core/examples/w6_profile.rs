//! Profiling helper: idle compactions of a 1,000-message session from files, repeated.
//! `W6_UNRECORDED=1` writes the session without recorded token counts (the default manager).
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]
use std::sync::Arc;

use nanobot_bench_workload::{SEED, fake_summary, memory_md, message_stream};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, SystemClock};
use nanobot_memory_core::{ConsolidationConfig, Consolidator, PlainPrompt};
use nanobot_memory_store::FileJournal;
use nanobot_session_store::{
    FileSessionStore, FileStoreOptions, SessionKey, SessionManager, StoredMessage,
};

const REPS: usize = 100;

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let specs: Vec<StoredMessage> = message_stream(SEED, 1_000)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    // The session is written once, the way a bot writes it (through the manager, which
    // records each message's token count), and copied for each rep, so a profile of this
    // binary shows the compaction rather than the set-up.
    let template = std::env::temp_dir().join(format!("nbrs-w6p-{}-template", std::process::id()));
    let key = SessionKey::new("cli:bench-compact").unwrap();
    {
        let store = Arc::new(
            FileSessionStore::open_workspace(&template, FileStoreOptions::default()).unwrap(),
        );
        let writer = SessionManager::new(store, Arc::new(SystemClock), Arc::new(Cl100kBase))
            .with_recorded_token_counts(std::env::var_os("W6_UNRECORDED").is_none());
        let handle = rt.block_on(writer.get_or_create(&key)).unwrap();
        for spec in specs.iter().cloned() {
            handle.add_message(spec);
        }
        rt.block_on(writer.end_turn(&handle)).unwrap();
    }
    let mut total = std::time::Duration::ZERO;
    for rep in 0..REPS {
        let root = std::env::temp_dir().join(format!("nbrs-w6p-{}-{rep}", std::process::id()));
        copy_tree(&template, &root);
        let store =
            Arc::new(FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap());
        let sessions = Arc::new(SessionManager::new(
            store,
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        ));
        if std::env::var("W6_SPLIT").is_ok() {
            let t = std::time::Instant::now();
            let handle = rt.block_on(sessions.get_or_create(&key)).unwrap();
            let load = t.elapsed();
            let t = std::time::Instant::now();
            let (h, n) = handle.read(|s| {
                nanobot_session_store::get_history_counted(
                    s.messages(),
                    0,
                    &nanobot_session_store::HistoryOptions::with_token_budget(190_784),
                    &Cl100kBase,
                )
            });
            let hist = t.elapsed();
            let t = std::time::Instant::now();
            let msgs = nanobot_memory_core::replayed_messages(&h);
            let conv = t.elapsed();
            println!(
                "load {load:?} history {hist:?} ({} msgs, {n} tokens) convert {conv:?} ({})",
                h.len(),
                msgs.len()
            );
            sessions.invalidate(&key);
        }
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
                Arc::new(PlainPrompt {
                    system: memory_md(SEED, 20_480),
                    tools: Vec::new(),
                }),
                Arc::new(Cl100kBase),
            )
        }
        .unwrap();
        let t = std::time::Instant::now();
        rt.block_on(consolidator.compact_idle(&key)).unwrap();
        total += t.elapsed();
        let _ = std::fs::remove_dir_all(&root);
    }
    let _ = std::fs::remove_dir_all(&template);
    println!("{:?} per compaction", total / REPS as u32);
}

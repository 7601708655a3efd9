//! Profiling helper: idle compactions of a 1,000-message session from files, repeated.
#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]
use std::sync::Arc;

use bench_workload::{SEED, fake_summary, memory_md, message_stream};
use llm_port::testing::ScriptedLlm;
use llm_port::{Cl100kBase, SystemClock};
use memory_core::{ConsolidationConfig, Consolidator, PlainPrompt};
use memory_store::FileJournal;
use session_store::{
    FileSessionStore, FileStoreOptions, SessionKey, SessionManager, StoredMessage,
};

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let specs: Vec<StoredMessage> = message_stream(SEED, 1_000)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    let mut total = std::time::Duration::ZERO;
    for rep in 0..30 {
        let root = std::env::temp_dir().join(format!("nbrs-w6p-{}-{rep}", std::process::id()));
        let key = SessionKey::new("cli:bench-compact").unwrap();
        {
            let store =
                FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap();
            let mut session =
                session_store::Session::new(key.clone(), chrono::NaiveDateTime::default());
            for spec in &specs {
                session.add_message(spec.clone(), chrono::NaiveDateTime::default());
            }
            rt.block_on(session_store::SessionStoreExt::save_changes(
                &store,
                &mut session,
                None,
            ))
            .unwrap();
        }
        let store =
            Arc::new(FileSessionStore::open_workspace(&root, FileStoreOptions::default()).unwrap());
        let sessions = Arc::new(SessionManager::new(
            store,
            Arc::new(SystemClock),
            Arc::new(Cl100kBase),
        ));
        let consolidator = Consolidator::new(
            ConsolidationConfig::new("bench-model", 200_000, 8_192),
            Arc::new(ScriptedLlm::new().then_text(fake_summary(SEED))),
            Arc::new(FileJournal::open(&root).unwrap()),
            sessions,
            Arc::new(PlainPrompt {
                system: memory_md(SEED, 20_480),
                tools: Vec::new(),
            }),
            Arc::new(Cl100kBase),
        )
        .unwrap();
        let t = std::time::Instant::now();
        rt.block_on(consolidator.compact_idle(&key)).unwrap();
        total += t.elapsed();
        let _ = std::fs::remove_dir_all(&root);
    }
    println!("{:?} per compaction", total / 30);
}

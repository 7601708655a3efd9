//! The history journal reader on any bytes: it opens (or says why not), and the cursors it
//! reads back are strictly increasing.
#![no_main]

use std::sync::OnceLock;

use nanobot_memory_store::{FileJournal, HistoryJournal};

#[path = "common.rs"]
mod common;
use common::block_on;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    let dir = common::scratch("journal", &DIR);
    std::fs::create_dir_all(dir.join("memory")).unwrap();
    dir
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let memory = dir().join("memory");
    for name in [".cursor", ".dream_cursor", "history.jsonl.damaged"] {
        let _ = std::fs::remove_file(memory.join(name));
    }
    std::fs::write(memory.join("history.jsonl"), data).unwrap();
    let Ok(journal) = FileJournal::open(dir()) else {
        return;
    };
    if let Ok(entries) = block_on(journal.read_since(0, None)) {
        assert!(entries.windows(2).all(|w| w[0].cursor < w[1].cursor));
    }
});

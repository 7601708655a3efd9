//! The journal's cursor files (`.cursor`, `.dream_cursor`) on any bytes, beside a valid
//! history: the journal opens (or says why not), never hands out a cursor it has already
//! used, and keeps Dream's cursor within the journal.
#![no_main]

use std::sync::OnceLock;

use nanobot_memory_store::{FileJournal, HistoryJournal, HistoryJournalExt, NewEntry};

#[path = "common.rs"]
mod common;
use common::block_on;

const HISTORY: &str = concat!(
    "{\"cursor\": 3, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"a\"}\n",
    "{\"cursor\": 7, \"timestamp\": \"2026-01-01 00:00\", \"content\": \"b\"}\n",
);

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    let dir = common::scratch("cursors", &DIR);
    std::fs::create_dir_all(dir.join("memory")).unwrap();
    dir
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // The bytes before the first 0xff go to `.cursor`, the rest to `.dream_cursor`.
    let split = data.iter().position(|&b| b == 0xff).unwrap_or(data.len());
    let (cursor, dream) = (&data[..split], data.get(split + 1..).unwrap_or_default());
    let memory = dir().join("memory");
    let _ = std::fs::remove_file(memory.join("history.jsonl.damaged"));
    std::fs::write(memory.join("history.jsonl"), HISTORY).unwrap();
    std::fs::write(memory.join(".cursor"), cursor).unwrap();
    std::fs::write(memory.join(".dream_cursor"), dream).unwrap();
    let Ok(journal) = FileJournal::open(dir()) else {
        return;
    };
    let latest = block_on(journal.latest_cursor()).unwrap();
    assert!(latest >= 7, "the latest cursor {latest} is below one in the file");
    if let Ok(dream) = block_on(journal.dream_cursor()) {
        assert!(dream <= latest, "Dream's cursor {dream} is past the latest {latest}");
    }
    if let Ok(next) = block_on(journal.append_one(NewEntry::text("c"))) {
        assert!(next > latest, "cursor {next} handed out again (latest {latest})");
        let entries = block_on(journal.read_since(0, None)).unwrap();
        assert_eq!(entries.last().map(|e| e.cursor), Some(next));
    }
});

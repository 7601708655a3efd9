//! The history journal reader on any bytes: it opens (or says why not), and the cursors it
//! reads back are strictly increasing.
#![no_main]

use std::sync::OnceLock;

use memory_store::{FileJournal, HistoryJournal};

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nanobot-fuzz-journal-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("memory")).unwrap();
        dir
    })
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
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

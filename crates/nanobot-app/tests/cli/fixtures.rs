//! Workspaces with many scopes, for the Dream-tick test and the scopes bench (which
//! includes this file).
#![allow(dead_code)]

use std::path::Path;

use nanobot_memory_scope::{ScopeDirs, ScopeKey, Subject, UserKey};

/// `total` user scopes under `workspace`, each with a journal of 5 entries; in the first
/// `with_work` of them Dream has read 3, in the rest all 5. Returns the scopes with work.
pub(crate) fn seed_scopes(workspace: &Path, total: usize, with_work: usize) -> Vec<Subject> {
    let dirs = ScopeDirs::new(workspace);
    let mut due = Vec::new();
    for n in 0..total {
        let subject = Subject::User(UserKey::new("telegram", &format!("{n}")).unwrap());
        let root = dirs.open(&ScopeKey::local(subject.clone())).unwrap();
        let memory = root.join("memory");
        std::fs::create_dir_all(&memory).unwrap();
        let mut history = String::new();
        for cursor in 1..=5 {
            history.push_str(&format!(
                "{{\"cursor\": {cursor}, \"timestamp\": \"2026-12-01 09:0{cursor}\", \"content\": \"User {n} said thing {cursor}.\"}}\n"
            ));
        }
        std::fs::write(memory.join("history.jsonl"), history).unwrap();
        std::fs::write(memory.join(".cursor"), "5").unwrap();
        let read = if n < with_work { 3 } else { 5 };
        std::fs::write(memory.join(".dream_cursor"), read.to_string()).unwrap();
        if n < with_work {
            due.push(subject);
        }
    }
    due
}

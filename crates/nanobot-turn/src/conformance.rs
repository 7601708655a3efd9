//! The isolation suite (feature `conformance`): every memory backend runs it. Two users of
//! one agent get identical session keys and identical messages, each with a canary fact of
//! their own; neither canary may ever appear in the other's prompt, Dream input, documents,
//! journal reads, session list, by-key or by-cursor reads, versions, locks or lease. A group
//! chat in `user` isolation sees neither.
//!
//! The suite enumerates the methods of every memory port from the lists the port crates
//! keep beside their traits (each held to its trait's source by that crate's tests): a port
//! method this suite does not exercise fails it, so a new method cannot arrive without a
//! case. Nothing here reads a file, so the suite runs from a registry package.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use nanobot_context_builder::{BuilderConfig, ContextBuilder, Host};
use nanobot_dream::{RunStatus, Trigger};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Cl100kBase, LlmClient, SystemClock};
use nanobot_memory_scope::{ChatKey, ScopeKey, Subject, UserKey};
use nanobot_memory_store::{
    ArchiveCommit, AuxFile, Document, Expected, FileChange, HistoryJournalExt, MemoryChange,
    MemoryDocumentsExt as _, MemoryFile, NewEntry, Recovery, Snapshot, archive_digest,
};
use nanobot_session_store::{Append, SessionKey, SessionStoreExt as _, StoredMessage};

use crate::agent::{Agent, AgentSettings};
use crate::memory::{MemoryBackend, ScopeStores};
use crate::tools::{SearchMemory, ToolContext, TurnTool};

mod suite;

pub use suite::isolation_suite;

/// The port methods the suite exercises, by trait; [`port_methods`] must find no others.
pub const COVERED: &[(&str, &[&str])] = &[
    (
        "SessionStore",
        &[
            "load",
            "append",
            "rewrite",
            "list",
            "delete",
            "open_for_replay",
            "flush",
            "try_lock_turn",
            "current_revision",
            "capabilities",
            "save_changes",
        ],
    ),
    (
        "HistoryJournal",
        &[
            "append",
            "read_since",
            "read_last",
            "latest_cursor",
            "dream_cursor",
            "set_dream_cursor",
            "compact",
            "remove_entries",
            "capabilities",
            "append_one",
            "unprocessed",
            "unprocessed_newest",
        ],
    ),
    (
        "MemoryDocuments",
        &[
            "read",
            "write",
            "skills",
            "read_skill",
            "write_skill",
            "delete_skill",
            "read_aux",
            "write_aux",
            "stamp",
            "capabilities",
            "read_text",
            "skill_names",
            "initialize",
        ],
    ),
    (
        "MemoryVersions",
        &["commit", "log", "resolve", "files_at", "rewrite"],
    ),
    (
        "MemoryLease",
        &[
            "try_acquire",
            "renew",
            "check",
            "release",
            "holder",
            "capabilities",
        ],
    ),
    ("SessionArchive", &["commit_archive", "find_archive"]),
    ("MemoryCommit", &["commit", "recover"]),
];

/// Every method of every memory port, by trait, as the port crates list it (each port
/// crate's tests hold its list to the trait's source).
pub fn port_methods() -> Vec<(&'static str, Vec<String>)> {
    nanobot_session_store::conformance::PORT_METHODS
        .iter()
        .chain(nanobot_memory_store::conformance::PORT_METHODS)
        .map(|(port, methods)| (*port, methods.iter().map(|m| (*m).to_owned()).collect()))
        .collect()
}

/// Port methods the suite does not exercise (must be empty).
pub fn uncovered_methods() -> Vec<String> {
    let mut missing = Vec::new();
    for (port, methods) in port_methods() {
        let covered = COVERED
            .iter()
            .find(|(p, _)| *p == port)
            .map_or(&[][..], |(_, m)| *m);
        for method in methods {
            if !covered.contains(&method.as_str()) {
                missing.push(format!("{port}::{method}"));
            }
        }
    }
    missing
}

//! The isolation suite (feature `conformance`): every memory backend runs it. Two users of
//! one agent get identical session keys and identical messages, each with a canary fact of
//! their own; neither canary may ever appear in the other's prompt, Dream input, documents,
//! journal reads, session list, by-key or by-cursor reads, versions, locks or lease. A group
//! chat in `user` isolation sees neither.
//!
//! The suite enumerates the methods of every memory port from their source: a port method
//! this suite does not exercise fails it, so a new method cannot arrive without a case.
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
    ("MemoryVersions", &["commit", "log", "resolve", "files_at"]),
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

/// The sources of the memory ports (the traits and their extension traits).
const PORT_SOURCES: &[(&str, &str)] = &[
    (
        "SessionStore",
        include_str!("../../nanobot-session-store/src/store.rs"),
    ),
    (
        "HistoryJournal",
        include_str!("../../nanobot-memory-store/src/journal.rs"),
    ),
    (
        "MemoryDocuments",
        include_str!("../../nanobot-memory-store/src/documents.rs"),
    ),
    (
        "MemoryVersions",
        include_str!("../../nanobot-memory-store/src/versions.rs"),
    ),
    (
        "MemoryLease",
        include_str!("../../nanobot-memory-store/src/lease.rs"),
    ),
    (
        "SessionArchive",
        include_str!("../../nanobot-memory-store/src/archive.rs"),
    ),
    (
        "MemoryCommit",
        include_str!("../../nanobot-memory-store/src/commit.rs"),
    ),
];

/// Every method declared in the port's trait and its extension traits (`pub trait
/// <Port>`, `pub trait <Port>Ext`) in each port's source, by port.
pub fn port_methods() -> Vec<(&'static str, Vec<String>)> {
    PORT_SOURCES
        .iter()
        .map(|(port, source)| {
            let mut methods = Vec::new();
            let mut inside = false;
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("pub trait ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    inside = name == *port || name == format!("{port}Ext");
                } else if inside && line.starts_with('}') {
                    inside = false;
                } else if inside && let Some(at) = line.find("fn ") {
                    let name: String = line[at + 3..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() && !methods.contains(&name) {
                        methods.push(name);
                    }
                }
            }
            (*port, methods)
        })
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

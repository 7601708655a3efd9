//! The two tools that change memory beyond a note, off unless the operator turns them on:
//! `restore_memory` (the memory files back to their state before a version, recorded as a
//! new version) and `forget_session` (a conversation and what only it taught, in this
//! scope alone). A host's model should not be able to rewrite or erase memory because a
//! conversation asked it to, so a server offers neither by default.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_session_store::SessionKey;
use nanobot_turn::ScopeMemory;
use serde_json::json;

use crate::MemoryServer;
use crate::args::{Args, BadArgument};
use crate::calls::{Answer, CallError, version_argument};

/// Forgets a session in one scope: its messages, the journal entries made from it, the
/// curated lines only they taught and their search rows. The application supplies it (the
/// assembly crate knows every step); the server only ever passes the scope it serves.
#[async_trait]
pub trait ForgetSession: Send + Sync {
    /// Forgets `key` in `memory`'s scope alone. `Ok`: what went, in words; `Err`: why
    /// nothing did (an unknown session, a turn running on it).
    async fn forget(&self, memory: &Arc<ScopeMemory>, key: &SessionKey) -> Result<String, String>;
}

pub(crate) async fn restore_memory(
    server: &MemoryServer,
    args: &Args<'_>,
) -> Result<Answer, CallError> {
    if !server.shared.options.allow_restore {
        return Err(CallError::Off {
            tool: crate::tools::names::RESTORE,
        });
    }
    let id = version_argument(args)?;
    let report = server
        .memory
        .dream
        .restore(id)
        .await
        .map_err(|e| CallError::Failed(format!("version {id} was not restored: {e}")))?;
    let files: Vec<&str> = report.changes.iter().map(|d| d.path.as_str()).collect();
    Ok(Answer::with_text(
        json!({
            "undone": report.undone.id,
            "version": report.version.as_ref().map(|v| v.id.clone()),
            "files": files,
        }),
        nanobot_dream::format::restore_reply(&report),
    ))
}

pub(crate) async fn forget_session(
    server: &MemoryServer,
    args: &Args<'_>,
) -> Result<Answer, CallError> {
    let Some(forget) = server.shared.forget.as_ref() else {
        return Err(CallError::Off {
            tool: crate::tools::names::FORGET,
        });
    };
    let key = args.text("key")?.trim();
    let key = SessionKey::new(key).map_err(|e| BadArgument::new("key", e.to_string()))?;
    let said = forget
        .forget(&server.memory, &key)
        .await
        .map_err(CallError::Failed)?;
    Ok(Answer::with_text(
        json!({"key": key.as_str(), "forgotten": said}),
        said,
    ))
}

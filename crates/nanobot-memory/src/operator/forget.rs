//! Forgetting a conversation: the session, the journal entries made from it, the curated
//! lines whose only sources those entries were (as a Dream version that says so) and the
//! search index rows, in every scope that holds any of it. Lines another conversation also
//! taught stay. Each step can be run again: an interrupted forget is finished by running
//! it again, derived data first, so nothing is left that points at what is gone.

use std::fmt::Write as _;
use std::sync::Arc;

use nanobot_dream::ForgetLines;
use nanobot_dream::provenance::Source;
use nanobot_memory_index::{GroupUpdate, history_source};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{HistoryJournal as _, JournalEntry, Version};
use nanobot_session_store::SessionKey;
use nanobot_turn::ScopeMemory;

use crate::{AssemblyError, Bot};

/// What forgetting a session finds in one scope (and, once applied, removed).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScopeForget {
    /// The scope.
    pub scope: ScopeKey,
    /// The session's messages, when the session is kept in this scope.
    pub session_messages: Option<usize>,
    /// The journal entries made from the session.
    pub entries: Vec<JournalEntry>,
    /// The curated lines that go, and those that stay because another conversation also
    /// taught them.
    pub lines: ForgetLines,
    /// The Dream version that recorded the lines' removal, once applied.
    pub version: Option<Version>,
    /// Memory versions rewritten to erase the lines from the history too.
    pub erased_versions: usize,
}

impl ScopeForget {
    fn is_empty(&self) -> bool {
        self.session_messages.is_none()
            && self.entries.is_empty()
            && self.lines.is_empty()
            && self.erased_versions == 0
    }
}

/// What forgetting a session finds, or did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ForgetReport {
    /// The session.
    pub session: SessionKey,
    /// The scopes holding any of it.
    pub scopes: Vec<ScopeForget>,
    /// Whether it was carried out (else: what it would remove).
    pub applied: bool,
    /// Whether the memory versions are rewritten too (a real erasure).
    pub erase_history: bool,
}

impl ForgetReport {
    /// Whether nothing of the session is anywhere.
    pub fn is_empty(&self) -> bool {
        self.scopes.is_empty()
    }

    /// For the operator: what goes (or went) and what stays, scope by scope.
    pub fn describe(&self) -> String {
        let verb = if self.applied { "removed" } else { "removes" };
        let mut out = format!("Forgetting session {} {verb}:", self.session);
        for scope in &self.scopes {
            let _ = write!(out, "\n\nIn {}:", scope.scope);
            if let Some(n) = scope.session_messages {
                let _ = write!(out, "\n- the session and its {n} messages");
            }
            if !scope.entries.is_empty() {
                let cursors: Vec<String> = scope
                    .entries
                    .iter()
                    .map(|e| format!("#{}", e.cursor))
                    .collect();
                let _ = write!(
                    out,
                    "\n- {} journal entries made from it ({})",
                    cursors.len(),
                    cursors.join(", ")
                );
            }
            for (path, line) in &scope.lines.removed {
                let _ = write!(out, "\n- {path}: {}", line.trim());
            }
            if !scope.lines.kept.is_empty() {
                out.push_str("\nKept, as another conversation also taught them:");
                for (path, line) in &scope.lines.kept {
                    let _ = write!(out, "\n  {path}: {}", line.trim());
                }
            }
            if let Some(version) = &scope.version {
                let _ = write!(
                    out,
                    "\nMemory version {}: {}",
                    version.short_id(),
                    version.subject()
                );
            }
            if scope.erased_versions > 0 {
                let _ = write!(
                    out,
                    "\n{} memory versions rewritten without the removed lines",
                    scope.erased_versions
                );
            }
        }
        out.push_str("\n\nThe search index rows of all of it go too.");
        out.push_str(if self.erase_history {
            " The memory versions are rewritten: every version loses the removed lines, and the lines of version messages that quote them; version ids change and the old history is deleted, so a restore can never bring them back."
        } else {
            " Earlier memory versions still hold the removed lines (a restore could bring them back); erase the history too to remove them there."
        });
        out
    }
}

impl Bot {
    /// What forgetting session `key` would remove, in every scope (nothing is changed);
    /// `erase_history`: whether the memory versions would be rewritten too.
    pub async fn forget_plan(
        &self,
        key: &SessionKey,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        self.forget_session(key, false, erase_history).await
    }

    /// Forgets session `key` in every scope (see the module), and with `erase_history`
    /// rewrites the memory versions without the removed lines. An unknown session is
    /// `NotFound`, with nothing changed.
    pub async fn forget(
        &self,
        key: &SessionKey,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        self.forget_session(key, true, erase_history).await
    }

    async fn forget_session(
        &self,
        key: &SessionKey,
        apply: bool,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let mut scopes = Vec::new();
        for scope in self.every_scope().await? {
            let memory = self.memory(&scope).await?;
            let mut found = if apply {
                self.forget_in(&memory, key).await?
            } else {
                find(&memory, key).await?
            };
            if apply && erase_history {
                // Last, and whatever else was found: a rerun finishes an interrupted erasure.
                let from = from_session(key);
                found.erased_versions = memory.dream.erase_from_history(&from).await?;
            }
            if !found.is_empty() {
                scopes.push(found);
            }
        }
        if scopes.is_empty() {
            return Err(AssemblyError::NotFound {
                what: format!(
                    "Nothing of session {key} is in memory (no session, journal entry or memory line); nothing was removed. `nanobot sessions list` shows the sessions."
                ),
            });
        }
        Ok(ForgetReport {
            session: key.clone(),
            scopes,
            applied: apply,
            erase_history,
        })
    }

    /// The agent's scope and every other scope the storage lists.
    async fn every_scope(&self) -> Result<Vec<ScopeKey>, AssemblyError> {
        let mut scopes = vec![ScopeKey::local(Subject::Agent)];
        if !matches!(self.storage(), crate::Storage::InMemory) {
            for summary in self.storage().scopes().await? {
                scopes.push(ScopeKey::local(summary.subject));
            }
        }
        Ok(scopes)
    }

    /// Forgets `key` in `memory`'s scope, derived data first.
    async fn forget_in(
        &self,
        memory: &Arc<ScopeMemory>,
        key: &SessionKey,
    ) -> Result<ScopeForget, AssemblyError> {
        let mut found = find(memory, key).await?;
        if found.is_empty() {
            return Ok(found);
        }
        // A turn running on the session (another process) would write it back.
        let Some(turn) = memory.sessions.store().try_lock_turn(key).await? else {
            return Err(AssemblyError::Refused {
                why: format!(
                    "session {key} has a turn running; nothing was removed. Forget it when the turn has ended."
                ),
            });
        };
        let result = self.forget_locked(memory, key, &mut found).await;
        turn.release().await;
        result.map(|()| found)
    }

    /// The steps of [`Bot::forget_in`], under the session's turn lock.
    async fn forget_locked(
        &self,
        memory: &Arc<ScopeMemory>,
        key: &SessionKey,
        found: &mut ScopeForget,
    ) -> Result<(), AssemblyError> {
        let what = format!("session {key}");
        let from = from_session(key);
        let (lines, version) = memory.dream.forget_lines(&from, &what).await?;
        found.lines = lines;
        found.version = version;
        let cursors: Vec<u64> = found.entries.iter().map(|e| e.cursor).collect();
        if let Some(index) = &memory.index {
            let gone = cursors
                .iter()
                .map(|&c| GroupUpdate::remove(history_source(c)));
            index.replace(gone.collect()).await?;
        }
        memory.journal.remove_entries(&cursors).await?;
        memory.sessions.delete(key).await?;
        if let Some(index) = &memory.index {
            // The changed files and the deleted session leave the index, then its storage.
            memory
                .indexer(index.clone(), self.agent().counter().clone())
                .sync()
                .await?;
            index.purge().await?;
        }
        Ok(())
    }
}

/// Whether a source is an entry made from session `key`.
fn from_session(key: &SessionKey) -> impl Fn(&Source) -> bool + Send + Sync + '_ {
    move |s: &Source| s.session_key.as_deref() == Some(key.as_str())
}

/// What of session `key` is in `memory`'s scope.
async fn find(memory: &ScopeMemory, key: &SessionKey) -> Result<ScopeForget, AssemblyError> {
    let session_messages = match memory.sessions.store().load(key).await? {
        Some(loaded) => Some(loaded.session.messages().len()),
        None => None,
    };
    let entries = memory
        .journal
        .read_since(0, None)
        .await?
        .into_iter()
        .filter(|e| e.session_key.as_deref() == Some(key.as_str()))
        .collect();
    let from = from_session(key);
    let lines = memory.dream.lines_from(&from).await?;
    Ok(ScopeForget {
        scope: memory.scope.clone(),
        session_messages,
        entries,
        lines,
        version: None,
        erased_versions: 0,
    })
}

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
use nanobot_session_store::{LAST_SUMMARY_KEY, SessionKey, StoredMessage};
use nanobot_turn::ScopeMemory;

use crate::{AssemblyError, Bot};

/// What forgetting a session finds in one scope (and, once applied, removed).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScopeForget {
    /// The scope.
    pub scope: ScopeKey,
    /// The session's messages, when the session is kept in this scope (with a message
    /// range: how many of them go).
    pub session_messages: Option<usize>,
    /// With a message range: the messages that go, `first..=last` (widened to whole turns).
    pub messages: Option<(usize, usize)>,
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
    /// Only these messages of it, `first..=last` as `nanobot sessions show` numbers them
    /// (`None`: all of it).
    pub range: Option<(usize, usize)>,
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
        let what = match self.range {
            Some((first, last)) => format!("messages {first}-{last} of session"),
            None => "session".to_owned(),
        };
        let mut out = format!("Forgetting {what} {} {verb}:", self.session);
        for scope in &self.scopes {
            let _ = write!(out, "\n\nIn {}:", scope.scope);
            match (scope.session_messages, scope.messages) {
                (Some(n), Some((first, last))) => {
                    let _ = write!(
                        out,
                        "\n- messages {first}-{last} of the session ({n}, whole turns), and the summary kept with it"
                    );
                }
                (Some(n), None) => {
                    let _ = write!(out, "\n- the session and its {n} messages");
                }
                (None, _) => {}
            }
            if !scope.entries.is_empty() {
                let cursors: Vec<String> = scope
                    .entries
                    .iter()
                    .map(|e| format!("#{}", e.cursor))
                    .collect();
                let _ = write!(
                    out,
                    "\n- {} journal entries made from it, wholly or in part ({})",
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

    /// What forgetting messages `first..=last` of session `key` would remove (see
    /// [`Bot::forget_messages`]; nothing is changed).
    pub async fn forget_messages_plan(
        &self,
        key: &SessionKey,
        (first, last): (usize, usize),
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let target = Target::messages(key, first, last)?;
        self.forget_target(&target, false, erase_history).await
    }

    /// Forgets messages `first..=last` of session `key` (as `nanobot sessions show`
    /// numbers them), widened to whole turns so no tool call loses its result: the
    /// messages and the session's kept summary, the journal entries made from any of them,
    /// the curated lines only those entries taught, their search rows; in every scope.
    pub async fn forget_messages(
        &self,
        key: &SessionKey,
        (first, last): (usize, usize),
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let target = Target::messages(key, first, last)?;
        self.forget_target(&target, true, erase_history).await
    }

    async fn forget_session(
        &self,
        key: &SessionKey,
        apply: bool,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let target = Target {
            key: key.clone(),
            range: None,
        };
        self.forget_target(&target, apply, erase_history).await
    }

    /// Forgets session `key` in `memory`'s scope alone (as [`Bot::forget`] does in every
    /// scope), for a caller that may only touch that scope (an MCP host's model). The
    /// memory versions keep their history. Nothing of it in the scope is `NotFound`.
    pub async fn forget_in_scope(
        &self,
        memory: &Arc<ScopeMemory>,
        key: &SessionKey,
    ) -> Result<ForgetReport, AssemblyError> {
        let target = Target {
            key: key.clone(),
            range: None,
        };
        self.forget_over(vec![memory.clone()], &target, true, false)
            .await
    }

    async fn forget_target(
        &self,
        target: &Target,
        apply: bool,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let mut memories = Vec::new();
        for scope in self.every_scope().await? {
            memories.push(self.memory(&scope).await?);
        }
        self.forget_over(memories, target, apply, erase_history)
            .await
    }

    /// [`Bot::forget_target`] over the scopes of `memories`.
    async fn forget_over(
        &self,
        memories: Vec<Arc<ScopeMemory>>,
        target: &Target,
        apply: bool,
        erase_history: bool,
    ) -> Result<ForgetReport, AssemblyError> {
        let key = &target.key;
        let mut scopes = Vec::new();
        for memory in memories {
            let mut found = if apply {
                self.forget_in(&memory, target).await?
            } else {
                find(&memory, target).await?
            };
            if apply && erase_history {
                // Last, and whatever else was found: a rerun finishes an interrupted erasure.
                let from = target.source_filter(&found.entries);
                found.erased_versions = memory.dream.erase_from_history(&from).await?;
            }
            if !found.is_empty() {
                scopes.push(found);
            }
        }
        if scopes.is_empty() {
            return Err(AssemblyError::NotFound {
                what: match target.range {
                    None => format!(
                        "Nothing of session {key} is in memory (no session, journal entry or memory line); nothing was removed. `nanobot sessions list` shows the sessions."
                    ),
                    Some((first, last)) => format!(
                        "Session {key} has no messages {first}-{last} and no journal entry made from them; nothing was removed. `nanobot sessions show {key}` numbers its messages."
                    ),
                },
            });
        }
        Ok(ForgetReport {
            session: key.clone(),
            range: target.range,
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
        target: &Target,
    ) -> Result<ScopeForget, AssemblyError> {
        let key = &target.key;
        let mut found = find(memory, target).await?;
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
        let result = self.forget_locked(memory, target, &mut found).await;
        turn.release().await;
        result.map(|()| found)
    }

    /// The steps of [`Bot::forget_in`], under the session's turn lock.
    async fn forget_locked(
        &self,
        memory: &Arc<ScopeMemory>,
        target: &Target,
        found: &mut ScopeForget,
    ) -> Result<(), AssemblyError> {
        let key = &target.key;
        let what = match found.messages {
            Some((first, last)) => format!("messages {first}-{last} of session {key}"),
            None => format!("session {key}"),
        };
        let from = target.source_filter(&found.entries);
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
        match found.messages {
            Some(range) => take_out_messages(memory, key, range).await?,
            None => {
                memory.sessions.delete(key).await?;
            }
        }
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

/// What is forgotten: a session, or some of its messages.
struct Target {
    key: SessionKey,
    /// `first..=last`, as asked.
    range: Option<(usize, usize)>,
}

impl Target {
    fn messages(key: &SessionKey, first: usize, last: usize) -> Result<Target, AssemblyError> {
        if first > last {
            return Err(AssemblyError::Refused {
                why: format!("messages {first}-{last}: the first comes after the last"),
            });
        }
        Ok(Target {
            key: key.clone(),
            range: Some((first, last)),
        })
    }

    /// Whether an entry is made from what is forgotten: from the session, and with a range
    /// from any of `messages` (`[start, end)` against `first..=last`).
    fn holds(&self, entry: &JournalEntry, messages: Option<(usize, usize)>) -> bool {
        if entry.session_key.as_deref() != Some(self.key.as_str()) {
            return false;
        }
        match (self.range, messages, entry.message_range) {
            (None, _, _) => true,
            (Some(_), Some((first, last)), Some((start, end))) => {
                start <= last as u64 && end > first as u64
            }
            _ => false,
        }
    }

    /// Whether a line's source is one of `entries` (those found to go), or, for a whole
    /// session, any entry made from it (also those already removed by an interrupted run).
    fn source_filter<'a>(
        &'a self,
        entries: &'a [JournalEntry],
    ) -> impl Fn(&Source) -> bool + Send + Sync + 'a {
        move |s: &Source| match self.range {
            None => s.session_key.as_deref() == Some(self.key.as_str()),
            Some(_) => entries.iter().any(|e| e.cursor == s.cursor),
        }
    }
}

/// `first..=last` widened to whole turns of `messages`: from the user message that began
/// the turn holding `first` to the message before the next user message after `last`.
fn whole_turns(
    messages: &[StoredMessage],
    (first, last): (usize, usize),
) -> Option<(usize, usize)> {
    if first >= messages.len() {
        return None;
    }
    let is_user = |m: &StoredMessage| m.role() == Some("user");
    let start = (0..=first)
        .rev()
        .find(|&i| is_user(&messages[i]))
        .unwrap_or(first);
    let last = last.min(messages.len() - 1);
    let end = (last + 1..messages.len())
        .find(|&i| is_user(&messages[i]))
        .map_or(messages.len() - 1, |next| next - 1);
    Some((start, end))
}

/// Takes messages `first..=last` out of session `key` (the pointer follows; the summary
/// kept with the session goes, as it may tell of them).
async fn take_out_messages(
    memory: &ScopeMemory,
    key: &SessionKey,
    (first, last): (usize, usize),
) -> Result<(), AssemblyError> {
    let store = memory.sessions.store();
    let Some(loaded) = store.load(key).await? else {
        return Ok(());
    };
    let mut session = loaded.session;
    let pointer = session.last_consolidated();
    let count = last + 1 - first;
    let kept: Vec<StoredMessage> = session
        .messages()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < first || *i > last)
        .map(|(_, m)| m.clone())
        .collect();
    let now = session.meta().updated_at;
    session.replace_messages(kept, now);
    let moved = match pointer {
        p if p > last => p - count,
        p if p > first => first,
        p => p,
    };
    session.set_last_consolidated(moved)?;
    session.metadata_mut().remove(LAST_SUMMARY_KEY);
    store.rewrite(&session, Some(loaded.revision)).await?;
    memory.sessions.invalidate(key);
    Ok(())
}

/// What of `target` is in `memory`'s scope.
async fn find(memory: &ScopeMemory, target: &Target) -> Result<ScopeForget, AssemblyError> {
    let key = &target.key;
    let loaded = memory.sessions.store().load(key).await?;
    let messages = match (target.range, &loaded) {
        (Some(range), Some(loaded)) => whole_turns(loaded.session.messages(), range),
        _ => None,
    };
    let session_messages = match (target.range, &loaded) {
        (None, Some(loaded)) => Some(loaded.session.messages().len()),
        (Some(_), Some(_)) => messages.map(|(first, last)| last + 1 - first),
        (_, None) => None,
    };
    let asked = messages.or(target.range);
    let entries: Vec<JournalEntry> = memory
        .journal
        .read_since(0, None)
        .await?
        .into_iter()
        .filter(|e| target.holds(e, asked))
        .collect();
    let lines = memory
        .dream
        .lines_from(&target.source_filter(&entries))
        .await?;
    Ok(ScopeForget {
        scope: memory.scope.clone(),
        session_messages,
        messages,
        entries,
        lines,
        version: None,
        erased_versions: 0,
    })
}

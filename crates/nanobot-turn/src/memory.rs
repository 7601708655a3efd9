//! One scope's memory: the stores a backend opens for it, and the policies over them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_context_builder::{ContextBuilder, CurrentMessage, JournalEntry, Summary, Turn};
use nanobot_dream::{Dream, DreamStores};
use nanobot_llm_port::Message;
use nanobot_memory_core::{
    AutoCompact, Consolidator, PromptBuilder, SessionSummary, replayed_messages,
};
use nanobot_memory_index::{MemoryIndex, SearchIndex, VectorIndex};
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_store::{
    ArchiveJournal, HistoryJournal, MemoryCommit, MemoryDocuments, MemoryLease, MemoryVersions,
    SessionArchive, TwoStepArchive,
};
use nanobot_prompt_inputs::{PromptFiles, WorkspaceSnapshot};
use nanobot_session_store::{Replayed, Session, SessionKey, SessionManager};

use crate::error::TurnError;

/// The stores of one scope, as a backend opens them. Every store serves this scope only:
/// none takes a scope argument, so nothing reached through them can belong to another.
#[derive(Clone)]
pub struct ScopeStores {
    /// The scope's sessions.
    pub sessions: Arc<SessionManager>,
    /// Its history journal and cursors.
    pub journal: Arc<dyn HistoryJournal>,
    /// Its documents (for a user's or a chat's scope, with the agent's `SOUL.md` and skills
    /// shared read-only: `nanobot_memory_store::ScopedDocuments`).
    pub documents: Arc<dyn MemoryDocuments>,
    /// What its prompts read: the agent's shared files and the scope's private ones.
    pub prompt_files: Arc<dyn PromptFiles>,
    /// Its memory versions (`Err`: why versioning is unavailable).
    pub versions: Result<Arc<dyn MemoryVersions>, Arc<nanobot_memory_store::MemoryError>>,
    /// Its Dream lease.
    pub lease: Arc<dyn MemoryLease>,
    /// Its archive commit: journal entries and a session's pointer move as one operation.
    pub archive: Arc<dyn SessionArchive>,
    /// Its memory commit: a Dream change applied as one unit under the lease.
    pub commit: Arc<dyn MemoryCommit>,
    /// Its search index (`None`: the backend keeps none, and `search_memory` is not
    /// offered).
    pub index: Option<Arc<dyn MemoryIndex>>,
    /// The vectors beside that index, for search's second lane (`None`: words only).
    pub vectors: Option<Arc<dyn VectorIndex>>,
}

impl ScopeStores {
    /// The stores of a backend without transactions (files, memory): archives are
    /// committed in two steps repaired by the journal's index ([`TwoStepArchive`]), Dream's
    /// changes step by step under a pending record ([`nanobot_memory_store::StepwiseCommit`], as [`DreamStores::stepwise`] builds it).
    pub fn stepwise(
        sessions: Arc<SessionManager>,
        journal: Arc<dyn ArchiveJournal>,
        documents: Arc<dyn MemoryDocuments>,
        prompt_files: Arc<dyn PromptFiles>,
        versions: Result<Arc<dyn MemoryVersions>, Arc<nanobot_memory_store::MemoryError>>,
        lease: Arc<dyn MemoryLease>,
    ) -> ScopeStores {
        let archive = Arc::new(TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        let dream = DreamStores::stepwise(journal, documents, versions, lease);
        ScopeStores {
            archive,
            commit: dream.commit,
            sessions,
            journal: dream.journal,
            documents: dream.documents,
            prompt_files,
            versions: dream.versions,
            lease: dream.lease,
            index: None,
            vectors: None,
        }
    }

    /// The stores Dream works on: this scope's journal, documents, versions, lease and
    /// memory commit.
    pub fn dream_stores(&self) -> DreamStores {
        DreamStores {
            journal: self.journal.clone(),
            documents: self.documents.clone(),
            versions: self.versions.clone(),
            lease: self.lease.clone(),
            commit: self.commit.clone(),
        }
    }

    /// The same stores with `index` as the scope's search index (words only).
    pub fn with_index(mut self, index: Arc<dyn MemoryIndex>) -> Self {
        self.index = Some(index);
        self
    }

    /// The same stores with `index` as the scope's search index and its vectors (an
    /// embedder configured in `SearchMemory` then adds the vector lane).
    pub fn with_search_index(mut self, index: Arc<dyn SearchIndex>) -> Self {
        self.index = Some(index.clone());
        self.vectors = Some(index);
        self
    }
}

/// Where scopes' memory is kept: files in a workspace, a database. Only the app picks one.
#[async_trait]
pub trait MemoryBackend: Send + Sync {
    /// The stores of `scope`, created when missing.
    async fn open(&self, scope: &ScopeKey) -> Result<ScopeStores, TurnError>;

    /// The scopes whose journal holds entries Dream has not read. This is bookkeeping only
    /// (cursor against cursor): a thousand idle scopes cost no model call and no journal
    /// read.
    async fn scopes_with_dream_work(&self) -> Result<Vec<ScopeKey>, TurnError>;

    /// The files every prompt of a turn without memory may read: the agent's `SOUL.md`,
    /// `AGENTS.md` and skills, never anyone's `USER.md` or `MEMORY.md`.
    fn shared_prompt_files(&self) -> Arc<dyn PromptFiles>;
}

/// One scope's memory and the policies that keep it: what a turn of this scope works on.
pub struct ScopeMemory {
    /// The scope.
    pub scope: ScopeKey,
    /// Its sessions.
    pub sessions: Arc<SessionManager>,
    /// Its journal.
    pub journal: Arc<dyn HistoryJournal>,
    /// Its documents.
    pub documents: Arc<dyn MemoryDocuments>,
    /// Token-pressure and idle archiving.
    pub consolidator: Arc<Consolidator>,
    /// Idle timers (`None` when idle compaction is off).
    pub autocompact: Option<Arc<AutoCompact>>,
    /// Its Dream.
    pub dream: Arc<Dream>,
    /// Its search index, if the backend keeps one.
    pub index: Option<Arc<dyn MemoryIndex>>,
    /// The vectors beside it, if the backend keeps them.
    pub vectors: Option<Arc<dyn VectorIndex>>,
    pub(crate) prompt_files: Arc<dyn PromptFiles>,
    pub(crate) prompt: Arc<ContextPrompt>,
}

impl std::fmt::Debug for ScopeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeMemory")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// How many sessions' prompt inputs the archive-request builder keeps.
const PROMPT_INPUTS_KEPT: usize = 256;

/// The workspace snapshot and journal entries a prompt was built from.
pub(crate) type PromptInputs = (WorkspaceSnapshot, Vec<JournalEntry>);

/// The session's archived-context summary, as the context builder takes it.
pub(crate) fn summary_of(session: &Session) -> Option<Summary> {
    SessionSummary::of(session).map(|s| Summary {
        text: s.text,
        last_active: s.last_active,
    })
}

/// The Consolidator's archive requests through the context builder, so they share the
/// conversation's prompt prefix (and its provider cache). The inputs are kept per session
/// of one scope: an archive request of one session never sees what another session's
/// prompt was built from. A session with none recorded (an idle compaction after a
/// restart) gets the scope's files as last loaded (at the latest when the scope was
/// opened) and no journal entries.
pub(crate) struct ContextPrompt {
    pub(crate) builder: Arc<ContextBuilder>,
    pub(crate) inputs: Mutex<HashMap<SessionKey, PromptInputs>>,
    /// The scope's files as last loaded.
    pub(crate) latest: Mutex<WorkspaceSnapshot>,
}

impl ContextPrompt {
    pub(crate) fn remember(&self, key: &SessionKey, inputs: PromptInputs) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = inputs.0.clone();
        let mut kept = self.inputs.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= PROMPT_INPUTS_KEPT && !kept.contains_key(key) {
            kept.clear();
        }
        kept.insert(key.clone(), inputs);
    }

    fn inputs_for(&self, key: &SessionKey) -> PromptInputs {
        let kept = self
            .inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned();
        kept.unwrap_or_else(|| {
            let latest = self
                .latest
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            (latest, Vec::new())
        })
    }
}

impl PromptBuilder for ContextPrompt {
    fn build(&self, session: &Session, history: &[Replayed], current: &str) -> Vec<Message> {
        let key = session.key();
        let (snapshot, entries) = self.inputs_for(key);
        let summary = summary_of(session);
        let history = replayed_messages(history);
        match self.builder.build(
            &snapshot,
            &Turn {
                channel: Some(key.channel()),
                session_key: Some(key.as_str()),
                summary: summary.as_ref(),
                history: &history,
                journal: &entries,
                current: Some(CurrentMessage::user(current)),
                ..Turn::default()
            },
        ) {
            Ok(built) => built.messages,
            Err(_) => {
                let mut messages = vec![Message::system(String::new())];
                messages.extend(history);
                nanobot_memory_core::append_user_text(&mut messages, current);
                messages
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use nanobot_context_builder::{BuilderConfig, Host};
    use nanobot_llm_port::Cl100kBase;

    fn snapshot(user: &str) -> WorkspaceSnapshot {
        WorkspaceSnapshot {
            user_md: Some(format!("# User\n\n{user}\n")),
            ..WorkspaceSnapshot::default()
        }
    }

    /// Issue 12.6: an archive request of one session is built from the inputs recorded
    /// for that session, never from another session's.
    #[test]
    fn archive_prompts_use_their_own_sessions_inputs() {
        let mut config = BuilderConfig::new(Host::this_build());
        config.tool_contract = false;
        let prompt = ContextPrompt {
            builder: Arc::new(ContextBuilder::new(config, Arc::new(Cl100kBase))),
            inputs: Mutex::new(HashMap::new()),
            latest: Mutex::new(WorkspaceSnapshot::default()),
        };
        let (a, b) = (
            SessionKey::new("telegram:a").unwrap(),
            SessionKey::new("telegram:b").unwrap(),
        );
        prompt.remember(&a, (snapshot("canary-of-a"), Vec::new()));
        let entry = JournalEntry {
            cursor: 7,
            timestamp: "2026-12-02 10:00".into(),
            content: "journal-canary-of-b".into(),
            session_key: Some("telegram:b".into()),
            message_range: None,
            message_digest: None,
            extra: Default::default(),
        };
        prompt.remember(&b, (snapshot("canary-of-b"), vec![entry]));
        let session_a = Session::new(a.clone(), chrono::NaiveDateTime::default());
        let built = prompt.build(&session_a, &[], "summarise");
        let system = built[0]
            .content()
            .map(nanobot_llm_port::Content::joined_text)
            .unwrap_or_default();
        assert!(system.contains("canary-of-a"), "{system}");
        assert!(!system.contains("canary-of-b"), "{system}");
        // A session with nothing recorded gets the scope's files as last loaded, never
        // another session's journal entries (the files are the scope's, the same for both).
        let c = Session::new(
            SessionKey::new("telegram:c").unwrap(),
            chrono::NaiveDateTime::default(),
        );
        let system = prompt.build(&c, &[], "summarise")[0]
            .content()
            .map(nanobot_llm_port::Content::joined_text)
            .unwrap_or_default();
        assert!(
            system.contains("canary-of-b"),
            "the files as last loaded: {system}"
        );
        assert!(!system.contains("journal-canary"), "{system}");
    }
}

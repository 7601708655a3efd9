//! Shared fixtures: a manager, a journal, a scripted model, fixed token counts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nanobot_llm_port::testing::{MockTokenCounter, ScriptedLlm};
use nanobot_llm_port::{LlmClient, Message, PromptEstimator, SystemClock, ToolDefinition};
use nanobot_memory_core::{ConsolidationConfig, Consolidator, PlainPrompt};
use nanobot_memory_store::{
    Compaction, HistoryJournal, InMemoryJournal, JournalEntry, MemoryError, NewEntry,
};
use nanobot_session_store::{
    InMemorySessionStore, SessionHandle, SessionKey, SessionManager, StoredMessage,
};
use serde_json::json;

/// Every message costs `tokens` in the per-message estimate (nanobot adds 4 of framing).
pub fn flat_counter(tokens: usize) -> Arc<MockTokenCounter> {
    let mut counter = MockTokenCounter::new();
    counter
        .expect_count()
        .returning(move |_| tokens.saturating_sub(4));
    counter
        .expect_encoding()
        .return_const(format!("flat-{tokens}"));
    Arc::new(counter)
}

/// Sizes a Consolidator's sessions from a script, the last value repeating; every other
/// request (frames, archive requests) counts nothing, so it always fits.
pub trait Scripted {
    fn scripted(self, values: &[usize]) -> Self;
}

impl Scripted for Consolidator {
    fn scripted(self, values: &[usize]) -> Self {
        let values = Mutex::new(values.iter().copied().collect::<VecDeque<usize>>());
        self.with_estimator(Arc::new(Nothing))
            .with_session_estimates(Arc::new(move |_session| {
                let mut values = values.lock().unwrap();
                if values.len() > 1 {
                    values.pop_front().unwrap()
                } else {
                    values.front().copied().unwrap_or(0)
                }
            }))
    }
}

/// Every request counts nothing.
struct Nothing;

impl PromptEstimator for Nothing {
    fn message(&self, _message: &Message) -> usize {
        0
    }

    fn prompt(&self, _messages: &[Message], _tools: &[ToolDefinition]) -> usize {
        0
    }
}

pub struct Fixture {
    pub sessions: Arc<SessionManager>,
    pub journal: Arc<InMemoryJournal>,
    pub key: SessionKey,
    pub handle: Arc<SessionHandle>,
}

impl Fixture {
    pub async fn new(messages: Vec<StoredMessage>) -> Fixture {
        let sessions = Arc::new(SessionManager::new(
            Arc::new(InMemorySessionStore::new()),
            Arc::new(SystemClock),
            Arc::new(nanobot_llm_port::Cl100kBase),
        ));
        let key = SessionKey::new("telegram:42").unwrap();
        let handle = sessions.get_or_create(&key).await.unwrap();
        for message in messages {
            handle.add_message(message);
        }
        sessions.save(&handle).await.unwrap();
        Fixture {
            sessions,
            journal: Arc::new(InMemoryJournal::default()),
            key,
            handle,
        }
    }

    pub fn consolidator(
        &self,
        config: ConsolidationConfig,
        llm: Arc<dyn LlmClient>,
        counter: Arc<MockTokenCounter>,
    ) -> Consolidator {
        {
            let journal = self.journal.clone();
            let sessions = self.sessions.clone();
            let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
                journal.clone(),
                sessions.store().clone(),
            ));
            Consolidator::new(
                config,
                llm,
                journal,
                archive,
                sessions,
                Arc::new(PlainPrompt {
                    system: "SYSTEM".into(),
                    ..PlainPrompt::default()
                }),
                counter,
            )
        }
        .unwrap()
    }

    pub async fn entries(&self) -> Vec<nanobot_memory_store::JournalEntry> {
        self.journal.read_since(0, None).await.unwrap()
    }
}

/// Window, no answer cap and no safety margin, as nanobot's loop tests set them.
pub fn config(window: usize, ratio: f64) -> ConsolidationConfig {
    {
        let mut value = ConsolidationConfig::new("archive-model", window, 0);
        value.safety_margin = 0;
        value.ratio = ratio;
        value
    }
}

pub fn u(text: &str) -> StoredMessage {
    StoredMessage::user(text)
}

pub fn a(text: &str) -> StoredMessage {
    StoredMessage::assistant(text)
}

/// `n` alternating user/assistant messages `u0 a0 u1 a1 ...`.
pub fn turns(n: usize) -> Vec<StoredMessage> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                u(&format!("user msg {}", i / 2))
            } else {
                a(&format!("assistant msg {}", i / 2))
            }
        })
        .collect()
}

pub fn summary_llm(count: usize) -> Arc<ScriptedLlm> {
    let mut llm = ScriptedLlm::new();
    for i in 0..count {
        llm = llm.then_text(format!("- [durable] fact {i}"));
    }
    Arc::new(llm)
}

pub fn tool_call(id: &str) -> StoredMessage {
    StoredMessage::assistant("").with(
        "tool_calls",
        json!([{"id": id, "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]),
    )
}

/// A journal whose disk is full: every append fails.
pub struct FullJournal;
#[async_trait]
impl HistoryJournal for FullJournal {
    async fn append(&self, _: &[NewEntry<'_>]) -> Result<Vec<u64>, MemoryError> {
        Err(MemoryError::backend("disk full"))
    }
    async fn read_since(&self, _: u64, _: Option<usize>) -> Result<Vec<JournalEntry>, MemoryError> {
        Ok(Vec::new())
    }
    async fn read_last(&self, _: usize) -> Result<Vec<JournalEntry>, MemoryError> {
        Ok(Vec::new())
    }
    async fn latest_cursor(&self) -> Result<u64, MemoryError> {
        Ok(0)
    }
    async fn dream_cursor(&self) -> Result<u64, MemoryError> {
        Ok(0)
    }
    async fn set_dream_cursor(&self, _: u64) -> Result<(), MemoryError> {
        Ok(())
    }
    async fn compact(&self, _: usize) -> Result<Compaction, MemoryError> {
        Ok(Compaction::default())
    }
    async fn remove_entries(&self, _: &[u64]) -> Result<usize, MemoryError> {
        Ok(0)
    }
    fn capabilities(&self) -> nanobot_memory_store::JournalCapabilities {
        nanobot_memory_store::JournalCapabilities::default()
    }
}

#[async_trait]
impl nanobot_memory_store::ArchiveJournal for FullJournal {
    async fn archives_from(
        &self,
        _: &str,
        _: u64,
    ) -> Result<Vec<nanobot_memory_store::ArchiveFound>, MemoryError> {
        Ok(Vec::new())
    }
    async fn append_archive(&self, _: &[NewEntry<'_>]) -> Result<(Vec<u64>, bool), MemoryError> {
        Err(MemoryError::backend("disk full"))
    }
}

//! A Dream over in-memory ports (or files), a scripted model and a settable clock.

use nanobot_memory_store::MemoryDocumentsExt as _;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, TimeZone, Utc};
use nanobot_dream::{Dream, DreamConfig};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Clock, Utf8Bytes};
use nanobot_memory_store::{
    Document, HistoryJournal, InMemoryDocuments, InMemoryJournal, InMemoryLease, InMemoryVersions,
    MemoryDocuments, MemoryVersions, NewEntry,
};
use serde_json::json;

/// A clock that moves only when told.
#[derive(Debug)]
pub(crate) struct TestClock(Mutex<DateTime<Utc>>);

impl TestClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(TestClock(Mutex::new(
            Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(),
        )))
    }
    pub(crate) fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
    fn sleep(&self, _duration: std::time::Duration) -> nanobot_llm_port::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

pub(crate) struct Fixture {
    pub(crate) dream: Dream,
    pub(crate) llm: Arc<ScriptedLlm>,
    pub(crate) journal: Arc<InMemoryJournal>,
    pub(crate) documents: Arc<InMemoryDocuments>,
    pub(crate) versions: Arc<InMemoryVersions>,
    pub(crate) clock: Arc<TestClock>,
}

pub(crate) fn config() -> DreamConfig {
    DreamConfig::new("test-model")
}

pub(crate) fn fixture(llm: ScriptedLlm) -> Fixture {
    fixture_with(llm, config())
}

pub(crate) fn fixture_with(llm: ScriptedLlm, config: DreamConfig) -> Fixture {
    let clock = TestClock::new();
    let llm = Arc::new(llm);
    let journal = Arc::new(InMemoryJournal::new(clock.clone()));
    let documents = Arc::new(InMemoryDocuments::new());
    let versions = Arc::new(InMemoryVersions::new());
    let dream = Dream::new(
        config,
        llm.clone(),
        nanobot_dream::DreamStores::stepwise(
            journal.clone(),
            documents.clone(),
            Ok(versions.clone() as Arc<dyn MemoryVersions>),
            Arc::new(InMemoryLease::new()),
        ),
        clock.clone(),
        Arc::new(Utf8Bytes),
    )
    .unwrap();
    Fixture {
        dream,
        llm,
        journal,
        documents,
        versions,
        clock,
    }
}

impl Fixture {
    pub(crate) async fn seed(&self) {
        self.documents
            .write_doc_any(Document::Soul, "# Soul\n\n- Helpful\n")
            .await
            .unwrap();
        self.documents
            .write_doc_any(Document::Memory, "# Memory\n\n- Project X active\n")
            .await
            .unwrap();
    }

    pub(crate) async fn append(&self, texts: &[&str]) -> Vec<u64> {
        let entries: Vec<NewEntry<'_>> = texts
            .iter()
            .map(|t| NewEntry::text(t).from_session("cli:ada"))
            .collect();
        self.journal.append(&entries).await.unwrap()
    }

    pub(crate) async fn doc(&self, document: Document) -> Option<String> {
        self.documents.read_text(document).await.unwrap()
    }

    pub(crate) async fn cursor(&self) -> u64 {
        self.journal.dream_cursor().await.unwrap()
    }

    /// The user message of request `n`.
    pub(crate) fn prompt(&self, n: usize) -> String {
        let request = &self.llm.requests()[n];
        match &request.messages[1] {
            nanobot_llm_port::Message::User(u) => u.content.as_text().unwrap().to_owned(),
            other => panic!("expected the user message, got {other:?}"),
        }
    }
}

/// A scripted model: each step is a list of (tool, arguments) calls, then a final text.
pub(crate) fn script(steps: &[&[(&str, serde_json::Value)]], final_text: &str) -> ScriptedLlm {
    let mut llm = ScriptedLlm::new();
    for (i, calls) in steps.iter().enumerate() {
        let calls = calls
            .iter()
            .enumerate()
            .map(|(j, (name, args))| {
                nanobot_llm_port::ToolCall::with_json(format!("call_{i}_{j}"), *name, args)
            })
            .collect();
        llm = llm.then(nanobot_llm_port::LlmResponse::tool_calls(calls));
    }
    llm.then_text(final_text)
}

pub(crate) fn edit(path: &str, old: &str, new: &str) -> (&'static str, serde_json::Value) {
    (
        "edit_file",
        json!({"path": path, "old_text": old, "new_text": new}),
    )
}

pub(crate) fn write(path: &str, content: &str) -> (&'static str, serde_json::Value) {
    ("write_file", json!({"path": path, "content": content}))
}

/// A test's writes: whatever is there is replaced (an operator's overwrite).
#[async_trait::async_trait]
pub(crate) trait WriteAny: MemoryDocuments {
    async fn write_doc_any(
        &self,
        document: Document,
        text: &str,
    ) -> Result<nanobot_memory_store::DocVersion, nanobot_memory_store::MemoryError> {
        self.write(document, text, nanobot_memory_store::Expected::Any)
            .await
    }
}

impl<T: MemoryDocuments + ?Sized> WriteAny for T {}

//! The indexing pass: feeds one scope's `MemoryIndex` from its journal, its memory files and
//! its sessions, starting where the last pass stopped (the index's marks), so a pass costs
//! what changed, and an index deleted or rebuilt after damage is simply fed again.

use std::fmt;
use std::sync::Arc;

use nanobot_llm_port::tokens::TokenCounter;
use nanobot_memory_index::{
    Chunking, GroupUpdate, IndexError, MemoryIndex, journal_chunk, memory_chunks, session_chunk,
    session_prefix,
};
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocuments, MemoryError};
use nanobot_session_store::{SessionError, SessionKey, SessionStore};
use serde_json::Value;

/// How many journal entries one step reads and indexes.
const JOURNAL_BATCH: usize = 500;

/// The mark holding the last journal cursor indexed.
const JOURNAL_MARK: &str = "journal";
/// A mark no document version or session revision equals: what it marks is fed again.
const FORCED_MARK: &str = "reindex";

/// Which sessions belong to the scope being indexed.
pub type SessionFilter = Arc<dyn Fn(&SessionKey) -> bool + Send + Sync>;

/// What one pass indexed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexPass {
    /// Journal entries indexed.
    pub entries: usize,
    /// Memory files indexed again (they had changed).
    pub documents: usize,
    /// Sessions with something new.
    pub sessions: usize,
    /// Session messages indexed.
    pub messages: usize,
    /// Whether the journal was indexed again from its start (its cursors had gone back:
    /// restored from an older copy).
    pub journal_restarted: bool,
}

/// Feeds one scope's index.
pub struct Indexer {
    index: Arc<dyn MemoryIndex>,
    journal: Arc<dyn HistoryJournal>,
    documents: Arc<dyn MemoryDocuments>,
    sessions: Option<(Arc<dyn SessionStore>, SessionFilter)>,
    counter: Arc<dyn TokenCounter>,
    chunking: Chunking,
}

impl Indexer {
    /// An indexer of `journal` and `documents` into `index`; sessions with
    /// [`Indexer::with_sessions`].
    pub fn new(
        index: Arc<dyn MemoryIndex>,
        journal: Arc<dyn HistoryJournal>,
        documents: Arc<dyn MemoryDocuments>,
        counter: Arc<dyn TokenCounter>,
    ) -> Self {
        Indexer {
            index,
            journal,
            documents,
            sessions: None,
            counter,
            chunking: Chunking::default(),
        }
    }

    /// Also indexes the sessions of `store` that `filter` says belong to the scope.
    pub fn with_sessions(mut self, store: Arc<dyn SessionStore>, filter: SessionFilter) -> Self {
        self.sessions = Some((store, filter));
        self
    }

    /// Everything that changed since the last pass.
    pub async fn sync(&self) -> Result<IndexPass, IndexingError> {
        let mut pass = IndexPass::default();
        self.sync_journal(&mut pass).await?;
        self.sync_documents(&mut pass).await?;
        self.sync_sessions(&mut pass).await?;
        Ok(pass)
    }

    /// Feeds the index everything again, in place: every mark is forced (the journal's to
    /// its start, each file's and session's to a value no version has), then a pass runs,
    /// which replaces each group whole. Nothing is emptied first, so a search meanwhile
    /// (another process) still finds what was indexed, and a pass running at the same time
    /// cannot make this one skip chunks that are gone: at worst it sets a mark back, and
    /// what it set it for is in the index. Chunks the marks do not know of stay; deleting
    /// the index (the files backend's side file) is the way to start from nothing.
    pub async fn reindex(&self) -> Result<IndexPass, IndexingError> {
        let forced: Vec<(String, Option<String>)> = self
            .index
            .marks()
            .await?
            .into_keys()
            .map(|name| {
                let value = if name == JOURNAL_MARK {
                    "0"
                } else {
                    FORCED_MARK
                };
                (name, Some(value.to_owned()))
            })
            .collect();
        self.index.set_marks(forced).await?;
        self.sync().await
    }

    /// The journal entries written since the last pass; call it after each append to keep
    /// entries searchable as soon as they are written.
    pub async fn sync_journal(&self, pass: &mut IndexPass) -> Result<(), IndexingError> {
        let marks = self.index.marks().await?;
        let mut cursor: u64 = marks
            .get(JOURNAL_MARK)
            .and_then(|mark| mark.parse().ok())
            .unwrap_or(0);
        let latest = self.journal.latest_cursor().await?;
        if latest < cursor {
            // A history restored from an older copy: its cursors will be given out again.
            self.index.remove_prefix("history#").await?;
            cursor = 0;
            pass.journal_restarted = true;
        }
        loop {
            let entries = self.journal.read_since(cursor, Some(JOURNAL_BATCH)).await?;
            let Some(last) = entries.last().map(|entry| entry.cursor) else {
                break;
            };
            let chunks = entries
                .iter()
                .map(|entry| journal_chunk(entry.cursor, &entry.timestamp, &entry.content))
                .collect();
            self.index.replace(GroupUpdate::from_chunks(chunks)).await?;
            self.index
                .set_marks(vec![(JOURNAL_MARK.into(), Some(last.to_string()))])
                .await?;
            pass.entries += entries.len();
            cursor = last;
            if entries.len() < JOURNAL_BATCH {
                break;
            }
        }
        Ok(())
    }

    /// The memory files that changed since the last pass (by their version), each replaced
    /// whole; call it after each write of a memory file.
    pub async fn sync_documents(&self, pass: &mut IndexPass) -> Result<(), IndexingError> {
        let marks = self.index.marks().await?;
        for document in Document::ALL {
            let name = file_name(document);
            let mark = format!("document:{name}");
            let text = self.documents.read(document).await?;
            let version = text.as_ref().map(|text| text.version.0.to_string());
            if marks.get(&mark) == version.as_ref() {
                continue;
            }
            let chunks = match &text {
                // A template nobody edited says nothing about this user.
                Some(text) if !document.is_unedited_template(&text.text) => {
                    memory_chunks(name, &text.text, None, self.counter.as_ref(), self.chunking)
                }
                _ => Vec::new(),
            };
            self.index
                .replace(vec![GroupUpdate {
                    group: name.to_owned(),
                    chunks,
                }])
                .await?;
            self.index.set_marks(vec![(mark, version)]).await?;
            pass.documents += 1;
        }
        Ok(())
    }

    /// The sessions that changed since the last pass: new messages indexed, a session
    /// rewritten (retention, `/new`) or deleted indexed again or removed. Call it before a
    /// search, so sessions are searchable at the next search at the latest.
    pub async fn sync_sessions(&self, pass: &mut IndexPass) -> Result<(), IndexingError> {
        let Some((store, filter)) = &self.sessions else {
            return Ok(());
        };
        let marks = self.index.marks().await?;
        let mut seen = Vec::new();
        for info in store.list().await? {
            if !filter(&info.key) {
                continue;
            }
            let key = info.key.as_str().to_owned();
            let mark_name = format!("session:{key}");
            seen.push(mark_name.clone());
            let Some(revision) = store.current_revision(&info.key).await? else {
                continue;
            };
            let stored = marks
                .get(&mark_name)
                .and_then(|mark| SessionMark::parse(mark));
            let now = format!("{}.{}", revision.epoch, revision.offset);
            if stored.as_ref().is_some_and(|mark| mark.revision == now) {
                continue;
            }
            let Some(loaded) = store.load(&info.key).await? else {
                continue;
            };
            let messages = loaded.session.messages();
            // The same epoch and no fewer messages: only appends happened since.
            let from = match &stored {
                Some(mark)
                    if mark.epoch() == revision.epoch.to_string()
                        && mark.count <= messages.len() =>
                {
                    mark.count
                }
                _ => {
                    self.index.remove_prefix(&session_prefix(&key)).await?;
                    0
                }
            };
            let chunks: Vec<_> = messages
                .iter()
                .enumerate()
                .skip(from)
                .filter_map(|(seq, message)| {
                    session_chunk(
                        &key,
                        seq,
                        message.role().unwrap_or_default(),
                        &message_text(message.content()),
                        message.get("timestamp").and_then(Value::as_str),
                    )
                })
                .collect();
            pass.messages += chunks.len();
            pass.sessions += 1;
            self.index.replace(GroupUpdate::from_chunks(chunks)).await?;
            let mark = SessionMark {
                revision: now,
                count: messages.len(),
            };
            self.index
                .set_marks(vec![(mark_name, Some(mark.to_string()))])
                .await?;
        }
        self.forget_deleted_sessions(&marks, &seen, filter, pass)
            .await
    }

    /// Removes the sessions deleted since the last pass (marked, not seen now) from the
    /// index.
    async fn forget_deleted_sessions(
        &self,
        marks: &std::collections::BTreeMap<String, String>,
        seen: &[String],
        filter: &SessionFilter,
        pass: &mut IndexPass,
    ) -> Result<(), IndexingError> {
        for (name, _) in marks.range("session:".to_owned()..) {
            if !name.starts_with("session:") {
                break;
            }
            if seen.contains(name) {
                continue;
            }
            let key = &name["session:".len()..];
            if !SessionKey::new(key).is_ok_and(|key| filter(&key)) {
                continue;
            }
            self.index.remove_prefix(&session_prefix(key)).await?;
            self.index.set_marks(vec![(name.clone(), None)]).await?;
            pass.sessions += 1;
        }
        Ok(())
    }
}

/// A session's mark: the revision indexed and how many messages it had then.
struct SessionMark {
    revision: String,
    count: usize,
}

impl SessionMark {
    fn parse(text: &str) -> Option<SessionMark> {
        let (revision, count) = text.rsplit_once(':')?;
        Some(SessionMark {
            revision: revision.to_owned(),
            count: count.parse().ok()?,
        })
    }

    fn epoch(&self) -> &str {
        self.revision.split('.').next().unwrap_or_default()
    }
}

impl fmt::Display for SessionMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.revision, self.count)
    }
}

/// A message's text: the string, or the text parts of a list joined by newlines.
fn message_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The file name a document's sources carry (`MEMORY.md#Travel`, not the path).
fn file_name(document: Document) -> &'static str {
    let path = document.path();
    path.rsplit('/').next().unwrap_or(path)
}

/// What stopped an indexing pass (nothing indexed so far is lost: the marks say where to
/// go on).
#[derive(Debug)]
#[non_exhaustive]
pub enum IndexingError {
    /// The index failed.
    Index(IndexError),
    /// The journal or the memory files could not be read.
    Memory(MemoryError),
    /// The sessions could not be read.
    Sessions(SessionError),
    /// The embedder failed (the vector lane).
    Embedding(nanobot_llm_port::LlmError),
}

impl IndexingError {
    /// Whether another pass can succeed without anyone doing anything.
    pub fn is_retryable(&self) -> bool {
        match self {
            IndexingError::Index(error) => error.is_retryable(),
            IndexingError::Memory(error) => error.is_retryable(),
            IndexingError::Sessions(error) => error.is_retryable(),
            IndexingError::Embedding(error) => error.is_retryable(),
        }
    }
}

impl fmt::Display for IndexingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexingError::Index(error) => write!(f, "indexing memory: {error}"),
            IndexingError::Memory(error) => write!(f, "indexing memory: {error}"),
            IndexingError::Sessions(error) => write!(f, "indexing sessions: {error}"),
            IndexingError::Embedding(error) => write!(f, "embedding: {error}"),
        }
    }
}

impl std::error::Error for IndexingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexingError::Index(error) => Some(error),
            IndexingError::Memory(error) => Some(error),
            IndexingError::Sessions(error) => Some(error),
            IndexingError::Embedding(error) => Some(error),
        }
    }
}

impl From<IndexError> for IndexingError {
    fn from(error: IndexError) -> Self {
        IndexingError::Index(error)
    }
}

impl From<MemoryError> for IndexingError {
    fn from(error: MemoryError) -> Self {
        IndexingError::Memory(error)
    }
}

impl From<SessionError> for IndexingError {
    fn from(error: SessionError) -> Self {
        IndexingError::Sessions(error)
    }
}

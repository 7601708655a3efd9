//! The indexing pass over in-memory stores: what changed is indexed, nothing twice, and a
//! rebuilt index is fed again.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_memory_index::{GroupUpdate, Hit, IndexError, IndexStats};

use nanobot_llm_port::SystemClock;
use nanobot_llm_port::tokens::Cl100kBase;
use nanobot_memory_index::{InMemoryIndex, MemoryIndex, SearchRequest};
use nanobot_memory_search::{IndexPass, Indexer};
use nanobot_memory_store::{
    Document, Expected, HistoryJournal, InMemoryDocuments, InMemoryJournal, MemoryDocuments,
    NewEntry,
};
use nanobot_session_store::{
    Append, InMemorySessionStore, Revision, SessionKey, SessionStore, StoredMessage,
};

struct Stores {
    index: Arc<InMemoryIndex>,
    journal: Arc<InMemoryJournal>,
    documents: Arc<InMemoryDocuments>,
    sessions: Arc<InMemorySessionStore>,
}

impl Stores {
    fn new() -> Self {
        Stores {
            index: Arc::new(InMemoryIndex::new()),
            journal: Arc::new(InMemoryJournal::new(Arc::new(SystemClock))),
            documents: Arc::new(InMemoryDocuments::new()),
            sessions: Arc::new(InMemorySessionStore::new()),
        }
    }

    fn indexer(&self, index: Arc<dyn MemoryIndex>) -> Indexer {
        Indexer::new(
            index,
            self.journal.clone(),
            self.documents.clone(),
            Arc::new(Cl100kBase::new()),
        )
        .with_sessions(
            self.sessions.clone(),
            Arc::new(|key: &SessionKey| key.as_str().starts_with("telegram:")),
        )
    }

    /// Appends `messages` to session `key` at `revision` (`None` creates it).
    async fn append(
        &self,
        key: &SessionKey,
        revision: Option<Revision>,
        messages: &[StoredMessage],
    ) -> Revision {
        self.sessions
            .append(
                key,
                revision,
                Append {
                    messages,
                    meta: None,
                },
            )
            .await
            .unwrap()
    }

    async fn sources(&self, query: &str) -> Vec<String> {
        self.index
            .search(&SearchRequest::new(query).limit(10))
            .await
            .unwrap()
            .into_iter()
            .map(|hit| hit.source)
            .collect()
    }
}

#[tokio::test]
async fn a_pass_indexes_what_changed_and_nothing_twice() {
    let stores = Stores::new();
    let indexer = stores.indexer(stores.index.clone());
    stores
        .journal
        .append(&[
            NewEntry::text("Booking reference QX7R2P for Zanzibar."),
            NewEntry::text("用户喜欢喝茶。"),
        ])
        .await
        .unwrap();
    stores
        .documents
        .write(
            Document::Memory,
            "# Memory\n\n## Work\n\n- Employee id EMP-55018.\n",
            Expected::Any,
        )
        .await
        .unwrap();
    let key = SessionKey::new("telegram:42").unwrap();
    let hello = [
        StoredMessage::user("My order is A7-99213-K."),
        StoredMessage::assistant("Noted."),
        StoredMessage::tool_result("call_1", "web_search", "A7-99213-K tool output"),
    ];
    let revision = stores.append(&key, None, &hello).await;
    // Another scope's session is not indexed here.
    let other = SessionKey::new("discord:7").unwrap();
    stores
        .append(&other, None, &[StoredMessage::user("A7-99213-K elsewhere")])
        .await;

    let pass = indexer.sync().await.unwrap();
    assert_eq!(pass.entries, 2);
    assert_eq!(pass.documents, 1, "the one memory file that exists");
    assert_eq!(
        (pass.sessions, pass.messages),
        (1, 2),
        "tool results are not indexed"
    );
    assert_eq!(stores.sources("QX7R2P").await, ["history#1"]);
    assert_eq!(stores.sources("喝茶").await, ["history#2"]);
    assert_eq!(stores.sources("EMP-55018").await, ["MEMORY.md#Work"]);
    assert_eq!(
        stores.sources("A7-99213-K").await,
        ["session:telegram:42#0"]
    );

    // Nothing changed: nothing to do.
    assert_eq!(indexer.sync().await.unwrap(), IndexPass::default());

    // An append and a new message: only they are indexed.
    stores
        .journal
        .append(&[NewEntry::text("Third entry KOALA-5150.")])
        .await
        .unwrap();
    stores
        .append(
            &key,
            Some(revision),
            &[StoredMessage::user("Gate code ZEBRA-7731.")],
        )
        .await;
    let pass = indexer.sync().await.unwrap();
    assert_eq!(
        (pass.entries, pass.documents, pass.sessions, pass.messages),
        (1, 0, 1, 1)
    );
    assert_eq!(
        stores.sources("ZEBRA-7731").await,
        ["session:telegram:42#3"]
    );
    assert_eq!(stores.sources("KOALA-5150").await, ["history#3"]);

    // A memory file rewritten: its old sections are gone.
    let current = stores
        .documents
        .read(Document::Memory)
        .await
        .unwrap()
        .unwrap();
    stores
        .documents
        .write(
            Document::Memory,
            "# Memory\n\n## Travel\n\n- Flight LX1612.\n",
            Expected::Version(current.version),
        )
        .await
        .unwrap();
    assert_eq!(indexer.sync().await.unwrap().documents, 1);
    assert!(stores.sources("EMP-55018").await.is_empty());
    assert_eq!(stores.sources("LX1612").await, ["MEMORY.md#Travel"]);

    // A session deleted: its messages are gone.
    stores.sessions.delete(&key).await.unwrap();
    assert_eq!(indexer.sync().await.unwrap().sessions, 1);
    assert!(stores.sources("A7-99213-K").await.is_empty());
    assert!(stores.sources("ZEBRA-7731").await.is_empty());
}

#[tokio::test]
async fn a_rewritten_session_is_indexed_again_from_its_start() {
    let stores = Stores::new();
    let indexer = stores.indexer(stores.index.clone());
    let key = SessionKey::new("telegram:42").unwrap();
    let revision = stores
        .append(
            &key,
            None,
            &[
                StoredMessage::user("old words VIOLIN-1"),
                StoredMessage::assistant("ok"),
            ],
        )
        .await;
    indexer.sync().await.unwrap();
    let mut session = stores.sessions.load(&key).await.unwrap().unwrap().session;
    let now = chrono::Local::now().naive_local();
    session.replace_messages(vec![StoredMessage::user("new words CELLO-2")], now);
    stores
        .sessions
        .rewrite(&session, Some(revision))
        .await
        .unwrap();
    let pass = indexer.sync().await.unwrap();
    assert_eq!((pass.sessions, pass.messages), (1, 1));
    assert!(stores.sources("VIOLIN-1").await.is_empty());
    assert_eq!(stores.sources("CELLO-2").await, ["session:telegram:42#0"]);
}

#[tokio::test]
async fn a_fresh_index_is_fed_everything_again() {
    let stores = Stores::new();
    stores
        .journal
        .append(&[NewEntry::text("Entry KOALA-5150.")])
        .await
        .unwrap();
    stores.indexer(stores.index.clone()).sync().await.unwrap();
    // The index was deleted or rebuilt after damage: an empty one, with no marks.
    let fresh = Arc::new(InMemoryIndex::new());
    let pass = stores.indexer(fresh.clone()).sync().await.unwrap();
    assert_eq!(pass.entries, 1);
    let hits = fresh
        .search(&SearchRequest::new("KOALA-5150"))
        .await
        .unwrap();
    assert_eq!(hits[0].source, "history#1");
}

/// `reindex` feeds everything again in place: the journal and the files are never emptied
/// (a search meanwhile finds them), and a pass of another process that sets its marks in
/// the middle of a reindex leaves nothing unindexed.
#[tokio::test]
async fn a_reindex_feeds_everything_in_place_and_a_pass_meanwhile_loses_nothing() {
    let stores = Stores::new();
    stores
        .journal
        .append(&[
            NewEntry::text("Entry KOALA-5150."),
            NewEntry::text("Entry ZEBRA-7."),
        ])
        .await
        .unwrap();
    let key = SessionKey::new("telegram:42").unwrap();
    stores
        .append(&key, None, &[StoredMessage::user("My locker is 4417-B.")])
        .await;
    stores.indexer(stores.index.clone()).sync().await.unwrap();
    let before = stores.index.stats().await.unwrap();

    // Another process's pass read its marks before the reindex started and sets them
    // (from its own reading) while the reindex runs.
    let stale_marks = stores.index.marks().await.unwrap();
    let watched = Arc::new(Watched {
        index: stores.index.clone(),
        fewest: std::sync::Mutex::new(usize::MAX),
    });
    let forced = stores.indexer(watched.clone()).reindex().await.unwrap();
    // Only the session, indexed again from its start, was ever missing (its one message).
    assert_eq!(*watched.fewest.lock().unwrap(), before.chunks - 1);
    let indexer = stores.indexer(stores.index.clone());
    assert_eq!(
        (forced.entries, forced.sessions, forced.messages),
        (2, 1, 1)
    );
    stores
        .index
        .set_marks(stale_marks.into_iter().map(|(k, v)| (k, Some(v))).collect())
        .await
        .unwrap();
    let again = indexer.reindex().await.unwrap();
    assert_eq!(again.entries, 2);
    assert_eq!(stores.index.stats().await.unwrap(), before);
    for (query, source) in [
        ("KOALA-5150", "history#1"),
        ("ZEBRA-7", "history#2"),
        ("4417-B", "session:telegram:42#0"),
    ] {
        assert!(
            stores.sources(query).await.contains(&source.to_owned()),
            "{query}"
        );
    }
    // A pass after it has nothing left to do.
    let after = indexer.sync().await.unwrap();
    assert_eq!((after.entries, after.messages), (0, 0));
}

/// An index that records the fewest chunks it held after any change.
struct Watched {
    index: Arc<InMemoryIndex>,
    fewest: std::sync::Mutex<usize>,
}

impl Watched {
    async fn note(&self) {
        let chunks = self.index.stats().await.unwrap().chunks;
        let mut fewest = self.fewest.lock().unwrap();
        *fewest = (*fewest).min(chunks);
    }
}

#[async_trait]
impl MemoryIndex for Watched {
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError> {
        self.index.replace(updates).await?;
        self.note().await;
        Ok(())
    }
    async fn purge(&self) -> Result<(), IndexError> {
        self.index.purge().await
    }
    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError> {
        self.index.remove_prefix(prefix).await?;
        self.note().await;
        Ok(())
    }
    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError> {
        self.index.search(request).await
    }
    async fn stats(&self) -> Result<IndexStats, IndexError> {
        self.index.stats().await
    }
    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError> {
        self.index.marks().await
    }
    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError> {
        self.index.set_marks(marks).await
    }
}

//! The search conformance suite every `MemoryIndex` backend runs, over the labelled corpus
//! in `fixtures/search` (300 journal entries, 3 memory files, 50 sessions, 60 queries),
//! embedded in the crate at build time so the suite runs from a registry package. [`run`] fails with a message naming the check and the query.
//!
//! What it holds a backend to:
//! - lexical recall@5 at least 0.95 on exact tokens and 0.9 on Chinese queries (paraphrase
//!   recall is reported, not required: that is the vector lane's job);
//! - the same hits for the same request, every time;
//! - zero hits from another scope's index;
//! - a write is searchable when `replace` returns, and gone when a removal returns;
//! - the request's sources, time bound and limit are kept; bad requests are refused;
//! - marks are kept per scope, changed and removed;
//! - snippets of at most 400 characters, one hit per source;
//! - other forms of a word found ("went" for "go", "painted" for "painting"), and a name
//!   held by most chunks still deciding whose fact comes first (issue 31);
//! - the words lane's scores of the in-memory index on the same chunks.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use nanobot_llm_port::tokens::Cl100kBase;
use serde::Deserialize;
use serde_json::Value;

use crate::chunk::{
    Chunk, Chunking, SourceKind, journal_chunk, memory_chunks, parse_timestamp, session_chunk,
    session_prefix,
};
use crate::port::{GroupUpdate, Hit, IndexError, MAX_SNIPPET_CHARS, MemoryIndex, SearchRequest};

mod checks;
mod vectors;

pub use checks::common_query_window;
use checks::*;
pub use vectors::{vector_copies_follow_other_handles, vector_suite};

/// The three kinds of labelled query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryKind {
    /// Ids, error codes, names: words that occur once in the corpus.
    Exact,
    /// The answer in other words: nothing lexical to find.
    Paraphrase,
    /// Chinese, two to four characters.
    Cjk,
}

/// A query and the sources that answer it.
#[derive(Debug, Clone, Deserialize)]
pub struct LabelledQuery {
    /// `exact-01` and so on.
    pub id: String,
    /// Which kind.
    pub kind: QueryKind,
    /// The query text.
    pub query: String,
    /// Sources any of which answers it.
    pub relevant: Vec<String>,
}

/// The corpus, cut into chunks as a backend would index it.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Every chunk, by group.
    pub updates: Vec<GroupUpdate>,
    /// The 60 labelled queries.
    pub queries: Vec<LabelledQuery>,
}

/// The corpus's files, by name relative to its root (written by `build.rs`).
const EMBEDDED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/corpus.rs"));

impl Fixture {
    /// The labelled corpus this crate carries (`fixtures/search`).
    pub fn embedded() -> Result<Fixture, String> {
        let read = |name: &str| {
            EMBEDDED
                .iter()
                .find(|(file, _)| *file == name)
                .map(|(_, text)| (*text).to_owned())
                .ok_or_else(|| format!("{name}: not in the embedded corpus"))
        };
        let sessions = EMBEDDED
            .iter()
            .map(|(file, _)| *file)
            .filter(|file| file.starts_with("sessions/") && file.ends_with(".jsonl"))
            .map(str::to_owned)
            .collect();
        Fixture::from_files(read, sessions)
    }

    /// Reads a corpus of the same shape from `dir` (`workspace/`, `sessions/*.jsonl`,
    /// `queries.json`).
    pub fn load(dir: &Path) -> Result<Fixture, String> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        Fixture::from_files(read, session_files(dir)?)
    }

    /// The chunks of a corpus in `dir` whose questions are not of this suite's kinds: its
    /// sessions (`sessions/*.jsonl`), and its workspace's journal and memory files where
    /// `workspace/` has them (each is optional).
    pub fn load_chunks(dir: &Path) -> Result<Vec<GroupUpdate>, String> {
        let read = |name: &str| {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", path.display())),
            }
        };
        Ok(GroupUpdate::from_chunks(corpus_chunks(
            read,
            session_files(dir)?,
        )?))
    }

    /// Cuts the corpus into chunks as a backend would index it; `read` gives a file's text
    /// by its name relative to the corpus root.
    fn from_files(
        read: impl Fn(&str) -> Result<String, String>,
        sessions: Vec<String>,
    ) -> Result<Fixture, String> {
        let chunks = corpus_chunks(|name| read(name).map(Some), sessions)?;
        let queries: Vec<LabelledQuery> = serde_json::from_str(&read("queries.json")?)
            .map_err(|e| format!("queries.json: {e}"))?;
        Ok(Fixture {
            updates: GroupUpdate::from_chunks(chunks),
            queries,
        })
    }
}

/// The session files of a corpus folder, as `sessions/<name>.jsonl`.
fn session_files(dir: &Path) -> Result<Vec<String>, String> {
    let sessions_dir = dir.join("sessions");
    Ok(std::fs::read_dir(&sessions_dir)
        .map_err(|e| format!("{}: {e}", sessions_dir.display()))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".jsonl"))
        .map(|name| format!("sessions/{name}"))
        .collect())
}

/// The chunks of a corpus: its journal, memory files and sessions (in name order); `read`
/// answers `None` for a file the corpus does not have.
fn corpus_chunks(
    read: impl Fn(&str) -> Result<Option<String>, String>,
    mut sessions: Vec<String>,
) -> Result<Vec<Chunk>, String> {
    let mut chunks = match read("workspace/memory/history.jsonl")? {
        Some(history) => journal_chunks(&history)?,
        None => Vec::new(),
    };
    let counter = Cl100kBase::new();
    for (name, file) in [
        ("MEMORY.md", "workspace/memory/MEMORY.md"),
        ("USER.md", "workspace/USER.md"),
        ("SOUL.md", "workspace/SOUL.md"),
    ] {
        let Some(text) = read(file)? else { continue };
        chunks.extend(memory_chunks(
            name,
            &text,
            parse_timestamp("2026-11-30 00:00"),
            &counter,
            Chunking::default(),
        ));
    }
    sessions.sort();
    for name in sessions {
        let text = read(&name)?.ok_or_else(|| format!("{name}: missing"))?;
        chunks.extend(session_chunks(&name, &text)?);
    }
    Ok(chunks)
}

/// One chunk per journal entry of a `history.jsonl`.
fn journal_chunks(history: &str) -> Result<Vec<Chunk>, String> {
    let mut chunks = Vec::new();
    for (number, line) in history.lines().enumerate() {
        let entry: Value = serde_json::from_str(line)
            .map_err(|e| format!("history.jsonl line {}: {e}", number + 1))?;
        let cursor = entry["cursor"]
            .as_u64()
            .ok_or_else(|| format!("history.jsonl line {}: no cursor", number + 1))?;
        chunks.push(journal_chunk(
            cursor,
            entry["timestamp"].as_str().unwrap_or_default(),
            entry["content"].as_str().unwrap_or_default(),
        ));
    }
    Ok(chunks)
}

/// The chunks of one session file in nanobot-ai's line format (metadata, then messages).
fn session_chunks(name: &str, text: &str) -> Result<Vec<Chunk>, String> {
    let mut lines = text.lines();
    let meta: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .map_err(|e| format!("{name}: metadata: {e}"))?;
    let key = meta["key"]
        .as_str()
        .ok_or_else(|| format!("{name}: no key"))?
        .to_owned();
    let mut chunks = Vec::new();
    for (seq, line) in lines.enumerate() {
        let message: Value =
            serde_json::from_str(line).map_err(|e| format!("{name}: message {seq}: {e}"))?;
        chunks.extend(session_chunk(
            &key,
            seq,
            message["role"].as_str().unwrap_or_default(),
            message["content"].as_str().unwrap_or_default(),
            message["timestamp"].as_str(),
        ));
    }
    Ok(chunks)
}

/// Recall@k of one kind of query.
#[derive(Debug, Clone, PartialEq)]
pub struct KindRecall {
    /// Queries of this kind.
    pub queries: usize,
    /// Of them, those with a relevant source in the top k.
    pub found: usize,
    /// The ids of the others.
    pub missed: Vec<String>,
}

impl KindRecall {
    /// found / queries.
    pub fn recall(&self) -> f64 {
        self.found as f64 / self.queries.max(1) as f64
    }
}

/// Recall@k of `queries` against `index`, per kind.
pub async fn recall(
    index: &dyn MemoryIndex,
    queries: &[LabelledQuery],
    k: usize,
) -> Result<BTreeMap<QueryKind, KindRecall>, IndexError> {
    let mut out: BTreeMap<QueryKind, KindRecall> = BTreeMap::new();
    for query in queries {
        let hits = index
            .search(&SearchRequest::new(&query.query).limit(k))
            .await?;
        let entry = out.entry(query.kind).or_insert(KindRecall {
            queries: 0,
            found: 0,
            missed: Vec::new(),
        });
        entry.queries += 1;
        if hits.iter().any(|hit| query.relevant.contains(&hit.source)) {
            entry.found += 1;
        } else {
            entry.missed.push(query.id.clone());
        }
    }
    Ok(out)
}

/// What a suite run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Recall@5 per kind of query.
    pub recall: BTreeMap<QueryKind, KindRecall>,
    /// Chunks the fixture made.
    pub chunks: usize,
}

/// Runs every check against indexes from `open`, which is called once per scope (`"a"`,
/// `"b"`) and must return a new, empty index each time.
pub async fn run<F, Fut>(open: F) -> Result<Report, String>
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Arc<dyn MemoryIndex>>,
{
    let fixture = Fixture::embedded()?;
    let a = open("a").await;
    a.replace(fixture.updates.clone())
        .await
        .map_err(|e| fail("loading the fixture", e))?;
    let chunks: usize = fixture.updates.iter().map(|u| u.chunks.len()).sum();
    let stats = a.stats().await.map_err(|e| fail("stats", e))?;
    if stats.chunks != chunks {
        return Err(format!(
            "stats: {} chunks after loading {chunks}",
            stats.chunks
        ));
    }

    // Recall.
    let recall = recall(a.as_ref(), &fixture.queries, 5)
        .await
        .map_err(|e| fail("recall", e))?;
    for (kind, floor) in [(QueryKind::Exact, 0.95), (QueryKind::Cjk, 0.9)] {
        let got = recall.get(&kind).map_or(0.0, KindRecall::recall);
        if got < floor {
            return Err(format!(
                "recall@5 of {kind:?} queries is {got:.2}, below {floor}: missed {:?}",
                recall.get(&kind).map(|r| &r.missed)
            ));
        }
    }

    stable_hits(a.as_ref(), &fixture).await?;
    let b = open("b").await;
    isolation(a.as_ref(), b.as_ref(), &fixture).await?;
    freshness(a.as_ref()).await?;
    memory_rewrite(a.as_ref()).await?;
    cleared_session(a.as_ref(), &fixture).await?;
    marks(a.as_ref(), b.as_ref()).await?;
    request_bounds(a.as_ref()).await?;
    word_forms_and_names(b.as_ref()).await?;
    same_scores_as_in_memory(b.as_ref()).await?;
    Ok(Report { recall, chunks })
}

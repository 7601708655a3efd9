//! The search conformance suite every `MemoryIndex` backend runs, over the labelled corpus
//! in `tests/fixtures/search` (300 journal entries, 3 memory files, 50 sessions, 60
//! queries). [`run`] fails with a message naming the check and the query.
//!
//! What it holds a backend to:
//! - lexical recall@5 at least 0.95 on exact tokens and 0.9 on Chinese queries (paraphrase
//!   recall is reported, not required: that is the vector lane's job);
//! - the same hits for the same request, every time;
//! - zero hits from another scope's index;
//! - a write is searchable when `replace` returns, and gone when a removal returns;
//! - the request's sources, time bound and limit are kept; bad requests are refused;
//! - marks are kept per scope, changed and removed;
//! - snippets of at most 400 characters, one hit per source.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nanobot_llm_port::tokens::Cl100kBase;
use serde::Deserialize;
use serde_json::Value;

use crate::chunk::{
    Chunk, Chunking, SourceKind, journal_chunk, memory_chunks, parse_timestamp, session_chunk,
    session_prefix,
};
use crate::port::{GroupUpdate, Hit, IndexError, MAX_SNIPPET_CHARS, MemoryIndex, SearchRequest};

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

impl Fixture {
    /// Where the corpus is in this repository.
    pub fn default_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/search")
    }

    /// Reads the corpus in `dir`.
    pub fn load(dir: &Path) -> Result<Fixture, String> {
        let read = |path: PathBuf| {
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let workspace = dir.join("workspace");
        let mut chunks: Vec<Chunk> = Vec::new();
        let history = read(workspace.join("memory/history.jsonl"))?;
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
        let counter = Cl100kBase::new();
        for (name, path) in [
            ("MEMORY.md", workspace.join("memory/MEMORY.md")),
            ("USER.md", workspace.join("USER.md")),
            ("SOUL.md", workspace.join("SOUL.md")),
        ] {
            let text = read(path)?;
            chunks.extend(memory_chunks(
                name,
                &text,
                parse_timestamp("2026-11-30 00:00"),
                &counter,
                Chunking::default(),
            ));
        }
        let mut session_files: Vec<PathBuf> = std::fs::read_dir(dir.join("sessions"))
            .map_err(|e| format!("{}: {e}", dir.join("sessions").display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
            .collect();
        session_files.sort();
        for path in session_files {
            let text = read(path.clone())?;
            let mut lines = text.lines();
            let meta: Value = serde_json::from_str(lines.next().unwrap_or_default())
                .map_err(|e| format!("{}: metadata: {e}", path.display()))?;
            let key = meta["key"]
                .as_str()
                .ok_or_else(|| format!("{}: no key", path.display()))?
                .to_owned();
            for (seq, line) in lines.enumerate() {
                let message: Value = serde_json::from_str(line)
                    .map_err(|e| format!("{}: message {seq}: {e}", path.display()))?;
                chunks.extend(session_chunk(
                    &key,
                    seq,
                    message["role"].as_str().unwrap_or_default(),
                    message["content"].as_str().unwrap_or_default(),
                    message["timestamp"].as_str(),
                ));
            }
        }
        let queries: Vec<LabelledQuery> = serde_json::from_str(&read(dir.join("queries.json"))?)
            .map_err(|e| format!("queries.json: {e}"))?;
        Ok(Fixture {
            updates: GroupUpdate::from_chunks(chunks),
            queries,
        })
    }
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
    let fixture = Fixture::load(&Fixture::default_dir())?;
    let fail = |check: &str, e: IndexError| format!("{check}: {e}");
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

    // The same hits every time, one per source, snippets within bounds.
    for query in &fixture.queries {
        let request = SearchRequest::new(&query.query).limit(10);
        let first = a.search(&request).await.map_err(|e| fail(&query.id, e))?;
        let second = a.search(&request).await.map_err(|e| fail(&query.id, e))?;
        if first != second {
            return Err(format!("{}: two searches gave different hits", query.id));
        }
        check_hits(&query.id, &first)?;
    }

    // Isolation: scope b holds its own few chunks; nothing crosses either way.
    let b = open("b").await;
    let planted = [
        "Scope b only: the vault code is ZEBRA-7731.",
        "Scope b only: 秘密的会议在周四。",
        "Scope b only: INC-20931 is a different incident here, about the printer.",
    ];
    b.replace(
        planted
            .iter()
            .enumerate()
            .map(|(i, text)| GroupUpdate {
                group: format!("history#{}", 9001 + i),
                chunks: vec![journal_chunk(9001 + i as u64, "2026-11-01 10:00", text)],
            })
            .collect(),
    )
    .await
    .map_err(|e| fail("loading scope b", e))?;
    for query in ["ZEBRA-7731", "秘密", "会议", "vault code"] {
        let hits = a
            .search(&SearchRequest::new(query).limit(10))
            .await
            .map_err(|e| fail("isolation", e))?;
        if let Some(hit) = hits.iter().find(|hit| hit.snippet.contains("Scope b only")) {
            return Err(format!(
                "isolation: scope a found scope b's {} for {query:?}",
                hit.source
            ));
        }
    }
    for query in &fixture.queries {
        let hits = b
            .search(&SearchRequest::new(&query.query).limit(10))
            .await
            .map_err(|e| fail("isolation", e))?;
        if let Some(hit) = hits
            .iter()
            .find(|hit| !hit.snippet.contains("Scope b only"))
        {
            return Err(format!(
                "isolation: scope b found scope a's {} for {}",
                hit.source, query.id
            ));
        }
    }

    // Freshness: searchable when replace returns, gone when the removal returns.
    let fresh = journal_chunk(
        301,
        "2026-11-30 12:00",
        "The courier code for the new locker is KOALA-5150.",
    );
    a.replace(vec![GroupUpdate {
        group: fresh.group.clone(),
        chunks: vec![fresh],
    }])
    .await
    .map_err(|e| fail("freshness", e))?;
    let found = a
        .search(&SearchRequest::new("KOALA-5150"))
        .await
        .map_err(|e| fail("freshness", e))?;
    if found.first().map(|hit| hit.source.as_str()) != Some("history#301") {
        return Err(format!(
            "freshness: a new entry is not the first hit: {found:?}"
        ));
    }
    a.replace(vec![GroupUpdate::remove("history#301")])
        .await
        .map_err(|e| fail("freshness", e))?;
    if !a
        .search(&SearchRequest::new("KOALA-5150"))
        .await
        .map_err(|e| fail("freshness", e))?
        .is_empty()
    {
        return Err("freshness: a removed entry is still found".into());
    }

    // A memory file replaced as a whole: its old sections are gone.
    let counter = Cl100kBase::new();
    let rewritten = memory_chunks(
        "MEMORY.md",
        "# Long-term memory\n\n## Travel\n\n- The Zanzibar trip was cancelled.\n",
        parse_timestamp("2026-12-01 09:00"),
        &counter,
        Chunking::default(),
    );
    a.replace(vec![GroupUpdate {
        group: "MEMORY.md".into(),
        chunks: rewritten,
    }])
    .await
    .map_err(|e| fail("replacing a file", e))?;
    let hits = a
        .search(&SearchRequest::new("EMP-55018"))
        .await
        .map_err(|e| fail("replacing a file", e))?;
    if hits.iter().any(|hit| hit.source.starts_with("MEMORY.md#")) {
        return Err("replacing a file: a section of the old MEMORY.md is still found".into());
    }
    let hits = a
        .search(&SearchRequest::new("Zanzibar cancelled"))
        .await
        .map_err(|e| fail("replacing a file", e))?;
    if hits.first().map(|hit| hit.source.as_str()) != Some("MEMORY.md#Travel") {
        return Err(format!(
            "replacing a file: the new section is not the first hit: {hits:?}"
        ));
    }

    // A cleared session: every message of it is gone, other sessions stay.
    let target = fixture
        .queries
        .iter()
        .find(|q| q.relevant.iter().any(|s| s.starts_with("session:")))
        .ok_or("the fixture has no session query")?;
    let source = &target.relevant[0];
    let key = source
        .trim_start_matches("session:")
        .rsplit_once('#')
        .map(|(key, _)| key)
        .unwrap_or_default();
    a.remove_prefix(&session_prefix(key))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    let hits = a
        .search(&SearchRequest::new(&target.query).limit(10))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    if hits.iter().any(|hit| hit.source == *source) {
        return Err(format!(
            "clearing a session: {source} is still found after its session was removed"
        ));
    }
    let other = fixture
        .queries
        .iter()
        .find(|q| {
            q.kind == QueryKind::Exact
                && q.relevant
                    .iter()
                    .any(|s| s.starts_with("session:") && !s.starts_with(&session_prefix(key)))
        })
        .ok_or("the fixture has one session query only")?;
    let hits = a
        .search(&SearchRequest::new(&other.query))
        .await
        .map_err(|e| fail("clearing a session", e))?;
    if !hits.iter().any(|hit| other.relevant.contains(&hit.source)) {
        return Err(format!(
            "clearing a session removed another session's message ({})",
            other.id
        ));
    }

    // Marks: set, read back, changed, removed; each scope has its own.
    a.set_marks(vec![
        ("journal".into(), Some("300".into())),
        ("session:telegram:1000".into(), Some("1.4:9".into())),
    ])
    .await
    .map_err(|e| fail("marks", e))?;
    a.set_marks(vec![
        ("journal".into(), Some("301".into())),
        ("session:telegram:1000".into(), None),
    ])
    .await
    .map_err(|e| fail("marks", e))?;
    let marks = a.marks().await.map_err(|e| fail("marks", e))?;
    if marks.len() != 1 || marks.get("journal").map(String::as_str) != Some("301") {
        return Err(format!("marks: expected only journal = 301, got {marks:?}"));
    }
    if !b.marks().await.map_err(|e| fail("marks", e))?.is_empty() {
        return Err("marks: scope b sees scope a's marks".into());
    }

    // The request's bounds.
    let only_history = a
        .search(
            &SearchRequest::new("user")
                .limit(10)
                .sources([SourceKind::History]),
        )
        .await
        .map_err(|e| fail("sources", e))?;
    if only_history.is_empty() || only_history.iter().any(|h| h.kind != SourceKind::History) {
        return Err(format!(
            "sources: asked for history only, got {only_history:?}"
        ));
    }
    let since = parse_timestamp("2026-10-01 00:00").ok_or("a timestamp")?;
    let recent = a
        .search(&SearchRequest::new("user").limit(10).since(since))
        .await
        .map_err(|e| fail("since", e))?;
    if recent.is_empty() || recent.iter().any(|h| h.at.is_none_or(|at| at < since)) {
        return Err(format!(
            "since: asked for hits after {since}, got {recent:?}"
        ));
    }
    for (label, request) in [
        ("limit 0", SearchRequest::new("user").limit(0)),
        ("limit 11", SearchRequest::new("user").limit(11)),
        ("no words", SearchRequest::new("?! -- …")),
        ("no sources", SearchRequest::new("user").sources([])),
    ] {
        match a.search(&request).await {
            Err(IndexError::InvalidRequest { .. }) => {}
            other => return Err(format!("{label}: not refused as invalid: {other:?}")),
        }
    }
    Ok(Report { recall, chunks })
}

fn check_hits(id: &str, hits: &[Hit]) -> Result<(), String> {
    for (i, hit) in hits.iter().enumerate() {
        if hit.snippet.chars().count() > MAX_SNIPPET_CHARS {
            return Err(format!(
                "{id}: a snippet of {} characters",
                hit.snippet.chars().count()
            ));
        }
        if hits[..i].iter().any(|other| other.source == hit.source) {
            return Err(format!("{id}: {} returned twice", hit.source));
        }
        if i > 0 && hits[i - 1].score < hit.score {
            return Err(format!("{id}: hits not best first"));
        }
    }
    Ok(())
}

/// For a backend that keeps [`crate::COMMON_QUERY_WINDOW`] (optional in the port): a query
/// whose every term is in most chunks ranks among the newest `COMMON_QUERY_WINDOW` chunks
/// only, so the oldest chunks, though they say the word most often, are not found; a rare
/// word beside it is searched across the whole index. `index` must be empty.
pub async fn common_query_window(index: &dyn MemoryIndex) -> Result<(), String> {
    use crate::{COMMON_QUERY_WINDOW, journal_chunk};
    let total = COMMON_QUERY_WINDOW + 50;
    let chunks: Vec<_> = (1..=total as u64)
        .map(|cursor| {
            let text = if cursor <= 50 {
                "weather weather weather weather report".to_owned()
            } else {
                format!("weather note number{cursor}")
            };
            journal_chunk(cursor, "2026-12-01 10:00", &text)
        })
        .collect();
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .map_err(|e| format!("loading: {e}"))?;
    let hits = index
        .search(&SearchRequest::new("weather"))
        .await
        .map_err(|e| format!("searching: {e}"))?;
    if hits.len() != 5 {
        return Err(format!("{} hits for a word in every chunk", hits.len()));
    }
    let oldest_searched = (total - COMMON_QUERY_WINDOW) as u64;
    for hit in &hits {
        let cursor: u64 = hit
            .source
            .trim_start_matches("history#")
            .parse()
            .map_err(|_| format!("an unexpected source {}", hit.source))?;
        if cursor <= oldest_searched {
            return Err(format!("{} is older than the window", hit.source));
        }
    }
    let rare = index
        .search(&SearchRequest::new("weather report"))
        .await
        .map_err(|e| format!("searching: {e}"))?;
    if rare.first().map(|hit| hit.source.as_str()) != Some("history#1") {
        return Err(format!(
            "a rare word beside a common one: {:?}",
            rare.first()
        ));
    }
    Ok(())
}

/// The vector lane's contract (`crate::VectorIndex`) on a fresh `index`: vectors of one
/// model only, of its length; a replaced or removed group loses its vectors; the chunks
/// without one listed in order; `nearest` deterministic, one hit per source, within the
/// request. An `Err` names the broken rule.
pub async fn vector_suite<I>(index: &I) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::{ChunkVector, HashingEmbedder, journal_chunk};
    use nanobot_llm_port::{Embedder, EmbeddingModel};

    let fail = |rule: &str, detail: String| Err(format!("{rule}: {detail}"));
    let embedder = HashingEmbedder::new(64);
    let model = embedder.model();
    if index
        .vector_model()
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return fail("a new index holds no model", String::new());
    }
    let texts = [
        "The nightly backup job on pluto-db-02 timed out",
        "The user prefers green tea to coffee",
        "用户喜欢喝茶",
    ];
    let chunks: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| journal_chunk(i as u64 + 1, "2026-03-01 10:00", text))
        .collect();
    index
        .replace(GroupUpdate::from_chunks(chunks))
        .await
        .map_err(|e| e.to_string())?;
    let missing = index.missing_vectors(10).await.map_err(|e| e.to_string())?;
    let groups: Vec<&str> = missing.iter().map(|c| c.group.as_str()).collect();
    if groups != ["history#1", "history#2", "history#3"] {
        return fail(
            "missing_vectors lists every chunk in order",
            format!("{groups:?}"),
        );
    }
    if index
        .missing_vectors(2)
        .await
        .map_err(|e| e.to_string())?
        .len()
        != 2
    {
        return fail("missing_vectors keeps to its limit", String::new());
    }
    let embed = |chunks: &[crate::Chunk]| {
        chunks
            .iter()
            .map(|c| ChunkVector {
                group: c.group.clone(),
                part: c.part,
                vector: embedder.vector(&c.text),
            })
            .collect::<Vec<_>>()
    };
    // Refusals first: nothing of them may be stored.
    let mut short = embed(&missing[..1]);
    short[0].vector.pop();
    if index.put_vectors(&model, short).await.is_ok() {
        return fail("a vector of another length is refused", String::new());
    }
    index
        .put_vectors(&model, embed(&missing))
        .await
        .map_err(|e| e.to_string())?;
    if index.vector_model().await.map_err(|e| e.to_string())? != Some(model.clone()) {
        return fail("the model of the vectors is recorded", String::new());
    }
    if !index
        .missing_vectors(10)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return fail("no chunk is missing its vector after a put", String::new());
    }
    let other = EmbeddingModel {
        name: "another-model".into(),
        dimensions: 64,
    };
    match index.put_vectors(&other, embed(&missing)).await {
        Err(IndexError::InvalidUpdate { .. }) => {}
        outcome => {
            return fail(
                "vectors of a second model are refused",
                format!("{outcome:?}"),
            );
        }
    }
    let query = embedder.vector("green tea");
    let request = SearchRequest::new("green tea").limit(2);
    let hits = index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?;
    if hits.first().map(|h| h.source.as_str()) != Some("history#2") || hits.len() != 2 {
        return fail("nearest finds the closest chunk first", format!("{hits:?}"));
    }
    if index
        .nearest(&query, &request)
        .await
        .map_err(|e| e.to_string())?
        != hits
    {
        return fail("nearest is deterministic", String::new());
    }
    let sessions_only = request.clone().sources([crate::SourceKind::Sessions]);
    if !index
        .nearest(&query, &sessions_only)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return fail("nearest keeps to the request's sources", String::new());
    }
    // A replaced group loses its vector; a removed one its hits.
    index
        .replace(GroupUpdate::from_chunks(vec![journal_chunk(
            2,
            "2026-03-01 10:00",
            "The user now drinks coffee only",
        )]))
        .await
        .map_err(|e| e.to_string())?;
    let missing = index.missing_vectors(10).await.map_err(|e| e.to_string())?;
    if missing.len() != 1 || missing[0].group != "history#2" {
        return fail("a replaced chunk loses its vector", format!("{missing:?}"));
    }
    index
        .remove_prefix("history#1")
        .await
        .map_err(|e| e.to_string())?;
    let all = SearchRequest::new("backup").limit(10);
    let hits = index
        .nearest(&embedder.vector("backup"), &all)
        .await
        .map_err(|e| e.to_string())?;
    if hits.iter().any(|h| h.source == "history#1") {
        return fail(
            "a removed chunk is not found by vector",
            format!("{hits:?}"),
        );
    }
    index.clear_vectors().await.map_err(|e| e.to_string())?;
    if index
        .vector_model()
        .await
        .map_err(|e| e.to_string())?
        .is_some()
        || index
            .missing_vectors(10)
            .await
            .map_err(|e| e.to_string())?
            .len()
            != 2
    {
        return fail("clearing drops every vector and the model", String::new());
    }
    Ok(())
}

/// Two handles on one empty index (two processes' opens of one file, two instances on
/// one database): what one writes to the vector lane, the other's `nearest` answers by
/// at once, whatever copy of the vectors it keeps (a replaced chunk's vector gone, a new
/// chunk's vector added, every vector cleared and put again). An `Err` names the broken
/// rule.
pub async fn vector_copies_follow_other_handles<I>(reader: &I, writer: &I) -> Result<(), String>
where
    I: MemoryIndex + crate::VectorIndex,
{
    use crate::{ChunkVector, HashingEmbedder, journal_chunk};
    use nanobot_llm_port::Embedder;

    let embedder = HashingEmbedder::new(64);
    let model = embedder.model();
    let failed = |e: IndexError| e.to_string();
    let write = |cursor: u64, text: &'static str| async move {
        writer
            .replace(GroupUpdate::from_chunks(vec![journal_chunk(
                cursor,
                "2026-03-01 10:00",
                text,
            )]))
            .await
    };
    let embed_missing = || async {
        let missing = writer.missing_vectors(100).await?;
        let vectors = missing
            .iter()
            .map(|c| ChunkVector {
                group: c.group.clone(),
                part: c.part,
                vector: embedder.vector(&c.text),
            })
            .collect();
        writer.put_vectors(&model, vectors).await
    };
    let nearest = |query: &'static str| async move {
        let hits = reader
            .nearest(
                &embedder.vector(query),
                &SearchRequest::new(query).limit(10),
            )
            .await?;
        Ok::<_, IndexError>(
            hits.into_iter()
                .map(|h| (h.source, h.snippet))
                .collect::<Vec<_>>(),
        )
    };
    let sources = |hits: &[(String, String)]| {
        hits.iter()
            .map(|(source, _)| source.clone())
            .collect::<Vec<_>>()
    };

    write(1, "The nightly backup job on pluto-db-02 timed out")
        .await
        .map_err(failed)?;
    write(2, "The user prefers green tea to coffee")
        .await
        .map_err(failed)?;
    embed_missing().await.map_err(failed)?;
    let first = nearest("green tea").await.map_err(failed)?;
    if sources(&first) != ["history#2", "history#1"] {
        return Err(format!("the reader sees the writer's vectors: {first:?}"));
    }
    // A replaced chunk loses its vector: the reader's copy must not keep it.
    write(2, "The user has given up hot drinks")
        .await
        .map_err(failed)?;
    let replaced = nearest("green tea").await.map_err(failed)?;
    if sources(&replaced) != ["history#1"] {
        return Err(format!(
            "a replaced chunk's vector is gone for the reader: {replaced:?}"
        ));
    }
    // New vectors: the reader's copy gains them.
    write(3, "Green tea with jasmine every morning")
        .await
        .map_err(failed)?;
    embed_missing().await.map_err(failed)?;
    let added = nearest("green tea").await.map_err(failed)?;
    if added
        .first()
        .map(|(s, snippet)| (s.as_str(), snippet.contains("jasmine")))
        != Some(("history#3", true))
        || added.len() != 3
    {
        return Err(format!("a new vector is found by the reader: {added:?}"));
    }
    writer.clear_vectors().await.map_err(failed)?;
    let cleared = nearest("green tea").await.map_err(failed)?;
    if !cleared.is_empty() {
        return Err(format!(
            "cleared vectors are gone for the reader: {cleared:?}"
        ));
    }
    embed_missing().await.map_err(failed)?;
    let again = nearest("green tea").await.map_err(failed)?;
    if again != added {
        return Err(format!(
            "vectors put again rank as before: {again:?} against {added:?}"
        ));
    }
    Ok(())
}

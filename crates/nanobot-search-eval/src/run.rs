//! One corpus through every lane and backend: the chunks indexed, each question asked, the
//! figures summed per split and per kind of question.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use nanobot_index_sqlite::SqliteIndex;
use nanobot_llm_port::Embedder;
use nanobot_llm_port::tokens::Cl100kBase;
use nanobot_memory_index::{InMemoryIndex, SearchIndex, SearchRequest};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_search::{
    DEFAULT_BUDGET_TOKENS, NEIGHBOUR_WEIGHT, SearchMemoryTool, VectorLane,
};
use nanobot_store_postgres::testing::TestSchema;
use serde::Serialize;

use crate::corpus::{Corpus, Storage};
use crate::embed::CachedEmbedder;
use crate::metrics::Figures;
use crate::textbook::Textbook;

/// Where the chunks are indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `InMemoryIndex`, the reference.
    Memory,
    /// The files backend's SQLite side index.
    Sqlite,
    /// A scope's `PgIndex`.
    Postgres,
}

impl Backend {
    /// From its name on the command line.
    pub(crate) fn parse(name: &str) -> Result<Backend, String> {
        match name {
            "memory" => Ok(Backend::Memory),
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" => Ok(Backend::Postgres),
            other => Err(format!(
                "unknown backend {other:?} (memory, sqlite, postgres)"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Corpus folders.
    pub(crate) corpora: Vec<PathBuf>,
    /// Backends to index into.
    pub(crate) backends: Vec<Backend>,
    /// How the conversations are stored.
    pub(crate) storage: Vec<Storage>,
    /// Where the JSON report goes.
    pub(crate) report: PathBuf,
    /// The PostgreSQL test database, when set.
    pub(crate) postgres_url: Option<String>,
    /// all-MiniLM-L6-v2's folder, for the meaning and fused lanes.
    pub(crate) model_dir: Option<PathBuf>,
    /// Neighbour weights to try besides the tool's default (`words+n0.2`, `fused+n0.2`).
    pub(crate) neighbour_weights: Vec<f64>,
    /// Weights of the coverage reranking stage to try (`fused+c0.5`; see `rerank.rs`).
    pub(crate) coverage_weights: Vec<f64>,
}

/// One hit as the eval reads it: where it is from and the day it carries.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// The hit's source.
    pub(crate) source: String,
    /// Its day (`2025-02-13`), when it carries one.
    pub(crate) day: Option<String>,
}

impl Found {
    fn of(hit: nanobot_memory_index::Hit) -> Found {
        Found {
            day: hit.at.map(|at| at.date().to_string()),
            source: hit.source,
        }
    }
}

/// One lane's figures on one corpus.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LaneResult {
    /// `textbook-bm25`, or `words` and so on.
    pub(crate) lane: String,
    /// `-` for the textbook (it has no backend), else the backend's name.
    pub(crate) backend: String,
    /// Figures per split (`tune`, `report`, `all`).
    pub(crate) splits: BTreeMap<String, Figures>,
    /// Figures per kind of question, over the report split.
    pub(crate) kinds: BTreeMap<String, Figures>,
    /// Of the report split's `when` questions with a day labelled, the share with a
    /// labelled hit among the first five that carries that day (the answer's date is in
    /// what the search returned); `None` when there are none.
    pub(crate) when_dated5: Option<f64>,
    /// Milliseconds per question (the 95th percentile).
    pub(crate) p95_ms: f64,
    /// The report split's questions with no labelled source in the ten, by id.
    pub(crate) missed: Vec<String>,
}

/// One corpus's results.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CorpusResult {
    /// The corpus's name.
    pub(crate) corpus: String,
    /// How its conversations were stored.
    pub(crate) storage: String,
    /// Chunks indexed.
    pub(crate) chunks: usize,
    /// Questions asked.
    pub(crate) questions: usize,
    /// Every lane's figures.
    pub(crate) lanes: Vec<LaneResult>,
}

/// Runs every lane over `corpus`.
pub(crate) async fn evaluate(
    corpus: &Corpus,
    storage: Storage,
    options: &Options,
    embedder: Option<CachedEmbedder>,
) -> Result<CorpusResult, String> {
    let textbook = Textbook::new(corpus.chunks());
    let days: HashMap<&str, Option<String>> = corpus
        .chunks()
        .map(|c| (c.source.as_str(), c.at.map(|at| at.date().to_string())))
        .collect();
    let mut lanes = vec![
        score(corpus, "textbook-bm25", "-", |query| {
            let ranked = textbook
                .search(query, 10)
                .into_iter()
                .map(|source| Found {
                    day: days.get(source.as_str()).cloned().flatten(),
                    source,
                })
                .collect();
            async move { Ok(ranked) }
        })
        .await?,
    ];
    for &backend in &options.backends {
        let (index, _keep) = open(backend, options).await?;
        index
            .replace(corpus.updates.clone())
            .await
            .map_err(|e| format!("{}: indexing {}: {e}", backend.name(), corpus.name))?;
        lanes.push(
            score(corpus, "words", backend.name(), |query| {
                let index = index.clone();
                async move {
                    let request = SearchRequest::new(query).limit(10);
                    let hits = index.search(&request).await.map_err(|e| e.to_string())?;
                    Ok(hits.into_iter().map(Found::of).collect())
                }
            })
            .await?,
        );
        for &weight in &options.neighbour_weights {
            let tool = search_tool(index.clone(), weight);
            lanes.push(tool_lane(corpus, &format!("words+n{weight}"), backend, &tool).await?);
        }
        if let Some(embedder) = &embedder {
            let weights = (
                &options.neighbour_weights[..],
                &options.coverage_weights[..],
            );
            lanes.extend(meaning_lanes(corpus, backend, index.clone(), embedder, weights).await?);
        }
    }
    Ok(CorpusResult {
        corpus: corpus.name.clone(),
        storage: storage.name().to_owned(),
        chunks: corpus.chunks().count(),
        questions: corpus.questions.len(),
        lanes,
    })
}

/// The meaning lane (the index's nearest vectors to the question's) and the fused lane
/// (`search_memory`'s own fusion of words and meaning), after every chunk is embedded.
async fn meaning_lanes(
    corpus: &Corpus,
    backend: Backend,
    index: Arc<dyn SearchIndex>,
    embedder: &CachedEmbedder,
    (neighbour_weights, coverage_weights): (&[f64], &[f64]),
) -> Result<Vec<LaneResult>, String> {
    let embedder: Arc<dyn Embedder> = Arc::new(embedder.clone());
    let lane = VectorLane::new(index.clone(), embedder.clone());
    lane.embed_missing(usize::MAX)
        .await
        .map_err(|e| format!("{}: embedding {}: {e}", backend.name(), corpus.name))?;
    let meaning = score(corpus, "meaning", backend.name(), |query| {
        let (index, embedder) = (index.clone(), embedder.clone());
        async move {
            let vector = embedder
                .embed(&[query.to_owned()])
                .await
                .map_err(|e| e.to_string())?
                .pop()
                .ok_or("no vector")?;
            let request = SearchRequest::new(query).limit(10);
            let hits = index
                .nearest(&vector, &request)
                .await
                .map_err(|e| e.to_string())?;
            Ok(hits.into_iter().map(Found::of).collect())
        }
    })
    .await?;
    let tool = |weight: f64| search_tool(index.clone(), weight).with_vector_lane(lane.clone());
    let fused = &tool(NEIGHBOUR_WEIGHT);
    let mut lanes = vec![meaning, tool_lane(corpus, "fused", backend, fused).await?];
    for &weight in neighbour_weights {
        let name = format!("fused+n{weight}");
        lanes.push(tool_lane(corpus, &name, backend, &tool(weight)).await?);
    }
    for &weight in coverage_weights {
        let name = format!("fused+c{weight}");
        lanes.push(
            score(corpus, &name, backend.name(), |query| async move {
                let request = SearchRequest::new(query).limit(10);
                let (hits, _) = fused.hits(&request).await.map_err(|e| e.to_string())?;
                let ranked = crate::rerank::by_coverage(query, hits, weight);
                Ok(ranked.into_iter().map(Found::of).collect())
            })
            .await?,
        );
    }
    Ok(lanes)
}

/// `search_memory` over `index` with the default budget and `neighbour_weight`.
fn search_tool(index: Arc<dyn SearchIndex>, neighbour_weight: f64) -> SearchMemoryTool {
    SearchMemoryTool::new(index, Arc::new(Cl100kBase::new()), DEFAULT_BUDGET_TOKENS)
        .with_neighbour_weight(neighbour_weight)
}

/// `search_memory`'s own hits (`SearchMemoryTool::hits`, what the model gets), ten asked;
/// a fall back to words is an error (the lane would not be what its name says).
async fn tool_lane(
    corpus: &Corpus,
    lane: &str,
    backend: Backend,
    tool: &SearchMemoryTool,
) -> Result<LaneResult, String> {
    score(corpus, lane, backend.name(), |query| async move {
        let request = SearchRequest::new(query).limit(10);
        let (hits, note) = tool.hits(&request).await.map_err(|e| e.to_string())?;
        match note {
            Some(note) => Err(format!("{lane} fell back to words: {note}")),
            None => Ok(hits.into_iter().map(Found::of).collect()),
        }
    })
    .await
}

/// Something that must live as long as an index (a temporary folder, a schema).
type Keep = Box<dyn std::any::Any>;

async fn open(backend: Backend, options: &Options) -> Result<(Arc<dyn SearchIndex>, Keep), String> {
    match backend {
        Backend::Memory => Ok((Arc::new(InMemoryIndex::new()), Box::new(()))),
        Backend::Sqlite => {
            let dir = TempDir::new()?;
            let index =
                SqliteIndex::open(&dir.0.join("index.sqlite")).map_err(|e| e.to_string())?;
            Ok((Arc::new(index), Box::new(dir)))
        }
        Backend::Postgres => {
            let url = options.postgres_url.as_deref().ok_or("no PostgreSQL URL")?;
            let store = TestSchema::new(url).store().await;
            let scope = store
                .scope(&ScopeKey::local(Subject::Agent))
                .await
                .map_err(|e| e.to_string())?;
            Ok((Arc::new(scope.index()), Box::new(store)))
        }
    }
}

/// A folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "nanobot-search-eval-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asks every question of `lane` and sums the figures.
async fn score<'a, F, Fut>(
    corpus: &'a Corpus,
    lane: &str,
    backend: &str,
    ask: F,
) -> Result<LaneResult, String>
where
    F: Fn(&'a str) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Found>, String>>,
{
    let mut dated = (0usize, 0usize);
    let mut splits: BTreeMap<String, Figures> = BTreeMap::new();
    let mut kinds: BTreeMap<String, Figures> = BTreeMap::new();
    let mut times: Vec<f64> = Vec::new();
    let mut missed: Vec<String> = Vec::new();
    for question in &corpus.questions {
        let started = Instant::now();
        let found = ask(&question.query).await?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
        let ranked: Vec<String> = found.iter().map(|f| f.source.clone()).collect();
        let figures = Figures::of(&ranked, &question.relevant);
        let split = question.split.clone().unwrap_or_default();
        if let (true, "when", Some(day)) =
            (split == "report", question.kind.as_str(), &question.date)
        {
            dated.0 += 1;
            let answered = found.iter().take(5).any(|f| {
                question.relevant.contains(&f.source) && f.day.as_deref() == Some(day.as_str())
            });
            dated.1 += usize::from(answered);
        }
        if split == "report" {
            kinds.entry(question.kind.clone()).or_default().add(figures);
            if figures.hit10 == 0.0 {
                missed.push(question.id.clone());
            }
        }
        splits.entry(split).or_default().add(figures);
        splits.entry("all".to_owned()).or_default().add(figures);
    }
    times.sort_by(f64::total_cmp);
    let p95 = times
        .get((times.len() * 95 / 100).min(times.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    Ok(LaneResult {
        lane: lane.to_owned(),
        backend: backend.to_owned(),
        splits: splits.into_iter().map(|(k, v)| (k, v.mean())).collect(),
        kinds: kinds.into_iter().map(|(k, v)| (k, v.mean())).collect(),
        when_dated5: (dated.0 > 0).then(|| dated.1 as f64 / dated.0 as f64),
        p95_ms: p95,
        missed,
    })
}

/// The report as Markdown: one table per corpus (the report split), then hit@5 per kind.
pub(crate) fn markdown(results: &[CorpusResult]) -> String {
    let mut out = String::new();
    for result in results {
        out += &format!(
            "\n### {} as {} ({} chunks, {} questions; report split)\n\n",
            result.corpus, result.storage, result.chunks, result.questions
        );
        out +=
            "| lane | backend | hit@1 | hit@5 | hit@10 | MRR | nDCG@10 | when dated@5 | p95 ms |\n";
        out += "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
        for lane in &result.lanes {
            let f = lane.splits.get("report").copied().unwrap_or_default();
            let dated = lane
                .when_dated5
                .map_or_else(|| "-".to_owned(), |share| format!("{share:.3}"));
            out += &format!(
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {dated} | {:.2} |\n",
                lane.lane, lane.backend, f.hit1, f.hit5, f.hit10, f.mrr, f.ndcg10, lane.p95_ms
            );
        }
        let kinds: Vec<&String> = result
            .lanes
            .first()
            .map(|lane| lane.kinds.keys().collect())
            .unwrap_or_default();
        out += &format!("\nhit@5 by kind | {} |\n", join(&kinds));
        out += &format!("|---|{}\n", "---:|".repeat(kinds.len()));
        for lane in &result.lanes {
            let cells: Vec<String> = kinds
                .iter()
                .map(|kind| format!("{:.3}", lane.kinds.get(*kind).map_or(0.0, |f| f.hit5)))
                .collect();
            out += &format!(
                "| {} {} | {} |\n",
                lane.lane,
                lane.backend,
                cells.join(" | ")
            );
        }
    }
    out
}

fn join(kinds: &[&String]) -> String {
    kinds
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

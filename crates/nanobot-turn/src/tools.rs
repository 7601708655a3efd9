//! Tools the turn offers the model: the port a bot implements to add its own, and the
//! first tool, `search_memory`, over the scope's search index.

use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::tokens::TokenCounter;
use nanobot_llm_port::{Embedder, ToolDefinition};
use nanobot_memory_index::{
    Hit, IndexError, MAX_LIMIT, MemoryIndex, SearchRequest, session_prefix,
};
use nanobot_memory_search::{
    DEFAULT_BUDGET_TOKENS, EMBED_BATCH, EmbedPass, IndexPass, Indexer, IndexingError,
    SearchMemoryTool, VectorLane,
};
use nanobot_session_store::SessionKey;

use crate::memory::ScopeMemory;

/// What a tool call runs in: the memory of the turn's scope and the session of the turn.
/// A tool reaches nothing of another scope through it.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// The scope's memory.
    pub memory: &'a ScopeMemory,
    /// The session the turn belongs to.
    pub session: &'a SessionKey,
}

/// What one call gives back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The tool result's text.
    pub content: String,
    /// Whether the text is memory recalled from storage: the stored result is then marked
    /// ([`nanobot_session_store::RECALLED_FIELD`]) and the Consolidator never archives it again.
    pub recalled: bool,
}

impl ToolOutput {
    /// A result of the tool's own (an answer, a refusal, an error to correct).
    pub fn text(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            recalled: false,
        }
    }

    /// A result that repeats stored memory.
    pub fn recalled(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            recalled: true,
        }
    }
}

/// A tool the turn offers the model. The turn runs calls one after another, stores each
/// call and result in the session as nanobot stores them, and gives up offering tools after
/// [`crate::AgentSettings::max_tool_steps`] rounds.
///
/// A tool never fails the turn: what went wrong is its result, in words the model can act
/// on (correct the arguments, try later, answer without it).
#[async_trait]
pub trait TurnTool: Send + Sync {
    /// The definition offered to the model; its name is what calls are matched on.
    fn definition(&self) -> ToolDefinition;

    /// Whether the tool is offered in turns of `memory` (a search needs an index).
    fn offered_in(&self, _memory: &ScopeMemory) -> bool {
        true
    }

    /// Runs one call with the model's `arguments` (JSON text, possibly malformed).
    async fn call(&self, context: ToolContext<'_>, arguments: &str) -> ToolOutput;
}

/// Chunks a search embeds before it runs, by default: one request to the embedder, so a
/// search waits for at most one batch; the rest are embedded by later searches or at once
/// by `nanobot memory reindex`.
pub const DEFAULT_EMBED_PER_SEARCH: usize = EMBED_BATCH;

/// `search_memory`: searches the scope's index (history journal, memory files, past
/// sessions) after bringing it up to date, and returns the results as recalled, untrusted
/// data ([`nanobot_memory_search::render`]). With an embedder and a backend that keeps vectors,
/// it also searches by meaning and fuses both rankings ([`nanobot_memory_search::VectorLane`]).
pub struct SearchMemory {
    counter: Arc<dyn TokenCounter>,
    budget_tokens: usize,
    embedder: Option<Arc<dyn Embedder>>,
    embed_per_search: usize,
}

impl SearchMemory {
    /// The tool, its results counted with `counter` within the default budget (2,000
    /// tokens).
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        SearchMemory {
            counter,
            budget_tokens: DEFAULT_BUDGET_TOKENS,
            embedder: None,
            embed_per_search: DEFAULT_EMBED_PER_SEARCH,
        }
    }

    /// Results within `budget_tokens` instead.
    pub fn with_budget(mut self, budget_tokens: usize) -> Self {
        self.budget_tokens = budget_tokens;
        self
    }

    /// Also searches by meaning with `embedder`'s vectors, in scopes whose backend keeps
    /// vectors ([`ScopeMemory::vectors`]); before each search up to `embed_per_search`
    /// chunks without a vector get one.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>, embed_per_search: usize) -> Self {
        self.embedder = Some(embedder);
        self.embed_per_search = embed_per_search;
        self
    }

    /// Chunks embedded before each search.
    pub fn embed_per_search(&self) -> usize {
        self.embed_per_search
    }

    /// The results' budget, in tokens.
    pub fn budget_tokens(&self) -> usize {
        self.budget_tokens
    }

    /// The vector lane of `memory`, when this tool has an embedder and the backend keeps
    /// vectors.
    pub fn vector_lane(&self, memory: &ScopeMemory) -> Option<VectorLane> {
        Some(VectorLane::new(
            memory.vectors.clone()?,
            self.embedder.clone()?,
        ))
    }

    /// The search over `index` of `memory` as every caller runs it (the tool, `nanobot
    /// memory search`, the server's search route): within this tool's budget, and with the
    /// vector lane when there is one, up to [`SearchMemory::embed_per_search`] missing
    /// vectors given first. A failing embedder never fails the search: what the embedding
    /// pass did is handed back for the caller to report.
    pub async fn prepare(
        &self,
        memory: &ScopeMemory,
        index: Arc<dyn nanobot_memory_index::MemoryIndex>,
    ) -> PreparedSearch {
        let mut tool = SearchMemoryTool::new(index, self.counter.clone(), self.budget_tokens);
        let mut embedding = None;
        if let Some(lane) = self.vector_lane(memory) {
            embedding = Some(lane.embed_missing(self.embed_per_search).await);
            tool = tool.with_vector_lane(lane);
        }
        PreparedSearch { tool, embedding }
    }
}

/// What one search of a scope's memory found ([`SearchMemory::search`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct Found {
    /// The hits, best first, every lane fused.
    pub hits: Vec<Hit>,
    /// Why the vector lane did not answer, when it did not.
    pub note: Option<String>,
    /// The indexing pass run first (its failure left what was indexed before searchable).
    pub indexing: Result<IndexPass, IndexingError>,
    /// The embedding pass run first (`None`: no vector lane).
    pub embedding: Option<Result<EmbedPass, IndexingError>>,
}

impl SearchMemory {
    /// One search of `memory` through its `index`, as the tool, `nanobot memory search`
    /// and the server run it: what was written since the last search indexed, up to
    /// [`SearchMemory::embed_per_search`] missing vectors embedded, then `request` ranked
    /// by every lane. A failing indexing or embedding pass never fails the search: it is
    /// logged and handed back in [`Found`]; only the index failing to search is an error.
    pub async fn search(
        &self,
        memory: &ScopeMemory,
        index: Arc<dyn MemoryIndex>,
        request: &SearchRequest,
    ) -> Result<Found, IndexError> {
        let indexing = memory
            .indexer(index.clone(), self.counter.clone())
            .sync()
            .await;
        if let Err(error) = &indexing {
            tracing::warn!(error = %error, "indexing before a memory search failed");
        }
        let prepared = self.prepare(memory, index).await;
        prepared.warn_if_embedding_failed();
        let (hits, note) = prepared.tool.hits(request).await?;
        Ok(Found {
            hits,
            note,
            indexing,
            embedding: prepared.embedding,
        })
    }
}

/// A search ready to run ([`SearchMemory::prepare`]).
pub struct PreparedSearch {
    /// The tool over the scope's index, with the vector lane when there is one.
    pub tool: SearchMemoryTool,
    /// What the embedding pass before it did (`None`: no vector lane).
    pub embedding: Option<Result<EmbedPass, IndexingError>>,
}

impl PreparedSearch {
    /// Logs a failed embedding pass (the search still runs on what has vectors).
    pub fn warn_if_embedding_failed(&self) {
        if let Some(Err(error)) = &self.embedding {
            tracing::warn!(error = %error, "embedding before a memory search failed");
        }
    }
}

#[async_trait]
impl TurnTool for SearchMemory {
    fn definition(&self) -> ToolDefinition {
        SearchMemoryTool::definition()
    }

    fn offered_in(&self, memory: &ScopeMemory) -> bool {
        memory.index.is_some()
    }

    async fn call(&self, context: ToolContext<'_>, arguments: &str) -> ToolOutput {
        let memory = context.memory;
        let Some(index) = &memory.index else {
            return ToolOutput::text(
                "search_memory is unavailable: this memory is kept without a search index",
            );
        };
        let request = match nanobot_memory_search::parse_arguments(arguments) {
            Ok(request) => request,
            Err(reason) => {
                return ToolOutput::text(format!("search_memory was not run: {reason}"));
            }
        };
        // The live messages of this session are in the prompt already: finding them again
        // is noise (the question itself matches best). Its archived part stays searchable.
        let live_from = match memory.sessions.get_or_create(context.session).await {
            Ok(handle) => handle.read(|s| s.last_consolidated()),
            Err(_) => 0,
        };
        let prefix = session_prefix(context.session.as_str());
        let live = move |hit: &Hit| {
            hit.source
                .strip_prefix(&prefix)
                .and_then(|seq| seq.parse::<usize>().ok())
                .is_some_and(|seq| seq >= live_from)
        };
        // Asked for the most hits the index gives, so as many as asked remain once the
        // live ones are left out.
        let found = self
            .search(memory, index.clone(), &request.clone().limit(MAX_LIMIT))
            .await
            .map(|found| (found.hits, found.note));
        let outcome =
            SearchMemoryTool::new(index.clone(), self.counter.clone(), self.budget_tokens)
                .outcome(&request, found, &live);
        ToolOutput {
            content: outcome.text,
            recalled: outcome.recalled,
        }
    }
}

impl ScopeMemory {
    /// The indexing pass that feeds `index` from this scope's journal, documents and
    /// sessions.
    pub fn indexer(
        &self,
        index: Arc<dyn nanobot_memory_index::MemoryIndex>,
        counter: Arc<dyn TokenCounter>,
    ) -> Indexer {
        // Every session of the scope's store belongs to the scope (stores serve one scope).
        Indexer::new(index, self.journal.clone(), self.documents.clone(), counter)
            .with_sessions(self.sessions.store().clone(), Arc::new(|_| true))
    }
}

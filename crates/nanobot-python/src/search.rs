//! `MemorySearch`: a workspace's memory searched as `nanobot memory search` searches it
//! (the journal, the memory files, the sessions; a SQLite index beside the files, brought up
//! to date before each search).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse};
use nanobot_memory::commands::SearchArgs;
use nanobot_memory::index::{Hit, SearchRequest};
use nanobot_memory::scope::{ScopeKey, Subject};
use nanobot_memory::search::render_with_note;
use nanobot_memory::{Bot, FileOptions};
use nanobot_session_store::SessionError;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use tokio::runtime::Runtime;

use crate::convert::to_python;
use crate::errors::detached;

/// Memory search over one workspace, in nanobot-ai's layout.
#[pyclass(frozen, module = "nanobot_rs._native")]
pub(crate) struct MemorySearch {
    bot: Bot,
    runtime: Runtime,
}

/// What a search-only bot answers if anything ever asks it for a completion: searching
/// needs no model, and this handle was given none.
struct NoModel;

#[async_trait]
impl LlmClient for NoModel {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Err(LlmError::Permanent {
            status: None,
            message: "nanobot_rs.MemorySearch only searches; it has no model".into(),
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(65_536)
    }
}

#[pymethods]
impl MemorySearch {
    /// The memory of `workspace` (its sessions under `sessions_root` when nanobot-ai made
    /// the workspace).
    #[new]
    #[pyo3(signature = (workspace, sessions_root))]
    fn new(py: Python<'_>, workspace: PathBuf, sessions_root: PathBuf) -> PyResult<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PyValueError::new_err(format!("cannot start the I/O runtime: {e}")))?;
        let options = FileOptions::default().sessions_root(sessions_root);
        let bot = detached(py, || {
            runtime
                .block_on(
                    Bot::builder()
                        .files_with(workspace, options)
                        .llm(Arc::new(NoModel))
                        .search(true)
                        .build(),
                )
                .map_err(assembly)
        })?;
        Ok(MemorySearch { bot, runtime })
    }

    /// The hits for `query` (dicts: source, kind, at, score, snippet), best first, from
    /// `sources` (`history`, `memory`, `sessions`; all when `None`), at most `limit`, written
    /// on or after `since` (`YYYY-MM-DD`) when given.
    #[pyo3(signature = (query, sources=None, limit=8, since=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        sources: Option<Vec<String>>,
        limit: usize,
        since: Option<String>,
    ) -> PyResult<Bound<'py, PyList>> {
        let request = request(query, sources, limit, since.as_deref())?;
        let (hits, _) = detached(py, || self.runtime.block_on(self.hits(&request)))?;
        let hits = serde_json::to_value(&hits)
            .map_err(|e| PyValueError::new_err(format!("unwritable search result: {e}")))?;
        Ok(to_python(py, &hits)?.cast_into::<PyList>()?)
    }

    /// The same search as the text the `search_memory` tool gives a model: the hits in a
    /// `<memory_search_results>` envelope a snippet cannot close, within the tool's token
    /// budget.
    #[pyo3(signature = (query, sources=None, limit=8, since=None))]
    fn search_for_model(
        &self,
        py: Python<'_>,
        query: &str,
        sources: Option<Vec<String>>,
        limit: usize,
        since: Option<String>,
    ) -> PyResult<String> {
        let request = request(query, sources, limit, since.as_deref())?;
        let (hits, note) = detached(py, || self.runtime.block_on(self.hits(&request)))?;
        let counter = self.bot.agent().counter();
        let budget = self
            .bot
            .search()
            .map_or(nanobot_memory::search::DEFAULT_BUDGET_TOKENS, |s| {
                s.budget_tokens()
            });
        Ok(render_with_note(
            query,
            &hits,
            counter.as_ref(),
            budget,
            note.as_deref(),
        ))
    }
}

impl MemorySearch {
    /// The workspace's hits for `request`, after bringing its index up to date.
    async fn hits(
        &self,
        request: &SearchRequest,
    ) -> Result<(Vec<Hit>, Option<String>), SessionError> {
        let memory = self
            .bot
            .memory(&ScopeKey::local(Subject::Agent))
            .await
            .map_err(assembly)?;
        let (Some(search), Some(index)) = (self.bot.search(), memory.index.clone()) else {
            return Err(SessionError::backend(
                "this workspace keeps no search index",
            ));
        };
        let found = search
            .search(&memory, index, request)
            .await
            .map_err(|e| SessionError::backend_caused_by("memory search failed", false, e))?;
        // A search a person (or a model) asked for must see what was just written.
        found.indexing.map_err(|e| {
            SessionError::backend_caused_by("indexing before the search failed", true, e)
        })?;
        Ok((found.hits, found.note))
    }
}

/// The request, each argument checked as `nanobot memory search` checks it.
fn request(
    query: &str,
    sources: Option<Vec<String>>,
    limit: usize,
    since: Option<&str>,
) -> PyResult<SearchRequest> {
    let sources = sources.unwrap_or_default();
    let args = SearchArgs {
        query,
        sources: &sources,
        since,
        limit,
        json: true,
    };
    args.request().map_err(PyValueError::new_err)
}

/// An assembly failure as the session errors' `Backend` kind (raised as
/// `NanobotStoreError`, or `StoreIOError` for a file the workspace could not give).
fn assembly(error: nanobot_memory::AssemblyError) -> SessionError {
    SessionError::backend_caused_by(error.to_string(), false, error)
}

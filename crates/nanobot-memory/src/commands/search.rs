//! Memory search as an operator reads it: the hits with their sources, times and scores,
//! and the index rebuilt on request.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use std::collections::BTreeMap;

use nanobot_memory_index::{Hit, MemoryIndex, SearchRequest, SourceKind};
use nanobot_memory_store::Document;

use super::ScopeCommands;
use crate::AssemblyError;

/// What `memory search` asks, as a command line gives it.
#[derive(Debug, Clone)]
pub struct SearchArgs<'a> {
    /// The query.
    pub query: &'a str,
    /// `history`, `memory`, `sessions` (all when empty).
    pub sources: &'a [String],
    /// `YYYY-MM-DD`.
    pub since: Option<&'a str>,
    /// 1 to [`nanobot_memory_index::MAX_LIMIT`].
    pub limit: usize,
    /// JSON output.
    pub json: bool,
}

impl SearchArgs<'_> {
    /// The request, each argument checked; `Err`: what is wrong, for a usage message.
    pub fn request(&self) -> Result<SearchRequest, String> {
        let max = nanobot_memory_index::MAX_LIMIT;
        if !(1..=max).contains(&self.limit) {
            return Err(format!("--limit must be 1 to {max}, not {}", self.limit));
        }
        let query = self.query.trim();
        if query.is_empty() {
            return Err("the query must be a non-empty string".into());
        }
        let mut request = SearchRequest::new(query).limit(self.limit);
        if !self.sources.is_empty() {
            let sources = self.sources.iter().map(|name| {
                nanobot_memory_index::SourceKind::from_name(name).ok_or_else(|| {
                    format!("--source may be history, memory or sessions, not {name:?}")
                })
            });
            request = request.sources(sources.collect::<Result<Vec<_>, _>>()?);
        }
        if let Some(since) = self.since {
            let day = nanobot_memory_search::parse_since(since)
                .ok_or_else(|| format!("--since must be a date like 2026-03-01, not {since:?}"))?;
            request = request.since(day);
        }
        Ok(request)
    }
}

impl ScopeCommands<'_> {
    /// Brings the scope's index up to date, then searches it: numbered hits, or their JSON
    /// (`json`; its notes are logged instead of printed).
    pub async fn memory_search(
        &self,
        request: &SearchRequest,
        json: bool,
    ) -> Result<String, AssemblyError> {
        let search = self.search()?;
        let found = search.search(self.memory, self.index()?, request).await?;
        // The index must be current for a search a person asked for: a failed pass fails it.
        found.indexing?;
        let mut notes = Vec::new();
        match &found.embedding {
            Some(Ok(pass)) if pass.more => notes.push(format!(
                "some of memory has no vector yet: each search embeds {} chunks, `nanobot memory reindex` embeds them all",
                search.embed_per_search()
            )),
            Some(Err(error)) => notes.push(format!("embedding failed: {error}")),
            _ => {}
        }
        notes.extend(found.note);
        let hits = found.hits;
        if json {
            for note in &notes {
                tracing::warn!("{note}");
            }
            return Ok(serde_json::to_string_pretty(&hits).unwrap_or_else(|_| "[]".into()));
        }
        let notes: String = notes.iter().map(|n| format!("\n({n})")).collect();
        if hits.is_empty() {
            return Ok(format!(
                "Nothing in memory matches {:?}.{notes}",
                request.query
            ));
        }
        let origins = self.hit_origins(&hits).await;
        let mut out = String::new();
        for (n, hit) in hits.iter().enumerate() {
            let at = hit.at.map_or_else(
                || "-".to_owned(),
                |at| at.format("%Y-%m-%d %H:%M").to_string(),
            );
            let (source, score, snippet) = (&hit.source, hit.score, &hit.snippet);
            let _ = writeln!(
                out,
                "[{}] {source} · {at} · score {score:.2}\n    {snippet}",
                n + 1
            );
            if let Some(from) = origins.get(n).and_then(Option::as_ref) {
                let _ = writeln!(out, "    learned from {from}");
            }
            out.push('\n');
        }
        Ok(format!("{}{notes}", out.trim_end()))
    }

    /// For each hit in a memory file, the conversations its lines came from (as `memory
    /// blame` gives them), when Dream recorded them.
    async fn hit_origins(&self, hits: &[Hit]) -> Vec<Option<String>> {
        let in_files = hits.iter().any(|h| h.kind == SourceKind::Memory);
        // One replay of the versions serves every file (a failure names no sources).
        let blamed = if in_files {
            self.memory.dream.blame_all().await.unwrap_or_default()
        } else {
            BTreeMap::new()
        };
        let mut out = Vec::with_capacity(hits.len());
        for hit in hits {
            let file = hit.source.split('#').next().unwrap_or_default();
            let document = Document::ALL.into_iter().find(|d| {
                hit.kind == SourceKind::Memory && d.path().rsplit('/').next() == Some(file)
            });
            let Some(document) = document else {
                out.push(None);
                continue;
            };
            let mut sources: Vec<String> = Vec::new();
            let snippet = hit.snippet.trim_matches(['…', ' ']);
            for line in blamed.get(document.path()).into_iter().flatten() {
                let bare = line.text.trim().trim_start_matches(['-', '*', ' ']);
                let said = bare.len() >= 8 && (snippet.contains(bare) || bare.contains(snippet));
                for source in line.origin.iter().filter(|_| said).flat_map(|o| &o.sources) {
                    let text = source.to_string();
                    if !sources.contains(&text) {
                        sources.push(text);
                    }
                }
            }
            out.push((!sources.is_empty()).then(|| sources.join("; ")));
        }
        out
    }

    /// Feeds the scope's index everything again, in place (searches meanwhile still find
    /// what was indexed), then every vector again with the configured model (which also
    /// resumes a lane a model change paused).
    pub async fn memory_reindex(&self) -> Result<String, AssemblyError> {
        let index = self.index()?;
        let started = Instant::now();
        let counter = self.agent.counter().clone();
        let pass = self
            .memory
            .indexer(index.clone(), counter)
            .reindex()
            .await?;
        let stats = index.stats().await?;
        let mut said = format!(
            "Search index rebuilt in {:.1} s: {} history entries, {} memory files, {} messages of {} sessions ({} chunks).",
            started.elapsed().as_secs_f64(),
            pass.entries,
            pass.documents,
            pass.messages,
            pass.sessions,
            stats.chunks
        );
        if let Some(lane) = self.search()?.vector_lane(self.memory) {
            let started = Instant::now();
            let embedded = lane.reembed().await?;
            let _ = write!(
                said,
                "\nEmbedded {} chunks with {} in {:.1} s.",
                embedded.embedded,
                lane.model().name,
                started.elapsed().as_secs_f64()
            );
        }
        Ok(said)
    }

    fn index(&self) -> Result<Arc<dyn MemoryIndex>, AssemblyError> {
        self.memory
            .index
            .clone()
            .ok_or_else(|| AssemblyError::NotFound {
                what: "this storage keeps no search index, so memory search is not available"
                    .into(),
            })
    }

    fn search(&self) -> Result<&Arc<nanobot_turn::SearchMemory>, AssemblyError> {
        self.search.ok_or_else(|| AssemblyError::NotFound {
            what: "this bot has memory search off".into(),
        })
    }
}

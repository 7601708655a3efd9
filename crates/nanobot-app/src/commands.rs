//! What the bot answers to its commands. The chat's slash commands and the operator's
//! reports are the library's (`nanobot_memory::ScopeCommands`); memory search and reindex,
//! which take the command line's options, are here.

use std::fmt::Write as _;
use std::sync::Arc;

use nanobot_session_store::SessionKey;

use crate::bot::Bot;
use crate::error::AppError;

pub use nanobot_memory::commands::HELP;

/// Answers a slash command; `None` when `line` is not one. A chat without memory (its
/// sender unknown) archives nothing on `/new`.
pub async fn slash(bot: &Bot, key: &SessionKey, line: &str) -> Option<Result<String, AppError>> {
    let command = line.split_whitespace().next();
    if command == Some("/new") {
        return Some(bot.new_session(key).await);
    }
    let reply = bot.commands().slash(key, line).await?;
    if command == Some("/dream") {
        // Dream printed its progress on one line: cleared before the reply.
        crate::bot::clear_progress();
    }
    Some(reply.map_err(AppError::from))
}

/// `/status`.
pub async fn status(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    Ok(bot.commands().status(key).await?)
}

/// `/dream` and `nanobot dream run [--dry-run]`.
pub async fn dream_run(bot: &Bot, dry_run: bool) -> Result<String, AppError> {
    let reply = bot.commands().dream_run(dry_run).await;
    crate::bot::clear_progress();
    Ok(reply?)
}

/// What `nanobot memory search` asks.
#[derive(Debug, Clone)]
pub struct MemorySearch<'a> {
    /// The query.
    pub query: &'a str,
    /// `history`, `memory`, `sessions` (all when empty).
    pub sources: &'a [String],
    /// `YYYY-MM-DD`.
    pub since: Option<&'a str>,
    /// 1 to 10.
    pub limit: usize,
    /// JSON output.
    pub json: bool,
}

/// The scope's search index, or why there is none.
fn search_index(bot: &Bot) -> Result<Arc<dyn nanobot_memory_index::MemoryIndex>, AppError> {
    bot.memory.index.clone().ok_or_else(|| {
        AppError::NotFound(
            "this storage keeps no search index, so memory search is not available".into(),
        )
    })
}

/// The request `nanobot memory search` names, each argument checked.
fn search_request(
    search: &MemorySearch<'_>,
) -> Result<nanobot_memory_index::SearchRequest, AppError> {
    let query = search.query.trim();
    if query.is_empty() {
        return Err(AppError::Usage(
            "the query must be a non-empty string".into(),
        ));
    }
    let mut request = nanobot_memory_index::SearchRequest::new(query).limit(search.limit);
    if !search.sources.is_empty() {
        let sources = search.sources.iter().map(|name| {
            nanobot_memory_index::SourceKind::from_name(name).ok_or_else(|| {
                AppError::Usage(format!(
                    "--source may be history, memory or sessions, not {name:?}"
                ))
            })
        });
        request = request.sources(sources.collect::<Result<Vec<_>, _>>()?);
    }
    if let Some(since) = search.since {
        let since = nanobot_memory_search::parse_since(since).ok_or_else(|| {
            AppError::Usage(format!(
                "--since must be a date like 2026-03-01, not {since:?}"
            ))
        })?;
        request = request.since(since);
    }
    Ok(request)
}

/// `nanobot memory search QUERY`: brings the index up to date, then searches it.
pub async fn memory_search(bot: &Bot, search: &MemorySearch<'_>) -> Result<String, AppError> {
    if !(1..=nanobot_memory_index::MAX_LIMIT).contains(&search.limit) {
        return Err(AppError::Usage(format!(
            "--limit must be 1 to {}, not {}",
            nanobot_memory_index::MAX_LIMIT,
            search.limit
        )));
    }
    let request = search_request(search)?;
    let index = search_index(bot)?;
    let found = bot.search.search(&bot.memory, index, &request).await?;
    // The index must be current for a search a person asked for: a failed pass fails it.
    found.indexing?;
    let mut notes = Vec::new();
    match &found.embedding {
        Some(Ok(pass)) if pass.more => notes.push(format!(
            "some of memory has no vector yet: each search embeds {} chunks, `nanobot memory reindex` embeds them all",
            bot.search.embed_per_search()
        )),
        Some(Err(error)) => notes.push(format!("embedding failed: {error}")),
        _ => {}
    }
    let hits = found.hits;
    notes.extend(found.note);
    if search.json {
        for note in &notes {
            tracing::warn!("{note}");
        }
        return Ok(serde_json::to_string_pretty(&hits).unwrap_or_else(|_| "[]".into()));
    }
    let notes: String = notes.iter().map(|n| format!("\n({n})")).collect();
    if hits.is_empty() {
        return Ok(format!(
            "Nothing in memory matches {:?}.{notes}",
            search.query
        ));
    }
    let mut out = String::new();
    for (n, hit) in hits.iter().enumerate() {
        let at = hit.at.map_or_else(
            || "-".to_owned(),
            |at| at.format("%Y-%m-%d %H:%M").to_string(),
        );
        let _ = writeln!(
            out,
            "[{}] {} · {at} · score {:.2}\n    {}\n",
            n + 1,
            hit.source,
            hit.score,
            hit.snippet
        );
    }
    Ok(format!("{}{notes}", out.trim_end()))
}

/// `nanobot memory reindex`: feeds the scope's index everything again, in place
/// (`Indexer::reindex`: searches meanwhile still find what was indexed).
pub async fn memory_reindex(bot: &Bot) -> Result<String, AppError> {
    let index = search_index(bot)?;
    let started = std::time::Instant::now();
    let pass = bot
        .memory
        .indexer(index.clone(), bot.agent.counter().clone())
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
    if let Some(lane) = bot.search.vector_lane(&bot.memory) {
        // Every vector again, with the configured model (also what resumes a lane paused
        // by a model change).
        let started = std::time::Instant::now();
        let embedded = lane.reembed().await?;
        let _ = write!(
            said,
            "\nEmbedded {} chunks with {} in {:.1} s.",
            embedded.embedded,
            bot.config
                .search
                .embeddings_model
                .as_deref()
                .unwrap_or("the configured model"),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(said)
}

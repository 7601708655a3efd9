//! What the bot answers to its commands. The chat's slash commands and the operator's
//! reports are the library's (`nanobot_memory::ScopeCommands`); memory search and reindex,
//! which take the command line's options, are here.

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
    Ok(bot.commands().memory_search(&request, search.json).await?)
}

//! What the bot answers to its commands: the chat's slash commands and the command line's
//! subcommands share these functions, which return text (deterministic for snapshots).

use std::fmt::Write as _;
use std::sync::Arc;

use nanobot_dream::{Trigger, format};
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};
use nanobot_session_store::SessionKey;

use crate::bot::Bot;
use crate::error::AppError;

/// The chat's commands.
pub const HELP: &str = "Commands:
/new                 start over; the conversation so far is archived to memory
/status              session, messages, context use, last consolidation, next Dream
/dream               run Dream now over new history
/dream-log [id]      Dream's versions, or one version with its changes
/dream-restore [id]  Dream versions to restore, or restore to before one (undoable)
/dream-prompt [init] Dream's instructions: default or this workspace's; init copies the default
/help                this list
Ctrl-C cancels an answer; Ctrl-D leaves.";

/// Answers a slash command; `None` when `line` is not one.
pub async fn slash(bot: &Bot, key: &SessionKey, line: &str) -> Option<Result<String, AppError>> {
    let mut words = line.split_whitespace();
    let command = words.next()?;
    let argument = words.next();
    Some(match command {
        "/new" => bot.new_session(key).await,
        "/status" => status(bot, key).await,
        "/dream" => dream_run(bot, false).await,
        "/dream-log" => dream_log(bot, argument).await,
        "/dream-restore" => dream_restore(bot, argument).await,
        "/dream-prompt" => dream_prompt(bot, argument).await,
        "/help" => Ok(HELP.to_owned()),
        _ if command.starts_with('/') => Ok(format!("Unknown command {command}.\n{HELP}")),
        _ => return None,
    })
}

/// `/status`.
pub async fn status(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    let handle = bot.memory.sessions.get_or_create(key).await?;
    let (count, archived, estimate) = handle.read(|s| {
        (
            s.messages().len(),
            s.last_consolidated(),
            bot.memory.consolidator.estimate(s),
        )
    });
    let budget = bot.memory.consolidator.config().budget().max(1);
    let mut out = format!(
        "Session: {key}\nMessages: {count} ({archived} archived, {} live)\nContext: {estimate} of {budget} tokens of the input budget ({}%)\n",
        count - archived.min(count),
        estimate * 100 / budget
    );
    let last = bot.memory.journal.read_last(50).await?;
    match last
        .iter()
        .rev()
        .find(|e| e.session_key.as_deref() == Some(key.as_str()))
    {
        Some(entry) => {
            let _ = writeln!(
                out,
                "Last consolidation: journal entry {} at {}",
                entry.cursor, entry.timestamp
            );
        }
        None => out.push_str("Last consolidation: none yet\n"),
    }
    if let Some(failure) = handle.read(crate::bot::background_failure) {
        let _ = writeln!(out, "Last background failure: {failure}");
    }
    if let Some(raw) = handle.read(crate::bot::last_raw_archive) {
        let _ = writeln!(out, "Last raw archive (no summary): {raw}");
    }
    let unread = bot
        .memory
        .journal
        .latest_cursor()
        .await?
        .saturating_sub(bot.memory.journal.dream_cursor().await?);
    let _ = writeln!(out, "Journal: {unread} entries not yet read by Dream");
    let _ = writeln!(out, "{}", bot.agent.tool_status(&bot.memory));
    match &bot.schedule {
        Some(schedule) => {
            let now = bot.clock.now();
            match bot.memory.dream.next_run(schedule, now).await? {
                Some(next) if next <= now => {
                    let _ = write!(out, "Next Dream: due now ({})", schedule.describe());
                }
                Some(next) => {
                    let _ = write!(
                        out,
                        "Next Dream: {} ({})",
                        next.format("%Y-%m-%d %H:%M UTC"),
                        schedule.describe()
                    );
                }
                None => out.push_str("Next Dream: never (the cron expression has no future time)"),
            }
        }
        None => out.push_str("Next Dream: disabled"),
    }
    Ok(out)
}

/// `/dream` and `nanobot dream run [--dry-run]`.
pub async fn dream_run(bot: &Bot, dry_run: bool) -> Result<String, AppError> {
    let report = if dry_run {
        bot.memory.dream.dry_run().await
    } else {
        bot.memory.dream.run(Trigger::Manual).await
    };
    crate::bot::clear_progress();
    Ok(format::run_reply(&report?))
}

/// `/dream-log [id]`.
pub async fn dream_log(bot: &Bot, id: Option<&str>) -> Result<String, AppError> {
    Ok(match id {
        Some(id) => {
            let (version, diffs) = bot.memory.dream.show(id).await?;
            format::show(&version, &diffs)
        }
        None => {
            let mut out = format::log(&bot.memory.dream.log(20).await?);
            // A workspace nanobot-ai curated keeps its versions in the workspace's own
            // `.git`: shown too, read-only, so nothing recorded there is out of sight.
            match nanobot_memory_store::workspace_git_history(&bot.config.workspace, 20) {
                Ok(Some(history)) if !history.is_empty() => {
                    let _ = write!(
                        out,
                        "\n\nEarlier versions in {} (nanobot-ai's; read-only, view them with git):",
                        bot.config.workspace.join(".git").display()
                    );
                    for version in history {
                        let _ = write!(
                            out,
                            "\n  {}  {}  {}",
                            &version.id[..8],
                            version.time.format("%Y-%m-%d %H:%M UTC"),
                            version.message.lines().next().unwrap_or("")
                        );
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = write!(out, "\n\n(The workspace's .git could not be read: {e})");
                }
            }
            out
        }
    })
}

/// `/dream-restore [id]`.
pub async fn dream_restore(bot: &Bot, id: Option<&str>) -> Result<String, AppError> {
    match id {
        Some(id) => Ok(format::restore_reply(&bot.memory.dream.restore(id).await?)),
        None => {
            let versions: Vec<_> = bot
                .memory
                .dream
                .log(50)
                .await?
                .into_iter()
                .filter(|v| v.message.starts_with("dream:"))
                .take(10)
                .collect();
            if versions.is_empty() {
                return Ok("Dream memory has no saved versions to restore yet.".into());
            }
            let mut out = String::from(
                "## Dream Restore\n\nChoose a Dream memory version to restore. Latest first:\n",
            );
            for v in &versions {
                let _ = write!(
                    out,
                    "\n- `{}` {} - {}",
                    v.short_id(),
                    v.time.format("%Y-%m-%d %H:%M UTC"),
                    v.subject()
                );
            }
            out.push_str(
                "\n\nPreview one with `/dream-log <id>`; restore with `/dream-restore <id>`.",
            );
            Ok(out)
        }
    }
}

/// `/dream-prompt [init]`.
pub async fn dream_prompt(bot: &Bot, argument: Option<&str>) -> Result<String, AppError> {
    match argument.map(|a| a.trim().to_ascii_lowercase()) {
        None => {
            let (_, custom) = bot.memory.dream.instructions().await?;
            Ok(if custom {
                "Dream memory instructions: custom for this workspace, in `prompts/dream.md`. Delete or empty that file to go back to the default.".into()
            } else {
                "Dream memory instructions: nanobot default. Run `/dream-prompt init` to create an editable copy at `prompts/dream.md`.".into()
            })
        }
        Some(a) if a == "init" => Ok(if bot.memory.dream.init_instructions().await? {
            "Created Dream memory instructions at `prompts/dream.md`. They fully replace the default; delete or empty the file to go back.".into()
        } else {
            "Dream memory instructions already exist at `prompts/dream.md`.".into()
        }),
        Some(_) => Ok("Usage: /dream-prompt [init]".into()),
    }
}

/// `nanobot sessions list`.
pub async fn sessions_list(bot: &Bot) -> Result<String, AppError> {
    let sessions = bot.memory.sessions.list().await?;
    if sessions.is_empty() {
        return Ok("No sessions yet.".into());
    }
    let mut out = String::new();
    for s in sessions {
        let _ = writeln!(
            out,
            "{}  {} messages  updated {}  {}",
            s.key,
            s.message_count,
            s.updated_at.format("%Y-%m-%d %H:%M"),
            s.preview.chars().take(60).collect::<String>()
        );
    }
    Ok(out.trim_end().to_owned())
}

/// `nanobot sessions show KEY`.
pub async fn sessions_show(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    let loaded = bot.memory.sessions.store().load(key).await?;
    let Some(loaded) = loaded else {
        return Err(AppError::NotFound(format!(
            "There is no session {key}; `nanobot sessions list` shows them."
        )));
    };
    let session = loaded.session;
    let mut out = format!(
        "Session {key}: {} messages, {} archived\n",
        session.messages().len(),
        session.last_consolidated()
    );
    if let Some(failure) = crate::bot::background_failure(&session) {
        let _ = writeln!(out, "Last background failure: {failure}");
    }
    if let Some(raw) = crate::bot::last_raw_archive(&session) {
        let _ = writeln!(out, "Last raw archive (no summary): {raw}");
    }
    for (i, m) in session.messages().iter().enumerate() {
        let marker = if i < session.last_consolidated() {
            "·"
        } else {
            " "
        };
        let content = match m.content() {
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let _ = writeln!(
            out,
            "{marker}[{}] {}: {}",
            i,
            m.role().unwrap_or("?"),
            content
                .replace('\n', " ")
                .chars()
                .take(200)
                .collect::<String>()
        );
    }
    Ok(out.trim_end().to_owned())
}

/// `nanobot sessions export KEY`: the session as JSON lines.
pub async fn sessions_export(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    let loaded = bot.memory.sessions.store().load(key).await?;
    let Some(loaded) = loaded else {
        return Err(AppError::NotFound(format!(
            "There is no session {key}; `nanobot sessions list` shows them."
        )));
    };
    Ok(loaded
        .session
        .messages()
        .iter()
        .map(|m| serde_json::Value::Object(m.fields().clone()).to_string())
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `nanobot sessions delete KEY`.
pub async fn sessions_delete(bot: &Bot, key: &SessionKey) -> Result<String, AppError> {
    Ok(if bot.memory.sessions.delete(key).await? {
        format!("Deleted session {key}.")
    } else {
        format!("There was no session {key}.")
    })
}

/// `nanobot memory show`.
pub async fn memory_show(bot: &Bot) -> Result<String, AppError> {
    let mut out = String::new();
    for document in Document::ALL {
        let text = bot.memory.documents.read_text(document).await?;
        let _ = writeln!(
            out,
            "## {}\n{}",
            document.path(),
            text.as_deref()
                .map(str::trim_end)
                .filter(|t| !t.is_empty())
                .unwrap_or("(empty)")
        );
    }
    let skills: Vec<nanobot_prompt_inputs::SkillInfo> = bot
        .memory
        .documents
        .skills()
        .await?
        .skills
        .iter()
        .map(|s| nanobot_prompt_inputs::skill_info(&s.name, &s.document.text))
        .collect();
    let _ = write!(
        out,
        "## skills\n{}",
        if skills.is_empty() {
            "(none)".to_owned()
        } else {
            skills
                .iter()
                .map(|s| format!("- {}: {}", s.name, s.description.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("\n")
        }
    );
    Ok(out)
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

/// `nanobot memory history [N]`.
pub async fn memory_history(bot: &Bot, count: usize) -> Result<String, AppError> {
    let entries = bot.memory.journal.read_last(count).await?;
    if entries.is_empty() {
        return Ok("The journal is empty: nothing has been consolidated yet.".into());
    }
    let dream_cursor = bot.memory.journal.dream_cursor().await?;
    let mut out = String::new();
    for e in entries {
        let read = if e.cursor <= dream_cursor {
            "read by Dream"
        } else {
            "new"
        };
        let _ = writeln!(
            out,
            "#{} [{}] {} ({read})\n{}\n",
            e.cursor,
            e.timestamp,
            e.session_key.as_deref().unwrap_or("-"),
            e.content.trim_end()
        );
    }
    Ok(out.trim_end().to_owned())
}

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

pub use nanobot_memory::commands::SearchArgs as MemorySearch;

/// `nanobot memory search QUERY`: brings the index up to date, then searches it.
pub async fn memory_search(bot: &Bot, search: &MemorySearch<'_>) -> Result<String, AppError> {
    let request = search.request().map_err(AppError::Usage)?;
    Ok(bot.commands().memory_search(&request, search.json).await?)
}

/// `nanobot memory forget --session KEY`: lists what goes and asks (unless `yes`), then
/// removes it.
pub async fn memory_forget(
    bot: &Bot,
    key: &SessionKey,
    messages: Option<(usize, usize)>,
    yes: bool,
    erase_history: bool,
) -> Result<String, AppError> {
    let bot = &bot.assembled;
    if !yes {
        let plan = match messages {
            Some(range) => bot.forget_messages_plan(key, range, erase_history).await?,
            None => bot.forget_plan(key, erase_history).await?,
        };
        let unread =
            "nothing was removed: no answer was read; run with --yes to remove without asking";
        match confirm(&format!("{}\n\nRemove all this? [y/N] ", plan.describe())) {
            Some(true) => {}
            Some(false) => return Ok("Nothing was removed.".into()),
            None => return Err(AppError::Usage(unread.into())),
        }
    }
    let done = match messages {
        Some(range) => bot.forget_messages(key, range, erase_history).await?,
        None => bot.forget(key, erase_history).await?,
    };
    Ok(done.describe())
}

/// Asks `question` on stderr; the answer read from stdin (`None`: nothing to read).
fn confirm(question: &str) -> Option<bool> {
    use std::io::{BufRead, Write};
    let _ = write!(std::io::stderr(), "{question}");
    let mut answer = String::new();
    match std::io::stdin().lock().read_line(&mut answer) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes")),
    }
}

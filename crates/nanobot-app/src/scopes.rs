//! `nanobot scopes ...` and the scope-wide Dream commands: what each scope holds, identity
//! links, erasure, and the review queue of proposals to the shared files.

use std::fmt::Write as _;

use nanobot_dream::Trigger;
use nanobot_memory::operator::{describe, link_line};
use nanobot_memory_scope::{Subject, UserKey};

use crate::bot::Bot;
use crate::error::AppError;

/// A scope as an operator writes it: `agent`, `user:<platform:id>`, `chat:<channel:id>`, or
/// a bare `platform:id` for a user.
pub fn parse_scope(text: &str) -> Result<Subject, AppError> {
    let text = text.trim();
    let subject = if text == "agent" || text.starts_with("user:") || text.starts_with("chat:") {
        Subject::parse(text)
    } else {
        UserKey::parse(text).map(Subject::User)
    };
    subject.map_err(|e| AppError::Usage(e.to_string()))
}

fn user(text: &str) -> Result<UserKey, AppError> {
    UserKey::parse(text.trim()).map_err(|e| AppError::Usage(e.to_string()))
}

/// `nanobot scopes list`.
pub async fn list(bot: &Bot) -> Result<String, AppError> {
    Ok(bot.assembled.scopes_report(bot.workspace()).await?)
}

/// `nanobot scopes show SCOPE`.
pub async fn show(bot: &Bot, scope: &str) -> Result<String, AppError> {
    Ok(bot.assembled.scope_report(&parse_scope(scope)?).await?)
}

/// `nanobot scopes link TARGET IDENTITY...`.
pub async fn link(
    bot: &Bot,
    target: &str,
    identities: &[String],
    by: &str,
) -> Result<String, AppError> {
    let target = user(target)?;
    let mut out = String::new();
    for identity in identities {
        let identity = user(identity)?;
        let (record, own) = bot
            .assembled
            .link(identity.clone(), target.clone(), by)
            .await?;
        let _ = writeln!(out, "Linked: {}", link_line(&record));
        if let Some(own) = own {
            let _ = writeln!(
                out,
                "  {identity} had memory of its own ({}); it is kept, unused while linked.",
                own.location
            );
        }
    }
    Ok(out.trim_end().to_owned())
}

/// `nanobot scopes unlink IDENTITY`.
pub async fn unlink(bot: &Bot, identity: &str, by: &str) -> Result<String, AppError> {
    let identity = user(identity)?;
    let record = bot.assembled.unlink(&identity, by).await?;
    Ok(format!(
        "Unlinked: {identity} no longer shares {}'s memory (by {}, {}); its next turns use its own.",
        record.target,
        record.by,
        record.at.format("%Y-%m-%d %H:%M UTC")
    ))
}

/// `nanobot scopes delete SCOPE --yes`.
pub async fn delete(bot: &Bot, scope: &str, yes: bool) -> Result<String, AppError> {
    let subject = parse_scope(scope)?;
    if !yes && !subject.is_agent() {
        let held = bot.storage.scope(&subject).await?;
        let held = held.map_or("it holds nothing yet".to_owned(), |s| {
            format!("{} ({})", s.location, describe(&s))
        });
        return Err(AppError::Usage(format!(
            "this erases {subject} for good: {held} and every link naming it; add --yes"
        )));
    }
    let erased = bot.assembled.erase_scope(&subject).await?;
    Ok(format!(
        "Erased {subject}: {}; {} link record(s) removed.",
        if erased.removed {
            "its sessions, journal, documents, versions and Dream records are gone"
        } else {
            "it held nothing"
        },
        erased.links
    ))
}

/// `nanobot dream run --all-scopes`: a run in every scope with unread history.
pub async fn dream_all(bot: &Bot) -> Result<String, AppError> {
    let results = bot.agent.dream_tick(Trigger::Manual).await?;
    crate::bot::clear_progress();
    if results.is_empty() {
        return Ok("No scope has history Dream has not read.".into());
    }
    let mut out = String::new();
    for (scope, result) in results {
        let text = match result {
            Ok(report) => nanobot_dream::format::run_reply(&report),
            Err(e) => format!("failed: {e}"),
        };
        let _ = writeln!(
            out,
            "[{}] {}",
            scope.subject,
            text.lines().next().unwrap_or("")
        );
    }
    Ok(out.trim_end().to_owned())
}

/// `nanobot dream proposals [--dismiss N...]`.
pub async fn proposals(bot: &Bot, dismiss: &[usize]) -> Result<String, AppError> {
    if !dismiss.is_empty() {
        let done: Vec<String> = bot
            .assembled
            .dismiss_proposals(dismiss)
            .await?
            .iter()
            .map(|(n, p)| format!("{n} {} from {}", p.proposal.path, p.memory.scope.subject))
            .collect();
        return Ok(format!("Dismissed: {}.", done.join("; ")));
    }
    Ok(bot.assembled.proposals_report().await?)
}

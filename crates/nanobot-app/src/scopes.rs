//! `nanobot scopes ...` and the scope-wide Dream commands: what each scope holds, identity
//! links, erasure, and the review queue of proposals to the shared files.

use std::fmt::Write as _;

use nanobot_dream::Trigger;
use nanobot_memory::ScopeProposal;
use nanobot_memory_scope::{LinkAction, LinkRecord, ScopeKey, Subject, UserKey, links_in_force};
use nanobot_memory_store::{Document, MemoryDocumentsExt};

use crate::bot::{Bot, ScopeSummary};
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

fn describe(summary: &ScopeSummary) -> String {
    format!(
        "{} session(s), {} journal entries ({} unread by Dream)",
        summary.sessions, summary.entries, summary.unread
    )
}

fn link_line(record: &LinkRecord) -> String {
    format!(
        "{} → {} (by {}, {})",
        record.identity,
        record.target,
        record.by,
        record.at.format("%Y-%m-%d %H:%M UTC")
    )
}

/// `nanobot scopes list`.
pub async fn list(bot: &Bot) -> Result<String, AppError> {
    let mut out = format!(
        "Isolation: {} (memory.isolation)\nScopes:\n",
        bot.config.memory.isolation.name()
    );
    let agent = bot.assembled.agent_summary().await?;
    let _ = writeln!(out, "  agent  ({})  {}", agent.location, describe(&agent));
    for scope in bot.storage.scopes().await? {
        let name = scope
            .location
            .strip_prefix(&format!("{}/", bot.workspace().display()))
            .unwrap_or(&scope.location)
            .to_owned();
        let _ = writeln!(out, "  {}  {name}  {}", scope.subject, describe(&scope));
    }
    let records = bot.links.records().await?;
    let links = links_in_force(&records);
    if links.is_empty() {
        out.push_str("Links: none");
    } else {
        out.push_str("Links:");
        for (identity, target) in &links {
            let made = records
                .iter()
                .rev()
                .find(|r| r.identity == *identity && r.action == LinkAction::Link);
            match made {
                Some(record) => {
                    let _ = write!(out, "\n  {}", link_line(record));
                }
                None => {
                    let _ = write!(out, "\n  {identity} → {target}");
                }
            }
        }
    }
    Ok(out)
}

/// `nanobot scopes show SCOPE`.
pub async fn show(bot: &Bot, scope: &str) -> Result<String, AppError> {
    let subject = parse_scope(scope)?;
    let summary = if subject.is_agent() {
        bot.assembled.agent_summary().await?
    } else {
        bot.storage.scope(&subject).await?.ok_or_else(|| {
            AppError::NotFound(format!(
                "there is no scope {subject} (it is made by its first turn)"
            ))
        })?
    };
    let mut out = format!("Scope: {subject}\nWhere: {}\n", summary.location);
    let _ = writeln!(out, "Holds: {}", describe(&summary));
    let memory = bot.agent.memory(&ScopeKey::local(subject.clone())).await?;
    for document in [Document::User, Document::Memory] {
        let text = memory.documents.read_text(document).await?;
        let _ = writeln!(
            out,
            "{}: {}",
            document.path(),
            text.map_or("none".to_owned(), |t| format!("{} bytes", t.len()))
        );
    }
    if let Subject::User(user) = &subject {
        let records = bot.links.records().await?;
        let links = links_in_force(&records);
        let sharing: Vec<String> = links
            .iter()
            .filter(|(_, t)| *t == user)
            .map(|(i, _)| i.to_string())
            .collect();
        if let Some(target) = links.get(user) {
            let _ = writeln!(
                out,
                "Linked: turns of {user} use {target}'s memory, not this one"
            );
        }
        let _ = writeln!(
            out,
            "Shared with: {}",
            if sharing.is_empty() {
                "nobody".to_owned()
            } else {
                sharing.join(", ")
            }
        );
    }
    if !subject.is_agent() {
        let proposals = memory.dream.proposals().await?;
        let _ = write!(
            out,
            "Proposals to the shared files: {} (nanobot dream proposals)",
            proposals.len()
        );
    }
    Ok(out.trim_end().to_owned())
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
    let all = bot.assembled.proposals().await?;
    if all.is_empty() {
        return Ok(
            "No proposals: no user's or chat's Dream proposed a change to SOUL.md or a skill."
                .into(),
        );
    }
    let mut out = String::new();
    for (
        n,
        ScopeProposal {
            memory, proposal, ..
        },
    ) in all.iter().enumerate()
    {
        let _ = writeln!(
            out,
            "{}. {} proposes a change to {} ({}, from journal entries {}-{}):",
            n + 1,
            memory.scope.subject,
            proposal.path,
            proposal.at.format("%Y-%m-%d %H:%M UTC"),
            proposal.entries.0,
            proposal.entries.1
        );
        if let Some(diff) = proposal.diff() {
            for line in diff.unified.lines() {
                let _ = writeln!(out, "   {line}");
            }
        }
    }
    out.push_str("Apply one by editing the file; then remove it with --dismiss N.");
    Ok(out)
}

//! `nanobot scopes ...` and the scope-wide Dream commands: what each scope holds, identity
//! links, erasure, and the review queue of proposals to the shared files.

use std::fmt::Write as _;

use chrono::Utc;
use nanobot_dream::Trigger;
use nanobot_memory_scope::{LinkAction, LinkRecord, ScopeKey, Subject, UserKey, links_in_force};
use nanobot_memory_store::{Document, HistoryJournal, MemoryDocumentsExt};

use crate::bot::{Bot, ScopeSummary, Storage};
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

/// The agent scope's holdings, through its stores.
async fn agent_summary(bot: &Bot) -> Result<ScopeSummary, AppError> {
    let memory = bot.agent.memory(&ScopeKey::local(Subject::Agent)).await?;
    let entries = memory.journal.latest_cursor().await?;
    let dream = memory.journal.dream_cursor().await?;
    let location = match &bot.storage {
        Storage::Postgres(store) => format!("schema {}, scope agent", store.schema().name()),
        _ => "the workspace".into(),
    };
    let sessions = memory.sessions.list().await?.len();
    Ok(ScopeSummary::counted(
        Subject::Agent,
        location,
        sessions,
        entries,
        dream,
    ))
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
    let agent = agent_summary(bot).await?;
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
        agent_summary(bot).await?
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
        let record = LinkRecord {
            action: LinkAction::Link,
            identity: identity.clone(),
            target: target.clone(),
            by: by.to_owned(),
            at: Utc::now(),
        };
        bot.links.append(record.clone()).await?;
        let _ = writeln!(out, "Linked: {}", link_line(&record));
        if let Some(own) = bot.storage.scope(&Subject::User(identity.clone())).await? {
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
    let links = links_in_force(&bot.links.records().await?);
    let Some(target) = links.get(&identity).cloned() else {
        return Err(AppError::NotFound(format!("{identity} is not linked")));
    };
    let record = LinkRecord {
        action: LinkAction::Unlink,
        identity: identity.clone(),
        target,
        by: by.to_owned(),
        at: Utc::now(),
    };
    bot.links.append(record.clone()).await?;
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
    if subject.is_agent() {
        return Err(AppError::Usage(
            "the agent scope is the workspace itself; it is not erased by this command".into(),
        ));
    }
    let held = bot.storage.scope(&subject).await?;
    if !yes {
        return Err(AppError::Usage(format!(
            "this erases {subject} for good: {} and every link naming it; add --yes",
            held.map_or("it holds nothing yet".to_owned(), |s| format!(
                "{} ({})",
                s.location,
                describe(&s)
            ))
        )));
    }
    bot.agent
        .forget_memory(&ScopeKey::local(subject.clone()))
        .await;
    let removed = bot.storage.erase(&subject).await?;
    let links = match &subject {
        Subject::User(user) => bot.links.forget(user).await?,
        _ => 0,
    };
    if !removed && links == 0 {
        return Err(AppError::NotFound(format!(
            "there is no scope {subject} to erase"
        )));
    }
    Ok(format!(
        "Erased {subject}: {}; {links} link record(s) removed.",
        if removed {
            "its sessions, journal, documents, versions and Dream records are gone"
        } else {
            "it held nothing"
        }
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
    let mut all = Vec::new();
    for scope in bot.storage.scopes().await? {
        let memory = bot
            .agent
            .memory(&ScopeKey::local(scope.subject.clone()))
            .await?;
        for (index, proposal) in memory.dream.proposals().await?.into_iter().enumerate() {
            all.push((memory.clone(), index, proposal));
        }
    }
    if !dismiss.is_empty() {
        if let Some(bad) = dismiss.iter().find(|n| **n == 0 || **n > all.len()) {
            return Err(AppError::Usage(format!(
                "there is no proposal {bad} (there are {})",
                all.len()
            )));
        }
        let mut done = Vec::new();
        for (n, (memory, index, proposal)) in all.iter().enumerate() {
            if dismiss.contains(&(n + 1)) {
                memory.dream.dismiss_proposals(&[*index]).await?;
                done.push(format!(
                    "{} {} from {}",
                    n + 1,
                    proposal.path,
                    memory.scope.subject
                ));
            }
        }
        return Ok(format!("Dismissed: {}.", done.join("; ")));
    }
    if all.is_empty() {
        return Ok(
            "No proposals: no user's or chat's Dream proposed a change to SOUL.md or a skill."
                .into(),
        );
    }
    let mut out = String::new();
    for (n, (memory, _, proposal)) in all.iter().enumerate() {
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

//! The operator's reports on scopes, as text: every scope with what it holds and the links
//! in force, one scope in detail, and the proposals queue.

use std::fmt::Write as _;

use nanobot_memory_scope::{LinkAction, LinkRecord, ScopeKey, Subject, links_in_force};
use nanobot_memory_store::{Document, MemoryDocumentsExt};

use super::ScopeProposal;
use crate::{AssemblyError, Bot, ScopeSummary};

/// What a scope holds, in one line.
pub fn describe(summary: &ScopeSummary) -> String {
    format!(
        "{} session(s), {} journal entries ({} unread by Dream)",
        summary.sessions, summary.entries, summary.unread
    )
}

/// A link record: who shares whose memory, by whom and when.
pub fn link_line(record: &LinkRecord) -> String {
    format!(
        "{} → {} (by {}, {})",
        record.identity,
        record.target,
        record.by,
        record.at.format("%Y-%m-%d %H:%M UTC")
    )
}

impl Bot {
    /// Every scope (the agent's first; locations under `workspace` shown relative to it)
    /// and the links in force.
    pub async fn scopes_report(
        &self,
        workspace: &std::path::Path,
    ) -> Result<String, AssemblyError> {
        let isolation = self.resolver.mode().name();
        let mut out = format!("Isolation: {isolation} (memory.isolation)\nScopes:\n");
        let agent = self.agent_summary().await?;
        let _ = writeln!(out, "  agent  ({})  {}", agent.location, describe(&agent));
        let prefix = format!("{}/", workspace.display());
        for scope in self.storage.scopes().await? {
            let name = scope
                .location
                .strip_prefix(&prefix)
                .unwrap_or(&scope.location);
            let _ = writeln!(out, "  {}  {name}  {}", scope.subject, describe(&scope));
        }
        let records = self.links.records().await?;
        let links = links_in_force(&records);
        if links.is_empty() {
            out.push_str("Links: none");
            return Ok(out);
        }
        out.push_str("Links:");
        for (identity, target) in &links {
            let made = records
                .iter()
                .rev()
                .find(|r| r.identity == *identity && r.action == LinkAction::Link);
            let _ = match made {
                Some(record) => write!(out, "\n  {}", link_line(record)),
                None => write!(out, "\n  {identity} → {target}"),
            };
        }
        Ok(out)
    }

    /// One scope: where it is, what it holds, its files' sizes, its links, its proposals.
    pub async fn scope_report(&self, subject: &Subject) -> Result<String, AssemblyError> {
        let summary = if subject.is_agent() {
            self.agent_summary().await?
        } else {
            self.storage
                .scope(subject)
                .await?
                .ok_or_else(|| AssemblyError::NotFound {
                    what: format!("there is no scope {subject} (it is made by its first turn)"),
                })?
        };
        let mut out = format!("Scope: {subject}\nWhere: {}\n", summary.location);
        let _ = writeln!(out, "Holds: {}", describe(&summary));
        let memory = self.agent.memory(&ScopeKey::local(subject.clone())).await?;
        for document in [Document::User, Document::Memory] {
            let text = memory.documents.read_text(document).await?;
            let size = text.map_or("none".to_owned(), |t| format!("{} bytes", t.len()));
            let _ = writeln!(out, "{}: {size}", document.path());
        }
        if let Subject::User(user) = subject {
            let links = links_in_force(&self.links.records().await?);
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
            let sharing = if sharing.is_empty() {
                "nobody".to_owned()
            } else {
                sharing.join(", ")
            };
            let _ = writeln!(out, "Shared with: {sharing}");
        }
        if !subject.is_agent() {
            let proposals = memory.dream.proposals().await?.len();
            let _ = write!(
                out,
                "Proposals to the shared files: {proposals} (nanobot dream proposals)"
            );
        }
        Ok(out.trim_end().to_owned())
    }

    /// The proposals queue: each with its scope, file, time, entries and diff.
    pub async fn proposals_report(&self) -> Result<String, AssemblyError> {
        let all = self.proposals().await?;
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
}

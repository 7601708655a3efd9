//! The pages about memory's history: the files with their provenance, the versions and
//! their diffs, the restore confirmation, and the review queue. Plain data in, escaped
//! markup out (see [`super::pages`]).

use nanobot_dream::diff::FileDiff;
use nanobot_dream::{BlameLine, Decision, Proposal};
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_store::Version;

use super::html::{Markup, el, link, tag_text, void};
use super::pages::{post_form, scope_href};

/// The memory files, each line with where it came from.
pub(crate) fn memory(files: &[(String, Vec<BlameLine>)]) -> Markup {
    if files.is_empty() {
        return tag_text("p", "No memory files yet.");
    }
    let sections = files.iter().map(|(path, lines)| {
        let rows = lines.iter().map(|line| {
            let origin = line.origin.as_ref().map_or_else(
                || "not in a version yet".to_owned(),
                |o| {
                    let by = if o.by_dream { "Dream" } else { "an edit" };
                    let sources: Vec<String> = o.sources.iter().map(ToString::to_string).collect();
                    let from = if sources.is_empty() {
                        String::new()
                    } else {
                        format!(" from {}", sources.join("; "))
                    };
                    format!("{} by {by}{from}", o.version.short_id())
                },
            );
            el(
                "tr",
                &[],
                Markup::join([
                    tag_text("td", &line.number.to_string()),
                    el("td", &[], tag_text("code", &line.text)),
                    el("td", &[("class", "origin")], Markup::text(&origin)),
                ]),
            )
        });
        el(
            "section",
            &[],
            tag_text("h2", path).then(el("table", &[("class", "blame")], Markup::join(rows))),
        )
    });
    Markup::join(sections)
}

/// The versions, newest first.
pub(crate) fn versions(scope: &ScopeKey, log: &[Version]) -> Markup {
    if log.is_empty() {
        return tag_text("p", "No versions yet.");
    }
    let rows = log.iter().map(|v| {
        el(
            "li",
            &[],
            Markup::join([
                link(
                    &scope_href("version", scope, &[("id", &v.id)]),
                    v.short_id(),
                ),
                Markup::text(&format!(
                    " {} {}",
                    v.time.format("%Y-%m-%d %H:%M"),
                    v.subject()
                )),
            ]),
        )
    });
    el("ul", &[("class", "versions")], Markup::join(rows))
}

/// One version: its message and its diffs, with the way to restore the state before it.
pub(crate) fn version(scope: &ScopeKey, version: &Version, diffs: &[FileDiff]) -> Markup {
    let restore = if version.message.starts_with("dream:") {
        el(
            "p",
            &[],
            link(
                &scope_href("restore", scope, &[("id", &version.id)]),
                "Restore the state before this version…",
            ),
        )
    } else {
        tag_text("p", "Not a Dream version: it cannot be restored from here.")
    };
    Markup::join([tag_text("pre", &version.message), diff_list(diffs), restore])
}

/// The confirmation before a restore.
pub(crate) fn restore_confirm(scope: &ScopeKey, version: &Version, csrf: &str) -> Markup {
    let scope_text = scope.to_string();
    Markup::join([
        tag_text(
            "p",
            &format!(
                "Restore the memory files and Dream's cursor to their state before {} ({})? The restore is itself a version that can be restored.",
                version.short_id(),
                version.subject()
            ),
        ),
        post_form(
            "/ui/restore",
            csrf,
            &[("scope", &scope_text), ("id", &version.id)],
            el("button", &[("type", "submit")], Markup::text("Restore")),
        ),
        link(
            &scope_href("version", scope, &[("id", &version.id)]),
            "Cancel",
        ),
    ])
}

/// Diffs as their unified text, added and removed lines marked for the style sheet.
pub(crate) fn diff_list(diffs: &[FileDiff]) -> Markup {
    Markup::join(diffs.iter().map(|diff| {
        let lines = diff.unified.lines().map(|line| {
            let class = match line.chars().next() {
                Some('+') if !line.starts_with("+++") => "add",
                Some('-') if !line.starts_with("---") => "del",
                _ => "ctx",
            };
            // Each line a block of its own (the style sheet), so no newline between them.
            el("span", &[("class", class)], Markup::text(line))
        });
        el(
            "section",
            &[("class", "diff")],
            tag_text(
                "h3",
                &format!("{} (+{} −{})", diff.path, diff.added, diff.removed),
            )
            .then(el("pre", &[], Markup::join(lines))),
        )
    }))
}

/// The review queue: each proposal's diff and reason with approve and reject, the scope's
/// setting, and the decisions taken.
pub(crate) fn review(
    scope: &ScopeKey,
    proposals: &[Proposal],
    every_edit: bool,
    decisions: &[Decision],
    csrf: &str,
) -> Markup {
    let scope_text = scope.to_string();
    let queue = if proposals.is_empty() {
        tag_text("p", "Nothing waits for review.")
    } else {
        Markup::join(
            proposals
                .iter()
                .map(|p| proposal_item(&scope_text, p, csrf)),
        )
    };
    let (setting, button, value) = if every_edit {
        (
            "Every Dream edit of this scope waits for review.",
            "Apply Dream's edits directly",
            "off",
        )
    } else {
        (
            "Dream applies this scope's edits directly (changes to shared files still wait for review).",
            "Make every Dream edit wait for review",
            "on",
        )
    };
    let setting = el(
        "section",
        &[("class", "setting")],
        tag_text("p", setting).then(post_form(
            "/ui/review/setting",
            csrf,
            &[("scope", &scope_text), ("every_edit", value)],
            el("button", &[("type", "submit")], Markup::text(button)),
        )),
    );
    let past = decisions.iter().rev().take(20).map(|d| {
        let what = if d.approved { "approved" } else { "rejected" };
        let reason = if d.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", d.reason)
        };
        tag_text(
            "li",
            &format!(
                "{} {what} {} ({}){reason}",
                d.at.format("%Y-%m-%d %H:%M"),
                d.path,
                d.proposal
            ),
        )
    });
    Markup::join([
        tag_text("h2", "Waiting"),
        queue,
        setting,
        tag_text("h2", "Decided"),
        el("ul", &[("class", "decisions")], Markup::join(past)),
    ])
}

fn proposal_item(scope: &str, proposal: &Proposal, csrf: &str) -> Markup {
    let id = proposal.id();
    let diff = proposal.diff().map_or(Markup::empty(), |d| diff_list(&[d]));
    let reason = if proposal.reason.trim().is_empty() {
        "(no reason recorded)".to_owned()
    } else {
        proposal.reason.trim().to_owned()
    };
    let approve = post_form(
        "/ui/review/decide",
        csrf,
        &[("scope", scope), ("id", &id), ("decision", "approve")],
        el(
            "button",
            &[("type", "submit"), ("class", "approve")],
            Markup::text("Approve"),
        ),
    );
    let reject = post_form(
        "/ui/review/decide",
        csrf,
        &[("scope", scope), ("id", &id), ("decision", "reject")],
        Markup::join([
            void(
                "input",
                &[
                    ("type", "text"),
                    ("name", "reason"),
                    ("placeholder", "Why not?"),
                    ("aria-label", "Why not?"),
                ],
            ),
            el(
                "button",
                &[("type", "submit"), ("class", "reject")],
                Markup::text("Reject"),
            ),
        ]),
    );
    el(
        "article",
        &[("class", "proposal"), ("id", &format!("proposal-{id}"))],
        Markup::join([
            tag_text(
                "h3",
                &format!(
                    "{} · proposed {} from journal entries {}-{}",
                    proposal.path,
                    proposal.at.format("%Y-%m-%d %H:%M"),
                    proposal.entries.0,
                    proposal.entries.1
                ),
            ),
            el("pre", &[("class", "reason")], Markup::text(&reason)),
            diff,
            el("div", &[("class", "actions")], approve.then(reject)),
        ]),
    )
}

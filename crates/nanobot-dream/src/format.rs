//! Text for people: a run's outcome, the log, one version, a restore. Deterministic, so
//! chat replies can be snapshot-tested.

use std::fmt::Write as _;

use nanobot_memory_store::Version;

use crate::diff::{FileDiff, summary};
use crate::run::{BlameLine, HistoryMatches, Origin, RestoreReport, RunReport, RunStatus};

fn time(v: &Version) -> String {
    v.time.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The reply to `/dream`.
pub fn run_reply(report: &RunReport) -> String {
    let seconds = (report.finished - report.started).num_milliseconds() as f64 / 1000.0;
    let batch = report
        .batch
        .map(|(first, last, n)| format!("{n} journal entries ({first}-{last})"))
        .unwrap_or_default();
    let mut reply = run_status(report, seconds, &batch);
    if !report.superseded.is_empty() {
        reply.push_str("\n\nCorrections that replaced the line they correct:");
        for s in &report.superseded {
            let _ = write!(
                reply,
                "\n- {}: \"{}\" replaced by \"{}\"",
                s.path, s.old, s.new
            );
        }
    }
    if !report.repeats.is_empty() {
        reply.push_str("\n\nLines not added because memory already says them:");
        for r in &report.repeats {
            let _ = write!(
                reply,
                "\n- {}: \"{}\" repeats {}: \"{}\"",
                r.path, r.line, r.existing_path, r.existing
            );
        }
    }
    if !report.refused.is_empty() {
        reply.push_str("\n\nRefused edits (they changed nothing):");
        for line in &report.refused {
            let _ = write!(reply, "\n- {line}");
        }
    }
    reply
}

fn run_status(report: &RunReport, seconds: f64, batch: &str) -> String {
    match &report.status {
        RunStatus::NothingToDo => "Dream has no conversation history to process yet. It reads the entries of `memory/history.jsonl` after its cursor; conversations reach that file when they are consolidated or after an idle auto-compact.".to_owned(),
        RunStatus::Completed if report.dry_run => {
            if report.changes.is_empty() {
                format!("Dry run over {batch} in {seconds:.1}s: no memory changes would be made.")
            } else {
                format!("Dry run over {batch} in {seconds:.1}s; nothing was applied. It would make these changes:\n\n{}", report.summary)
            }
        }
        RunStatus::Completed => {
            let mut out = format!("Dream completed in {seconds:.1}s over {batch}");
            match &report.version {
                Some(v) if report.changes.is_empty() => {
                    let _ = write!(out, "; no memory changes (version `{}` records the facts it heard again).", v.short_id());
                }
                Some(v) => {
                    let _ = write!(out, " (version `{}`).\n\n{}", v.short_id(), report.summary);
                }
                None if report.changes.is_empty() => out.push_str("; no memory changes."),
                None => {
                    let _ = write!(out, ".\n\n{}", report.summary);
                }
            }
            out
        }
        RunStatus::Stopped(reason) => format!(
            "Dream did not complete after {seconds:.1}s ({reason}); nothing was changed and the memory cursor was not advanced."
        ),
    }
}

/// The log: one line per version, newest first.
pub fn log(versions: &[Version]) -> String {
    if versions.is_empty() {
        return "Dream memory has no saved versions yet.".to_owned();
    }
    let mut out = String::from("## Dream Log\n");
    for v in versions {
        let _ = write!(out, "\n- `{}` {} - {}", v.short_id(), time(v), v.subject());
    }
    out.push_str("\n\nShow one with `/dream-log <id>`; undo one with `/dream-restore <id>`.");
    out
}

/// One version and its changes.
pub fn show(version: &Version, diffs: &[FileDiff]) -> String {
    let mut out = format!(
        "## Dream Update\n\n- Commit: `{}`\n- Time: {}\n- Message: {}\n- Changed files: ",
        version.short_id(),
        time(version),
        version.subject()
    );
    if diffs.is_empty() {
        out.push_str("none\n\nThis version recorded no file changes.");
        return out;
    }
    let files: Vec<String> = diffs.iter().map(|d| format!("`{}`", d.path)).collect();
    out.push_str(&files.join(", "));
    if version.message.starts_with("dream:") {
        let _ = write!(
            out,
            "\n\nUse `/dream-restore {}` to undo this change.",
            version.short_id()
        );
    }
    out.push_str("\n\n");
    out.push_str(&summary(diffs));
    out
}

/// The reply to `/dream-restore <id>`.
pub fn restore_reply(report: &RestoreReport) -> String {
    match &report.version {
        None => format!(
            "Memory already matches the state before `{}`; nothing was changed.",
            report.undone.short_id()
        ),
        Some(v) => {
            let files: Vec<String> = report
                .changes
                .iter()
                .map(|d| format!("`{}`", d.path))
                .collect();
            format!(
                "Restored Dream memory to the state before `{}`.\n- New version: `{}` (restore it to undo this)\n- Restored files: {}",
                report.undone.short_id(),
                v.short_id(),
                if files.is_empty() {
                    "only Dream's cursor".to_owned()
                } else {
                    files.join(", ")
                }
            )
        }
    }
}

/// `nanobot memory blame FILE`: each line with the version that wrote it and, for fact
/// lines, the journal entries (and so the conversations) it came from.
pub fn blame(path: &str, lines: &[BlameLine]) -> String {
    let mut out = format!("{path}, {} lines\n", lines.len());
    let width = lines.len().to_string().len();
    for line in lines {
        let by = match &line.origin {
            Some(origin) => origin.version.short_id().to_owned(),
            None => "(unsaved)".to_owned(),
        };
        let shown = format!("{:>width$} {by:<9} {}", line.number, line.text);
        let _ = write!(out, "\n{}", shown.trim_end());
        if let Some(origin) = line
            .origin
            .as_ref()
            .filter(|_| crate::lines::is_fact(&line.text))
        {
            let _ = write!(out, "\n{:>width$} {:<9}   {}", "", "", origin_note(origin));
        }
    }
    out
}

fn origin_note(origin: &Origin) -> String {
    let when = time(&origin.version);
    let sources: Vec<String> = origin.sources.iter().map(|s| s.to_string()).collect();
    match (origin.by_dream, sources.is_empty()) {
        (true, false) => format!("Dream, {when}, from {}", sources.join("; ")),
        (true, true) => format!("Dream, {when}, sources not recorded"),
        (false, _) => format!("written outside Dream, saved {when}"),
    }
}

/// `nanobot memory history QUERY`: the matching lines held now, then those replaced or
/// removed, each with the time it was held and what took its place.
pub fn history(query: &str, found: &HistoryMatches) -> String {
    if found.current.is_empty() && found.past.is_empty() {
        return format!("No memory line, now or before, mentions \"{query}\".");
    }
    let mut out = String::new();
    if !found.current.is_empty() {
        out.push_str("Held now:\n");
        for (path, text, origin) in &found.current {
            let _ = write!(out, "\n{path}: {}", text.trim());
            if let Some(origin) = origin {
                let _ = write!(out, "\n  since {}", origin_note(origin));
            }
        }
        out.push_str("\n\n");
    }
    if !found.past.is_empty() {
        out.push_str("No longer held (oldest first):\n");
        for past in &found.past {
            let _ = write!(out, "\n{}: {}", past.path, past.text.trim());
            let from = past
                .origin
                .as_ref()
                .map_or_else(|| "?".to_owned(), |o| time(&o.version));
            let _ = write!(
                out,
                "\n  held from {from} until {} (version {}: {})",
                time(&past.until),
                past.until.short_id(),
                past.until.subject()
            );
            match past.replaced_by.as_slice() {
                [] => out.push_str("\n  removed"),
                lines => {
                    let lines: Vec<&str> = lines.iter().map(|l| l.trim()).collect();
                    let _ = write!(out, "\n  replaced by: {}", lines.join(" / "));
                }
            }
            if !past.because.is_empty() {
                let why: Vec<String> = past.because.iter().map(|s| s.to_string()).collect();
                let _ = write!(out, "\n  because of {}", why.join("; "));
            }
            if let Some(origin) = &past.origin {
                let _ = write!(out, "\n  came from {}", origin_note(origin));
            }
        }
    }
    out.trim_end().to_owned()
}

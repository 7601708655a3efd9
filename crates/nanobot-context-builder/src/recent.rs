//! The Recent History part: journal entries Dream has not folded into memory yet, newest
//! kept when they do not all fit.

use std::collections::HashMap;
use std::sync::Mutex;

use nanobot_llm_port::TokenCounter;
use nanobot_memory_store::JournalEntry;

use crate::Summary;

/// What happened to the journal entries a build was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecentHistoryReport {
    /// Entries in the turn's scope (after the entry-count cap and the summary's duplicate).
    pub considered: usize,
    /// Entries shown in the prompt (the newest ones).
    pub shown: usize,
    /// Whether the newest entry alone was over the budget and was cut.
    pub newest_cut: bool,
}

/// Whether a journal entry's session is internal (never shown to other sessions).
fn is_internal(key: &str) -> bool {
    key == "heartbeat" || key.starts_with("cron:") || key.starts_with("dream:")
}

/// Per-entry token counts, by cursor and rendered length: journal entries never change once
/// written, so each is counted once.
#[derive(Debug, Default)]
pub(crate) struct EntryCounts {
    counts: Mutex<HashMap<(u64, usize), usize>>,
}

impl EntryCounts {
    fn count(&self, counter: &dyn TokenCounter, cursor: u64, line: &str) -> usize {
        let key = (cursor, line.len());
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get(&key) {
            return *n;
        }
        if counts.len() > 4096 {
            counts.clear();
        }
        let n = counter.count(line);
        counts.insert(key, n);
        n
    }
}

pub(crate) struct Scope<'a> {
    pub(crate) session_key: Option<&'a str>,
    pub(crate) unified: bool,
    pub(crate) summary: Option<&'a Summary>,
    pub(crate) max_entries: usize,
    pub(crate) max_tokens: usize,
}

/// The part's text (without it when nothing is left) and what happened.
pub(crate) fn render(
    entries: &[JournalEntry],
    scope: &Scope<'_>,
    counter: &dyn TokenCounter,
    counts: &EntryCounts,
) -> (Option<String>, RecentHistoryReport) {
    let chosen = chosen_entries(entries, scope);
    let mut report = RecentHistoryReport {
        considered: chosen.len(),
        ..RecentHistoryReport::default()
    };
    if chosen.is_empty() {
        return (None, report);
    }
    let lines: Vec<String> = chosen.iter().map(|e| entry_line(e)).collect();

    // Newest first, whole entries, while they fit.
    let total_bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    let mut first = 0;
    let mut newest_cut = None;
    if total_bytes > scope.max_tokens {
        let reserve = counter.count(&omitted_line(chosen.len())) + 1;
        let mut used = 0;
        first = lines.len();
        for (i, line) in lines.iter().enumerate().rev() {
            let tokens = counts.count(counter, chosen[i].cursor, line) + 1;
            let marker = if i > 0 { reserve } else { 0 };
            if used + tokens + marker > scope.max_tokens {
                break;
            }
            used += tokens;
            first = i;
        }
        if first == lines.len() {
            // The newest entry alone is over the budget: keep its beginning.
            let budget = scope.max_tokens.saturating_sub(reserve);
            newest_cut = Some(crate::truncate::head(
                &lines[lines.len() - 1],
                budget,
                TRUNCATED,
                counter,
            ));
            first = lines.len() - 1;
        }
    }
    report.shown = lines.len() - first;
    report.newest_cut = newest_cut.is_some();
    let mut text = String::from("# Recent History\n\n");
    if first > 0 {
        text.push_str(&omitted_line(first));
        text.push('\n');
    }
    let last = lines.len() - 1;
    for (i, line) in lines.iter().enumerate().skip(first) {
        if i > first {
            text.push('\n');
        }
        match (&newest_cut, i == last) {
            (Some(cut), true) => text.push_str(cut),
            _ => text.push_str(line),
        }
    }
    (Some(text), report)
}

/// The entries of the scope's sessions, the newest `max_entries`, without the one the
/// summary already carries.
fn chosen_entries<'a>(entries: &'a [JournalEntry], scope: &Scope<'_>) -> Vec<&'a JournalEntry> {
    let mut chosen: Vec<&JournalEntry> = entries
        .iter()
        .filter(|e| match (scope.session_key, e.session_key.as_deref()) {
            (None, _) => true,
            (Some(key), entry_key) if !scope.unified => entry_key == Some(key),
            (Some(key), Some(entry_key)) => entry_key == key || !is_internal(entry_key),
            (Some(_), None) => true,
        })
        .collect();
    if chosen.len() > scope.max_entries {
        chosen.drain(..chosen.len() - scope.max_entries);
    }
    // The summary already carries its own entry: show it once.
    if let (Some(summary), Some(key)) = (scope.summary, scope.session_key)
        && let Some(at) = chosen
            .iter()
            .rposition(|e| e.session_key.as_deref() == Some(key) && e.content == summary.text)
    {
        chosen.remove(at);
    }
    chosen
}

const TRUNCATED: &str = "\n... (truncated)";

/// One entry: `- [timestamp] content`, later lines of the content indented so they read as
/// part of the entry rather than as entries of their own.
fn entry_line(entry: &JournalEntry) -> String {
    let mut line = String::with_capacity(entry.content.len() + entry.timestamp.len() + 8);
    line.push_str("- [");
    line.push_str(&entry.timestamp);
    line.push_str("] ");
    let mut pieces = entry.content.split('\n');
    if let Some(head) = pieces.next() {
        line.push_str(head);
    }
    for piece in pieces {
        line.push('\n');
        if !piece.is_empty() {
            line.push_str("  ");
            line.push_str(piece);
        }
    }
    line
}

fn omitted_line(count: usize) -> String {
    let noun = if count == 1 { "entry" } else { "entries" };
    format!("- ({count} older {noun} not shown; search memory/history.jsonl for them)")
}

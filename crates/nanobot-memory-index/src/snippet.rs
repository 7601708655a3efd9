//! Snippets: at most [`MAX_SNIPPET_CHARS`] characters of a chunk, whitespace collapsed,
//! starting a little before the first place a query term occurs, so the model sees why the
//! chunk matched. Every backend uses this one function, so snippets do not depend on the
//! backend.

use crate::normalize::QueryTerm;
use crate::port::MAX_SNIPPET_CHARS;

/// How many characters of context a snippet keeps before the first match.
const LEAD_CHARS: usize = 60;

/// The snippet of `text` for a query whose terms are `terms`.
///
/// ```
/// use nanobot_memory_index::{query_terms, snippet};
/// let text = format!("{} the answer is QX7R2P. {}", "x ".repeat(300), "y ".repeat(300));
/// let shown = snippet(&text, &query_terms("qx7r2p"));
/// assert!(shown.contains("QX7R2P") && shown.chars().count() <= 400);
/// ```
pub fn snippet(text: &str, terms: &[QueryTerm]) -> String {
    let chars: Vec<char> = collapse_whitespace(text).chars().collect();
    if chars.len() <= MAX_SNIPPET_CHARS {
        return chars.into_iter().collect();
    }
    // One lower-case character per original one, so positions line up.
    let lower: Vec<char> = chars
        .iter()
        .map(|c| c.to_lowercase().next().unwrap_or(*c))
        .collect();
    let first = terms
        .iter()
        .filter_map(|term| find(&lower, &term.text.chars().collect::<Vec<_>>()))
        .min()
        .unwrap_or(0);
    let mut start = first.saturating_sub(LEAD_CHARS);
    // Start at a word boundary when one is near.
    if let Some(space) = (start..first).find(|&i| chars[i] == ' ') {
        start = space + 1;
    }
    let lead = if start > 0 { "…" } else { "" };
    let room = MAX_SNIPPET_CHARS - lead.chars().count();
    let end = (start + room).min(chars.len());
    let (end, tail) = if end < chars.len() {
        (end - 1, "…")
    } else {
        (end, "")
    };
    let mut out = String::from(lead);
    out.extend(&chars[start..end]);
    out.push_str(tail);
    out
}

fn find(haystack: &[char], needle: &[char]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

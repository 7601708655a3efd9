//! Corrections replace what they correct. A batch fact tagged `[correction]` that the run
//! added as a new line, while the line it corrects stays, would leave both in the prompt
//! (small models append rather than replace). The line it corrects is the one kept from
//! before the run that shares the most words with it, at least half of that line's words,
//! when exactly one does: the correction takes its place, so the versions show the old line
//! replaced by the new one, and `memory history` gives when the old one held.

use super::*;
use crate::lines::{is_fact, words};
use crate::provenance::added_lines;

/// The share of the old line's words a correction must hold to replace it.
const SHARE: f64 = 0.5;

/// A line a correction replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Superseded {
    /// The file.
    pub path: String,
    /// The line replaced.
    pub old: String,
    /// The correction that replaced it.
    pub new: String,
}

/// The facts of `batch` tagged `[correction]`, as words.
fn corrections(batch: &[JournalEntry]) -> Vec<Vec<String>> {
    batch
        .iter()
        .flat_map(|e| e.content.lines())
        .filter_map(|l| l.trim().strip_prefix("- [correction] "))
        .map(words)
        .filter(|w| !w.is_empty())
        .collect()
}

/// Puts each correction the run appended in the place of the line it corrects.
pub(super) fn replace_corrected(overlay: &mut Overlay, batch: &[JournalEntry]) -> Vec<Superseded> {
    let corrections = corrections(batch);
    if corrections.is_empty() {
        return Vec::new();
    }
    let mut done = Vec::new();
    for document in Document::ALL {
        let target = Target::Document(document);
        let (Some(before), Some(after)) = (overlay.base(&target), overlay.get(&target)) else {
            continue;
        };
        let (before, after) = (before.to_owned(), after.to_owned());
        for new in added_lines(&before, &after) {
            if !corrections.contains(&words(new)) {
                continue;
            }
            if let Some(old) = corrected(&before, &after, new) {
                overlay.supersede_line(&target, &old, new);
                done.push(Superseded {
                    path: target.path(),
                    old: old.trim().to_owned(),
                    new: new.trim().to_owned(),
                });
            }
        }
    }
    done
}

/// The line of `before`, still in `after`, that `new` corrects: the one sharing most words
/// with it, at least [`SHARE`] of its own, if no other shares as many.
fn corrected(before: &str, after: &str, new: &str) -> Option<String> {
    let new_words = words(new);
    let mut scored: Vec<(f64, &str)> = before
        .lines()
        .filter(|l| is_fact(l) && after.lines().any(|a| a == *l))
        .filter_map(|l| {
            let old = words(l);
            let shared = old.iter().filter(|w| new_words.contains(w)).count();
            let share = shared as f64 / old.len() as f64;
            (share >= SHARE && old != new_words).then_some((share, l))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    match scored.as_slice() {
        [(_, line)] => Some((*line).to_owned()),
        [(best, line), (next, _), ..] if best > next => Some((*line).to_owned()),
        _ => None,
    }
}

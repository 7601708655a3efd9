//! The repeat guard: before a run's change is applied, an added line that says what a line
//! of the curated files already says is taken out, whatever the model proposed, and the
//! report names it. Skills are left alone (their lines are instructions, not facts).

use super::*;
use crate::lines::{is_fact, repeats};
use crate::provenance::added_lines;

/// A line the guard took out of a run's change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repeat {
    /// The file the model added it to.
    pub path: String,
    /// The line it added.
    pub line: String,
    /// The file holding the line it repeats.
    pub existing_path: String,
    /// The line it repeats.
    pub existing: String,
}

/// Takes the added lines that repeat another out of `overlay`'s curated files.
pub(super) fn refuse_repeats(overlay: &mut Overlay) -> Vec<Repeat> {
    let curated: Vec<Target> = Document::ALL.into_iter().map(Target::Document).collect();
    let mut added: BTreeMap<Target, Vec<String>> = BTreeMap::new();
    for (target, before, after) in overlay.changes() {
        if curated.contains(&target) {
            let lines = added_lines(before.unwrap_or(""), after);
            added.insert(target, lines.into_iter().map(str::to_owned).collect());
        }
    }
    // What is said already: every fact line of the curated files the run did not add.
    let mut said: Vec<(String, String)> = Vec::new();
    for target in &curated {
        let text = overlay.get(target).unwrap_or("");
        let mut fresh = added.get(target).cloned().unwrap_or_default();
        for line in text.lines().filter(|l| is_fact(l)) {
            match fresh.iter().position(|f| f == line) {
                Some(i) => {
                    fresh.remove(i);
                }
                None => said.push((target.path(), line.to_owned())),
            }
        }
    }
    let mut refused = Vec::new();
    for (target, lines) in added {
        let path = target.path();
        let mut dropped = Vec::new();
        for line in lines {
            match said.iter().find(|(_, existing)| repeats(&line, existing)) {
                Some((existing_path, existing)) => {
                    refused.push(Repeat {
                        path: path.clone(),
                        line: line.trim().to_owned(),
                        existing_path: existing_path.clone(),
                        existing: existing.trim().to_owned(),
                    });
                    dropped.push(line);
                }
                None => said.push((path.clone(), line)),
            }
        }
        if !dropped.is_empty() {
            overlay.drop_lines(&target, &dropped);
        }
    }
    refused
}

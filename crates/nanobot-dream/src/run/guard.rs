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

impl Repeat {
    fn of(path: &str, line: &str, existing_path: &str, existing: &str) -> Repeat {
        Repeat {
            path: path.to_owned(),
            line: line.trim().to_owned(),
            existing_path: existing_path.to_owned(),
            existing: existing.trim().to_owned(),
        }
    }
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
    let mut dropped: BTreeMap<Target, Vec<String>> = BTreeMap::new();
    // The run's own lines kept so far: a later one that says all they say and more takes
    // their place (the line that says more is kept, as against the files).
    let mut kept: Vec<(Target, String)> = Vec::new();
    for (target, lines) in added {
        let path = target.path();
        for line in lines {
            let repeated = said
                .iter()
                .map(|(p, e)| (p.clone(), e.as_str()))
                .chain(kept.iter().map(|(t, k)| (t.path(), k.as_str())))
                .find(|(_, existing)| repeats(&line, existing));
            if let Some((existing_path, existing)) = repeated {
                refused.push(Repeat::of(&path, &line, &existing_path, existing));
                dropped.entry(target.clone()).or_default().push(line);
                continue;
            }
            for (lesser_target, lesser) in kept.extract_if(.., |(_, k)| repeats(k, &line)) {
                refused.push(Repeat::of(&lesser_target.path(), &lesser, &path, &line));
                dropped.entry(lesser_target).or_default().push(lesser);
            }
            kept.push((target.clone(), line));
        }
    }
    for (target, lines) in dropped {
        overlay.drop_lines(&target, &lines);
    }
    refused
}

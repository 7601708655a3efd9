//! Where each curated line came from. A run names the journal entries it read, and for each
//! line it added the entries that line was taken from, as trailers of its memory version:
//! the versions are history nanobot-ai never puts in a prompt, and they live on every
//! backend (git commits on files, version rows in PostgreSQL). Blame and history read them
//! back.
//!
//! ```text
//! Source-Entry: 4 at=2026-11-30T09:00 messages=0-6 session=telegram:42
//! Source-Line: memory/MEMORY.md 9c1e44b2a0f3d7e1 4
//! ```

use std::collections::BTreeMap;
use std::fmt;

use nanobot_memory_store::JournalEntry;

use crate::lines::{contained, fingerprint, is_fact, words};

const ENTRY: &str = "Source-Entry: ";
const LINE: &str = "Source-Line: ";

/// The share of a line's words an entry must hold to count as where the line came from;
/// below it for every entry, the line is credited to the whole batch.
const ATTRIBUTION_THRESHOLD: f64 = 0.5;

/// One journal entry a curated line came from, and through it the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Source {
    /// The entry's cursor in `memory/history.jsonl`.
    pub cursor: u64,
    /// When the entry was written (`YYYY-MM-DD HH:MM`).
    pub written: String,
    /// The session it summarises, if any.
    pub session_key: Option<String>,
    /// The session's messages `[start, end)` it summarises, if known.
    pub messages: Option<(u64, u64)>,
}

impl Source {
    /// The source an entry is.
    pub fn of(entry: &JournalEntry) -> Source {
        Source {
            cursor: entry.cursor,
            written: entry.timestamp.clone(),
            session_key: entry.session_key.clone(),
            messages: entry.message_range,
        }
    }

    fn trailer(&self) -> String {
        let messages = self
            .messages
            .map_or_else(|| "-".to_owned(), |(a, b)| format!("{a}-{b}"));
        format!(
            "{ENTRY}{} at={} messages={messages} session={}",
            self.cursor,
            self.written.replace(' ', "T"),
            self.session_key.as_deref().unwrap_or("")
        )
    }

    fn parse(value: &str) -> Option<Source> {
        let (cursor, rest) = value.split_once(' ')?;
        let (at, rest) = rest.strip_prefix("at=")?.split_once(' ')?;
        let (messages, session) = rest.strip_prefix("messages=")?.split_once(' ')?;
        let session = session.strip_prefix("session=")?;
        Some(Source {
            cursor: cursor.parse().ok()?,
            written: at.replace('T', " "),
            session_key: (!session.is_empty()).then(|| session.to_owned()),
            messages: messages
                .split_once('-')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
        })
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {}", self.cursor)?;
        match (&self.session_key, self.messages) {
            (Some(key), Some((a, b))) => write!(f, ", session {key} messages {a}-{b}")?,
            (Some(key), None) => write!(f, ", session {key}")?,
            (None, _) => f.write_str(", no session")?,
        }
        write!(f, ", {}", self.written)
    }
}

/// What one version says of where its lines came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The journal entries the run read.
    pub sources: Vec<Source>,
    /// For each line it added (file, fingerprint): the cursors it came from.
    pub lines: BTreeMap<(String, String), Vec<u64>>,
}

impl Provenance {
    /// The provenance of a run over `batch` that changed files `(path, before, after)`,
    /// the curated files being `curated` (path, text) afterwards:
    /// - each added fact line is credited to the entries holding most of its words (every
    ///   entry of the batch when none holds half of them);
    /// - each line already there that an entry says again, every word of it, is credited
    ///   to that entry too: a fact two conversations taught stays when one of them is
    ///   forgotten. One-word lines are left out (too little to go on).
    pub fn attribute(
        batch: &[JournalEntry],
        changes: &[(String, Option<&str>, &str)],
        curated: &[(String, &str)],
    ) -> Self {
        let entry_words: Vec<(u64, Vec<String>)> = batch
            .iter()
            .map(|e| (e.cursor, words(&e.content)))
            .collect();
        let mut lines = BTreeMap::new();
        for (path, before, after) in changes {
            for line in added_lines(before.unwrap_or(""), after) {
                let line_words = words(line);
                let scores: Vec<(u64, f64)> = entry_words
                    .iter()
                    .map(|(cursor, w)| (*cursor, contained(&line_words, w)))
                    .collect();
                let best = scores.iter().map(|(_, s)| *s).fold(0.0, f64::max);
                let cursors = scores
                    .iter()
                    .filter(|(_, s)| best < ATTRIBUTION_THRESHOLD || *s >= best - 1e-9)
                    .map(|(c, _)| *c)
                    .collect();
                lines.insert((path.clone(), fingerprint(line)), cursors);
            }
        }
        corroborate(&mut lines, &entry_words, curated);
        Provenance {
            sources: batch.iter().map(Source::of).collect(),
            lines,
        }
    }

    /// The trailers to end a version message with (empty when there is nothing to say).
    pub fn trailers(&self) -> String {
        let mut out: Vec<String> = self.sources.iter().map(Source::trailer).collect();
        for ((path, print), cursors) in &self.lines {
            let cursors: Vec<String> = cursors.iter().map(u64::to_string).collect();
            out.push(format!("{LINE}{path} {print} {}", cursors.join(" ")));
        }
        out.join("\n")
    }

    /// The provenance a version `message` carries (empty for versions written before
    /// provenance, or by anything but a Dream run).
    pub fn parse(message: &str) -> Provenance {
        let mut provenance = Provenance::default();
        for line in message.lines() {
            if let Some(source) = line.strip_prefix(ENTRY).and_then(Source::parse) {
                provenance.sources.push(source);
            } else if let Some(value) = line.strip_prefix(LINE) {
                let mut parts = value.split(' ');
                if let (Some(path), Some(print)) = (parts.next(), parts.next()) {
                    let cursors = parts.filter_map(|c| c.parse().ok()).collect();
                    provenance
                        .lines
                        .insert((path.to_owned(), print.to_owned()), cursors);
                }
            }
        }
        provenance
    }

    /// The sources of `line` of `path`, if this version added it or an entry it read said
    /// it again.
    pub fn sources_of(&self, path: &str, line: &str) -> Option<Vec<Source>> {
        let cursors = self.lines.get(&(path.to_owned(), fingerprint(line)))?;
        Some(
            self.sources
                .iter()
                .filter(|s| cursors.contains(&s.cursor))
                .cloned()
                .collect(),
        )
    }
}

/// Credits the lines of `files` the run did not add (absent from `lines`) to the entries
/// holding every word of them.
fn corroborate(
    lines: &mut BTreeMap<(String, String), Vec<u64>>,
    entry_words: &[(u64, Vec<String>)],
    files: &[(String, &str)],
) {
    for (path, text) in files {
        for line in text.lines().filter(|l| is_fact(l)) {
            let key = (path.clone(), fingerprint(line));
            let line_words = words(line);
            if lines.contains_key(&key) || line_words.len() < 2 {
                continue;
            }
            let cursors: Vec<u64> = entry_words
                .iter()
                .filter(|(_, w)| contained(&line_words, w) >= 1.0)
                .map(|(c, _)| *c)
                .collect();
            if !cursors.is_empty() {
                lines.insert(key, cursors);
            }
        }
    }
}

/// The fact lines of `after` that `before` does not hold (as many times), in order.
pub fn added_lines<'a>(before: &str, after: &'a str) -> Vec<&'a str> {
    let mut left: BTreeMap<&str, usize> = BTreeMap::new();
    for line in before.lines() {
        *left.entry(line.trim()).or_default() += 1;
    }
    after
        .lines()
        .filter(|line| match left.get_mut(line.trim()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => is_fact(line),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cursor: u64, session: &str, content: &str) -> JournalEntry {
        JournalEntry {
            cursor,
            timestamp: "2026-11-30 09:00".into(),
            content: content.into(),
            session_key: Some(session.into()),
            message_range: Some((0, 6)),
            message_digest: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn each_added_line_is_credited_to_the_entries_that_say_it_and_read_back() {
        let batch = [
            entry(4, "telegram:1", "- Allergic to peanuts\n- Works at Acme"),
            entry(5, "cli:direct", "- Lives in Berlin"),
            entry(
                6,
                "telegram:1",
                "- Still allergic to peanuts, carries an EpiPen",
            ),
        ];
        let before = "# Memory\n\n- Project X\n";
        let after =
            "# Memory\n\n- Project X\n- Allergic to peanuts\n- Lives in Berlin\n- Enjoys jazz\n";
        let provenance = Provenance::attribute(
            &batch,
            &[("memory/MEMORY.md".into(), Some(before), after)],
            &[],
        );
        let read = Provenance::parse(&format!(
            "dream: run\n\nsummary\n\n{}",
            provenance.trailers()
        ));
        assert_eq!(read, provenance);
        let cursors = |line: &str| -> Vec<u64> {
            read.sources_of("memory/MEMORY.md", line)
                .unwrap()
                .iter()
                .map(|s| s.cursor)
                .collect()
        };
        assert_eq!(cursors("- Allergic to peanuts"), [4, 6]);
        assert_eq!(cursors("- Lives in Berlin"), [5]);
        // Said by no entry: the whole batch.
        assert_eq!(cursors("- Enjoys jazz"), [4, 5, 6]);
        assert_eq!(read.sources_of("memory/MEMORY.md", "- Project X"), None);
        assert_eq!(
            read.sources[1].to_string(),
            "entry 5, session cli:direct messages 0-6, 2026-11-30 09:00"
        );
    }

    #[test]
    fn a_line_kept_or_moved_within_the_file_is_not_added() {
        assert_eq!(
            added_lines("- a b\n- c d\n", "- c d\n- a b\n- e f\n"),
            ["- e f"]
        );
        assert_eq!(added_lines("- a b\n", "- a b\n- a b\n"), ["- a b"]);
        assert!(added_lines("", "# Heading\n\n").is_empty());
    }
}

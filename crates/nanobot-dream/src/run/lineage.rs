//! The life of each curated line, read from the memory versions oldest first: which
//! version wrote a line and from which journal entries (blame), and which lines were
//! replaced or removed, when, and by what (history). Nothing here is ever put in a prompt.

use similar::{Algorithm, DiffOp, capture_diff_slices};

use super::*;
use crate::lines::{fingerprint, is_fact, words};
use crate::provenance::Source;

/// Who wrote a line, and from what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Origin {
    /// The version that first held it.
    pub version: Version,
    /// Whether a Dream run wrote it (else an edit made outside Dream).
    pub by_dream: bool,
    /// The journal entries it came from (empty: not known, e.g. written before Dream
    /// recorded provenance, or by hand).
    pub sources: Vec<Source>,
}

impl Origin {
    /// The same origin with `more` sources that say the line again.
    fn corroborated(&self, more: Vec<Source>) -> Origin {
        let mut origin = self.clone();
        for source in more {
            if !origin.sources.iter().any(|s| s.cursor == source.cursor) {
                origin.sources.push(source);
            }
        }
        origin
    }
}

/// One line of a file as it is now, with its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlameLine {
    /// Its number, from 1.
    pub number: usize,
    /// Its text.
    pub text: String,
    /// Where it came from (`None`: written since the latest version).
    pub origin: Option<Origin>,
}

/// A fact line that was once in memory and is no longer: replaced or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PastLine {
    /// The file that held it.
    pub path: String,
    /// Its text.
    pub text: String,
    /// Where it came from, and since when it was held.
    pub origin: Option<Origin>,
    /// The version that took it out: it was held until then.
    pub until: Version,
    /// The lines that took its place in that version (empty: removed).
    pub replaced_by: Vec<String>,
    /// Why: the journal entries the replacing lines came from (empty: removed, or written
    /// outside Dream).
    pub because: Vec<Source>,
}

/// The versions replayed: each file's lines with their origins, and the lines gone.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) files: BTreeMap<String, Vec<(String, Option<Origin>)>>,
    /// The latest known origin of each line fingerprint (a restore brings a line back
    /// with the origin it had).
    known: HashMap<String, Origin>,
    pub(super) past: Vec<PastLine>,
}

impl Replay {
    /// Replays `version`, whose tracked files are `files`.
    fn apply(&mut self, version: &Version, files: &Snapshot) {
        let provenance = Provenance::parse(&version.message);
        let run = version.message.starts_with("dream:") && !provenance.sources.is_empty();
        let paths: BTreeSet<String> = self
            .files
            .keys()
            .chain(files.keys())
            .filter(|p| p.as_str() != CURSOR_PATH)
            .cloned()
            .collect();
        let mut gone = Vec::new();
        let mut came: BTreeSet<String> = BTreeSet::new();
        for path in paths {
            let old = self.files.remove(&path).unwrap_or_default();
            let new: Vec<&str> = files.get(&path).map_or(Vec::new(), |t| t.lines().collect());
            let mut lines = Vec::with_capacity(new.len());
            let old_text: Vec<&str> = old.iter().map(|(t, _)| t.as_str()).collect();
            for op in capture_diff_slices(Algorithm::Myers, &old_text, &new) {
                let (removed, added) = (op.old_range(), op.new_range());
                if let DiffOp::Equal { .. } = op {
                    for (text, origin) in &old[removed] {
                        // Only a line whose sources are known gains more: a line written by
                        // hand, or before provenance, must not look taught by one entry.
                        let origin = match (origin, provenance.sources_of(&path, text)) {
                            (Some(origin), Some(more)) if !origin.sources.is_empty() => {
                                Some(origin.corroborated(more))
                            }
                            (origin, _) => origin.clone(),
                        };
                        lines.push((text.clone(), origin));
                    }
                    continue;
                }
                let inserted: Vec<&str> = new[added].to_vec();
                let mut because: Vec<Source> = Vec::new();
                for line in &inserted {
                    let origin = self.origin_of(version, &provenance, run, &path, line);
                    came.insert(fingerprint(line));
                    if origin.version.id == version.id && is_fact(line) {
                        for source in &origin.sources {
                            if !because.iter().any(|b| b.cursor == source.cursor) {
                                because.push(source.clone());
                            }
                        }
                    }
                    lines.push((line.to_string(), Some(origin)));
                }
                let replaced_by: Vec<String> = inserted
                    .iter()
                    .filter(|l| is_fact(l))
                    .map(|l| l.to_string())
                    .collect();
                for (text, origin) in &old[removed] {
                    if is_fact(text) {
                        gone.push(PastLine {
                            path: path.clone(),
                            text: text.clone(),
                            origin: origin.clone(),
                            until: version.clone(),
                            replaced_by: replaced_by.clone(),
                            because: if replaced_by.is_empty() {
                                Vec::new()
                            } else {
                                because.clone()
                            },
                        });
                    }
                }
            }
            if files.contains_key(&path) {
                self.files.insert(path, lines);
            }
        }
        // A line taken out in one place and written in another was moved, not replaced.
        self.past.extend(
            gone.into_iter()
                .filter(|p| !came.contains(&fingerprint(&p.text))),
        );
    }

    /// The origin of `line`, written into `path` by `version`.
    fn origin_of(
        &mut self,
        version: &Version,
        provenance: &Provenance,
        run: bool,
        path: &str,
        line: &str,
    ) -> Origin {
        let print = fingerprint(line);
        let origin = match provenance.sources_of(path, line) {
            Some(sources) => Origin {
                version: version.clone(),
                by_dream: true,
                sources,
            },
            None => match self.known.get(&print) {
                Some(known) => known.clone(),
                None => Origin {
                    version: version.clone(),
                    by_dream: version.message.starts_with("dream:"),
                    sources: if run && is_fact(line) {
                        provenance.sources.clone()
                    } else {
                        Vec::new()
                    },
                },
            },
        };
        if is_fact(line) {
            self.known.insert(print, origin.clone());
        }
        origin
    }

    /// `text`, the file `path` now, line by line with the origins the versions give.
    pub(super) fn blame(&self, path: &str, text: &str) -> Vec<BlameLine> {
        let versioned = self.files.get(path).map_or(&[][..], Vec::as_slice);
        let old: Vec<&str> = versioned.iter().map(|(t, _)| t.as_str()).collect();
        let new: Vec<&str> = text.lines().collect();
        let mut origins = Vec::with_capacity(new.len());
        for op in capture_diff_slices(Algorithm::Myers, &old, &new) {
            match op {
                DiffOp::Equal { old_index, len, .. } => origins.extend(
                    versioned[old_index..old_index + len]
                        .iter()
                        .map(|(_, origin)| origin.clone()),
                ),
                other => origins.extend(other.new_range().map(|_| None)),
            }
        }
        new.iter()
            .zip(origins)
            .enumerate()
            .map(|(i, (text, origin))| BlameLine {
                number: i + 1,
                text: (*text).to_owned(),
                origin,
            })
            .collect()
    }

    /// Every tracked file of `now` blamed, from this one replay.
    pub(super) fn blame_files(&self, now: &Snapshot) -> BTreeMap<String, Vec<BlameLine>> {
        now.iter()
            .filter(|(p, _)| p.as_str() != CURSOR_PATH)
            .map(|(path, text)| (path.clone(), self.blame(path, text)))
            .collect()
    }
}

impl Dream {
    /// Every version replayed, oldest first.
    pub(super) async fn replay(&self) -> Result<Replay, DreamError> {
        let versions = self.versions()?;
        let mut log = versions.log(usize::MAX).await?;
        log.reverse();
        let mut replay = Replay::default();
        for version in &log {
            let files = versions.files_at(&version.id).await?;
            replay.apply(version, &files);
        }
        Ok(replay)
    }

    /// Each line of `path` (`memory/MEMORY.md`, `USER.md`, `skills/x/SKILL.md`...) as it
    /// is now, with the version that wrote it and the journal entries it came from.
    pub async fn blame(&self, path: &str) -> Result<Vec<BlameLine>, DreamError> {
        sandbox::parse(path).map_err(|reason| DreamError::InvalidQuery {
            query: path.to_owned(),
            reason,
        })?;
        let replay = self.replay().await?;
        let now = self.snapshot_now().await?;
        let Some(text) = now.get(path) else {
            return Err(DreamError::InvalidQuery {
                query: path.to_owned(),
                reason: format!(
                    "no such memory file; the files are {}",
                    now.keys()
                        .filter(|p| p.as_str() != CURSOR_PATH)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        Ok(replay.blame(path, text))
    }

    /// Every memory file as it is now, blamed (one replay of the versions for all of them,
    /// where [`Dream::blame`] replays them for one file).
    pub async fn blame_all(&self) -> Result<BTreeMap<String, Vec<BlameLine>>, DreamError> {
        let replay = self.replay().await?;
        Ok(replay.blame_files(&self.snapshot_now().await?))
    }

    /// The fact lines, held now or once, whose words hold every word of `query`: the lines
    /// held now (`Ok.0`, with their origin) and the lines replaced or removed (`Ok.1`,
    /// oldest first, each with when it stopped being true and what replaced it).
    pub async fn line_history(&self, query: &str) -> Result<HistoryMatches, DreamError> {
        let wanted = words(query);
        if wanted.is_empty() {
            return Err(DreamError::InvalidQuery {
                query: query.to_owned(),
                reason: "holds no word to look for; name a word the fact holds".into(),
            });
        }
        let matches = |text: &str| {
            let have = words(text);
            wanted.iter().all(|w| have.contains(w))
        };
        let replay = self.replay().await?;
        let current = replay
            .files
            .iter()
            .flat_map(|(path, lines)| {
                lines
                    .iter()
                    .filter(|(text, _)| is_fact(text) && matches(text))
                    .map(move |(text, origin)| (path.clone(), text.clone(), origin.clone()))
            })
            .collect();
        let past = replay
            .past
            .into_iter()
            .filter(|p| matches(&p.text))
            .collect();
        Ok(HistoryMatches { current, past })
    }
}

/// What [`Dream::line_history`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryMatches {
    /// Lines held in the latest version: (file, text, origin).
    pub current: Vec<(String, String, Option<Origin>)>,
    /// Lines replaced or removed, oldest first.
    pub past: Vec<PastLine>,
}

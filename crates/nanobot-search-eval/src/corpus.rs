//! A labelled corpus as the eval reads it: the chunks a backend would index (sessions in
//! nanobot-ai's line format, and a workspace's journal and memory files where there are
//! any) and the questions, each with the sources that answer it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nanobot_memory_index::conformance::Fixture;
use nanobot_memory_index::{Chunk, GroupUpdate, journal_chunk};
use serde::Deserialize;

/// One labelled question.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Question {
    /// Unique within its corpus.
    pub(crate) id: String,
    /// What kind of question (`when`, `paraphrase`, `exact`, ...), for the per-kind tables.
    pub(crate) kind: String,
    /// `tune` (what the lanes may be tuned on) or `report`; a corpus that does not say is
    /// split by the question's position, every third question for tuning.
    #[serde(default)]
    pub(crate) split: Option<String>,
    /// The question as a user would ask it.
    pub(crate) query: String,
    /// Sources that hold its answer (a hit on any of them counts).
    pub(crate) relevant: Vec<String>,
    /// The day the answer was said (`2025-02-13`), where the corpus says: a `when`
    /// question is answered when a labelled hit carries this day.
    #[serde(default)]
    pub(crate) date: Option<String>,
}

/// How a corpus's conversations are stored before they are searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Storage {
    /// One session message per turn (what the corpus files are).
    Sessions,
    /// One journal entry per turn, as a bot that archived every turn would hold them.
    Journal,
}

impl Storage {
    /// Its name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Storage::Sessions => "sessions",
            Storage::Journal => "journal",
        }
    }
}

/// A corpus, cut into chunks.
#[derive(Debug, Clone)]
pub(crate) struct Corpus {
    /// Its name (the folder's).
    pub(crate) name: String,
    /// Every chunk, grouped as the indexing pass would write them.
    pub(crate) updates: Vec<GroupUpdate>,
    /// The questions, each with its split filled in.
    pub(crate) questions: Vec<Question>,
}

impl Corpus {
    /// Reads the corpus in `dir`: `sessions/*.jsonl`, `queries.json`, and `workspace/`
    /// when there is one (cut as the backends would: `Fixture::load_chunks`).
    pub(crate) fn load(dir: &Path, storage: Storage) -> Result<Corpus, String> {
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let updates = Fixture::load_chunks(dir)?;
        let text = std::fs::read_to_string(dir.join("queries.json"))
            .map_err(|e| format!("{}: {e}", dir.join("queries.json").display()))?;
        let mut questions: Vec<Question> =
            serde_json::from_str(&text).map_err(|e| format!("{name}/queries.json: {e}"))?;
        for (position, question) in questions.iter_mut().enumerate() {
            if question.split.is_none() {
                let split = if position % 3 == 0 { "tune" } else { "report" };
                question.split = Some(split.to_owned());
            }
        }
        let mut corpus = Corpus {
            name,
            updates,
            questions,
        };
        if storage == Storage::Journal {
            corpus.sessions_as_journal();
        }
        Ok(corpus)
    }

    /// Every chunk.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.updates.iter().flat_map(|update| update.chunks.iter())
    }

    /// Stores each session message as one journal entry instead (cursors after the
    /// journal's own), and points the labels at the entries.
    fn sessions_as_journal(&mut self) {
        let mut next = self
            .chunks()
            .filter_map(|c| c.source.strip_prefix("history#")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let mut renamed: BTreeMap<String, String> = BTreeMap::new();
        let mut chunks: Vec<Chunk> = Vec::new();
        for chunk in self.updates.drain(..).flat_map(|u| u.chunks) {
            if chunk.source.starts_with("session:") {
                let at = chunk
                    .at
                    .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default();
                let entry = journal_chunk(next, &at, &chunk.text);
                renamed.insert(chunk.source.clone(), entry.source.clone());
                chunks.push(entry);
                next += 1;
            } else {
                chunks.push(chunk);
            }
        }
        self.updates = GroupUpdate::from_chunks(chunks);
        for question in &mut self.questions {
            for source in &mut question.relevant {
                if let Some(entry) = renamed.get(source) {
                    source.clone_from(entry);
                }
            }
        }
    }
}

/// The corpora the eval runs by default: every folder of `corpora/` in this crate, and the
/// labelled corpus of the conformance suite.
pub(crate) fn default_corpora(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates/nanobot-search-eval/corpora"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.join("queries.json").is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.push(root.join("crates/nanobot-memory-index/fixtures/search"));
    dirs
}

//! `InMemoryIndex`: the reference backend (BM25 over the normalised tokens, an inverted
//! index kept up to date on every replace), for tests and for bots that keep everything in
//! memory. The file and PostgreSQL backends must rank like it within the conformance
//! suite's bounds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::chunk::Chunk;
use crate::lexical::{CANDIDATES, LexicalQuery, VocabularyLookup};
use crate::normalize::{QueryTerm, query_terms, tokens};
use crate::port::{
    GroupUpdate, Hit, IndexError, IndexStats, MemoryIndex, SearchRequest, check_updates,
};
use crate::snippet::snippet;
use crate::vectors::{ChunkVector, VectorIndex, best_hits, check_vectors, cosine, other_model};
use nanobot_llm_port::EmbeddingModel;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// An index held in memory (one per scope, like every backend).
#[derive(Debug, Default)]
pub struct InMemoryIndex {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Chunk slots; a removed chunk leaves `None` until its slot is reused.
    slots: Vec<Option<Stored>>,
    free: Vec<usize>,
    /// Group name to its chunks' slots.
    groups: BTreeMap<String, Vec<usize>>,
    /// Term to (slot, occurrences in that chunk); ordered, so the words a prefix begins
    /// are one range.
    postings: BTreeMap<String, HashMap<usize, u32>>,
    /// Sum of every stored chunk's token count (for the average length).
    total_tokens: usize,
    chunks: usize,
    marks: BTreeMap<String, String>,
    /// The model of the vectors put since the last clear.
    vector_model: Option<EmbeddingModel>,
}

#[derive(Debug)]
struct Stored {
    chunk: Chunk,
    length: usize,
    vector: Option<Vec<f32>>,
}

impl InMemoryIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way a
        // search could misread (every update is computed first), so go on with the data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn remove_group(&mut self, group: &str) {
        let Some(slots) = self.groups.remove(group) else {
            return;
        };
        for slot in slots {
            let Some(stored) = self.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            for term in tokens(&stored.chunk.text) {
                if let Some(posting) = self.postings.get_mut(&term) {
                    posting.remove(&slot);
                    if posting.is_empty() {
                        self.postings.remove(&term);
                    }
                }
            }
            self.total_tokens -= stored.length;
            self.chunks -= 1;
            self.free.push(slot);
        }
    }

    fn insert(&mut self, chunk: Chunk) {
        let terms = tokens(&chunk.text);
        let slot = self.free.pop().unwrap_or(self.slots.len());
        for term in &terms {
            *self
                .postings
                .entry(term.clone())
                .or_default()
                .entry(slot)
                .or_insert(0) += 1;
        }
        self.total_tokens += terms.len();
        self.chunks += 1;
        self.groups
            .entry(chunk.group.clone())
            .or_default()
            .push(slot);
        let stored = Some(Stored {
            chunk,
            length: terms.len(),
            vector: None,
        });
        if slot == self.slots.len() {
            self.slots.push(stored);
        } else {
            self.slots[slot] = stored;
        }
    }

    /// The indexed words that begin with `start`, in order, with their postings.
    fn beginning_with<'a>(
        &'a self,
        start: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a HashMap<usize, u32>)> + 'a {
        self.postings
            .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .take_while(move |(indexed, _)| indexed.starts_with(start))
    }

    /// The indexed words a vocabulary lookup finds, with how many chunks hold each.
    fn vocabulary(&self, lookup: &VocabularyLookup) -> Vec<(String, usize)> {
        match lookup {
            VocabularyLookup::Exact(word) => self
                .postings
                .get(word)
                .map(|posting| vec![(word.clone(), posting.len())])
                .unwrap_or_default(),
            VocabularyLookup::Prefix(start) => self
                .beginning_with(start)
                .map(|(indexed, posting)| (indexed.clone(), posting.len()))
                .collect(),
        }
    }

    /// The chunks holding `terms` that `request` admits, best first by BM25 over those
    /// terms, at most [`CANDIDATES`].
    fn candidates(&self, terms: &[(QueryTerm, usize)], request: &SearchRequest) -> Vec<Chunk> {
        let average = self.total_tokens as f64 / self.chunks.max(1) as f64;
        let total = self.chunks as f64;
        let mut scores: HashMap<usize, f64> = HashMap::new();
        for (term, _) in terms {
            // In the order of the words, so the sums (and the candidates at the cut) are the
            // same in every process.
            let postings: Vec<&HashMap<usize, u32>> = if term.prefix {
                self.beginning_with(&term.text)
                    .map(|(_, posting)| posting)
                    .collect()
            } else {
                self.postings.get(&term.text).into_iter().collect()
            };
            for posting in postings {
                let frequency = posting.len() as f64;
                let idf = (1.0 + (total - frequency + 0.5) / (frequency + 0.5)).ln();
                for (&slot, &count) in posting {
                    let Some(stored) = self.slots.get(slot).and_then(Option::as_ref) else {
                        continue;
                    };
                    let tf = f64::from(count);
                    let norm = K1 * (1.0 - B + B * stored.length as f64 / average.max(1.0));
                    *scores.entry(slot).or_insert(0.0) += idf * tf * (K1 + 1.0) / (tf + norm);
                }
            }
        }
        let mut ranked: Vec<(f64, &Chunk)> = scores
            .into_iter()
            .filter_map(|(slot, score)| {
                let chunk = &self.slots.get(slot)?.as_ref()?.chunk;
                request.admits(chunk).then_some((score, chunk))
            })
            .collect();
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| a.1.source.cmp(&b.1.source))
                .then_with(|| a.1.part.cmp(&b.1.part))
        });
        ranked
            .into_iter()
            .take(CANDIDATES)
            .map(|(_, chunk)| chunk.clone())
            .collect()
    }
}

#[async_trait]
impl MemoryIndex for InMemoryIndex {
    async fn replace(&self, updates: Vec<GroupUpdate>) -> Result<(), IndexError> {
        check_updates(&updates)?;
        let mut state = self.state();
        for update in updates {
            state.remove_group(&update.group);
            for chunk in update.chunks {
                state.insert(chunk);
            }
        }
        Ok(())
    }

    async fn purge(&self) -> Result<(), IndexError> {
        // A removed group's chunks are dropped from memory when it is removed.
        Ok(())
    }

    async fn remove_prefix(&self, prefix: &str) -> Result<(), IndexError> {
        let mut state = self.state();
        let doomed: Vec<String> = state
            .groups
            .keys()
            .filter(|group| group.starts_with(prefix))
            .cloned()
            .collect();
        for group in doomed {
            state.remove_group(&group);
        }
        Ok(())
    }

    async fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        let query = LexicalQuery::parse(&request.query);
        let state = self.state();
        let answers = query
            .lookups()
            .iter()
            .map(|lookups| lookups.iter().map(|l| state.vocabulary(l)).collect())
            .collect();
        let plan = query.plan(answers, state.chunks);
        if plan.is_empty() {
            return Ok(Vec::new());
        }
        Ok(plan.hits(
            state.candidates(&plan.match_terms(), request),
            request.limit,
        ))
    }

    async fn stats(&self) -> Result<IndexStats, IndexError> {
        let state = self.state();
        Ok(IndexStats {
            chunks: state.chunks,
            groups: state.groups.len(),
        })
    }

    async fn marks(&self) -> Result<BTreeMap<String, String>, IndexError> {
        Ok(self.state().marks.clone())
    }

    async fn set_marks(&self, marks: Vec<(String, Option<String>)>) -> Result<(), IndexError> {
        let mut state = self.state();
        for (name, value) in marks {
            match value {
                Some(value) => state.marks.insert(name, value),
                None => state.marks.remove(&name),
            };
        }
        Ok(())
    }
}

#[async_trait]
impl VectorIndex for InMemoryIndex {
    async fn vector_model(&self) -> Result<Option<EmbeddingModel>, IndexError> {
        Ok(self.state().vector_model.clone())
    }

    async fn put_vectors(
        &self,
        model: &EmbeddingModel,
        vectors: Vec<ChunkVector>,
    ) -> Result<(), IndexError> {
        check_vectors(model, &vectors)?;
        let mut state = self.state();
        if let Some(held) = &state.vector_model
            && held != model
        {
            return Err(other_model(held, model));
        }
        state.vector_model = Some(model.clone());
        for put in vectors {
            let slots = state.groups.get(&put.group).cloned().unwrap_or_default();
            for slot in slots {
                if let Some(stored) = state.slots.get_mut(slot).and_then(Option::as_mut)
                    && stored.chunk.part == put.part
                {
                    stored.vector = Some(put.vector.clone());
                }
            }
        }
        Ok(())
    }

    async fn missing_vectors(&self, limit: usize) -> Result<Vec<Chunk>, IndexError> {
        let state = self.state();
        let mut missing: Vec<&Chunk> = state
            .groups
            .values()
            .flatten()
            .filter_map(|&slot| state.slots.get(slot)?.as_ref())
            .filter(|stored| stored.vector.is_none())
            .map(|stored| &stored.chunk)
            .collect();
        missing.sort_by(|a, b| a.group.cmp(&b.group).then_with(|| a.part.cmp(&b.part)));
        Ok(missing.into_iter().take(limit).cloned().collect())
    }

    async fn clear_vectors(&self) -> Result<(), IndexError> {
        let mut state = self.state();
        for stored in state.slots.iter_mut().flatten() {
            stored.vector = None;
        }
        state.vector_model = None;
        Ok(())
    }

    async fn nearest(
        &self,
        query: &[f32],
        request: &SearchRequest,
    ) -> Result<Vec<Hit>, IndexError> {
        request.check()?;
        let terms = query_terms(&request.query);
        let state = self.state();
        let scored: Vec<(f64, &Chunk)> = state
            .slots
            .iter()
            .flatten()
            .filter(|stored| request.admits(&stored.chunk))
            .filter_map(|stored| {
                let vector = stored.vector.as_ref()?;
                Some((f64::from(cosine(query, vector)), &stored.chunk))
            })
            .collect();
        Ok(best_hits(scored, request.limit, |chunk| {
            snippet(&chunk.text, &terms)
        }))
    }
}

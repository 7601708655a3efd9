//! The lexical lane's ranking, one for every backend (issue 31). A backend answers three
//! questions and this module does the rest:
//!
//! 1. [`LexicalQuery::parse`]: the query's words, function words out ("when did ... the"),
//!    unless the query has nothing else;
//! 2. [`LexicalQuery::lookups`]: the backend counts the chunks holding each word, and the
//!    indexed words that are forms of it (a prefix range of its vocabulary, filtered here by
//!    stem: "paintings" finds "painted"; irregular verbs: "went" finds "go");
//! 3. [`LexicalPlan::match_terms`]: the backend finds the chunks holding the plan's rarer
//!    words (a word in more than half of the chunks is not matched on: it would make every
//!    query score most of the index, the slow case) and sends its best [`CANDIDATES`] with
//!    their text to [`LexicalPlan::rank`], which scores them by BM25 over **every** word,
//!    the common ones included: in a chat between two people each name is in half of the
//!    turns, yet the name in "When did Maria ..." is what says whose fact it is.
//!
//! Forms count for less than the word itself ([`FORM_WEIGHT`]), as a second field of a
//! BM25F would. The length normalisation uses the candidates' mean length, which every
//! backend knows without keeping totals.

mod language;

use crate::chunk::Chunk;
use crate::normalize::{QueryTerm, for_each_token};
use crate::port::Hit;
use crate::port::{COMMON_TERM_SHARE, terms_to_search};
use crate::snippet::snippet;
use crate::vectors::best_hits;
use language::Language;

/// How many matching chunks a backend sends to [`LexicalPlan::rank`] (its best by its own
/// ranking over the matched words). 100 ranks as well as 200 on the eval corpora and keeps
/// the SQLite index's p95 at 100,000 chunks where it was (`docs/SEARCH.md`).
pub const CANDIDATES: usize = 100;

/// What an occurrence of another form of a word counts for, against 1 for the word itself.
pub const FORM_WEIGHT: f64 = 0.6;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// What a backend looks up in its vocabulary for a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VocabularyLookup {
    /// This indexed word.
    Exact(String),
    /// Every indexed word that starts with this.
    Prefix(String),
}

/// A query's words, before the index is asked about them.
#[derive(Debug, Clone)]
pub struct LexicalQuery {
    words: Vec<Word>,
    language: Language,
}

#[derive(Debug, Clone)]
struct Word {
    term: QueryTerm,
    /// Prefixes of the vocabulary its other forms are in, and irregular forms.
    form_prefixes: Vec<String>,
    irregular: Vec<String>,
}

impl LexicalQuery {
    /// The words of `query` to rank by: its distinct terms without the function words of
    /// its language (all of them when it has nothing else).
    pub fn parse(query: &str) -> LexicalQuery {
        let terms = crate::normalize::query_terms(query);
        let texts: Vec<String> = terms.iter().map(|t| t.text.clone()).collect();
        let language = Language::of(&texts);
        let content: Vec<QueryTerm> = terms
            .iter()
            .filter(|t| !language.is_function_word(&t.text))
            .cloned()
            .collect();
        let kept = if content.is_empty() { terms } else { content };
        let forms = language.stemmer();
        let words = kept
            .into_iter()
            .map(|term| {
                let (form_prefixes, irregular) = if term.prefix {
                    (Vec::new(), Vec::new())
                } else {
                    forms.lookups(&term.text)
                };
                Word {
                    term,
                    form_prefixes,
                    irregular,
                }
            })
            .collect();
        LexicalQuery { words, language }
    }

    /// What to look up, per word: the word itself first, then its forms' ranges.
    pub fn lookups(&self) -> Vec<Vec<VocabularyLookup>> {
        self.words
            .iter()
            .map(|word| {
                let itself = if word.term.prefix {
                    VocabularyLookup::Prefix(word.term.text.clone())
                } else {
                    VocabularyLookup::Exact(word.term.text.clone())
                };
                std::iter::once(itself)
                    .chain(
                        word.form_prefixes
                            .iter()
                            .cloned()
                            .map(VocabularyLookup::Prefix),
                    )
                    .chain(word.irregular.iter().cloned().map(VocabularyLookup::Exact))
                    .collect()
            })
            .collect()
    }

    /// The plan, given what the index answered to [`LexicalQuery::lookups`] (for each
    /// word, for each lookup, the indexed words found and how many chunks hold each) and
    /// how many chunks it holds.
    pub fn plan(self, answers: Vec<Vec<Vec<(String, usize)>>>, total: usize) -> LexicalPlan {
        let forms = self.language.stemmer();
        let mut planned = Vec::new();
        for (word, answer) in self.words.into_iter().zip(answers) {
            let stem = forms.stem(&word.term.text);
            let mut itself: Vec<(String, usize)> = Vec::new();
            let mut others: Vec<(String, usize)> = Vec::new();
            for (position, found) in answer.into_iter().enumerate() {
                for (indexed, documents) in found {
                    if position == 0 {
                        itself.push((indexed, documents));
                    } else if indexed != word.term.text
                        && !others.iter().any(|(o, _)| *o == indexed)
                        && forms.stem(&indexed) == stem
                    {
                        others.push((indexed, documents));
                    }
                }
            }
            others.sort();
            let own = itself.iter().map(|(_, d)| d).sum::<usize>().min(total);
            let documents = (own + others.iter().map(|(_, d)| d).sum::<usize>()).min(total);
            planned.push(PlannedWord {
                term: word.term,
                own,
                others,
                documents,
            });
        }
        let counts: Vec<usize> = planned.iter().map(|w| w.documents).collect();
        let matched = terms_to_search(&counts, total);
        LexicalPlan {
            words: planned,
            matched,
            total,
        }
    }
}

#[derive(Debug, Clone)]
struct PlannedWord {
    term: QueryTerm,
    /// Chunks holding the word itself.
    own: usize,
    /// Other indexed forms that count for it, in order, with the chunks holding each.
    others: Vec<(String, usize)>,
    /// Chunks holding it or a form of it (an upper bound: a chunk with two forms counts
    /// twice, never more than the index holds).
    documents: usize,
}

/// How a query is matched and ranked on one index.
#[derive(Debug, Clone)]
pub struct LexicalPlan {
    words: Vec<PlannedWord>,
    /// The words a backend matches on (positions in `words`).
    matched: Vec<usize>,
    total: usize,
}

impl LexicalPlan {
    /// Whether no chunk can match (no word is in the index).
    pub fn is_empty(&self) -> bool {
        self.matched.is_empty()
    }

    /// Whether every word is held by more than [`COMMON_TERM_SHARE`] of the chunks: a
    /// backend may then look among its newest chunks only (`COMMON_QUERY_WINDOW`).
    pub fn all_common(&self) -> bool {
        self.words.iter().all(|w| {
            w.documents == 0 || w.documents as f64 / self.total.max(1) as f64 > COMMON_TERM_SHARE
        })
    }

    /// The indexed terms whose chunks are the candidates, with how many chunks hold each:
    /// the matched words and their other forms (a prefix term matches every word it
    /// starts).
    pub fn match_terms(&self) -> Vec<(QueryTerm, usize)> {
        let mut terms: Vec<(QueryTerm, usize)> = Vec::new();
        for &i in &self.matched {
            let word = &self.words[i];
            if word.own > 0 {
                terms.push((word.term.clone(), word.own));
            }
            terms.extend(word.others.iter().map(|(text, documents)| {
                let term = QueryTerm {
                    text: text.clone(),
                    prefix: false,
                };
                (term, *documents)
            }));
        }
        terms
    }

    /// The hits among `candidates`: ranked by [`LexicalPlan::rank`], one per source, at
    /// most `limit`, each with its snippet around the query's words.
    pub fn hits(&self, candidates: Vec<Chunk>, limit: usize) -> Vec<Hit> {
        let terms: Vec<QueryTerm> = self.words.iter().map(|w| w.term.clone()).collect();
        let ranked = self.rank(candidates);
        best_hits(
            ranked
                .iter()
                .map(|(score, chunk)| (*score, chunk))
                .collect(),
            limit,
            |chunk| snippet(&chunk.text, &terms),
        )
    }

    /// Scores `candidates` by BM25 over every word of the query, best first is the
    /// caller's to sort ([`crate::best_hits`]). Chunks matching no word score 0 and are
    /// left out.
    pub fn rank(&self, candidates: Vec<Chunk>) -> Vec<(f64, Chunk)> {
        let counted: Vec<(Vec<f64>, usize, Chunk)> = candidates
            .into_iter()
            .map(|chunk| {
                let (frequencies, length) = self.frequencies(&chunk.text);
                (frequencies, length, chunk)
            })
            .collect();
        let average =
            counted.iter().map(|(_, n, _)| *n as f64).sum::<f64>() / counted.len().max(1) as f64;
        let total = self.total as f64;
        let idf: Vec<f64> = self
            .words
            .iter()
            .map(|w| {
                let n = w.documents as f64;
                (1.0 + (total - n + 0.5) / (n + 0.5)).ln()
            })
            .collect();
        counted
            .into_iter()
            .filter_map(|(frequencies, length, chunk)| {
                let norm = K1 * (1.0 - B + B * length as f64 / average.max(1.0));
                let score: f64 = frequencies
                    .iter()
                    .zip(&idf)
                    .map(|(&tf, idf)| idf * tf * (K1 + 1.0) / (tf + norm))
                    .sum();
                (score > 0.0).then_some((score, chunk))
            })
            .collect()
    }

    /// Each word's weighted count in `text`, and how many tokens it has.
    fn frequencies(&self, text: &str) -> (Vec<f64>, usize) {
        let mut counts = vec![0.0; self.words.len()];
        let mut length = 0;
        for_each_token(text, |token| {
            length += 1;
            for (word, count) in self.words.iter().zip(counts.iter_mut()) {
                let itself = if word.term.prefix {
                    token.starts_with(word.term.text.as_str())
                } else {
                    token == word.term.text
                };
                if itself {
                    *count += 1.0;
                } else if word.others.iter().any(|(other, _)| other == token) {
                    *count += FORM_WEIGHT;
                }
            }
        });
        (counts, length)
    }
}

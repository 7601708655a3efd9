//! The baseline every lane is held to: a textbook BM25 (Robertson's, k1 1.2, b 0.75, the
//! Lucene inverse document frequency), over the same chunks, with the common English
//! stop-word list of search engines and no stemming. Written apart from the product's
//! normaliser on purpose: it is the yardstick, not a copy of what it measures.

use std::collections::HashMap;

use nanobot_memory_index::Chunk;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Words left out of documents and queries (the classic list of English function words).
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
];

/// A BM25 index over chunks, ranking chunks by source.
pub(crate) struct Textbook {
    sources: Vec<String>,
    lengths: Vec<f64>,
    average: f64,
    postings: HashMap<String, Vec<(usize, f64)>>,
}

/// Lower-cased runs of letters and digits, stop words out.
pub(crate) fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(w))
        .map(str::to_owned)
        .collect()
}

impl Textbook {
    /// Indexes `chunks`.
    pub(crate) fn new<'c>(chunks: impl Iterator<Item = &'c Chunk>) -> Textbook {
        let mut index = Textbook {
            sources: Vec::new(),
            lengths: Vec::new(),
            average: 0.0,
            postings: HashMap::new(),
        };
        for chunk in chunks {
            let id = index.sources.len();
            let terms = words(&chunk.text);
            let mut counts: HashMap<String, f64> = HashMap::new();
            for term in &terms {
                *counts.entry(term.clone()).or_default() += 1.0;
            }
            for (term, count) in counts {
                index.postings.entry(term).or_default().push((id, count));
            }
            index.sources.push(chunk.source.clone());
            index.lengths.push(terms.len() as f64);
        }
        index.average = index.lengths.iter().sum::<f64>() / index.lengths.len().max(1) as f64;
        index
    }

    /// The best `limit` sources for `query`, best first (one per source, ties by source).
    pub(crate) fn search(&self, query: &str, limit: usize) -> Vec<String> {
        let total = self.sources.len() as f64;
        let mut scores: HashMap<usize, f64> = HashMap::new();
        let mut terms = words(query);
        terms.sort();
        terms.dedup();
        for term in terms {
            let Some(posting) = self.postings.get(&term) else {
                continue;
            };
            let n = posting.len() as f64;
            let idf = (1.0 + (total - n + 0.5) / (n + 0.5)).ln();
            for &(id, tf) in posting {
                let norm = K1 * (1.0 - B + B * self.lengths[id] / self.average.max(1.0));
                *scores.entry(id).or_default() += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let mut best: HashMap<&str, f64> = HashMap::new();
        for (id, score) in scores {
            let entry = best.entry(self.sources[id].as_str()).or_insert(f64::MIN);
            *entry = entry.max(score);
        }
        let mut ranked: Vec<(&str, f64)> = best.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        ranked
            .into_iter()
            .take(limit)
            .map(|(source, _)| source.to_owned())
            .collect()
    }
}

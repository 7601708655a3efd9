//! A rule-based reranking stage, measured before it is adopted: each fused hit gains
//! `weight / 60` (about one reciprocal rank's share) times the share of the question's
//! words its text holds (a word counts when the two share their first five letters, a
//! crude stem). Built from the textbook's tokenizer so it mirrors none of the product's.

use nanobot_memory_index::Hit;

use crate::textbook::words;

/// `hits` reordered by their fused score plus the coverage bonus.
pub(crate) fn by_coverage(query: &str, hits: Vec<Hit>, weight: f64) -> Vec<Hit> {
    let mut asked: Vec<String> = words(query).into_iter().map(stem).collect();
    asked.sort();
    asked.dedup();
    if asked.is_empty() {
        return hits;
    }
    let mut scored: Vec<(f64, Hit)> = hits
        .into_iter()
        .map(|hit| {
            let held: Vec<String> = words(&hit.snippet).into_iter().map(stem).collect();
            let covered = asked.iter().filter(|word| held.contains(word)).count();
            let share = covered as f64 / asked.len() as f64;
            (hit.score + weight / 60.0 * share, hit)
        })
        .collect();
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.source.cmp(&b.1.source))
    });
    scored.into_iter().map(|(_, hit)| hit).collect()
}

fn stem(word: String) -> String {
    word.chars().take(5).collect()
}

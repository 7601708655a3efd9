//! Neighbouring turns: a message, or a journal entry, is read in the company of the ones
//! just before and after it. An answer often spans two turns ("What breed is Luna?": one
//! turn names Luna, the next says "a Siamese"), so a hit whose neighbour also matched is
//! more likely the one meant than a hit that matched alone.

use std::collections::HashMap;

use nanobot_memory_index::Hit;

/// The messages and journal entries next to `source` (`session:<key>#<seq>`,
/// `history#<cursor>`); none for a memory file's section.
fn neighbours(source: &str) -> Vec<String> {
    let Some((stem, number)) = source.rsplit_once('#') else {
        return Vec::new();
    };
    let number: u64 = match number.parse() {
        Ok(n) if stem == "history" || stem.starts_with("session:") => n,
        _ => return Vec::new(),
    };
    [number.checked_sub(1), number.checked_add(1)]
        .into_iter()
        .flatten()
        .map(|n| format!("{stem}#{n}"))
        .collect()
}

/// Re-ranks `hits` (fused, best first): each gains `weight` times the score of its better
/// neighbour among them, so of two turns that matched equally, the one whose neighbour
/// matched too comes first. Nothing is added or removed.
pub(crate) fn with_neighbour_support(hits: Vec<Hit>, weight: f64) -> Vec<Hit> {
    if weight <= 0.0 {
        return hits;
    }
    let scores: HashMap<&str, f64> = hits
        .iter()
        .map(|hit| (hit.source.as_str(), hit.score))
        .collect();
    let support: Vec<f64> = hits
        .iter()
        .map(|hit| {
            neighbours(&hit.source)
                .iter()
                .filter_map(|n| scores.get(n.as_str()).copied())
                .fold(0.0, f64::max)
        })
        .collect();
    let mut ranked: Vec<Hit> = hits
        .into_iter()
        .zip(support)
        .map(|(hit, support)| Hit {
            score: hit.score + weight * support,
            ..hit
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.source.cmp(&b.source))
    });
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_memory_index::SourceKind;

    fn hit(source: &str, score: f64) -> Hit {
        Hit {
            source: source.to_owned(),
            kind: SourceKind::Sessions,
            at: None,
            score,
            snippet: String::new(),
        }
    }

    fn order(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.source.as_str()).collect()
    }

    #[test]
    fn a_turn_whose_neighbour_matched_overtakes_an_equal_lone_turn() {
        let hits = vec![
            hit("session:a#9", 0.030),
            hit("session:b#4", 0.029),
            hit("session:b#5", 0.020),
        ];
        let ranked = with_neighbour_support(hits, 0.2);
        assert_eq!(
            order(&ranked),
            ["session:b#4", "session:a#9", "session:b#5"]
        );
    }

    #[test]
    fn other_sessions_files_and_a_zero_weight_change_nothing() {
        let hits = vec![
            hit("session:a#9", 0.030),
            hit("session:b#10", 0.029),
            hit("MEMORY.md#Pets", 0.028),
            hit("MEMORY.md#Pets", 0.001),
        ];
        let same = with_neighbour_support(hits.clone(), 0.5);
        assert_eq!(order(&same), order(&hits));
        assert_eq!(with_neighbour_support(hits.clone(), 0.0), hits);
        assert_eq!(neighbours("history#0"), ["history#1"]);
        assert_eq!(neighbours("history#7"), ["history#6", "history#8"]);
        assert!(neighbours("MEMORY.md#12").is_empty());
    }
}

//! The figures of a ranked list against a question's labels: hit@1, hit@5, hit@10 (a
//! labelled source among the first k), the reciprocal rank of the first labelled source
//! within the ten (0 when none), and nDCG@10 with every labelled source relevant.

use serde::Serialize;

/// Sums of the figures over some questions; [`Figures::mean`] divides.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub(crate) struct Figures {
    /// Questions counted.
    pub(crate) questions: usize,
    /// Share with a labelled source first.
    pub(crate) hit1: f64,
    /// Share with one in the first five.
    pub(crate) hit5: f64,
    /// Share with one in the first ten.
    pub(crate) hit10: f64,
    /// Mean reciprocal rank (within ten).
    pub(crate) mrr: f64,
    /// Mean nDCG@10.
    pub(crate) ndcg10: f64,
}

impl Figures {
    /// One question's figures.
    pub(crate) fn of(ranked: &[String], relevant: &[String]) -> Figures {
        let first = ranked
            .iter()
            .take(10)
            .position(|source| relevant.contains(source));
        let hit = |k: usize| {
            if first.is_some_and(|p| p < k) {
                1.0
            } else {
                0.0
            }
        };
        let dcg: f64 = ranked
            .iter()
            .take(10)
            .enumerate()
            .filter(|(_, source)| relevant.contains(source))
            .map(|(i, _)| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        let ideal: f64 = (0..relevant.len().min(10))
            .map(|i| 1.0 / (i as f64 + 2.0).log2())
            .sum();
        Figures {
            questions: 1,
            hit1: hit(1),
            hit5: hit(5),
            hit10: hit(10),
            mrr: first.map_or(0.0, |p| 1.0 / (p as f64 + 1.0)),
            ndcg10: if ideal > 0.0 { dcg / ideal } else { 0.0 },
        }
    }

    /// Adds another question's (or sum's) figures.
    pub(crate) fn add(&mut self, other: Figures) {
        self.questions += other.questions;
        self.hit1 += other.hit1;
        self.hit5 += other.hit5;
        self.hit10 += other.hit10;
        self.mrr += other.mrr;
        self.ndcg10 += other.ndcg10;
    }

    /// The means of the sums.
    pub(crate) fn mean(self) -> Figures {
        let n = self.questions.max(1) as f64;
        Figures {
            questions: self.questions,
            hit1: self.hit1 / n,
            hit5: self.hit5 / n,
            hit10: self.hit10 / n,
            mrr: self.mrr / n,
            ndcg10: self.ndcg10 / n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Figures;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_hit_at_rank_three_counts_for_five_and_ten_only() {
        let f = Figures::of(&list(&["x", "y", "a", "z"]), &list(&["a"]));
        assert_eq!((f.hit1, f.hit5, f.hit10), (0.0, 1.0, 1.0));
        assert!((f.mrr - 1.0 / 3.0).abs() < 1e-12);
        assert!((f.ndcg10 - 0.5).abs() < 1e-12);
    }

    #[test]
    fn nothing_found_scores_zero_and_two_labels_need_both_for_full_ndcg() {
        assert_eq!(Figures::of(&list(&["x"]), &list(&["a"])).hit10, 0.0);
        let one = Figures::of(&list(&["a", "x"]), &list(&["a", "b"]));
        let both = Figures::of(&list(&["a", "b"]), &list(&["a", "b"]));
        assert!(one.ndcg10 < 1.0 && (both.ndcg10 - 1.0).abs() < 1e-12);
    }
}

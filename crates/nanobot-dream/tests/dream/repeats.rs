//! The repeat guard's rule measured on labelled pairs (`data/repeats.tsv`), against the
//! other rules one could choose: the table this prints is the one in `docs/FACTS.md`.

use std::collections::BTreeSet;

use nanobot_dream::lines::{REPEAT_THRESHOLD, contained, repeats, words};

struct Pair {
    repeat: bool,
    added: String,
    existing: String,
}

fn pairs() -> Vec<Pair> {
    include_str!("data/repeats.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3, "a pair is label, added, existing: {l}");
            Pair {
                repeat: cols[0] == "1",
                added: cols[1].to_owned(),
                existing: cols[2].to_owned(),
            }
        })
        .collect()
}

/// (precision, recall) of `rule` on the pairs.
fn measure(pairs: &[Pair], rule: impl Fn(&str, &str) -> bool) -> (f64, f64) {
    let (mut tp, mut fp, mut fn_) = (0.0, 0.0, 0.0);
    for pair in pairs {
        match (rule(&pair.added, &pair.existing), pair.repeat) {
            (true, true) => tp += 1.0,
            (true, false) => fp += 1.0,
            (false, true) => fn_ += 1.0,
            (false, false) => {}
        }
    }
    let precision = if tp + fp == 0.0 { 1.0 } else { tp / (tp + fp) };
    (precision, tp / (tp + fn_))
}

fn jaccard(a: &str, b: &str) -> f64 {
    let (a, b): (BTreeSet<String>, BTreeSet<String>) = (
        words(a).into_iter().collect(),
        words(b).into_iter().collect(),
    );
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

fn trigram_dice(a: &str, b: &str) -> f64 {
    let grams = |s: &str| -> BTreeSet<String> {
        let chars: Vec<char> = words(s).join(" ").chars().collect();
        chars.windows(3).map(|w| w.iter().collect()).collect()
    };
    let (a, b) = (grams(a), grams(b));
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    2.0 * a.intersection(&b).count() as f64 / (a.len() + b.len()) as f64
}

#[test]
fn the_repeat_rule_refuses_no_distinct_fact_and_most_repeats() {
    let pairs = pairs();
    let repeats_n = pairs.iter().filter(|p| p.repeat).count();
    println!(
        "{} pairs ({repeats_n} repeats, {} distinct)\n| rule | precision | recall |\n|---|---|---|",
        pairs.len(),
        pairs.len() - repeats_n
    );
    let exact = measure(&pairs, |a, b| words(a) == words(b));
    println!(
        "| exact after normalisation | {:.2} | {:.2} |",
        exact.0, exact.1
    );
    for t in [0.5, 0.6, 0.7, 0.8] {
        let j = measure(&pairs, |a, b| jaccard(a, b) >= t);
        println!("| word Jaccard >= {t} | {:.2} | {:.2} |", j.0, j.1);
    }
    for t in [0.6, 0.7, 0.8] {
        let d = measure(&pairs, |a, b| trigram_dice(a, b) >= t);
        println!(
            "| character trigram Dice >= {t} | {:.2} | {:.2} |",
            d.0, d.1
        );
    }
    for t in [0.6, 0.7, 0.8, 0.9] {
        let c = measure(&pairs, |a, b| contained(&words(a), &words(b)) >= t);
        println!(
            "| added words in existing >= {t} | {:.2} | {:.2} |",
            c.0, c.1
        );
    }
    let chosen = measure(&pairs, repeats);
    for pair in pairs
        .iter()
        .filter(|p| repeats(&p.added, &p.existing) != p.repeat)
    {
        println!("  missed: {:?} repeats {:?}", pair.added, pair.existing);
    }
    println!(
        "| chosen: added words in existing >= {REPEAT_THRESHOLD} | {:.2} | {:.2} |",
        chosen.0, chosen.1
    );
    // Refusing a distinct fact loses it: the rule must not, on any labelled pair.
    assert_eq!(chosen.0, 1.0, "the rule refused a distinct fact");
    assert!(
        chosen.1 >= 0.85,
        "the rule lets through too many repeats: {chosen:?}"
    );
    assert!(chosen.1 > exact.1 + 0.3, "no better than exact matching");
}

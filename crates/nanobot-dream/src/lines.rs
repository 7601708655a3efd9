//! Fact lines compared by what they say: the words that carry meaning, a fingerprint that
//! names a line in the memory versions, and the rule that tells a line repeating another
//! from one that adds or changes something.
//!
//! The rule (measured on labelled pairs, see `docs/FACTS.md`): an added line repeats an
//! existing one when, after normalisation, every word it holds is in the existing line. It
//! is directional on purpose: a line that says more than an existing one is not a repeat
//! (refusing it would lose what it adds), and a changed name or number is a new word.
//! Looser thresholds catch a few more rewordings but refused distinct facts on the pairs;
//! a refused fact is lost, a let-through repeat is only untidy.

use std::collections::BTreeSet;

/// The share of an added line's words an existing line must hold for the added line to
/// repeat it: all of them.
pub const REPEAT_THRESHOLD: f64 = 1.0;

/// Words that carry no fact of their own (articles, pronouns, the agent's name for the
/// person): two lines that differ only in them say the same.
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "am",
    "to",
    "of",
    "in",
    "on",
    "at",
    "for",
    "and",
    "or",
    "with",
    "by",
    "as",
    "from",
    "that",
    "this",
    "it",
    "its",
    "has",
    "have",
    "had",
    "user",
    "users",
    "he",
    "she",
    "they",
    "his",
    "her",
    "their",
    "them",
    "i",
    "me",
    "my",
    "we",
    "our",
    "us",
    "very",
    "also",
    "s",
    "currently",
    "now",
    "who",
    "which",
];

/// Whether `line` is a fact line: not blank, not a heading, a rule or a code fence.
pub fn is_fact(line: &str) -> bool {
    let line = line.trim();
    let rule = line
        .chars()
        .all(|c| matches!(c, '-' | '*' | '_' | '=' | ' '));
    !line.starts_with('#') && !line.starts_with("```") && !rule && !words(line).is_empty()
}

/// The words of `line` that carry meaning, in order: lower case, Markdown markers and
/// punctuation dropped, filler words left out, a plural `s` taken off, CJK text as
/// character pairs.
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk = Vec::new();
    for c in line.chars().flat_map(char::to_lowercase) {
        if is_cjk(c) {
            push_word(&mut word, &mut out);
            cjk.push(c);
        } else {
            push_cjk(&mut cjk, &mut out);
            if c.is_alphanumeric() {
                word.push(c);
            } else {
                push_word(&mut word, &mut out);
            }
        }
    }
    push_word(&mut word, &mut out);
    push_cjk(&mut cjk, &mut out);
    out
}

fn push_word(word: &mut String, out: &mut Vec<String>) {
    if !word.is_empty() {
        let w = stem(std::mem::take(word));
        if !FILLER.contains(&w.as_str()) {
            out.push(w);
        }
    }
}

/// A run of CJK characters as overlapping pairs (one character alone stays a word): a
/// character alone says too little, and a changed two-character word changes three pairs.
fn push_cjk(run: &mut Vec<char>, out: &mut Vec<String>) {
    match run.len() {
        0 => {}
        1 => out.push(run[0].to_string()),
        _ => out.extend(run.windows(2).map(|pair| pair.iter().collect::<String>())),
    }
    run.clear();
}

fn stem(word: String) -> String {
    let n = word.chars().count();
    if n > 3
        && word.ends_with('s')
        && !word.ends_with("ss")
        && !word.ends_with("us")
        && !word.ends_with("is")
    {
        return word[..word.len() - 1].to_owned();
    }
    word
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// `text`'s lines, each with its newline, without one occurrence of each of `gone` (the
/// last occurrence: an added line follows the one it repeats).
pub(crate) fn take_out<'a>(text: &'a str, gone: &[impl AsRef<str>]) -> Vec<&'a str> {
    let mut kept: Vec<&str> = text.split_inclusive('\n').collect();
    for line in gone {
        let line = line.as_ref();
        if let Some(i) = kept
            .iter()
            .rposition(|l| l.trim_end_matches(['\n', '\r']) == line)
        {
            kept.remove(i);
        }
    }
    kept
}

/// A stable name for what `line` says (its words, FNV-1a, 16 hex digits): the same in every
/// build and on every machine, so the memory versions can name a line across runs.
pub fn fingerprint(line: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in words(line).join(" ").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The share of `added`'s words that `existing` holds (0 when `added` has none).
pub fn contained(added: &[String], existing: &[String]) -> f64 {
    let added: BTreeSet<&String> = added.iter().collect();
    if added.is_empty() {
        return 0.0;
    }
    let existing: BTreeSet<&String> = existing.iter().collect();
    added.intersection(&existing).count() as f64 / added.len() as f64
}

/// Whether `added` says nothing that `existing` does not already say (see the module).
pub fn repeats(added: &str, existing: &str) -> bool {
    let (a, e) = (words(added), words(existing));
    if a.is_empty() {
        return false;
    }
    if a == e {
        return true;
    }
    // One-word lines repeat only exactly: one shared word is too little to go on.
    a.len() >= 2 && contained(&a, &e) >= REPEAT_THRESHOLD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_case_and_filler_do_not_matter() {
        assert_eq!(
            words("- **User** is allergic to Peanuts."),
            words("allergic to peanut")
        );
        assert_eq!(
            fingerprint("- Lives in Berlin"),
            fingerprint("lives in berlin!")
        );
        assert_ne!(
            fingerprint("- Lives in Berlin"),
            fingerprint("- Lives in Paris")
        );
    }

    #[test]
    fn a_line_saying_more_or_a_different_number_is_not_a_repeat() {
        assert!(repeats(
            "- Allergic to peanuts",
            "- User is allergic to peanuts (severe)"
        ));
        assert!(!repeats(
            "- User is allergic to peanuts (severe)",
            "- Allergic to peanuts"
        ));
        assert!(!repeats("- Daughter Mia is 8", "- Daughter Mia is 7"));
        assert!(!repeats("- Lives in Paris", "- Lives in Berlin"));
        assert!(!repeats("- Berlin", "- Lives in Berlin"));
    }

    #[test]
    fn chinese_lines_compare_by_character_pairs() {
        assert!(repeats("- 用户对花生过敏", "- 用户对花生过敏。"));
        assert!(!repeats("- 用户住在柏林", "- 用户住在巴黎"));
    }

    #[test]
    fn headings_and_rules_are_not_facts() {
        assert!(!is_fact("## Preferences"));
        assert!(!is_fact("---"));
        assert!(!is_fact("   "));
        assert!(is_fact("- Prefers short answers"));
    }
}

//! Names a model's line uses that its source never says. Asked who the user is, or for the
//! facts of a slice that named nobody, a small model fills the gap with a stock person:
//! "John Doe, a software engineer, lives in New York City" and "A user named Alice lives in
//! Lisbon" were archived from a conversation with Ada in Lisbon (issue 32's demo, run on a
//! fresh machine), and Dream then filed "John Doe plans his trip" into `USER.md`. A line
//! naming someone or somewhere the conversation never mentions is invented, whatever else
//! it says, so it is not kept.
//!
//! A name is a capitalised word (a letter first, upper case, at least two characters) that
//! does not start a sentence: a sentence's first word is capitalised by position ("She",
//! "Prefers"), so a name there ("Alice lives in Lisbon") goes unseen; the rule trades it
//! for never taking an ordinary word for a name. Words compare without case, so a
//! capitalised common word the source says in lower case ("Short answers") is said.

use std::collections::HashSet;

/// The words of `text` in lower case: what a claim's names are looked up in.
pub fn said_words(text: &str) -> HashSet<String> {
    words(text).map(|(_, word)| word.to_lowercase()).collect()
}

/// The names of `claim` that are not among `said` (from [`said_words`]), in order, each
/// once.
pub fn unsaid_names<'a>(claim: &'a str, said: &HashSet<String>) -> Vec<&'a str> {
    let mut unsaid: Vec<&str> = Vec::new();
    for word in claim_names(claim) {
        if !said.contains(&word.to_lowercase()) && !unsaid.contains(&word) {
            unsaid.push(word);
        }
    }
    unsaid
}

/// Whether `claim` holds a blank where a value should be ("The user is named [user's
/// name]"): a small model echoing the instruction's list of what to remember, for a slice
/// that said none of it.
pub fn has_blank(claim: &str) -> bool {
    claim.split('[').skip(1).any(|rest| {
        rest.split_once(']')
            .is_some_and(|(inside, _)| inside.chars().any(char::is_alphabetic))
    })
}

/// The capitalised words of `claim` that do not start a sentence.
fn claim_names(claim: &str) -> impl Iterator<Item = &str> {
    words(claim).filter_map(move |(at, word)| {
        let mut chars = word.chars();
        let capitalised = chars.next().is_some_and(char::is_uppercase) && chars.next().is_some();
        (capitalised && !starts_sentence(&claim[..at])).then_some(word)
    })
}

/// Whether a word after `before` starts a sentence: nothing but space before it, or a
/// sentence's end, a list's bullet, a quote or a line break. A colon is not one: what
/// follows "Name:" is the name.
fn starts_sentence(before: &str) -> bool {
    let trimmed = before.trim_end_matches([' ', '\t']);
    match trimmed.chars().last() {
        None => true,
        Some(c) => matches!(
            c,
            '.' | '!' | '?' | '-' | '*' | '•' | '"' | '“' | '(' | '\n' | '\r'
        ),
    }
}

/// The words of `text` (runs of letters and digits that start with a letter) with their
/// byte offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().next().is_some_and(char::is_alphabetic))
        .map(move |w| (w.as_ptr() as usize - text.as_ptr() as usize, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONVERSATION: &str = "USER: Hi! I'm Ada, a software engineer from Berlin. I'm \
        planning a trip to Lisbon in May with my kids, Max and Lina.\nASSISTANT: The \
        Oceanário is worth a morning. I prefer short answers.";

    #[test]
    fn invented_people_and_places_are_unsaid() {
        let said = said_words(CONVERSATION);
        assert_eq!(
            unsaid_names(
                "John Doe, a software engineer, lives in New York City.",
                &said
            ),
            ["Doe", "New", "York", "City"]
        );
        assert_eq!(
            unsaid_names("A user named Alice lives in Lisbon.", &said),
            ["Alice"]
        );
        assert_eq!(unsaid_names("- **Name**: John", &said), ["John"]);
        for grounded in [
            "Ada is a software engineer from Berlin.",
            "She plans a trip to Lisbon in May. Her daughter Lina is six.",
            "Prefers Short answers; visits the Oceanário.",
            "- Max is nine",
            "- **Name**: Ada",
        ] {
            assert!(unsaid_names(grounded, &said).is_empty(), "{grounded}");
        }
        assert!(has_blank("The user is named [user's name]."));
        assert!(!has_blank(
            "Scores [1] and [ ] are not blanks; neither is a bracket ["
        ));
    }
}

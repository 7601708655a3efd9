//! Did it remember, as a viewer would judge: summaries made, a fact carried into memory by
//! Dream and into the next prompt, answers that differ, a last answer from memory, the
//! user's name in `USER.md`, no fact twice, each curated line with its sources, and no
//! name in memory that the conversation never said.

use nanobot_memory_core::grounding::{said_words, unsaid_names};
use nanobot_memory_store::{Document, MemoryDocumentsExt};

use super::{CONVERSATION, Demo, IDLE_TURN};
use crate::AssemblyError;
use nanobot_dream::diff::FileDiff;

/// Words that show a fact of the conversation reached memory: her name, the allergy, the
/// preference for short answers.
const FACT_WORDS: [&str; 5] = ["ada", "peanut", "short", "concise", "brief"];

/// One check of the demo: whether it passed, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DemoCheck {
    /// Whether memory did this.
    pub passed: bool,
    /// What was checked, with what was found.
    pub line: String,
}

impl DemoCheck {
    fn new(passed: bool, line: impl Into<String>) -> Self {
        DemoCheck {
            passed,
            line: line.into(),
        }
    }
}

impl Demo<'_> {
    /// Every check, in order.
    pub(super) async fn checks(
        &mut self,
        report: &nanobot_dream::RunReport,
    ) -> Result<Vec<DemoCheck>, AssemblyError> {
        self.say("\n== Did it remember?");
        let summaries = self.summaries;
        let mut checks = vec![DemoCheck::new(
            summaries > 0,
            format!("{summaries} archives are the model's summaries, not [RAW]"),
        )];
        let diffs = match &report.version {
            Some(version) => self.memory.dream.show(&version.id).await?.1,
            None => Vec::new(),
        };
        checks.extend(self.carried_fact(&diffs).await?);
        checks.push(self.answers_differ());
        checks.push(self.last_answer_remembers());
        checks.push(self.profile_has_name().await?);
        checks.extend(self.memory_audit().await?);
        checks.push(self.names_said(&diffs));
        Ok(checks)
    }

    /// A fact carried into `USER.md` or `memory/MEMORY.md` by the run's version, and that
    /// fact in the next prompt.
    async fn carried_fact(&self, diffs: &[FileDiff]) -> Result<[DemoCheck; 2], AssemblyError> {
        let carried = diffs
            .iter()
            .filter(|d| d.path == Document::User.path() || d.path == Document::Memory.path())
            .flat_map(|d| d.added_lines())
            .find(|line| has_fact(line))
            .map(str::to_owned);
        let prompt = self
            .agent
            .build_prompt(&self.memory, &self.key, "What do you know about me?")
            .await?;
        let prompt_text = serde_json::to_string(&prompt.messages).unwrap_or_default();
        let in_prompt = carried
            .as_deref()
            .is_some_and(|line| prompt_text.contains(&json_escaped(line.trim())));
        Ok([
            DemoCheck::new(
                carried.is_some(),
                match &carried {
                    Some(line) => format!("Dream's version carries a fact into memory: {}", line.trim()),
                    None => "no Dream version carries her name, the allergy or the short-answers preference into USER.md or memory/MEMORY.md".into(),
                },
            ),
            DemoCheck::new(in_prompt, "the next prompt of cli:demo holds that fact"),
        ])
    }

    /// No answer repeats the one before it.
    fn answers_differ(&self) -> DemoCheck {
        let same = self
            .answers
            .windows(2)
            .position(|pair| normalised(&pair[0]) == normalised(&pair[1]));
        match same {
            None => DemoCheck::new(true, "no two answers in a row are the same"),
            Some(n) => DemoCheck::new(
                false,
                format!("answers {} and {} are the same", n + 1, n + 2),
            ),
        }
    }

    /// The last question asks what she said about allergies: the answer names peanuts.
    fn last_answer_remembers(&self) -> DemoCheck {
        let last = self
            .answers
            .last()
            .map(|a| a.to_lowercase())
            .unwrap_or_default();
        let remembered = ["peanut", "amendoim"].iter().any(|w| last.contains(w));
        DemoCheck::new(
            remembered,
            if remembered {
                "the last answer remembers the peanut allergy"
            } else {
                "the last answer does not mention the peanut allergy"
            },
        )
    }

    /// Her name reached her profile, `USER.md`.
    async fn profile_has_name(&self) -> Result<DemoCheck, AssemblyError> {
        let user = self
            .memory
            .documents
            .read_text(Document::User)
            .await?
            .unwrap_or_default();
        let named = user
            .lines()
            .find(|l| words_of(l).any(|w| w == "ada"))
            .map(|l| l.trim().to_owned());
        Ok(match named {
            Some(line) => DemoCheck::new(true, format!("USER.md has her name: {line}")),
            None => DemoCheck::new(false, "USER.md does not have her name"),
        })
    }

    /// No fact line twice, and each line Dream wrote with the journal entries it came from.
    async fn memory_audit(&self) -> Result<[DemoCheck; 2], AssemblyError> {
        let audit = self.memory.dream.audit().await?;
        let twice = match audit.repeated.first() {
            None => DemoCheck::new(
                true,
                format!(
                    "no fact line twice ({} lines Dream wrote)",
                    audit.curated_lines
                ),
            ),
            Some(((path, line), (other_path, other))) => DemoCheck::new(
                false,
                format!(
                    "a fact twice: {path}: {} / {other_path}: {}",
                    line.trim(),
                    other.trim()
                ),
            ),
        };
        let sourced = match audit.unsourced.first() {
            None => DemoCheck::new(
                audit.curated_lines > 0,
                format!(
                    "each of the {} lines Dream wrote names the conversation it came from",
                    audit.curated_lines
                ),
            ),
            Some((path, line)) => DemoCheck::new(
                false,
                format!("{path}: {} has no recorded source", line.trim()),
            ),
        };
        Ok([twice, sourced])
    }
}

impl Demo<'_> {
    /// Every name in a line Dream wrote was said: by her, by the bot, or in the files
    /// before the run. A small model once archived "John Doe, a software engineer, lives
    /// in New York City" from a slice that named nobody, and Dream filed it in `USER.md`.
    fn names_said(&self, diffs: &[FileDiff]) -> DemoCheck {
        let mut source: Vec<&str> = CONVERSATION.to_vec();
        source.push(IDLE_TURN);
        source.extend(self.answers.iter().map(String::as_str));
        source.extend(diffs.iter().flat_map(|d| {
            d.unified
                .lines()
                .filter(|l| !l.starts_with('+') || l.starts_with("+++"))
        }));
        let said = said_words(&source.join("\n"));
        let invented = diffs
            .iter()
            .flat_map(|d| d.added_lines().map(move |line| (&d.path, line)))
            .find_map(|(path, line)| {
                let unsaid = unsaid_names(line, &said);
                (!unsaid.is_empty()).then(|| (path, line.trim(), unsaid.join(", ")))
            });
        match invented {
            None => DemoCheck::new(true, "every name Dream wrote was said in the conversation"),
            Some((path, line, names)) => DemoCheck::new(
                false,
                format!("{path}: {line} names {names}, which nobody said"),
            ),
        }
    }
}

/// Whether `line` names a fact of the conversation: one of [`FACT_WORDS`] as the start of
/// a word ("peanuts" counts, "Obrigada" does not).
fn has_fact(line: &str) -> bool {
    words_of(line).any(|word| {
        FACT_WORDS
            .iter()
            .any(|w| word.starts_with(w) && (word.len() <= w.len() + 2))
    })
}

fn words_of(line: &str) -> impl Iterator<Item = String> + '_ {
    line.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

fn normalised(answer: &str) -> String {
    answer.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` as it appears inside a JSON string.
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted.trim_matches('"').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_whole_words() {
        assert!(has_fact("- Name: Ada"));
        assert!(has_fact("- Lina is allergic to peanuts"));
        assert!(has_fact("- Prefers short answers"));
        assert!(!has_fact("- Obrigada is thank you"));
        assert!(!has_fact("- Canada trip"));
    }
}

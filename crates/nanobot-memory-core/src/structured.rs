//! The structured archive: a request small models can answer (a short system message, the
//! messages as text, a JSON schema the server enforces) and its answer rendered as the
//! journal text nanobot-ai writes, one `- [mark] fact` line per fact.

use nanobot_llm_port::{JsonSchemaFormat, Message, ResponseFormat};
use serde_json::{Value, json};

use crate::grounding::{has_blank, said_words, unsaid_names};

/// The marks a fact may carry, as the free-text archive instruction defines them.
pub const MARKS: [&str; 5] = ["permanent", "durable", "ephemeral", "correction", "skip"];

const SYSTEM: &str = "You keep the long-term memory of a personal assistant. From the \
conversation below, list the facts the user stated that are worth remembering in two weeks: \
who they are (their name, work, home), their family, health, preferences, rules and \
decisions, each as a short sentence about the user in the third person. Take facts only \
from the USER lines; the ASSISTANT lines are context. Mark each fact: permanent (identity, \
family, health, preferences, habits), durable (knowledge, plans, configuration), ephemeral \
(the state of a task), correction (corrects an earlier fact), skip (filler). Then summarise \
the conversation in one sentence. Answer with JSON only.";

/// How much of an assistant message the structured request shows: the user's own words
/// carry the facts, and a small window is better spent on them.
pub const ASSISTANT_EXCERPT_CHARS: usize = 240;

/// The schema of a structured archive answer.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "maxItems": 8,
                "items": {
                    "type": "object",
                    "properties": {
                        "mark": {"type": "string", "enum": MARKS},
                        "fact": {"type": "string", "minLength": 1, "maxLength": 240}
                    },
                    "required": ["mark", "fact"],
                    "additionalProperties": false
                }
            },
            "summary": {"type": "string", "maxLength": 400}
        },
        "required": ["facts", "summary"],
        "additionalProperties": false
    })
}

/// The response format that asks for [`schema`].
pub fn format() -> ResponseFormat {
    ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "memory_archive".into(),
            schema: schema(),
            strict: Some(true),
        },
    }
}

/// The conversation as the structured request shows it: the archive's lines
/// ([`crate::raw::format_messages`]), assistant lines cut to [`ASSISTANT_EXCERPT_CHARS`].
pub fn conversation(lines: &[String]) -> String {
    lines
        .iter()
        .map(|line| {
            let assistant = line.find("] ASSISTANT: ").is_some_and(|at| at < 40)
                || line.starts_with("ASSISTANT: ");
            match line.char_indices().nth(ASSISTANT_EXCERPT_CHARS) {
                Some((cut, _)) if assistant => format!("{}…", &line[..cut]),
                _ => line.clone(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The request's messages around the conversation's text.
pub fn messages(conversation: &str) -> Vec<Message> {
    vec![
        Message::system(SYSTEM),
        Message::user(format!("Conversation:\n{conversation}")),
    ]
}

/// The journal text of a structured answer: one `- [mark] fact` line per kept fact (the
/// summary as an `ephemeral` line when no fact was kept); `Ok(None)` when there is nothing
/// to keep; `Err` with the reason when the answer is not what the schema asks (a model that
/// ignores the schema, or a cut answer) or when every line it gave names someone or
/// somewhere `lines` (the archived messages, [`crate::format_messages`]) never mention, so
/// the caller keeps the raw messages instead. A line with an invented name or a blank
/// ("[user's name]") is left out ([`crate::grounding`]).
pub fn render(answer: &str, lines: &[String]) -> Result<Option<String>, String> {
    let value: Value =
        serde_json::from_str(answer.trim()).map_err(|e| format!("not JSON ({e})"))?;
    let facts = value
        .get("facts")
        .and_then(Value::as_array)
        .ok_or("no facts list")?;
    let said = said_words(&lines.join("\n"));
    let mut kept = Vec::new();
    let mut invented: Vec<String> = Vec::new();
    for fact in facts {
        let mark = fact
            .get("mark")
            .and_then(Value::as_str)
            .unwrap_or("durable");
        let mark = if MARKS.contains(&mark) {
            mark
        } else {
            "durable"
        };
        let Some(text) = fact.get("fact").and_then(Value::as_str) else {
            return Err("a fact without its text".into());
        };
        let text = one_line(text);
        let line = format!("- [{mark}] {text}");
        if mark == "skip" || text.is_empty() || kept.contains(&line) {
            continue;
        }
        if grounded(&text, &said) {
            kept.push(line);
        } else {
            invented.push(text);
        }
    }
    if kept.is_empty() {
        let summary = one_line(
            value
                .get("summary")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        );
        if !summary.is_empty() && grounded(&summary, &said) {
            kept.push(format!("- [ephemeral] {summary}"));
        } else if !summary.is_empty() {
            invented.push(summary);
        }
    }
    match (kept.is_empty(), invented.is_empty()) {
        (true, true) => Ok(None),
        (true, false) => Err(format!(
            "each line names someone or somewhere the conversation does not ({})",
            invented.join("; ")
        )),
        (false, _) => {
            if !invented.is_empty() {
                tracing::warn!(left_out = ?invented, "archive lines naming what the conversation does not");
            }
            Ok(Some(kept.join("\n")))
        }
    }
}

/// Whether `text` names only what was said and leaves no blank.
fn grounded(text: &str, said: &std::collections::HashSet<String>) -> bool {
    unsaid_names(text, said).is_empty() && !has_blank(text)
}

/// `text` on one line, its spaces collapsed.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The archived messages the answers below are about.
    fn lines() -> Vec<String> {
        vec![
            "[2026-05-01 10:00] USER: Hi, I'm Ada, a software engineer from Berlin. My \
             daughter Lina is allergic to peanuts."
                .to_owned(),
            "[2026-05-01 10:01] ASSISTANT: Noted, Ada. Enjoy the trip!".to_owned(),
        ]
    }

    #[test]
    fn answers_render_as_fact_lines_and_bad_ones_are_refused() {
        let answer = r#"{"facts": [{"mark": "permanent", "fact": "Her name is  Ada"},
            {"mark": "skip", "fact": "said hello"}, {"mark": "weird", "fact": "Lina is allergic to peanuts"},
            {"mark": "permanent", "fact": "Her name is Ada"}], "summary": "A trip."}"#;
        assert_eq!(
            render(answer, &lines()).unwrap().unwrap(),
            "- [permanent] Her name is Ada\n- [durable] Lina is allergic to peanuts"
        );
        assert_eq!(
            render(r#"{"facts": [], "summary": "Planning a trip."}"#, &lines())
                .unwrap()
                .unwrap(),
            "- [ephemeral] Planning a trip."
        );
        assert_eq!(
            render(r#"{"facts": [], "summary": " "}"#, &lines()).unwrap(),
            None
        );
        for bad in [
            "",
            "{\"facts\": [",
            "[1, 2]",
            "{\"summary\": \"x\"}",
            "{\"facts\": [{\"mark\": \"durable\"}]}",
        ] {
            assert!(render(bad, &lines()).is_err(), "{bad}");
        }
    }

    #[test]
    fn lines_naming_what_the_conversation_does_not_are_left_out() {
        // Seen in the demo on a fresh machine: stock people where the slice named nobody.
        let answer = r#"{"facts": [{"mark": "permanent", "fact": "John Doe, a software engineer, lives in New York City."},
            {"mark": "permanent", "fact": "A user named Alice lives in Lisbon."},
            {"mark": "permanent", "fact": "The user's home is in [user's home address]."},
            {"mark": "permanent", "fact": "She is allergic to peanuts? No, Lina is."}],
            "summary": "A trip."}"#;
        assert_eq!(
            render(answer, &lines()).unwrap().unwrap(),
            "- [permanent] She is allergic to peanuts? No, Lina is."
        );
        // Nothing grounded at all: an error, so the raw messages are kept instead.
        let invented = r#"{"facts": [{"mark": "durable",
            "fact": "He works at Acme Corp."}], "summary": "John Doe talks about Acme."}"#;
        let why = render(invented, &lines()).unwrap_err();
        assert!(
            why.contains("Acme Corp") && why.contains("John Doe"),
            "{why}"
        );
        assert_eq!(schema()["required"], json!(["facts", "summary"]));
    }
}

//! The structured archive: a request small models can answer (a short system message, the
//! messages as text, a JSON schema the server enforces) and its answer rendered as the
//! journal text nanobot-ai writes, one `- [mark] fact` line per fact.

use nanobot_llm_port::{JsonSchemaFormat, Message, ResponseFormat};
use serde_json::{Value, json};

/// The marks a fact may carry, as the free-text archive instruction defines them.
pub const MARKS: [&str; 5] = ["permanent", "durable", "ephemeral", "correction", "skip"];

const SYSTEM: &str = "You keep the long-term memory of a personal assistant. First, in \
\"user\", say who the user is as their own lines below tell it (their name, work, where \
they live), in one sentence in the third person, or an empty string when they do not say. \
Then, from the conversation, list the facts the user stated that are worth remembering in two weeks: \
who they are, their family, health, preferences, rules and decisions, each as a short \
sentence about the user in the third person. Take facts only from the USER lines; the \
ASSISTANT lines are context. Mark each fact: permanent (identity, family, health, \
preferences, habits), durable (knowledge, plans, configuration), ephemeral (the state of a \
task), correction (corrects an earlier fact), skip (filler). Then summarise the \
conversation in one sentence. Answer with JSON only.";

/// How much of an assistant message the structured request shows: the user's own words
/// carry the facts, and a small window is better spent on them.
pub const ASSISTANT_EXCERPT_CHARS: usize = 240;

/// The schema of a structured archive answer.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "user": {"type": "string", "maxLength": 200},
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
        "required": ["user", "facts", "summary"],
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
/// ignores the schema, or a cut answer), so the caller keeps the raw messages instead.
pub fn render(answer: &str) -> Result<Option<String>, String> {
    let value: Value =
        serde_json::from_str(answer.trim()).map_err(|e| format!("not JSON ({e})"))?;
    let facts = value
        .get("facts")
        .and_then(Value::as_array)
        .ok_or("no facts list")?;
    let mut lines = Vec::new();
    // Who the user is comes first, as a lasting fact: a small model listing facts left
    // the user's name out when it was said beside a weightier fact (issue 32's demo).
    let user = value
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let user = user.split_whitespace().collect::<Vec<_>>().join(" ");
    if user.chars().any(char::is_alphanumeric) {
        lines.push(format!("- [permanent] {user}"));
    }
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
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let line = format!("- [{mark}] {text}");
        if mark == "skip" || text.is_empty() || lines.contains(&line) {
            continue;
        }
        lines.push(line);
    }
    if lines.is_empty() {
        let summary = value
            .get("summary")
            .and_then(Value::as_str)
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        if summary.is_empty() {
            return Ok(None);
        }
        lines.push(format!("- [ephemeral] {summary}"));
    }
    Ok(Some(lines.join("\n")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn answers_render_as_fact_lines_and_bad_ones_are_refused() {
        let answer = r#"{"facts": [{"mark": "permanent", "fact": "Her name is  Maria"},
            {"mark": "skip", "fact": "said hello"}, {"mark": "weird", "fact": "Lina is allergic to peanuts"},
            {"mark": "permanent", "fact": "Her name is Maria"}], "summary": "A trip."}"#;
        assert_eq!(
            render(answer).unwrap().unwrap(),
            "- [permanent] Her name is Maria\n- [durable] Lina is allergic to peanuts"
        );
        assert_eq!(
            render(r#"{"facts": [], "summary": "Planning a trip."}"#)
                .unwrap()
                .unwrap(),
            "- [ephemeral] Planning a trip."
        );
        assert_eq!(render(r#"{"facts": [], "summary": " "}"#).unwrap(), None);
        for bad in [
            "",
            "{\"facts\": [",
            "[1, 2]",
            "{\"summary\": \"x\"}",
            "{\"facts\": [{\"mark\": \"durable\"}]}",
        ] {
            assert!(render(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn who_the_user_is_comes_first_as_a_lasting_fact() {
        let answer = r#"{"user": "Ada is a  software engineer from Berlin.",
            "facts": [{"mark": "permanent", "fact": "Lina is allergic to peanuts"}],
            "summary": "A trip."}"#;
        assert_eq!(
            render(answer).unwrap().unwrap(),
            "- [permanent] Ada is a software engineer from Berlin.\n- [permanent] Lina is allergic to peanuts"
        );
        let unsaid = r#"{"user": " ", "facts": [], "summary": "Planning a trip."}"#;
        assert_eq!(
            render(unsaid).unwrap().unwrap(),
            "- [ephemeral] Planning a trip."
        );
        assert_eq!(schema()["required"], json!(["user", "facts", "summary"]));
    }
}

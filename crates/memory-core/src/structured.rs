//! The structured archive: a request small models can answer (a short system message, the
//! messages as text, a JSON schema the server enforces) and its answer rendered as the
//! journal text nanobot-ai writes, one `- [mark] fact` line per fact.

use llm_port::{JsonSchemaFormat, Message, ResponseFormat};
use serde_json::{Value, json};

/// The marks a fact may carry, as the free-text archive instruction defines them.
pub const MARKS: [&str; 5] = ["permanent", "durable", "ephemeral", "correction", "skip"];

const SYSTEM: &str = "You keep the long-term memory of a personal assistant. From the \
conversation below, list the facts worth remembering in two weeks: what the user would \
otherwise have to repeat (names, people, health, preferences, rules, decisions). Mark each \
fact: permanent (preferences, traits, habits), durable (knowledge, configuration), \
ephemeral (the state of a task), correction (corrects an earlier fact), skip (filler). \
Then summarise the conversation in one or two sentences. Answer with JSON only.";

/// The schema of a structured archive answer.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "maxItems": 12,
                "items": {
                    "type": "object",
                    "properties": {
                        "mark": {"type": "string", "enum": MARKS},
                        "fact": {"type": "string", "minLength": 1, "maxLength": 300}
                    },
                    "required": ["mark", "fact"],
                    "additionalProperties": false
                }
            },
            "summary": {"type": "string", "maxLength": 600}
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
}

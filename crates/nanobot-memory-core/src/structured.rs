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

/// The most user messages an answer lists one by one; a slice with more is asked for one
/// flat list, so the repeated openings do not crowd out the facts in the answer's tokens.
pub const PER_MESSAGE_MAX: usize = 6;

/// How much of a user message opens its item in a per-message answer.
pub const OPENING_CHARS: usize = 80;

/// What the per-message request adds to [`SYSTEM`].
const PER_MESSAGE: &str = " Go through the USER messages one by one, in order: each item \
of by_message opens with the start of one message, then lists the facts that message states \
(none for small talk).";

/// The request for the archive of `lines` ([`crate::format_messages`]): its messages and
/// the schema its answer must follow. A slice of at most [`PER_MESSAGE_MAX`] user messages
/// is asked message by message: a small model that lists one flat set of facts for a whole
/// slice drops some (her name beside her daughter's allergy); walking the messages one by
/// one, each opening forced by the schema, keeps each message's facts in view.
pub fn request(lines: &[String]) -> (Vec<Message>, ResponseFormat) {
    let openings = user_openings(lines);
    let per_message = !openings.is_empty() && openings.len() <= PER_MESSAGE_MAX;
    let messages = framed(per_message, &conversation(lines));
    let format = if per_message {
        // `prefixItems` is outside OpenAI's strict subset: the schema guides that server
        // and binds llama.cpp's (which turns any schema into a grammar).
        response_format(per_message_schema(&openings), None)
    } else {
        response_format(schema(), Some(true))
    };
    (messages, format)
}

/// The longest request frame [`request`] makes, for sizing slices.
pub fn frame() -> Vec<Message> {
    framed(true, "")
}

/// The request's messages around `conversation`, asked message by message or not.
fn framed(per_message: bool, conversation: &str) -> Vec<Message> {
    let system = if per_message {
        format!("{SYSTEM}{PER_MESSAGE}")
    } else {
        SYSTEM.to_owned()
    };
    vec![
        Message::system(system),
        Message::user(format!("Conversation:\n{conversation}")),
    ]
}

/// The opening of each user message among `lines`, on one line.
fn user_openings(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| role_text(line, "USER"))
        .map(|text| one_line(text).chars().take(OPENING_CHARS).collect())
        .collect()
}

/// The text of a line of `role`'s message (`[stamp] ROLE [tools: …]: text`), `None` for
/// another role's.
fn role_text<'a>(line: &'a str, role: &str) -> Option<&'a str> {
    let marker = format!("] {role}");
    let rest = match line.find(&marker) {
        Some(at) if at < 40 => &line[at + marker.len()..],
        _ => line.strip_prefix(role)?,
    };
    let rest = match rest.strip_prefix(" [tools: ") {
        Some(tools) => tools.split_once(']')?.1,
        None => rest,
    };
    rest.strip_prefix(": ")
}

/// The schema of a flat structured archive answer: a list of facts and a summary.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "facts": facts_schema(8),
            "summary": summary_schema()
        },
        "required": ["facts", "summary"],
        "additionalProperties": false
    })
}

/// The schema of a per-message answer: one item per user message, in order, each opening
/// with that message's start (a constant) and listing its facts; then a summary.
pub fn per_message_schema(openings: &[String]) -> Value {
    let items: Vec<Value> = openings
        .iter()
        .map(|opening| {
            json!({
                "type": "object",
                "properties": {
                    "message": {"const": opening},
                    "facts": facts_schema(4)
                },
                "required": ["message", "facts"],
                "additionalProperties": false
            })
        })
        .collect();
    json!({
        "type": "object",
        "properties": {
            "by_message": {
                "type": "array",
                "prefixItems": items,
                "minItems": openings.len(),
                "maxItems": openings.len()
            },
            "summary": summary_schema()
        },
        "required": ["by_message", "summary"],
        "additionalProperties": false
    })
}

fn facts_schema(max: usize) -> Value {
    json!({
        "type": "array",
        "maxItems": max,
        "items": {
            "type": "object",
            "properties": {
                "mark": {"type": "string", "enum": MARKS},
                "fact": {"type": "string", "minLength": 1, "maxLength": 240}
            },
            "required": ["mark", "fact"],
            "additionalProperties": false
        }
    })
}

fn summary_schema() -> Value {
    json!({"type": "string", "maxLength": 400})
}

/// The response format that asks for `schema`.
fn response_format(schema: Value, strict: Option<bool>) -> ResponseFormat {
    ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "memory_archive".into(),
            schema,
            strict,
        },
    }
}

/// The conversation as the structured request shows it: the archive's lines
/// ([`crate::raw::format_messages`]), assistant lines cut to [`ASSISTANT_EXCERPT_CHARS`].
pub fn conversation(lines: &[String]) -> String {
    lines
        .iter()
        .map(|line| {
            let assistant = role_text(line, "ASSISTANT").is_some();
            match line.char_indices().nth(ASSISTANT_EXCERPT_CHARS) {
                Some((cut, _)) if assistant => format!("{}…", &line[..cut]),
                _ => line.clone(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let facts = answer_facts(&value).ok_or("no facts list")?;
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

/// The facts of a flat answer, or of a per-message one in message order.
fn answer_facts(value: &Value) -> Option<Vec<&Value>> {
    if let Some(facts) = value.get("facts").and_then(Value::as_array) {
        return Some(facts.iter().collect());
    }
    let items = value.get("by_message").and_then(Value::as_array)?;
    let mut facts = Vec::new();
    for item in items {
        facts.extend(item.get("facts").and_then(Value::as_array)?);
    }
    Some(facts)
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

    #[test]
    fn assistant_lines_are_cut_and_user_lines_kept_whole() {
        let long = "word ".repeat(100);
        let slice = [
            format!("[2026-05-01 10:00] USER: {long}"),
            format!("[2026-05-01 10:01] ASSISTANT: {long}"),
            // An answer after tool calls carries its tools and is cut all the same.
            format!("[2026-05-01 10:02] ASSISTANT [tools: web_search]: {long}"),
        ];
        let shown = conversation(&slice);
        let shown: Vec<&str> = shown.lines().collect();
        assert_eq!(shown[0], slice[0]);
        for line in &shown[1..] {
            assert_eq!(line.chars().count(), ASSISTANT_EXCERPT_CHARS + 1, "{line}");
            assert!(line.ends_with('…'), "{line}");
        }
    }

    /// The schema of a request, and whether it asks for strict adherence.
    fn schema_of(format: ResponseFormat) -> (Value, Option<bool>) {
        let ResponseFormat::JsonSchema { json_schema } = format else {
            panic!("not a schema");
        };
        (json_schema.schema, json_schema.strict)
    }

    #[test]
    fn a_short_slice_is_asked_message_by_message() {
        let mut slice = lines();
        slice.push("[2026-05-01 10:02] USER [tools: search]: And   book\nthe train.".to_owned());
        let (messages, format) = request(&slice);
        let system = messages[0].content().unwrap().joined_text();
        assert!(system.ends_with(PER_MESSAGE), "{system}");
        let (schema, strict) = schema_of(format);
        assert_eq!(strict, None);
        let items = schema["properties"]["by_message"]["prefixItems"]
            .as_array()
            .unwrap();
        let openings: Vec<&Value> = items
            .iter()
            .map(|item| &item["properties"]["message"]["const"])
            .collect();
        assert_eq!(
            openings,
            [
                "Hi, I'm Ada, a software engineer from Berlin. My daughter Lina is allergic to pe",
                "And book the train."
            ]
        );
        assert_eq!(schema["properties"]["by_message"]["maxItems"], 2);
        let answer = r#"{"by_message": [
            {"message": "Hi, I'm Ada", "facts": [{"mark": "permanent", "fact": "Ada is a software engineer from Berlin"},
                {"mark": "permanent", "fact": "Lina is allergic to peanuts"}]},
            {"message": "And book", "facts": []}], "summary": "A trip."}"#;
        assert_eq!(
            render(answer, &slice).unwrap().unwrap(),
            "- [permanent] Ada is a software engineer from Berlin\n\
             - [permanent] Lina is allergic to peanuts"
        );
        let broken = r#"{"by_message": [{"message": "Hi"}], "summary": "x"}"#;
        assert!(render(broken, &slice).is_err());
    }

    #[test]
    fn a_long_slice_or_one_without_user_messages_is_asked_for_one_list() {
        let many: Vec<String> = (0..=PER_MESSAGE_MAX)
            .map(|i| format!("[2026-05-01 10:0{i}] USER: message {i}"))
            .collect();
        let assistant_only = vec!["[2026-05-01 10:00] ASSISTANT: Hello".to_owned()];
        for slice in [many, assistant_only] {
            let (messages, format) = request(&slice);
            assert!(
                !messages[0]
                    .content()
                    .unwrap()
                    .joined_text()
                    .contains(PER_MESSAGE)
            );
            assert_eq!(schema_of(format), (schema(), Some(true)));
        }
    }
}

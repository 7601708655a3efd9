//! Routed appends. When the history's facts are tagged, the plan does not pick some of them:
//! it routes each of the first [`MAX_APPENDS`] facts, in order, to one section of one file
//! or to [`NOT_KEPT`]. The fact comes first (a constant the model copies), then what it is
//! about (a phrase per file: "the user or their family" for `USER.md`), then the file (a
//! constant that follows) and one of that file's sections. Measured with
//! Qwen2.5-Coder-1.5B on the demo's conversation (docs/FACTS.md): picking facts freely it
//! kept 2 of 7, all in `memory/MEMORY.md`; routed by file name, 8 of 8, all still under
//! MEMORY.md's "User Information"; routed by what a fact is about, the facts about Ada and
//! her family went to `USER.md`.

use serde_json::{Value, json};

use super::{MAX_APPENDS, heading_level};
use crate::overlay::Overlay;
use crate::sandbox;

/// The file a routed fact names when it is not worth keeping.
pub const NOT_KEPT: &str = "none";

/// Each file a plan may name with its sections, in the file's order.
pub fn sections(overlay: &Overlay, files: &[String]) -> Vec<(String, Vec<String>)> {
    files
        .iter()
        .map(|file| {
            let text = sandbox::parse(file)
                .ok()
                .and_then(|t| overlay.get(&t).map(str::to_owned))
                .unwrap_or_default();
            let mut headings: Vec<String> = Vec::new();
            for line in text.lines().filter(|l| heading_level(l).is_some()) {
                let heading = line.trim_start_matches('#').trim().to_owned();
                if !heading.is_empty() && !headings.contains(&heading) {
                    headings.push(heading);
                }
            }
            (file.clone(), headings)
        })
        .collect()
}

/// The `append` schema routing each of the first facts: a tuple, one item per fact.
pub(super) fn append_schema(sections: &[(String, Vec<String>)], facts: &[String]) -> Value {
    let routed: Vec<Value> = facts
        .iter()
        .take(MAX_APPENDS)
        .map(|fact| route(sections, fact))
        .collect();
    json!({
        "type": "array",
        "prefixItems": routed,
        "minItems": routed.len(),
        "maxItems": routed.len()
    })
}

/// What facts of `file` are about, as the model chooses between them.
fn about(file: &str) -> String {
    match file {
        "USER.md" => "the user or their family".to_owned(),
        "memory/MEMORY.md" => "plans, projects or decisions".to_owned(),
        "SOUL.md" => "how the assistant should behave".to_owned(),
        skill => format!("the workflow of {skill}"),
    }
}

/// One fact's choices: each file with one of its sections, or not kept.
fn route(sections: &[(String, Vec<String>)], fact: &str) -> Value {
    let mut choices: Vec<Value> = sections
        .iter()
        .map(|(file, headings)| {
            let heading = if headings.is_empty() {
                json!({"type": "string", "maxLength": 200})
            } else {
                json!({"type": "string", "enum": headings})
            };
            json!({
                "type": "object",
                "properties": {
                    "line": {"const": fact},
                    "about": {"const": about(file)},
                    "file": {"const": file},
                    "heading": heading
                },
                "required": ["line", "about", "file", "heading"],
                "additionalProperties": false
            })
        })
        .collect();
    choices.push(json!({
        "type": "object",
        "properties": {
            "line": {"const": fact},
            "about": {"const": "nothing lasting"},
            "file": {"const": NOT_KEPT}
        },
        "required": ["line", "about", "file"],
        "additionalProperties": false
    }));
    json!({"anyOf": choices})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_fact_is_routed_in_order_to_a_section_of_its_file_or_not_kept() {
        let sections = vec![
            ("USER.md".to_owned(), vec!["Basic Information".to_owned()]),
            ("SOUL.md".to_owned(), vec![]),
        ];
        let facts: Vec<String> = (0..10).map(|n| format!("fact {n}")).collect();
        let schema = append_schema(&sections, &facts);
        let items = schema["prefixItems"].as_array().unwrap();
        assert_eq!(items.len(), MAX_APPENDS);
        assert_eq!(schema["minItems"], json!(MAX_APPENDS));
        let first = items[0]["anyOf"].as_array().unwrap();
        assert_eq!(first.len(), 3);
        assert_eq!(first[0]["properties"]["line"]["const"], json!("fact 0"));
        assert_eq!(first[0]["properties"]["file"]["const"], json!("USER.md"));
        assert_eq!(
            first[0]["properties"]["heading"]["enum"],
            json!(["Basic Information"])
        );
        assert_eq!(first[2]["properties"]["file"]["const"], json!(NOT_KEPT));
        // The fact comes first, so the model has read it when it says what it is about.
        let keys: Vec<&String> = first[0]["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["line", "about", "file", "heading"]);
        assert_eq!(
            first[0]["properties"]["about"]["const"],
            json!("the user or their family")
        );
    }
}

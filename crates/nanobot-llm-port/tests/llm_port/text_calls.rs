//! The one parser of tool calls written as text, as the turn and Dream use it.

use nanobot_llm_port::text::{CallPlacement, tool_calls_in_text};

const OFFERED: [&str; 3] = ["search_memory", "write_file", "read_file"];

fn calls(text: &str, placement: CallPlacement) -> Vec<(String, String, String)> {
    tool_calls_in_text(text, &OFFERED, placement, |n| format!("id{n}"))
        .into_iter()
        .map(|c| (c.id, c.function.name, c.function.arguments))
        .collect()
}

fn one(name: &str, arguments: &str) -> Vec<(String, String, String)> {
    vec![("id0".into(), name.into(), arguments.into())]
}

#[test]
fn every_wrapping_small_models_use_is_read_as_a_whole_answer() {
    let expected = one("search_memory", r#"{"query":"cats"}"#);
    for text in [
        r#"{"name": "search_memory", "arguments": {"query": "cats"}}"#,
        "```json\n{\"name\": \"search_memory\", \"arguments\": {\"query\": \"cats\"}}\n```",
        "```\n{\"name\": \"search_memory\", \"parameters\": {\"query\": \"cats\"}}```",
        "<tool_call>\n{\"name\": \"search_memory\", \"arguments\": {\"query\": \"cats\"}}\n</tool_call>",
        r#"{{"name": "search_memory", "arguments": {{"query": "cats"}}}}"#,
        r#"{{"name": "search_memory", "arguments": {"query": "cats"}}}}"#,
        "<think>the user wants cats</think>\n{\"name\": \"search_memory\", \"arguments\": \"{\\\"query\\\":\\\"cats\\\"}\"}",
    ] {
        assert_eq!(calls(text, CallPlacement::WholeAnswer), expected, "{text}");
        assert_eq!(calls(text, CallPlacement::Anywhere), expected, "{text}");
    }
}

#[test]
fn a_call_quoted_in_prose_is_a_call_only_where_calls_may_stand_anywhere() {
    let text =
        "A call looks like {\"name\": \"write_file\", \"arguments\": {\"path\": \"a\"}} here.";
    assert!(calls(text, CallPlacement::WholeAnswer).is_empty());
    assert_eq!(
        calls(text, CallPlacement::Anywhere),
        one("write_file", r#"{"path":"a"}"#)
    );
}

#[test]
fn several_calls_in_a_row_keep_their_order_and_get_their_own_ids() {
    let text = "{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\"}}\n\
                {\"name\": \"search_memory\"}";
    let expected = vec![
        (
            "id0".to_owned(),
            "write_file".to_owned(),
            r#"{"path":"a"}"#.to_owned(),
        ),
        (
            "id1".to_owned(),
            "search_memory".to_owned(),
            "{}".to_owned(),
        ),
    ];
    assert_eq!(calls(text, CallPlacement::WholeAnswer), expected);
    assert_eq!(calls(text, CallPlacement::Anywhere), expected);
}

#[test]
fn objects_that_are_not_calls_of_offered_tools_are_not_calls() {
    for text in [
        r#"{"name": "rm_rf", "arguments": {}}"#,
        r#"{"name": "search_memory", "arguments": [1, 2]}"#,
        r#"{"name": "search_memory", "arguments": "not json"}"#,
        r#"{"name": "search_memory", "arguments": "[1]"}"#,
        r#"{"name": 7}"#,
        r#"{"tool": "search_memory"}"#,
        "{\"name\": \"search_memory\", \"arguments\": {\"query\": ",
        "",
        "{{{{",
    ] {
        assert!(calls(text, CallPlacement::Anywhere).is_empty(), "{text}");
        assert!(calls(text, CallPlacement::WholeAnswer).is_empty(), "{text}");
    }
}

#[test]
fn a_call_nested_in_another_object_is_not_read_out_of_it() {
    let text = r#"{"plan": {"name": "write_file", "arguments": {}}} {"name": "search_memory"}"#;
    assert_eq!(
        calls(text, CallPlacement::Anywhere),
        one("search_memory", "{}")
    );
    assert!(calls(text, CallPlacement::WholeAnswer).is_empty());
}

/// Every input of the `text_tool_calls` fuzz corpus (`fuzz/corpus/`) holds the target's
/// properties, and the committed seeds are read as the calls they hold.
#[test]
fn the_fuzz_corpus_replays() {
    let mut anywhere_total = 0;
    for (_, data) in nanobot_bench_workload::testing::fuzz_corpus("text_tool_calls") {
        let text = String::from_utf8_lossy(&data).into_owned();
        let whole = tool_calls_in_text(&text, &OFFERED, CallPlacement::WholeAnswer, |n| {
            n.to_string()
        });
        let anywhere =
            tool_calls_in_text(&text, &OFFERED, CallPlacement::Anywhere, |n| n.to_string());
        assert!(whole.len() <= anywhere.len(), "{text}");
        for call in whole.iter().chain(&anywhere) {
            assert!(
                call.arguments_json().is_ok_and(|v| v.is_object()),
                "{call:?}"
            );
        }
        anywhere_total += anywhere.len();
    }
    assert!(anywhere_total >= 2, "the seeds hold calls");
}

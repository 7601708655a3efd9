//! Per-request governance, spec context.md 3.5, acceptance cases 56–62.

use nanobot_context_builder::govern::{
    BACKFILL_TEXT, COMPACTED_TEXT, Estimator, GovernorConfig, GovernorState, PLACEHOLDER_TEXT,
    SNIPPED_MARKER, govern, truncate_for_storage,
};
use nanobot_llm_port::{
    AssistantMessage, Content, FunctionCall, Message, ToolCall, ToolDefinition,
};

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        kind: "function".into(),
        function: FunctionCall {
            name: name.into(),
            arguments: "{}".into(),
            extra: Default::default(),
        },
        extra: Default::default(),
    }
}

fn calls(ids: &[(&str, &str)]) -> Message {
    Message::assistant_tool_calls(None, ids.iter().map(|(id, name)| call(id, name)).collect())
}

fn text(m: &Message) -> &str {
    m.content().and_then(Content::as_text).unwrap_or("")
}

/// Tool results cost 100 (1 once compacted); everything else is free.
struct Fixed;

impl Estimator for Fixed {
    fn message(&self, m: &Message) -> usize {
        match m {
            Message::Tool(_) if text(m) == COMPACTED_TEXT => 1,
            Message::Tool(_) => 100,
            _ => 0,
        }
    }
    fn prompt(&self, messages: &[Message], _tools: &[ToolDefinition]) -> usize {
        messages.iter().map(|m| self.message(m)).sum()
    }
}

fn no_budget() -> GovernorConfig {
    GovernorConfig::new(0)
}

// 56 (E): an unanswered call gets the backfill result right after its assistant; the
// stored list is unchanged.
#[test]
fn case_56_backfill() {
    let stored = vec![
        Message::system("s"),
        Message::user("u"),
        calls(&[("c1", "exec"), ("c2", "grep")]),
        Message::tool_result("c2", "grep", "found"),
        Message::assistant("done"),
    ];
    let copy = stored.clone();
    let governed = govern(
        &stored,
        5,
        &[],
        &no_budget(),
        &mut GovernorState::default(),
        &Fixed,
    );
    assert_eq!(stored, copy);
    let m = &governed.messages;
    assert_eq!(m.len(), 6);
    assert_eq!(text(&m[3]), "found");
    assert_eq!(m[4], Message::tool_result("c1", "exec", BACKFILL_TEXT));
    assert_eq!(governed.report.backfilled, ["c1"]);
}

// 57: duplicate and undeclared results dropped; an assistant whose only call has no name
// (and no text) dropped; placeholders removed.
#[test]
fn case_57_malformed_and_orphans() {
    let stored = vec![
        Message::system("s"),
        Message::tool_result("early", "exec", "orphan"),
        Message::user("u"),
        Message::assistant(PLACEHOLDER_TEXT),
        calls(&[("c1", "exec")]),
        Message::tool_result("c1", "exec", "first"),
        Message::tool_result("c1", "exec", "duplicate"),
        Message::tool_result("nobody", "exec", "undeclared"),
        calls(&[("c2", "")]),
        Message::tool_result("c2", "", "for the unnamed call"),
        Message::assistant("end"),
    ];
    let governed = govern(
        &stored,
        11,
        &[],
        &no_budget(),
        &mut GovernorState::default(),
        &Fixed,
    );
    let texts: Vec<&str> = governed.messages.iter().map(text).collect();
    assert_eq!(texts, ["s", "u", "", "first", "end"]);
    let r = &governed.report;
    assert_eq!(
        (
            r.placeholders_removed,
            r.malformed_calls_removed,
            r.orphans_dropped
        ),
        (1, 1, 4)
    );
}

// 58 (E): a large exec result is offloaded with a 1,200-character preview; read_file is
// kept whole but stored cut.
#[test]
fn case_58_offload_and_storage_cut() {
    let big: String = "x".repeat(20_000);
    let stored = vec![
        Message::user("u"),
        calls(&[("c/1", "exec"), ("c2", "read_file"), ("c3", "exec")]),
        Message::tool_result("c/1", "exec", big.clone()),
        Message::tool_result("c2", "read_file", big.clone()),
        Message::tool_result("c3", "exec", "  "),
    ];
    let mut config = no_budget();
    config.offload_dir = Some("/ws/.nanobot/tool-results/cli_1".into());
    let governed = govern(
        &stored,
        0,
        &[],
        &config,
        &mut GovernorState::default(),
        &Fixed,
    );
    let reference = text(&governed.messages[2]);
    assert!(reference.starts_with(
        "[tool output persisted]\nFull output saved to workspace path: /ws/.nanobot/tool-results/cli_1/c_1.txt\nOriginal size: 20000 chars\nPreview:\n"
    ));
    assert!(reference.contains(&format!(
        "\n{}\n...\nPreview is also truncated.",
        "x".repeat(1_200)
    )));
    assert!(!reference.contains(&"x".repeat(1_201)));
    assert_eq!(governed.offloads.len(), 1);
    assert_eq!(governed.offloads[0].content, big);
    assert_eq!(
        governed.offloads[0].path,
        "/ws/.nanobot/tool-results/cli_1/c_1.txt"
    );
    assert_eq!(text(&governed.messages[3]).len(), 20_000);
    assert_eq!(
        text(&governed.messages[4]),
        "(exec completed with no output)"
    );

    let stored_cut = truncate_for_storage(&stored[3], 16_000).unwrap();
    assert_eq!(
        text(&stored_cut),
        format!("{}\n... (truncated)", "x".repeat(16_000))
    );
    assert_eq!(truncate_for_storage(&stored[4], 16_000), None);

    // Without an offload directory the result is cut instead.
    let cut = govern(
        &stored,
        0,
        &[],
        &no_budget(),
        &mut GovernorState::default(),
        &Fixed,
    );
    assert!(text(&cut.messages[2]).ends_with("\n... (truncated)"));
    assert_eq!(cut.report.truncated, ["c/1"]);
}

// 59 (E): over budget, this run's large results are compacted oldest first down to 85 %;
// the same state compacts the same set again.
#[test]
fn case_59_in_flight_compaction() {
    let budget = GovernorConfig::input_budget_for(2_224, Some(0), None);
    assert_eq!(budget, 1_200);
    let ids: Vec<String> = (0..18).map(|i| format!("r{i:02}")).collect();
    let mut stored = vec![Message::system("s"), Message::user("read them all")];
    let initial = stored.len();
    for id in &ids {
        stored.push(calls(&[(id, "read_file")]));
        stored.push(Message::tool_result(
            id.as_str(),
            "read_file",
            "y".repeat(600),
        ));
    }
    let config = GovernorConfig::new(budget);
    let mut state = GovernorState::default();
    let first = govern(&stored, initial, &[], &config, &mut state, &Fixed);
    assert_eq!(first.report.compacted, ids[..8]);
    assert_eq!(first.report.snipped, 0);
    assert!(first.report.tokens_after <= 1_020);
    let again = govern(&stored, initial, &[], &config, &mut state, &Fixed);
    assert_eq!(again.messages, first.messages);

    // Results from before the run (index < initial) are never compacted.
    let none = govern(
        &stored,
        stored.len(),
        &[],
        &config,
        &mut GovernorState::default(),
        &Fixed,
    );
    assert!(none.report.compacted.is_empty());
}

// 60: under budget, nothing changes.
#[test]
fn case_60_under_budget() {
    let stored = vec![
        Message::system("s"),
        Message::user("u"),
        calls(&[("c1", "read_file")]),
        Message::tool_result("c1", "read_file", "z".repeat(600)),
        Message::assistant("a"),
    ];
    let governed = govern(
        &stored,
        0,
        &[],
        &GovernorConfig::new(10_000),
        &mut GovernorState::default(),
        &Fixed,
    );
    assert_eq!(governed.messages, stored);
}

// 61 (E): snipping keeps the lone user message first after the system message.
#[test]
fn case_61_snip_keeps_the_user_first() {
    let mut stored = vec![Message::system("s"), Message::user("do it")];
    for i in 0..10 {
        let id = format!("t{i}");
        stored.push(calls(&[(&id, "custom_tool")]));
        stored.push(Message::tool_result(id.as_str(), "custom_tool", "w"));
    }
    let governed = govern(
        &stored,
        2,
        &[],
        &GovernorConfig::new(300),
        &mut GovernorState::default(),
        &Fixed,
    );
    assert!(matches!(governed.messages[0], Message::System(_)));
    assert_eq!(governed.messages[1], Message::user("do it"));

    // Several user turns: the oldest are snipped, and the first kept one says so.
    let mut long = vec![Message::system("s")];
    for i in 0..6 {
        let id = format!("k{i}");
        long.push(Message::user(format!("turn {i}")));
        long.push(calls(&[(&id, "custom_tool")]));
        long.push(Message::tool_result(id.as_str(), "custom_tool", "w"));
        long.push(Message::Assistant(AssistantMessage::text(format!(
            "answer {i}"
        ))));
    }
    let governed = govern(
        &long,
        0,
        &[],
        &GovernorConfig::new(250),
        &mut GovernorState::default(),
        &Fixed,
    );
    let first = text(&governed.messages[1]);
    assert!(first.starts_with(SNIPPED_MARKER), "{first}");
    assert!(first.ends_with("turn 4"), "{first}");
    assert_eq!(governed.report.snipped, 16);
    assert!(governed.report.tokens_after <= 250);
}

// 62: a block limit is the budget whatever the window.
#[test]
fn case_62_block_limit() {
    assert_eq!(
        GovernorConfig::input_budget_for(200_000, Some(8_192), Some(500)),
        500
    );
    assert_eq!(
        GovernorConfig::input_budget_for(200_000, Some(8_192), None),
        190_784
    );
    assert_eq!(
        GovernorConfig::input_budget_for(200_000, None, None),
        194_880
    );
    assert_eq!(GovernorConfig::input_budget_for(0, None, None), 0);
}

// The builder's estimator counts an image at its flat cost in whole requests too.
#[test]
fn the_builder_estimates_requests_with_images() {
    let builder = crate::support::builder();
    let with_image = Message::user_parts(vec![
        nanobot_llm_port::ContentPart::image_data("image/png", &"A".repeat(40_000)),
        nanobot_llm_port::ContentPart::text("look"),
    ]);
    let plain = Message::user("look");
    let a = builder.prompt(std::slice::from_ref(&with_image), &[]);
    let b = builder.prompt(std::slice::from_ref(&plain), &[]);
    assert_eq!(a, b + 765);
    assert_eq!(builder.message(&with_image), builder.message(&plain) + 765);
}

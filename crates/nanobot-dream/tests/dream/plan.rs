//! Plan mode: a model without native tool calls answers one edit plan, applied through the
//! same sandbox, checks and all-or-nothing apply as tool calls.

use crate::support::WriteAny as _;
use nanobot_dream::{DreamMode, RunStatus, StopReason, Trigger};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Capabilities, ResponseFormat};
use nanobot_memory_store::Document;
use serde_json::json;

use crate::support::{config, fixture, fixture_with};

/// A llama.cpp-like backend: structured output, no native tool calls.
fn planner() -> ScriptedLlm {
    ScriptedLlm::new().with_capabilities(
        Capabilities::new(4096)
            .with_tools(false)
            .with_structured_output(true),
    )
}

fn plan(append: serde_json::Value, replace: serde_json::Value) -> String {
    json!({ "append": append, "replace": replace }).to_string()
}

const FACTS: &str = "- [permanent] The user's name is Ada.\n- [permanent] Her daughter Lina is allergic to peanuts.";

#[tokio::test]
async fn a_plan_is_applied_and_versioned_when_the_backend_has_no_tool_calls() {
    let llm = planner().then_text(plan(
        json!([
            {"file": "USER.md", "heading": "Basic Information", "line": "Name: Ada"},
            {"file": "memory/MEMORY.md", "heading": "Health", "line": "Lina (daughter) is allergic to peanuts"},
            {"file": "memory/MEMORY.md", "heading": "Health", "line": "Lina (daughter) is allergic to peanuts"},
            {"file": "USER.md", "heading": "User", "line": "- Lives in Berlin"},
            {"line": "The weather was nice", "about": "nothing lasting", "file": "none"},
        ]),
        json!([
            {"file": "memory/MEMORY.md", "old_text": "- Project X active", "new_text": "- Project X done"},
        ]),
    ));
    let f = fixture(llm);
    f.seed().await;
    f.documents
        .write_doc_any(
            Document::User,
            "# User\n\n## Basic Information\n\n- Lives in Berlin\n",
        )
        .await
        .unwrap();
    f.append(&[FACTS]).await;
    assert_eq!(f.dream.mode(), DreamMode::Plan);
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.mode, DreamMode::Plan);
    assert_eq!(
        f.doc(Document::User).await.unwrap(),
        "# User\n\n## Basic Information\n\n- Lives in Berlin\n- Name: Ada\n"
    );
    let memory = f.doc(Document::Memory).await.unwrap();
    assert!(memory.contains("- Project X done"), "{memory}");
    assert!(
        memory.contains("## Health\n\n- Lina (daughter) is allergic to peanuts\n"),
        "{memory}"
    );
    let version = report.version.expect("a version");
    assert!(
        version.message.contains("+- Name: Ada"),
        "{}",
        version.message
    );
    assert_eq!(f.cursor().await, 1);
    // The request asked for the plan's schema, with the files it may name, and no tools.
    let request = &f.llm.requests()[0];
    assert!(request.tools.is_empty());
    let Some(ResponseFormat::JsonSchema { json_schema }) = &request.response_format else {
        panic!("no schema asked: {:?}", request.response_format);
    };
    // A batch of tagged archives has each of its kept facts routed, in order: the fact,
    // what it is about, its file and one of that file's sections, or not kept.
    let routes = json_schema.schema["properties"]["append"]["prefixItems"]
        .as_array()
        .expect("routed facts");
    assert_eq!(routes.len(), 2);
    assert_eq!(
        json_schema.schema["properties"]["append"]["minItems"],
        json!(2)
    );
    let choices = routes[1]["anyOf"].as_array().unwrap();
    let files: Vec<&serde_json::Value> = choices
        .iter()
        .map(|c| &c["properties"]["file"]["const"])
        .collect();
    assert_eq!(
        files,
        [
            &json!("SOUL.md"),
            &json!("USER.md"),
            &json!("memory/MEMORY.md"),
            &json!("none")
        ]
    );
    let user = &choices[1]["properties"];
    assert_eq!(
        user["line"]["const"],
        json!("Her daughter Lina is allergic to peanuts.")
    );
    assert_eq!(user["about"]["const"], json!("the user or their family"));
    assert_eq!(
        user["heading"]["enum"],
        json!(["User", "Basic Information"])
    );
    // The repeat and the line already there changed nothing and were not refusals.
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert!(f.prompt(0).contains("Lina is allergic to peanuts"));
    assert!(f.prompt(0).contains("\"append\""));
}

#[tokio::test]
async fn the_mode_can_be_forced_either_way() {
    let mut forced = config();
    forced.mode = DreamMode::Tools;
    assert_eq!(
        fixture_with(planner(), forced).dream.mode(),
        DreamMode::Tools
    );
    let mut forced = config();
    forced.mode = DreamMode::Plan;
    let f = fixture_with(
        ScriptedLlm::new().then_text(plan(json!([]), json!([]))),
        forced,
    );
    assert_eq!(f.dream.mode(), DreamMode::Plan);
    f.seed().await;
    f.append(&[FACTS]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    // An empty plan completes with no change; a backend without structured output gets no
    // response_format and its free-text JSON is parsed.
    assert_eq!(report.status, RunStatus::Completed);
    assert!(report.changes.is_empty());
    assert!(f.llm.requests()[0].response_format.is_none());
    assert_eq!(f.cursor().await, 1);
}

#[tokio::test]
async fn bad_plans_are_bounded_and_apply_nothing_that_does_not_validate() {
    // Not JSON, then cut off, then a plan whose only edit leaves the sandbox, then one with
    // an edit outside and one inside: only the inside one lands, the others are reported.
    let llm = planner()
        .then_text("Sure! I will update the files.")
        .then_truncated("{\"append\": [{\"file\": \"USER.md\"")
        .then_text(plan(
            json!([{"file": "../../etc/passwd", "heading": "", "line": "x"}]),
            json!([]),
        ))
        .then_text(plan(
            json!([
                {"file": "/root/.ssh/authorized_keys", "heading": "", "line": "x"},
                {"file": "USER.md", "heading": "Family", "line": "Daughter Lina, allergic to peanuts"},
            ]),
            json!([{"file": "USER.md", "old_text": "not in the file", "new_text": "y"}]),
        ));
    let f = fixture(llm);
    f.seed().await;
    f.append(&[FACTS]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.steps, 4);
    assert_eq!(
        f.doc(Document::User).await.unwrap(),
        "## Family\n\n- Daughter Lina, allergic to peanuts\n"
    );
    assert_eq!(report.refused.len(), 3, "{:?}", report.refused);
    assert!(report.refused[0].contains("outside allowed directory"));
    assert!(
        report.refused[2].contains("old_text was not found"),
        "{:?}",
        report.refused
    );
    let reply = nanobot_dream::format::run_reply(&report);
    assert!(reply.contains("Refused edits"), "{reply}");
    // Each bad answer was answered with why before asking again.
    let requests = f.llm.requests();
    assert_eq!(requests.len(), 4);
    let asked = |n: usize| format!("{:?}", requests[n].messages);
    assert!(asked(1).contains("not a usable edit plan"));
    assert!(asked(2).contains("cut off by the output limit"));
    assert!(asked(3).contains("No edit could be applied"));
    // Only the last attempt is carried: the request does not grow with the steps.
    assert!(requests.iter().skip(1).all(|r| r.messages.len() == 4));
    assert!(!asked(3).contains("not a usable edit plan"));
    // The answer's allowance fits the backend's 4,096-token window.
    assert!(
        requests
            .iter()
            .all(|r| r.max_tokens.is_some_and(|t| t <= 4096))
    );
}

#[tokio::test]
async fn a_model_that_never_plans_stops_with_nothing_applied_and_repeats_apply_once() {
    let mut small = config();
    small.max_steps = 3;
    let llm = planner()
        .then_text("no")
        .then_text("still no")
        .then_text("{\"edits\": 5}");
    let f = fixture_with(llm, small);
    f.seed().await;
    let before = (f.doc(Document::Memory).await, f.doc(Document::User).await);
    f.append(&[FACTS]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert!(
        matches!(
            report.status,
            RunStatus::Stopped(StopReason::InvalidPlan(_))
        ),
        "{:?}",
        report.status
    );
    assert_eq!(report.steps, 3);
    assert_eq!(f.cursor().await, 0);

    // A plan that repeats one edit forever: bounded by the schema's list length, applied
    // once, the rest counted as repeats.
    let edit = json!({"file": "USER.md", "heading": "", "line": "Ada"});
    let f2 = fixture(planner().then_text(plan(json!(vec![edit; 14]), json!([]))));
    f2.seed().await;
    f2.append(&[FACTS]).await;
    let report = f2.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(f2.doc(Document::User).await.unwrap(), "## Notes\n\n- Ada\n");
    assert_eq!(
        report.refused,
        vec!["2 edits past the first 12 were not applied".to_owned()]
    );
    assert_eq!(
        (f.doc(Document::Memory).await, f.doc(Document::User).await),
        before
    );
}

#[tokio::test]
async fn a_window_too_small_for_the_plan_request_stops_without_a_call() {
    let llm = ScriptedLlm::new().with_capabilities(Capabilities::new(300).with_tools(false));
    let f = fixture(llm);
    f.seed().await;
    f.append(&[FACTS]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert!(
        matches!(&report.status, RunStatus::Stopped(StopReason::ModelError(why)) if why.contains("no room for an answer")),
        "{:?}",
        report.status
    );
    assert_eq!(f.llm.call_count(), 0);
    assert_eq!(f.cursor().await, 0);
}

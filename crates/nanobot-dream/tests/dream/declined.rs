//! A run whose model declines (a provider's refusal, an empty answer, a text refusal, an
//! unusable plan) asks again a bounded number of times, then stops: the cursor stays, the
//! entries wait for the next run, and why is recorded until a run finishes (issue 32).

use nanobot_dream::{RunStatus, StopReason, Trigger};
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Capabilities, FinishReason, LlmRequest, LlmResponse};
use nanobot_memory_store::Document;

use crate::support::{edit, fixture};

/// A Dream over a journal that says the user's name, with `llm`'s answers.
async fn ada(llm: ScriptedLlm) -> crate::support::Fixture {
    let f = fixture(llm);
    f.seed().await;
    f.append(&["- [permanent] The user's name is Ada."]).await;
    f
}

/// `llm`, then the answers of a run that notes the name and finishes.
fn finishing(llm: ScriptedLlm) -> ScriptedLlm {
    llm.then_tool_call(
        "c",
        "edit_file",
        edit("SOUL.md", "- Helpful", "- Helpful\n- Knows Ada").1,
    )
    .then_text("Noted Ada.")
}

/// The text of a request's last message.
fn last_said(request: &LlmRequest) -> String {
    let last = request.messages.last().unwrap();
    last.content().unwrap().as_text().unwrap().to_owned()
}

fn filtered() -> LlmResponse {
    LlmResponse::text("").with_finish_reason(FinishReason::ContentFilter)
}

#[tokio::test]
async fn refusals_keep_the_cursor_record_why_and_a_finished_run_clears_it() {
    let refusal = "I'm sorry, but I can't help with processing these conversations.";
    let llm = ScriptedLlm::new()
        .then(filtered())
        .then_text(refusal)
        .then_text(refusal)
        // The second run: refused again, on the same entries.
        .then(filtered())
        .then(filtered())
        .then(filtered());
    // The third run finishes.
    let f = ada(finishing(llm)).await;

    let report = f.dream.run(Trigger::Scheduled).await.unwrap();
    assert!(
        matches!(&report.status, RunStatus::Stopped(StopReason::Refused(why)) if why.contains("can't help")),
        "{:?}",
        report.status
    );
    assert_eq!(f.llm.call_count(), 3, "asked twice more, then stopped");
    // The refusal was answered before asking again.
    let asked = last_said(&f.llm.requests()[2]);
    assert!(asked.contains("records to curate"), "{asked}");
    assert_eq!(f.cursor().await, 0);
    let stop = f
        .dream
        .last_stop()
        .await
        .unwrap()
        .expect("the stop is recorded");
    assert_eq!((stop.entries, stop.runs), ((1, 1), 1));
    assert!(stop.reason.contains("declined"), "{}", stop.reason);

    let report = f.dream.run(Trigger::Scheduled).await.unwrap();
    assert!(matches!(
        report.status,
        RunStatus::Stopped(StopReason::Refused(_))
    ));
    assert_eq!(f.cursor().await, 0);
    let stop = f.dream.last_stop().await.unwrap().unwrap();
    assert_eq!(
        stop.runs, 2,
        "two runs in a row stopped on the same entries"
    );
    assert!(stop.reason.contains("filter"), "{}", stop.reason);

    // The third run finishes: the entries are curated, the cursor moves, the stop goes.
    let report = f.dream.run(Trigger::Scheduled).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(f.cursor().await, 1);
    assert!(f.doc(Document::Soul).await.unwrap().contains("Knows Ada"));
    assert_eq!(f.dream.last_stop().await.unwrap(), None);
}

#[tokio::test]
async fn an_empty_answer_asked_again_can_still_finish_the_run() {
    let llm = ScriptedLlm::new().then_text("");
    let f = ada(finishing(llm)).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(f.cursor().await, 1);
    // The empty answer was asked again as it was: the same messages.
    let requests = f.llm.requests();
    assert_eq!(requests[0].messages, requests[1].messages);
}

#[tokio::test]
async fn nothing_to_update_is_a_finished_run_not_a_refusal() {
    let f = fixture(ScriptedLlm::new().then_text("Nothing needs updating."));
    f.seed().await;
    f.append(&["- [skip] hello"]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(f.cursor().await, 1);
    assert_eq!(f.dream.last_stop().await.unwrap(), None);
}

#[tokio::test]
async fn a_plan_model_that_refuses_stops_with_the_refusal_and_keeps_the_cursor() {
    let refusal = "I cannot help with personal information.";
    let mut llm = ScriptedLlm::new().with_capabilities(
        Capabilities::new(4096)
            .with_tools(false)
            .with_structured_output(true),
    );
    llm = llm.then(filtered()).then_text(refusal).then_text(refusal);
    let mut config = crate::support::config();
    config.max_steps = 10;
    let f = crate::support::fixture_with(llm, config);
    f.seed().await;
    f.append(&["- [permanent] The user's name is Ada."]).await;
    let report = f.dream.run(Trigger::Manual).await.unwrap();
    assert!(
        matches!(&report.status, RunStatus::Stopped(StopReason::Refused(why)) if why.contains("cannot help")),
        "{:?}",
        report.status
    );
    assert_eq!(f.cursor().await, 0);
    // Three answers: the filtered one asked again as it was, the refusal answered, then
    // the run stopped (not the ten steps it may take for plans it cannot use).
    let requests = f.llm.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].messages, requests[1].messages);
    let asked = last_said(&requests[2]);
    assert!(asked.contains("JSON plan only"), "{asked}");
    assert!(f.dream.last_stop().await.unwrap().is_some());
}

//! The test doubles other crates use: the scripted fake and the mockall mocks.

use std::time::Duration;

use nanobot_llm_port::testing::{MockLlmClient, MockTokenCounter, ScriptedLlm, Step};
use nanobot_llm_port::tokens::estimate_message_tokens;
use nanobot_llm_port::{
    Capabilities, FinishReason, LlmClient, LlmError, LlmRequest, LlmResponse, Message, ToolChoice,
    Usage,
};
use serde_json::json;

#[tokio::test]
async fn scripted_replies_in_order_and_records_requests() {
    let llm = ScriptedLlm::new()
        .then_text_with_usage("first", Usage::new(100, 5))
        .then_tool_call(
            "call_1",
            "edit_file",
            json!({"path": "USER.md", "old": "a", "new": "b"}),
        )
        .then_truncated("cut sho")
        .then_error(LlmError::transient("502"))
        .then(Step::Reply(Box::new(LlmResponse::text("last"))));
    assert_eq!(llm.remaining(), 5);

    let ask = |text: &str| LlmRequest::new("m", vec![Message::user(text)]);
    let first = llm.complete(&ask("one")).await.unwrap();
    assert_eq!(
        (first.text_content().as_str(), first.usage),
        ("first", Some(Usage::new(100, 5)))
    );

    let second = llm.complete(&ask("two")).await.unwrap();
    assert_eq!(second.finish_reason, FinishReason::ToolCalls);
    let call = &second.tool_calls_made()[0];
    assert_eq!(call.function.name, "edit_file");
    assert_eq!(call.arguments_json().unwrap()["path"], "USER.md");

    assert!(llm.complete(&ask("three")).await.unwrap().is_truncated());
    assert_eq!(
        llm.complete(&ask("four")).await.unwrap_err(),
        LlmError::transient("502")
    );
    assert_eq!(
        llm.complete(&ask("five")).await.unwrap().text_content(),
        "last"
    );

    let error = llm.complete(&ask("six")).await.unwrap_err();
    assert!(
        error.to_string().contains("call 6 found the script empty"),
        "{error}"
    );

    let seen: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| r.messages[0].content().unwrap().joined_text())
        .collect();
    assert_eq!(seen, ["one", "two", "three", "four", "five", "six"]);
}

#[tokio::test(start_paused = true)]
async fn hang_never_answers() {
    let llm = ScriptedLlm::new().then_hang();
    let request = LlmRequest::new("m", vec![Message::user("x")]);
    let outcome = tokio::time::timeout(Duration::from_secs(3600), llm.complete(&request)).await;
    assert!(outcome.is_err(), "a hanging step must not answer");
}

#[tokio::test]
async fn mock_checks_one_call_with_tool_choice_none() {
    let mut mock = MockLlmClient::new();
    mock.expect_complete()
        .withf(|request| request.tool_choice == Some(ToolChoice::None) && !request.tools.is_empty())
        .times(1)
        .returning(|_| Ok(LlmResponse::text("(nothing)")));
    mock.expect_capabilities()
        .return_const(Capabilities::new(4096));

    let request = LlmRequest::new("m", vec![Message::user("archive this")])
        .with_tools(vec![nanobot_llm_port::ToolDefinition::function(
            "noop",
            "does nothing",
            json!({}),
        )])
        .with_tool_choice(ToolChoice::None);
    let answer = mock.complete(&request).await.unwrap();
    assert_eq!(answer.text_content(), "(nothing)");
    assert_eq!(mock.capabilities().context_window, 4096);
}

#[test]
fn mock_token_counter_drives_the_estimator() {
    let mut counter = MockTokenCounter::new();
    counter
        .expect_count()
        .returning(|text| text.chars().count() * 10);
    counter.expect_encoding().return_const("fake".to_owned());
    // "héllo" has 5 characters: 50 plus 4 of framing.
    assert_eq!(
        estimate_message_tokens(&counter, &Message::user("héllo")),
        54
    );
}

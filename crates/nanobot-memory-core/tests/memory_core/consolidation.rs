//! The token path: trigger, boundaries, rounds, outcomes (spec memory.md 5.6, 5.7).

use crate::support::Scripted;
use std::sync::Arc;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{FinishReason, LlmError, LlmResponse, ToolCall};
use nanobot_memory_core::{Archived, ConsolidationConfig, ConsolidationError, RawReason};
use nanobot_session_store::StoredMessage;

use crate::support::{Fixture, FullJournal, a, config, flat_counter, summary_llm, turns, u};

#[tokio::test]
async fn case_39_below_the_budget_nothing_happens() {
    let fixture = Fixture::new(turns(20)).await;
    let llm = Arc::new(ScriptedLlm::new());
    let consolidator = fixture
        .consolidator(config(200, 0.5), llm.clone(), flat_counter(100))
        .scripted(&[100]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert!(report.archives.is_empty());
    assert_eq!(llm.call_count(), 0);
    // Provider-reported tokens win over the estimate.
    let report = consolidator
        .maybe_consolidate(&fixture.key, Some(150))
        .await
        .unwrap();
    assert_eq!((report.estimate_before, report.archives.len()), (150, 0));
}

#[tokio::test]
async fn case_40_ratio_cases() {
    // nanobot's test mocks the archive; here it is real. nanobot would pick one slice of
    // 1,200 tokens of messages against a budget of 1,000, which cannot be replayed and is
    // archived raw; here slices are capped to what one request holds, so it takes three
    // summaries.
    for (ratio, window, estimates, archives, raw) in [
        (0.5, 200, vec![250, 90], 1, false),
        (0.1, 1000, vec![1200, 800, 400, 50], 3, false),
        (0.9, 200, vec![300, 175], 1, false),
    ] {
        let fixture = Fixture::new(turns(20)).await;
        let llm = summary_llm(5);
        let consolidator = fixture
            .consolidator(config(window, ratio), llm.clone(), flat_counter(100))
            .scripted(&estimates);
        let report = consolidator
            .maybe_consolidate(&fixture.key, None)
            .await
            .unwrap();
        assert_eq!(report.archives.len(), archives, "ratio {ratio}");
        assert_eq!(
            matches!(
                report.archives[0].outcome,
                Archived::Raw {
                    reason: RawReason::NotReplayable,
                    ..
                }
            ),
            raw
        );
        assert_eq!(llm.call_count(), if raw { 0 } else { archives });
    }
}

#[tokio::test]
async fn case_41_42_boundaries_end_before_a_user_turn() {
    let fixture = Fixture::new(vec![u("u1"), a("a1"), u("u2"), a("a2"), u("u3")]).await;
    let consolidator = fixture
        .consolidator(config(1000, 0.5), summary_llm(5), flat_counter(120))
        .scripted(&[1000, 80]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!((report.archives[0].start, report.archives[0].end), (0, 4));
    assert_eq!(fixture.handle.last_consolidated(), 4);

    // Budget 500, target 100: two rounds, and the second continues below the trigger.
    for estimates in [[500, 300, 80], [500, 150, 80]] {
        let fixture = Fixture::new(vec![
            u("u1"),
            a("a1"),
            u("u2"),
            a("a2"),
            u("u3"),
            a("a3"),
            u("u4"),
        ])
        .await;
        let consolidator = fixture
            .consolidator(config(500, 0.2), summary_llm(5), flat_counter(100))
            .scripted(&estimates);
        let report = consolidator
            .maybe_consolidate(&fixture.key, None)
            .await
            .unwrap();
        assert_eq!(report.archives.len(), 2, "{estimates:?}");
        assert_eq!(fixture.handle.last_consolidated(), 6);
        // Both summaries reach the session's summary.
        let summary = fixture
            .handle
            .read(|s| s.meta().metadata["_last_summary"]["text"].clone());
        assert_eq!(summary, "- [durable] fact 0\n- [durable] fact 1");
    }
}

fn users_at(positions: &[usize], len: usize) -> Vec<StoredMessage> {
    (0..len)
        .map(|i| {
            if positions.contains(&i) {
                u(&format!("user {i}"))
            } else {
                a(&format!("answer {i}"))
            }
        })
        .collect()
}

#[tokio::test]
async fn case_43_44_45_a_raw_fallback_stops_the_run() {
    let fixture = Fixture::new(users_at(&[0, 50], 70)).await;
    let llm = Arc::new(ScriptedLlm::new().then_error(LlmError::transient("down")));
    let consolidator = fixture
        .consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10))
        .scripted(&[120_000, 400]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(llm.call_count(), 1);
    assert!(matches!(
        report.archives[0].outcome,
        Archived::Raw {
            reason: RawReason::CallFailed(_),
            ..
        }
    ));
    assert_eq!(fixture.handle.last_consolidated(), 50);

    let fixture = Fixture::new(users_at(&[0, 20, 40, 60], 70)).await;
    let llm = Arc::new(
        ScriptedLlm::new()
            .then_error(LlmError::transient("down"))
            .then_text("never"),
    );
    let consolidator = fixture
        .consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10))
        .scripted(&[120_000]);
    consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(llm.call_count(), 1, "exactly one archive call, not five");

    let fixture = Fixture::new(users_at(&[0, 61], 70)).await;
    let consolidator = fixture
        .consolidator(config(100_000, 0.5), summary_llm(2), flat_counter(10))
        .scripted(&[120_000, 400]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(report.archives.len(), 1);
    assert_eq!(fixture.handle.last_consolidated(), 61);
}

#[tokio::test]
async fn a_single_turn_larger_than_the_window_is_reported() {
    // One user turn with a long tool chain: no boundary inside it, so nothing can be archived.
    let mut messages = vec![u("do everything")];
    messages.extend((0..30).map(|i| a(&format!("step {i}"))));
    let fixture = Fixture::new(messages).await;
    let llm = Arc::new(ScriptedLlm::new());
    let consolidator = fixture
        .consolidator(config(200, 0.5), llm.clone(), flat_counter(100))
        .scripted(&[3100]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert!(report.archives.is_empty());
    assert!(
        report.over_budget,
        "the caller learns the next request will not fit"
    );
    assert_eq!(llm.call_count(), 0);
}

#[tokio::test]
async fn case_50_the_request_is_the_sessions_own_prompt() {
    let fixture = Fixture::new(users_at(&[0, 50, 61], 70)).await;
    fixture
        .handle
        .update(|s| s.set_provider_state(Some(serde_json::json!({"kind": "k"}))));
    fixture.sessions.save(&fixture.handle).await.unwrap();
    let llm = Arc::new(ScriptedLlm::new().then_text("- [durable] fact"));
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    let record = consolidator.archive(&fixture.handle, 50).await.unwrap();
    assert!(matches!(record.outcome, Archived::Summary { .. }));
    let request = &llm.requests()[0];
    assert_eq!(request.messages.len(), 52, "system, m0..m49, instruction");
    assert_eq!(
        request.messages[0].content().unwrap().joined_text(),
        "SYSTEM"
    );
    let instruction = request.messages[51].content().unwrap().joined_text();
    assert!(
        instruction.contains("final 50 conversation messages"),
        "{instruction}"
    );
    assert_eq!(request.model, "archive-model");
    assert_eq!(fixture.handle.last_consolidated(), 50);
    assert!(fixture.handle.read(|s| s.meta().provider_state.is_none()));
}

#[tokio::test]
async fn cases_52_to_57_answers_and_their_journal_entries() {
    let cut = LlmResponse::text("INVALID_partial").with_finish_reason(FinishReason::Length);
    let error =
        LlmResponse::text("INVALID_error").with_finish_reason(FinishReason::Other("error".into()));
    let tools = LlmResponse::tool_calls(vec![ToolCall::new("c", "f", "{}")]);
    let cases: Vec<(nanobot_llm_port::testing::Step, &str)> = vec![
        (
            LlmResponse::text("- [permanent] likes tea").into(),
            "summary",
        ),
        (LlmError::transient("boom").into(), "raw"),
        (cut.into(), "raw"),
        (error.into(), "raw"),
        (tools.into(), "raw"),
        (LlmResponse::text("   ").into(), "raw"),
        (LlmResponse::text(" (nothing) ").into(), "nothing"),
    ];
    for (step, expected) in cases {
        let fixture = Fixture::new(vec![u("hello there"), a("general kenobi")]).await;
        let llm = Arc::new(ScriptedLlm::new().then(step));
        let consolidator = fixture.consolidator(config(100_000, 0.5), llm, flat_counter(10));
        let record = consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .unwrap();
        let entries = fixture.entries().await;
        match expected {
            "summary" => {
                assert_eq!(
                    record.outcome,
                    Archived::Summary {
                        text: "- [permanent] likes tea".into(),
                        cursor: 1
                    }
                );
                assert_eq!(entries.len(), 1);
                assert_eq!(entries[0].session_key.as_deref(), Some("telegram:42"));
                assert_eq!(entries[0].message_range, Some((0, 2)));
            }
            "raw" => {
                assert!(matches!(record.outcome, Archived::Raw { .. }), "{record:?}");
                assert_eq!(entries.len(), 1);
                assert!(
                    entries[0].content.starts_with("[RAW] 2 messages\n"),
                    "{}",
                    entries[0].content
                );
                assert!(
                    entries[0].content.contains("USER: hello there")
                        && entries[0].content.contains("general kenobi")
                );
                assert!(!entries[0].content.contains("INVALID"));
                assert_eq!(entries[0].session_key.as_deref(), Some("telegram:42"));
            }
            _ => {
                assert_eq!(record.outcome, Archived::Nothing);
                assert!(entries.is_empty());
                assert!(
                    fixture
                        .handle
                        .read(|s| !s.meta().metadata.contains_key("_last_summary"))
                );
            }
        }
        assert_eq!(
            fixture.handle.last_consolidated(),
            2,
            "the pointer moves whatever the outcome"
        );
    }
}

#[tokio::test]
async fn case_58_a_failing_journal_stops_everything() {
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let consolidator = {
        let journal = Arc::new(FullJournal);
        let sessions = fixture.sessions.clone();
        let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        nanobot_memory_core::Consolidator::new(
            config(100_000, 0.5),
            Arc::new(ScriptedLlm::new().then_text("- fact")),
            journal,
            archive,
            sessions,
            Arc::new(nanobot_memory_core::PlainPrompt::default()),
            flat_counter(10),
        )
    }
    .unwrap();
    let error = consolidator.compact_idle(&fixture.key).await.unwrap_err();
    assert!(matches!(error, ConsolidationError::Memory(_)), "{error}");
    assert_eq!(
        fixture.handle.last_consolidated(),
        0,
        "nothing archived, nothing moved"
    );
}

#[tokio::test]
async fn case_60_long_summaries_are_capped() {
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let llm = Arc::new(ScriptedLlm::new().then_text("x".repeat(80_000)));
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm, flat_counter(10));
    consolidator.compact_idle(&fixture.key).await.unwrap();
    let stored = &fixture.entries().await[0].content;
    assert!(stored.chars().count() <= 8_050 && stored.ends_with("... (truncated)"));
}

#[tokio::test]
async fn invalid_settings_are_refused() {
    let fixture = Fixture::new(vec![]).await;
    for config in [
        ConsolidationConfig::new("m", 8_192, 8_192),
        {
            let mut value = ConsolidationConfig::new("m", 8_192, 1_024);
            value.ratio = 0.05;
            value
        },
        {
            let mut value = ConsolidationConfig::new("m", 8_192, 1_024);
            value.ratio = 0.99;
            value
        },
    ] {
        let result = {
            let journal = fixture.journal.clone();
            let sessions = fixture.sessions.clone();
            let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
                journal.clone(),
                sessions.store().clone(),
            ));
            nanobot_memory_core::Consolidator::new(
                config,
                Arc::new(ScriptedLlm::new()),
                journal,
                archive,
                sessions,
                Arc::new(nanobot_memory_core::PlainPrompt::default()),
                flat_counter(10),
            )
        };
        assert!(matches!(
            result,
            Err(ConsolidationError::InvalidConfig { .. })
        ));
    }
    assert_eq!(
        ConsolidationConfig::new("m", 200_000, 8_192).budget(),
        190_784
    );
    assert_eq!(
        ConsolidationConfig::new("m", 200_000, 8_192).target(),
        95_392
    );
}

#[tokio::test]
async fn the_cached_estimate_is_within_one_percent_of_the_whole_request() {
    use nanobot_llm_port::Cl100kBase;
    use nanobot_llm_port::tokens::estimate_prompt_tokens;
    use nanobot_memory_core::{PROBE_MESSAGE, PromptBuilder};
    let messages: Vec<StoredMessage> = nanobot_bench_workload::message_stream(42, 2_000)
        .into_iter()
        .map(|m| StoredMessage::from_map(m.as_object().cloned().unwrap()))
        .collect();
    let fixture = Fixture::new(messages).await;
    let prompt = nanobot_memory_core::PlainPrompt {
        system: "You are nanobot, a personal assistant.".repeat(20),
        ..Default::default()
    };
    let consolidator = {
        let journal = fixture.journal.clone();
        let sessions = fixture.sessions.clone();
        let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        nanobot_memory_core::Consolidator::new(
            config(1_000_000, 0.5),
            Arc::new(ScriptedLlm::new()),
            journal,
            archive,
            sessions,
            Arc::new(prompt.clone()),
            Arc::new(Cl100kBase),
        )
    }
    .unwrap();
    let ours = fixture.handle.read(|s| consolidator.estimate(s));
    let exact = fixture.handle.read(|s| {
        let history = nanobot_session_store::get_history(
            s.messages(),
            0,
            &nanobot_session_store::HistoryOptions::default(),
            &Cl100kBase,
        );
        estimate_prompt_tokens(
            &Cl100kBase,
            &prompt.build(s, &history, PROBE_MESSAGE),
            &prompt.tools(),
        )
    });
    let deviation = (ours as f64 - exact as f64).abs() / exact as f64;
    assert!(deviation < 0.01, "ours {ours}, whole request {exact}");
}

#[tokio::test]
async fn every_request_of_a_two_round_run_is_snapshotted() {
    // Window 200, ratio 0.5: the estimate of 250 asks for two rounds (to 100 or less), each
    // request the session's own prompt replaying what is still live.
    let fixture = Fixture::new(turns(12)).await;
    let llm = summary_llm(2);
    let consolidator = fixture
        .consolidator(config(200, 0.5), llm.clone(), flat_counter(20))
        .scripted(&[250, 150, 90]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(report.archives.len(), 2);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    insta::assert_json_snapshot!("token_path_round_1", requests[0]);
    insta::assert_json_snapshot!("token_path_round_2", requests[1]);
}

/// Issue 13: an unusable first answer (cut, tool calls, empty, or a request too large) is
/// asked once more with a schema when the model supports structured output; the answer is
/// journaled as `- [mark] fact` lines. A second unusable answer keeps every message raw,
/// with both reasons; `structured_first` skips the free-text request.
#[tokio::test]
async fn unusable_answers_are_asked_again_with_a_schema() {
    let capable = nanobot_llm_port::Capabilities::new(100_000).with_structured_output(true);
    let good = r#"{"facts": [{"mark": "permanent", "fact": "The user is called Obi-Wan"}, {"mark": "skip", "fact": "greeting"}], "summary": "Greetings."}"#;
    let cut = || {
        LlmResponse::text("- [permanent] The user is ca").with_finish_reason(FinishReason::Length)
    };
    let tools = || LlmResponse::tool_calls(vec![ToolCall::new("c", "f", "{}")]);
    for (first, second, expect_summary) in [
        (cut(), LlmResponse::text(good), true),
        (tools(), LlmResponse::text(good), true),
        (LlmResponse::text(" "), LlmResponse::text(good), true),
        (
            cut(),
            LlmResponse::text("{\"facts\": [{\"mark\": \"permanent\""),
            false,
        ),
        (
            cut(),
            LlmResponse::text(good).with_finish_reason(FinishReason::Length),
            false,
        ),
    ] {
        let fixture = Fixture::new(vec![u("hello there, I am Obi-Wan"), a("general kenobi")]).await;
        let llm = Arc::new(
            ScriptedLlm::new()
                .with_capabilities(capable)
                .then(first)
                .then(second),
        );
        let consolidator =
            fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
        let record = consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .unwrap();
        let requests = llm.requests();
        assert_eq!(requests.len(), 2);
        assert!(requests[0].response_format.is_none());
        assert!(matches!(
            requests[1].response_format,
            Some(nanobot_llm_port::ResponseFormat::JsonSchema { .. })
        ));
        assert!(requests[1].max_tokens.unwrap() <= 512);
        let entries = fixture.entries().await;
        assert_eq!(entries.len(), 1);
        if expect_summary {
            assert_eq!(
                record.outcome,
                Archived::Summary {
                    text: "- [permanent] The user is called Obi-Wan".into(),
                    cursor: 1
                }
            );
        } else {
            let Archived::Raw { reason, .. } = &record.outcome else {
                panic!("{record:?}");
            };
            assert!(
                matches!(reason, RawReason::Retried { first: Some(_), .. }),
                "{reason:?}"
            );
            assert!(
                reason.to_string().contains("asked again with a schema"),
                "{reason}"
            );
            assert!(
                entries[0]
                    .content
                    .contains("USER: hello there, I am Obi-Wan")
            );
        }
        assert_eq!(fixture.handle.last_consolidated(), 2);
    }

    // A failed call is not asked again; a model without structured output is not either.
    for llm in [
        ScriptedLlm::new()
            .with_capabilities(capable)
            .then_error(LlmError::transient("boom")),
        ScriptedLlm::new().then(cut()),
    ] {
        let llm = Arc::new(llm);
        let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
        let consolidator =
            fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
        let record = consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(record.outcome, Archived::Raw { .. }));
        assert_eq!(llm.requests().len(), 1);
    }

    // structured_first: one request, with the schema.
    let fixture = Fixture::new(vec![u("hello there, I am Obi-Wan"), a("general kenobi")]).await;
    let llm = Arc::new(
        ScriptedLlm::new()
            .with_capabilities(capable)
            .then(LlmResponse::text(good)),
    );
    let mut first = config(100_000, 0.5);
    first.structured_first = true;
    let consolidator = fixture.consolidator(first, llm.clone(), flat_counter(10));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(record.outcome, Archived::Summary { .. }));
    assert_eq!(llm.requests().len(), 1);
    assert!(llm.requests()[0].response_format.is_some());
}

#[tokio::test]
async fn a_backlog_larger_than_the_window_becomes_summaries_that_each_fit_one_request() {
    // 4,000 messages of 100 tokens each (400,000 tokens) against a 20,000-token window:
    // nanobot picks one slice of nearly everything, whose request can never fit, and dumps it
    // raw. Here every slice fits its request, a turn makes at most `max_rounds` archives, and
    // the background works the rest off.
    let fixture = Fixture::new(turns(4_000)).await;
    let llm = summary_llm(400);
    let config = config(20_000, 0.5);
    let budget = config.budget();
    let consolidator = Arc::new(fixture.consolidator(config, llm.clone(), flat_counter(100)));
    let inline = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(inline.archives.len(), 5, "a turn makes nanobot's 5 rounds");
    assert!(inline.over_budget);
    let background = consolidator
        .consolidate_in_background(fixture.key.clone(), None)
        .await
        .unwrap()
        .unwrap();
    assert!(!background.over_budget, "{background:?}");
    assert!(background.estimate_after <= 10_000);
    let archives: Vec<_> = inline.archives.iter().chain(&background.archives).collect();
    for record in &archives {
        assert!(
            matches!(record.outcome, Archived::Summary { .. }),
            "{record:?}"
        );
    }
    // Slices are contiguous and each request fitted the budget.
    for pair in archives.windows(2) {
        assert_eq!(pair[0].end, pair[1].start);
    }
    let counter = flat_counter(100);
    for request in llm.requests() {
        let tokens = nanobot_llm_port::tokens::estimate_prompt_tokens(
            counter.as_ref(),
            &request.messages,
            &request.tools,
        );
        assert!(tokens <= budget, "{tokens} > {budget}");
    }
    assert_eq!(fixture.entries().await.len(), archives.len());
    assert_eq!(llm.call_count(), archives.len());
}

//! Invariants over random conversations and random consolidations: the pointer never passes
//! the message count, no archive splits a tool call from its results, and every archived
//! message reaches the journal (in a summary's range or a raw dump).

use crate::support::Scripted;
use std::sync::Arc;

use nanobot_bench_workload::SplitMix64;
use nanobot_llm_port::LlmError;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory_core::Archived;
use nanobot_session_store::StoredMessage;
use serde_json::json;

use crate::support::{Fixture, a, config, flat_counter, u};

fn random_conversation(rng: &mut SplitMix64, turns: usize) -> Vec<StoredMessage> {
    let mut out = Vec::new();
    for t in 0..turns {
        out.push(u(&format!("user turn {t}")));
        for c in 0..rng.below(3) {
            let id = format!("call-{t}-{c}");
            out.push(StoredMessage::assistant("").with("tool_calls", json!([{"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}])));
            out.push(StoredMessage::tool_result(
                &id,
                "f",
                format!("result {t} {c}"),
            ));
        }
        out.push(a(&format!("answer {t}")));
    }
    out
}

#[tokio::test]
async fn invariants_hold_for_random_sessions() {
    let mut rng = SplitMix64::new(7);
    for case in 0..40 {
        let turns = 2 + rng.below(12) as usize;
        let messages = random_conversation(&mut rng, turns);
        let count = messages.len();
        let fixture = Fixture::new(messages.clone()).await;
        // A model that sometimes answers, sometimes fails, sometimes has nothing to say.
        let mut llm = ScriptedLlm::new();
        for _ in 0..20 {
            llm = match rng.below(3) {
                0 => llm.then_text("- [durable] fact"),
                1 => llm.then_error(LlmError::transient("down")),
                _ => llm.then_text("(nothing)"),
            };
        }
        let estimates: Vec<usize> = (0..8).map(|_| 100 + rng.below(900) as usize).collect();
        let window = 300 + rng.below(700) as usize;
        let consolidator = fixture
            .consolidator(
                config(window, 0.5),
                Arc::new(llm),
                flat_counter(10 + rng.below(40) as usize),
            )
            .scripted(&estimates);
        let mut archived_until = 0;
        for _ in 0..4 {
            let report = if rng.below(2) == 0 {
                consolidator
                    .maybe_consolidate(&fixture.key, None)
                    .await
                    .unwrap()
                    .archives
            } else {
                consolidator
                    .compact_idle(&fixture.key)
                    .await
                    .unwrap()
                    .into_iter()
                    .collect()
            };
            for record in report {
                assert_eq!(
                    record.start, archived_until,
                    "case {case}: archives are contiguous"
                );
                archived_until = record.end;
                // No tool call is split from its results: the slice ends before a user turn
                // or at the end.
                assert!(
                    record.end == count || messages[record.end].role() == Some("user"),
                    "case {case}"
                );
                if matches!(record.outcome, Archived::Nothing) {
                    continue;
                }
                // Archived messages reach the journal, tagged with their range.
                let entries = fixture.entries().await;
                assert!(
                    entries
                        .iter()
                        .any(|e| e.message_range == Some((record.start as u64, record.end as u64))),
                    "case {case}"
                );
            }
            let pointer = fixture.handle.last_consolidated();
            assert!(pointer <= fixture.handle.message_count());
            assert_eq!(pointer, archived_until, "case {case}");
        }
    }
}

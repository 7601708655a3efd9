//! Idle compaction (spec memory.md 5.8), crash repair, accumulating summaries, the lock.

use crate::support::Scripted;
use std::sync::Arc;

use async_trait::async_trait;
use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, Role};
use nanobot_memory_core::Archived;
use nanobot_memory_store::{HistoryJournal, NewEntry};
use nanobot_session_store::{HistoryOptions, SessionHandle, StoredMessage};
use serde_json::json;

use crate::support::{Fixture, a, config, flat_counter, summary_llm, tool_call, turns, u};

fn replay(handle: &SessionHandle) -> Vec<String> {
    handle
        .history(&HistoryOptions::default())
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn case_64_an_idle_session_is_archived_and_keeps_its_last_turns() {
    let fixture = Fixture::new(turns(40)).await;
    fixture
        .handle
        .update(|s| s.set_provider_state(Some(json!({"kind": "k"}))));
    fixture.sessions.save(&fixture.handle).await.unwrap();
    let updated_at = fixture.handle.read(|s| s.meta().updated_at);
    let consolidator = fixture.consolidator(config(100_000, 0.5), summary_llm(1), flat_counter(10));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(record.outcome, Archived::Summary { .. }));
    fixture.sessions.invalidate(&fixture.key);
    let reloaded = fixture.sessions.get_or_create(&fixture.key).await.unwrap();
    reloaded.read(|s| {
        assert_eq!(s.messages().len(), 40);
        assert_eq!(s.messages()[0].content().unwrap(), "user msg 0");
        assert_eq!(s.last_consolidated(), 40);
        assert!(s.meta().provider_state.is_none());
        assert_eq!(s.meta().updated_at, updated_at, "archiving is not activity");
        let summary = &s.meta().metadata["_last_summary"];
        assert_eq!(summary["text"], "- [durable] fact 0");
        assert!(summary["last_active"].is_string());
    });
    let replayed = replay(&reloaded);
    assert_eq!(replayed.len(), 8);
    assert_eq!(
        (replayed[0].as_str(), replayed[7].as_str()),
        ("user msg 16", "assistant msg 19")
    );
}

#[tokio::test]
async fn case_65_66_compacting_twice_and_incrementally() {
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let llm = summary_llm(2);
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    assert!(
        consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .is_none(),
        "nothing new"
    );
    assert_eq!((llm.call_count(), fixture.entries().await.len()), (1, 1));
    assert_eq!(replay(&fixture.handle), ["hello", "hi"]);

    fixture.handle.add_message(u("more"));
    fixture.handle.add_message(a("sure"));
    fixture.sessions.save(&fixture.handle).await.unwrap();
    consolidator.compact_idle(&fixture.key).await.unwrap();
    let second = &llm.requests()[1];
    let texts: Vec<String> = second.messages[1..5]
        .iter()
        .map(|m| m.content().unwrap().joined_text())
        .collect();
    assert_eq!(texts, ["hello", "hi", "more", "sure"]);
    assert!(
        second.messages[5]
            .content()
            .unwrap()
            .joined_text()
            .contains("final 2 conversation messages")
    );
    assert_eq!(fixture.handle.last_consolidated(), 4);
    // Summaries accumulate instead of replacing each other.
    let summary = fixture
        .handle
        .read(|s| s.meta().metadata["_last_summary"]["text"].clone());
    assert_eq!(summary, "- [durable] fact 0\n- [durable] fact 1");
}

/// A model that, while "thinking", sees two more messages arrive.
struct Interrupted {
    handle: Arc<SessionHandle>,
}

#[async_trait]
impl LlmClient for Interrupted {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.handle.add_message(u("late question"));
        self.handle.add_message(a("late answer"));
        Ok(LlmResponse::text("- [ephemeral] something"))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(100_000)
    }
}

#[tokio::test]
async fn case_67_messages_arriving_during_the_call_stay_live() {
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let llm = Arc::new(Interrupted {
        handle: fixture.handle.clone(),
    });
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm, flat_counter(10));
    consolidator.compact_idle(&fixture.key).await.unwrap();
    assert_eq!(
        (
            fixture.handle.message_count(),
            fixture.handle.last_consolidated()
        ),
        (4, 2)
    );
}

#[tokio::test]
async fn case_69_70_a_provider_down_archives_the_messages_themselves() {
    let fixture = Fixture::new(turns(20)).await;
    let llm = Arc::new(ScriptedLlm::new().then_error(LlmError::transient("connection refused")));
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm, flat_counter(10));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(record.outcome, Archived::Raw { .. }));
    let raw = &fixture.entries().await[0].content;
    assert!(
        raw.contains("USER: user msg 0") && raw.contains("ASSISTANT: assistant msg 9"),
        "{raw}"
    );
    assert_eq!(
        (
            fixture.handle.message_count(),
            fixture.handle.last_consolidated()
        ),
        (20, 20)
    );
    assert_eq!(
        replay(&fixture.handle).first().map(String::as_str),
        Some("user msg 6")
    );
}

#[tokio::test]
async fn case_73_tool_history_keeps_its_structure_in_the_request() {
    let tool_result = StoredMessage::tool_result("call-1", "lookup", "42");
    let fixture = Fixture::new(vec![
        u("look it up"),
        tool_call("call-1"),
        tool_result,
        a("It is 42."),
    ])
    .await;
    let llm = Arc::new(ScriptedLlm::new().then_text("- [durable] the answer is 42"));
    let lookup = nanobot_llm_port::ToolDefinition::function(
        "lookup",
        "Looks things up.",
        json!({"type": "object"}),
    );
    let consolidator = {
        let journal = fixture.journal.clone();
        let sessions = fixture.sessions.clone();
        let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        nanobot_memory_core::Consolidator::new(
            config(100_000, 0.5),
            llm.clone(),
            journal,
            archive,
            sessions,
            Arc::new(nanobot_memory_core::PlainPrompt {
                system: "SYSTEM".into(),
                tools: vec![lookup],
            }),
            flat_counter(10),
        )
    }
    .unwrap();
    consolidator.compact_idle(&fixture.key).await.unwrap();
    let request = &llm.requests()[0];
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role()).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(request.messages[2].tool_calls()[0].id, "call-1");
    assert_eq!(
        request.tool_choice,
        Some(nanobot_llm_port::ToolChoice::None)
    );
    assert_eq!(request.tools.len(), 1);
    insta::assert_json_snapshot!(request);
    assert_eq!(fixture.handle.message_count(), 4);
    assert_eq!(
        fixture.entries().await[0].content,
        "- [durable] the answer is 42"
    );
}

#[tokio::test]
async fn case_74_a_message_larger_than_the_window_goes_raw_whole() {
    let huge = "word ".repeat(20_000);
    let fixture = Fixture::new(vec![u(&huge)]).await;
    let llm = Arc::new(ScriptedLlm::new());
    let consolidator = fixture.consolidator(config(1_000, 0.5), llm.clone(), flat_counter(25_000));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            record.outcome,
            Archived::Raw {
                reason: nanobot_memory_core::RawReason::RequestTooLarge,
                ..
            }
        ),
        "{record:?}"
    );
    assert_eq!(llm.call_count(), 0);
    assert_eq!(fixture.handle.last_consolidated(), 1);
    // Split into parts, none cut: together they hold the whole message.
    let entries = fixture.entries().await;
    assert!(entries.len() > 1);
    let bodies: String = entries
        .iter()
        .map(|e| e.content.split_once('\n').unwrap().1)
        .collect::<Vec<_>>()
        .join("");
    assert_eq!(bodies.matches("word").count(), 20_000);
    assert!(
        entries[0]
            .content
            .starts_with(&format!("[RAW] 1 messages (part 1/{})", entries.len()))
    );
}

#[tokio::test]
async fn a_crash_between_journal_and_pointer_is_repaired_without_archiving_twice() {
    let fixture = Fixture::new(turns(4)).await;
    // The journal already holds the archive of messages [0, 4) of this session (its digest
    // names exactly those messages).
    let digest =
        nanobot_memory_store::archive_digest(&fixture.handle.read(|s| s.messages().to_vec()));
    let cursor = fixture
        .journal
        .append(&[NewEntry::text("- [durable] archived before the crash")
            .from_session("telegram:42")
            .covering(0, 4)
            .with_digest(&digest)])
        .await
        .unwrap()[0];
    let llm = Arc::new(ScriptedLlm::new());
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.outcome, Archived::Recovered { cursor });
    assert_eq!(llm.call_count(), 0);
    assert_eq!(fixture.handle.last_consolidated(), 4);
    assert_eq!(fixture.entries().await.len(), 1);
}

/// An archive journaled for this session from message 0 before a `/new` renumbered its
/// messages is another slice: its digest differs, so the new messages are archived, not
/// taken for archived (the journal's earlier 64-entry scan matched on the range alone).
#[tokio::test]
async fn an_archive_of_other_messages_at_the_same_range_is_not_taken_for_this_one() {
    let fixture = Fixture::new(turns(4)).await;
    fixture
        .journal
        .append(&[NewEntry::text("- [durable] the session before /new")
            .from_session("telegram:42")
            .covering(0, 4)
            .with_digest("0011223344556677")])
        .await
        .unwrap();
    let llm = summary_llm(1);
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    let record = consolidator
        .compact_idle(&fixture.key)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(record.outcome, Archived::Summary { .. }),
        "{record:?}"
    );
    assert_eq!(llm.call_count(), 1);
    assert_eq!(fixture.entries().await.len(), 2);
    assert_eq!(fixture.handle.last_consolidated(), 4);
}

/// A model that checks the session's consolidation lock is held while it answers.
struct LockProbe {
    lock: std::sync::Mutex<Option<Arc<tokio::sync::Mutex<()>>>>,
}

#[async_trait]
impl LlmClient for LockProbe {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let lock = self.lock.lock().unwrap().clone().unwrap();
        assert!(lock.try_lock().is_err(), "held during the call");
        Ok(LlmResponse::text("- fact"))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(100_000)
    }
}

#[tokio::test]
async fn case_77_the_lock_is_held_during_the_call_and_released_after() {
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let probe = Arc::new(LockProbe {
        lock: std::sync::Mutex::new(None),
    });
    let consolidator = fixture.consolidator(config(100_000, 0.5), probe.clone(), flat_counter(10));
    let lock = consolidator.lock_for(&fixture.key);
    *probe.lock.lock().unwrap() = Some(lock.clone());
    consolidator.compact_idle(&fixture.key).await.unwrap();
    assert!(lock.try_lock().is_ok());
}

#[tokio::test]
async fn slash_new_archives_a_detached_copy_and_moves_no_pointer() {
    let fixture = Fixture::new(turns(10)).await;
    fixture
        .handle
        .update(|s| s.set_last_consolidated(8))
        .unwrap();
    fixture.sessions.save(&fixture.handle).await.unwrap();
    let llm = Arc::new(ScriptedLlm::new().then_text("- [ephemeral] the last exchange"));
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    // /new: snapshot, clear, then archive the snapshot in the background.
    let snapshot = fixture.handle.snapshot();
    fixture.sessions.clear(&fixture.handle).await.unwrap();
    let record = consolidator.archive_snapshot(&snapshot).await.unwrap();
    assert!(matches!(record.outcome, Archived::Summary { .. }));
    assert_eq!((record.start, record.end), (8, 10));
    let request = &llm.requests()[0];
    insta::assert_json_snapshot!("new_command_snapshot_archive", request);
    let expected = nanobot_session_store::get_history(
        snapshot.messages(),
        8,
        &HistoryOptions::default(),
        &nanobot_llm_port::Cl100kBase,
    );
    let sent: Vec<String> = request.messages[1..request.messages.len() - 1]
        .iter()
        .map(|m| m.content().unwrap().joined_text())
        .collect();
    let replayed: Vec<String> = expected
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent, replayed);
    assert!(
        request
            .messages
            .last()
            .unwrap()
            .content()
            .unwrap()
            .joined_text()
            .contains("final 2 conversation messages")
    );
    assert_eq!(
        (
            fixture.handle.message_count(),
            fixture.handle.last_consolidated()
        ),
        (0, 0)
    );
    assert_eq!(fixture.entries().await[0].message_range, Some((8, 10)));
}

#[tokio::test]
async fn background_consolidation_does_not_hold_up_the_caller() {
    let fixture = Fixture::new(turns(20)).await;
    let consolidator = Arc::new(
        fixture
            .consolidator(config(200, 0.5), summary_llm(1), flat_counter(100))
            .scripted(&[250, 90]),
    );
    let task = consolidator.consolidate_in_background(fixture.key.clone(), None);
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.archives.len(), 1);
    assert_eq!(fixture.handle.last_consolidated(), 2);
}

#[tokio::test]
async fn one_call_with_tool_choice_none() {
    use nanobot_llm_port::testing::MockLlmClient;
    let fixture = Fixture::new(vec![u("hello"), a("hi")]).await;
    let mut llm = MockLlmClient::new();
    llm.expect_complete()
        .withf(|request| {
            request.tool_choice == Some(nanobot_llm_port::ToolChoice::None)
                && request.tools.len() == 1
        })
        .times(1)
        .returning(|_| Ok(LlmResponse::text("- fact")));
    let lookup = nanobot_llm_port::ToolDefinition::function(
        "lookup",
        "Looks things up.",
        json!({"type": "object"}),
    );
    let consolidator = {
        let journal = fixture.journal.clone();
        let sessions = fixture.sessions.clone();
        let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
            journal.clone(),
            sessions.store().clone(),
        ));
        nanobot_memory_core::Consolidator::new(
            config(100_000, 0.5),
            Arc::new(llm),
            journal,
            archive,
            sessions,
            Arc::new(nanobot_memory_core::PlainPrompt {
                system: "SYSTEM".into(),
                tools: vec![lookup],
            }),
            flat_counter(10),
        )
    }
    .unwrap();
    consolidator.compact_idle(&fixture.key).await.unwrap();
    assert!(
        consolidator
            .compact_idle(&fixture.key)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn case_68_a_late_correction_reaches_the_request() {
    let mut messages = turns(36);
    messages.push(u("no, that's wrong: the final result is different"));
    messages.push(a("CORRECTED_FINAL_RESULT_alpha"));
    let fixture = Fixture::new(messages).await;
    let llm = summary_llm(1);
    let consolidator = fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10));
    consolidator.compact_idle(&fixture.key).await.unwrap();
    let request = serde_json::to_string(&llm.requests()[0]).unwrap();
    assert!(request.contains("CORRECTED_FINAL_RESULT_alpha"));
    assert!(request.contains("final 38 conversation messages"));
}

//! The session summary: written by consolidation, read back for the next turn, cleared by
//! `/new` (spec memory.md 3.6, cases 63, 88 and 97).

use crate::support::Scripted;
use std::sync::Arc;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory_core::SessionSummary;
use nanobot_session_store::{Session, SessionKey};
use serde_json::{Map, Value, json};

use crate::support::{Fixture, config, flat_counter, turns};

fn metadata(summary: Value) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("_last_summary".into(), summary);
    metadata
}

#[tokio::test]
async fn case_63_a_token_consolidation_leaves_a_summary_every_turn_reads() {
    let fixture = Fixture::new(turns(20)).await;
    let llm = Arc::new(ScriptedLlm::new().then_text("User discussed project status."));
    let consolidator = fixture
        .consolidator(config(400, 0.5), llm, flat_counter(10))
        .scripted(&[500, 80]);
    let report = consolidator
        .maybe_consolidate(&fixture.key, None)
        .await
        .unwrap();
    assert_eq!(report.archives.len(), 1);
    fixture.sessions.invalidate(&fixture.key);
    let reloaded = fixture.sessions.get_or_create(&fixture.key).await.unwrap();
    let updated_at =
        reloaded.read(|s| nanobot_session_store::python_isoformat(s.meta().updated_at));
    for _ in 0..2 {
        // Read on every turn; reading does not consume it.
        let summary = reloaded.read(SessionSummary::of).unwrap();
        assert_eq!(summary.text, "User discussed project status.");
        assert_eq!(summary.last_active, updated_at);
    }
    assert!(reloaded.read(|s| s.meta().metadata.contains_key("_last_summary")));
}

#[test]
fn case_88_only_a_valid_summary_is_handed_on() {
    let fallback = "2026-11-30T08:00:00";
    let of = |summary: Value| SessionSummary::from_metadata(&metadata(summary), fallback);
    assert_eq!(
        of(json!({"text": "X", "last_active": "2026-11-29T21:14:03.123456"})),
        Some(SessionSummary {
            text: "X".into(),
            last_active: "2026-11-29T21:14:03.123456".into()
        })
    );
    for broken in [
        json!({"text": "X", "last_active": "not-a-date"}),
        json!({"text": "X"}),
    ] {
        assert_eq!(of(broken).unwrap().last_active, fallback);
    }
    for none in [
        json!("not a dict"),
        json!({"last_active": "2026-11-29T21:14:03"}),
        json!({"text": ""}),
        json!({"text": 7}),
        Value::Null,
    ] {
        assert_eq!(of(none.clone()), None, "{none}");
    }
    assert_eq!(SessionSummary::from_metadata(&Map::new(), fallback), None);
}

#[test]
fn case_88_internal_sessions_get_no_summary() {
    let now = chrono::NaiveDate::from_ymd_opt(2026, 11, 30)
        .unwrap()
        .and_hms_opt(8, 0, 0)
        .unwrap();
    for (key, expected) in [("dream:20261130", false), ("telegram:42", true)] {
        let mut session = Session::new(SessionKey::new(key).unwrap(), now);
        session
            .metadata_mut()
            .insert("_last_summary".into(), json!({"text": "X"}));
        let summary = SessionSummary::of(&session);
        assert_eq!(summary.is_some(), expected, "{key}");
        if let Some(summary) = summary {
            assert_eq!(summary.last_active, "2026-11-30T08:00:00");
        }
    }
}

#[tokio::test]
async fn case_97_slash_new_removes_the_summary() {
    let fixture = Fixture::new(turns(4)).await;
    let consolidator = fixture.consolidator(
        config(100_000, 0.5),
        Arc::new(ScriptedLlm::new().then_text("- [durable] fact")),
        flat_counter(10),
    );
    consolidator.compact_idle(&fixture.key).await.unwrap();
    assert!(fixture.handle.read(SessionSummary::of).is_some());
    fixture.sessions.clear(&fixture.handle).await.unwrap();
    fixture.sessions.invalidate(&fixture.key);
    let reloaded = fixture.sessions.get_or_create(&fixture.key).await.unwrap();
    assert_eq!(reloaded.read(SessionSummary::of), None);
}

//! AutoCompact in tokio's paused time (spec memory.md 5.9): deadlines, skips, restarts.

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory_core::{AutoCompact, Compacted, DEFAULT_IDLE_TTL};
use nanobot_session_store::SessionKey;

use crate::support::{Fixture, FullJournal, config, flat_counter, summary_llm, turns};

async fn fixture_with(llm: Arc<ScriptedLlm>) -> (Fixture, Arc<AutoCompact>) {
    let fixture = Fixture::new(turns(4)).await;
    let consolidator = Arc::new(fixture.consolidator(config(100_000, 0.5), llm, flat_counter(10)));
    let compact = AutoCompact::new(consolidator, DEFAULT_IDLE_TTL);
    (fixture, compact)
}

#[tokio::test(start_paused = true)]
async fn case_78_79_a_session_is_compacted_exactly_when_its_ttl_passes() {
    let (fixture, compact) = fixture_with(summary_llm(1)).await;
    compact.touch(&fixture.key);
    tokio::time::advance(Duration::from_secs(14 * 60 + 59)).await;
    assert!(
        compact.compact_due().await.is_empty(),
        "14:59 is not idle enough"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    let done = compact.compact_due().await;
    assert_eq!(done.len(), 1);
    assert!(done[0].result.as_ref().unwrap().is_some());
    assert_eq!(fixture.handle.last_consolidated(), 4);
    assert!(
        fixture
            .handle
            .read(|s| s.meta().metadata.contains_key("_last_summary"))
    );
    // Compacted sessions are not scheduled again until they are active again.
    assert_eq!(compact.tracked(), 0);
    tokio::time::advance(DEFAULT_IDLE_TTL * 2).await;
    assert!(compact.compact_due().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn case_80_in_flight_internal_and_disabled_sessions_are_skipped() {
    let (fixture, compact) = fixture_with(summary_llm(1)).await;
    let guard = compact.turn_started(&fixture.key);
    compact.touch(&fixture.key);
    compact.touch(&SessionKey::new("dream:20261130-0600").unwrap());
    assert_eq!(compact.tracked(), 1, "dream: sessions are never tracked");
    tokio::time::advance(DEFAULT_IDLE_TTL * 2).await;
    assert!(
        compact.compact_due().await.is_empty(),
        "a turn is in flight"
    );
    drop(guard);
    tokio::time::advance(DEFAULT_IDLE_TTL - Duration::from_secs(1)).await;
    assert!(
        compact.compact_due().await.is_empty(),
        "idle time starts when the turn ends"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(compact.compact_due().await.len(), 1);

    let disabled = AutoCompact::new(
        Arc::new(fixture.consolidator(config(100_000, 0.5), summary_llm(1), flat_counter(10))),
        Duration::ZERO,
    );
    disabled.touch(&fixture.key);
    assert_eq!(disabled.tracked(), 0, "a zero TTL disables compaction");
}

#[tokio::test(start_paused = true)]
async fn a_restart_catches_up_instead_of_starting_the_clock_again() {
    let (fixture, compact) = fixture_with(summary_llm(1)).await;
    // Idle for 20 minutes before the restart.
    compact.touch_since(&fixture.key, Duration::from_secs(20 * 60));
    assert_eq!(compact.compact_due().await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_background_task_sleeps_until_a_deadline() {
    let (fixture, compact) = fixture_with(summary_llm(1)).await;
    // 10,000 idle sessions: no wake-up until the first deadline.
    for i in 0..10_000 {
        compact.touch(&SessionKey::new(format!("cli:idle-{i}")).unwrap());
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel::<Compacted>();
    let runner = tokio::spawn(Arc::clone(&compact).run(
        async {
            let _ = stopped.await;
        },
        move |done| {
            let _ = report.send(done);
        },
    ));
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(compact.wakeups(), 0, "an idle bot does no work");
    // The real session becomes due first: it was touched last, so give it an earlier
    // deadline by marking it idle since long ago.
    compact.touch_since(&fixture.key, DEFAULT_IDLE_TTL);
    let done = reports.recv().await.unwrap();
    assert_eq!(done.key, fixture.key);
    assert!(done.result.unwrap().is_some());
    assert_eq!(fixture.handle.last_consolidated(), 4);
    let _ = stop.send(());
    runner.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn case_84_a_failing_compaction_is_reported_and_retried_later() {
    let fixture = Fixture::new(turns(4)).await;
    let consolidator = Arc::new(
        {
            let journal = Arc::new(FullJournal);
            let sessions = fixture.sessions.clone();
            let archive = Arc::new(nanobot_memory_store::TwoStepArchive::new(
                journal.clone(),
                sessions.store().clone(),
            ));
            nanobot_memory_core::Consolidator::new(
                config(100_000, 0.5),
                summary_llm(2),
                journal,
                archive,
                sessions,
                Arc::new(nanobot_memory_core::PlainPrompt::default()),
                flat_counter(10),
            )
        }
        .unwrap(),
    );
    let compact = AutoCompact::new(consolidator, DEFAULT_IDLE_TTL);
    compact.touch(&fixture.key);
    tokio::time::advance(DEFAULT_IDLE_TTL).await;
    let done = compact.compact_due().await;
    assert_eq!(done.len(), 1);
    assert!(done[0].result.is_err(), "the error reaches the caller");
    assert_eq!(fixture.handle.last_consolidated(), 0);
    // Nothing is stuck: the session is scheduled again once it has been idle again.
    compact.touch(&fixture.key);
    tokio::time::advance(DEFAULT_IDLE_TTL).await;
    assert_eq!(compact.compact_due().await.len(), 1);
}

/// A model that answers only when released, telling when a call has begun.
struct Gated {
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl nanobot_llm_port::LlmClient for Gated {
    async fn complete(
        &self,
        _request: &nanobot_llm_port::LlmRequest,
    ) -> Result<nanobot_llm_port::LlmResponse, nanobot_llm_port::LlmError> {
        self.entered.notify_one();
        self.release.notified().await;
        Ok(nanobot_llm_port::LlmResponse::text("- [durable] fact"))
    }

    fn capabilities(&self) -> nanobot_llm_port::Capabilities {
        nanobot_llm_port::Capabilities::new(100_000)
    }
}

#[tokio::test(start_paused = true)]
async fn case_85_a_compaction_in_flight_is_not_scheduled_twice() {
    let fixture = Fixture::new(turns(4)).await;
    let llm = Arc::new(Gated {
        entered: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let consolidator =
        Arc::new(fixture.consolidator(config(100_000, 0.5), llm.clone(), flat_counter(10)));
    let compact = AutoCompact::new(consolidator, DEFAULT_IDLE_TTL);
    compact.touch(&fixture.key);
    tokio::time::advance(DEFAULT_IDLE_TTL).await;
    let first = tokio::spawn({
        let compact = Arc::clone(&compact);
        async move { compact.compact_due().await }
    });
    llm.entered.notified().await;
    // A new message and a new idle period while the first compaction is still running.
    compact.touch(&fixture.key);
    tokio::time::advance(DEFAULT_IDLE_TTL).await;
    assert!(compact.compact_due().await.is_empty(), "already compacting");
    llm.release.notify_one();
    assert_eq!(first.await.unwrap().len(), 1);
    assert_eq!(fixture.handle.last_consolidated(), 4);
}

#[tokio::test(start_paused = true)]
async fn case_86_only_the_idle_session_without_a_turn_is_compacted() {
    let fixture = Fixture::new(turns(4)).await;
    let consolidator =
        Arc::new(fixture.consolidator(config(100_000, 0.5), summary_llm(3), flat_counter(10)));
    let compact = AutoCompact::new(consolidator, DEFAULT_IDLE_TTL);
    let handles = [
        ("cli:idle", DEFAULT_IDLE_TTL * 2),
        ("cli:active", DEFAULT_IDLE_TTL * 2),
        ("cli:recent", Duration::from_secs(60)),
    ];
    for (key, idle_for) in handles {
        let key = SessionKey::new(key).unwrap();
        let handle = fixture.sessions.get_or_create(&key).await.unwrap();
        for message in turns(2) {
            handle.add_message(message);
        }
        fixture.sessions.save(&handle).await.unwrap();
        compact.touch_since(&key, idle_for);
    }
    let active = SessionKey::new("cli:active").unwrap();
    let turn = compact.turn_started(&active);
    let done: Vec<String> = compact
        .compact_due()
        .await
        .into_iter()
        .map(|c| c.key.as_str().to_owned())
        .collect();
    assert_eq!(done, ["cli:idle"]);
    // The turn ends; the active session compacts after its own idle period.
    drop(turn);
    tokio::time::advance(DEFAULT_IDLE_TTL).await;
    let done: Vec<String> = compact
        .compact_due()
        .await
        .into_iter()
        .map(|c| c.key.as_str().to_owned())
        .collect();
    // In deadline order: the recent one went idle a minute before the turn ended.
    assert_eq!(done, ["cli:recent", "cli:active"]);
}

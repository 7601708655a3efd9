//! The jobs a long-running bot starts beside its turns.

use std::sync::Arc;
use std::time::Duration;

use nanobot_llm_port::testing::ScriptedLlm;
use nanobot_memory::background::spawn_idle_sweeper;
use nanobot_memory::{AgentSettings, Bot, Speaker};

/// The sweep finds the session left idle, archives it, says so, and stops when told.
#[tokio::test]
async fn the_idle_sweep_reports_each_compaction_until_stopped() {
    let llm = ScriptedLlm::new()
        .then_text("Hi.")
        .then_text("Summary: a greeting.");
    let mut settings = AgentSettings::new("m", 32_768, 512);
    settings.idle_ttl = Some(Duration::from_millis(50));
    let bot = Bot::builder()
        .in_memory()
        .llm(Arc::new(llm))
        .settings(settings)
        .build()
        .await
        .unwrap();
    bot.turn(&Speaker::user("telegram:1"), "telegram:1", "Hello.")
        .await
        .unwrap();
    let (sender, reports) = std::sync::mpsc::channel();
    let stop = Arc::new(tokio::sync::Notify::new());
    spawn_idle_sweeper(
        bot.agent().clone(),
        Duration::from_millis(50),
        stop.clone(),
        move |_scope, done| {
            let archived = matches!(&done.result, Ok(Some(record)) if record.end > record.start);
            let _ = sender.send((done.key.to_string(), archived));
        },
    );
    // The sweep looks every second: wait for its report (at most 20 s on a loaded machine).
    let mut reported: Vec<(String, bool)> = Vec::new();
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reported.extend(reports.try_iter());
        if !reported.is_empty() {
            break;
        }
    }
    stop.notify_waiters();
    reported.extend(reports.try_iter());
    assert_eq!(reported, vec![("telegram:1".to_owned(), true)]);
}

/// At the schedule's due time the scopes with unread history get their Dream run, and the
/// report hears what each did; nothing runs before the due time.
#[tokio::test(start_paused = true)]
async fn dream_runs_on_its_schedule_over_the_scopes_with_unread_history() {
    use nanobot_memory::background::spawn_dream_schedule;
    use nanobot_memory::dream::DreamSchedule;
    use nanobot_memory::llm::TokioClock;
    use nanobot_memory::scope::{ScopeKey, Subject};
    use nanobot_memory::store::{HistoryJournalExt, NewEntry};

    let start = chrono::DateTime::parse_from_rfc3339("2026-03-01T09:00:00Z")
        .unwrap()
        .to_utc();
    let bot = Bot::builder()
        .in_memory()
        .clock(Arc::new(TokioClock::starting_at(start)))
        .llm(Arc::new(
            ScriptedLlm::new().then_text("Nothing here is worth keeping."),
        ))
        .build()
        .await
        .unwrap();
    let memory = bot.memory(&ScopeKey::local(Subject::Agent)).await.unwrap();
    memory
        .journal
        .append_one(NewEntry::text("- The user likes green tea."))
        .await
        .unwrap();
    let (sender, reports) = std::sync::mpsc::channel();
    let stop = Arc::new(tokio::sync::Notify::new());
    spawn_dream_schedule(
        bot.agent().clone(),
        memory.clone(),
        DreamSchedule::Every { hours: 1 },
        stop.clone(),
        move |scope, line| {
            let _ = sender.send((scope.subject.to_string(), line));
        },
    );
    tokio::time::sleep(Duration::from_secs(59 * 60)).await;
    assert!(reports.try_recv().is_err(), "nothing before the due time");
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    stop.notify_waiters();
    let reported: Vec<(String, String)> = reports.try_iter().collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].0, "agent");
    assert!(!reported[0].1.is_empty(), "{reported:?}");
    assert_eq!(
        memory.journal.dream_cursor().await.unwrap(),
        memory.journal.latest_cursor().await.unwrap(),
        "the run read the entry"
    );
}

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
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    stop.notify_waiters();
    let reported: Vec<(String, bool)> = reports.try_iter().collect();
    assert_eq!(reported, vec![("telegram:1".to_owned(), true)]);
}

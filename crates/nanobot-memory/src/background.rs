//! The jobs a long-running bot runs beside its turns: Dream on its schedule over every
//! scope, and the compaction of sessions left idle. Each runs until its `stop` is notified
//! and reports what it did through a callback (a log line, a chat notice).

use std::sync::Arc;
use std::time::Duration;

use nanobot_dream::{DreamSchedule, RunStatus, Trigger};
use nanobot_memory_core::Compacted;
use nanobot_memory_scope::ScopeKey;
use nanobot_turn::{Agent, ScopeMemory};
use tokio::sync::Notify;

/// Runs Dream on `schedule` until `stop`: at each due time (after the last run `clock`
/// records, the last run `memory`'s Dream records), every scope with unread history gets its
/// run, idle scopes cost nothing; `report` hears each scope's first line of what its run
/// did (nothing for a run with nothing to do).
pub fn spawn_dream_schedule(
    agent: Arc<Agent>,
    memory: Arc<ScopeMemory>,
    schedule: DreamSchedule,
    stop: Arc<Notify>,
    report: impl Fn(&ScopeKey, String) + Send + Sync + 'static,
) {
    tokio::spawn(async move {
        loop {
            let now = agent.clock().now();
            let Ok(Some(next)) = memory.dream.next_run(&schedule, now).await else {
                return;
            };
            let wait = (next - now).to_std().unwrap_or_default();
            tokio::select! {
                () = stop.notified() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let Ok(results) = agent.dream_tick(Trigger::Scheduled).await else {
                continue;
            };
            for (scope, result) in results {
                let line = match result {
                    Ok(run) if run.status == RunStatus::NothingToDo => continue,
                    Ok(run) => first_line(&nanobot_dream::format::run_reply(&run)),
                    Err(e) => format!("failed: {e}"),
                };
                report(&scope, line);
            }
        }
    });
}

/// Compacts the idle sessions of every open scope until `stop`, looking every quarter of
/// `ttl` (at least every second, at most every minute); `report` hears each compaction.
pub fn spawn_idle_sweeper(
    agent: Arc<Agent>,
    ttl: Duration,
    stop: Arc<Notify>,
    report: impl Fn(&ScopeKey, &Compacted) + Send + Sync + 'static,
) {
    let every = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.notified() => return,
                () = tokio::time::sleep(every) => {}
            }
            for (scope, done) in agent.compact_idle().await {
                report(&scope, &done);
            }
        }
    });
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

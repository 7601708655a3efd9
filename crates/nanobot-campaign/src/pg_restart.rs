//! Family 7 (its second part), a PostgreSQL server crash: two writers append messages and
//! journal entries while the local server is stopped with `pg_ctlcluster … stop -m
//! immediate` (no checkpoint, as a crash) and started again, 10 times in a row. At durability
//! `always` nothing acknowledged may be lost; at `turn-end` what was acknowledged before the
//! last acknowledged flush must be there, and what is there is a prefix of what was written
//! (the loss, if any, is a suffix). The pools recover without restarting the process; the
//! report gives the time from the server's start to the first successful write.
//!
//! It runs only when `NANOBOT_CAMPAIGN_PG_CRASH=1` (`cargo xtask ci` sets it) and against a server
//! on this machine that `pg_ctlcluster` manages (it says why it skipped otherwise), after
//! every other family, since it takes the server down.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{HistoryJournal, NewEntry};
use nanobot_session_store::{Append, SessionError, SessionKey, SessionStore, StoredMessage};
use nanobot_store_postgres::{Durability, PgOptions, PgScope, PgStore};

use crate::Plan;
use crate::report::{Family, percentiles_ms};
use crate::rng::Rng;

/// The cluster (version, name) serving port 5432 on this machine, if `pg_lsclusters` says.
fn local_cluster(url: &str) -> Option<(String, String)> {
    if !(url.contains("@127.0.0.1") || url.contains("@localhost")) {
        return None;
    }
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or("5432")
        .to_owned();
    let output = Command::new("pg_lsclusters").arg("-h").output().ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.get(2) == Some(&port.as_str()))
        .map(|words| (words[0].to_owned(), words[1].to_owned()))
}

fn cluster(action: &[&str], version: &str, name: &str) -> Result<(), String> {
    let output = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", version, name])
        .args(action)
        .output()
        .map_err(|e| format!("pg_ctlcluster: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "pg_ctlcluster {version} {name} {}: {}",
            action.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

pub(crate) fn run(plan: &Plan) -> Family {
    let mut family = Family::default();
    let Some(url) = crate::pg::database_url(&mut family) else {
        return family;
    };
    // Crashing a server is never done by surprise: `cargo xtask ci` opts in for the machine's own
    // test server; a developer's `cargo xtask ci` skips it unless asked.
    if std::env::var("NANOBOT_CAMPAIGN_PG_CRASH").as_deref() != Ok("1") {
        family.set(
            "skipped",
            "NANOBOT_CAMPAIGN_PG_CRASH=1 is not set (it stops and starts the local server)",
        );
        return family;
    }
    let Some((version, name)) = local_cluster(&url) else {
        family.set(
            "skipped",
            "the server is not a local cluster that pg_ctlcluster manages",
        );
        return family;
    };
    let result = crate::two_threads()
        .and_then(|runtime| runtime.block_on(restarts(plan, &url, &version, &name, &mut family)));
    // Whatever happened, the server is left running.
    let _ = cluster(&["start"], &version, &name);
    if let Err(problem) = result {
        family.zero("failed_runs", 1);
        family.fail(problem);
    }
    family
}

#[derive(Debug, Default)]
struct Written {
    /// Writes acknowledged (messages and entries).
    acked: u64,
    /// The highest message number that must survive: every acknowledged one at `always`,
    /// the last one before an acknowledged flush at `turn-end`.
    must_have: Option<u64>,
    /// Journal entries acknowledged (tag, cursor).
    entries: Vec<(String, u64)>,
    /// When the first write after the server came back succeeded.
    first_after: Option<Instant>,
    /// Acknowledged messages the database no longer had when the writer came back (the
    /// unflushed suffix a crash may take at `turn-end`).
    rewound: u64,
}

async fn restarts(
    plan: &Plan,
    url: &str,
    version: &str,
    name: &str,
    family: &mut Family,
) -> Result<(), String> {
    let schema = format!("campaign_restart_{}", std::process::id());
    let mut rng = Rng::new(plan.seed ^ 0x4e57);
    let (mut lost, mut not_suffix, mut acked_total) = (0u64, 0u64, 0u64);
    let mut suffix_lost = 0u64;
    let mut recovery_ms = Vec::new();
    for round in 0..plan.pg_restarts {
        let durability = if round % 2 == 0 {
            Durability::Always
        } else {
            Durability::TurnEnd
        };
        let mut options = PgOptions::default();
        options.schema = schema.clone();
        options.acquire_timeout = Duration::from_secs(2);
        options.durability = durability;
        let store = PgStore::connect(url, options)
            .await
            .map_err(|e| format!("round {round}: {e}"))?;
        let scope = store
            .scope(&ScopeKey::local(Subject::Agent))
            .await
            .map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let restarted = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let mut writers = Vec::new();
        for writer in 0..2u64 {
            let (scope, stop, restarted) = (scope.clone(), stop.clone(), restarted.clone());
            let key = format!("restart:r{round}w{writer}");
            writers.push(tokio::spawn(async move {
                write_until(&scope, &key, writer, &stop, &restarted).await
            }));
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1_200))).await;
        let (v, n) = (version.to_owned(), name.to_owned());
        tokio::task::spawn_blocking(move || cluster(&["stop", "-m", "immediate"], &v, &n))
            .await
            .map_err(|e| e.to_string())??;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (v, n) = (version.to_owned(), name.to_owned());
        tokio::task::spawn_blocking(move || cluster(&["start"], &v, &n))
            .await
            .map_err(|e| e.to_string())??;
        let started = Instant::now();
        if let Ok(mut at) = restarted.lock() {
            *at = Some(started);
        }
        // Let the writers come back and write a little more, then stop them.
        let deadline = started + Duration::from_secs(20);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let back = writers.iter().all(|w| w.is_finished()) || Instant::now() > deadline;
            if back || started.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut results = Vec::new();
        for writer in writers {
            results.push(writer.await.map_err(|e| e.to_string())??);
        }
        for (writer, written) in results.iter().enumerate() {
            acked_total += written.acked;
            suffix_lost += written.rewound;
            if let Some(first) = written.first_after {
                recovery_ms.push(first.duration_since(started).as_secs_f64() * 1000.0);
            }
            let key = format!("restart:r{round}w{writer}");
            let (l, s) = verify(url, &scope, &key, written, durability).await?;
            if l + s > 0 {
                family.fail(format!(
                    "round {round} ({durability:?}), writer {writer}: {l} lost, {s} not a suffix"
                ));
            }
            lost += l;
            not_suffix += s;
        }
    }
    crate::pg::drop_schema(url, &schema).await;
    family.set("restarts", plan.pg_restarts);
    family.set("acknowledged_writes", acked_total);
    family.set("recovery_ms", percentiles_ms(&mut recovery_ms));
    family.set("turn_end_unflushed_messages_lost", suffix_lost);
    family.zero("acknowledged_lost", lost);
    family.zero("loss_not_a_suffix", not_suffix);
    Ok(())
}

/// Appends numbered messages (a flush every fifth at `turn-end`) and a journal entry every
/// third, retrying through the outage, until told to stop.
async fn write_until(
    scope: &PgScope,
    key: &str,
    writer: u64,
    stop: &AtomicBool,
    restarted: &std::sync::Mutex<Option<Instant>>,
) -> Result<Written, String> {
    let key = SessionKey::new(key).map_err(|e| e.to_string())?;
    let mut written = Written::default();
    let mut revision = None;
    let mut unclear = false;
    let mut number = 0u64;
    let always = scope.store().durability() == Durability::Always;
    while !stop.load(Ordering::Relaxed) {
        if unclear {
            // After a failure (or a crash that lost unflushed appends), carry on from what
            // the database has, as a client sending its messages again would.
            match scope.load(&key).await {
                Ok(loaded) => {
                    let before = number;
                    number = loaded
                        .as_ref()
                        .and_then(|l| l.session.messages().last())
                        .and_then(|m| {
                            m.content()?
                                .as_str()?
                                .strip_prefix('m')?
                                .parse::<u64>()
                                .ok()
                        })
                        .map_or(0, |n| n + 1);
                    written.rewound += before.saturating_sub(number);
                    revision = loaded.map(|l| l.revision);
                    unclear = false;
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let message = [StoredMessage::user(format!("m{number}"))];
        let append = Append {
            messages: &message,
            meta: None,
        };
        match SessionStore::append(scope, &key, revision, append).await {
            Ok(new) => {
                revision = Some(new);
                written.acked += 1;
                if always {
                    written.must_have = Some(number);
                }
                if written.first_after.is_none()
                    && restarted.lock().map(|at| at.is_some()).unwrap_or(false)
                {
                    written.first_after = Some(Instant::now());
                }
                if number % 5 == 4 {
                    match scope.flush(&key, new).await {
                        Ok(after) => {
                            revision = Some(after);
                            written.must_have = Some(number);
                        }
                        Err(_) => unclear = true,
                    }
                }
                if number.is_multiple_of(3) {
                    let tag = format!("w{writer}-e{number}-{}", written.acked);
                    if let Ok(cursors) =
                        HistoryJournal::append(scope, &[NewEntry::text(&tag)]).await
                        && let Some(cursor) = cursors.first()
                    {
                        written.acked += 1;
                        written.entries.push((tag, *cursor));
                    }
                }
                number += 1;
            }
            Err(SessionError::Conflict { .. }) => unclear = true,
            Err(_) => {
                unclear = true;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(written)
}

/// (lost, not a suffix) for one writer's session and entries.
async fn verify(
    url: &str,
    scope: &PgScope,
    key: &str,
    written: &Written,
    durability: Durability,
) -> Result<(u64, u64), String> {
    let scope = crate::pg::reopen_fresh(url, scope).await?;
    let key = SessionKey::new(key).map_err(|e| e.to_string())?;
    let present: Vec<u64> = scope
        .load(&key)
        .await
        .map_err(|e| e.to_string())?
        .map(|l| {
            l.session
                .messages()
                .iter()
                .filter_map(|m| m.content()?.as_str()?.strip_prefix('m')?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // What is there is 0, 1, 2, ...: whatever a crash took was a suffix, and the writer
    // carried on from there; nothing in the middle is missing.
    let not_suffix = u64::from(present.iter().enumerate().any(|(i, n)| *n != i as u64));
    let _ = durability;
    let mut lost = written
        .must_have
        .map_or(0, |last| (last + 1).saturating_sub(present.len() as u64));
    // Journal entries always wait for the disk.
    let entries = scope.read_since(0, None).await.map_err(|e| e.to_string())?;
    for (tag, cursor) in &written.entries {
        if !entries
            .iter()
            .any(|e| e.cursor == *cursor && &e.content == tag)
        {
            lost += 1;
        }
    }
    Ok((lost, not_suffix))
}

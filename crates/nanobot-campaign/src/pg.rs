//! Family 7 (its first part), PostgreSQL connection kills: four workers run mixed turns on
//! one session of one scope (a user and an assistant message appended with compare-and-set,
//! a journal entry, and now and then an archive commit of the live messages) while a chaos
//! task terminates the workers' connections every 50–500 ms with `pg_terminate_backend`.
//! A call that fails with a retryable error may or may not have committed; the worker reads
//! back before it tries again (its messages and entries carry ids), so nothing is written
//! twice. Afterwards a fresh pool checks: every acknowledged turn there once, no partial
//! commit (an archive's entry without its pointer or the other way round), journal cursors
//! 1..N.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{
    ArchiveCommit, HistoryJournal, MemoryError, NewEntry, SessionArchive, archive_digest,
};
use nanobot_session_store::{Append, SessionError, SessionKey, SessionStore, StoredMessage};
use nanobot_store_postgres::{Durability, PgScope, PgStore};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use crate::Plan;
use crate::report::Family;
use crate::rng::Rng;

const KEY: &str = "chaos:shared";
const WORKERS: u64 = 4;

#[derive(Debug, Default)]
struct Counts {
    turns: AtomicU64,
    retries: AtomicU64,
    conflicts: AtomicU64,
    ambiguous_resolved: AtomicU64,
    archives: AtomicU64,
}

/// What a worker had acknowledged: its turns and their journal cursors.
type Acked = Vec<(u64, u64)>;

/// The test database's URL (`NANOBOT_TEST_PG_URL`). Without it the family says it skipped;
/// under `CI=true` that is a must-be-zero figure, as a missing service fails every test.
pub(crate) fn database_url(family: &mut Family) -> Option<String> {
    let url = std::env::var("NANOBOT_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        family.set("skipped", "NANOBOT_TEST_PG_URL is not set");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            family.zero("database_missing_under_ci", 1);
        }
    }
    url
}

/// Drops a schema the campaign made (its name is ours: letters, digits, underscores).
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    if let Ok(mut admin) = PgConnection::connect(url).await {
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut admin)
            .await;
        let _ = admin.close().await;
    }
}

/// `scope` through a new pool of its own, as another instance reads it: what a family checks
/// after the faults, never from a connection that lived through them.
pub(crate) async fn reopen_fresh(url: &str, scope: &PgScope) -> Result<PgScope, String> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let fresh =
        PgStore::with_pool_and_durability(pool, scope.store().schema().name(), Durability::Always)
            .await
            .map_err(|e| e.to_string())?;
    scope
        .reopen_through(&fresh)
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn run(plan: &Plan) -> Family {
    run_against_the_database(async |url: String, family: &mut Family| {
        chaos(plan, &url, family).await
    })
}

/// A PostgreSQL family: `body` on two threads against the test database, its error a
/// failed run; without the database, the family says it skipped.
pub(crate) fn run_against_the_database(
    body: impl AsyncFnOnce(String, &mut Family) -> Result<(), String>,
) -> Family {
    let mut family = Family::default();
    let Some(url) = database_url(&mut family) else {
        return family;
    };
    let result = crate::two_threads().and_then(|runtime| runtime.block_on(body(url, &mut family)));
    if let Err(problem) = result {
        family.zero("failed_runs", 1);
        family.fail(problem);
    }
    family
}

async fn chaos(plan: &Plan, url: &str, family: &mut Family) -> Result<(), String> {
    let application = format!("nanobot-campaign-{}", std::process::id());
    let schema = format!("campaign_{}_{}", std::process::id(), plan.seed % 100_000);
    let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| e.to_string())?;
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options.clone().application_name(&application))
        .await
        .map_err(|e| format!("could not connect to {url}: {e}"))?;
    let store = PgStore::with_pool_and_durability(pool, &schema, Durability::TurnEnd)
        .await
        .map_err(|e| e.to_string())?;
    let scope = store
        .scope(&ScopeKey::local(Subject::Agent))
        .await
        .map_err(|e| e.to_string())?;
    let result = work(plan, url, &application, &scope, family).await;
    // The schema goes whatever happened.
    drop_schema(url, &schema).await;
    result
}

async fn work(
    plan: &Plan,
    url: &str,
    application: &str,
    scope: &PgScope,
    family: &mut Family,
) -> Result<(), String> {
    let counts = Arc::new(Counts::default());
    let done = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let chaos = {
        let (done, killed, url, application) = (
            done.clone(),
            killed.clone(),
            url.to_owned(),
            application.to_owned(),
        );
        let mut rng = Rng::new(plan.seed ^ 0xc4a0);
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50 + rng.below(451))).await;
                let Ok(mut admin) = PgConnection::connect(&url).await else {
                    continue;
                };
                let result: Result<(i64,), _> = sqlx::query_as(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = $1",
                )
                .bind(&application)
                .fetch_one(&mut admin)
                .await;
                if let Ok((n,)) = result {
                    killed.fetch_add(n as u64, Ordering::Relaxed);
                }
                let _ = admin.close().await;
            }
        })
    };
    let turns_each = plan.pg_turns / WORKERS;
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (scope, counts) = (scope.clone(), counts.clone());
        let deadline = started + plan.pg_time;
        workers.push(tokio::spawn(async move {
            let mut acked = Acked::new();
            let mut turn = 0;
            while turn < turns_each || Instant::now() < deadline {
                let cursor = one_turn(&scope, worker, turn, &counts).await?;
                acked.push((turn, cursor));
                counts.turns.fetch_add(1, Ordering::Relaxed);
                if worker == 0 && turn % 10 == 9 {
                    archive(&scope, &counts).await?;
                }
                turn += 1;
            }
            Ok::<_, String>(acked)
        }));
    }
    let mut acked: BTreeMap<u64, Acked> = BTreeMap::new();
    let mut failures = 0u64;
    for (worker, handle) in workers.into_iter().enumerate() {
        match handle.await {
            Ok(Ok(turns)) => {
                acked.insert(worker as u64, turns);
            }
            Ok(Err(problem)) => {
                failures += 1;
                family.fail(format!("worker {worker}: {problem}"));
            }
            Err(e) => {
                failures += 1;
                family.fail(format!("worker {worker} panicked: {e}"));
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = chaos.await;
    let seconds = started.elapsed().as_secs_f64();

    let verdict = check(url, scope, &acked).await?;
    family.set("turns", counts.turns.load(Ordering::Relaxed));
    family.set("seconds", (seconds * 10.0).round() / 10.0);
    family.set("connections_killed", killed.load(Ordering::Relaxed));
    family.set("retries", counts.retries.load(Ordering::Relaxed));
    family.set(
        "conflicts_retried",
        counts.conflicts.load(Ordering::Relaxed),
    );
    family.set(
        "ambiguous_outcomes_resolved",
        counts.ambiguous_resolved.load(Ordering::Relaxed),
    );
    family.set("archives", counts.archives.load(Ordering::Relaxed));
    family.zero("acknowledged_lost", verdict.lost);
    family.zero("duplicated", verdict.duplicated);
    family.zero("partial_commits", verdict.partial);
    family.zero("cursor_gaps_or_duplicates", verdict.gaps);
    family.zero("failed_workers", failures);
    for problem in verdict.problems {
        family.fail(problem);
    }
    Ok(())
}

fn retryable_session(error: &SessionError) -> bool {
    error.is_retryable()
}

fn retryable_memory(error: &MemoryError) -> bool {
    error.is_retryable()
}

/// One turn: the two messages (compare-and-set, read back after an unclear failure), then
/// the journal entry (read back likewise). Returns the entry's cursor.
async fn one_turn(scope: &PgScope, worker: u64, turn: u64, counts: &Counts) -> Result<u64, String> {
    let key = SessionKey::new(KEY).map_err(|e| e.to_string())?;
    let user = format!("w{worker}-t{turn}-u");
    let messages = [
        StoredMessage::user(user.clone()),
        StoredMessage::assistant(format!("w{worker}-t{turn}-a")),
    ];
    // After a failure that may have committed, read the session before trying again; else
    // the revision alone is enough.
    let mut unclear = false;
    let mut attempts = 0;
    loop {
        attempts += 1;
        if attempts > 200 {
            return Err(format!("turn {turn}: 200 attempts without a commit"));
        }
        let revision =
            if unclear {
                match scope.load(&key).await {
                    Ok(Some(loaded))
                        if loaded.session.messages().iter().any(|m| {
                            m.content().and_then(|c| c.as_str()) == Some(user.as_str())
                        }) =>
                    {
                        // The earlier attempt committed although its answer was lost.
                        counts.ambiguous_resolved.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Ok(loaded) => {
                        unclear = false;
                        loaded.map(|l| l.revision)
                    }
                    Err(e) if retryable_session(&e) => {
                        counts.retries.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) => return Err(format!("load: {e}")),
                }
            } else {
                match scope.current_revision(&key).await {
                    Ok(revision) => revision,
                    Err(e) if retryable_session(&e) => {
                        counts.retries.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) => return Err(format!("revision: {e}")),
                }
            };
        let append = Append {
            messages: &messages,
            meta: None,
        };
        match SessionStore::append(scope, &key, revision, append).await {
            Ok(_) => break,
            Err(SessionError::Conflict { .. }) => {
                counts.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if retryable_session(&e) => {
                counts.retries.fetch_add(1, Ordering::Relaxed);
                unclear = true;
            }
            Err(e) => return Err(format!("append: {e}")),
        }
    }
    let tag = format!("j-w{worker}-t{turn}");
    let mut attempts = 0;
    loop {
        attempts += 1;
        if attempts > 200 {
            return Err(format!("turn {turn}: 200 journal attempts"));
        }
        match HistoryJournal::append(scope, &[NewEntry::text(&tag)]).await {
            Ok(cursors) => return cursors.first().copied().ok_or("no cursor".into()),
            Err(e) if retryable_memory(&e) => {
                counts.retries.fetch_add(1, Ordering::Relaxed);
                // Did it land? Look among the newest entries (four writers: it is near the end).
                if let Ok(last) = scope.read_last(64).await
                    && let Some(entry) = last.iter().find(|e| e.content == tag)
                {
                    counts.ambiguous_resolved.fetch_add(1, Ordering::Relaxed);
                    return Ok(entry.cursor);
                }
            }
            Err(e) => return Err(format!("journal append: {e}")),
        }
    }
}

/// Archives the session's live messages: one transaction for the entry and the pointer.
async fn archive(scope: &PgScope, counts: &Counts) -> Result<(), String> {
    let key = SessionKey::new(KEY).map_err(|e| e.to_string())?;
    for _ in 0..200 {
        let loaded = match scope.load(&key).await {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return Ok(()),
            Err(e) if retryable_session(&e) => {
                counts.retries.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => return Err(format!("load for the archive: {e}")),
        };
        let (from, to) = (
            loaded.session.last_consolidated(),
            loaded.session.messages().len(),
        );
        if to <= from {
            return Ok(());
        }
        let digest = archive_digest(&loaded.session.messages()[from..to]);
        let mut meta = loaded.session.meta().clone();
        meta.last_consolidated = to;
        let entries = [format!("archive {from}..{to}")];
        let commit = ArchiveCommit {
            session: &key,
            expected: loaded.revision,
            from: from as u64,
            to: to as u64,
            digest: &digest,
            entries: &entries,
            meta: &meta,
        };
        match scope.commit_archive(&commit).await {
            Ok(_) => {
                counts.archives.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Err(MemoryError::Conflict { .. }) => {
                counts.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if retryable_memory(&e) => {
                counts.retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => return Err(format!("archive: {e}")),
        }
    }
    Err("200 archive attempts without a commit".into())
}

#[derive(Debug, Default)]
struct Verdict {
    lost: u64,
    duplicated: u64,
    partial: u64,
    gaps: u64,
    problems: Vec<String>,
}

/// Reads everything back through a new pool (as another instance) and checks.
async fn check(
    url: &str,
    scope: &PgScope,
    acked: &BTreeMap<u64, Acked>,
) -> Result<Verdict, String> {
    let scope = reopen_fresh(url, scope).await?;
    let key = SessionKey::new(KEY).map_err(|e| e.to_string())?;
    let mut verdict = Verdict::default();
    let loaded = scope
        .load(&key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the session is gone")?;
    let texts: Vec<&str> = loaded
        .session
        .messages()
        .iter()
        .map(|m| m.content().and_then(|c| c.as_str()).unwrap_or(""))
        .collect();
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for pair in texts.chunks(2) {
        let ok = matches!(pair, [u, a] if u.strip_suffix("-u").is_some() && u.strip_suffix("-u") == a.strip_suffix("-a"));
        if !ok {
            verdict.partial += 1;
            verdict
                .problems
                .push(format!("a turn written in part: {pair:?}"));
        }
        *seen.entry(pair[0]).or_default() += 1;
    }
    verdict.duplicated += seen
        .values()
        .filter(|&&n| n > 1)
        .map(|n| n - 1)
        .sum::<u64>();
    let entries = scope.read_since(0, None).await.map_err(|e| e.to_string())?;
    for (worker, turns) in acked {
        for (turn, cursor) in turns {
            if !seen.contains_key(format!("w{worker}-t{turn}-u").as_str()) {
                verdict.lost += 1;
            }
            let tag = format!("j-w{worker}-t{turn}");
            if !entries
                .iter()
                .any(|e| e.cursor == *cursor && e.content == tag)
            {
                verdict.lost += 1;
            }
        }
    }
    let mut tags: BTreeMap<&str, u64> = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry.cursor != index as u64 + 1 {
            verdict.gaps += 1;
        }
        *tags.entry(entry.content.as_str()).or_default() += 1;
    }
    verdict.duplicated += tags
        .values()
        .filter(|&&n| n > 1)
        .map(|n| n - 1)
        .sum::<u64>();
    // Archives: slices contiguous from 0, the last one ending at the pointer.
    let mut end = 0u64;
    for entry in entries
        .iter()
        .filter(|e| e.session_key.as_deref() == Some(KEY))
    {
        match entry.message_range {
            Some((from, to)) if from == end => end = to,
            other => {
                verdict.partial += 1;
                verdict
                    .problems
                    .push(format!("archive {other:?} after {end}"));
            }
        }
    }
    if end != loaded.session.last_consolidated() as u64 {
        verdict.partial += 1;
        verdict.problems.push(format!(
            "the archives end at {end}, the pointer is at {}",
            loaded.session.last_consolidated()
        ));
    }
    Ok(verdict)
}

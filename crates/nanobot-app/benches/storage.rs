//! Issue 15, acceptance 10: the storage costs of PostgreSQL against the file backend,
//! measured in the same run on the same machine, each PostgreSQL figure also as a ratio to
//! the file backend's (files / postgres: above 1, PostgreSQL is faster).
//!
//! Both backends are opened as the app opens them (`FileBackend`, `PgBackend`) and driven
//! through the same ports: a message appended and saved (files write it without a sync and
//! sync at turn end; PostgreSQL commits every append with `synchronous_commit = on`, so the
//! files figure with a sync per append is printed too), the tail of a 10,000-message
//! session opened, a journal entry appended, a Dream commit (documents, cursor and version
//! under the lease) and a whole turn with an instant model.
//!
//! `cargo bench -p nanobot-app --bench storage` with `NANOBOT_TEST_PG_URL` set (as
//! `cargo xtask ci` sets it); without it the bench says so and stops. It works in a schema of its
//! own, dropped at the end.
#![allow(
    clippy::print_stdout,
    clippy::expect_used,
    clippy::unwrap_used,
    missing_docs
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse, TextSink};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{
    CURSOR_PATH, Document, Expected, FileChange, HistoryJournalExt, MemoryChange, MemoryFile,
    NewEntry, VersionRecord,
};
use nanobot_session_store::{SessionKey, StoredMessage};
use nanobot_store_postgres::testing::{TestSchema, url};
use nanobot_turn::{MemoryBackend, ScopeStores};
use serde_json::{Value, json};

const APPENDS: usize = 1_000;
const SYNCED_APPENDS: usize = 200;
const TAIL_MESSAGES: usize = 10_000;
const TAIL_LIVE: usize = 50;
const TAIL_OPENS: usize = 30;
const JOURNAL_APPENDS: usize = 500;
const DREAM_ROUNDS: usize = 50;
const TURNS: usize = 200;

/// A model that answers at once, so a turn's time is what the memory layer costs.
struct Instant0;

#[async_trait]
impl LlmClient for Instant0 {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Ok(LlmResponse::text("Noted, thank you."))
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(65_536)
    }
}

/// Median, 99th percentile and mean of `samples`, in seconds.
fn stats(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    json!({
        "p50": at(0.5),
        "p99": at(0.99),
        "mean": samples.iter().sum::<f64>() / samples.len() as f64,
        "n": samples.len(),
    })
}

/// A user message of about 200 characters.
fn message(i: usize) -> StoredMessage {
    StoredMessage::user(format!(
        "message {i}: {}",
        "the quick brown fox jumps over the lazy dog, ".repeat(4)
    ))
}

async fn appends(stores: &ScopeStores) -> (Value, Value) {
    let sessions = &stores.sessions;
    let key = SessionKey::new("bench:append").unwrap();
    let handle = sessions.get_or_create(&key).await.unwrap();
    for i in 0..20 {
        handle.add_message(message(i));
        sessions.save(&handle).await.unwrap();
    }
    let mut saved = Vec::with_capacity(APPENDS);
    for i in 0..APPENDS {
        handle.add_message(message(i));
        let started = Instant::now();
        sessions.save(&handle).await.unwrap();
        saved.push(started.elapsed().as_secs_f64());
    }
    let mut synced = Vec::with_capacity(SYNCED_APPENDS);
    for i in 0..SYNCED_APPENDS {
        handle.add_message(message(i));
        let started = Instant::now();
        sessions.end_turn(&handle).await.unwrap();
        synced.push(started.elapsed().as_secs_f64());
    }
    (stats(saved), stats(synced))
}

async fn open_tail(
    stores: &ScopeStores,
    database: Option<&nanobot_store_postgres::PgStore>,
) -> (Value, Value) {
    let sessions = &stores.sessions;
    let key = SessionKey::new("bench:tail").unwrap();
    let handle = sessions.get_or_create(&key).await.unwrap();
    for batch in 0..TAIL_MESSAGES / 500 {
        for i in 0..500 {
            handle.add_message(message(batch * 500 + i));
        }
        sessions.save(&handle).await.unwrap();
    }
    handle
        .update(|s| s.set_last_consolidated(TAIL_MESSAGES - TAIL_LIVE))
        .unwrap();
    sessions.end_turn(&handle).await.unwrap();
    if let Some(database) = database {
        // What the server's autovacuum does within a minute of a change this large (and
        // `nanobot import` at its end): without statistics, the planner may read the whole
        // session to find where its tail starts.
        database.analyze().await.unwrap();
    }
    let store = sessions.store();
    let mut tail = Vec::with_capacity(TAIL_OPENS);
    for _ in 0..TAIL_OPENS {
        let started = Instant::now();
        let view = store.open_for_replay(&key).await.unwrap().unwrap();
        tail.push(started.elapsed().as_secs_f64());
        std::hint::black_box(view);
    }
    let mut whole = Vec::with_capacity(TAIL_OPENS);
    for _ in 0..TAIL_OPENS {
        let started = Instant::now();
        let loaded = store.load(&key).await.unwrap().unwrap();
        whole.push(started.elapsed().as_secs_f64());
        assert_eq!(loaded.session.messages().len(), TAIL_MESSAGES);
    }
    (stats(tail), stats(whole))
}

async fn journal_appends(stores: &ScopeStores) -> Value {
    let entries = nanobot_bench_workload::history_entries(7, JOURNAL_APPENDS);
    let mut samples = Vec::with_capacity(JOURNAL_APPENDS);
    for entry in &entries {
        let started = Instant::now();
        stores
            .journal
            .append_one(NewEntry::text(entry))
            .await
            .unwrap();
        samples.push(started.elapsed().as_secs_f64());
    }
    stats(samples)
}

async fn dream_commits(stores: &ScopeStores) -> (Value, Value) {
    let mut commits = Vec::with_capacity(DREAM_ROUNDS);
    let mut rounds = Vec::with_capacity(DREAM_ROUNDS);
    let base = stores.journal.dream_cursor().await.unwrap();
    for round in 0..DREAM_ROUNDS {
        let started = Instant::now();
        let lease = stores
            .lease
            .try_acquire("bench", Duration::from_secs(60))
            .await
            .unwrap()
            .expect("nobody else holds the lease");
        let before = stores.documents.read(Document::Memory).await.unwrap();
        let text = format!(
            "{}- fact {round}: {}\n",
            before.as_ref().map_or("# Memory\n", |d| d.text.as_str()),
            "a durable fact worth keeping ".repeat(3)
        );
        let cursor = base + round as u64 + 1;
        let change = MemoryChange {
            fence: lease.fence,
            files: vec![FileChange {
                file: MemoryFile::Document(Document::Memory),
                expected: Expected::from_read(before.as_ref()),
                text: Some(text.clone()),
            }],
            cursor: Some(cursor),
            version: Some(VersionRecord {
                message: format!("dream: round {round}"),
                files: [
                    ("memory/MEMORY.md".to_owned(), text),
                    (CURSOR_PATH.to_owned(), cursor.to_string()),
                ]
                .into(),
            }),
            time: chrono::Utc::now(),
        };
        let committing = Instant::now();
        stores.commit.commit(&change).await.unwrap();
        commits.push(committing.elapsed().as_secs_f64());
        stores.lease.release(lease).await.unwrap();
        rounds.push(started.elapsed().as_secs_f64());
    }
    (stats(commits), stats(rounds))
}

async fn turns(config: nanobot_app::Config) -> Value {
    let bot = nanobot_app::Bot::open(
        config,
        Arc::new(Instant0),
        Arc::new(nanobot_llm_port::SystemClock),
    )
    .await
    .unwrap();
    let key = SessionKey::new("bench:turns").unwrap();
    let sink: TextSink = Arc::new(|_: &str| {});
    for i in 0..10 {
        bot.turn(&key, &format!("warm-up {i}"), &sink)
            .await
            .unwrap();
    }
    let mut samples = Vec::with_capacity(TURNS);
    for i in 0..TURNS {
        let text = format!(
            "turn {i}: {}",
            "tell me something about the weather. ".repeat(3)
        );
        let started = Instant::now();
        bot.turn(&key, &text, &sink).await.unwrap();
        samples.push(started.elapsed().as_secs_f64());
    }
    bot.finish().await.unwrap();
    stats(samples)
}

fn config(workspace: &Path, postgres: Option<(&str, &str)>) -> nanobot_app::Config {
    let workspace = workspace.display().to_string();
    let (url, schema) = postgres.map_or((None, None), |(u, s)| {
        (Some(u.to_owned()), Some(s.to_owned()))
    });
    let env = move |name: &str| match name {
        "NANOBOT_WORKSPACE" => Some(workspace.clone()),
        "NANOBOT_DREAM_ENABLED" => Some("false".to_owned()),
        "NANOBOT_STORAGE" => url.as_ref().map(|_| "postgres".to_owned()),
        "NANOBOT_DATABASE_URL" => url.clone(),
        "NANOBOT_DATABASE_SCHEMA" => schema.clone(),
        _ => None,
    };
    nanobot_app::Config::load(None, &env).unwrap()
}

async fn measure(
    backend: &dyn MemoryBackend,
    database: Option<&nanobot_store_postgres::PgStore>,
    turn_config: nanobot_app::Config,
) -> Value {
    let stores = backend
        .open(&ScopeKey::local(Subject::Agent))
        .await
        .unwrap();
    let (append, append_synced) = appends(&stores).await;
    let (tail, whole) = open_tail(&stores, database).await;
    let journal = journal_appends(&stores).await;
    let (commit, dream_round) = dream_commits(&stores).await;
    let turn = turns(turn_config).await;
    json!({
        "append_s": append,
        "append_synced_s": append_synced,
        "open_tail_10000_s": tail,
        "load_whole_10000_s": whole,
        "journal_append_s": journal,
        "dream_commit_s": commit,
        "dream_round_s": dream_round,
        "turn_s": turn,
    })
}

fn ms(v: &Value, figure: &str, stat: &str) -> f64 {
    v[figure][stat].as_f64().unwrap() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(url) = url() else {
        println!(
            "storage bench: NANOBOT_TEST_PG_URL is not set (`cargo xtask ci` sets it); skipped"
        );
        return;
    };
    let clock: Arc<dyn nanobot_llm_port::Clock> = Arc::new(nanobot_llm_port::SystemClock);
    let counter: Arc<dyn nanobot_llm_port::TokenCounter> = Arc::new(nanobot_llm_port::Cl100kBase);

    let files_dir = nanobot_bench_workload::testing::TempDir::new("bench-storage-files");
    let files_turn_dir = nanobot_bench_workload::testing::TempDir::new("bench-storage-files-turn");
    let files_backend = nanobot_app::bot::file_backend(
        &config(files_dir.path(), None),
        clock.clone(),
        counter.clone(),
    )
    .unwrap();
    let files = measure(&files_backend, None, config(files_turn_dir.path(), None)).await;

    let schema = TestSchema::new(&url);
    let turn_schema = TestSchema::new(&url);
    let pg_dir = nanobot_bench_workload::testing::TempDir::new("bench-storage-pg");
    let turn_store = turn_schema.store().await;
    let store = schema.store().await;
    let pg_backend = nanobot_memory::PgBackend::open(store, Some(pg_dir.path()), clock, counter)
        .await
        .unwrap();
    let database = pg_backend.store().clone();
    let postgres = measure(
        &pg_backend,
        Some(&database),
        config(
            pg_dir.path(),
            Some((url.as_str(), turn_store.schema().name())),
        ),
    )
    .await;
    drop(pg_backend);
    drop(database);
    drop(turn_store);

    let rows = [
        ("append a message (p50)", "append_s", "p50"),
        ("append a message (p99)", "append_s", "p99"),
        ("append + sync (end_turn, p50)", "append_synced_s", "p50"),
        ("append + sync (end_turn, p99)", "append_synced_s", "p99"),
        (
            "open the tail of 10,000 messages (p50)",
            "open_tail_10000_s",
            "p50",
        ),
        (
            "load all 10,000 messages (p50)",
            "load_whole_10000_s",
            "p50",
        ),
        ("journal append (p50)", "journal_append_s", "p50"),
        ("journal append (p99)", "journal_append_s", "p99"),
        ("Dream commit (p50)", "dream_commit_s", "p50"),
        (
            "Dream round: lease, read, commit, release (p50)",
            "dream_round_s",
            "p50",
        ),
        ("whole turn, instant model (p50)", "turn_s", "p50"),
        ("whole turn, instant model (p99)", "turn_s", "p99"),
    ];
    println!(
        "\n{:<50} {:>10} {:>10} {:>8}",
        "figure", "files", "postgres", "ratio"
    );
    let mut table = Vec::new();
    for (label, figure, stat) in rows {
        let (f, p) = (ms(&files, figure, stat), ms(&postgres, figure, stat));
        println!("{label:<50} {:>8.3}ms {:>8.3}ms {:>7.2}x", f, p, f / p);
        table.push(
            json!({"figure": label, "files_ms": f, "postgres_ms": p, "files_over_postgres": f / p}),
        );
    }
    println!("\nratio = files / postgres (above 1: PostgreSQL is faster)");
    println!(
        "{}",
        json!({"workload": "storage: files and postgres", "rows": table, "files": files, "postgres": postgres})
    );
}

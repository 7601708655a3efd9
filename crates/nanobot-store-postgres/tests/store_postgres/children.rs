//! The child processes of the race tests: this test binary run again with
//! `NANOBOT_PG_CHILD` naming a role; each role prints what it did, one `> ` line per fact,
//! for the parent to check.

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{
    Document, Expected, FileChange, HistoryJournalExt, MemoryChange, MemoryCommit, MemoryDocuments,
    MemoryFile, MemoryLease, NewEntry,
};
use nanobot_session_store::{Append, SessionKey, SessionStore, StoredMessage};
use nanobot_store_postgres::{PgOptions, PgStore};

const ROLE: &str = "NANOBOT_PG_CHILD";
const SCHEMA: &str = "NANOBOT_PG_CHILD_SCHEMA";
const WORKER: &str = "NANOBOT_PG_CHILD_WORKER";
const COUNT: &str = "NANOBOT_PG_CHILD_COUNT";

/// Runs this binary's child test in role `role` on `schema`.
pub(crate) fn spawn(role: &str, schema: &str, worker: usize, count: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "children::child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(SCHEMA, schema)
        .env(WORKER, worker.to_string())
        .env(COUNT, count.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The facts a child printed (its `> ` lines), after it exited successfully.
pub(crate) fn facts(child: Child) -> Vec<String> {
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "a child failed: {text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("> ").map(str::to_owned))
        .collect()
}

fn say(fact: &str) {
    let mut out = std::io::stdout();
    // On a line of its own: the test harness prints "test … " without a newline first.
    let _ = writeln!(out, "\n> {fact}");
    let _ = out.flush();
}

async fn open(schema: &str) -> PgStore {
    let url = nanobot_store_postgres::testing::url().unwrap();
    PgStore::connect(&url, {
        let mut value = PgOptions::default();
        value.schema = schema.to_owned();
        value.max_connections = 2;
        value
    })
    .await
    .unwrap()
}

#[tokio::test]
#[ignore = "run by the race tests as a child process"]
async fn child() {
    let (Ok(role), Ok(schema)) = (std::env::var(ROLE), std::env::var(SCHEMA)) else {
        return;
    };
    let worker: usize = std::env::var(WORKER).unwrap().parse().unwrap();
    let count: usize = std::env::var(COUNT).unwrap().parse().unwrap();
    match role.as_str() {
        "migrate" => {
            open(&schema).await;
            say("migrated");
        }
        "append" => append(&schema, worker, count).await,
        "journal" => journal(&schema, worker, count).await,
        "stalled" => stalled(&schema, count).await,
        "hold-turn" => hold_turn(&schema, count).await,
        other => panic!("no child role {other}"),
    }
}

/// Appends `count` messages to one session, each retried on a conflict until it lands;
/// prints each acknowledged message.
async fn append(schema: &str, worker: usize, count: usize) {
    let store = open(schema).await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let key = SessionKey::new("race:appends").unwrap();
    for i in 0..count {
        let id = format!("w{worker}-{i}");
        let message = StoredMessage::user(id.clone());
        loop {
            let expected = scope.current_revision(&key).await.unwrap();
            let written = scope
                .append(
                    &key,
                    expected,
                    Append {
                        messages: std::slice::from_ref(&message),
                        meta: None,
                    },
                )
                .await;
            match written {
                Ok(_) => break,
                Err(e) if e.is_conflict() => {}
                Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => panic!("append {id}: {e}"),
            }
        }
        say(&id);
    }
}

/// Appends `count` journal entries one at a time; prints each cursor.
async fn journal(schema: &str, worker: usize, count: usize) {
    let store = open(schema).await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    for i in 0..count {
        let cursor = scope
            .append_one(NewEntry::text(&format!("w{worker}-{i}")))
            .await
            .unwrap();
        say(&cursor.to_string());
    }
}

/// `count` times: takes the Dream lease for a short while, says so, waits for the parent
/// (which stops this process past the lease and lets another instance take it), then tries
/// to commit under the old fence; prints whether the commit was refused.
async fn stalled(schema: &str, count: usize) {
    let store = open(schema).await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    for round in 0..count {
        let lease = loop {
            if let Some(lease) = scope
                .try_acquire("stalled child", Duration::from_millis(200))
                .await
                .unwrap()
            {
                break lease;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        say(&format!("holding {round}"));
        let _go = lines.next();
        let before = scope.read(Document::User).await.unwrap();
        let outcome = MemoryCommit::commit(
            &scope,
            &MemoryChange {
                fence: lease.fence,
                files: vec![FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::from_read(before.as_ref()),
                    text: Some(format!(
                        "# User\n- written by a stalled holder, round {round}\n"
                    )),
                }],
                cursor: None,
                version: None,
                time: chrono::Utc::now(),
            },
        )
        .await;
        say(&match outcome {
            Err(nanobot_memory_store::MemoryError::LeaseLost { .. }) => format!("refused {round}"),
            Err(other) => format!("failed {round}: {other}"),
            Ok(_) => format!("committed {round}"),
        });
        drop(lease);
    }
}

/// Takes the turn lock of session `race:turn` with a time-to-live of `ttl_secs`, says so,
/// and keeps it (renewed in the background) until the parent kills this process.
async fn hold_turn(schema: &str, ttl_secs: usize) {
    let url = nanobot_store_postgres::testing::url().unwrap();
    let store = PgStore::connect(&url, {
        let mut value = PgOptions::default();
        value.schema = schema.to_owned();
        value.max_connections = 2;
        value.turn_ttl = Duration::from_secs(ttl_secs as u64);
        value
    })
    .await
    .unwrap();
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    let lock = scope
        .try_lock_turn(&SessionKey::new("race:turn").unwrap())
        .await
        .unwrap()
        .expect("the session is free");
    say("held");
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    drop(lock);
}

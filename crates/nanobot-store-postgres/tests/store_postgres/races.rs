//! Many instances on one database (issue 15, acceptance 3 to 7 and 9): racing appends,
//! racing journal writers with a polling reader, migrations started together, leases raced
//! and stalled, a commit whose connection dies at every statement, and two instances
//! archiving one session at once.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nanobot_llm_port::{Capabilities, LlmClient, LlmError, LlmRequest, LlmResponse};
use nanobot_memory_core::{Archived, ConsolidationConfig, Consolidator, PlainPrompt};
use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{
    CURSOR_PATH, Document, Expected, FileChange, HistoryJournal, HistoryJournalExt, MemoryChange,
    MemoryCommit, MemoryDocuments, MemoryDocumentsExt, MemoryError, MemoryFile, MemoryLease,
    MemoryVersions, NewEntry, VersionRecord,
};
use nanobot_session_store::{SessionKey, SessionManager, SessionStore, StoredMessage};
use nanobot_store_postgres::testing::{TestSchema, second_instance, url};
use nanobot_store_postgres::{MIGRATIONS, PgScope};

use crate::children::{facts, spawn};
use crate::support::{available, store};

fn agent() -> ScopeKey {
    ScopeKey::local(Subject::Agent)
}

/// Released migrations never change: each is pinned here by its SHA-256. Adding a
/// migration adds a line; editing a released one fails this test.
#[test]
fn released_migrations_are_pinned_by_checksum() {
    let pinned: &[(i64, &str)] = &[
        (
            1,
            "51f7185b0cf1cbb6e06299e8fd7d41fde5615cf92150eca5a0ec9291070ea4dd",
        ),
        (
            2,
            "02d4ecb2d6fce7bf8c29a4f75e46667c7384f346d540ce80074412a034c33320",
        ),
        (
            3,
            "a56b67dde76734ae2568b7de794418a4d3e26b163209addfcf090f2e5cf7318f",
        ),
        (
            4,
            "34266ecd0efbfdcc931aa7f023d79dcf3649e892fa29af92b4eeb82159b0e7fa",
        ),
    ];
    let actual: Vec<(i64, String)> = MIGRATIONS
        .iter()
        .map(|m| (m.version, m.checksum()))
        .collect();
    assert_eq!(
        actual.len(),
        pinned.len(),
        "a new migration: pin its checksum here ({actual:?})"
    );
    for ((version, checksum), (pinned_version, pinned_checksum)) in actual.iter().zip(pinned) {
        assert_eq!(version, pinned_version);
        assert_eq!(
            checksum, pinned_checksum,
            "released migration {version} changed; add a new migration instead"
        );
    }
}

/// Acceptance 9: five processes starting together on an empty schema, twenty times: every
/// one migrates or finds the schema migrated, none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_started_together_never_fail() {
    if !available() {
        return;
    }
    let url = url().unwrap();
    for _ in 0..20 {
        let schema = TestSchema::new(&url);
        let children: Vec<_> = (0..5)
            .map(|worker| spawn("migrate", schema.name(), worker, 0))
            .collect();
        for child in children {
            assert_eq!(facts(child), ["migrated"]);
        }
        // Opening it once more (and dropping the schema with the store).
        let store = schema.store().await;
        assert_eq!(
            nanobot_store_postgres::migrate(&store.pool(), store.schema())
                .await
                .map_err(|e| e.to_string()),
            Ok(())
        );
    }
}

/// Acceptance 3: 8 processes append 500 messages each to one session, retrying on a
/// conflict: nothing acknowledged is missing, nothing is doubled, the sequence has no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_appends_lose_and_double_nothing() {
    if !available() {
        return;
    }
    let store = store().await;
    let children: Vec<_> = (0..8)
        .map(|worker| spawn("append", store.schema().name(), worker, 500))
        .collect();
    let acknowledged: Vec<String> = children.into_iter().flat_map(facts).collect();
    assert_eq!(acknowledged.len(), 4_000);
    let scope = store.scope(&agent()).await.unwrap();
    let loaded = scope
        .load(&SessionKey::new("race:appends").unwrap())
        .await
        .unwrap()
        .unwrap();
    let stored: Vec<String> = loaded
        .session
        .messages()
        .iter()
        .map(|m| m.content().and_then(|c| c.as_str()).unwrap().to_owned())
        .collect();
    assert_eq!(stored.len(), 4_000, "one row per acknowledged append");
    let unique: BTreeSet<&String> = stored.iter().collect();
    assert_eq!(unique.len(), 4_000, "no message doubled");
    for id in &acknowledged {
        assert!(unique.contains(id), "{id} was acknowledged and is missing");
    }
    // Each writer's messages are in its own order.
    for worker in 0..8 {
        let prefix = format!("w{worker}-");
        let mine: Vec<usize> = stored
            .iter()
            .filter_map(|s| s.strip_prefix(&prefix))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(mine, (0..500).collect::<Vec<_>>());
    }
}

/// Acceptance 4: 8 processes append 1,000 journal entries each to one scope while a reader
/// polls `cursor > x`: the cursors are exactly 1..8000, and the reader saw every entry
/// exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_journal_writers_and_a_polling_reader() {
    if !available() {
        return;
    }
    let store = store().await;
    let scope = store.scope(&agent()).await.unwrap();
    let children: Vec<_> = (0..8)
        .map(|worker| spawn("journal", store.schema().name(), worker, 1_000))
        .collect();
    let writers = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .flat_map(facts)
            .collect::<Vec<String>>()
    });
    let mut seen = Vec::new();
    let mut last = 0;
    loop {
        let done = writers.is_finished();
        let new = scope.read_since(last, Some(500)).await.unwrap();
        for entry in &new {
            assert!(entry.cursor > last);
            last = entry.cursor;
            seen.push(entry.cursor);
        }
        if done && new.is_empty() {
            break;
        }
        if new.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let mut acknowledged: Vec<u64> = writers
        .await
        .unwrap()
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    acknowledged.sort_unstable();
    assert_eq!(acknowledged, (1..=8_000).collect::<Vec<u64>>());
    assert_eq!(
        seen,
        (1..=8_000).collect::<Vec<u64>>(),
        "the reader skipped or repeated entries"
    );
    assert_eq!(scope.latest_cursor().await.unwrap(), 8_000);
}

/// Acceptance 6: four instances race for Dream's lease for 100 rounds; exactly one commits
/// in each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_racing_for_dream_commit_once_per_round() {
    if !available() {
        return;
    }
    let first = store().await;
    let mut instances: Vec<PgScope> = vec![first.scope(&agent()).await.unwrap()];
    for _ in 1..4 {
        instances.push(second_instance(&first).await.scope(&agent()).await.unwrap());
    }
    let journal = instances[0].clone();
    for round in 0..100u64 {
        journal
            .append_one(NewEntry::text(&format!("- fact {round}")))
            .await
            .unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(4));
        let tasks: Vec<_> = instances
            .iter()
            .cloned()
            .map(|scope| {
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    let Some(lease) = scope
                        .try_acquire("racer", Duration::from_secs(30))
                        .await
                        .unwrap()
                    else {
                        return false;
                    };
                    let cursor = scope.dream_cursor().await.unwrap();
                    if cursor > round {
                        // An earlier round's winner already took this round's entry.
                        scope.release(lease).await.unwrap();
                        return false;
                    }
                    let before = scope.read(Document::Memory).await.unwrap();
                    let text = format!(
                        "{}- fact {round}\n",
                        before.as_ref().map_or("# Memory\n", |d| d.text.as_str())
                    );
                    MemoryCommit::commit(
                        &scope,
                        &MemoryChange {
                            fence: lease.fence,
                            files: vec![FileChange {
                                file: MemoryFile::Document(Document::Memory),
                                expected: Expected::from_read(before.as_ref()),
                                text: Some(text.clone()),
                            }],
                            cursor: Some(round + 1),
                            version: Some(VersionRecord {
                                message: format!("dream: round {round}"),
                                files: [
                                    ("memory/MEMORY.md".to_owned(), text),
                                    (CURSOR_PATH.to_owned(), (round + 1).to_string()),
                                ]
                                .into(),
                            }),
                            time: chrono::Utc::now(),
                        },
                    )
                    .await
                    .unwrap();
                    scope.release(lease).await.unwrap();
                    true
                })
            })
            .collect();
        let mut commits = 0;
        for task in tasks {
            commits += usize::from(task.await.unwrap());
        }
        assert_eq!(commits, 1, "round {round}");
    }
    let versions = journal.log(200).await.unwrap();
    assert_eq!(versions.len(), 100);
    let memory = journal.read_text(Document::Memory).await.unwrap().unwrap();
    assert_eq!(
        memory.lines().filter(|l| l.starts_with("- fact")).count(),
        100
    );
    assert_eq!(journal.dream_cursor().await.unwrap(), 100);
}

/// Acceptance 6: a holder stopped (SIGSTOP) past its lease while another instance takes it
/// has its commit refused when it resumes, 100 times out of 100, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_lease_never_commits() {
    if !available() {
        return;
    }
    let store = store().await;
    let scope = store.scope(&agent()).await.unwrap();
    let mut child = spawn("stalled", store.schema().name(), 0, 100);
    let pid = child.id().to_string();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut next_fact = || loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
        if let Some(fact) = line.trim_end().strip_prefix("> ") {
            return fact.to_owned();
        }
    };
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    for round in 0..100 {
        assert_eq!(next_fact(), format!("holding {round}"));
        signal("-STOP");
        // Past the child's 200 ms lease, another instance takes it.
        let taken = loop {
            if let Some(lease) = scope
                .try_acquire("the next run", Duration::from_secs(30))
                .await
                .unwrap()
            {
                break lease;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        signal("-CONT");
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();
        assert_eq!(next_fact(), format!("refused {round}"));
        scope.release(taken).await.unwrap();
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(
        scope.read(Document::User).await.unwrap(),
        None,
        "a stalled holder wrote"
    );
}

/// A session's turn lock is renewed while its holder lives, however long the turn, and
/// lapses after its time-to-live when the holder is killed mid-turn: the session is busy
/// for the other instances until then, and free for them after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_lock_is_renewed_while_held_and_lapses_when_its_holder_is_killed() {
    if !available() {
        return;
    }
    const TTL_SECS: usize = 2;
    let store = store().await;
    let scope = store.scope(&agent()).await.unwrap();
    let key = SessionKey::new("race:turn").unwrap();
    let mut child = spawn("hold-turn", store.schema().name(), 0, TTL_SECS);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child ended early"
        );
        if line.trim_end() == "> held" {
            break;
        }
    }
    // Three times its time-to-live later, the holder's renewals keep it.
    tokio::time::sleep(Duration::from_secs(3 * TTL_SECS as u64)).await;
    assert!(
        scope.try_lock_turn(&key).await.unwrap().is_none(),
        "a held turn lock lapsed while its holder lived"
    );
    child.kill().unwrap();
    let _ = child.wait();
    let killed = std::time::Instant::now();
    let lock = loop {
        if let Some(lock) = scope.try_lock_turn(&key).await.unwrap() {
            break lock;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the killed holder's turn lock never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(lock);
}

/// Acceptance 7: the connection of a Dream commit killed before each of its statements in
/// turn: after each, either every change is there (files, version, cursor) or none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dream_commit_is_all_or_nothing_when_its_connection_dies() {
    if !available() {
        return;
    }
    let url = url().unwrap();
    let mut step = 0;
    loop {
        let kill_at = step;
        let hook: nanobot_store_postgres::FaultHook =
            Arc::new(move |operation, at| operation == "memory commit" && at == kill_at);
        let store = TestSchema::new(&url).store_with_faults(Some(hook)).await;
        let scope = store.scope(&agent()).await.unwrap();
        for i in 0..3 {
            scope
                .append_one(NewEntry::text(&format!("- fact {i}")))
                .await
                .unwrap();
        }
        scope
            .write(Document::Memory, "# Memory\n", Expected::Absent)
            .await
            .unwrap();
        let before = scope.read(Document::Memory).await.unwrap();
        let lease = scope
            .try_acquire("dream", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let change = MemoryChange {
            fence: lease.fence,
            files: vec![
                FileChange {
                    file: MemoryFile::Document(Document::Memory),
                    expected: Expected::from_read(before.as_ref()),
                    text: Some("# Memory\n- fact 0\n".into()),
                },
                FileChange {
                    file: MemoryFile::Document(Document::User),
                    expected: Expected::Absent,
                    text: Some("# User\n- fact 1\n".into()),
                },
                FileChange {
                    file: MemoryFile::Skill("facts".into()),
                    expected: Expected::Absent,
                    text: Some("- fact 2\n".into()),
                },
            ],
            cursor: Some(3),
            version: Some(VersionRecord {
                message: "dream: all or nothing".into(),
                files: [(
                    "memory/MEMORY.md".to_owned(),
                    "# Memory\n- fact 0\n".to_owned(),
                )]
                .into(),
            }),
            time: chrono::Utc::now(),
        };
        let result = MemoryCommit::commit(&scope, &change).await;
        let memory = scope.read_text(Document::Memory).await.unwrap();
        let user = scope.read_text(Document::User).await.unwrap();
        let skill = scope.read_skill("facts").await.unwrap();
        let cursor = scope.dream_cursor().await.unwrap();
        let versions = scope.log(10).await.unwrap().len();
        let all = memory.as_deref() == Some("# Memory\n- fact 0\n")
            && user.is_some()
            && skill.is_some()
            && cursor == 3
            && versions == 1;
        let none = memory.as_deref() == Some("# Memory\n")
            && user.is_none()
            && skill.is_none()
            && cursor == 0
            && versions == 0;
        assert!(
            all || none,
            "killed before statement {kill_at}: a partial commit ({memory:?}, {user:?}, {skill:?}, cursor {cursor}, {versions} versions)"
        );
        match result {
            Ok(_) => {
                assert!(
                    all,
                    "statement {kill_at}: reported committed but not all there"
                );
                // The hook never fired: every statement was passed.
                assert!(step >= 5, "the commit has more statements than {step}");
                break;
            }
            Err(error) => {
                assert!(
                    none,
                    "statement {kill_at}: reported failed but applied ({error})"
                );
                assert!(matches!(error, MemoryError::Backend { .. }), "{error}");
            }
        }
        drop(lease);
        step += 1;
    }
}

/// A model that answers only when both instances asked: each read the session before either
/// commits.
struct Together(Arc<tokio::sync::Barrier>);

#[async_trait]
impl LlmClient for Together {
    async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.0.wait().await;
        Ok(LlmResponse::text("- [durable] six questions were asked"))
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(100_000)
    }
}

fn consolidator(
    scope: &PgScope,
    barrier: &Arc<tokio::sync::Barrier>,
) -> (Arc<SessionManager>, Consolidator) {
    let scope = Arc::new(scope.clone());
    let sessions = Arc::new(SessionManager::new(
        scope.clone(),
        Arc::new(nanobot_llm_port::SystemClock),
        Arc::new(nanobot_llm_port::Cl100kBase),
    ));
    let consolidator = Consolidator::new(
        {
            let mut value = ConsolidationConfig::new("archive-model", 100_000, 0);
            value.safety_margin = 0;
            value.ratio = 0.5;
            value
        },
        Arc::new(Together(barrier.clone())),
        scope.clone(),
        scope,
        sessions.clone(),
        Arc::new(PlainPrompt::default()),
        Arc::new(nanobot_llm_port::Cl100kBase),
    )
    .unwrap();
    (sessions, consolidator)
}

/// Acceptance 5: two instances archive the same session at once, 100 times: one journal
/// entry per slice, never two, and the pointer never passes the message count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_archiving_one_session_journal_each_slice_once() {
    if !available() {
        return;
    }
    let first = store().await;
    let a_scope = first.scope(&agent()).await.unwrap();
    let b_scope = second_instance(&first).await.scope(&agent()).await.unwrap();
    let mut superseded = 0;
    for round in 0..100 {
        let key = SessionKey::new(format!("race:archive-{round}")).unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let (sessions, a) = consolidator(&a_scope, &barrier);
        let (_, b) = consolidator(&b_scope, &barrier);
        let handle = sessions.get_or_create(&key).await.unwrap();
        for i in 0..6 {
            handle.add_message(if i % 2 == 0 {
                StoredMessage::user(format!("question {i}"))
            } else {
                StoredMessage::assistant(format!("answer {i}"))
            });
        }
        sessions.end_turn(&handle).await.unwrap();
        let (x, y) = tokio::join!(a.compact_idle(&key), b.compact_idle(&key));
        let outcomes = [x.unwrap().unwrap().outcome, y.unwrap().unwrap().outcome];
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| matches!(o, Archived::Summary { .. }))
                .count(),
            1,
            "round {round}: {outcomes:?}"
        );
        superseded += outcomes
            .iter()
            .filter(|o| **o == Archived::Superseded)
            .count();
        let entries: Vec<_> = a_scope
            .read_since(0, None)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.session_key.as_deref() == Some(key.as_str()))
            .collect();
        assert_eq!(entries.len(), 1, "round {round}: one entry per slice");
        let loaded = a_scope.load(&key).await.unwrap().unwrap();
        assert_eq!(loaded.session.last_consolidated(), 6);
        assert!(loaded.session.last_consolidated() <= loaded.session.messages().len());
    }
    assert_eq!(superseded, 100);
}

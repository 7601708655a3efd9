//! Family 5, model-based tests: random sequences of operations run on a file store and on
//! the in-memory store (the model) side by side, comparing what each reads back after every
//! step; proptest shrinks a failing sequence to a short one, which the report keeps.
//!
//! Sessions: append, metadata, pointer, clear, retention, flush, compaction (metadata
//! records pile up until line 1 is rewritten), reopen and crash-reopen (a torn line left at
//! the end, which the reopened store must cut and report). Journal: append, Dream's cursor,
//! compaction, reopen and crash-reopen.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nanobot_llm_port::{BoxFuture, Clock};
use nanobot_memory_store::{
    FileJournal, HistoryJournal, InMemoryJournal, JournalDurability, JournalEntry, JournalRepair,
    NewEntry,
};
use nanobot_session_store::{
    BrokenRule, Durability, FileSessionStore, FileStoreOptions, InMemorySessionStore, Repair,
    Revision, Session, SessionKey, SessionStore, SessionStoreExt, StoredMessage,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::json;

use crate::Plan;
use crate::kill::now;
use crate::report::Family;

/// A clock that never moves, so both sides stamp the same times.
#[derive(Debug)]
struct Still;

impl Clock for Still {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(1_780_000_000, 0).unwrap_or_default()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

#[derive(Debug, Clone)]
enum SessionOp {
    Append { count: u8, text: String },
    Meta { key: u8, value: String },
    Pointer { percent: u8 },
    Clear,
    Retain { max: u8, extend_to_user: bool },
    Flush,
    Reopen,
    CrashReopen { cut: String },
}

fn session_op() -> impl Strategy<Value = SessionOp> {
    prop_oneof![
        6 => (1u8..4, "[a-z0-9 \\u{0}é中\"\\\\]{0,40}")
            .prop_map(|(count, text)| SessionOp::Append { count, text }),
        // Values up to a few hundred bytes: enough to outgrow line 1's padding.
        3 => (0u8..3, "[a-z0-9]{0,300}").prop_map(|(key, value)| SessionOp::Meta { key, value }),
        2 => (0u8..=100).prop_map(|percent| SessionOp::Pointer { percent }),
        1 => Just(SessionOp::Clear),
        1 => (0u8..12, any::<bool>())
            .prop_map(|(max, extend_to_user)| SessionOp::Retain { max, extend_to_user }),
        1 => Just(SessionOp::Flush),
        1 => Just(SessionOp::Reopen),
        1 => "[a-z0-9 ]{0,30}".prop_map(|cut| SessionOp::CrashReopen { cut }),
    ]
}

#[derive(Debug, Clone)]
enum JournalOp {
    Append { count: u8, text: String },
    Dream { percent: u8 },
    Compact { max: u8 },
    Reopen,
    CrashReopen { cut: String },
}

fn journal_op() -> impl Strategy<Value = JournalOp> {
    prop_oneof![
        6 => (1u8..4, "[a-z0-9 \\u{0}é中\"\\\\]{0,40}")
            .prop_map(|(count, text)| JournalOp::Append { count, text }),
        2 => (0u8..=100).prop_map(|percent| JournalOp::Dream { percent }),
        2 => (0u8..12).prop_map(|max| JournalOp::Compact { max }),
        1 => Just(JournalOp::Reopen),
        1 => "[a-z0-9 ]{0,30}".prop_map(|cut| JournalOp::CrashReopen { cut }),
    ]
}

pub(crate) fn run(plan: &Plan) -> Family {
    run_with(plan, None)
}

/// The family over a file store with one format rule switched off (tests show it notices).
pub(crate) fn run_with(plan: &Plan, broken: Option<BrokenRule>) -> Family {
    let mut family = Family::default();
    let scratch = plan.scratch.join("model");
    let counter = Arc::new(AtomicU64::new(0));
    let steps = Arc::new(AtomicU64::new(0));
    let mut failures = 0u64;
    let config = || Config {
        cases: plan.sequences,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let seed_bytes = |salt: u64| {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&(plan.seed ^ salt).to_le_bytes());
        bytes
    };

    let mut runner = TestRunner::new_with_rng(
        config(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(0x5e55)),
    );
    let strategy = proptest::collection::vec(session_op(), 1..=plan.max_steps);
    let result = runner.run(&strategy, |ops| {
        let dir = scratch.join(format!("s{}", counter.fetch_add(1, Ordering::Relaxed)));
        let outcome = sessions_agree(&dir, &ops, &steps, broken);
        let _ = std::fs::remove_dir_all(&dir);
        outcome.map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        failures += 1;
        family.fail(format!("sessions: {failure}"));
    }
    family.set("session_sequences", plan.sequences);
    family.set("session_steps", steps.swap(0, Ordering::Relaxed));

    let mut runner = TestRunner::new_with_rng(
        config(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(0x10e1)),
    );
    let strategy = proptest::collection::vec(journal_op(), 1..=plan.max_steps);
    let result = runner.run(&strategy, |ops| {
        let dir = scratch.join(format!("j{}", counter.fetch_add(1, Ordering::Relaxed)));
        let outcome = journals_agree(&dir, &ops, &steps);
        let _ = std::fs::remove_dir_all(&dir);
        outcome.map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        failures += 1;
        family.fail(format!("journal: {failure}"));
    }
    family.set("journal_sequences", plan.sequences);
    family.set("journal_steps", steps.load(Ordering::Relaxed));
    family.set("seed", plan.seed);
    family.zero("failures", failures);
    let _ = std::fs::remove_dir_all(&scratch);
    family
}

fn block_on<T>(work: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    crate::current_thread()?.block_on(work)
}

fn file_sessions(dir: &Path, broken: Option<BrokenRule>) -> Result<FileSessionStore, String> {
    let options = FileStoreOptions::default()
        .durability(Durability::None)
        .clock(Arc::new(Still));
    match broken {
        Some(rule) => FileSessionStore::broken(dir, options, rule),
        None => FileSessionStore::open(dir, options),
    }
    .map_err(|e| e.to_string())
}

/// One side of the comparison: a store, the session as its writer holds it, the revision.
struct Side<S> {
    store: S,
    session: Session,
    revision: Option<Revision>,
}

impl<S: SessionStore> Side<S> {
    fn apply(&mut self, op: &SessionOp) -> Result<(), String> {
        let session = &mut self.session;
        match op {
            SessionOp::Append { count, text } => {
                for i in 0..*count {
                    let n = session.messages().len();
                    let message = if n % 3 == 2 {
                        StoredMessage::assistant(format!("{text} {i}"))
                    } else {
                        StoredMessage::user(format!("{n} {text}"))
                    };
                    session.add_message(message, now());
                }
            }
            SessionOp::Meta { key, value } => {
                session
                    .metadata_mut()
                    .insert(format!("k{key}"), json!(value));
            }
            SessionOp::Pointer { percent } => {
                let (len, pointer) = (session.messages().len(), session.last_consolidated());
                let to = pointer + (len - pointer) * usize::from(*percent) / 100;
                session
                    .set_last_consolidated(to)
                    .map_err(|e| e.to_string())?;
            }
            SessionOp::Clear => session.clear(now()),
            SessionOp::Retain {
                max,
                extend_to_user,
            } => {
                session.retain_recent(usize::from(*max), *extend_to_user, now());
            }
            SessionOp::Flush | SessionOp::Reopen | SessionOp::CrashReopen { .. } => {}
        }
        Ok(())
    }

    async fn save(&mut self, op: &SessionOp) -> Result<(), String> {
        self.revision = self
            .store
            .save_changes(&mut self.session, self.revision)
            .await
            .map_err(|e| format!("save after {op:?}: {e}"))?;
        if matches!(op, SessionOp::Flush)
            && let Some(revision) = self.revision
        {
            self.revision = Some(
                self.store
                    .flush(self.session.key(), revision)
                    .await
                    .map_err(|e| format!("flush: {e}"))?,
            );
        }
        Ok(())
    }
}

/// What a reader compares: messages, metadata and the pointer.
fn observed(session: &Session) -> serde_json::Value {
    json!({
        "messages": session.messages().iter().map(|m| m.fields().clone()).collect::<Vec<_>>(),
        "metadata": session.meta().metadata,
        "pointer": session.last_consolidated(),
    })
}

fn sessions_agree(
    dir: &Path,
    ops: &[SessionOp],
    steps: &AtomicU64,
    broken: Option<BrokenRule>,
) -> Result<(), String> {
    block_on(async {
        let key = SessionKey::new("cli:model").map_err(|e| e.to_string())?;
        let mut file = Side {
            store: file_sessions(dir, broken)?,
            session: Session::new(key.clone(), now()),
            revision: None,
        };
        let mut model = Side {
            store: InMemorySessionStore::new(),
            session: Session::new(key.clone(), now()),
            revision: None,
        };
        for (step, op) in ops.iter().enumerate() {
            steps.fetch_add(1, Ordering::Relaxed);
            let file_result = file.apply(op);
            let model_result = model.apply(op);
            if file_result != model_result {
                return Err(format!(
                    "step {step} {op:?}: {file_result:?} vs {model_result:?}"
                ));
            }
            if file_result.is_err() {
                continue;
            }
            file.save(op).await?;
            model.save(op).await?;
            let mut expect_torn = false;
            if let SessionOp::CrashReopen { cut } = op
                && file.revision.is_some()
            {
                tear(&file.store.path_of(&key), cut)?;
                expect_torn = true;
            }
            if matches!(op, SessionOp::Reopen | SessionOp::CrashReopen { .. }) {
                file.store = file_sessions(dir, broken)?;
            }
            let from_file = file.store.load(&key).await.map_err(|e| e.to_string())?;
            let from_model = model.store.load(&key).await.map_err(|e| e.to_string())?;
            match (from_file, from_model) {
                (None, None) => {}
                (Some(f), Some(m)) => {
                    let torn = f
                        .repairs
                        .iter()
                        .filter(|r| matches!(r, Repair::TornTail { .. }))
                        .count();
                    if f.repairs.len() != torn || torn != usize::from(expect_torn) {
                        return Err(format!("step {step} {op:?}: repairs {:?}", f.repairs));
                    }
                    if observed(&f.session) != observed(&m.session) {
                        return Err(format!(
                            "step {step} {op:?}: the file store reads {} but the model {}",
                            observed(&f.session),
                            observed(&m.session)
                        ));
                    }
                    if observed(&f.session) != observed(&file.session) {
                        return Err(format!(
                            "step {step} {op:?}: the file store reads back {} but {} was written",
                            observed(&f.session),
                            observed(&file.session)
                        ));
                    }
                    if expect_torn {
                        // The writer carries on from what the reopened store read.
                        file.session = f.session;
                        file.revision = Some(f.revision);
                    }
                }
                (f, m) => {
                    return Err(format!(
                        "step {step} {op:?}: file has a session: {}, model: {}",
                        f.is_some(),
                        m.is_some()
                    ));
                }
            }
        }
        Ok(())
    })
}

/// Leaves the start of a line that a crash cut short at the end of `path`.
fn tear(path: &PathBuf, cut: &str) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    write!(file, "{{\"role\": \"user\", \"content\": \"{cut}").map_err(|e| e.to_string())
}

fn file_journal(dir: &Path) -> Result<FileJournal, String> {
    FileJournal::open_with(dir, Arc::new(Still), JournalDurability::None).map_err(|e| e.to_string())
}

fn journal_state(entries: &[JournalEntry]) -> Vec<(u64, &str)> {
    entries
        .iter()
        .map(|e| (e.cursor, e.content.as_str()))
        .collect()
}

fn journals_agree(dir: &Path, ops: &[JournalOp], steps: &AtomicU64) -> Result<(), String> {
    block_on(async {
        let mut file = file_journal(dir)?;
        let model = InMemoryJournal::new(Arc::new(Still));
        for (step, op) in ops.iter().enumerate() {
            steps.fetch_add(1, Ordering::Relaxed);
            let mut expect_torn = false;
            match op {
                JournalOp::Append { count, text } => {
                    let texts: Vec<String> = (0..*count).map(|i| format!("{text} {i}")).collect();
                    let entries: Vec<NewEntry<'_>> =
                        texts.iter().map(|t| NewEntry::text(t)).collect();
                    let a = file.append(&entries).await.map_err(|e| e.to_string())?;
                    let b = model.append(&entries).await.map_err(|e| e.to_string())?;
                    if a != b {
                        return Err(format!("step {step}: cursors {a:?} vs {b:?}"));
                    }
                }
                JournalOp::Dream { percent } => {
                    let latest = model.latest_cursor().await.map_err(|e| e.to_string())?;
                    let to = latest * u64::from(*percent) / 100;
                    file.set_dream_cursor(to).await.map_err(|e| e.to_string())?;
                    model
                        .set_dream_cursor(to)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                JournalOp::Compact { max } => {
                    let a = file
                        .compact(usize::from(*max))
                        .await
                        .map_err(|e| e.to_string())?;
                    let b = model
                        .compact(usize::from(*max))
                        .await
                        .map_err(|e| e.to_string())?;
                    if (a.before, a.dropped, a.kept) != (b.before, b.dropped, b.kept) {
                        return Err(format!("step {step} {op:?}: {a:?} vs {b:?}"));
                    }
                }
                JournalOp::Reopen => file = file_journal(dir)?,
                JournalOp::CrashReopen { cut } => {
                    let path = dir.join("memory").join("history.jsonl");
                    if path.exists() {
                        tear(&path, cut)?;
                        expect_torn = true;
                    }
                    file = file_journal(dir)?;
                }
            }
            let repairs = file.repairs();
            let torn = repairs
                .iter()
                .filter(|r| matches!(r, JournalRepair::TornTail { .. }))
                .count();
            if matches!(op, JournalOp::Reopen | JournalOp::CrashReopen { .. })
                && (repairs.len() != torn || torn != usize::from(expect_torn))
            {
                return Err(format!("step {step} {op:?}: repairs {repairs:?}"));
            }
            let a = file.read_since(0, None).await.map_err(|e| e.to_string())?;
            let b = model.read_since(0, None).await.map_err(|e| e.to_string())?;
            if journal_state(&a) != journal_state(&b) {
                return Err(format!(
                    "step {step} {op:?}: file {:?} vs model {:?}",
                    journal_state(&a),
                    journal_state(&b)
                ));
            }
            let cursors = (
                file.latest_cursor().await.map_err(|e| e.to_string())?,
                file.dream_cursor().await.map_err(|e| e.to_string())?,
            );
            let expected = (
                model.latest_cursor().await.map_err(|e| e.to_string())?,
                model.dream_cursor().await.map_err(|e| e.to_string())?,
            );
            if cursors != expected {
                return Err(format!(
                    "step {step} {op:?}: (latest, dream) {cursors:?} vs {expected:?}"
                ));
            }
        }
        Ok(())
    })
}

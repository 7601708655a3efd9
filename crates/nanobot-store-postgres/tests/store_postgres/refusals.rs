//! The database refusing a transaction for a rival (a serialization failure, 40001; a
//! deadlock, 40P01) or a duplicate (a unique violation, 23505), forced at the start of a
//! port call's transaction (`TestSchema::store_with_forced_errors`): a refusal for a rival
//! is retried, at most `TRANSACTION_ATTEMPTS` runs in all, then returned as retryable; a
//! unique violation is a `Conflict` at once; nothing is half written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_memory_store::{
    Document, Expected, FileChange, MemoryChange, MemoryCommit, MemoryDocuments,
    MemoryDocumentsExt, MemoryError, MemoryFile, MemoryLease,
};
use nanobot_session_store::{Session, SessionKey, SessionStore, SessionStoreExt, StoredMessage};
use nanobot_store_postgres::TRANSACTION_ATTEMPTS;
use nanobot_store_postgres::testing::{TestSchema, url};

use crate::support::available;

/// A store whose transaction `operation` meets `code` on each attempt up to `failing`;
/// and the attempts counted.
async fn forced(
    operation: &'static str,
    code: &'static str,
    failing: u32,
) -> (nanobot_store_postgres::PgScope, Arc<AtomicU32>) {
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let hook: nanobot_store_postgres::ForcedErrors = Arc::new(move |op, attempt| {
        if op != operation {
            return None;
        }
        seen.fetch_max(attempt, Ordering::SeqCst);
        (attempt <= failing).then_some(code)
    });
    let store = TestSchema::new(&url().unwrap())
        .store_with_forced_errors(hook)
        .await;
    let scope = store.scope(&ScopeKey::local(Subject::Agent)).await.unwrap();
    (scope, attempts)
}

/// A Dream change under a lease, and the lease, which the caller holds until the commit
/// returns (dropped, it is released in the background, and a commit after that is refused
/// for a lost lease: seen in CI under load).
async fn dream_change(
    scope: &nanobot_store_postgres::PgScope,
) -> (MemoryChange, nanobot_memory_store::Lease) {
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
        files: vec![FileChange {
            file: MemoryFile::Document(Document::Memory),
            expected: Expected::from_read(before.as_ref()),
            text: Some("# Memory\n- a fact\n".into()),
        }],
        cursor: None,
        version: None,
        time: chrono::Utc::now(),
    };
    (change, lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_for_a_rival_is_retried_and_then_goes_through() {
    if !available() {
        return;
    }
    for code in ["40001", "40P01"] {
        let (scope, attempts) = forced("memory commit", code, TRANSACTION_ATTEMPTS - 1).await;
        let (change, _lease) = dream_change(&scope).await;
        MemoryCommit::commit(&scope, &change).await.unwrap();
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            TRANSACTION_ATTEMPTS,
            "{code}"
        );
        let text = scope.read_text(Document::Memory).await.unwrap();
        assert_eq!(text.as_deref(), Some("# Memory\n- a fact\n"), "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_every_time_stops_after_the_bound_and_writes_nothing() {
    if !available() {
        return;
    }
    for code in ["40001", "40P01"] {
        let (scope, attempts) = forced("memory commit", code, u32::MAX).await;
        let (change, _lease) = dream_change(&scope).await;
        let error = MemoryCommit::commit(&scope, &change).await.unwrap_err();
        assert!(error.is_retryable(), "{code}: {error}");
        assert!(error.to_string().contains(code), "{code}: {error}");
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            TRANSACTION_ATTEMPTS,
            "{code}"
        );
        let text = scope.read_text(Document::Memory).await.unwrap();
        assert_eq!(text.as_deref(), Some("# Memory\n"), "{code}: half written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_violation_is_a_conflict_and_is_not_retried() {
    if !available() {
        return;
    }
    let (scope, attempts) = forced("memory commit", "23505", u32::MAX).await;
    let (change, _lease) = dream_change(&scope).await;
    let error = MemoryCommit::commit(&scope, &change).await.unwrap_err();
    assert!(matches!(error, MemoryError::Conflict { .. }), "{error}");
    assert_eq!(attempts.load(Ordering::SeqCst), 1);

    // The session port: a rewrite refused for a rival is retried too.
    let (scope, attempts) = forced("rewrite", "40001", TRANSACTION_ATTEMPTS - 1).await;
    let key = SessionKey::new("cli:refused").unwrap();
    let mut session = Session::new(key.clone(), chrono::Utc::now().naive_utc());
    session.add_message(StoredMessage::user("one"), chrono::Utc::now().naive_utc());
    let revision = scope.save_changes(&mut session, None).await.unwrap();
    scope.rewrite(&session, revision).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), TRANSACTION_ATTEMPTS);
    let loaded = scope.load(&key).await.unwrap().unwrap();
    assert_eq!(loaded.session.messages().len(), 1);
}

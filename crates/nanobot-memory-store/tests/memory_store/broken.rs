//! Issue 14, acceptance 8: each new contract has conformance cases that an in-memory
//! backend with that one rule switched off fails. The suites pass on the real backends (see
//! `conformance.rs`); here every case is run against its broken twin and must fail.

use std::future::Future;
use std::sync::Arc;

use nanobot_memory_store::conformance::{self, ScopeParts};
use nanobot_memory_store::{BrokenRule, InMemoryDocuments, InMemoryJournal, InMemoryLease};

/// Runs `case` on its own task; whether it failed (panicked).
async fn fails(case: impl Future<Output = ()> + Send + 'static) -> bool {
    tokio::spawn(case).await.is_err_and(|e| e.is_panic())
}

fn clock() -> Arc<dyn nanobot_llm_port::Clock> {
    Arc::new(nanobot_llm_port::SystemClock)
}

#[tokio::test]
async fn journal_visibility_notices_cursors_taken_before_commit() {
    let broken = InMemoryJournal::broken(BrokenRule::JournalCommitOrder, clock());
    assert!(fails(conformance::commit_order_visibility(broken)).await);
    // The same case passes on the journal that keeps the rule.
    assert!(
        !fails(conformance::commit_order_visibility(
            InMemoryJournal::default()
        ))
        .await
    );
}

#[tokio::test]
async fn documents_compare_and_set_notices_blind_writes() {
    let broken = InMemoryDocuments::broken(BrokenRule::DocumentCompareAndSet);
    assert!(fails(conformance::documents_compare_and_set(broken)).await);
    assert!(
        !fails(conformance::documents_compare_and_set(
            InMemoryDocuments::new()
        ))
        .await
    );
}

#[tokio::test]
async fn documents_stamp_notices_a_stamp_that_never_changes() {
    let broken = InMemoryDocuments::broken(BrokenRule::DocumentsStamp);
    assert!(fails(conformance::documents_stamp(broken)).await);
    assert!(!fails(conformance::documents_stamp(InMemoryDocuments::new())).await);
}

#[tokio::test]
async fn lease_fencing_notices_an_unchecked_fence() {
    let broken = InMemoryLease::broken(BrokenRule::LeaseFence, clock());
    assert!(fails(conformance::lease_fencing(broken)).await);
    let parts = ScopeParts::in_memory(Some(BrokenRule::LeaseFence));
    assert!(fails(conformance::commit_fenced(parts)).await);
    assert!(!fails(conformance::commit_fenced(ScopeParts::in_memory(None))).await);
}

#[tokio::test]
async fn archive_commit_notices_a_slice_archived_twice() {
    let parts = ScopeParts::in_memory(Some(BrokenRule::ArchiveOnce));
    assert!(fails(conformance::archive_once_per_slice(parts)).await);
    assert!(
        !fails(conformance::archive_once_per_slice(ScopeParts::in_memory(
            None
        )))
        .await
    );
}

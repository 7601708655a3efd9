//! The conformance suites every memory backend runs (feature `conformance`): the journal,
//! the documents, the versions, the lease, and the two operations that span several ports
//! (the archive commit and the memory commit).
//!
//! Each case is a public async function; the macros make one `#[tokio::test]` per case:
//!
//! ```ignore
//! nanobot_memory_store::journal_conformance!(memory, || async { InMemoryJournal::default() },
//!     skips = [shared_cursors]);
//! nanobot_memory_store::scope_conformance!(memory_scope, || async { ScopeParts::in_memory() });
//! ```
//!
//! As in the session suite ([`nanobot_session_store::conformance`]), a case that needs a second
//! instance over the same storage gets one from `reopen = ..`, a case a backend cannot run
//! is skipped loudly and only when its test declares it in `skips = [..]`.
//!
//! The suites need no runtime of their own: concurrent work is interleaved by
//! [`interleave`], which polls its futures in turn, so they run under any executor.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

mod documents;
mod journal;
mod lease;
mod scope;
mod versions;

pub use documents::*;
pub use journal::*;
pub use lease::*;
pub use scope::*;
pub use versions::*;

/// The methods of the memory ports and their extension traits, by trait: what a suite
/// that must exercise every port method (the isolation suite of `nanobot-turn`)
/// enumerates. Kept beside the traits; this crate's tests hold it to their sources with
/// [`nanobot_session_store::conformance::declared_methods`].
pub const PORT_METHODS: &[(&str, &[&str])] = &[
    (
        "HistoryJournal",
        &[
            "append",
            "read_since",
            "read_last",
            "latest_cursor",
            "dream_cursor",
            "set_dream_cursor",
            "compact",
            "remove_entries",
            "capabilities",
            "append_one",
            "unprocessed",
            "unprocessed_newest",
        ],
    ),
    (
        "MemoryDocuments",
        &[
            "read",
            "write",
            "skills",
            "read_skill",
            "write_skill",
            "delete_skill",
            "read_aux",
            "write_aux",
            "stamp",
            "capabilities",
            "read_text",
            "skill_names",
            "initialize",
        ],
    ),
    (
        "MemoryVersions",
        &["commit", "log", "resolve", "files_at", "rewrite"],
    ),
    (
        "MemoryLease",
        &[
            "try_acquire",
            "renew",
            "check",
            "release",
            "holder",
            "capabilities",
        ],
    ),
    ("SessionArchive", &["commit_archive", "find_archive"]),
    ("MemoryCommit", &["commit", "recover"]),
];

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use nanobot_session_store::conformance::{
    IntoOutcome, NO_SECOND_INSTANCE, Outcome, same_kind, settle,
};
use nanobot_session_store::{Session, SessionKey, SessionStore, SessionStoreExt, StoredMessage};
pub use nanobot_session_store::{conformance_available, conformance_pair_cases};

use crate::{
    ArchiveCommit, Document, DocumentsStamp, Expected, FileChange, HistoryJournal,
    HistoryJournalExt, MemoryChange, MemoryCommit, MemoryDocuments, MemoryDocumentsExt,
    MemoryError, MemoryFile, MemoryLease, MemoryVersions, NewEntry, SessionArchive, Snapshot,
    Version, VersionRecord, archive_digest,
};

/// Runs `futures` to completion together, polling each in turn on the caller's task (a
/// future that yields lets the others run).
pub async fn interleave(futures: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>>) {
    struct All<'a>(Vec<Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>>);
    impl Future for All<'_> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
            let mut pending = false;
            for slot in self.0.iter_mut() {
                if let Some(future) = slot {
                    if future.as_mut().poll(cx).is_ready() {
                        *slot = None;
                    } else {
                        pending = true;
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        }
    }
    All(futures.into_iter().map(Some).collect()).await;
}

/// Lets the other futures of an [`interleave`] run.
pub async fn yield_now() {
    crate::memory::YieldNow(false).await;
}

// ---------------------------------------------------------------------------------------
// The journal.

/// Makes the `#[tokio::test]` of [`crate::JournalImport`]'s case for a journal that can
/// import; see [`journal_conformance`](crate::journal_conformance) for the arguments.
#[macro_export]
macro_rules! journal_import_conformance {
    ($name:ident, $make:expr $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, import_keeps_cursors_and_resumes);
        }
    };
}

/// Makes one `#[tokio::test]` per journal case. `$make` evaluates to an async closure
/// returning a fresh, empty journal; see the module for `reopen` and `skips`.
#[macro_export]
macro_rules! journal_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, empty, cursors_and_reads, fields_round_trip,
                dream_cursor, compaction, removal, concurrent_appends, commit_order_visibility);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_cursors);
        }
    };
}

/// One test per case of a suite (used by the suites' macros).
#[macro_export]
#[doc(hidden)]
macro_rules! memory_conformance_cases {
    ($make:expr, $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            $crate::conformance::settle(
                stringify!($case),
                $crate::conformance::$case(make().await).await,
                SKIPS,
            );
        }
    )*};
}

// ---------------------------------------------------------------------------------------
// The documents.

/// Makes one `#[tokio::test]` per document case.
#[macro_export]
macro_rules! documents_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, documents_read_write, skills,
                documents_compare_and_set, documents_stamp);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_documents);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The versions.

/// Makes one `#[tokio::test]` per versions case.
#[macro_export]
macro_rules! versions_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, versions_contract, versions_history, versions_rewrite);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_versions);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The lease.

/// Makes one `#[tokio::test]` per lease case.
#[macro_export]
macro_rules! lease_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, lease_exclusive, lease_fencing,
                lease_expiry, lease_renewal);
            $crate::conformance::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_lease);
        }
    };
}

// ---------------------------------------------------------------------------------------
// The operations that span several ports.

/// Makes one `#[tokio::test]` per archive-commit and memory-commit case. `$make` evaluates
/// to an async closure returning fresh, empty [`ScopeParts`].
#[macro_export]
macro_rules! scope_conformance {
    ($name:ident, $make:expr $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance::conformance_available!($($available)?);
            $crate::memory_conformance_cases!($make, archive_commit, archive_stale_refused,
                archive_once_per_slice, archive_found_by_index, commit_applies_everything,
                commit_fenced, commit_compare_and_set, commit_cursor_bounded);
        }
    };
}

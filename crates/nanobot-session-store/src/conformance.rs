//! The conformance suite every [`SessionStore`] backend runs (feature `conformance`).
//!
//! Each case is a public async function taking a fresh, empty store. The
//! [`session_store_conformance!`](crate::session_store_conformance) macro makes one test per
//! case:
//!
//! ```ignore
//! nanobot_session_store::session_store_conformance!(memory, || async {
//!     nanobot_session_store::InMemorySessionStore::new()
//! }, skips = [shared_turn_locks, shared_stale_writers]);
//! ```
//!
//! Cases that need two store instances over the same storage (two processes, two machines)
//! take both; the macro makes the second with `reopen = |first| async { .. }`. A case a
//! backend cannot run is skipped loudly, and only when the backend's test declares it in
//! `skips = [..]`: an undeclared skip fails, and so does a declared skip that ran, so the
//! list in each backend's test is exactly what that backend cannot do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

mod cases;
mod shared;

pub use cases::*;
pub use shared::*;

/// The methods of the [`SessionStore`] port and its extension trait:
/// what a suite that must exercise every port method (the isolation suite of
/// `nanobot-turn`) enumerates. Kept beside the trait; this crate's tests hold it to the
/// trait's source with [`declared_methods`], so a new method cannot be missed.
pub const PORT_METHODS: &[(&str, &[&str])] = &[(
    "SessionStore",
    &[
        "load",
        "append",
        "rewrite",
        "list",
        "delete",
        "open_for_replay",
        "flush",
        "try_lock_turn",
        "current_revision",
        "capabilities",
        "save_changes",
    ],
)];

/// Every method declared in `pub trait <port>` and `pub trait <port>Ext` of a port's
/// `source`, in order: how a port crate's test checks its `PORT_METHODS` list.
pub fn declared_methods(source: &str, port: &str) -> Vec<String> {
    let mut methods = Vec::new();
    let mut inside = false;
    for line in source.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name = identifier(rest);
            inside = name == port || name == format!("{port}Ext");
        } else if inside && line.starts_with('}') {
            inside = false;
        } else if inside && let Some(at) = line.find("fn ") {
            let name = identifier(&line[at + 3..]);
            if !name.is_empty() && !methods.contains(&name) {
                methods.push(name);
            }
        }
    }
    methods
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

use chrono::NaiveDate;
use serde_json::json;

use crate::{
    Append, Session, SessionError, SessionKey, SessionMeta, SessionStore, SessionStoreExt,
    StoredMessage,
};

/// What a conformance case did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran its checks.
    Ran,
    /// It could not run on this backend, for this reason.
    Skipped(String),
}

/// A case's return value as an [`Outcome`] (a case that always runs returns `()`).
pub trait IntoOutcome {
    /// The outcome.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Ran
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

/// Settles a case's outcome against the skips a backend's test declares: a skip it did not
/// declare fails, and so does a declared skip that ran. Skips are printed.
pub fn settle(case: &str, outcome: impl IntoOutcome, declared: &[&str]) {
    match (outcome.into_outcome(), declared.contains(&case)) {
        (Outcome::Ran, false) => {}
        (Outcome::Skipped(reason), true) => {
            eprintln!("conformance case {case} skipped: {reason}");
        }
        (Outcome::Skipped(reason), false) => {
            panic!("conformance case {case} skipped but not declared in skips: {reason}")
        }
        (Outcome::Ran, true) => {
            panic!("conformance case {case} is declared in skips but ran; take it off the list")
        }
    }
}

/// `second`, typed as another instance of `first`'s kind (for the suites' macros).
pub fn same_kind<T>(_first: &T, second: Option<T>) -> Option<T> {
    second
}

/// Why a two-instance case is skipped when the backend's test gives no second instance.
pub const NO_SECOND_INSTANCE: &str = "the backend's test gives no second instance over the same storage (its state lives in one process)";

/// Makes one `#[tokio::test]` per conformance case for a backend. `$make` is an expression
/// that evaluates to an async closure (or fn) returning a fresh, empty store; `reopen`, an
/// async closure taking `&store` and returning a second instance over the same storage;
/// `skips`, the cases this backend cannot run; `available`, a `fn() -> bool` that says
/// whether the backend's service is there (it records the skip itself when not).
#[macro_export]
macro_rules! session_store_conformance {
    ($name:ident, $make:expr $(, reopen = $reopen:expr)? $(, skips = [$($skip:ident),* $(,)?])? $(, available = $available:expr)? $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            const SKIPS: &[&str] = &[$($(stringify!($skip)),*)?];
            $crate::conformance_available!($($available)?);
            $crate::session_store_conformance!(@case $make, unknown_key, round_trip, ordering,
                conflict_detection, pointer_bounds, rewrite_and_metadata, concurrent_appends,
                list_and_delete, flush_keeps_everything, replay_view, turn_locks,
                current_revision);
            $crate::conformance_pair_cases!($crate::conformance, $make, [$($reopen)?],
                shared_turn_locks, shared_stale_writers);
        }
    };
    (@case $make:expr, $($case:ident),*) => {$(
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

/// The suites' `available = ..` check (used by their macros): a `fn() -> bool` each test
/// calls first, returning `false` (after recording its skip) when the backend's service is
/// missing; without one, always available.
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_available {
    () => {
        const AVAILABLE: fn() -> bool = || true;
    };
    ($available:expr) => {
        const AVAILABLE: fn() -> bool = $available;
    };
}

/// The two-instance cases of a suite (used by the suites' macros): each gets a fresh store
/// and, when the backend's test gives `reopen`, a second instance over the same storage;
/// without one the case is skipped (and must be declared).
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_pair_cases {
    ($module:path, $make:expr, $reopen:tt, $($case:ident),*) => {$(
        $crate::conformance_pair_cases!(@one $module, $make, $reopen, $case);
    )*};
    (@one $module:path, $make:expr, [$($reopen:expr)?], $case:ident) => {
        #[tokio::test]
        async fn $case() {
            use $module as cases;
            if !AVAILABLE() {
                return;
            }
            let make = $make;
            let first = make().await;
            let second = $crate::conformance::same_kind(&first, {
                #[allow(unused_mut)]
                let mut second = None;
                $( second = Some(($reopen)(&first).await); )?
                second
            });
            let outcome = match second {
                Some(second) => $crate::conformance::IntoOutcome::into_outcome(
                    cases::$case(first, second).await,
                ),
                None => $crate::conformance::Outcome::Skipped(
                    $crate::conformance::NO_SECOND_INSTANCE.to_owned(),
                ),
            };
            $crate::conformance::settle(stringify!($case), outcome, SKIPS);
        }
    };
}

//! What a turn reports to an operator's monitoring, through the `metrics` facade (free
//! without a recorder; `nanobot serve` installs a Prometheus one).

use std::time::Duration;

use nanobot_memory_store::MemoryError;
use nanobot_session_store::SessionError;

use crate::error::TurnError;

/// Metric: turns, by `outcome` (`ok`, `error`).
pub const TURNS: &str = "nanobot_turns_total";
/// Metric: each turn's latency in seconds, model included, by `outcome`.
pub const TURN_SECONDS: &str = "nanobot_turn_duration_seconds";
/// Metric: storage failures a turn met, by `kind` (`io`, `conflict`, `busy`, `damaged`,
/// `backend`).
pub const STORAGE_ERRORS: &str = "nanobot_storage_errors_total";
/// Metric: scopes whose memory is open in this process (a gauge).
pub const OPEN_SCOPES: &str = "nanobot_open_scopes";

/// Counts a finished turn and, when storage failed it, the failure's kind.
pub(crate) fn count_turn<T>(elapsed: Duration, result: &Result<T, TurnError>) {
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!(TURNS, "outcome" => outcome).increment(1);
    metrics::histogram!(TURN_SECONDS, "outcome" => outcome).record(elapsed.as_secs_f64());
    if let Some(kind) = result.as_ref().err().and_then(storage_kind) {
        metrics::counter!(STORAGE_ERRORS, "kind" => kind).increment(1);
    }
}

/// Records how many scopes are open.
pub(crate) fn open_scopes(count: usize) {
    metrics::gauge!(OPEN_SCOPES).set(count as f64);
}

/// The kind of storage failure behind `error`, if storage failed.
fn storage_kind(error: &TurnError) -> Option<&'static str> {
    match error {
        TurnError::Sessions(e) => session_kind(e),
        TurnError::Memory(e) => memory_kind(e),
        TurnError::Consolidation(nanobot_memory_core::ConsolidationError::Memory(e)) => {
            memory_kind(e)
        }
        TurnError::Consolidation(nanobot_memory_core::ConsolidationError::Session(e)) => {
            session_kind(e)
        }
        TurnError::Turn { cause, .. } => storage_kind(cause),
        _ => None,
    }
}

fn session_kind(error: &SessionError) -> Option<&'static str> {
    Some(match error {
        SessionError::Io { .. } => "io",
        SessionError::Conflict { .. } => "conflict",
        SessionError::Busy { .. } => "busy",
        SessionError::KeyMismatch { .. } | SessionError::InvalidStorage { .. } => "damaged",
        SessionError::Backend { .. } => "backend",
        _ => return None,
    })
}

fn memory_kind(error: &MemoryError) -> Option<&'static str> {
    Some(match error {
        MemoryError::Io { .. } => "io",
        MemoryError::Conflict { .. } | MemoryError::LeaseLost { .. } => "conflict",
        MemoryError::InvalidFile { .. } => "damaged",
        MemoryError::Session(e) => return session_kind(e),
        MemoryError::Backend { .. } => "backend",
        _ => return None,
    })
}

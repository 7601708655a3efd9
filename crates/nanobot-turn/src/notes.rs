//! Notes a turn leaves in a session's metadata (the last background failure, the last raw
//! archive), so `/status` and a listing can report them from any process. nanobot-ai keeps
//! unknown metadata as it is.

use nanobot_llm_port::Clock;
use nanobot_session_store::{Session, SessionKey, SessionManager};

/// The session metadata field that holds the last failure of background work on the
/// session (`{"at", "what", "error"}`), so `/status` and `nanobot sessions show` can report
/// it from any process. nanobot-ai keeps unknown metadata as it is.
pub const BACKGROUND_FAILURE_KEY: &str = "_nanobot_rs_background_failure";

/// Logs a failure of background work (`what`: consolidation, idle compaction) on `key` and
/// records it in the session's metadata. A failure to record it is logged too; neither
/// can fail the caller.
pub async fn record_background_failure(
    sessions: &SessionManager,
    clock: &dyn Clock,
    key: &SessionKey,
    what: &str,
    error: &str,
) {
    tracing::warn!(session = %key.log_id(), what, error, "background work failed");
    let at = clock.now().format("%Y-%m-%d %H:%M:%S UTC").to_string();
    record_note(
        sessions,
        key,
        BACKGROUND_FAILURE_KEY,
        serde_json::json!({"at": at, "what": what, "error": error}),
    )
    .await;
}

/// Stores `value` under `field` of the session's metadata and saves it; a failure is
/// logged, never returned (these notes must not fail the work they describe).
async fn record_note(
    sessions: &SessionManager,
    key: &SessionKey,
    field: &str,
    value: serde_json::Value,
) {
    let Ok(handle) = sessions.get_or_create(key).await else {
        return;
    };
    handle.update(|s| {
        s.metadata_mut().insert(field.into(), value);
    });
    if let Err(e) = sessions.end_turn(&handle).await {
        tracing::warn!(session = %key.log_id(), field, error = %e, "the note could not be recorded");
    }
}

/// The session metadata field that holds the last archive of the session that fell back
/// to the raw messages (`{"at", "messages", "reason"}`): why no summary was made is shown by
/// `/status` and `nanobot sessions show`, not only in the log.
pub const RAW_ARCHIVE_KEY: &str = "_nanobot_rs_last_raw_archive";

/// Records the last raw archive among `archives` (if any) in the session's metadata and
/// logs it; a failure to record is logged and never fails the caller.
pub async fn record_raw_archives(
    sessions: &SessionManager,
    clock: &dyn Clock,
    key: &SessionKey,
    archives: &[nanobot_memory_core::ArchiveRecord],
) {
    let Some((record, reason)) = archives.iter().rev().find_map(|r| match &r.outcome {
        nanobot_memory_core::Archived::Raw { reason, .. } => Some((r, reason)),
        _ => None,
    }) else {
        return;
    };
    let at = clock.now().format("%Y-%m-%d %H:%M:%S UTC").to_string();
    record_note(
        sessions,
        key,
        RAW_ARCHIVE_KEY,
        serde_json::json!({
            "at": at,
            "messages": format!("{}-{}", record.start, record.end),
            "reason": reason.to_string(),
        }),
    )
    .await;
}

/// The last raw archive of a session, as one line: when, which messages, and why.
pub fn last_raw_archive(session: &Session) -> Option<String> {
    let raw = session.meta().metadata.get(RAW_ARCHIVE_KEY)?;
    Some(format!(
        "{} messages {}: {}",
        raw.get("at")?.as_str()?,
        raw.get("messages")?.as_str()?,
        raw.get("reason")?.as_str()?
    ))
}

/// The last recorded background failure of a session, as one line.
pub fn background_failure(session: &Session) -> Option<String> {
    let failure = session.meta().metadata.get(BACKGROUND_FAILURE_KEY)?;
    Some(format!(
        "{} {}: {}",
        failure.get("at")?.as_str()?,
        failure.get("what")?.as_str()?,
        failure.get("error")?.as_str()?
    ))
}

/// Records what an idle compaction of a session leaves to report in its metadata: the raw
/// archive's reason when it made one, or its failure (the CLI bot's task and a server's
/// sweep both call it).
pub async fn record_compaction(
    sessions: &SessionManager,
    clock: &dyn Clock,
    done: &nanobot_memory_core::Compacted,
) {
    match &done.result {
        Ok(Some(record)) => {
            record_raw_archives(sessions, clock, &done.key, std::slice::from_ref(record)).await;
        }
        Ok(None) => {}
        Err(e) => {
            record_background_failure(
                sessions,
                clock,
                &done.key,
                "idle compaction",
                &e.to_string(),
            )
            .await;
        }
    }
}

//! The session summary the Consolidator leaves in a session's metadata, read back for the
//! next turn's prompt (spec memory.md 3.6).

use nanobot_session_store::{LAST_SUMMARY_KEY, Session, parse_isoformat, python_isoformat};
use serde_json::{Map, Value};

/// What a compaction remembered of a session's archived part, and when the session was
/// last active before it: handed to the context builder, which renders it as the system
/// prompt's last section (`[Archived Context Summary]`) on every later turn, until a newer compaction replaces it or `/new` clears it.
///
/// Only the persisted metadata is consulted (nanobot keeps a one-shot in-memory copy as
/// well; it always holds the same value, so one source is enough and survives restarts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The accumulated summary lines.
    pub text: String,
    /// When the session was last active before it was archived, as ISO 8601 text.
    pub last_active: String,
}

impl SessionSummary {
    /// The summary of `session`, if it has a valid one. Internal sessions (`dream:` keys)
    /// never get one, as in nanobot.
    pub fn of(session: &Session) -> Option<SessionSummary> {
        if session.key().is_internal() {
            return None;
        }
        SessionSummary::from_metadata(
            &session.meta().metadata,
            &python_isoformat(session.meta().updated_at),
        )
    }

    /// nanobot's validation of `metadata["_last_summary"]`: no summary unless it is a
    /// mapping with a non-empty string `text`; a `last_active` that is not an ISO time
    /// (missing, not a string, unparsable) is replaced by `fallback_last_active`.
    pub fn from_metadata(
        metadata: &Map<String, Value>,
        fallback_last_active: &str,
    ) -> Option<SessionSummary> {
        let stored = metadata.get(LAST_SUMMARY_KEY)?.as_object()?;
        let text = stored
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())?;
        let last_active = stored
            .get("last_active")
            .and_then(Value::as_str)
            .filter(|t| parse_isoformat(t).is_some())
            .unwrap_or(fallback_last_active);
        Some(SessionSummary {
            text: text.to_owned(),
            last_active: last_active.to_owned(),
        })
    }
}

//! Sessions as rows: message bodies and previews, metadata columns, revisions.

use super::*;

/// The stored text of a message: as read when unchanged, else as nanobot-ai writes it.
pub(crate) fn body(message: &StoredMessage) -> String {
    match message.raw_json() {
        Some(raw) => raw.to_owned(),
        None => to_python_json(&Value::Object(message.fields().clone())),
    }
}

/// The preview a message offers a listing: (as the first user message, as a fallback).
pub(super) fn preview_of(message: &StoredMessage) -> (Option<String>, Option<String>) {
    let mut scan = PreviewScan::default();
    scan.offer(message);
    let text = scan.finish();
    if text.is_empty() {
        return (None, None);
    }
    // Stored as a JSON literal, as all free text here: a message may hold NUL.
    match message.role() {
        Some("user") => (Some(encode(&text)), None),
        _ => (None, Some(encode(&text))),
    }
}

/// The columns an append or a rewrite writes for `messages`.
pub(super) struct Rows {
    pub(super) roles: Vec<Option<String>>,
    pub(super) bodies: Vec<String>,
    pub(super) user_previews: Vec<Option<String>>,
    pub(super) other_previews: Vec<Option<String>>,
}

impl Rows {
    pub(super) fn of(messages: &[StoredMessage]) -> Rows {
        let mut rows = Rows {
            roles: Vec::with_capacity(messages.len()),
            bodies: Vec::with_capacity(messages.len()),
            user_previews: Vec::with_capacity(messages.len()),
            other_previews: Vec::with_capacity(messages.len()),
        };
        for message in messages {
            rows.roles.push(message.role().map(str::to_owned));
            rows.bodies.push(body(message));
            let (user, other) = preview_of(message);
            rows.user_previews.push(user);
            rows.other_previews.push(other);
        }
        rows
    }
}

/// The metadata columns of `meta`.
pub(super) struct MetaColumns {
    pub(super) pointer: i64,
    pub(super) created_at: NaiveDateTime,
    pub(super) updated_at: NaiveDateTime,
    pub(super) metadata: String,
    pub(super) provider_state: Option<String>,
    pub(super) title: Option<String>,
}

impl MetaColumns {
    pub(super) fn of(meta: &SessionMeta) -> MetaColumns {
        MetaColumns {
            pointer: i64::try_from(meta.last_consolidated).unwrap_or(i64::MAX),
            created_at: meta.created_at,
            updated_at: meta.updated_at,
            metadata: Value::Object(meta.metadata.clone()).to_string(),
            provider_state: meta.provider_state.as_ref().map(Value::to_string),
            title: listing_title(&meta.metadata).map(|t| encode(&t)),
        }
    }
}

pub(crate) fn revision_of(epoch: i64, revision: i64) -> Revision {
    Revision {
        epoch: u64::try_from(epoch).unwrap_or(0),
        offset: u64::try_from(revision).unwrap_or(0),
    }
}

pub(super) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(super) fn count(value: i64) -> usize {
    usize::try_from(value).unwrap_or(0)
}

/// The session's row as read: id, revision, message count and metadata.
pub(crate) struct SessionRow {
    pub(crate) id: i64,
    pub(crate) revision: Revision,
    pub(crate) next_seq: i64,
    pub(crate) meta: SessionMeta,
    pub(crate) repairs: Vec<Repair>,
}

pub(crate) fn session_row(row: &PgRow) -> SessionRow {
    let mut repairs = Vec::new();
    let metadata = match serde_json::from_str::<Value>(row.get::<&str, _>(7)) {
        Ok(Value::Object(map)) => map,
        _ => {
            repairs.push(Repair::BadField { field: "metadata" });
            Map::new()
        }
    };
    let provider_state = row
        .get::<Option<&str>, _>(8)
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    let next_seq: i64 = row.get(3);
    SessionRow {
        id: row.get(0),
        revision: revision_of(row.get(1), row.get(2)),
        next_seq,
        meta: SessionMeta {
            created_at: row.get(5),
            updated_at: row.get(6),
            metadata,
            last_consolidated: count(row.get::<i64, _>(4)),
            provider_state,
        },
        repairs,
    }
}

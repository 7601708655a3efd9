//! Journal entries: what `memory/history.jsonl` holds, one per line.

use serde_json::{Map, Value};

/// The format of an entry's timestamp: local wall-clock time to the minute, as nanobot-ai
/// writes it.
pub const TIMESTAMP_FORMAT: &str = "%Y-%m-%d %H:%M";

/// The field naming the session messages an entry archives (not written by nanobot-ai,
/// which ignores it): `[start, end)` message indices.
pub const MESSAGE_RANGE_FIELD: &str = "message_range";

/// The field holding the digest of the messages an entry archives
/// ([`crate::archive_digest`]); like `message_range`, nanobot-ai ignores it.
pub const MESSAGE_DIGEST_FIELD: &str = "message_digest";

/// One journal entry.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// Its cursor: unique, allocated in increasing order, never reused.
    pub cursor: u64,
    /// When it was written (`YYYY-MM-DD HH:MM`, local time).
    pub timestamp: String,
    /// The text: fact lines from a summary, a `[RAW]` dump, or anything a caller appended.
    pub content: String,
    /// The session it came from, if any.
    pub session_key: Option<String>,
    /// The messages `[start, end)` of that session it archives, if it archives any: how a
    /// crash between the journal append and the session's pointer move is repaired without
    /// archiving the same messages twice.
    pub message_range: Option<(u64, u64)>,
    /// The digest of those messages, telling this slice from another that starts at the
    /// same message after a `/new` or a retention renumbered them.
    pub message_digest: Option<String>,
    /// Fields this crate does not model, kept verbatim.
    pub extra: Map<String, Value>,
}

impl JournalEntry {
    /// The entry as nanobot-ai's JSON object, fields in its order.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut record = Map::new();
        record.insert("cursor".into(), self.cursor.into());
        record.insert("timestamp".into(), self.timestamp.clone().into());
        record.insert("content".into(), self.content.clone().into());
        if let Some(key) = &self.session_key {
            record.insert("session_key".into(), key.clone().into());
        }
        if let Some((start, end)) = self.message_range {
            record.insert(
                MESSAGE_RANGE_FIELD.into(),
                Value::Array(vec![start.into(), end.into()]),
            );
            if let Some(digest) = &self.message_digest {
                record.insert(MESSAGE_DIGEST_FIELD.into(), digest.clone().into());
            }
        }
        for (key, value) in &self.extra {
            record.entry(key.clone()).or_insert_with(|| value.clone());
        }
        record
    }

    /// Reads an entry as nanobot-ai validates it: a non-negative integer `cursor` (not a
    /// boolean), string `timestamp` and `content`, and `session_key` absent, null or a
    /// string. The error says which rule failed.
    pub fn from_json(mut record: Map<String, Value>) -> Result<JournalEntry, String> {
        let cursor = match record.shift_remove("cursor") {
            Some(Value::Number(n)) if n.is_u64() => n.as_u64().unwrap_or_default(),
            Some(other) => return Err(format!("invalid cursor {other}")),
            None => return Err("no cursor".into()),
        };
        let timestamp = match record.shift_remove("timestamp") {
            Some(Value::String(text)) => text,
            _ => return Err(format!("entry {cursor} has no string timestamp")),
        };
        let content = match record.shift_remove("content") {
            Some(Value::String(text)) => text,
            _ => return Err(format!("entry {cursor} has no string content")),
        };
        let session_key = match record.shift_remove("session_key") {
            None | Some(Value::Null) => None,
            Some(Value::String(key)) => Some(key),
            Some(other) => return Err(format!("entry {cursor} has session_key {other}")),
        };
        let message_range = match record.get(MESSAGE_RANGE_FIELD) {
            Some(Value::Array(pair)) if pair.len() == 2 => {
                match (pair[0].as_u64(), pair[1].as_u64()) {
                    (Some(start), Some(end)) if start <= end => Some((start, end)),
                    _ => None,
                }
            }
            _ => None,
        };
        let mut message_digest = None;
        if message_range.is_some() {
            record.shift_remove(MESSAGE_RANGE_FIELD);
            if let Some(Value::String(digest)) = record.get(MESSAGE_DIGEST_FIELD) {
                message_digest = Some(digest.clone());
                record.shift_remove(MESSAGE_DIGEST_FIELD);
            }
        }
        Ok(JournalEntry {
            cursor,
            timestamp,
            content,
            session_key,
            message_range,
            message_digest,
            extra: record,
        })
    }
}

/// What a caller appends; the journal gives it a cursor and a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewEntry<'a> {
    /// The text, stored as given (cleaning and splitting are the caller's policy).
    pub content: &'a str,
    /// The session it came from.
    pub session_key: Option<&'a str>,
    /// The messages of that session it archives.
    pub message_range: Option<(u64, u64)>,
    /// The digest of those messages.
    pub digest: Option<&'a str>,
}

impl<'a> NewEntry<'a> {
    /// An entry with text only.
    pub fn text(content: &'a str) -> Self {
        NewEntry {
            content,
            session_key: None,
            message_range: None,
            digest: None,
        }
    }

    /// Tags it with its session.
    pub fn from_session(mut self, session_key: &'a str) -> Self {
        self.session_key = Some(session_key);
        self
    }

    /// Records the session messages `[start, end)` it archives.
    pub fn covering(mut self, start: u64, end: u64) -> Self {
        self.message_range = Some((start, end));
        self
    }

    /// Records the digest of the messages it archives.
    pub fn with_digest(mut self, digest: &'a str) -> Self {
        self.digest = Some(digest);
        self
    }

    /// The stored entry with `cursor` and `timestamp`.
    pub fn stored(&self, cursor: u64, timestamp: &str) -> JournalEntry {
        JournalEntry {
            cursor,
            timestamp: timestamp.to_owned(),
            content: self.content.to_owned(),
            session_key: self.session_key.map(str::to_owned),
            message_range: self.message_range,
            message_digest: self.digest.map(str::to_owned),
            extra: Map::new(),
        }
    }
}

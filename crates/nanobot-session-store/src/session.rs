//! A session in memory: its messages, metadata and consolidation pointer.

use std::sync::Arc;

use chrono::{DateTime, Local, NaiveDateTime, Utc};
use serde_json::{Map, Value};

use crate::error::SessionError;
use crate::key::SessionKey;
use crate::message::StoredMessage;

/// Metadata key of the idle-compaction summary (`{text, last_active}`), removed by `clear`.
pub const LAST_SUMMARY_KEY: &str = "_last_summary";

/// Everything about a session except its messages: what a metadata record holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionMeta {
    /// When the session was created (naive local time, as nanobot-ai writes it).
    pub created_at: NaiveDateTime,
    /// When it last changed.
    pub updated_at: NaiveDateTime,
    /// Free-form metadata (title, summary, last channel, ...).
    pub metadata: Map<String, Value>,
    /// How many leading messages are archived to long-term memory.
    pub last_consolidated: usize,
    /// A provider's opaque continuation state (nanobot's `provider_state` record), kept
    /// verbatim and never shown in listings.
    pub provider_state: Option<Value>,
}

impl SessionMeta {
    /// Fresh metadata at `now`.
    pub fn new(now: NaiveDateTime) -> Self {
        SessionMeta {
            created_at: now,
            updated_at: now,
            metadata: Map::new(),
            last_consolidated: 0,
            provider_state: None,
        }
    }
}

/// One conversation.
///
/// Messages only grow through [`Session::add_message`]; any other change to them
/// ([`Session::clear`], [`Session::replace_messages`]) marks the session for a rewrite, which
/// is how the stores know an append is not enough.
#[derive(Debug, Clone)]
pub struct Session {
    key: SessionKey,
    /// Shared with copies until one of them changes its messages: a copy made to change
    /// the metadata (an archive commit) costs nothing per message.
    messages: Arc<Vec<StoredMessage>>,
    meta: SessionMeta,
    /// Messages known to be in the store (a prefix of `messages`).
    pub(crate) persisted_messages: usize,
    /// The metadata as last written.
    pub(crate) persisted_meta: Option<SessionMeta>,
    /// The messages changed in a way an append cannot express.
    pub(crate) needs_rewrite: bool,
}

impl PartialEq for Session {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.messages == other.messages && self.meta == other.meta
    }
}

impl Session {
    /// An empty session created at `now`.
    pub fn new(key: SessionKey, now: NaiveDateTime) -> Self {
        Session {
            key,
            messages: Arc::default(),
            meta: SessionMeta::new(now),
            persisted_messages: 0,
            persisted_meta: None,
            needs_rewrite: false,
        }
    }

    /// The messages, taken out (a store that rebuilds a session from its parts).
    pub(crate) fn into_messages(self) -> Vec<StoredMessage> {
        Arc::unwrap_or_clone(self.messages)
    }

    /// A session as a store read it: everything is persisted.
    pub fn from_parts(
        key: SessionKey,
        messages: Vec<StoredMessage>,
        mut meta: SessionMeta,
    ) -> Self {
        if meta.last_consolidated > messages.len() {
            meta.last_consolidated = 0;
        }
        Session {
            persisted_messages: messages.len(),
            persisted_meta: Some(meta.clone()),
            key,
            messages: Arc::new(messages),
            meta,
            needs_rewrite: false,
        }
    }

    /// The key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// All messages, archived ones included, oldest first.
    pub fn messages(&self) -> &[StoredMessage] {
        &self.messages
    }

    /// The messages not yet archived (from the pointer on).
    pub fn live_messages(&self) -> &[StoredMessage] {
        &self.messages[self.meta.last_consolidated.min(self.messages.len())..]
    }

    /// Metadata, pointer and timestamps.
    pub fn meta(&self) -> &SessionMeta {
        &self.meta
    }

    /// The free-form metadata map, for changes (written on the next save).
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.meta.metadata
    }

    /// The consolidation pointer: messages before it are archived.
    pub fn last_consolidated(&self) -> usize {
        self.meta.last_consolidated
    }

    /// Moves the consolidation pointer; refused past the last message.
    pub fn set_last_consolidated(&mut self, pointer: usize) -> Result<(), SessionError> {
        SessionError::check_pointer(&self.key, pointer, self.messages.len())?;
        self.meta.last_consolidated = pointer;
        Ok(())
    }

    /// Sets or clears the provider's continuation state.
    pub fn set_provider_state(&mut self, state: Option<Value>) {
        self.meta.provider_state = state;
    }

    /// Appends a message, stamping `timestamp` (after `role` and `content`, as nanobot-ai
    /// orders them) with `now` unless it has one, and bumps `updated_at`.
    pub fn add_message(&mut self, mut message: StoredMessage, now: NaiveDateTime) {
        if message.get("timestamp").is_none() {
            message.insert_after_content("timestamp", python_isoformat(now));
        }
        Arc::make_mut(&mut self.messages).push(message);
        self.meta.updated_at = now;
    }

    /// The last message, for a change before it is saved (unsaved messages only: a saved
    /// one would need a rewrite).
    pub(crate) fn last_message_mut(&mut self) -> Option<&mut StoredMessage> {
        if self.messages.len() > self.persisted_messages {
            Arc::make_mut(&mut self.messages).last_mut()
        } else {
            None
        }
    }

    /// Empties the session (nanobot's `/new`): no messages, pointer 0, no provider state,
    /// no summary; other metadata and `created_at` stay.
    pub fn clear(&mut self, now: NaiveDateTime) {
        self.messages = Arc::default();
        self.meta.last_consolidated = 0;
        self.meta.provider_state = None;
        self.meta.metadata.remove(LAST_SUMMARY_KEY);
        self.meta.updated_at = now;
        self.needs_rewrite = true;
    }

    /// Replaces the messages wholesale (the pointer is reset to 0 if it would pass them).
    pub fn replace_messages(&mut self, messages: Vec<StoredMessage>, now: NaiveDateTime) {
        self.messages = Arc::new(messages);
        if self.meta.last_consolidated > self.messages.len() {
            self.meta.last_consolidated = 0;
        }
        self.meta.updated_at = now;
        self.needs_rewrite = true;
    }

    /// Keeps the most recent `max_messages` messages, dropping older ones (nanobot's
    /// `retain_recent_legal_suffix`, used by heartbeat-style bots to bound a session).
    ///
    /// The kept part starts at a user turn when it contains one (a proactive delivery just
    /// before it stays) and never starts with a tool result whose call was dropped. With
    /// `extend_to_user` the window first grows back to the user turn that began it. When the
    /// newest `max_messages` hold no user turn, the kept part starts at the latest user turn
    /// and runs to the end: unlike nanobot-ai, which then drops the newest messages, the
    /// newest are always kept. The pointer follows the kept messages.
    pub fn retain_recent(
        &mut self,
        max_messages: usize,
        extend_to_user: bool,
        now: NaiveDateTime,
    ) -> Retention {
        let len = self.messages.len();
        let pointer = self.meta.last_consolidated.min(len);
        if max_messages == 0 {
            let dropped = Arc::unwrap_or_clone(std::mem::take(&mut self.messages));
            self.meta.last_consolidated = 0;
            self.meta.provider_state = None;
            self.meta.updated_at = now;
            self.needs_rewrite = true;
            return Retention {
                already_consolidated: pointer,
                dropped,
            };
        }
        if len <= max_messages {
            return Retention {
                dropped: Vec::new(),
                already_consolidated: 0,
            };
        }
        let is_user = |m: &StoredMessage| m.role() == Some("user");
        let with_delivery = |i: usize, messages: &[StoredMessage]| {
            if i > 0 && messages[i - 1].flag("_channel_delivery") {
                i - 1
            } else {
                i
            }
        };
        let mut start = len - max_messages;
        if extend_to_user && let Some(user) = self.messages[..=start].iter().rposition(is_user) {
            start = with_delivery(user, &self.messages);
        }
        match self.messages[start..].iter().position(is_user) {
            Some(offset) => start = with_delivery(start + offset, &self.messages),
            None => {
                if let Some(user) = self.messages[..start].iter().rposition(is_user) {
                    start = with_delivery(user, &self.messages);
                }
            }
        }
        // Results whose call is not kept cannot lead the kept part.
        let declared: std::collections::HashSet<String> = self.messages[start..]
            .iter()
            .filter(|m| m.role() == Some("assistant"))
            .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
            .flatten()
            .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        while start < len
            && self.messages[start].role() == Some("tool")
            && self.messages[start]
                .get("tool_call_id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty() && !declared.contains(id))
        {
            start += 1;
        }
        let messages = Arc::make_mut(&mut self.messages);
        let kept = messages.split_off(start);
        let dropped = std::mem::replace(messages, kept);
        self.meta.last_consolidated = pointer.saturating_sub(start);
        if !dropped.is_empty() {
            self.meta.provider_state = None;
            self.needs_rewrite = true;
        }
        self.meta.updated_at = now;
        Retention {
            already_consolidated: pointer.min(start),
            dropped,
        }
    }

    /// Sets `updated_at`.
    pub fn touch(&mut self, now: NaiveDateTime) {
        self.meta.updated_at = now;
    }

    /// Messages added since the last save.
    pub fn unsaved_messages(&self) -> &[StoredMessage] {
        &self.messages[self.persisted_messages.min(self.messages.len())..]
    }

    /// Whether a save would write anything.
    pub fn is_dirty(&self) -> bool {
        self.needs_rewrite
            || self.persisted_messages != self.messages.len()
            || self.persisted_meta.as_ref() != Some(&self.meta)
    }

    /// Records that the store now holds everything (a backend that loaded the session).
    pub fn mark_persisted(&mut self) {
        self.persisted_messages = self.messages.len();
        self.persisted_meta = Some(self.meta.clone());
        self.needs_rewrite = false;
    }

    /// What a save must write now: an owned copy of the change only (the unsaved messages
    /// and the metadata), or of the whole session when it needs a rewrite.
    pub fn pending_write(&self) -> PendingWrite {
        PendingWrite {
            rewrite: self.needs_rewrite.then(|| self.clone()),
            messages: if self.needs_rewrite {
                Vec::new()
            } else {
                self.unsaved_messages().to_vec()
            },
            meta: (self.persisted_meta.as_ref() != Some(&self.meta)).then(|| self.meta.clone()),
            upto: self.messages.len(),
            meta_snapshot: self.meta.clone(),
        }
    }

    /// Records that `write` reached the store. Messages added since it was taken stay
    /// unsaved.
    pub fn mark_written(&mut self, write: &PendingWrite) {
        self.persisted_messages = write.upto.min(self.messages.len());
        self.persisted_meta = Some(write.meta_snapshot.clone());
        if write.rewrite.is_some() {
            self.needs_rewrite = false;
        }
    }

    /// Takes over a newer stored version after a conflict, keeping this copy's unsaved
    /// messages (appended after the stored ones, in their order), its metadata changes
    /// (keys it changed since its last save win) and its archiving progress over the
    /// messages both share (the higher pointer wins). Returns the merged session; it needs
    /// a save.
    pub fn merged_onto(&self, mut stored: Session) -> Session {
        Arc::make_mut(&mut stored.messages).extend(self.unsaved_messages().iter().cloned());
        let before = self.persisted_meta.as_ref().map(|m| &m.metadata);
        for (key, value) in &self.meta.metadata {
            if before.and_then(|b| b.get(key)) != Some(value) {
                stored.meta.metadata.insert(key.clone(), value.clone());
            }
        }
        if let Some(before) = before {
            for key in before.keys() {
                if !self.meta.metadata.contains_key(key) {
                    stored.meta.metadata.remove(key);
                }
            }
        }
        stored.meta.updated_at = stored.meta.updated_at.max(self.meta.updated_at);
        // Archiving only moves forward: keep this copy's progress over the shared prefix.
        let ours = self.meta.last_consolidated.min(self.persisted_messages);
        stored.meta.last_consolidated = stored.meta.last_consolidated.max(ours);
        stored
    }
}

/// What [`Session::retain_recent`] removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// The removed messages, oldest first.
    pub dropped: Vec<StoredMessage>,
    /// How many of them were already archived (before the pointer).
    pub already_consolidated: usize,
}

/// An owned snapshot of what a save writes (see [`Session::pending_write`]).
#[derive(Debug, Clone)]
pub struct PendingWrite {
    /// The whole session, when messages changed in a way an append cannot express.
    pub rewrite: Option<Session>,
    /// Messages to append.
    pub messages: Vec<StoredMessage>,
    /// Metadata to record, when it changed.
    pub meta: Option<SessionMeta>,
    upto: usize,
    meta_snapshot: SessionMeta,
}

impl PendingWrite {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.rewrite.is_none() && self.messages.is_empty() && self.meta.is_none()
    }

    /// Writes it to `store` at `expected`.
    pub async fn write_to(
        &self,
        store: &(impl crate::store::SessionStore + ?Sized),
        key: &SessionKey,
        expected: Option<crate::store::Revision>,
    ) -> Result<crate::store::Revision, SessionError> {
        match &self.rewrite {
            Some(session) => store.rewrite(session, expected).await,
            None => {
                let append = crate::store::Append {
                    messages: &self.messages,
                    meta: self.meta.as_ref(),
                };
                store.append(key, expected, append).await
            }
        }
    }
}

/// `now` as naive local time, the way nanobot-ai stamps messages and sessions.
pub fn local_naive(now: DateTime<Utc>) -> NaiveDateTime {
    now.with_timezone(&Local).naive_local()
}

/// Python's `datetime.isoformat()`: microseconds only when they are not zero.
pub fn python_isoformat(time: NaiveDateTime) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let year = time.year();
    if !(1..=9999).contains(&year) {
        // Outside Python's range of years: chrono's own rendering.
        return time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string();
    }
    // Written out instead of through a format string: every stored message gets one.
    let mut out = String::with_capacity(26);
    let _ = write!(
        out,
        "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        time.month(),
        time.day(),
        time.hour(),
        time.minute(),
        time.second()
    );
    // A leap second's fraction runs past one second: Python has none, so it stops below.
    let micros = time.and_utc().timestamp_subsec_micros().min(999_999);
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    out
}

/// Parses what Python's `datetime.fromisoformat` writes (and accepts a zone, ignoring it).
pub fn parse_isoformat(text: &str) -> Option<NaiveDateTime> {
    let text = text.trim();
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(time) = NaiveDateTime::parse_from_str(text, format) {
            return Some(time);
        }
    }
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Some(time.naive_local());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
}

//! Rendering a session as nanobot-ai's JSONL, line 1 padded to be rewritten in place.

use super::*;

/// A session file's text and what a [`FileState`] needs to know about it.
pub(super) struct Rendered {
    pub(super) bytes: Vec<u8>,
    pub(super) meta: SessionMeta,
    pub(super) mark: TailMark,
    pub(super) meta_line: String,
    line1_capacity: usize,
    pub(super) provider_state: Option<Value>,
}

impl Rendered {
    pub(super) fn state(self, revision: Revision, messages: usize) -> FileState {
        FileState {
            revision,
            messages,
            meta_line: self.meta_line,
            provider_state: self.provider_state,
            line1_capacity: self.line1_capacity,
            line1_current: true,
            meta_after_line1: false,
            dead_bytes: 0,
            recorded: Some(self.meta),
            pending_updated_at: None,
            line1_mark: Some(self.mark),
            // A new file appears by a rename, which changes the directory.
            touched_at: Some(revision),
        }
    }
}

/// The whole file of a session: padded metadata line (with its tail mark), provider state,
/// messages.
pub(super) fn render(key: &SessionKey, meta: &SessionMeta, messages: &[StoredMessage]) -> Rendered {
    let meta_line = metadata_line(key, meta);
    let mut body = Vec::with_capacity(messages.len() * 256);
    if let Some(state) = &meta.provider_state {
        body.extend_from_slice(provider_state_line(Some(state)).as_bytes());
        body.push(b'\n');
    }
    for message in messages {
        message.write_python_json(&mut body);
        body.push(b'\n');
    }
    // Line 1's width must be known before the mark that names the file's length: size it
    // for the widest mark, then pad the real one to that width.
    let widest = TailMark {
        messages: usize::MAX,
        bytes: u64::MAX,
    };
    let capacity = padded(&with_mark(&meta_line, widest)).len();
    let mark = TailMark {
        messages: messages.len(),
        bytes: (capacity + 1 + body.len()) as u64,
    };
    let line1 = pad_to_bytes(with_mark(&meta_line, mark), capacity);
    let mut bytes = Vec::with_capacity(capacity + 1 + body.len());
    bytes.extend_from_slice(line1.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    Rendered {
        line1_capacity: capacity,
        bytes,
        meta_line,
        provider_state: meta.provider_state.clone(),
        meta: meta.clone(),
        mark,
    }
}

pub(super) fn render_session(session: &Session) -> Rendered {
    render(session.key(), session.meta(), session.messages())
}

/// Line 1 with room to grow in place: JSON allows trailing spaces, and both nanobot-ai's
/// reader and ours accept them.
pub(super) fn padded(meta_line: &str) -> String {
    let capacity = (meta_line.len() + meta_line.len().max(256)).next_multiple_of(64);
    pad_to_bytes(meta_line.to_owned(), capacity)
}

/// `line` followed by spaces up to `width` *bytes* (`format!`'s width counts characters,
/// which overruns a line holding non-ASCII text). A line already `width` bytes or longer is
/// returned as it is.
pub(super) fn pad_to_bytes(mut line: String, width: usize) -> String {
    let missing = width.saturating_sub(line.len());
    line.reserve(missing);
    line.extend(std::iter::repeat_n(' ', missing));
    line
}

/// How every metadata line we write begins (`_type` first, as nanobot-ai writes it too).
pub(super) const METADATA_PREFIX: &str = r#"{"_type": "metadata""#;

pub(super) fn metadata_line(key: &SessionKey, meta: &SessionMeta) -> String {
    let mut record = Map::new();
    record.insert("_type".into(), "metadata".into());
    record.insert("key".into(), key.as_str().into());
    record.insert(
        "created_at".into(),
        python_isoformat(meta.created_at).into(),
    );
    record.insert(
        "updated_at".into(),
        python_isoformat(meta.updated_at).into(),
    );
    record.insert("metadata".into(), Value::Object(meta.metadata.clone()));
    record.insert("last_archived".into(), meta.last_consolidated.into());
    record.insert("last_consolidated".into(), meta.last_consolidated.into());
    to_python_json(&record)
}

pub(super) fn provider_state_line(state: Option<&Value>) -> String {
    let mut record = Map::new();
    record.insert("_type".into(), "provider_state".into());
    record.insert("state".into(), state.cloned().unwrap_or(Value::Null));
    to_python_json(&record)
}

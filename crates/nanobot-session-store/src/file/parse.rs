//! Parsing a session file and repairing what a crash or a hand edit left.

use super::*;

impl FileSessionStore {
    /// Reads and parses a locked file, repairing what needs repair (in the file too).
    pub(super) fn read_locked(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &mut Locked,
    ) -> Result<Loaded, SessionError> {
        let bytes = read_whole(&mut locked.file, path)?;
        let mut parsed = parse(&bytes, self.now());
        check_recorded_key(key, path, &parsed)?;

        let mut revision = revision_of(&locked.file, path)?;
        // What a repair removes is in the sidecar (synced) before the file loses it.
        let mut aside = Vec::new();
        let torn = parsed.torn.take();
        if let Some(torn) = torn {
            aside.push(("torn last line".to_owned(), bytes[torn..].to_vec()));
            parsed.repairs.push(Repair::TornTail {
                bytes: bytes.len() - torn,
            });
        }
        for (line, reason, raw) in &parsed.corrupt {
            aside.push((format!("line {line}: {reason}"), raw.clone()));
        }
        self.keep_aside(key, &aside)?;
        if let Some(torn) = torn {
            fsio::set_len(&locked.file, path, torn as u64)
                .map_err(|e| SessionError::io("cut the torn line of", path, e))?;
            revision = revision_of(&locked.file, path)?;
        } else if parsed.unterminated {
            // A complete record without its newline: finish the line so appends stay valid.
            fsio::append(&mut locked.file, path, b"\n")
                .map_err(|e| SessionError::io("finish the last line of", path, e))?;
            revision = revision_of(&locked.file, path)?;
        }

        let now = self.now();
        let meta = parsed.meta.clone().unwrap_or_else(|| SessionMeta::new(now));
        let mut session = Session::from_parts(key.clone(), parsed.messages, meta);
        if parsed.meta.is_none() {
            // Nothing records this session's metadata yet: the next save must.
            session.persisted_meta = None;
        }
        if !parsed.corrupt.is_empty() {
            // Rewrite without the damaged lines (they are in the sidecar now).
            let content = render_session(&session);
            revision = self.install(path, &content.bytes, false)?;
            session.mark_persisted();
            self.remember(key, content.state(revision, session.messages().len()));
        } else {
            self.remember(
                key,
                FileState {
                    revision,
                    messages: session.messages().len(),
                    // Line 1 is rewritten from this canonical text (our mark is added then).
                    meta_line: parsed
                        .meta
                        .as_ref()
                        .map(|m| metadata_line(key, m))
                        .unwrap_or_default(),
                    provider_state: session.meta().provider_state.clone(),
                    line1_capacity: parsed.line1_capacity,
                    line1_current: parsed.line1_current,
                    meta_after_line1: parsed.meta_after_line1,
                    dead_bytes: parsed.dead_bytes,
                    recorded: parsed.meta,
                    pending_updated_at: None,
                    line1_mark: parsed.line1_mark,
                    touched_at: Some(revision),
                },
            );
        }
        Ok(Loaded {
            session,
            revision,
            repairs: parsed.repairs,
        })
    }

    /// This process's knowledge of the locked file at `revision`, reading it if needed.
    pub(super) fn state_locked(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &mut Locked,
        revision: Revision,
    ) -> Result<FileState, SessionError> {
        if let Some(state) = self.state(key, revision) {
            return Ok(state);
        }
        let loaded = self.read_locked(key, path, locked)?;
        if loaded.revision != revision {
            // Reading repaired the file: the caller's view was of damaged bytes.
            return Err(SessionError::Conflict {
                key: key.to_string(),
                expected: Some(revision),
                found: Some(loaded.revision),
            });
        }
        self.state(key, revision).ok_or_else(|| {
            SessionError::backend(format!("lost track of session {key} while reading it"))
        })
    }
}

/// The whole file, in the buffer its messages will keep their text in.
fn read_whole(file: &mut File, path: &Path) -> Result<Arc<Vec<u8>>, SessionError> {
    fsio::read_from(file, path, 0)
        .map(Arc::new)
        .map_err(|e| SessionError::io("read", path, e))
}

/// What a file holds, and what is wrong with it.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) messages: Vec<StoredMessage>,
    pub(super) meta: Option<SessionMeta>,
    pub(super) recorded_key: Option<String>,
    pub(super) meta_line: String,
    line1_capacity: usize,
    line1_current: bool,
    /// A metadata record follows line 1 (line 1 is not the only copy of the metadata).
    meta_after_line1: bool,
    line1_mark: Option<TailMark>,
    pub(super) dead_bytes: u64,
    pub(super) repairs: Vec<Repair>,
    /// (line number, reason, raw bytes)
    pub(super) corrupt: Vec<(usize, String, Vec<u8>)>,
    /// Offset of a torn last line.
    pub(super) torn: Option<usize>,
    /// The last line is a complete record without its newline.
    pub(super) unterminated: bool,
}

/// Parses a whole file; its messages keep their text as ranges of `bytes`.
pub(super) fn parse(bytes: &Arc<Vec<u8>>, now: NaiveDateTime) -> Parsed {
    let mut scan = Scan::new(now, Arc::clone(bytes));
    // One SIMD pass validates the whole file; lines are then slices of it. A file that is
    // not valid UTF-8 throughout is checked line by line, to find the damaged ones.
    let whole = simdutf8::basic::from_utf8(bytes).ok();
    let lines = split_lines(bytes);
    let mut checked = check_messages(whole, &lines);
    for (i, line_at) in lines.iter().enumerate() {
        scan.line_no = line_at.number;
        let line = &bytes[line_at.start..line_at.start + line_at.len];
        let text = match whole {
            Some(text) => Ok(&text[line_at.start..line_at.start + line_at.len]),
            None => std::str::from_utf8(line).map_err(|_| ()),
        };
        let check = checked.get_mut(i).and_then(Option::take);
        if scan
            .line(line, text, line_at.start, line_at.terminated, check)
            .is_break()
        {
            break;
        }
    }
    scan.finish()
}

/// A non-blank line of a file.
struct LineAt {
    /// 1-based, blank lines counted.
    number: usize,
    start: usize,
    len: usize,
    terminated: bool,
}

fn split_lines(bytes: &[u8]) -> Vec<LineAt> {
    let mut lines = Vec::with_capacity(bytes.len() / 256);
    let (mut offset, mut number) = (0, 0);
    while offset < bytes.len() {
        number += 1;
        let (len, terminated) = match memchr::memchr(b'\n', &bytes[offset..]) {
            Some(end) => (end, true),
            None => (bytes.len() - offset, false),
        };
        if !bytes[offset..offset + len]
            .iter()
            .all(u8::is_ascii_whitespace)
        {
            lines.push(LineAt {
                number,
                start: offset,
                len,
                terminated,
            });
        }
        offset += len + usize::from(terminated);
    }
    lines
}

/// A message line's check: where its object is within the line, or why it is none.
type Checked = Option<Result<std::ops::Range<usize>, String>>;

/// Below this size a file's messages are checked on the calling thread alone.
const PARALLEL_CHECK_BYTES: usize = 1 << 20;

/// Checks every message line of a valid UTF-8 file (typed records are left to the scan),
/// on two threads for a large file: the check is most of a load.
fn check_messages(whole: Option<&str>, lines: &[LineAt]) -> Vec<Checked> {
    let Some(text) = whole else {
        return Vec::new();
    };
    let check = |lines: &[LineAt]| -> Vec<Checked> {
        lines
            .iter()
            .map(|at| {
                let line = &text[at.start..at.start + at.len];
                (!is_typed_record(line)).then(|| crate::message::check_object_text(line))
            })
            .collect()
    };
    if text.len() < PARALLEL_CHECK_BYTES || crate::cores() < 2 {
        return check(lines);
    }
    let (first, second) = lines.split_at(lines.len() / 2);
    std::thread::scope(|scope| {
        let later = scope.spawn(|| check(second));
        let mut checked = check(first);
        match later.join() {
            Ok(rest) => checked.extend(rest),
            // A panic in the check: the scan checks those lines itself.
            Err(_) => checked.resize_with(lines.len(), || None),
        }
        checked
    })
}

/// A file's lines read so far, and what the records after line 1 said.
struct Scan {
    parsed: Parsed,
    /// The file's bytes, which messages keep their text in.
    buffer: Arc<Vec<u8>>,
    now: NaiveDateTime,
    line_no: usize,
    provider_state: Option<Value>,
    first_record: bool,
    line1_text: Option<String>,
    /// Sizes of metadata and provider-state records after line 1, newline included.
    appended_meta: Vec<u64>,
    state_records: Vec<u64>,
    latest_update: Option<NaiveDateTime>,
    /// (index in the repairs, bytes) of an undecodable line 1 that began as a metadata
    /// record.
    torn_line1: Option<(usize, usize)>,
    /// (line number, bytes) of a line 1 that parses but disagrees with its mark's sum, and
    /// the updated_at it claims.
    mismatched_line1: Option<(usize, Vec<u8>)>,
    mismatched_update: Option<NaiveDateTime>,
}

impl Scan {
    fn new(now: NaiveDateTime, buffer: Arc<Vec<u8>>) -> Self {
        Scan {
            parsed: Parsed::default(),
            buffer,
            now,
            line_no: 0,
            provider_state: None,
            first_record: true,
            line1_text: None,
            appended_meta: Vec::new(),
            state_records: Vec::new(),
            latest_update: None,
            torn_line1: None,
            mismatched_line1: None,
            mismatched_update: None,
        }
    }

    /// One non-blank line starting at byte `start`; `Break` at a torn last line.
    fn line(
        &mut self,
        line: &[u8],
        text: Result<&str, ()>,
        start: usize,
        terminated: bool,
        checked: Checked,
    ) -> std::ops::ControlFlow<()> {
        // Records nanobot-ai and we write start with their `_type`; everything else is a
        // message, validated now (or before, `checked`) and decoded when first read.
        let decoded = text.map_err(|_| "not UTF-8".to_owned()).and_then(|text| {
            if let Some(checked) = checked {
                checked.map(|object| {
                    Line::Message(StoredMessage::from_checked(
                        &self.buffer,
                        start + object.start..start + object.end,
                    ))
                })
            } else if is_typed_record(text) {
                serde_json::from_str::<Value>(text)
                    .map_err(|e| format!("not JSON ({e})"))
                    .and_then(|value| match value {
                        Value::Object(map) => Ok(Line::Record(map)),
                        other => Err(format!("a JSON {} where a record belongs", kind(&other))),
                    })
            } else {
                StoredMessage::from_shared_text(&self.buffer, start..start + line.len(), text)
                    .map(Line::Message)
            }
        });
        match decoded {
            Ok(Line::Message(message)) => {
                if !terminated {
                    self.parsed.unterminated = true;
                }
                self.first_record = false;
                self.parsed.messages.push(message);
            }
            Ok(Line::Record(record)) => self.record(record, line, terminated),
            Err(_) if !terminated => {
                self.parsed.torn = Some(start);
                return std::ops::ControlFlow::Break(());
            }
            Err(reason) => {
                if self.first_record && line.starts_with(METADATA_PREFIX.as_bytes()) {
                    // Line 1 as our flush rewrites it: torn mid-rewrite, if a later record
                    // holds the metadata (decided below).
                    self.torn_line1 = Some((self.parsed.repairs.len(), line.len()));
                }
                self.parsed.repairs.push(Repair::CorruptLine {
                    line: self.line_no,
                    reason: reason.clone(),
                });
                self.parsed
                    .corrupt
                    .push((self.line_no, reason, line.to_vec()));
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    /// A typed record: metadata, provider state, or a message written as a record.
    fn record(&mut self, record: Map<String, Value>, line: &[u8], terminated: bool) {
        if !terminated {
            self.parsed.unterminated = true;
        }
        let is_first = std::mem::replace(&mut self.first_record, false);
        match record.get("_type").and_then(Value::as_str) {
            Some("metadata") => self.metadata(&record, line, is_first),
            Some("provider_state") => {
                self.state_records.push(line.len() as u64 + 1);
                self.provider_state = record.get("state").filter(|s| s.is_object()).cloned();
            }
            _ => self.parsed.messages.push(StoredMessage::from_map(record)),
        }
    }

    /// A metadata record: line 1 (with its mark) or one appended after it.
    fn metadata(&mut self, record: &Map<String, Value>, line: &[u8], is_first: bool) {
        let text = std::str::from_utf8(line)
            .unwrap_or_default()
            .trim_end()
            .to_owned();
        let mut mismatched = false;
        if is_first {
            self.parsed.line1_capacity = line.len();
            match read_mark(record, &text) {
                Line1Mark::Whole(mark) => self.parsed.line1_mark = Some(mark),
                Line1Mark::Absent => {}
                Line1Mark::Mismatch => {
                    mismatched = true;
                    self.mismatched_line1 = Some((self.line_no, line.to_vec()));
                }
            }
            self.line1_text = Some(text.clone());
        } else {
            self.appended_meta.push(line.len() as u64 + 1);
        }
        self.parsed.meta_line = text;
        self.parsed.recorded_key = record.get("key").and_then(Value::as_str).map(str::to_owned);
        let meta = read_meta(record, self.now, &mut self.parsed.repairs);
        if record.get("updated_at").is_some_and(Value::is_string) {
            if mismatched {
                self.mismatched_update = Some(meta.updated_at);
            } else {
                self.latest_update = self.latest_update.max(Some(meta.updated_at));
            }
        }
        self.parsed.meta = Some(meta);
    }

    /// What the whole file says, once every line is read.
    fn finish(mut self) -> Parsed {
        self.settle_line1();
        let parsed = &mut self.parsed;
        parsed.meta_after_line1 = !self.appended_meta.is_empty();
        parsed.line1_current = self.line1_text.is_some() && self.appended_meta.is_empty();
        let superseded = |sizes: &[u64]| sizes.iter().rev().skip(1).sum::<u64>();
        parsed.dead_bytes = superseded(&self.appended_meta) + superseded(&self.state_records);
        if parsed.line1_current && !self.appended_meta.is_empty() {
            // The last appended record only mirrors line 1.
            parsed.dead_bytes += self.appended_meta.last().copied().unwrap_or(0);
        }
        if let Some(meta) = parsed.meta.as_mut() {
            meta.provider_state = self.provider_state;
            // updated_at only grows; line 1 may carry a newer one than the last record.
            if let Some(latest) = self.latest_update {
                meta.updated_at = meta.updated_at.max(latest);
            }
            if meta.last_consolidated > parsed.messages.len() {
                parsed.repairs.push(Repair::PointerReset {
                    found: meta.last_consolidated.to_string(),
                });
                meta.last_consolidated = 0;
            }
        }
        self.parsed
    }

    /// A torn or mismatched line 1: repaired from a later record when there is one.
    fn settle_line1(&mut self) {
        let parsed = &mut self.parsed;
        if let (Some((index, bytes)), Some(_)) = (self.torn_line1, &parsed.meta) {
            // Flush appends a record before it rewrites line 1 in place (see `flush`), so a
            // later record holds what the torn line held: the repair loses nothing.
            parsed.repairs[index] = Repair::TornLine1 { bytes };
        }
        if let Some((line_no, raw)) = self.mismatched_line1.take() {
            if self.appended_meta.is_empty() {
                // Nothing after it to fall back on, and flush never rewrites line 1 in place
                // while it is the only copy: an edit by hand, taken as written (mark dropped).
                self.latest_update = self.latest_update.max(self.mismatched_update);
            } else {
                // Torn mid-rewrite into a mix that parses; the last record holds the metadata.
                parsed.repairs.push(Repair::TornLine1 { bytes: raw.len() });
                parsed.corrupt.push((
                    line_no,
                    "line 1 does not match its sum (torn in the middle of a rewrite)".to_owned(),
                    raw,
                ));
            }
        }
    }
}

pub(super) fn json_str(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// One decoded line of a session file.
pub(super) enum Line {
    Message(StoredMessage),
    Record(Map<String, Value>),
}

/// Whether a line is a typed record (`{"_type": ...`), which is decoded at once.
pub(super) fn is_typed_record(text: &str) -> bool {
    is_typed_record_bytes(text.as_bytes())
}

pub(super) fn is_typed_record_bytes(line: &[u8]) -> bool {
    line.trim_ascii_start()
        .strip_prefix(b"{")
        .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"\"_type\""))
}

pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The metadata of a record, with every bad field reset and reported.
pub(super) fn read_meta(
    record: &Map<String, Value>,
    now: NaiveDateTime,
    repairs: &mut Vec<Repair>,
) -> SessionMeta {
    let metadata = match record.get("metadata") {
        Some(Value::Object(map)) => map.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            repairs.push(Repair::BadField { field: "metadata" });
            Map::new()
        }
    };
    let mut time = |field: &'static str| match record.get(field) {
        Some(Value::String(text)) if !text.is_empty() => {
            parse_isoformat(text).unwrap_or_else(|| {
                repairs.push(Repair::BadTimestamp {
                    field,
                    found: text.clone(),
                });
                now
            })
        }
        None | Some(Value::Null) => now,
        Some(other) => {
            repairs.push(Repair::BadTimestamp {
                field,
                found: other.to_string(),
            });
            now
        }
    };
    let created_at = time("created_at");
    let updated_at = time("updated_at");
    // nanobot-ai 0.3.5 reads `last_archived`, then `last_consolidated`: the first integer wins.
    let mut pointer = None;
    let mut invalid = None;
    for field in ["last_archived", "last_consolidated"] {
        match record.get(field) {
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                pointer = Some(n.as_i64().unwrap_or(-1));
                break;
            }
            None => {}
            Some(other) => {
                invalid.get_or_insert_with(|| other.to_string());
            }
        }
    }
    let last_consolidated = match pointer {
        Some(n) if n >= 0 => usize::try_from(n).unwrap_or(0),
        Some(n) => {
            repairs.push(Repair::PointerReset {
                found: n.to_string(),
            });
            0
        }
        None => {
            if let Some(found) = invalid {
                repairs.push(Repair::PointerReset { found });
            }
            0
        }
    };
    SessionMeta {
        created_at,
        updated_at,
        metadata,
        last_consolidated,
        provider_state: None,
    }
}

/// A hashed file name is only a hint: the key recorded inside must be the one asked for.
pub(super) fn check_recorded_key(
    key: &SessionKey,
    path: &Path,
    parsed: &Parsed,
) -> Result<(), SessionError> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if !SessionKey::is_hashed_stem(stem) {
        return Ok(());
    }
    match parsed.recorded_key.as_deref() {
        Some(found) if found == key.as_str() => Ok(()),
        found => Err(SessionError::KeyMismatch {
            key: key.to_string(),
            found: found.unwrap_or("(none)").to_owned(),
            path: path.to_owned(),
        }),
    }
}

//! Reading a session's end without its beginning, from the mark on line 1.

use super::*;

impl FileSessionStore {
    /// The replay view of a locked file from its line 1, what was appended since line 1's
    /// mark, and as many older lines as replay needs, read backwards. `None` when the file
    /// does not allow it (no mark: written by nanobot-ai or damaged), and the caller loads it
    /// whole.
    #[cfg(unix)]
    pub(super) fn read_tail(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &Locked,
    ) -> Result<Option<ReplayView>, SessionError> {
        let revision = revision_of(&locked.file, path)?;
        let len = revision.offset;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if SessionKey::is_hashed_stem(stem) {
            return Ok(None);
        }
        let now = self.now();
        let head_bytes = read_range(&locked.file, path, 0, len.min(TAIL_CHUNK))?;
        let Some(Head {
            mark,
            body_start,
            mut meta,
        }) = read_head(&head_bytes, len, now)
        else {
            return Ok(None);
        };
        // What was appended since the mark: new messages and newer records.
        let since = read_range(&locked.file, path, mark.bytes, len)?;
        let Some(newer) = read_since(&since, &mut meta, now) else {
            return Ok(None);
        };
        let total = mark.messages + newer.len();
        if meta.last_consolidated > total {
            meta.last_consolidated = 0;
        }
        let floor = replay_floor(total, meta.last_consolidated);
        let Some((mut tail, tail_start)) = read_older(&locked.file, path, mark, body_start, floor)?
        else {
            return Ok(None);
        };
        tail.extend(newer);
        Ok(Some(ReplayView {
            key: key.clone(),
            meta,
            message_count: total,
            tail_start,
            tail,
            revision,
        }))
    }

    #[cfg(not(unix))]
    pub(super) fn read_tail(
        &self,
        _key: &SessionKey,
        _path: &Path,
        _locked: &Locked,
    ) -> Result<Option<ReplayView>, SessionError> {
        Ok(None)
    }
}

/// A metadata line with the tail mark added as its last field. The mark ends with a sum of
/// everything before it and of its numbers, so a line 1 that a power loss tore in the middle
/// of its in-place rewrite (new first sectors, old rest) is told from a whole one even when
/// the mix happens to be valid JSON (two long strings of the same letter, say).
pub(super) fn with_mark(meta_line: &str, mark: TailMark) -> String {
    let Some(open) = meta_line.strip_suffix('}') else {
        return meta_line.to_owned();
    };
    format!(
        r#"{open}{MARK_OPENING}"messages": {}, "bytes": {}, "sum": "{}"}}}}"#,
        mark.messages,
        mark.bytes,
        line1_sum(open, mark)
    )
}

/// How the mark field begins in the line: `with_mark` writes it last.
const MARK_OPENING: &str = concat!(", \"", "_nanobot_rs", "\": {");

/// FNV-1a (64 bits) of line 1 before its mark and of the mark's numbers, as hex.
fn line1_sum(open: &str, mark: TailMark) -> String {
    let numbers = format!(" {} {}", mark.messages, mark.bytes);
    let hash = open
        .bytes()
        .chain(numbers.bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{hash:016x}")
}

/// What line 1's mark says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Line1Mark {
    /// No mark (nanobot-ai wrote the line, or an older release without numbers).
    Absent,
    /// A mark that agrees with the line (or one from a release before the sum).
    Whole(TailMark),
    /// The sum does not match the line: torn mid-rewrite, or edited by hand.
    Mismatch,
}

/// The tail mark of line 1, checked against the line's text (`text`, as read, trailing
/// padding allowed).
pub(super) fn read_mark(record: &Map<String, Value>, text: &str) -> Line1Mark {
    let Some(mark) = record.get(TAIL_MARK_FIELD) else {
        return Line1Mark::Absent;
    };
    let numbers = (|| {
        Some(TailMark {
            messages: usize::try_from(mark.get("messages")?.as_u64()?).ok()?,
            bytes: mark.get("bytes")?.as_u64()?,
        })
    })();
    let Some(numbers) = numbers else {
        return Line1Mark::Mismatch;
    };
    match mark.get("sum") {
        // Written before the sum existed: trusted as it was then.
        None => Line1Mark::Whole(numbers),
        Some(Value::String(sum)) => match text.rfind(MARK_OPENING) {
            Some(at) if line1_sum(&text[..at], numbers) == *sum => Line1Mark::Whole(numbers),
            _ => Line1Mark::Mismatch,
        },
        Some(_) => Line1Mark::Mismatch,
    }
}

/// Whether line 1 of the locked file ends (its newline) exactly at byte `capacity`: the
/// last check before line 1 is rewritten in place, so a rewrite can only ever replace line
/// 1's own bytes, whatever this process believed about the file.
pub(super) fn line1_ends_at(
    file: &File,
    path: &Path,
    capacity: usize,
    len: u64,
) -> io::Result<bool> {
    if capacity == 0 || capacity as u64 >= len {
        return Ok(false);
    }
    let mut head = vec![0u8; capacity + 1];
    read_exact_at(file, path, &mut head, 0)?;
    Ok(head[capacity] == b'\n' && !head[..capacity].contains(&b'\n'))
}

/// Fills `buf` from `offset`, or fails with `UnexpectedEof` when the file ends first.
pub(super) fn read_exact_at(
    file: &File,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<()> {
    if fsio::read_at(file, path, offset, buf)? == buf.len() {
        Ok(())
    } else {
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

/// How much of a file one read takes.
#[cfg(unix)]
const TAIL_CHUNK: u64 = 64 * 1024;

/// The bytes of `path` from `from` to `to`.
#[cfg(unix)]
fn read_range(file: &File, path: &Path, from: u64, to: u64) -> Result<Vec<u8>, SessionError> {
    let mut buf = vec![0u8; usize::try_from(to - from).unwrap_or(0)];
    read_exact_at(file, path, &mut buf, from).map_err(|e| SessionError::io("read", path, e))?;
    Ok(buf)
}

/// Line 1 with a whole mark, where the body starts, and the metadata line 1 (and a
/// provider state on line 2) hold.
#[cfg(unix)]
struct Head {
    mark: TailMark,
    body_start: u64,
    meta: SessionMeta,
}

/// The head of a file `len` bytes long; `None` when line 1 has no mark that agrees with
/// it (written by nanobot-ai, or damaged: the full loader decides).
#[cfg(unix)]
fn read_head(head: &[u8], len: u64, now: NaiveDateTime) -> Option<Head> {
    let end1 = memchr::memchr(b'\n', head)?;
    let line1 = serde_json::from_slice::<Map<String, Value>>(&head[..end1]).ok()?;
    let text1 = std::str::from_utf8(&head[..end1]).unwrap_or_default();
    let Line1Mark::Whole(mark) = read_mark(&line1, text1) else {
        return None;
    };
    if line1.get("_type") != Some(&json_str("metadata"))
        || mark.bytes > len
        || mark.bytes <= end1 as u64
    {
        return None;
    }
    let mut meta = read_meta(&line1, now, &mut Vec::new());
    // Line 2 may hold the provider state.
    let rest = &head[end1 + 1..];
    if let Some(end2) = memchr::memchr(b'\n', rest)
        && is_typed_record_bytes(&rest[..end2])
        && let Ok(record) = serde_json::from_slice::<Map<String, Value>>(&rest[..end2])
        && record.get("_type") == Some(&json_str("provider_state"))
    {
        meta.provider_state = record.get("state").filter(|s| s.is_object()).cloned();
    }
    Some(Head {
        mark,
        body_start: end1 as u64 + 1,
        meta,
    })
}

/// The messages appended after the mark, the records among them applied to `meta`
/// (updated_at only grows); `None` when a line needs the full loader.
#[cfg(unix)]
fn read_since(
    since: &[u8],
    meta: &mut SessionMeta,
    now: NaiveDateTime,
) -> Option<Vec<StoredMessage>> {
    let mut latest_update = meta.updated_at;
    let mut newer = Vec::new();
    for line in since.split(|&b| b == b'\n') {
        let text = std::str::from_utf8(line).ok()?;
        if text.trim().is_empty() {
            continue;
        }
        if is_typed_record(text) {
            let record = serde_json::from_str::<Map<String, Value>>(text).ok()?;
            match record.get("_type").and_then(Value::as_str) {
                Some("metadata") => {
                    let state = meta.provider_state.take();
                    *meta = read_meta(&record, now, &mut Vec::new());
                    meta.provider_state = state;
                    latest_update = latest_update.max(meta.updated_at);
                }
                Some("provider_state") => {
                    meta.provider_state = record.get("state").filter(|s| s.is_object()).cloned();
                }
                _ => newer.push(StoredMessage::from_map(record)),
            }
            continue;
        }
        match StoredMessage::from_json_text(text) {
            Ok(message) => newer.push(message),
            // A torn last line is not a message; anything else needs the full loader.
            Err(_) if std::ptr::eq(line.as_ptr_range().end, since.as_ptr_range().end) => {}
            Err(_) => return None,
        }
    }
    meta.updated_at = meta.updated_at.max(latest_update);
    Some(newer)
}

/// Older messages, read backwards from the mark until the tail reaches the floor and a user
/// turn at or below it (with the message before that turn): the tail in file order and
/// the index of its first message. `None` when the file does not hold what its mark says.
#[cfg(unix)]
fn read_older(
    file: &File,
    path: &Path,
    mark: TailMark,
    body_start: u64,
    floor: usize,
) -> Result<Option<(Vec<StoredMessage>, usize)>, SessionError> {
    let mut older: Vec<StoredMessage> = Vec::new();
    let mut index = mark.messages;
    let mut user_below_floor: Option<usize> = None;
    let mut pos = mark.bytes;
    let mut carry: Vec<u8> = Vec::new();
    let satisfied = |index: usize, user: Option<usize>| {
        index == 0 || (index <= floor && user.is_some_and(|u| index < u))
    };
    while !satisfied(index, user_below_floor) && pos > body_start {
        let from = pos.saturating_sub(TAIL_CHUNK).max(body_start);
        let mut chunk = read_range(file, path, from, pos)?;
        chunk.extend_from_slice(&carry);
        let (partial, complete) = if from > body_start {
            match memchr::memchr(b'\n', &chunk) {
                Some(cut) => chunk.split_at(cut + 1),
                None => (&chunk[..], &chunk[chunk.len()..]),
            }
        } else {
            (&chunk[..0], &chunk[..])
        };
        for line in complete.rsplit(|&b| b == b'\n') {
            if satisfied(index, user_below_floor) {
                break;
            }
            if line.iter().all(u8::is_ascii_whitespace) || is_typed_record_bytes(line) {
                continue;
            }
            let Ok(message) = std::str::from_utf8(line)
                .map_err(|_| ())
                .and_then(|t| StoredMessage::from_json_text(t).map_err(|_| ()))
            else {
                return Ok(None);
            };
            let Some(i) = index.checked_sub(1) else {
                return Ok(None);
            };
            index = i;
            if i <= floor && user_below_floor.is_none() && message.role() == Some("user") {
                user_below_floor = Some(i);
            }
            older.push(message);
        }
        carry = partial.to_vec();
        pos = from;
    }
    if pos <= body_start && index != 0 && !satisfied(index, user_below_floor) {
        return Ok(None);
    }
    older.reverse();
    Ok(Some((older, index)))
}

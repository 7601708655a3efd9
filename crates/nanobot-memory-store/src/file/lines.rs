//! The journal's file format: entry lines parsed and written, and the cursor files' numbers.

use super::*;

/// A non-negative integer file (`.cursor`, `.dream_cursor`); `None` when missing or not a
/// non-negative integer.
pub(super) fn read_number(path: &Path) -> Result<Option<u64>, MemoryError> {
    match fsio::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse::<u64>().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
        Err(e) => Err(MemoryError::io("read", path, e)),
    }
}

#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) entries: Vec<JournalEntry>,
    pub(super) repairs: Vec<JournalRepair>,
    /// (line number, raw bytes) of lines that are not JSON objects.
    pub(super) corrupt: Vec<(usize, Vec<u8>)>,
    /// Byte ranges of every line to keep (objects, valid or not).
    pub(super) kept_lines: Vec<std::ops::Range<usize>>,
    pub(super) torn: Option<usize>,
    pub(super) unterminated: bool,
    /// The highest non-negative integer cursor of any object, valid entry or not.
    pub(super) max_object_cursor: u64,
}

/// The entries of `bytes`, in file order. An entry whose cursor does not follow the one
/// before it (a hand-edited or merged file; `after` is the last cursor already read)
/// stays in the file but is not read: readers polling `cursor > x` rely on cursors that
/// only grow. It is reported as an invalid entry.
pub(super) fn parse(bytes: &[u8], lines_before: usize, after: u64) -> Parsed {
    let mut parsed = Parsed::default();
    let mut last_cursor = after;
    let mut offset = 0;
    // Line numbers count from the start of what is parsed.
    let mut line_no = lines_before;
    while offset < bytes.len() {
        line_no += 1;
        let (end, next, terminated) = match memchr::memchr(b'\n', &bytes[offset..]) {
            Some(at) => (offset + at, offset + at + 1, true),
            None => (bytes.len(), bytes.len(), false),
        };
        let line = &bytes[offset..end];
        let start = offset;
        offset = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = std::str::from_utf8(line)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(text.trim()).ok());
        let Some(Value::Object(record)) = record else {
            if terminated {
                parsed
                    .repairs
                    .push(JournalRepair::CorruptLine { line: line_no });
                parsed.corrupt.push((line_no, line.to_vec()));
            } else {
                parsed
                    .repairs
                    .push(JournalRepair::TornTail { bytes: line.len() });
                parsed.torn = Some(start);
            }
            continue;
        };
        parsed.unterminated |= !terminated;
        parsed.kept_lines.push(start..end);
        if let Some(cursor) = record.get("cursor").and_then(Value::as_u64) {
            parsed.max_object_cursor = parsed.max_object_cursor.max(cursor);
        }
        match JournalEntry::from_json(record) {
            Ok(entry) if entry.cursor <= last_cursor => {
                parsed.repairs.push(JournalRepair::InvalidEntry {
                    line: line_no,
                    reason: format!(
                        "cursor {} does not follow cursor {last_cursor}; the line stays in the \
                         file but is not read",
                        entry.cursor
                    ),
                })
            }
            Ok(entry) => {
                last_cursor = entry.cursor;
                parsed.entries.push(entry);
            }
            Err(reason) => parsed.repairs.push(JournalRepair::InvalidEntry {
                line: line_no,
                reason,
            }),
        }
    }
    parsed
}

pub(super) fn entry_line(entry: &JournalEntry) -> String {
    to_python_json(&Value::Object(entry.to_json()))
}

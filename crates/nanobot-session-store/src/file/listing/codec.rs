//! The listing index's bytes: fixed-width integers and length-prefixed strings, read
//! without a parser. The index of a 1,000-session store is read by every fresh store's
//! first listing, and decoding it as JSON (field names matched row by row, every string
//! scanned for escapes) was three quarters of that listing.
//!
//! Layout (integers little-endian): the magic with the format's version; the directory
//! check (a flag byte, then its two times); the row count; each row (file name, inode,
//! size, modification time, read time, key, created and updated in microseconds, message
//! count, title flag and title, preview); the magic again. A string is a `u32` length and
//! its UTF-8 bytes. Anything that does not read back exactly (short, long, not UTF-8, a
//! time out of range) is no index at all: the caller rebuilds it.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime};

use super::{DirCheck, Entry, Row, Stamp};

/// The format's name and version, first and last (a file cut short ends without it).
const MAGIC: &[u8; 8] = b"nbidx\x00\x00\x03";

/// The fewest bytes a row takes (its fixed-width fields and empty strings): bounds the
/// room reserved for a count read from the file.
const MIN_ROW_BYTES: usize = 4 + 8 * 4 + 4 + 8 * 3 + 1 + 4;

/// The index as bytes.
pub(super) fn encode(dir: Option<DirCheck>, entries: &HashMap<String, Entry>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + entries.len() * 256);
    out.extend_from_slice(MAGIC);
    match dir {
        Some(check) => {
            out.push(1);
            put_u64(&mut out, check.modified_ns);
            put_u64(&mut out, check.checked_ns);
        }
        None => out.push(0),
    }
    put_u64(&mut out, entries.len() as u64);
    for (file, entry) in entries {
        put_str(&mut out, file);
        put_u64(&mut out, entry.stamp.inode);
        put_u64(&mut out, entry.stamp.size);
        put_u64(&mut out, entry.stamp.modified_ns);
        put_u64(&mut out, entry.read_ns);
        put_row(&mut out, &entry.row);
    }
    out.extend_from_slice(MAGIC);
    out
}

fn put_row(out: &mut Vec<u8>, row: &Row) {
    put_str(out, &row.key);
    put_u64(out, row.created_at.and_utc().timestamp_micros() as u64);
    put_u64(out, row.updated_at.and_utc().timestamp_micros() as u64);
    put_u64(out, row.message_count as u64);
    match &row.title {
        Some(title) => {
            out.push(1);
            put_str(out, title);
        }
        None => out.push(0),
    }
    put_str(out, &row.preview);
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    // Strings here are file names, keys, titles and previews, all far below 4 GiB; a longer
    // one is cut at a character boundary rather than written with a wrong length.
    let mut end = text.len().min(u32::MAX as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u32).to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..end]);
}

/// The index read back from `bytes`, or `None` when they are not exactly an index.
pub(super) fn decode(bytes: &[u8]) -> Option<(Option<DirCheck>, HashMap<String, Entry>)> {
    let mut reader = Reader { rest: bytes };
    if reader.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let dir = match reader.flag()? {
        true => Some(DirCheck {
            modified_ns: reader.u64()?,
            checked_ns: reader.u64()?,
        }),
        false => None,
    };
    let count = usize::try_from(reader.u64()?).ok()?;
    let mut entries = HashMap::with_capacity(count.min(bytes.len() / MIN_ROW_BYTES));
    for _ in 0..count {
        let file = reader.string()?;
        let entry = Entry {
            stamp: Stamp {
                inode: reader.u64()?,
                size: reader.u64()?,
                modified_ns: reader.u64()?,
            },
            read_ns: reader.u64()?,
            row: reader.row()?,
        };
        entries.insert(file, entry);
    }
    (reader.take(MAGIC.len())? == MAGIC && reader.rest.is_empty()).then_some((dir, entries))
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn flag(&mut self) -> Option<bool> {
        match self.take(1)? {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }

    fn string(&mut self) -> Option<String> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        let bytes = self.take(usize::try_from(len).ok()?)?;
        simdutf8::basic::from_utf8(bytes).ok().map(str::to_owned)
    }

    fn time(&mut self) -> Option<NaiveDateTime> {
        let micros = self.u64()? as i64;
        DateTime::from_timestamp_micros(micros).map(|t| t.naive_utc())
    }

    fn row(&mut self) -> Option<Row> {
        Some(Row {
            key: self.string()?,
            created_at: self.time()?,
            updated_at: self.time()?,
            message_count: usize::try_from(self.u64()?).ok()?,
            title: match self.flag()? {
                true => Some(self.string()?),
                false => None,
            },
            preview: self.string()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Option<DirCheck>, HashMap<String, Entry>) {
        let at = |s: i64| {
            DateTime::from_timestamp_micros(s * 1_000_000 + 123_456)
                .map(|t| t.naive_utc())
                .unwrap_or_default()
        };
        let entry = |key: &str, title: Option<&str>, preview: &str| Entry {
            stamp: Stamp {
                inode: 42,
                size: 1_234,
                modified_ns: 1_700_000_000_123_456_789,
            },
            read_ns: 1_700_000_001_000_000_000,
            row: Row {
                key: key.to_owned(),
                created_at: at(1_700_000_000),
                updated_at: at(1_700_000_500),
                message_count: 7,
                title: title.map(str::to_owned),
                preview: preview.to_owned(),
            },
        };
        let entries = HashMap::from([
            (
                "cli_a.jsonl".to_owned(),
                entry("cli:a", Some("Trip to Kyōto"), "where is 東寺?"),
            ),
            ("t_b.jsonl".to_owned(), entry("telegram:b", None, "")),
        ]);
        let dir = Some(DirCheck {
            modified_ns: 5,
            checked_ns: 6,
        });
        (dir, entries)
    }

    #[test]
    fn an_index_reads_back_as_written() {
        let (dir, entries) = sample();
        let (read_dir, read) = decode(&encode(dir, &entries)).expect("reads back");
        assert_eq!(read_dir, dir);
        assert_eq!(read.len(), entries.len());
        for (file, entry) in &entries {
            let back = &read[file];
            assert_eq!(back.stamp, entry.stamp);
            assert_eq!(back.read_ns, entry.read_ns);
            assert_eq!(back.row, entry.row);
        }
        let (none, empty) = decode(&encode(None, &HashMap::new())).expect("reads back");
        assert_eq!((none, empty.len()), (None, 0));
    }

    #[test]
    fn a_cut_lengthened_or_damaged_index_is_no_index() {
        let (dir, entries) = sample();
        let bytes = encode(dir, &entries);
        for end in 0..bytes.len() {
            assert!(decode(&bytes[..end]).is_none(), "cut at {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        // A row count far beyond the bytes reserves no more than the bytes allow.
        let mut huge = bytes.clone();
        huge[8 + 17..8 + 25].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_none());
        // The JSON index of earlier versions.
        assert!(decode(br#"{"version":2,"dir":null,"entries":{}}"#).is_none());
        // A string that is not UTF-8.
        let mut bad = bytes;
        let at = bad
            .windows(3)
            .position(|w| w == "東".as_bytes())
            .expect("the preview is there");
        bad[at] = 0xff;
        assert!(decode(&bad).is_none());
    }
}

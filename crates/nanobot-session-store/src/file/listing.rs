//! The listing index of the file backend: listing rows cached beside the session files, so
//! a listing opens only the files that changed since it last looked.
//!
//! A row is reused when its file has the same inode, size and modification time as when the
//! row was read, and was last modified well before that read (file systems stamp times
//! with a coarse clock, so a change in the same clock tick as the read is not trusted). The
//! index is only a cache: a missing, damaged or foreign index is rebuilt, never trusted.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

use crate::key::SessionKey;
use crate::store::SessionInfo;

/// The index file's name; nanobot-ai ignores it (it lists `*.jsonl` only).
pub(crate) const INDEX_FILE: &str = ".listing-index.json";

/// Changes this close to a read are re-read next time (covers coarse timestamp clocks).
const TIMESTAMP_GUARD: Duration = Duration::from_millis(20);

/// A file's identity and version as `stat` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    inode: u64,
    size: u64,
    modified_ns: u64,
}

impl Stamp {
    pub(crate) fn of(metadata: &fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(metadata);
        #[cfg(not(unix))]
        let inode = 0;
        Stamp {
            inode,
            size: metadata.len(),
            modified_ns: metadata.modified().map(nanos_since_epoch).unwrap_or(0),
        }
    }
}

fn nanos_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    key: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
    message_count: usize,
    title: Option<String>,
    preview: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    stamp: Stamp,
    /// When the row was read from the file (ns since the epoch).
    read_ns: u64,
    row: Row,
}

/// The cached rows of one directory, by file name.
#[derive(Debug, Default)]
pub(crate) struct ListingIndex {
    entries: HashMap<String, Entry>,
    loaded: bool,
    changed: bool,
}

impl ListingIndex {
    /// Reads the index file once per store; anything unreadable is an empty index.
    pub(crate) fn load_once(&mut self, dir: &Path) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        if let Ok(bytes) = fsio::read(&dir.join(INDEX_FILE)) {
            self.entries = serde_json::from_slice(&bytes).unwrap_or_default();
        }
    }

    /// The cached row of `file` if it still describes the file.
    pub(crate) fn fresh(&self, file: &str, stamp: Stamp) -> Option<SessionInfo> {
        let entry = self.entries.get(file)?;
        let settled = stamp
            .modified_ns
            .saturating_add(TIMESTAMP_GUARD.as_nanos() as u64)
            < entry.read_ns;
        if entry.stamp != stamp || !settled {
            return None;
        }
        Some(SessionInfo {
            key: SessionKey::new(entry.row.key.clone()).ok()?,
            created_at: entry.row.created_at,
            updated_at: entry.row.updated_at,
            message_count: entry.row.message_count,
            title: entry.row.title.clone(),
            preview: entry.row.preview.clone(),
        })
    }

    /// Records the row just read from `file`.
    pub(crate) fn record(
        &mut self,
        file: String,
        stamp: Stamp,
        read_at: SystemTime,
        info: &SessionInfo,
    ) {
        let row = Row {
            key: info.key.to_string(),
            created_at: info.created_at,
            updated_at: info.updated_at,
            message_count: info.message_count,
            title: info.title.clone(),
            preview: info.preview.clone(),
        };
        self.entries.insert(
            file,
            Entry {
                stamp,
                read_ns: nanos_since_epoch(read_at),
                row,
            },
        );
        self.changed = true;
    }

    /// Drops rows of files that are gone.
    pub(crate) fn retain(&mut self, present: &std::collections::HashSet<String>) {
        let before = self.entries.len();
        self.entries.retain(|file, _| present.contains(file));
        self.changed |= self.entries.len() != before;
    }

    /// Writes the index back if it changed. Failure only costs speed next time.
    pub(crate) fn save(&mut self, dir: &Path) {
        if !self.changed {
            return;
        }
        self.changed = false;
        let Ok(bytes) = serde_json::to_vec(&self.entries) else {
            return;
        };
        let temp: PathBuf = dir.join(format!("{INDEX_FILE}.{}.tmp", std::process::id()));
        if fsio::write(&temp, &bytes)
            .and_then(|()| fsio::rename(&temp, &dir.join(INDEX_FILE)))
            .is_err()
        {
            let _ = fsio::remove_file(&temp);
        }
    }
}

use super::*;

/// A listing row from a file's bytes, without decoding every message: only metadata
/// records and the first few messages (for the preview) are parsed.
pub(super) fn list_row(
    bytes: &[u8],
    canonical: Option<SessionKey>,
    now: NaiveDateTime,
) -> Option<SessionInfo> {
    let mut last_meta: Option<&[u8]> = None;
    let mut messages = 0usize;
    let mut preview = info::PreviewScan::default();
    for line in bytes.split(|&b| b == b'\n') {
        let Some(&first) = line.iter().find(|b| !b.is_ascii_whitespace()) else {
            continue;
        };
        // Typed records start with their `_type`; a line that is not an object (corrupt, or
        // a torn tail) is no message.
        if first != b'{' {
            continue;
        }
        let typed = is_typed_record_bytes(line);
        if typed {
            match serde_json::from_slice::<Map<String, Value>>(line) {
                Ok(record) if record.get("_type").and_then(Value::as_str) == Some("metadata") => {
                    last_meta = Some(line)
                }
                Ok(record)
                    if record.get("_type").and_then(Value::as_str) == Some("provider_state") => {}
                Ok(record) => {
                    messages += 1;
                    preview.offer(&StoredMessage::from_map(record));
                }
                Err(_) => {}
            }
            continue;
        }
        messages += 1;
        // Messages are decoded only while the preview is still open.
        if !preview.is_done()
            && let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line)
        {
            preview.offer(&StoredMessage::from_map(record));
        }
    }
    let mut repairs = Vec::new();
    let record = last_meta.and_then(|line| serde_json::from_slice::<Map<String, Value>>(line).ok());
    let meta = record
        .as_ref()
        .map(|r| read_meta(r, now, &mut repairs))
        .unwrap_or_else(|| SessionMeta::new(now));
    let key = match canonical {
        Some(key) => key,
        None => SessionKey::new(record.as_ref()?.get("key")?.as_str()?).ok()?,
    };
    Some(SessionInfo {
        key,
        created_at: meta.created_at,
        updated_at: meta.updated_at,
        message_count: messages,
        title: info::listing_title(&meta.metadata),
        preview: preview.finish(),
    })
}

//! The listing index of the file backend: listing rows cached beside the session files, so
//! a listing opens only the files that changed since it last looked, and most listings look
//! at no file at all.
//!
//! A row is reused when its file has the same inode, size and modification time as when the
//! row was read, and was last modified well before that read (file systems stamp times
//! with a coarse clock, so a change in the same clock tick as the read is not trusted).
//!
//! Checking every file costs a `stat` each (about a microsecond: 0.1 s for 100,000
//! sessions), so a listing first looks at the directory: a session created, deleted or
//! replaced (nanobot-ai replaces files by rename; our compaction too) changes the
//! directory's modification time, and our own processes touch it when a turn ends (appends
//! and line 1 do not change it). When the directory has not changed since a full check
//! that began well after its last change, and that check is younger than
//! [`FileStoreOptions::listing_recheck`](super::FileStoreOptions), the rows are used as they
//! are, except for files this process wrote since. An edit made in place by another program
//! (an editor) shows at the next full check.
//!
//! The index lives in a directory of its own (`.listing/`), so writing it does not change
//! the sessions directory. It is only a cache: a missing, damaged or foreign index is
//! rebuilt, never trusted.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::NaiveDateTime;

use crate::key::SessionKey;
use crate::store::SessionInfo;

mod codec;

/// The index file, under the sessions directory; nanobot-ai ignores it (it lists
/// `*.jsonl` only).
pub(crate) const INDEX_FILE: &str = ".listing/index.bin";

/// The directory of [`INDEX_FILE`].
pub(crate) const INDEX_DIR: &str = ".listing";

/// Where earlier versions kept the index (as JSON), removed when seen.
const OLD_INDEX_FILES: [&str; 2] = [".listing-index.json", ".listing/index.json"];

/// Changes this close to a read are re-read next time (covers coarse timestamp clocks).
const TIMESTAMP_GUARD: Duration = Duration::from_millis(20);

/// A file's identity and version as `stat` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, PartialEq)]
struct Row {
    key: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
    message_count: usize,
    title: Option<String>,
    preview: String,
}

#[derive(Debug, Clone)]
struct Entry {
    stamp: Stamp,
    /// When the row was read from the file (ns since the epoch).
    read_ns: u64,
    row: Row,
}

impl Entry {
    /// The file (at `stamp`) had last changed well before the row was read.
    fn settled(&self, stamp: Stamp) -> bool {
        stamp
            .modified_ns
            .saturating_add(TIMESTAMP_GUARD.as_nanos() as u64)
            < self.read_ns
    }

    fn info(&self) -> Option<SessionInfo> {
        Some(SessionInfo {
            key: SessionKey::new(self.row.key.clone()).ok()?,
            created_at: self.row.created_at,
            updated_at: self.row.updated_at,
            message_count: self.row.message_count,
            title: self.row.title.clone(),
            preview: self.row.preview.clone(),
        })
    }
}

/// A full check of the directory: its modification time then, and when the check began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirCheck {
    pub(crate) modified_ns: u64,
    pub(crate) checked_ns: u64,
}

/// The cached rows of one directory, by file name.
#[derive(Debug, Default)]
pub(crate) struct ListingIndex {
    entries: HashMap<String, Entry>,
    dir: Option<DirCheck>,
    loaded: bool,
    changed: bool,
}

/// The modification time of `dir` (ns since the epoch).
pub(crate) fn dir_modified_ns(dir: &Path) -> std::io::Result<u64> {
    Ok(fs::metadata(dir)?
        .modified()
        .map(nanos_since_epoch)
        .unwrap_or(0))
}

/// Now, in ns since the epoch (the file system's clock).
pub(crate) fn now_ns() -> u64 {
    nanos_since_epoch(SystemTime::now())
}

/// Marks `dir` as changed for other processes' listings (their cached rows are checked
/// again). A failure only costs them the wait for their next full check.
pub(crate) fn touch_dir(dir: &Path) {
    if let Ok(handle) = fs::File::open(dir) {
        let _ = handle.set_modified(SystemTime::now());
    }
}

impl ListingIndex {
    /// Reads the index file once per store; anything unreadable is an empty index.
    pub(crate) fn load_once(&mut self, dir: &Path) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        if let Ok(bytes) = fsio::read(&dir.join(INDEX_FILE))
            && let Some((check, entries)) = codec::decode(&bytes)
        {
            self.entries = entries;
            self.dir = check;
        }
        for old in OLD_INDEX_FILES {
            if fs::symlink_metadata(dir.join(old)).is_ok() {
                let _ = fsio::remove_file(&dir.join(old));
            }
        }
    }

    /// Whether the rows can be used without a full check: the directory is as the last full
    /// check saw it, had settled before that check began, and the check is recent.
    pub(crate) fn trusts(&self, modified_ns: u64, now_ns: u64, recheck: Duration) -> bool {
        self.dir.is_some_and(|check| {
            check.modified_ns == modified_ns
                && check
                    .modified_ns
                    .saturating_add(TIMESTAMP_GUARD.as_nanos() as u64)
                    < check.checked_ns
                && now_ns.saturating_sub(check.checked_ns) < recheck.as_nanos() as u64
        })
    }

    /// Records a full check.
    pub(crate) fn checked(&mut self, check: DirCheck) {
        if self.dir != Some(check) {
            self.dir = Some(check);
            self.changed = true;
        }
    }

    /// Every row, as cached.
    pub(crate) fn rows(&self) -> Vec<SessionInfo> {
        self.entries.values().filter_map(Entry::info).collect()
    }

    /// The files whose rows need a look of their own even when the directory is trusted:
    /// rows read too close to their file's last change, and `written` files (this process
    /// wrote them: name and size now) whose size differs from the row's.
    pub(crate) fn doubtful(&self, written: &[(String, u64)]) -> Vec<String> {
        let mut doubtful: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| !entry.settled(entry.stamp))
            .map(|(file, _)| file.clone())
            .collect();
        doubtful.extend(
            written
                .iter()
                .filter(|(file, size)| {
                    self.entries
                        .get(file)
                        .is_none_or(|entry| entry.stamp.size != *size)
                })
                .map(|(file, _)| file.clone()),
        );
        doubtful.sort();
        doubtful.dedup();
        doubtful
    }

    /// Forgets the row of a file that is gone.
    pub(crate) fn remove(&mut self, file: &str) {
        self.changed |= self.entries.remove(file).is_some();
    }

    /// Whether the cached row of `file` still describes the file.
    pub(crate) fn is_fresh(&self, file: &str, stamp: Stamp) -> bool {
        self.entries
            .get(file)
            .is_some_and(|entry| entry.stamp == stamp && entry.settled(stamp))
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
        let bytes = codec::encode(self.dir, &self.entries);
        let temp: PathBuf = dir.join(format!("{INDEX_FILE}.{}.tmp", std::process::id()));
        if let Some(parent) = temp.parent()
            && fsio::create_dir_all(parent).is_err()
        {
            return;
        }
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

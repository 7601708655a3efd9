//! The embedded default: nanobot-ai's journal files under `<workspace>/memory/`.
//!
//! - `history.jsonl`: one entry per line, `{"cursor", "timestamp", "content",
//!   "session_key"}` written as Python's `json.dumps` writes them.
//! - `.cursor`: the latest cursor allocated; `.dream_cursor`: Dream's read position.
//!
//! Differences from nanobot-ai, on purpose: appends take an advisory lock (`.history.lock`)
//! so two processes never share a cursor; the journal is parsed once at open and then only
//! what other writers appended is read, so an append costs O(entry); a torn last line is cut
//! and a line that is not a JSON object is moved out of the file, both kept byte for byte in
//! `history.jsonl.damaged` and reported ([`FileJournal::repairs`]); compaction rewrites
//! atomically under the same lock.

use std::fs::{self, File};
use std::io;

use nanobot_fs_support::io::{self as fsio, Open};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use nanobot_llm_port::tokens::to_python_json;
use nanobot_llm_port::{Clock, SystemClock};
use serde_json::{Map, Value};

use crate::archive::{ArchiveFound, ArchiveIndex, ArchiveJournal, matching_archive};
use crate::entry::{JournalEntry, NewEntry};
use crate::error::MemoryError;
use crate::journal::{
    Compaction, HistoryJournal, JournalCapabilities, compaction_start, entries_after,
};
use crate::memory::stamp;

mod lines;
mod ports;

use lines::*;

const HISTORY: &str = "history.jsonl";
const COUNTER: &str = ".cursor";
const DREAM_CURSOR: &str = ".dream_cursor";
const LOCK: &str = ".history.lock";
const SIDECAR: &str = "history.jsonl.damaged";

/// Damage found in the journal, and what was done about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalRepair {
    /// The last line was cut mid-write; it was removed and kept in the sidecar.
    TornTail {
        /// Bytes removed.
        bytes: usize,
    },
    /// A line that is not a JSON object was moved to the sidecar.
    CorruptLine {
        /// Its line number (1-based) in the file as found.
        line: usize,
    },
    /// A JSON object that is not a valid entry (no cursor, wrong types) stays in the file
    /// but is not read, as nanobot-ai does.
    InvalidEntry {
        /// Its line number (1-based).
        line: usize,
        /// Which rule it breaks.
        reason: String,
    },
}

/// Whether journal writes are synced to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JournalDurability {
    /// Never fsync appends (nanobot-ai's behaviour); rewrites are always synced.
    #[default]
    None,
    /// fsync every append (the entries of one append share one fsync).
    Always,
}

#[derive(Debug, Default)]
struct State {
    /// The history file opened for appending, and the identity it was opened at.
    appender: Option<(File, u64)>,
    /// `.cursor`, kept open: cursors only grow, so each new value overwrites the old one.
    counter: Option<File>,
    entries: Vec<JournalEntry>,
    /// The highest cursor ever seen or allocated.
    latest: u64,
    /// The history file as last read: identity and length.
    seen: Option<(u64, u64)>,
    repairs: Vec<JournalRepair>,
    /// Archives by session and first message.
    index: ArchiveIndex,
}

/// The journal in `<workspace>/memory/`.
pub struct FileJournal {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    durability: JournalDurability,
    state: Mutex<State>,
    /// The cross-process lock file, kept open: each operation locks and unlocks it.
    lock: File,
}

/// Holds the cross-process lock until dropped.
struct Held<'a>(&'a File);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl std::fmt::Debug for FileJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileJournal")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl FileJournal {
    /// Opens (creating `memory/` if needed) the journal of `workspace`, repairing what a
    /// crash or a hand edit left.
    pub fn open(workspace: &Path) -> Result<Self, MemoryError> {
        Self::open_with(
            workspace,
            Arc::new(SystemClock),
            JournalDurability::default(),
        )
    }

    /// [`FileJournal::open`] with a clock for timestamps and a durability policy.
    pub fn open_with(
        workspace: &Path,
        clock: Arc<dyn Clock>,
        durability: JournalDurability,
    ) -> Result<Self, MemoryError> {
        let dir = workspace.join("memory");
        nanobot_fs_support::create_dir_durable(&dir)?;
        let lock_path = dir.join(LOCK);
        let lock = fsio::open(&lock_path, Open::WRITE_OR_CREATE)
            .map_err(|e| MemoryError::io("open", &lock_path, e))?;
        let journal = FileJournal {
            dir,
            clock,
            durability,
            state: Mutex::new(State::default()),
            lock,
        };
        {
            let mut state = journal.state();
            let _held = journal.hold()?;
            journal.refresh(&mut state)?;
        }
        Ok(journal)
    }

    /// Whether the journal of `workspace` may hold entries Dream has not read, from the two
    /// cursor files alone (no journal read, no lock): a scheduler's cheap test before it
    /// opens a scope. A journal without `.cursor` but with history (written by another
    /// program) answers yes, and the run itself decides.
    pub fn may_have_unread_entries(workspace: &Path) -> Result<bool, MemoryError> {
        let dir = workspace.join("memory");
        let (latest, dream) = Self::peek_cursors(workspace)?;
        Ok(match latest {
            Some(latest) => latest > dream,
            None => fs::metadata(dir.join(HISTORY)).is_ok_and(|m| m.len() > 0),
        })
    }

    /// The latest cursor as `.cursor` records it (`None`: no such file) and Dream's cursor,
    /// read from the two small files without opening the journal.
    pub fn peek_cursors(workspace: &Path) -> Result<(Option<u64>, u64), MemoryError> {
        let dir = workspace.join("memory");
        Ok((
            read_number(&dir.join(COUNTER))?,
            read_number(&dir.join(DREAM_CURSOR))?.unwrap_or(0),
        ))
    }

    /// What opening and later reads repaired.
    pub fn repairs(&self) -> Vec<JournalRepair> {
        self.state().repairs.clone()
    }

    /// The directory holding the journal files (`<workspace>/memory`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the cross-process lock every operation holds (after the in-process one).
    fn hold(&self) -> Result<Held<'_>, MemoryError> {
        self.lock
            .lock()
            .map_err(|e| MemoryError::io("lock", self.path(LOCK), e))?;
        Ok(Held(&self.lock))
    }

    /// Brings `state` up to date with the file: nothing when it did not change, the new
    /// lines when another writer appended, everything (with repairs) otherwise.
    fn refresh(&self, state: &mut State) -> Result<(), MemoryError> {
        let path = self.path(HISTORY);
        let current = match fs::metadata(&path) {
            Ok(meta) => Some((identity(&meta), meta.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(MemoryError::io("inspect", &path, e)),
        };
        if current == state.seen && current.is_some() {
            return Ok(());
        }
        // Dream's cursor counts as a cursor seen: a history cut back below it (restored
        // from an older copy, edited by hand) must not hand out numbers Dream has passed,
        // or Dream would never read the entries that get them.
        let counter = read_number(&self.path(COUNTER))?
            .unwrap_or(0)
            .max(read_number(&self.path(DREAM_CURSOR))?.unwrap_or(0));
        let Some((id, len)) = current else {
            state.entries.clear();
            state.index.clear();
            state.latest = state.latest.max(counter);
            state.seen = None;
            return Ok(());
        };
        let grown =
            matches!(state.seen, Some((seen_id, seen_len)) if seen_id == id && seen_len < len);
        let from = if grown {
            state.seen.map_or(0, |(_, l)| l)
        } else {
            0
        };
        if !grown {
            state.entries.clear();
            state.index.clear();
        }
        let mut file =
            fsio::open(&path, Open::READ).map_err(|e| MemoryError::io("open", &path, e))?;
        let bytes = fsio::read_from(&mut file, &path, from)
            .map_err(|e| MemoryError::io("read", &path, e))?;

        let after = if grown {
            state.entries.last().map_or(0, |e| e.cursor)
        } else {
            0
        };
        let mut parsed = parse(&bytes, 0, after);
        if grown && !parsed.corrupt.is_empty() {
            // Damage in what another writer appended: repair the whole file in one pass.
            state.seen = None;
            state.entries.clear();
            state.index.clear();
            return self.refresh(state);
        }
        for entry in &parsed.entries {
            state.index.add(entry);
        }
        state.entries.extend(std::mem::take(&mut parsed.entries));
        state.repairs.extend(std::mem::take(&mut parsed.repairs));
        self.mend(&path, &bytes, from, &parsed)?;
        let scan_max = state.entries.iter().map(|e| e.cursor).max().unwrap_or(0);
        state.latest = state
            .latest
            .max(counter)
            .max(scan_max)
            .max(parsed.max_object_cursor);
        let meta = fs::metadata(&path).map_err(|e| MemoryError::io("inspect", &path, e))?;
        state.seen = Some((identity(&meta), meta.len()));
        Ok(())
    }

    /// Keeps damaged and torn bytes aside, then mends the file: damaged lines rewritten
    /// away, a torn last line cut, an unterminated last line finished.
    fn mend(
        &self,
        path: &Path,
        bytes: &[u8],
        from: u64,
        parsed: &Parsed,
    ) -> Result<(), MemoryError> {
        let mut aside: Vec<(String, Vec<u8>)> = parsed
            .corrupt
            .iter()
            .map(|(line, raw)| (format!("line {line}"), raw.clone()))
            .collect();
        if let Some(torn) = parsed.torn {
            aside.push(("torn last line".into(), bytes[torn..].to_vec()));
        }
        self.keep_aside(&aside)?;
        if !parsed.corrupt.is_empty() {
            // Rewrite without the damaged lines (kept in the sidecar now).
            let keep = parsed.kept_lines.iter().map(|range| &bytes[range.clone()]);
            self.rewrite(keep)?;
        } else if let Some(torn) = parsed.torn {
            let file =
                fsio::open(path, Open::READ_WRITE).map_err(|e| MemoryError::io("open", path, e))?;
            fsio::set_len(&file, path, from + torn as u64)
                .map_err(|e| MemoryError::io("cut the torn line of", path, e))?;
        } else if parsed.unterminated {
            let mut file =
                fsio::open(path, Open::READ_WRITE).map_err(|e| MemoryError::io("open", path, e))?;
            fsio::append(&mut file, path, b"\n")
                .map_err(|e| MemoryError::io("finish the last line of", path, e))?;
        }
        Ok(())
    }

    /// Appends `entries` with the locks held and `state` fresh.
    fn append_locked(
        &self,
        state: &mut State,
        entries: &[NewEntry<'_>],
    ) -> Result<Vec<u64>, MemoryError> {
        let timestamp = stamp(self.clock.as_ref());
        // A cursor file or line damaged into a number near u64::MAX would make the next
        // cursors wrap to 0 and be handed out again (found by fuzzing): refuse instead.
        if state.latest.checked_add(entries.len() as u64).is_none() {
            return Err(MemoryError::InvalidFile {
                path: self.dir.clone(),
                reason: format!(
                    "the journal's cursors are used up (the latest is {}): a cursor in \
                     `.cursor`, `.dream_cursor` or history.jsonl this high is damaged; set it \
                     back to the highest cursor history.jsonl really holds",
                    state.latest
                ),
            });
        }
        let mut out = String::new();
        let mut written = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let entry = entry.stored(state.latest + 1 + i as u64, &timestamp);
            out.push_str(&entry_line(&entry));
            out.push('\n');
            written.push(entry);
        }
        if written.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.path(HISTORY);
        let identity_now = state.seen.map(|(id, _)| id);
        if state.appender.as_ref().map(|(_, id)| Some(*id)) != Some(identity_now) {
            let existed = path.exists();
            let file = fsio::open(&path, Open::APPEND_OR_CREATE)
                .map_err(|e| MemoryError::io("open", &path, e))?;
            if !existed && self.durability == JournalDurability::Always {
                // A new file's name must survive a power loss as its synced entries do.
                nanobot_fs_support::sync_dir(&self.dir)?;
            }
            let meta = file
                .metadata()
                .map_err(|e| MemoryError::io("inspect", &path, e))?;
            state.seen = Some((identity(&meta), meta.len()));
            state.appender = Some((file, identity(&meta)));
        }
        let Some((file, id)) = state.appender.as_mut() else {
            return Err(MemoryError::backend("the journal file is not open"));
        };
        let id = *id;
        fsio::append(file, &path, out.as_bytes())
            .map_err(|e| MemoryError::io("append to", &path, e))?;
        if self.durability == JournalDurability::Always {
            fsio::sync_data(file, &path).map_err(|e| MemoryError::io("sync", &path, e))?;
        }
        let cursors: Vec<u64> = written.iter().map(|e| e.cursor).collect();
        state.latest = cursors.last().copied().unwrap_or(state.latest);
        for entry in &written {
            state.index.add(entry);
        }
        state.entries.extend(written);
        let len = state.seen.map_or(0, |(_, len)| len) + out.len() as u64;
        state.seen = Some((id, len));
        self.write_counter(state)?;
        Ok(cursors)
    }

    /// Copies `entries` (from another journal, in cursor order) with their own cursors,
    /// timestamps and every field, skipping those at or below the latest cursor already
    /// here (so a copy can be run again, or resumed); then raises the latest cursor
    /// (`.cursor`) to `latest` and Dream's cursor to `dream_cursor` (never past the
    /// latest). How many were copied.
    pub fn import(
        &self,
        entries: &[JournalEntry],
        latest: u64,
        dream_cursor: u64,
    ) -> Result<usize, MemoryError> {
        let mut state = self.state();
        let _held = self.hold()?;
        self.refresh(&mut state)?;
        let fresh: Vec<&JournalEntry> =
            entries.iter().filter(|e| e.cursor > state.latest).collect();
        if !fresh.is_empty() {
            let path = self.path(HISTORY);
            let mut out = String::new();
            for entry in &fresh {
                out.push_str(&entry_line(entry));
                out.push('\n');
            }
            let mut file = fsio::open(&path, Open::APPEND_OR_CREATE)
                .map_err(|e| MemoryError::io("open", &path, e))?;
            fsio::append(&mut file, &path, out.as_bytes())
                .and_then(|_| fsio::sync_data(&file, &path))
                .map_err(|e| MemoryError::io("append to", &path, e))?;
            state.seen = None;
            state.appender = None;
            self.refresh(&mut state)?;
        }
        state.latest = state.latest.max(latest);
        self.write_counter(&mut state)?;
        let current = read_number(&self.path(DREAM_CURSOR))?.unwrap_or(0);
        let dream = dream_cursor.min(state.latest);
        if dream > current {
            self.write_number_atomic(DREAM_CURSOR, dream)?;
        }
        Ok(fresh.len())
    }

    fn keep_aside(&self, pieces: &[(String, Vec<u8>)]) -> Result<(), MemoryError> {
        let stamp = stamp(self.clock.as_ref());
        Ok(nanobot_fs_support::keep_aside(
            &self.path(SIDECAR),
            &stamp,
            pieces,
        )?)
    }

    /// Replaces `history.jsonl` with `lines` atomically (temporary file, fsync, rename,
    /// directory fsync).
    fn rewrite<'a>(&self, lines: impl Iterator<Item = &'a [u8]>) -> Result<(), MemoryError> {
        let mut out = Vec::new();
        for line in lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        Ok(nanobot_fs_support::write_atomic(
            &self.path(HISTORY),
            &out,
            nanobot_fs_support::Sync::Yes,
        )?)
    }

    /// Records the latest cursor in `.cursor` (nanobot-ai's counter). The file stays open;
    /// a value never has fewer digits than the one before, so writing it at offset 0
    /// replaces it.
    fn write_counter(&self, state: &mut State) -> Result<(), MemoryError> {
        let path = self.path(COUNTER);
        let digits = state.latest.to_string();
        if state.counter.is_none() {
            let file = fsio::open(&path, Open::WRITE_OR_CREATE)
                .map_err(|e| MemoryError::io("open", &path, e))?;
            // Whatever was there (a smaller value, or garbage) goes, after the new value is
            // in: the file is never empty in between.
            fsio::write_at(&file, &path, 0, digits.as_bytes())
                .and_then(|()| fsio::set_len(&file, &path, digits.len() as u64))
                .map_err(|e| MemoryError::io("write", &path, e))?;
            state.counter = Some(file);
            return Ok(());
        }
        let Some(file) = state.counter.as_ref() else {
            return Ok(());
        };
        fsio::write_at(file, &path, 0, digits.as_bytes())
            .map_err(|e| MemoryError::io("write", &path, e))
    }

    /// Replaces a small number file atomically (temporary file, fsync, rename).
    fn write_number_atomic(&self, name: &str, value: u64) -> Result<(), MemoryError> {
        Ok(nanobot_fs_support::write_atomic(
            &self.path(name),
            value.to_string().as_bytes(),
            nanobot_fs_support::Sync::Yes,
        )?)
    }
}

#[cfg(unix)]
fn identity(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn identity(_meta: &fs::Metadata) -> u64 {
    0
}

//! The embedded default backend: one JSONL file per session, nanobot-ai's format, written
//! by appending.
//!
//! # Format
//!
//! `<dir>/<unpadded base64url of the key>.jsonl`, as nanobot-ai names them. Line 1 is a
//! metadata record (`{"_type": "metadata", "key", "created_at", "updated_at", "metadata",
//! "last_archived", "last_consolidated"}`, the fields nanobot-ai 0.3.5 writes), then one
//! message per line, written the way Python's `json.dumps(ensure_ascii=False)` writes them.
//!
//! # Appending instead of rewriting
//!
//! A save writes the new messages and, when metadata changed, a new metadata record at the
//! end of the file: O(change), not O(session). Every reader (ours and nanobot-ai's loader)
//! takes the *last* metadata record. nanobot-ai's listing reads line 1 only, so line 1 is
//! padded with spaces and rewritten in place by [`SessionStore::flush`] (turn end, idle,
//! shutdown); when it outgrows its padding, or superseded records make up most of the file,
//! flush compacts the file atomically (temporary file, fsync, rename, directory fsync).
//!
//! # Crashes and damage
//!
//! A torn last line (a crash mid-append) is cut off on load; an undecodable line elsewhere is
//! moved out of the file; both go, byte for byte, to `<file>.damaged` beside it, and each
//! repair is reported in [`Loaded::repairs`]. The session still opens.
//!
//! Line 1 is never the only copy of the metadata when it is rewritten in place: a write that
//! spans sectors can be torn by a power loss, so when no record after line 1 holds the
//! metadata yet (a new or compacted file), flush appends one, synced, before the rewrite.
//! A torn line 1 is then rebuilt from that record ([`Repair::TornLine1`]), losing nothing.
//!
//! # Several processes
//!
//! Every operation holds an advisory lock (`flock`) on the session file, and every write
//! checks the [`Revision`] (file identity and length) it was given: a stale writer gets
//! [`SessionError::Conflict`] and writes nothing. In nanobot-ai's layout the namespace lock
//! file nanobot-ai itself uses is taken as well, so both programs can share a workspace.

// One module per job: `lock` (flock, namespace lock, revisions), `tail` (reading the end
// from line 1's mark), `format` (rendering nanobot-ai's JSONL, padded line 1), `parse`
// (parsing and repairing), `write` (atomic installs, sidecars, compaction), `listing` (the
// listing index and rows), `layout` (nanobot-ai's namespace and workspace id), `store` (the
// port over all of them).
mod format;
mod layout;
mod listing;
mod lock;
mod open;
mod parse;
mod store;
mod tail;
mod write;

use format::*;
use layout::*;
use listing::list_row;
use lock::*;
use parse::*;
use tail::*;

use std::collections::HashMap;
use std::fs::{self, File};
use std::hash::{BuildHasher, RandomState};
use std::io;

use nanobot_fs_support::io::{self as fsio, Open};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::NaiveDateTime;
use nanobot_llm_port::tokens::to_python_json;
use nanobot_llm_port::{Clock, SystemClock};
use serde_json::{Map, Value};

use crate::error::SessionError;
use crate::info;
use crate::key::SessionKey;
use crate::memory::sort_listing;
use crate::message::StoredMessage;
use crate::replay::{ReplayView, replay_floor};
use crate::session::{Session, SessionMeta, local_naive, parse_isoformat, python_isoformat};
use crate::store::{Append, Loaded, Repair, Revision, SessionInfo, SessionStore, TurnLock};
use listing::{ListingIndex, Stamp};

/// How long a listing trusts an unchanged directory before it checks every file again.
const LISTING_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// The unit a disk writes whole: a write that spans several may reach the disk in part,
/// whole sectors at a time.
const SECTOR: usize = 512;

/// Superseded records below this many bytes are never worth a compaction.
const COMPACT_MIN_DEAD_BYTES: u64 = 64 * 1024;

pub(crate) use crate::durability::Durability;

/// How a [`FileSessionStore`] behaves.
#[derive(Clone)]
#[non_exhaustive]
pub struct FileStoreOptions {
    /// When writes reach stable storage.
    pub durability: Durability,
    /// The time used for timestamps a damaged file lacks.
    pub clock: Arc<dyn Clock>,
    /// How long a listing trusts its cached rows while the directory is unchanged, before
    /// it looks at every file again (an edit made in place by another program shows by
    /// then). Default 10 s; zero checks every file at every listing.
    pub listing_recheck: std::time::Duration,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        FileStoreOptions {
            durability: Durability::default(),
            clock: Arc::new(SystemClock),
            listing_recheck: LISTING_RECHECK,
        }
    }
}

impl FileStoreOptions {
    /// The same options with `durability`.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same options with listings that look at every file after `recheck`.
    pub fn listing_recheck(mut self, recheck: std::time::Duration) -> Self {
        self.listing_recheck = recheck;
        self
    }

    /// The same options with timestamps from `clock`.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

impl std::fmt::Debug for FileStoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStoreOptions")
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

/// What this process knows about one file, valid while the file is at `revision`.
#[derive(Debug, Clone)]
struct FileState {
    revision: Revision,
    messages: usize,
    /// The latest metadata record as written (no padding, no newline).
    meta_line: String,
    provider_state: Option<Value>,
    /// Bytes of line 1, padding included, newline excluded.
    line1_capacity: usize,
    line1_current: bool,
    /// A metadata record after line 1 holds the current metadata, so line 1 is not its only
    /// copy and may be rewritten in place: a crash that tears line 1 then loses nothing.
    meta_after_line1: bool,
    /// Bytes of superseded metadata and provider-state records after line 1.
    dead_bytes: u64,
    /// The metadata `meta_line` records, when known.
    recorded: Option<SessionMeta>,
    /// A newer `updated_at` not worth a record of its own (the only change since
    /// `recorded`): written into line 1 at flush.
    pending_updated_at: Option<NaiveDateTime>,
    /// The (messages, bytes) mark line 1 carries, if any (see [`TailMark`]).
    line1_mark: Option<TailMark>,
    /// The revision the directory was last touched at for other listings (see `listing`).
    touched_at: Option<Revision>,
}

/// What line 1 records about the file for [`FileSessionStore::open_for_replay`]: at `bytes`
/// bytes the file held `messages` messages. nanobot-ai ignores the field (and drops it when
/// it rewrites a file, which makes us read the whole file again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TailMark {
    messages: usize,
    bytes: u64,
}

const TAIL_MARK_FIELD: &str = "_nanobot_rs";

/// Sessions as JSONL files in one directory.
pub struct FileSessionStore {
    dir: PathBuf,
    options: FileStoreOptions,
    /// nanobot-ai's `.session-files.lock`, in its layout.
    namespace_lock: Option<PathBuf>,
    states: Mutex<HashMap<SessionKey, FileState>>,
    listing: Mutex<ListingIndex>,
    /// Session files kept open between appends.
    kept: open::KeptFiles,
    /// A contract rule switched off, to show that the campaign notices (tests only).
    broken: Option<BrokenRule>,
}

/// A rule of the file format that a test can switch off ([`FileSessionStore::broken`],
/// feature `conformance`), so the reliability campaign shows it notices when the store
/// breaks it. Never for real use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(feature = "conformance"), allow(unreachable_pub, dead_code))]
pub enum BrokenRule {
    /// Line 1 is updated in place only when the new record fits its bytes. Broken: a longer
    /// record is written over the start of the next line.
    Line1Overrun,
    /// A new or rewritten session file is synced and then given its name, and the directory
    /// is synced so the name survives a power loss. Broken: the directory is not synced.
    SkipDirSync,
}

impl std::fmt::Debug for FileSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSessionStore")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl FileSessionStore {
    /// Sessions in `dir` (created if missing).
    pub fn open(dir: impl Into<PathBuf>, options: FileStoreOptions) -> Result<Self, SessionError> {
        let dir = dir.into();
        nanobot_fs_support::create_dir_durable(&dir)?;
        // The listing index's own directory, made now so that writing the index later never
        // changes the sessions directory (listings trust an unchanged one). Without it (a
        // read-only directory) listings check every file.
        let _ = fsio::create_dir_all(&dir.join(listing::INDEX_DIR));
        Ok(FileSessionStore {
            dir,
            options,
            namespace_lock: None,
            states: Mutex::new(HashMap::new()),
            listing: Mutex::new(ListingIndex::default()),
            kept: Mutex::default(),
            broken: None,
        })
    }

    /// [`FileSessionStore::open`] with one rule of the format switched off, to show that a
    /// test notices (feature `conformance`; never for real use).
    #[cfg(feature = "conformance")]
    pub fn broken(
        dir: impl Into<PathBuf>,
        options: FileStoreOptions,
        rule: BrokenRule,
    ) -> Result<Self, SessionError> {
        let mut store = Self::open(dir, options)?;
        store.broken = Some(rule);
        Ok(store)
    }

    /// The embedded default: `<workspace>/sessions/`.
    pub fn open_workspace(
        workspace: &Path,
        options: FileStoreOptions,
    ) -> Result<Self, SessionError> {
        Self::open(workspace.join("sessions"), options)
    }

    /// [`FileSessionStore::open_workspace`] when the workspace has sessions, without
    /// creating anything (`None`: it has none): for listings, which must not write.
    pub fn open_workspace_if_present(
        workspace: &Path,
        options: FileStoreOptions,
    ) -> Result<Option<Self>, SessionError> {
        if !workspace.join("sessions").is_dir() {
            return Ok(None);
        }
        Self::open_workspace(workspace, options).map(Some)
    }

    /// nanobot-ai's own layout, so an existing nanobot workspace continues where it stopped:
    /// `<sessions_root>/<workspace id>/`, where the id is kept in
    /// `<workspace>/.nanobot/workspace-id` (created, recovered or re-issued for a copied
    /// workspace exactly as nanobot-ai does) and `<sessions_root>` is nanobot-ai's data
    /// directory for sessions (`~/.nanobot/sessions` by default), outside the workspace.
    pub fn open_nanobot(
        workspace: &Path,
        sessions_root: &Path,
        options: FileStoreOptions,
    ) -> Result<Self, SessionError> {
        let dir = nanobot_namespace(workspace, sessions_root)?;
        let mut store = Self::open(&dir, options)?;
        store.namespace_lock = Some(dir.join(".session-files.lock"));
        Ok(store)
    }

    /// The directory holding the session files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`.
    pub fn path_of(&self, key: &SessionKey) -> PathBuf {
        self.dir.join(format!("{}.jsonl", key.storage_stem()))
    }

    /// The lock file of `key`'s turns: `<dir>/.turns/<stem>.lock`, beside the session files
    /// but in a directory of its own, which nanobot-ai's listing does not read.
    pub fn turn_lock_of(&self, key: &SessionKey) -> PathBuf {
        self.dir
            .join(".turns")
            .join(format!("{}.lock", key.storage_stem()))
    }

    /// The file damaged bytes of `key` are kept in.
    pub fn sidecar_of(&self, key: &SessionKey) -> PathBuf {
        self.dir
            .join(format!("{}.jsonl.damaged", key.storage_stem()))
    }

    fn now(&self) -> NaiveDateTime {
        local_naive(self.options.clock.now())
    }

    fn state(&self, key: &SessionKey, revision: Revision) -> Option<FileState> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.get(key).filter(|s| s.revision == revision).cloned()
    }

    fn remember(&self, key: &SessionKey, state: FileState) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.insert(key.clone(), state);
    }

    /// The state of `key` at `revision`, taken out (put it back with `remember`).
    fn take_state(&self, key: &SessionKey, revision: Revision) -> Option<FileState> {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if states.get(key).is_some_and(|s| s.revision == revision) {
            states.remove(key)
        } else {
            None
        }
    }

    fn forget(&self, key: &SessionKey) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.remove(key);
    }
}

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
//! # Several processes
//!
//! Every operation holds an advisory lock (`flock`) on the session file, and every write
//! checks the [`Revision`] (file identity and length) it was given: a stale writer gets
//! [`SessionError::Conflict`] and writes nothing. In nanobot-ai's layout the namespace lock
//! file nanobot-ai itself uses is taken as well, so both programs can share a workspace.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::NaiveDateTime;
use llm_port::tokens::to_python_json;
use llm_port::{Clock, SystemClock};
use serde_json::{Map, Value};

use crate::error::SessionError;
use crate::info;
use crate::key::SessionKey;
use crate::listing::{ListingIndex, Stamp};
use crate::memory::sort_listing;
use crate::message::StoredMessage;
use crate::replay::{ReplayView, replay_floor};
use crate::session::{Session, SessionMeta, local_naive, parse_isoformat, python_isoformat};
use crate::store::{Append, Loaded, Repair, Revision, SessionInfo, SessionStore, TurnLock};

/// Superseded records below this many bytes are never worth a compaction.
const COMPACT_MIN_DEAD_BYTES: u64 = 64 * 1024;

/// When session writes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Never fsync: the OS writes back when it likes. A power loss can lose recent turns
    /// (a process crash cannot).
    None,
    /// fsync at [`SessionStore::flush`], which the manager calls at the end of each turn.
    #[default]
    TurnEnd,
    /// fsync every write (the messages of one save share one fsync).
    Always,
}

/// How a [`FileSessionStore`] behaves.
#[derive(Clone)]
pub struct FileStoreOptions {
    /// When writes reach stable storage.
    pub durability: Durability,
    /// The time used for timestamps a damaged file lacks.
    pub clock: Arc<dyn Clock>,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        FileStoreOptions {
            durability: Durability::default(),
            clock: Arc::new(SystemClock),
        }
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
    /// Bytes of superseded metadata and provider-state records after line 1.
    dead_bytes: u64,
    /// The metadata `meta_line` records, when known.
    recorded: Option<SessionMeta>,
    /// A newer `updated_at` not worth a record of its own (the only change since
    /// `recorded`): written into line 1 at flush.
    pending_updated_at: Option<NaiveDateTime>,
    /// The (messages, bytes) mark line 1 carries, if any (see [`TailMark`]).
    line1_mark: Option<TailMark>,
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
        fs::create_dir_all(&dir)
            .map_err(|e| SessionError::io("create the sessions directory", &dir, e))?;
        Ok(FileSessionStore {
            dir,
            options,
            namespace_lock: None,
            states: Mutex::new(HashMap::new()),
            listing: Mutex::new(ListingIndex::default()),
        })
    }

    /// The embedded default: `<workspace>/sessions/`.
    pub fn open_workspace(
        workspace: &Path,
        options: FileStoreOptions,
    ) -> Result<Self, SessionError> {
        Self::open(workspace.join("sessions"), options)
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

    fn forget(&self, key: &SessionKey) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.remove(key);
    }

    /// nanobot-ai's namespace lock, in its layout.
    fn lock_namespace(&self) -> Result<Option<File>, SessionError> {
        let Some(path) = &self.namespace_lock else {
            return Ok(None);
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| SessionError::io("open the namespace lock", path, e))?;
        file.lock()
            .map_err(|e| SessionError::io("lock the namespace", path, e))?;
        Ok(Some(file))
    }

    /// Opens and locks the file at `path`, making sure the lock is on the file the path
    /// names now (a rename by another writer replaces it).
    fn open_locked(&self, path: &Path) -> Result<Option<Locked>, SessionError> {
        loop {
            let namespace = self.lock_namespace()?;
            let file = match OpenOptions::new().read(true).write(true).open(path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(SessionError::io("open", path, e)),
            };
            file.lock().map_err(|e| SessionError::io("lock", path, e))?;
            let held = revision_of(&file, path)?;
            match fs::metadata(path) {
                Ok(now) if identity(&now) == held.epoch => {
                    return Ok(Some(Locked {
                        file,
                        _namespace: namespace,
                    }));
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(SessionError::io("inspect", path, e)),
            }
        }
    }

    fn sync_dir(&self) -> Result<(), SessionError> {
        if self.options.durability == Durability::None {
            return Ok(());
        }
        Ok(fs_support::sync_dir(&self.dir)?)
    }

    /// Writes `content` as the file of `key` through a temporary file and a rename (or, when
    /// `create_only`, a hard link that fails if the file exists). Returns the new file's
    /// revision.
    fn install(
        &self,
        path: &Path,
        content: &[u8],
        create_only: bool,
    ) -> Result<Revision, SessionError> {
        let how = if create_only {
            fs_support::Install::CreateNew
        } else {
            fs_support::Install::Replace
        };
        let sync = if self.options.durability == Durability::None {
            fs_support::Sync::No
        } else {
            fs_support::Sync::Yes
        };
        Ok(revision_from(&fs_support::install(
            path, content, how, sync,
        )?))
    }

    /// Creates the file of a new session whole, or fails with a conflict if it exists.
    fn create(
        &self,
        key: &SessionKey,
        path: &Path,
        content: Rendered,
        messages: usize,
    ) -> Result<Revision, SessionError> {
        let revision = self
            .install(path, content.bytes.as_bytes(), true)
            .map_err(|e| match e {
                SessionError::Io { source, .. }
                    if source.kind() == io::ErrorKind::AlreadyExists =>
                {
                    conflict(key, None, None)
                }
                other => other,
            })?;
        self.remember(key, content.state(revision, messages));
        Ok(revision)
    }

    /// Keeps damaged bytes beside the session file.
    fn keep_aside(
        &self,
        key: &SessionKey,
        pieces: &[(String, Vec<u8>)],
    ) -> Result<(), SessionError> {
        let stamp = python_isoformat(self.now());
        Ok(fs_support::keep_aside(
            &self.sidecar_of(key),
            &stamp,
            pieces,
        )?)
    }

    /// Reads and parses a locked file, repairing what needs repair (in the file too).
    fn read_locked(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &mut Locked,
    ) -> Result<Loaded, SessionError> {
        let mut bytes = Vec::new();
        locked
            .file
            .read_to_end(&mut bytes)
            .map_err(|e| SessionError::io("read", path, e))?;
        let mut parsed = parse(&bytes, self.now());
        check_recorded_key(key, path, &parsed)?;

        let mut revision = revision_of(&locked.file, path)?;
        let mut aside = Vec::new();
        if let Some(torn) = parsed.torn.take() {
            aside.push(("torn last line".to_owned(), bytes[torn..].to_vec()));
            parsed.repairs.push(Repair::TornTail {
                bytes: bytes.len() - torn,
            });
            locked
                .file
                .set_len(torn as u64)
                .map_err(|e| SessionError::io("cut the torn line of", path, e))?;
            revision = revision_of(&locked.file, path)?;
        } else if parsed.unterminated {
            // A complete record without its newline: finish the line so appends stay valid.
            locked
                .file
                .write_all_at_end(b"\n")
                .map_err(|e| SessionError::io("finish the last line of", path, e))?;
            revision = revision_of(&locked.file, path)?;
        }
        for (line, reason, raw) in &parsed.corrupt {
            aside.push((format!("line {line}: {reason}"), raw.clone()));
        }
        self.keep_aside(key, &aside)?;

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
            revision = self.install(path, content.bytes.as_bytes(), false)?;
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
                    dead_bytes: parsed.dead_bytes,
                    recorded: parsed.meta,
                    pending_updated_at: None,
                    line1_mark: parsed.line1_mark,
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
    fn state_locked(
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

    /// The replay view of a locked file from its line 1, what was appended since line 1's
    /// mark, and as many older lines as replay needs, read backwards. `None` when the file
    /// does not allow it (no mark: written by nanobot-ai or damaged), and the caller loads it
    /// whole.
    #[cfg(unix)]
    fn read_tail(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &Locked,
    ) -> Result<Option<ReplayView>, SessionError> {
        use std::os::unix::fs::FileExt;
        const CHUNK: u64 = 64 * 1024;
        let revision = revision_of(&locked.file, path)?;
        let len = revision.offset;
        let read = |from: u64, to: u64| -> Result<Vec<u8>, SessionError> {
            let mut buf = vec![0u8; usize::try_from(to - from).unwrap_or(0)];
            locked
                .file
                .read_exact_at(&mut buf, from)
                .map_err(|e| SessionError::io("read", path, e))?;
            Ok(buf)
        };
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if SessionKey::is_hashed_stem(stem) {
            return Ok(None);
        }
        let head = read(0, len.min(CHUNK))?;
        let Some(end1) = memchr::memchr(b'\n', &head) else {
            return Ok(None);
        };
        let Ok(line1) = serde_json::from_slice::<Map<String, Value>>(&head[..end1]) else {
            return Ok(None);
        };
        let Some(mark) = read_mark(&line1).filter(|m| {
            line1.get("_type") == Some(&json_str("metadata"))
                && m.bytes <= len
                && m.bytes > end1 as u64
        }) else {
            return Ok(None);
        };
        let now = self.now();
        let mut ignored = Vec::new();
        let mut meta = read_meta(&line1, now, &mut ignored);
        let mut latest_update = meta.updated_at;
        // Line 2 may hold the provider state.
        let body_start = end1 as u64 + 1;
        let rest = &head[end1 + 1..];
        if let Some(end2) = memchr::memchr(b'\n', rest)
            && is_typed_record_bytes(&rest[..end2])
            && let Ok(record) = serde_json::from_slice::<Map<String, Value>>(&rest[..end2])
            && record.get("_type") == Some(&json_str("provider_state"))
        {
            meta.provider_state = record.get("state").filter(|s| s.is_object()).cloned();
        }

        // What was appended since the mark: new messages and newer records.
        let since = read(mark.bytes, len)?;
        let mut newer = Vec::new();
        for line in since.split(|&b| b == b'\n') {
            let Ok(text) = std::str::from_utf8(line) else {
                return Ok(None);
            };
            if text.trim().is_empty() {
                continue;
            }
            if is_typed_record(text) {
                let Ok(record) = serde_json::from_str::<Map<String, Value>>(text) else {
                    return Ok(None);
                };
                match record.get("_type").and_then(Value::as_str) {
                    Some("metadata") => {
                        let state = meta.provider_state.take();
                        meta = read_meta(&record, now, &mut ignored);
                        meta.provider_state = state;
                        latest_update = latest_update.max(meta.updated_at);
                    }
                    Some("provider_state") => {
                        meta.provider_state =
                            record.get("state").filter(|s| s.is_object()).cloned();
                    }
                    _ => newer.push(StoredMessage::from_map(record)),
                }
                continue;
            }
            match StoredMessage::from_json_text(text) {
                Ok(message) => newer.push(message),
                // A torn last line is not a message; anything else needs the full loader.
                Err(_) if std::ptr::eq(line.as_ptr_range().end, since.as_ptr_range().end) => {}
                Err(_) => return Ok(None),
            }
        }
        meta.updated_at = meta.updated_at.max(latest_update);
        let total = mark.messages + newer.len();
        if meta.last_consolidated > total {
            meta.last_consolidated = 0;
        }
        let floor = replay_floor(total, meta.last_consolidated);

        // Older messages, newest first, until the tail reaches the floor and a user turn at
        // or below it (with the message before that turn).
        let mut older: Vec<StoredMessage> = Vec::new();
        let mut index = mark.messages;
        let mut user_below_floor: Option<usize> = None;
        let mut pos = mark.bytes;
        let mut carry: Vec<u8> = Vec::new();
        let satisfied = |index: usize, user: Option<usize>| {
            index == 0 || (index <= floor && user.is_some_and(|u| index < u))
        };
        while !satisfied(index, user_below_floor) && pos > body_start {
            let from = pos.saturating_sub(CHUNK).max(body_start);
            let mut chunk = read(from, pos)?;
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
            // The file does not hold what its mark says.
            return Ok(None);
        }
        older.reverse();
        older.extend(newer);
        Ok(Some(ReplayView {
            key: key.clone(),
            meta,
            message_count: total,
            tail_start: index,
            tail: older,
            revision,
        }))
    }

    #[cfg(not(unix))]
    fn read_tail(
        &self,
        _key: &SessionKey,
        _path: &Path,
        _locked: &Locked,
    ) -> Result<Option<ReplayView>, SessionError> {
        Ok(None)
    }

    fn compact_locked(
        &self,
        key: &SessionKey,
        path: &Path,
        locked: &mut Locked,
        pending_updated_at: Option<NaiveDateTime>,
    ) -> Result<Revision, SessionError> {
        let mut loaded = self.read_locked(key, path, locked)?;
        if let Some(updated_at) = pending_updated_at {
            let newest = loaded.session.meta().updated_at.max(updated_at);
            loaded.session.touch(newest);
        }
        let content = render_session(&loaded.session);
        let revision = self.install(path, content.bytes.as_bytes(), false)?;
        self.remember(
            key,
            content.state(revision, loaded.session.messages().len()),
        );
        Ok(revision)
    }
}

/// An open, locked session file (and the namespace lock, in nanobot-ai's layout).
struct Locked {
    file: File,
    _namespace: Option<File>,
}

trait WriteAtEnd {
    fn write_all_at_end(&mut self, bytes: &[u8]) -> io::Result<()>;
}

impl WriteAtEnd for File {
    fn write_all_at_end(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::io::{Seek, SeekFrom};
        self.seek(SeekFrom::End(0))?;
        self.write_all(bytes)
    }
}

#[cfg(unix)]
fn identity(metadata: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    metadata.ino() ^ metadata.dev().rotate_left(32)
}

#[cfg(not(unix))]
fn identity(_metadata: &fs::Metadata) -> u64 {
    0
}

fn revision_of(file: &File, path: &Path) -> Result<Revision, SessionError> {
    let metadata = file
        .metadata()
        .map_err(|e| SessionError::io("inspect", path, e))?;
    Ok(revision_from(&metadata))
}

/// A file's revision: its identity and length.
fn revision_from(metadata: &fs::Metadata) -> Revision {
    Revision {
        epoch: identity(metadata),
        offset: metadata.len(),
    }
}

fn random_u64() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    RandomState::new().hash_one((nanos, std::process::id()))
}

fn conflict(key: &SessionKey, expected: Option<Revision>, found: Option<Revision>) -> SessionError {
    SessionError::Conflict {
        key: key.to_string(),
        expected,
        found,
    }
}

/// A session file's text and what a [`FileState`] needs to know about it.
struct Rendered {
    bytes: String,
    meta: SessionMeta,
    mark: TailMark,
    meta_line: String,
    line1_capacity: usize,
    provider_state: Option<Value>,
}

impl Rendered {
    fn state(self, revision: Revision, messages: usize) -> FileState {
        FileState {
            revision,
            messages,
            meta_line: self.meta_line,
            provider_state: self.provider_state,
            line1_capacity: self.line1_capacity,
            line1_current: true,
            dead_bytes: 0,
            recorded: Some(self.meta),
            pending_updated_at: None,
            line1_mark: Some(self.mark),
        }
    }
}

/// The whole file of a session: padded metadata line (with its tail mark), provider state,
/// messages.
fn render(key: &SessionKey, meta: &SessionMeta, messages: &[StoredMessage]) -> Rendered {
    let meta_line = metadata_line(key, meta);
    let mut body = String::with_capacity(messages.len() * 256);
    if let Some(state) = &meta.provider_state {
        body.push_str(&provider_state_line(Some(state)));
        body.push('\n');
    }
    for message in messages {
        body.push_str(&to_python_json(message));
        body.push('\n');
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
    let mut bytes = String::with_capacity(capacity + 1 + body.len());
    bytes.push_str(&line1);
    bytes.push('\n');
    bytes.push_str(&body);
    Rendered {
        line1_capacity: capacity,
        bytes,
        meta_line,
        provider_state: meta.provider_state.clone(),
        meta: meta.clone(),
        mark,
    }
}

/// A metadata line with the tail mark added as its last field.
fn with_mark(meta_line: &str, mark: TailMark) -> String {
    let Some(open) = meta_line.strip_suffix('}') else {
        return meta_line.to_owned();
    };
    format!(
        r#"{open}, "{TAIL_MARK_FIELD}": {{"messages": {}, "bytes": {}}}}}"#,
        mark.messages, mark.bytes
    )
}

/// The tail mark of a decoded line 1.
fn read_mark(record: &Map<String, Value>) -> Option<TailMark> {
    let mark = record.get(TAIL_MARK_FIELD)?;
    Some(TailMark {
        messages: usize::try_from(mark.get("messages")?.as_u64()?).ok()?,
        bytes: mark.get("bytes")?.as_u64()?,
    })
}

fn render_session(session: &Session) -> Rendered {
    render(session.key(), session.meta(), session.messages())
}

/// Line 1 with room to grow in place: JSON allows trailing spaces, and both nanobot-ai's
/// reader and ours accept them.
fn padded(meta_line: &str) -> String {
    let capacity = (meta_line.len() + meta_line.len().max(256)).next_multiple_of(64);
    pad_to_bytes(meta_line.to_owned(), capacity)
}

/// `line` followed by spaces up to `width` *bytes* (`format!`'s width counts characters,
/// which overruns a line holding non-ASCII text). A line already `width` bytes or longer is
/// returned as it is.
fn pad_to_bytes(mut line: String, width: usize) -> String {
    let missing = width.saturating_sub(line.len());
    line.reserve(missing);
    line.extend(std::iter::repeat_n(' ', missing));
    line
}

fn metadata_line(key: &SessionKey, meta: &SessionMeta) -> String {
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

fn provider_state_line(state: Option<&Value>) -> String {
    let mut record = Map::new();
    record.insert("_type".into(), "provider_state".into());
    record.insert("state".into(), state.cloned().unwrap_or(Value::Null));
    to_python_json(&record)
}

/// What a file holds, and what is wrong with it.
#[derive(Debug, Default)]
struct Parsed {
    messages: Vec<StoredMessage>,
    meta: Option<SessionMeta>,
    recorded_key: Option<String>,
    meta_line: String,
    line1_capacity: usize,
    line1_current: bool,
    line1_mark: Option<TailMark>,
    dead_bytes: u64,
    repairs: Vec<Repair>,
    /// (line number, reason, raw bytes)
    corrupt: Vec<(usize, String, Vec<u8>)>,
    /// Offset of a torn last line.
    torn: Option<usize>,
    /// The last line is a complete record without its newline.
    unterminated: bool,
}

fn parse(bytes: &[u8], now: NaiveDateTime) -> Parsed {
    let mut parsed = Parsed::default();
    let mut provider_state: Option<Value> = None;
    let mut first_record = true;
    let mut line1_text: Option<String> = None;
    // Sizes of metadata and provider-state records after line 1, newline included.
    let mut appended_meta: Vec<u64> = Vec::new();
    let mut state_records: Vec<u64> = Vec::new();
    let mut latest_update: Option<NaiveDateTime> = None;
    let mut offset = 0;
    let mut line_no = 0;
    // One SIMD pass validates the whole file; lines are then slices of it. A file that is
    // not valid UTF-8 throughout is checked line by line, to find the damaged ones.
    let whole = simdutf8::basic::from_utf8(bytes).ok();
    while offset < bytes.len() {
        line_no += 1;
        let (line, next, terminated) = match memchr::memchr(b'\n', &bytes[offset..]) {
            Some(end) => (&bytes[offset..offset + end], offset + end + 1, true),
            None => (&bytes[offset..], bytes.len(), false),
        };
        let start = offset;
        offset = next;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Records nanobot-ai and we write start with their `_type`; everything else is a
        // message, validated now and decoded when first read.
        let text = match whole {
            Some(text) => Ok(&text[start..start + line.len()]),
            None => std::str::from_utf8(line),
        };
        let decoded = text.map_err(|_| "not UTF-8".to_owned()).and_then(|text| {
            if is_typed_record(text) {
                serde_json::from_str::<Value>(text)
                    .map_err(|e| format!("not JSON ({e})"))
                    .and_then(|value| match value {
                        Value::Object(map) => Ok(Line::Record(map)),
                        other => Err(format!("a JSON {} where a record belongs", kind(&other))),
                    })
            } else {
                StoredMessage::from_json_text(text).map(Line::Message)
            }
        });
        let record = match decoded {
            Ok(Line::Message(message)) => {
                if !terminated {
                    parsed.unterminated = true;
                }
                first_record = false;
                parsed.messages.push(message);
                continue;
            }
            Ok(Line::Record(record)) => record,
            Err(_) if !terminated => {
                parsed.torn = Some(start);
                break;
            }
            Err(reason) => {
                parsed.repairs.push(Repair::CorruptLine {
                    line: line_no,
                    reason: reason.clone(),
                });
                parsed.corrupt.push((line_no, reason, line.to_vec()));
                continue;
            }
        };
        if !terminated {
            parsed.unterminated = true;
        }
        let is_first = std::mem::replace(&mut first_record, false);
        match record.get("_type").and_then(Value::as_str) {
            Some("metadata") => {
                let text = std::str::from_utf8(line)
                    .unwrap_or_default()
                    .trim_end()
                    .to_owned();
                if is_first {
                    parsed.line1_capacity = line.len();
                    parsed.line1_mark = read_mark(&record);
                    line1_text = Some(text.clone());
                } else {
                    appended_meta.push(line.len() as u64 + 1);
                }
                parsed.meta_line = text;
                parsed.recorded_key = record.get("key").and_then(Value::as_str).map(str::to_owned);
                let meta = read_meta(&record, now, &mut parsed.repairs);
                if record.get("updated_at").is_some_and(Value::is_string) {
                    latest_update = latest_update.max(Some(meta.updated_at));
                }
                parsed.meta = Some(meta);
            }
            Some("provider_state") => {
                state_records.push(line.len() as u64 + 1);
                provider_state = record.get("state").filter(|s| s.is_object()).cloned();
            }
            _ => parsed.messages.push(StoredMessage::from_map(record)),
        }
    }
    parsed.line1_current = line1_text.is_some() && appended_meta.is_empty();
    let superseded = |sizes: &[u64]| sizes.iter().rev().skip(1).sum::<u64>();
    parsed.dead_bytes = superseded(&appended_meta) + superseded(&state_records);
    if parsed.line1_current && !appended_meta.is_empty() {
        // The last appended record only mirrors line 1.
        parsed.dead_bytes += appended_meta.last().copied().unwrap_or(0);
    }
    if let Some(meta) = parsed.meta.as_mut() {
        meta.provider_state = provider_state;
        // updated_at only grows; line 1 may carry a newer one than the last record.
        if let Some(latest) = latest_update {
            meta.updated_at = meta.updated_at.max(latest);
        }
        if meta.last_consolidated > parsed.messages.len() {
            parsed.repairs.push(Repair::PointerReset {
                found: meta.last_consolidated.to_string(),
            });
            meta.last_consolidated = 0;
        }
    }
    parsed
}

fn json_str(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// One decoded line of a session file.
enum Line {
    Message(StoredMessage),
    Record(Map<String, Value>),
}

/// Whether a line is a typed record (`{"_type": ...`), which is decoded at once.
fn is_typed_record(text: &str) -> bool {
    is_typed_record_bytes(text.as_bytes())
}

fn is_typed_record_bytes(line: &[u8]) -> bool {
    line.trim_ascii_start()
        .strip_prefix(b"{")
        .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"\"_type\""))
}

fn kind(value: &Value) -> &'static str {
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
fn read_meta(
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
fn check_recorded_key(key: &SessionKey, path: &Path, parsed: &Parsed) -> Result<(), SessionError> {
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

#[async_trait]
impl SessionStore for FileSessionStore {
    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        let path = self.turn_lock_of(key);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| SessionError::io("create the turn-lock directory", parent, e))?;
        }
        // The lock file is never removed (removing a file someone waits on would hand two
        // holders two different files); it is empty and tiny.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| SessionError::io("open the turn lock", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(TurnLock::new(file))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(SessionError::io("lock the turn of", &path, e)),
        }
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        let path = self.path_of(key);
        match fs::metadata(&path) {
            Ok(metadata) => Ok(Some(revision_from(&metadata))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SessionError::io("inspect", &path, e)),
        }
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            self.forget(key);
            return Ok(None);
        };
        self.read_locked(key, &path, &mut locked).map(Some)
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        let path = self.path_of(key);
        let Some(expected) = expected else {
            // A new session: the whole file appears at once, or not at all if it exists.
            let _namespace = self.lock_namespace()?;
            if let Ok(existing) = File::open(&path) {
                return Err(conflict(key, None, Some(revision_of(&existing, &path)?)));
            }
            let now = self.now();
            let meta = append
                .meta
                .cloned()
                .unwrap_or_else(|| SessionMeta::new(now));
            SessionError::check_pointer(key, meta.last_consolidated, append.messages.len())?;
            let content = render(key, &meta, append.messages);
            return self.create(key, &path, content, append.messages.len());
        };

        let Some(mut locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let mut state = self.state_locked(key, &path, &mut locked, expected)?;
        let count = state.messages + append.messages.len();
        let mut out = String::with_capacity(append.messages.len() * 512 + 512);
        let empty_file = found.offset == 0;
        let meta = match (append.meta, empty_file) {
            (Some(meta), _) => Some(meta.clone()),
            // An empty file (nanobot-ai accepts one) gets its metadata line first.
            (None, true) => Some(SessionMeta::new(self.now())),
            (None, false) => None,
        };
        if let Some(meta) = &meta {
            let stored = state.recorded.as_ref().map(|r| r.last_consolidated);
            SessionError::check_append_pointer(key, stored, meta.last_consolidated, count)?;
        }
        if empty_file && let Some(meta) = &meta {
            state.meta_line = metadata_line(key, meta);
            let line1 = padded(&state.meta_line);
            state.line1_capacity = line1.len();
            state.line1_current = true;
            out.push_str(&line1);
            out.push('\n');
        }
        for message in append.messages {
            out.push_str(&to_python_json(message));
            out.push('\n');
        }
        if let (Some(meta), false) = (&meta, empty_file) {
            if meta.provider_state != state.provider_state {
                out.push_str(&provider_state_line(meta.provider_state.as_ref()));
                out.push('\n');
                state.provider_state = meta.provider_state.clone();
            }
            let only_time_changed = state.recorded.as_ref().is_some_and(|recorded| {
                SessionMeta {
                    updated_at: recorded.updated_at,
                    ..meta.clone()
                } == *recorded
            });
            if only_time_changed {
                // Not worth a record per message: line 1 gets it at flush.
                let recorded = state.recorded.as_ref().map(|r| r.updated_at);
                state.pending_updated_at =
                    (Some(meta.updated_at) != recorded).then_some(meta.updated_at);
            } else {
                let line = metadata_line(key, meta);
                // The previous appended record is superseded; line 1 is only made stale.
                if !state.line1_current {
                    state.dead_bytes += state.meta_line.len() as u64 + 1;
                }
                out.push_str(&line);
                out.push('\n');
                state.meta_line = line;
                state.line1_current = false;
                state.recorded = Some(meta.clone());
                state.pending_updated_at = None;
            }
        }
        locked
            .file
            .write_all_at_end(out.as_bytes())
            .map_err(|e| SessionError::io("append to", &path, e))?;
        if self.options.durability == Durability::Always {
            locked
                .file
                .sync_data()
                .map_err(|e| SessionError::io("sync", &path, e))?;
        }
        state.revision = Revision {
            epoch: found.epoch,
            offset: found.offset + out.len() as u64,
        };
        state.messages = count;
        let revision = state.revision;
        self.remember(key, state);
        Ok(revision)
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        let key = session.key();
        let path = self.path_of(key);
        let content = render_session(session);
        let messages = session.messages().len();
        let Some(expected) = expected else {
            let _namespace = self.lock_namespace()?;
            return self.create(key, &path, content, messages);
        };
        let Some(locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let revision = self.install(&path, content.bytes.as_bytes(), false)?;
        drop(locked);
        self.remember(key, content.state(revision, messages));
        Ok(revision)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| SessionError::io("list", &self.dir, e))?;
        let mut index = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        index.load_once(&self.dir);
        let mut rows = Vec::new();
        let mut present = std::collections::HashSet::new();
        let now = self.now();
        for entry in entries {
            let entry = entry.map_err(|e| SessionError::io("list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(file) = name.to_str() else {
                continue;
            };
            let Some(stem) = file.strip_suffix(".jsonl") else {
                continue;
            };
            let canonical = SessionKey::from_storage_stem(stem);
            if canonical.is_none() && !SessionKey::is_hashed_stem(stem) {
                continue;
            }
            let stamp = match entry.metadata() {
                Ok(metadata) => Stamp::of(&metadata),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SessionError::io("inspect", entry.path(), e)),
            };
            present.insert(file.to_owned());
            if let Some(row) = index.fresh(file, stamp) {
                rows.push(row);
                continue;
            }
            let path = entry.path();
            let read_at = std::time::SystemTime::now();
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SessionError::io("read", &path, e)),
            };
            if let Some(row) = list_row(&bytes, canonical, now) {
                // The stamp taken before reading: a change during the read is seen next time.
                index.record(file.to_owned(), stamp, read_at, &row);
                rows.push(row);
            }
        }
        index.retain(&present);
        index.save(&self.dir);
        sort_listing(&mut rows);
        Ok(rows)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let path = self.path_of(key);
        let _namespace = self.lock_namespace()?;
        self.forget(key);
        let existed = match fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(SessionError::io("delete", &path, e)),
        };
        match fs::remove_file(self.sidecar_of(key)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(SessionError::io("delete", self.sidecar_of(key), e)),
        }
        if existed {
            self.sync_dir()?;
        }
        Ok(existed)
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            return Ok(None);
        };
        if let Some(view) = self.read_tail(key, &path, &locked)? {
            return Ok(Some(view));
        }
        let loaded = self.read_locked(key, &path, &mut locked)?;
        Ok(Some(ReplayView::of_session(
            loaded.session,
            loaded.revision,
        )))
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        let path = self.path_of(key);
        let Some(mut locked) = self.open_locked(&path)? else {
            return Err(conflict(key, Some(expected), None));
        };
        let found = revision_of(&locked.file, &path)?;
        SessionError::check_revision(key, Some(expected), Some(found))?;
        let mut state = self.state_locked(key, &path, &mut locked, expected)?;
        // Line 1 should say what the last record says, with the newest updated_at.
        let current_line = match (&state.recorded, state.pending_updated_at) {
            (Some(recorded), Some(updated_at)) => Some(metadata_line(
                key,
                &SessionMeta {
                    updated_at,
                    ..recorded.clone()
                },
            )),
            _ => None,
        };
        let mark = TailMark {
            messages: state.messages,
            bytes: found.offset,
        };
        let line1_stale =
            !state.line1_current || current_line.is_some() || state.line1_mark != Some(mark);
        let line1_text = current_line.unwrap_or_else(|| state.meta_line.clone());
        let marked = with_mark(&line1_text, mark);
        let wasteful =
            state.dead_bytes >= COMPACT_MIN_DEAD_BYTES && state.dead_bytes * 2 >= found.offset;
        let outgrown = line1_stale
            && (marked.len() > state.line1_capacity
                || !line1_ends_at(&locked.file, state.line1_capacity, found.offset)
                    .map_err(|e| SessionError::io("read line 1 of", &path, e))?);
        if wasteful || outgrown {
            // A record that no longer fits line 1 (or a line 1 that is not what this process
            // recorded) goes through the atomic rewrite, never past line 1's own bytes.
            return self.compact_locked(key, &path, &mut locked, state.pending_updated_at);
        }
        if line1_stale {
            let line1 = pad_to_bytes(marked, state.line1_capacity);
            // `outgrown` sent anything longer to the compaction: this is line 1's width.
            debug_assert_eq!(line1.len(), state.line1_capacity);
            write_at_start(&locked.file, line1.as_bytes())
                .map_err(|e| SessionError::io("update line 1 of", &path, e))?;
            if !state.line1_current {
                // The appended record now only mirrors line 1: it counts as dead weight.
                state.dead_bytes += state.meta_line.len() as u64 + 1;
            }
            state.line1_current = true;
            state.line1_mark = Some(mark);
            if let (Some(recorded), Some(updated_at)) =
                (state.recorded.as_mut(), state.pending_updated_at.take())
            {
                recorded.updated_at = updated_at;
                state.meta_line = line1_text;
            }
        }
        if self.options.durability != Durability::None {
            locked
                .file
                .sync_data()
                .map_err(|e| SessionError::io("sync", &path, e))?;
        }
        self.remember(key, state);
        Ok(found)
    }
}

/// Whether line 1 of the locked file ends (its newline) exactly at byte `capacity`: the
/// last check before line 1 is rewritten in place, so a rewrite can only ever replace line
/// 1's own bytes, whatever this process believed about the file.
fn line1_ends_at(file: &File, capacity: usize, len: u64) -> io::Result<bool> {
    if capacity == 0 || capacity as u64 >= len {
        return Ok(false);
    }
    let mut head = vec![0u8; capacity + 1];
    read_exact_at(file, &mut head, 0)?;
    Ok(head[capacity] == b'\n' && !head[..capacity].contains(&b'\n'))
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

#[cfg(unix)]
fn write_at_start(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)
}

#[cfg(not(unix))]
fn write_at_start(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytes)
}

/// A listing row from a file's bytes, without decoding every message: only metadata
/// records and the first few messages (for the preview) are parsed.
fn list_row(
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
        title: info::title(&meta.metadata),
        preview: preview.finish(),
    })
}

/// Finds, recovers or creates nanobot-ai's session namespace for `workspace`.
fn nanobot_namespace(workspace: &Path, sessions_root: &Path) -> Result<PathBuf, SessionError> {
    fs::create_dir_all(workspace)
        .map_err(|e| SessionError::io("create the workspace", workspace, e))?;
    let workspace = fs::canonicalize(workspace)
        .map_err(|e| SessionError::io("resolve the workspace", workspace, e))?;
    fs::create_dir_all(sessions_root)
        .map_err(|e| SessionError::io("create the sessions root", sessions_root, e))?;
    let root = fs::canonicalize(sessions_root)
        .map_err(|e| SessionError::io("resolve the sessions root", sessions_root, e))?;
    if root.starts_with(&workspace) {
        return Err(SessionError::InvalidStorage {
            path: root,
            reason: "session storage must be outside the agent workspace (nanobot-ai refuses it too); choose a sessions root elsewhere".into(),
        });
    }
    let lock_path = root.join(".workspace-migration.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| SessionError::io("open", &lock_path, e))?;
    lock.lock()
        .map_err(|e| SessionError::io("lock", &lock_path, e))?;

    let id_path = workspace.join(".nanobot").join("workspace-id");
    let mut id = match fs::symlink_metadata(&id_path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(SessionError::InvalidStorage {
                path: id_path,
                reason: "the workspace id must not be a symlink; restore its original identifier"
                    .into(),
            });
        }
        Ok(_) => {
            let text =
                fs::read_to_string(&id_path).map_err(|e| SessionError::io("read", &id_path, e))?;
            let id = text.trim().to_owned();
            if !is_workspace_id(&id) {
                return Err(SessionError::InvalidStorage {
                    path: id_path,
                    reason: format!(
                        "{id:?} is not a workspace id (32 lowercase hex digits); restore its original identifier"
                    ),
                });
            }
            id
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = recover_namespace(&root, &workspace)?.unwrap_or_else(new_workspace_id);
            write_workspace_id(&id_path, &id)?;
            id
        }
        Err(e) => return Err(SessionError::io("inspect", &id_path, e)),
    };
    for _ in 0..3 {
        let ns = root.join(&id);
        let marker = ns.join(".workspace");
        let expected = format!("{}\n", workspace.display());
        match fs::read_to_string(&marker) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&ns).map_err(|e| SessionError::io("create", &ns, e))?;
                let has_data = fs::read_dir(&ns)
                    .map_err(|e| SessionError::io("list", &ns, e))?
                    .any(|entry| entry.is_ok_and(|e| e.file_name() != ".session-files.lock"));
                if has_data {
                    return Err(SessionError::InvalidStorage {
                        path: ns,
                        reason: "the session namespace has data but no workspace marker".into(),
                    });
                }
                fs::write(&marker, &expected).map_err(|e| SessionError::io("write", &marker, e))?;
                return Ok(ns);
            }
            Err(e) => return Err(SessionError::io("read", &marker, e)),
            Ok(text) => {
                let claimed = PathBuf::from(text.trim_end_matches('\n'));
                if claimed.as_os_str().is_empty() {
                    return Err(SessionError::InvalidStorage {
                        path: marker,
                        reason: "the workspace marker is empty".into(),
                    });
                }
                match fs::canonicalize(&claimed) {
                    Ok(path) if path == workspace => return Ok(ns),
                    // The workspace moved or was renamed: it keeps its sessions.
                    Err(_) => {
                        fs::write(&marker, &expected)
                            .map_err(|e| SessionError::io("write", &marker, e))?;
                        return Ok(ns);
                    }
                    // Another existing workspace owns this id: this one is a copy.
                    Ok(_) => {
                        id = new_workspace_id();
                        write_workspace_id(&id_path, &id)?;
                    }
                }
            }
        }
    }
    Err(SessionError::InvalidStorage {
        path: workspace,
        reason: "could not allocate an isolated session namespace".into(),
    })
}

fn is_workspace_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn new_workspace_id() -> String {
    format!(
        "{:016x}{:016x}",
        random_u64(),
        random_u64().rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15
    )
}

fn write_workspace_id(path: &Path, id: &str) -> Result<(), SessionError> {
    let dir = path.parent().unwrap_or(path);
    fs::create_dir_all(dir).map_err(|e| SessionError::io("create", dir, e))?;
    let temp = dir.join(format!(".workspace-id.{:016x}.tmp", random_u64()));
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options
            .open(&temp)
            .map_err(|e| SessionError::io("create", &temp, e))?;
        file.write_all(format!("{id}\n").as_bytes())
            .map_err(|e| SessionError::io("write", &temp, e))?;
        file.sync_all()
            .map_err(|e| SessionError::io("sync", &temp, e))?;
        fs::rename(&temp, path).map_err(|e| SessionError::io("write", path, e))
    })();
    let _ = fs::remove_file(&temp);
    result
}

/// The namespace whose marker names `workspace`, when its id file was lost.
fn recover_namespace(root: &Path, workspace: &Path) -> Result<Option<String>, SessionError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| SessionError::io("list", root, e))? {
        let entry = entry.map_err(|e| SessionError::io("list", root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_workspace_id(&name) || entry.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path().join(".workspace")) else {
            continue;
        };
        if fs::canonicalize(text.trim_end_matches('\n')).is_ok_and(|p| p == workspace) {
            found.push(name);
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(SessionError::InvalidStorage {
            path: root.to_owned(),
            reason: format!(
                "several session namespaces claim {}; remove the stale marker",
                workspace.display()
            ),
        }),
    }
}

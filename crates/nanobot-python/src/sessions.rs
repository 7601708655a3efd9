//! `SessionFiles`: our append-only file store as the Python wrapper (`nanobot_rs`) drives
//! it. Everything here speaks plain Python values; the wrapper turns them into nanobot-ai's
//! `Session` objects.
//!
//! A saved session carries a sync token `(epoch, offset, stored)`: the revision it was saved
//! at and the message objects the store holds, by identity. A save whose messages still
//! begin with exactly those objects appends only the rest (nanobot-ai's sessions only grow
//! between saves); any other change (a cleared, trimmed or rebuilt list) rewrites the file,
//! and both are refused when another writer moved the file since.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nanobot_session_store::{
    Append, Durability, FileSessionStore, FileStoreOptions, Loaded, Revision, Session,
    SessionError, SessionKey, SessionMeta, SessionStore, StoredMessage, parse_isoformat,
    python_isoformat,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tokio::runtime::Runtime;

use crate::convert::{object_to_python, to_json, to_object, to_python};
use crate::errors::detached;

/// How often a turn-lock wait tries again.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// How many times `update_metadata` reads again after another writer moved the file.
const METADATA_ATTEMPTS: usize = 8;

/// Sessions as nanobot-ai's JSONL files, through our append-only store.
#[pyclass(frozen, module = "nanobot_rs._native")]
pub(crate) struct SessionFiles {
    store: Arc<FileSessionStore>,
    runtime: Arc<Runtime>,
}

/// The sync token a saved or loaded session carries (see the module's documentation).
type Token<'py> = (u64, u64, Bound<'py, PyList>);

/// The parts of a nanobot-ai `Session` a save writes, besides its messages.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct MetaArgs {
    created_at: String,
    updated_at: String,
    metadata: Py<PyAny>,
    last_consolidated: usize,
    provider_state: Option<Py<PyAny>>,
}

#[pymethods]
impl SessionFiles {
    /// Sessions of a nanobot-ai workspace in its own layout (`<sessions_root>/<workspace
    /// id>/`), or in `dir` when given.
    #[new]
    #[pyo3(signature = (workspace, sessions_root, dir=None))]
    fn new(
        py: Python<'_>,
        workspace: PathBuf,
        sessions_root: PathBuf,
        dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        // Saves wait for the disk only when the caller asks (`fsync=True`), as nanobot-ai's
        // do; a crash of the process loses nothing either way.
        let options = FileStoreOptions::default().durability(Durability::None);
        let store = detached(py, || match dir {
            Some(dir) => FileSessionStore::open(dir, options),
            None => FileSessionStore::open_nanobot(&workspace, &sessions_root, options),
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| PyValueError::new_err(format!("cannot start the I/O runtime: {e}")))?;
        Ok(SessionFiles {
            store: Arc::new(store),
            runtime: Arc::new(runtime),
        })
    }

    /// The directory holding the session files.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    /// The file of `key`.
    fn path_of(&self, key: &str) -> PyResult<PathBuf> {
        Ok(self.store.path_of(&parse_key(key)?))
    }

    /// The session's parts and its sync token, or `None`; damage found on the way is
    /// repaired (kept aside in the `.damaged` sidecar) and listed under `repairs`.
    fn load<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let key = parse_key(key)?;
        let Some(loaded) = detached(py, || self.block_on(self.store.load(&key)))? else {
            return Ok(None);
        };
        loaded_to_python(py, &loaded).map(Some)
    }

    /// Writes a session: its new messages appended when `token` still describes the
    /// beginning of `messages`, the whole file rewritten otherwise; either refused with
    /// `SessionConflictError` when the file changed since `token` (or exists when there is
    /// no token). Returns the new token.
    #[pyo3(signature = (key, messages, meta, token, fsync=false))]
    fn save<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        messages: &Bound<'py, PyList>,
        meta: MetaArgs,
        token: Option<Token<'py>>,
        fsync: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let key = parse_key(key)?;
        let meta = meta.to_meta(py)?;
        let mut plan = Plan::for_token(token.as_ref(), messages)?;
        loop {
            let from = match &plan {
                Plan::Append { stored, .. } => stored.len(),
                Plan::Rewrite { .. } => 0,
            };
            let items: Vec<Bound<'py, PyAny>> = messages.iter().skip(from).collect();
            let converted = items
                .iter()
                .map(|item| to_object(item).map(StoredMessage::from_map))
                .collect::<PyResult<Vec<_>>>()?;
            let target = plan.target();
            let written = detached(py, || {
                match self.block_on(self.write(&key, target, converted, &meta, fsync)) {
                    Ok(revision) => Ok(Some(revision)),
                    // The pointer went back or past the end without a rewrite (a caller set
                    // it by hand): nanobot-ai accepts that, so the whole session is written.
                    Err(
                        SessionError::PointerMovedBack { .. } | SessionError::InvalidPointer { .. },
                    ) if matches!(target, Target::Append(_)) => Ok(None),
                    Err(error) => Err(error),
                }
            })?;
            match (written, plan) {
                (Some(revision), Plan::Append { stored, .. }) => {
                    for item in &items {
                        stored.append(item)?;
                    }
                    return token_tuple(py, revision, stored);
                }
                (Some(revision), Plan::Rewrite { .. }) => {
                    return token_tuple(py, revision, PyList::new(py, items)?);
                }
                (None, Plan::Append { expected, .. }) => {
                    plan = Plan::Rewrite {
                        expected: Some(expected),
                    };
                }
                (None, Plan::Rewrite { .. }) => {
                    return Err(PyValueError::new_err(
                        "the consolidation pointer was refused",
                    ));
                }
            }
        }
    }

    /// Merges `updates` into the session's metadata (one appended record); `False` when
    /// there is no such session.
    #[pyo3(signature = (key, updates, fsync=false))]
    fn update_metadata(
        &self,
        py: Python<'_>,
        key: &str,
        updates: &Bound<'_, PyAny>,
        fsync: bool,
    ) -> PyResult<bool> {
        let key = parse_key(key)?;
        let updates = to_object(updates)?;
        detached(py, || {
            self.block_on(async {
                for _ in 0..METADATA_ATTEMPTS {
                    let Some(loaded) = self.store.load(&key).await? else {
                        return Ok(false);
                    };
                    let mut meta = loaded.session.meta().clone();
                    meta.metadata
                        .extend(updates.iter().map(|(k, v)| (k.clone(), v.clone())));
                    let append = Append {
                        messages: &[],
                        meta: Some(&meta),
                    };
                    match self.store.append(&key, Some(loaded.revision), append).await {
                        Ok(revision) => {
                            self.finish(&key, revision, fsync).await?;
                            return Ok(true);
                        }
                        Err(SessionError::Conflict { .. }) => continue,
                        Err(error) => return Err(error),
                    }
                }
                Err(SessionError::Busy {
                    key: key.to_string(),
                    waited: Duration::ZERO,
                })
            })
        })
    }

    /// Removes the session's file; `False` when there was none.
    fn delete(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        let key = parse_key(key)?;
        detached(py, || self.block_on(self.store.delete(&key)))
    }

    /// Every session: key, created_at, updated_at, title, preview, path, message_count.
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let infos = detached(py, || self.block_on(self.store.list()))?;
        let rows = PyList::empty(py);
        for info in infos {
            let row = PyDict::new(py);
            row.set_item("key", info.key.as_str())?;
            row.set_item("created_at", python_isoformat(info.created_at))?;
            row.set_item("updated_at", python_isoformat(info.updated_at))?;
            row.set_item("title", info.title.unwrap_or_default())?;
            row.set_item("preview", info.preview)?;
            row.set_item("path", self.store.path_of(&info.key).display().to_string())?;
            row.set_item("message_count", info.message_count)?;
            rows.append(row)?;
        }
        Ok(rows)
    }

    /// Takes the session's turn lock, waiting up to `timeout` seconds; `SessionBusyError`
    /// when another turn (here or in another process) still holds it.
    #[pyo3(signature = (key, timeout=0.0))]
    fn lock_turn(&self, py: Python<'_>, key: &str, timeout: f64) -> PyResult<TurnLease> {
        let key = parse_key(key)?;
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(PyValueError::new_err(
                "timeout must be a finite number of seconds, 0 or more",
            ));
        }
        let wait = Duration::from_secs_f64(timeout);
        let lock = detached(py, || {
            let started = Instant::now();
            loop {
                if let Some(lock) = self.block_on(self.store.try_lock_turn(&key))? {
                    return Ok(lock);
                }
                if started.elapsed() >= wait {
                    return Err(SessionError::Busy {
                        key: key.to_string(),
                        waited: started.elapsed(),
                    });
                }
                std::thread::sleep(LOCK_POLL.min(wait.saturating_sub(started.elapsed())));
            }
        })?;
        Ok(TurnLease {
            lock: Mutex::new(Some(lock)),
            runtime: self.runtime.clone(),
        })
    }
}

impl SessionFiles {
    fn block_on<T>(&self, work: impl Future<Output = T>) -> T {
        self.runtime.block_on(work)
    }

    async fn write(
        &self,
        key: &SessionKey,
        target: Target,
        messages: Vec<StoredMessage>,
        meta: &SessionMeta,
        fsync: bool,
    ) -> Result<Revision, SessionError> {
        let revision = match target {
            Target::Append(expected) => {
                let append = Append {
                    messages: &messages,
                    meta: Some(meta),
                };
                self.store.append(key, Some(expected), append).await?
            }
            Target::Rewrite(expected) => {
                let session = Session::from_parts(key.clone(), messages, meta.clone());
                self.store.rewrite(&session, expected).await?
            }
        };
        self.finish(key, revision, fsync).await
    }

    /// Brings line 1 up to date (nanobot-ai's listing and `read_metadata` read only that
    /// line) and, when asked, waits for the disk.
    async fn finish(
        &self,
        key: &SessionKey,
        revision: Revision,
        fsync: bool,
    ) -> Result<Revision, SessionError> {
        let revision = self.store.flush(key, revision).await?;
        if fsync {
            let path = self.store.path_of(key);
            sync_file_and_dir(&path).map_err(|e| SessionError::Io {
                action: "sync",
                path,
                source: e,
            })?;
        }
        Ok(revision)
    }
}

/// What a save writes.
enum Plan<'py> {
    /// The messages after `stored` (the objects the file already holds), at `expected`.
    Append {
        expected: Revision,
        stored: Bound<'py, PyList>,
    },
    /// The whole session, at `expected` (`None`: the file must not exist).
    Rewrite { expected: Option<Revision> },
}

/// A [`Plan`] without its Python objects, for the write that runs without the GIL.
#[derive(Debug, Clone, Copy)]
enum Target {
    Append(Revision),
    Rewrite(Option<Revision>),
}

impl<'py> Plan<'py> {
    fn target(&self) -> Target {
        match self {
            Plan::Append { expected, .. } => Target::Append(*expected),
            Plan::Rewrite { expected } => Target::Rewrite(*expected),
        }
    }

    fn for_token(token: Option<&Token<'py>>, messages: &Bound<'py, PyList>) -> PyResult<Self> {
        let Some((epoch, offset, stored)) = token else {
            return Ok(Plan::Rewrite { expected: None });
        };
        let expected = Revision {
            epoch: *epoch,
            offset: *offset,
        };
        Ok(if begins_with(messages, stored)? {
            Plan::Append {
                expected,
                stored: stored.clone(),
            }
        } else {
            Plan::Rewrite {
                expected: Some(expected),
            }
        })
    }
}

/// Whether `messages` begins with `stored`: the same objects (or, after a deep copy of the
/// session, equal ones), compared by the list's own C loop, which skips identical items at
/// the cost of a pointer comparison.
fn begins_with(messages: &Bound<'_, PyList>, stored: &Bound<'_, PyList>) -> PyResult<bool> {
    if stored.len() > messages.len() {
        return Ok(false);
    }
    messages.get_slice(0, stored.len()).eq(stored)
}

impl MetaArgs {
    fn to_meta(&self, py: Python<'_>) -> PyResult<SessionMeta> {
        let time = |field: &str, text: &str| {
            parse_isoformat(text).ok_or_else(|| {
                PyValueError::new_err(format!("{field} {text:?} is not an ISO 8601 time"))
            })
        };
        let mut meta = SessionMeta::new(time("created_at", &self.created_at)?);
        meta.updated_at = time("updated_at", &self.updated_at)?;
        meta.metadata = to_object(self.metadata.bind(py))?;
        meta.last_consolidated = self.last_consolidated;
        meta.provider_state = match &self.provider_state {
            Some(state) => Some(to_json(state.bind(py))?).filter(|v| !v.is_null()),
            None => None,
        };
        Ok(meta)
    }
}

fn loaded_to_python<'py>(py: Python<'py>, loaded: &Loaded) -> PyResult<Bound<'py, PyDict>> {
    let session = &loaded.session;
    let meta = session.meta();
    let messages = PyList::empty(py);
    for message in session.messages() {
        messages.append(object_to_python(py, message.fields())?)?;
    }
    let stored = PyList::new(py, messages.iter())?;
    let payload = PyDict::new(py);
    payload.set_item("key", session.key().as_str())?;
    payload.set_item("created_at", python_isoformat(meta.created_at))?;
    payload.set_item("updated_at", python_isoformat(meta.updated_at))?;
    payload.set_item("metadata", object_to_python(py, &meta.metadata)?)?;
    payload.set_item("last_consolidated", meta.last_consolidated)?;
    let state = match &meta.provider_state {
        Some(state) => to_python(py, state)?,
        None => py.None().into_bound(py),
    };
    payload.set_item("provider_state", state)?;
    payload.set_item("messages", messages)?;
    payload.set_item("token", token_tuple(py, loaded.revision, stored)?)?;
    let repairs: Vec<String> = loaded.repairs.iter().map(ToString::to_string).collect();
    payload.set_item("repairs", repairs)?;
    Ok(payload)
}

fn token_tuple<'py>(
    py: Python<'py>,
    revision: Revision,
    stored: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            revision.epoch.into_pyobject(py)?.into_any(),
            revision.offset.into_pyobject(py)?.into_any(),
            stored.into_any(),
        ],
    )
}

fn parse_key(key: &str) -> PyResult<SessionKey> {
    SessionKey::new(key).map_err(|e| PyValueError::new_err(e.to_string()))
}

fn sync_file_and_dir(path: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()?;
    if let Some(dir) = path.parent() {
        match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
            // Some file systems cannot sync a directory; the file itself is on disk.
            Err(e) if e.raw_os_error() == Some(22) => {}
            other => other?,
        }
    }
    Ok(())
}

/// A held turn lock: `with store.lock_turn(key):` or `release()`.
#[pyclass(frozen, module = "nanobot_rs._native")]
pub(crate) struct TurnLease {
    lock: Mutex<Option<nanobot_session_store::TurnLock>>,
    runtime: Arc<Runtime>,
}

#[pymethods]
impl TurnLease {
    /// Gives the lock back (again is harmless).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.lock.lock().map(|mut held| held.take()).unwrap_or(None);
        if let Some(lock) = taken {
            detached(py, || {
                self.runtime.block_on(lock.release());
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Whether the lock is still held by this lease.
    #[getter]
    fn held(&self) -> bool {
        self.lock.lock().map(|held| held.is_some()).unwrap_or(false)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }
}

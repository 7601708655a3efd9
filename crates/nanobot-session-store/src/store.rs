//! The storage port: the few primitives a backend must get right.

use std::fmt;

use async_trait::async_trait;
use chrono::NaiveDateTime;

use crate::error::SessionError;
use crate::key::SessionKey;
use crate::message::StoredMessage;
use crate::replay::ReplayView;
use crate::session::{Session, SessionMeta};

/// A version of a stored session, returned by every write and checked by the next one.
///
/// Opaque to callers. A backend picks the two numbers so that any change by any writer
/// changes them: the file backend uses the file's identity and length, the in-memory backend
/// a rewrite count and a write count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Revision {
    /// Changes when the whole session is rewritten.
    pub epoch: u64,
    /// Grows with every append.
    pub offset: u64,
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.offset)
    }
}

/// A session as a store read it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The session; [`Session::is_dirty`] is false.
    pub session: Session,
    /// Its revision, to pass to the next write.
    pub revision: Revision,
    /// What was repaired while reading (empty for a healthy session).
    pub repairs: Vec<Repair>,
}

/// Damage found while reading a session, and what was done about it. Nothing is dropped
/// silently: damaged bytes are kept aside and each repair is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Repair {
    /// The last line was cut mid-write (a crash); it was removed from the session file and
    /// kept in the sidecar.
    TornTail {
        /// Bytes removed.
        bytes: usize,
    },
    /// A line that is not a JSON object (corrupt, not UTF-8, an array, ...) was moved to the
    /// sidecar.
    CorruptLine {
        /// Its line number (1-based) in the file as found.
        line: usize,
        /// Why it was refused.
        reason: String,
    },
    /// Line 1 (the padded copy of the last metadata record that nanobot-ai's listing reads,
    /// rewritten in place at flush) was torn by a crash in the middle of that rewrite. A
    /// later record holds the same metadata, so nothing was lost: the torn line was moved to
    /// the sidecar and line 1 rebuilt from that record.
    TornLine1 {
        /// Bytes of the torn line.
        bytes: usize,
    },
    /// The consolidation pointer was not a count within the messages (negative, a float,
    /// past the end) and was reset to 0, so no history is hidden.
    PointerReset {
        /// What the file said.
        found: String,
    },
    /// A timestamp in the metadata could not be read and was replaced by the load time.
    BadTimestamp {
        /// The field.
        field: &'static str,
        /// What the file said.
        found: String,
    },
    /// A record's fields had the wrong type (e.g. `metadata` not an object) and were reset.
    BadField {
        /// The field.
        field: &'static str,
    },
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repair::TornTail { bytes } => {
                write!(
                    f,
                    "cut a torn last line of {bytes} bytes (kept in the sidecar)"
                )
            }
            Repair::CorruptLine { line, reason } => {
                write!(f, "moved line {line} to the sidecar: {reason}")
            }
            Repair::TornLine1 { bytes } => write!(
                f,
                "rebuilt line 1 from the last metadata record; its torn {bytes} bytes are in the sidecar"
            ),
            Repair::PointerReset { found } => {
                write!(f, "reset the consolidation pointer {found} to 0")
            }
            Repair::BadTimestamp { field, found } => {
                write!(
                    f,
                    "replaced unreadable {field} {found:?} with the load time"
                )
            }
            Repair::BadField { field } => write!(f, "reset {field}, which had the wrong type"),
        }
    }
}

/// What one write adds to a session.
#[derive(Debug, Clone, Copy)]
pub struct Append<'a> {
    /// New messages, in order, after the existing ones.
    pub messages: &'a [StoredMessage],
    /// The metadata after this write, when it changed.
    pub meta: Option<&'a SessionMeta>,
}

/// One row of a session listing.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// The session's key.
    pub key: SessionKey,
    /// When it was created.
    pub created_at: NaiveDateTime,
    /// When it last changed.
    pub updated_at: NaiveDateTime,
    /// How many messages it holds, archived ones included.
    pub message_count: usize,
    /// Its title (`metadata.title`), if it has one.
    pub title: Option<String>,
    /// The first user message's text (else the first assistant's), whitespace collapsed and
    /// cut to 120 characters.
    pub preview: String,
}

/// The right to run one turn of a session: held from loading the session to the saved
/// answer, across processes where the backend is shared by several. Give it back with
/// [`TurnLock::release`]; dropping it releases it too (and, for the file backend, so does
/// the process dying), but a backend that releases over a network (a database) does that
/// in a background task a process that exits at once never runs.
pub struct TurnLock {
    _held: Box<dyn std::any::Any + Send + Sync>,
    release: Option<ReleaseTurn>,
}

/// How a backend gives a turn lock back at once.
type ReleaseTurn = Box<dyn FnOnce() -> nanobot_llm_port::BoxFuture<'static, ()> + Send + Sync>;

impl TurnLock {
    /// A lock that holds `guard` (whatever releases the backend's lock when dropped).
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        TurnLock {
            _held: Box::new(guard),
            release: None,
        }
    }

    /// A lock that `release` gives back at once, awaited (a database's), with `guard`'s
    /// drop as the fallback when it is dropped unreleased.
    pub fn with_release(
        guard: impl std::any::Any + Send + Sync,
        release: impl FnOnce() -> nanobot_llm_port::BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        TurnLock {
            _held: Box::new(guard),
            release: Some(Box::new(release)),
        }
    }

    /// Gives the lock back, and waits until the backend took it back.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            release().await;
        }
    }
}

impl fmt::Debug for TurnLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TurnLock")
    }
}

/// Where sessions are kept.
///
/// Contract, checked by the conformance suite (`conformance` feature) for every backend:
///
/// - **Unknown keys**: `load` returns `Ok(None)`; `delete` returns `Ok(false)`.
/// - **Ordering**: messages come back in the order they were appended, across any number of
///   appends and processes.
/// - **Atomicity**: an `append` or `rewrite` is all or nothing; after a crash a reader sees
///   the session before or after it (a torn file tail is repaired on the next load).
/// - **Stale writers**: every write names the revision it read (`None`: the session must not
///   exist). If the stored revision differs, the write fails with
///   [`SessionError::Conflict`] and changes nothing, so two writers never lose each other's
///   messages.
/// - **Pointer**: a write whose `last_consolidated` would pass the session's message count
///   fails with [`SessionError::InvalidPointer`].
/// - **Turns**: [`SessionStore::try_lock_turn`] gives at most one holder per session at a
///   time, across every process that shares the backend; a holder that dies releases it. A
///   dropped lock is free at once in its own process, and for the others as soon as the
///   release reaches the storage (a database's lands a moment after the drop).
/// - **Metadata**: the last written metadata wins. A backend may record a change of
///   `updated_at` alone lazily (the file backend writes it at [`SessionStore::flush`], not
///   with every message); everything else is recorded by the write that carries it.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Reads a session, repairing what can be repaired (reported in [`Loaded::repairs`]).
    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError>;

    /// Appends messages and, optionally, new metadata to the session at `expected`
    /// (`None` creates it). O(appended), not O(session).
    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError>;

    /// Replaces the whole session at `expected` (`None` creates it): used when messages are
    /// removed (`clear`) or replaced.
    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError>;

    /// Every session, most recently updated first.
    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError>;

    /// Removes a session; whether there was one.
    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError>;

    /// Opens a session to replay it: its metadata and the tail of messages replay can use
    /// ([`ReplayView`]). A backend that can read a session's end without its beginning
    /// does (the file backend reads the metadata and the live tail only, from
    /// [`crate::replay_floor`] on) and says so in [`SessionCapabilities::partial_replay`];
    /// one that cannot returns [`ReplayView::of_session`] of the whole session. Read-only:
    /// nothing is repaired.
    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError>;

    /// Makes the session at `expected` durable and tidy: synced to stable storage and, for
    /// the file backend, line 1 made current for nanobot-ai's readers and dead records
    /// compacted away. Called at turn end, when a session goes idle and at shutdown.
    /// Returns the revision after (a compaction changes it; a backend with nothing to do
    /// returns `expected` when the session is still there).
    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError>;

    /// The session's turn lock if nobody holds it now, else `None` at once (the caller
    /// decides how long to wait: [`crate::SessionManager::lock_turn`]). The session need
    /// not exist.
    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError>;

    /// The session's current revision without reading it (`None`: no such session), so a
    /// cached copy can be checked for staleness cheaply at the start of a turn.
    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError>;

    /// What this store offers beyond the contract.
    fn capabilities(&self) -> SessionCapabilities;
}

/// What a session store offers beyond the contract every store keeps. Build it with
/// `..Default::default()`, so a capability added later keeps compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionCapabilities {
    /// Several store instances over the same storage (processes, machines) see each other's
    /// writes, refuse each other's stale ones and exclude each other's turns.
    pub shared_storage: bool,
    /// [`SessionStore::open_for_replay`] reads a session's end without its beginning.
    pub partial_replay: bool,
}

/// Conveniences over any store.
#[async_trait]
pub trait SessionStoreExt: SessionStore {
    /// Writes what changed in `session` since it was loaded or last saved, at `expected`:
    /// an append when messages were added or metadata changed, a rewrite when messages were
    /// removed or replaced, nothing when nothing changed. Returns the new revision.
    async fn save_changes(
        &self,
        session: &mut Session,
        expected: Option<Revision>,
    ) -> Result<Option<Revision>, SessionError> {
        let write = session.pending_write();
        if write.is_empty() && expected.is_some() {
            return Ok(expected);
        }
        let revision = write.write_to(self, session.key(), expected).await?;
        session.mark_written(&write);
        Ok(Some(revision))
    }
}

impl<T: SessionStore + ?Sized> SessionStoreExt for T {}

macro_rules! forward_session_store {
    ($($wrapper:ty),*) => {$(
        #[async_trait]
        impl<T: SessionStore + ?Sized> SessionStore for $wrapper {
            async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
                (**self).load(key).await
            }
            async fn append(
                &self,
                key: &SessionKey,
                expected: Option<Revision>,
                append: Append<'_>,
            ) -> Result<Revision, SessionError> {
                (**self).append(key, expected, append).await
            }
            async fn rewrite(
                &self,
                session: &Session,
                expected: Option<Revision>,
            ) -> Result<Revision, SessionError> {
                (**self).rewrite(session, expected).await
            }
            async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
                (**self).list().await
            }
            async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
                (**self).delete(key).await
            }
            async fn open_for_replay(
                &self,
                key: &SessionKey,
            ) -> Result<Option<ReplayView>, SessionError> {
                (**self).open_for_replay(key).await
            }
            async fn flush(
                &self,
                key: &SessionKey,
                expected: Revision,
            ) -> Result<Revision, SessionError> {
                (**self).flush(key, expected).await
            }
            async fn try_lock_turn(
                &self,
                key: &SessionKey,
            ) -> Result<Option<TurnLock>, SessionError> {
                (**self).try_lock_turn(key).await
            }
            async fn current_revision(
                &self,
                key: &SessionKey,
            ) -> Result<Option<Revision>, SessionError> {
                (**self).current_revision(key).await
            }
            fn capabilities(&self) -> SessionCapabilities {
                (**self).capabilities()
            }
        }
    )*};
}

forward_session_store!(std::sync::Arc<T>, Box<T>);

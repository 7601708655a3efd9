//! The session manager: a bounded cache over any store that never hands out two live copies
//! of one session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use nanobot_llm_port::{Clock, TokenCounter};
use serde_json::Value;

use crate::error::SessionError;

/// Metric: seconds a turn waited for its session's turn lock (a histogram).
pub const TURN_LOCK_WAIT_SECONDS: &str = "nanobot_turn_lock_wait_seconds";
/// Metric: "busy" answers, by `reason`: `session` (a turn lock not free within the wait),
/// `turns` (a server at its limit of turns at once).
pub const BUSY: &str = "nanobot_busy_total";
use crate::history::{HistoryOptions, Replayed, get_history, message_tokens};
use crate::key::SessionKey;
use crate::message::StoredMessage;
use crate::message::TOKENS_FIELD;
use crate::session::{Session, local_naive};
use crate::store::{Repair, Revision, SessionInfo, SessionStore, TurnLock};

mod cache;
mod handle;

use cache::Cache;
use handle::HandleState;
pub use handle::SessionHandle;

/// How many sessions the manager keeps strongly cached (nanobot's default).
pub const DEFAULT_CACHE_CAPACITY: usize = 128;

/// How many times a write that meets another writer's change is reloaded, merged and tried
/// again before the conflict is returned. Each retry is a reload and an append; with turns
/// serialised by [`SessionManager::lock_turn`], only background work (a consolidation
/// moving the pointer) races, so more than two attempts are rare.
pub const MAX_WRITE_ATTEMPTS: usize = 8;

/// Called with the key of every deleted session (e.g. to drop per-session state a bot keeps
/// elsewhere).
pub type DeleteObserver = Box<dyn Fn(&SessionKey) + Send + Sync>;

/// Metadata a fork does not inherit: it describes the source's live state, not its history.
const FORK_VOLATILE_METADATA: [&str; 9] = [
    "goal_state",
    "pending_user_turn",
    "pending_user_followups",
    "runtime_checkpoint",
    "session_handle",
    "webui_recovery",
    "thread_goal",
    "title",
    "title_user_edited",
];

/// Sessions over any [`SessionStore`]: cache, then store, then new.
pub struct SessionManager {
    store: Arc<dyn SessionStore>,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    capacity: usize,
    cache: Mutex<Cache>,
    on_delete: Mutex<Option<DeleteObserver>>,
    record_tokens: bool,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl SessionManager {
    /// A manager over `store`, stamping times with `clock` and estimating tokens with
    /// `counter`.
    pub fn new(
        store: Arc<dyn SessionStore>,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Self {
        SessionManager {
            store,
            clock,
            counter,
            capacity: DEFAULT_CACHE_CAPACITY,
            cache: Mutex::new(Cache::default()),
            on_delete: Mutex::new(None),
            record_tokens: false,
        }
    }

    /// Calls `observer` with the key of every session [`SessionManager::delete`] is asked to
    /// delete, whether or not it existed.
    pub fn set_delete_observer(&self, observer: DeleteObserver) {
        *self.on_delete.lock().unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }

    /// Keeps at most `capacity` sessions strongly cached (sessions still held elsewhere stay
    /// reachable beyond it).
    pub fn with_cache_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Counts every new message's tokens when it is added and records the count in the
    /// message (`_tokens`), so a session loaded cold later is not tokenized again (an idle
    /// compaction of a long session then costs no counting). Off by default: it adds the
    /// counting (about 10 to 25 µs a message) to each save, which matters when every save
    /// is fsynced.
    pub fn with_recorded_token_counts(mut self, record: bool) -> Self {
        self.record_tokens = record;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn handle(
        &self,
        session: Session,
        revision: Option<Revision>,
        repairs: Vec<Repair>,
    ) -> Arc<SessionHandle> {
        self.new_handle(session, revision, repairs, true)
    }

    fn new_handle(
        &self,
        session: Session,
        revision: Option<Revision>,
        repairs: Vec<Repair>,
        persist: bool,
    ) -> Arc<SessionHandle> {
        Arc::new(SessionHandle {
            persist,
            key: session.key().clone(),
            state: Mutex::new(HandleState {
                session,
                revision,
                repairs,
            }),
            write: tokio::sync::Mutex::new(()),
            clock: Arc::clone(&self.clock),
            counter: Arc::clone(&self.counter),
            record_tokens: self.record_tokens,
        })
    }

    /// The cached session, without touching the store.
    pub fn get_cached(&self, key: &SessionKey) -> Option<Arc<SessionHandle>> {
        self.cache().get(key, self.capacity)
    }

    /// The session for `key`: from the cache, else loaded (and repaired) from the store,
    /// else a new empty one (not written until its first save).
    pub async fn get_or_create(
        &self,
        key: &SessionKey,
    ) -> Result<Arc<SessionHandle>, SessionError> {
        if let Some(handle) = self.get_cached(key) {
            return Ok(handle);
        }
        let handle = match self.store.load(key).await? {
            Some(loaded) => self.handle(loaded.session, Some(loaded.revision), loaded.repairs),
            None => self.handle(
                Session::new(key.clone(), local_naive(self.clock.now())),
                None,
                Vec::new(),
            ),
        };
        let mut cache = self.cache();
        // Another task may have loaded it meanwhile: theirs is the live copy.
        if let Some(existing) = cache.get(key, self.capacity) {
            return Ok(existing);
        }
        cache.remember(Arc::clone(&handle), self.capacity);
        Ok(handle)
    }

    /// A temporary session for `key` that is never written (nanobot's transient WebUI chat):
    /// the cached transient session if there is one, else a new empty one, which replaces
    /// any cached persistent session of that key without loading its history.
    pub fn get_or_create_transient(&self, key: &SessionKey) -> Arc<SessionHandle> {
        let mut cache = self.cache();
        if let Some(existing) = cache.get(key, self.capacity).filter(|h| !h.persist) {
            return existing;
        }
        let now = local_naive(self.clock.now());
        let handle = self.new_handle(Session::new(key.clone(), now), None, Vec::new(), false);
        cache.remember(Arc::clone(&handle), self.capacity);
        handle
    }

    /// Copies the conversation of `source` before its user turn number `before_user` (0 for
    /// the first) into a new session `target`, written at once: the branch a user starts by
    /// editing an earlier message. `before_user` equal to the number of user turns copies
    /// everything; larger, or a missing source, gives `None`. Copies carry no model-only
    /// runtime context; metadata about the source's live state (title, goals, handles) is
    /// not inherited; the pointer and summary are kept only if they still describe the copy.
    /// An existing `target` is replaced.
    pub async fn fork(
        &self,
        source: &SessionKey,
        target: &SessionKey,
        before_user: usize,
    ) -> Result<Option<Arc<SessionHandle>>, SessionError> {
        let source = match self.get_cached(source) {
            Some(handle) => handle.snapshot(),
            None => match self.store.load(source).await? {
                Some(loaded) => loaded.session,
                None => return Ok(None),
            },
        };
        let mut users = 0;
        let mut copied = Vec::new();
        for message in source.messages() {
            if message.role() == Some("user") {
                if users == before_user {
                    break;
                }
                users += 1;
            }
            copied.push(crate::history::public_copy(message));
        }
        if users < before_user {
            return Ok(None);
        }
        let now = local_naive(self.clock.now());
        let mut fork = Session::new(target.clone(), now);
        let mut metadata = source.meta().metadata.clone();
        for key in FORK_VOLATILE_METADATA {
            metadata.shift_remove(key);
        }
        let pointer = source.last_consolidated();
        if pointer > copied.len() {
            metadata.shift_remove(crate::session::LAST_SUMMARY_KEY);
        }
        *fork.metadata_mut() = metadata;
        let count = copied.len();
        fork.replace_messages(copied, now);
        fork.set_last_consolidated(if pointer > count { 0 } else { pointer })?;
        let existing = self.store.load(target).await?.map(|l| l.revision);
        self.invalidate(target);
        let handle = self.handle(fork, existing, Vec::new());
        self.end_turn(&handle).await?;
        self.cache().remember(Arc::clone(&handle), self.capacity);
        Ok(Some(handle))
    }

    /// Writes what changed in the session. On a conflict with another writer, the stored
    /// version is reloaded, this copy's new messages and metadata changes are applied on top
    /// and the write is tried again (at most [`MAX_WRITE_ATTEMPTS`] times), so neither
    /// writer loses messages and a resolvable conflict never reaches the caller.
    pub async fn save(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        if !handle.persist {
            return Ok(());
        }
        let _writing = handle.write.lock().await;
        self.save_locked(handle).await
    }

    /// [`SessionManager::save`] with the handle's write lock held.
    async fn save_locked(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        let mut attempt = 1;
        loop {
            match self.write_pending(handle).await {
                Err(SessionError::Conflict { .. })
                    if attempt < MAX_WRITE_ATTEMPTS && !handle.read(|s| s.needs_rewrite) =>
                {
                    self.merge_onto_stored(handle).await?;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Changes the session's metadata through `commit` instead of the store's own write: an
    /// operation that writes the metadata together with something else (the archive commit
    /// journals entries and moves the pointer as one). Unsaved messages are saved first, so
    /// the change is metadata only; `change` edits a copy and says whether there is
    /// anything to commit (`false`: nothing is written, `Ok(None)`); `commit` gets the
    /// revision the copy was made at and the metadata after the change, and returns the
    /// revision after its write. On success the cached session takes the change; on any
    /// failure it is reloaded from the store (so a caller that retries sees what another
    /// writer did) and the error is returned.
    pub async fn commit_meta<T, E>(
        &self,
        handle: &SessionHandle,
        change: impl FnOnce(&mut Session) -> bool,
        commit: impl AsyncFnOnce(Revision, &crate::SessionMeta) -> Result<(Revision, T), E>,
    ) -> Result<Option<T>, E>
    where
        E: From<SessionError>,
    {
        let _writing = handle.write.lock().await;
        if handle.persist {
            self.save_locked(handle).await?;
        }
        let (mut copy, revision) = {
            let state = handle.lock();
            (state.session.clone(), state.revision)
        };
        if !change(&mut copy) {
            return Ok(None);
        }
        if !handle.persist {
            handle.lock().session = copy;
            return Ok(None);
        }
        let Some(revision) = revision else {
            return Ok(None);
        };
        let write = copy.pending_write();
        match commit(revision, copy.meta()).await {
            Ok((after, value)) => {
                copy.mark_written(&write);
                let mut state = handle.lock();
                state.session = copy;
                state.revision = Some(after);
                Ok(Some(value))
            }
            Err(error) => {
                // A reload that fails too leaves the copy as it was; its next write is
                // checked against the store like any other.
                let _ = self.merge_onto_stored(handle).await;
                Err(error)
            }
        }
    }

    /// Reloads the stored session and puts this copy's unsaved changes on top of it.
    async fn merge_onto_stored(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        let loaded = self.store.load(&handle.key).await?;
        let mut state = handle.lock();
        let merged = match loaded.as_ref() {
            Some(loaded) => state.session.merged_onto(loaded.session.clone()),
            None => state.session.merged_onto(Session::new(
                handle.key.clone(),
                state.session.meta().created_at,
            )),
        };
        state.session = merged;
        state.revision = loaded.map(|l| l.revision);
        Ok(())
    }

    /// The turn of `key`: waits until no other turn (in this process or another sharing the
    /// store) holds the session, at most `wait`, then returns the lock, which the caller
    /// keeps until the answer is saved. A cached copy that another process changed
    /// meanwhile is dropped, so the turn starts from what is stored. Past `wait`:
    /// [`SessionError::Busy`], and nothing was written.
    pub async fn lock_turn(
        &self,
        key: &SessionKey,
        wait: std::time::Duration,
    ) -> Result<TurnLock, SessionError> {
        let started = self.clock.now();
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            let waited = (self.clock.now() - started)
                .to_std()
                .unwrap_or(std::time::Duration::ZERO);
            if let Some(lock) = self.store.try_lock_turn(key).await? {
                metrics::histogram!(TURN_LOCK_WAIT_SECONDS).record(waited.as_secs_f64());
                self.refresh_if_stale(key).await?;
                return Ok(lock);
            }
            if waited >= wait {
                metrics::counter!(BUSY, "reason" => "session").increment(1);
                return Err(SessionError::Busy {
                    key: key.to_string(),
                    waited,
                });
            }
            self.clock.sleep(pause.min(wait - waited)).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(100));
        }
    }

    /// Drops the cached copy of `key` when the store moved on and the copy holds nothing
    /// unsaved (with unsaved changes, the next save merges them onto the stored version).
    async fn refresh_if_stale(&self, key: &SessionKey) -> Result<(), SessionError> {
        let Some(handle) = self.get_cached(key) else {
            return Ok(());
        };
        if !handle.persist {
            return Ok(());
        }
        let stored = self.store.current_revision(key).await?;
        let (cached, clean) = {
            let state = handle.lock();
            (state.revision, state.session.pending_write().is_empty())
        };
        if stored != cached && clean {
            self.invalidate(key);
        }
        Ok(())
    }

    async fn write_pending(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        let (write, expected) = {
            let state = handle.lock();
            (state.session.pending_write(), state.revision)
        };
        if write.is_empty() && expected.is_some() {
            return Ok(());
        }
        let revision = write
            .write_to(self.store.as_ref(), &handle.key, expected)
            .await?;
        let mut state = handle.lock();
        state.session.mark_written(&write);
        state.revision = Some(revision);
        Ok(())
    }

    /// Saves, then makes the session durable and tidy ([`SessionStore::flush`]): call it
    /// when a turn ends and when a session goes idle. A flush that meets another writer's
    /// change reloads, merges and tries again, like [`SessionManager::save`].
    pub async fn end_turn(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        if !handle.persist {
            return Ok(());
        }
        let _writing = handle.write.lock().await;
        self.save_locked(handle).await?;
        let mut attempt = 1;
        loop {
            let Some(expected) = handle.revision() else {
                return Ok(());
            };
            match self.store.flush(&handle.key, expected).await {
                Ok(revision) => {
                    handle.lock().revision = Some(revision);
                    return Ok(());
                }
                Err(SessionError::Conflict { .. }) if attempt < MAX_WRITE_ATTEMPTS => {
                    // Everything of ours is written; another writer appended since. Take
                    // the stored version (with anything still unsaved on top) and flush it.
                    self.merge_onto_stored(handle).await?;
                    self.save_locked(handle).await?;
                    attempt += 1;
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Empties the session (nanobot's `/new`) and writes it; other metadata stays.
    pub async fn clear(&self, handle: &SessionHandle) -> Result<(), SessionError> {
        let now = local_naive(self.clock.now());
        handle.update(|session| session.clear(now));
        self.save(handle).await
    }

    /// Saves and flushes every live session; how many succeeded, and the first error.
    pub async fn flush_all(&self) -> (usize, Option<SessionError>) {
        let handles = self.cache().live();
        let mut flushed = 0;
        let mut first_error = None;
        for handle in handles {
            match self.end_turn(&handle).await {
                Ok(()) => flushed += 1,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        (flushed, first_error)
    }

    /// Every stored session, most recently updated first.
    pub async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        self.store.list().await
    }

    /// Forgets the cached copy; the next [`SessionManager::get_or_create`] reads the store.
    /// Whoever still holds the old handle holds a detached copy, whose saves are checked
    /// against the store's revision like any other writer's.
    pub fn invalidate(&self, key: &SessionKey) {
        self.cache().remove(key);
    }

    /// Deletes the session from the store and the cache; whether it existed.
    pub async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.invalidate(key);
        let deleted = self.store.delete(key).await;
        if let Some(observer) = self
            .on_delete
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            observer(key);
        }
        deleted
    }
}

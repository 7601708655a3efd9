//! The in-memory backend: the reference for the conformance suite and the choice for bots
//! that need no persistence.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::error::SessionError;
use crate::info;
use crate::key::SessionKey;
use crate::replay::ReplayView;
use crate::session::Session;
use crate::store::{
    Append, Loaded, Revision, SessionCapabilities, SessionInfo, SessionStore, TurnLock,
};

/// Sessions in a map, gone when the process ends.
#[derive(Debug, Default)]
pub struct InMemorySessionStore {
    sessions: Mutex<HashMap<SessionKey, (Session, Revision)>>,
    epochs: Mutex<u64>,
    turns: Arc<Mutex<HashSet<SessionKey>>>,
}

/// A held turn of the in-memory store: the key leaves the held set when dropped.
struct HeldTurn {
    key: SessionKey,
    turns: Arc<Mutex<HashSet<SessionKey>>>,
}

impl Drop for HeldTurn {
    fn drop(&mut self) {
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

impl InMemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn next_epoch(&self) -> u64 {
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        *epochs += 1;
        *epochs
    }
}

#[async_trait]
impl SessionStore for InMemorySessionStore {
    async fn try_lock_turn(&self, key: &SessionKey) -> Result<Option<TurnLock>, SessionError> {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if !turns.insert(key.clone()) {
            return Ok(None);
        }
        Ok(Some(TurnLock::new(HeldTurn {
            key: key.clone(),
            turns: Arc::clone(&self.turns),
        })))
    }

    async fn current_revision(&self, key: &SessionKey) -> Result<Option<Revision>, SessionError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(sessions.get(key).map(|(_, revision)| *revision))
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Loaded>, SessionError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(sessions.get(key).map(|(session, revision)| Loaded {
            session: session.clone(),
            revision: *revision,
            repairs: Vec::new(),
        }))
    }

    async fn append(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        append: Append<'_>,
    ) -> Result<Revision, SessionError> {
        let epoch = if expected.is_none() {
            self.next_epoch()
        } else {
            0
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        SessionError::check_revision(key, expected, sessions.get(key).map(|(_, r)| *r))?;
        let (mut session, revision) = match sessions.remove(key) {
            Some(entry) => entry,
            None => {
                let now = append.meta.map(|m| m.created_at).unwrap_or_default();
                let session = Session::new(key.clone(), now);
                (session, Revision { epoch, offset: 0 })
            }
        };
        let count = session.messages().len() + append.messages.len();
        let meta = append
            .meta
            .cloned()
            .unwrap_or_else(|| session.meta().clone());
        let stored = Some(session.meta().last_consolidated).filter(|_| expected.is_some());
        if let Err(error) =
            SessionError::check_append_pointer(key, stored, meta.last_consolidated, count)
        {
            sessions.insert(key.clone(), (session, revision));
            return Err(error);
        }
        // The stored messages are moved, not copied: an append costs what it adds.
        let mut messages = session.into_messages();
        messages.extend(append.messages.iter().cloned());
        session = Session::from_parts(key.clone(), messages, meta);
        let revision = Revision {
            epoch: revision.epoch,
            offset: revision.offset + 1,
        };
        sessions.insert(key.clone(), (session, revision));
        Ok(revision)
    }

    async fn rewrite(
        &self,
        session: &Session,
        expected: Option<Revision>,
    ) -> Result<Revision, SessionError> {
        let epoch = self.next_epoch();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        SessionError::check_revision(
            session.key(),
            expected,
            sessions.get(session.key()).map(|(_, r)| *r),
        )?;
        let stored = Session::from_parts(
            session.key().clone(),
            session.messages().to_vec(),
            session.meta().clone(),
        );
        let revision = Revision { epoch, offset: 0 };
        sessions.insert(session.key().clone(), (stored, revision));
        Ok(revision)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<SessionInfo> = sessions
            .values()
            .map(|(session, _)| SessionInfo {
                key: session.key().clone(),
                created_at: session.meta().created_at,
                updated_at: session.meta().updated_at,
                message_count: session.messages().len(),
                title: info::listing_title(&session.meta().metadata),
                preview: info::listing_preview(session.messages()),
            })
            .collect();
        sort_listing(&mut rows);
        Ok(rows)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(sessions.remove(key).is_some())
    }

    async fn open_for_replay(&self, key: &SessionKey) -> Result<Option<ReplayView>, SessionError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(sessions
            .get(key)
            .map(|(session, revision)| ReplayView::of_session(session.clone(), *revision)))
    }

    async fn flush(&self, key: &SessionKey, expected: Revision) -> Result<Revision, SessionError> {
        // Nothing to make durable; a stale caller still learns that it is stale.
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let found = sessions.get(key).map(|(_, revision)| *revision);
        SessionError::check_revision(key, Some(expected), found)?;
        Ok(expected)
    }

    fn capabilities(&self) -> SessionCapabilities {
        SessionCapabilities::default()
    }
}

/// The listing order every backend uses: most recently updated first; ties by key, so
/// listings are deterministic.
pub fn sort_listing(rows: &mut [SessionInfo]) {
    rows.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.key.cmp(&b.key))
    });
}

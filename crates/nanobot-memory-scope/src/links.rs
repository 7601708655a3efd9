//! Identity links: an operator says that several channel identities are one person, so
//! they share one memory. Links are never made from message text.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::ScopeError;
use crate::key::UserKey;

/// Linking or unlinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkAction {
    /// `identity` now shares `target`'s memory.
    Link,
    /// `identity` has its own memory again.
    Unlink,
}

/// One change to the links, with who made it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// Linking or unlinking.
    pub action: LinkAction,
    /// The identity whose memory changes.
    pub identity: UserKey,
    /// Whose memory it shares (for a link; the one it left, for an unlink).
    pub target: UserKey,
    /// The operator.
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// Where the links are kept. One backend per store: in memory, a file beside the scopes,
/// a table.
#[async_trait]
pub trait LinkTable: Send + Sync {
    /// Every change, oldest first.
    async fn records(&self) -> Result<Vec<LinkRecord>, ScopeError>;

    /// Adds `record` after checking it against the records there are now (under the
    /// table's own lock, so two operators cannot build a chain between them).
    async fn append(&self, record: LinkRecord) -> Result<(), ScopeError>;

    /// Removes every record that names `user` (erasure: its id leaves no trace here).
    async fn forget(&self, user: &UserKey) -> Result<usize, ScopeError>;
}

/// The links in force after `records`: identity → the user whose memory it shares.
pub fn links_in_force(records: &[LinkRecord]) -> BTreeMap<UserKey, UserKey> {
    let mut links = BTreeMap::new();
    for record in records {
        match record.action {
            LinkAction::Link => {
                links.insert(record.identity.clone(), record.target.clone());
            }
            LinkAction::Unlink => {
                links.remove(&record.identity);
            }
        }
    }
    links
}

/// The user whose memory `identity` uses: its link target, or itself.
pub fn canonical_user(links: &BTreeMap<UserKey, UserKey>, identity: &UserKey) -> UserKey {
    links.get(identity).unwrap_or(identity).clone()
}

/// Checks that `record` may follow `records`: no identity linked to itself or to an
/// identity that is itself linked elsewhere (links stay one step deep, so what an identity
/// resolves to never depends on the order of two links), and no identity that others
/// follow linked away; only a linked identity is unlinked.
pub fn check_record(records: &[LinkRecord], record: &LinkRecord) -> Result<(), ScopeError> {
    let links = links_in_force(records);
    match record.action {
        LinkAction::Link => {
            if record.identity == record.target {
                return Err(ScopeError::InvalidLink {
                    reason: format!("{} cannot be linked to itself", record.identity),
                });
            }
            if let Some(other) = links.get(&record.target) {
                return Err(ScopeError::InvalidLink {
                    reason: format!(
                        "{} is itself linked to {other}; link to {other} instead",
                        record.target
                    ),
                });
            }
            if let Some(follower) = links.iter().find(|(_, t)| **t == record.identity) {
                return Err(ScopeError::InvalidLink {
                    reason: format!(
                        "{} shares {}'s memory; unlink it first or link it to {} too",
                        follower.0, record.identity, record.target
                    ),
                });
            }
            if links.get(&record.identity) == Some(&record.target) {
                return Err(ScopeError::InvalidLink {
                    reason: format!("{} is already linked to {}", record.identity, record.target),
                });
            }
            Ok(())
        }
        LinkAction::Unlink => match links.get(&record.identity) {
            Some(target) if *target == record.target => Ok(()),
            Some(target) => Err(ScopeError::InvalidLink {
                reason: format!(
                    "{} is linked to {target}, not to {}",
                    record.identity, record.target
                ),
            }),
            None => Err(ScopeError::InvalidLink {
                reason: format!("{} is not linked", record.identity),
            }),
        },
    }
}

/// Links in memory (tests, and bots that keep links elsewhere).
#[derive(Debug, Default)]
pub struct InMemoryLinks {
    records: Mutex<Vec<LinkRecord>>,
}

impl InMemoryLinks {
    /// No links.
    pub fn new() -> Self {
        InMemoryLinks::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<LinkRecord>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl LinkTable for InMemoryLinks {
    async fn records(&self) -> Result<Vec<LinkRecord>, ScopeError> {
        Ok(self.lock().clone())
    }

    async fn append(&self, record: LinkRecord) -> Result<(), ScopeError> {
        let mut records = self.lock();
        check_record(&records, &record)?;
        records.push(record);
        Ok(())
    }

    async fn forget(&self, user: &UserKey) -> Result<usize, ScopeError> {
        let mut records = self.lock();
        let before = records.len();
        records.retain(|r| r.identity != *user && r.target != *user);
        Ok(before - records.len())
    }
}

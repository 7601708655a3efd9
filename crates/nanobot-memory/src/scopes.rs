//! Listing and erasing scopes, the operations a turn does not cover (`nanobot scopes`, an
//! operator's tools), on whichever storage the bot was built with.

#[cfg(feature = "postgres")]
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_scope::Subject;

use crate::{AssemblyError, Storage};

/// What one scope holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopeSummary {
    /// Whose memory.
    pub subject: Subject,
    /// Where it is kept (a directory, or the database's scope).
    pub location: String,
    /// Its sessions.
    pub sessions: usize,
    /// The latest journal cursor.
    pub entries: u64,
    /// Entries Dream has not read.
    pub unread: u64,
}

impl ScopeSummary {
    /// The scope of `subject` kept at `location`, with `sessions` sessions and its journal's
    /// cursors: the latest one and Dream's (the entries Dream has not read are derived).
    pub fn counted(
        subject: Subject,
        location: impl Into<String>,
        sessions: usize,
        latest_cursor: u64,
        dream_cursor: u64,
    ) -> Self {
        ScopeSummary {
            subject,
            location: location.into(),
            sessions,
            entries: latest_cursor,
            unread: latest_cursor.saturating_sub(dream_cursor),
        }
    }
}

impl Storage {
    /// Every scope other than the agent's, with what it holds.
    pub async fn scopes(&self) -> Result<Vec<ScopeSummary>, AssemblyError> {
        match self {
            #[cfg(feature = "files")]
            Storage::Files(backend) => backend.scope_summaries().await,
            #[cfg(feature = "postgres")]
            Storage::Postgres(store) => Ok(store
                .scopes()
                .await?
                .into_iter()
                .filter(|s| !s.key.subject.is_agent())
                .map(|s| {
                    ScopeSummary::counted(
                        s.key.subject.clone(),
                        format!("schema {}, scope {}", store.schema().name(), s.key),
                        usize::try_from(s.sessions).unwrap_or(usize::MAX),
                        s.latest,
                        s.dream_cursor,
                    )
                })
                .collect()),
            _ => Err(unlisted()),
        }
    }

    /// The scope of `subject` as listed, `None` when it holds nothing yet.
    pub async fn scope(&self, subject: &Subject) -> Result<Option<ScopeSummary>, AssemblyError> {
        Ok(self
            .scopes()
            .await?
            .into_iter()
            .find(|s| s.subject == *subject))
    }

    /// Erases the scope of `subject` and everything in it; whether there was one. The
    /// agent's scope is never erased here.
    pub async fn erase(&self, subject: &Subject) -> Result<bool, AssemblyError> {
        match self {
            #[cfg(feature = "files")]
            Storage::Files(backend) => Ok(backend.dirs().delete(subject)?),
            #[cfg(feature = "postgres")]
            Storage::Postgres(store) => Ok(store
                .delete_scope(&ScopeKey::local(subject.clone()))
                .await?),
            _ => {
                let _ = subject;
                Err(unlisted())
            }
        }
    }
}

/// The refusal of a storage that keeps no list of its scopes.
fn unlisted() -> AssemblyError {
    AssemblyError::Refused {
        why: "this bot's storage (in memory, or a backend of your own) keeps no list of scopes"
            .into(),
    }
}

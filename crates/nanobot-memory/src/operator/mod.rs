//! What an operator does to a bot's scopes beyond its turns: the agent scope's holdings,
//! identity links, erasure (right to be forgotten), and the review queue of what users' and
//! chats' Dreams proposed for the shared files; and what an operator reads of them.

mod forget;
mod reports;

pub use forget::{ForgetReport, ScopeForget};

pub use reports::{describe, link_line};

use std::sync::Arc;

use nanobot_dream::Proposal;
use nanobot_memory_scope::{LinkAction, LinkRecord, ScopeKey, Subject, UserKey, links_in_force};
use nanobot_memory_store::HistoryJournal;
use nanobot_turn::ScopeMemory;

use crate::{AssemblyError, Bot, ScopeSummary};

/// What erasing a scope removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Erased {
    /// The scope's sessions, journal, documents, versions and Dream records were there and
    /// are gone.
    pub removed: bool,
    /// Link records naming the user, removed.
    pub links: usize,
}

/// One proposal to a shared file, with the scope whose Dream made it.
#[derive(Clone)]
#[non_exhaustive]
pub struct ScopeProposal {
    /// The proposing scope's memory.
    pub memory: Arc<ScopeMemory>,
    /// Its place in that scope's queue.
    pub index: usize,
    /// The proposal.
    pub proposal: Proposal,
}

impl std::fmt::Debug for ScopeProposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeProposal")
            .field("scope", &self.memory.scope)
            .field("index", &self.index)
            .field("proposal", &self.proposal)
            .finish()
    }
}

impl Bot {
    /// The agent scope's holdings, through its stores.
    pub async fn agent_summary(&self) -> Result<ScopeSummary, AssemblyError> {
        let memory = self.agent.memory(&ScopeKey::local(Subject::Agent)).await?;
        let entries = memory.journal.latest_cursor().await?;
        let dream = memory.journal.dream_cursor().await?;
        let location = self.agent_location();
        let sessions = memory.sessions.list().await?.len();
        Ok(ScopeSummary::counted(
            Subject::Agent,
            location,
            sessions,
            entries,
            dream,
        ))
    }

    /// Where the agent scope is kept, in words.
    fn agent_location(&self) -> String {
        #[cfg(feature = "postgres")]
        if let crate::Storage::Postgres(store) = &self.storage {
            return format!("schema {}, scope agent", store.schema().name());
        }
        "the workspace".into()
    }

    /// Gives `identity` `target`'s memory from its next turn (recorded as done by `by`);
    /// the identity's own scope, if it had one, is kept unused while linked and returned.
    pub async fn link(
        &self,
        identity: UserKey,
        target: UserKey,
        by: &str,
    ) -> Result<(LinkRecord, Option<ScopeSummary>), AssemblyError> {
        let record = LinkRecord {
            action: LinkAction::Link,
            identity: identity.clone(),
            target,
            by: by.to_owned(),
            at: self.agent.clock().now(),
        };
        self.links.append(record.clone()).await?;
        let own = self.storage.scope(&Subject::User(identity)).await?;
        Ok((record, own))
    }

    /// Ends `identity`'s link (recorded as done by `by`): its next turns use its own memory.
    pub async fn unlink(&self, identity: &UserKey, by: &str) -> Result<LinkRecord, AssemblyError> {
        let links = links_in_force(&self.links.records().await?);
        let Some(target) = links.get(identity).cloned() else {
            return Err(AssemblyError::NotFound {
                what: format!("{identity} is not linked"),
            });
        };
        let record = LinkRecord {
            action: LinkAction::Unlink,
            identity: identity.clone(),
            target,
            by: by.to_owned(),
            at: self.agent.clock().now(),
        };
        self.links.append(record.clone()).await?;
        Ok(record)
    }

    /// Erases `subject`'s scope whole: the memory the agent keeps open is dropped, then its
    /// storage, then every link record naming the user. The agent's scope is refused.
    pub async fn erase_scope(&self, subject: &Subject) -> Result<Erased, AssemblyError> {
        if subject.is_agent() {
            return Err(AssemblyError::Refused {
                why: "the agent scope is the workspace itself; it is not erased by this command"
                    .into(),
            });
        }
        self.agent
            .forget_memory(&ScopeKey::local(subject.clone()))
            .await;
        let removed = self.storage.erase(subject).await?;
        let links = match subject {
            Subject::User(user) => self.links.forget(user).await?,
            _ => 0,
        };
        if !removed && links == 0 {
            return Err(AssemblyError::NotFound {
                what: format!("there is no scope {subject} to erase"),
            });
        }
        Ok(Erased { removed, links })
    }

    /// Every scope's proposals to the shared files, in the order of the scopes' listing.
    pub async fn proposals(&self) -> Result<Vec<ScopeProposal>, AssemblyError> {
        let mut all = Vec::new();
        for scope in self.storage.scopes().await? {
            let memory = self.agent.memory(&ScopeKey::local(scope.subject)).await?;
            for (index, proposal) in memory.dream.proposals().await?.into_iter().enumerate() {
                all.push(ScopeProposal {
                    memory: memory.clone(),
                    index,
                    proposal,
                });
            }
        }
        Ok(all)
    }

    /// Dismisses the proposals numbered (from 1) as [`Bot::proposals`] lists them; the ones
    /// dismissed. A number out of range refuses them all.
    pub async fn dismiss_proposals(
        &self,
        numbers: &[usize],
    ) -> Result<Vec<(usize, ScopeProposal)>, AssemblyError> {
        let all = self.proposals().await?;
        if let Some(bad) = numbers.iter().find(|n| **n == 0 || **n > all.len()) {
            return Err(AssemblyError::Refused {
                why: format!("there is no proposal {bad} (there are {})", all.len()),
            });
        }
        let mut done = Vec::new();
        for (n, proposal) in all.into_iter().enumerate() {
            if numbers.contains(&(n + 1)) {
                proposal
                    .memory
                    .dream
                    .dismiss_proposals(&[proposal.index])
                    .await?;
                done.push((n + 1, proposal));
            }
        }
        Ok(done)
    }
}

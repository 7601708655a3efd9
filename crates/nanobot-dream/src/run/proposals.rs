//! Changes to the agent's shared files, queued for an operator instead of applied.

use super::*;

impl Dream {
    /// The proposals waiting for review, oldest first.
    pub async fn proposals(&self) -> Result<Vec<Proposal>, DreamError> {
        let Some(text) = self.documents.read_aux(AuxFile::DreamProposals).await? else {
            return Ok(Vec::new());
        };
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&text).map_err(|e| {
            DreamError::Memory(MemoryError::InvalidFile {
                path: AuxFile::DreamProposals.path().into(),
                reason: format!("is not a list of proposals ({e}); inspect it, then delete it"),
            })
        })
    }

    /// Removes the proposals at `indexes` (0-based, as [`Dream::proposals`] lists them),
    /// after an operator applied or refused them; the ones removed.
    pub async fn dismiss_proposals(&self, indexes: &[usize]) -> Result<Vec<Proposal>, DreamError> {
        let lease = self.acquire("proposal review").await?;
        let result = async {
            let all = self.proposals().await?;
            let (gone, kept): (Vec<_>, Vec<_>) = all
                .into_iter()
                .enumerate()
                .partition(|(i, _)| indexes.contains(i));
            if !gone.is_empty() {
                let kept: Vec<Proposal> = kept.into_iter().map(|(_, p)| p).collect();
                self.write_proposals(&kept).await?;
            }
            Ok(gone.into_iter().map(|(_, p)| p).collect())
        }
        .await;
        self.give_back(lease).await;
        result
    }

    pub(super) async fn write_proposals(&self, proposals: &[Proposal]) -> Result<(), DreamError> {
        let text = serde_json::to_string_pretty(proposals).map_err(|e| {
            DreamError::Memory(MemoryError::backend(format!(
                "proposals cannot be encoded: {e}"
            )))
        })?;
        self.documents
            .write_aux(AuxFile::DreamProposals, &text)
            .await?;
        Ok(())
    }

    pub(super) async fn queue_proposals(&self, new: Vec<Proposal>) -> Result<(), DreamError> {
        if new.is_empty() {
            return Ok(());
        }
        let mut all = self.proposals().await?;
        for proposal in new {
            let repeat = all.iter().any(|p| {
                p.path == proposal.path
                    && p.after == proposal.after
                    && p.entries == proposal.entries
            });
            if !repeat {
                all.push(proposal);
            }
        }
        self.write_proposals(&all).await
    }

    /// Finishes the change of a run that was interrupted while applying it (under the
    /// lease); whether there was one.
    pub async fn finish_pending(&self) -> Result<bool, DreamError> {
        let lease = self.acquire("finishing an interrupted change").await?;
        let recovered = self.commit.recover(lease.fence).await;
        self.give_back(lease).await;
        Ok(match recovered? {
            Recovery::Nothing => false,
            Recovery::Finished => true,
            Recovery::Abandoned { reason } => {
                tracing::warn!(%reason, "an interrupted Dream change was abandoned");
                true
            }
        })
    }
}

/// A change Dream queued for an operator's review instead of applying it: a user's or a
/// chat's change to a file of the agent scope (`SOUL.md`, a skill; the scope may read those
/// files, never write them), or any change of a scope whose every edit waits for review.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Proposal {
    /// When it was proposed.
    pub at: DateTime<Utc>,
    /// The file, workspace-relative (`SOUL.md`, `skills/<name>/SKILL.md`).
    pub path: String,
    /// Its text when the run read it (`None`: a new skill).
    pub before: Option<String>,
    /// The text proposed.
    pub after: String,
    /// The journal entries (first and last cursor) of the run that proposed it.
    pub entries: (u64, u64),
    /// Why: the change log of the run that proposed it (empty in proposals queued before
    /// it was kept).
    #[serde(default)]
    pub reason: String,
    /// Whether it changes the agent's shared files from another scope (applied in the agent
    /// scope), rather than the proposing scope's own files (review of every edit).
    #[serde(default = "shared_by_default")]
    pub shared: bool,
}

/// Proposals queued before `shared` was kept were all to the shared files.
fn shared_by_default() -> bool {
    true
}

impl Proposal {
    /// A short id that names this proposal in a review (a hash of when, where and what),
    /// stable while it waits, unlike its position in the queue.
    pub fn id(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let text = format!("{}\n{}\n{}", self.at.to_rfc3339(), self.path, self.after);
        for byte in text.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }

    /// The proposal as a line diff against the text the run read.
    pub fn diff(&self) -> Option<FileDiff> {
        file_diff(&self.path, self.before.as_deref(), Some(&self.after))
    }
}

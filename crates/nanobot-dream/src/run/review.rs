//! An operator's review of Dream's proposals: approving one applies it as Dream would have
//! (through the commit port, checked against the text it was proposed over) and records a
//! version that can be restored; rejecting one records why. A scope may also ask that every
//! edit of its Dream waits for review.

use super::versions::Plan;
use super::*;

/// A scope's review record (`memory/.dream_review.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Review {
    /// Every edit of this scope's Dream is queued as a proposal instead of applied.
    #[serde(default)]
    pub every_edit: bool,
    /// The decisions taken, oldest first.
    #[serde(default)]
    pub decisions: Vec<Decision>,
}

/// What an operator decided about one proposal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Decision {
    /// When.
    pub at: DateTime<Utc>,
    /// The proposal's id ([`Proposal::id`]) and file.
    pub proposal: String,
    /// Its file.
    pub path: String,
    /// Applied (`true`) or refused.
    pub approved: bool,
    /// The operator's words (why it was refused; may be empty for an approval).
    pub reason: String,
    /// The version recording an approval.
    pub version: Option<String>,
}

/// Decisions kept in the record (the oldest go first).
const MAX_DECISIONS: usize = 500;

impl Dream {
    /// This scope's review record.
    pub async fn review(&self) -> Result<Review, DreamError> {
        let Some(text) = self.documents.read_aux(AuxFile::DreamReview).await? else {
            return Ok(Review::default());
        };
        if text.trim().is_empty() {
            return Ok(Review::default());
        }
        serde_json::from_str(&text).map_err(|e| {
            DreamError::Memory(MemoryError::InvalidFile {
                path: AuxFile::DreamReview.path().into(),
                reason: format!("is not a review record ({e}); inspect it, then delete it"),
            })
        })
    }

    /// Makes every edit of this scope's Dream wait for review (`on`), or not.
    pub async fn set_review_every_edit(&self, on: bool) -> Result<(), DreamError> {
        let lease = self.acquire("review setting").await?;
        let result = async {
            let mut review = self.review().await?;
            review.every_edit = on;
            self.write_review(&review).await
        }
        .await;
        self.give_back(lease).await;
        result
    }

    /// Applies `proposal` to this scope's files (the agent scope's for a shared one), if the
    /// file still holds the text it was proposed over; the version recording it.
    pub async fn apply_proposal(
        &self,
        proposal: &Proposal,
        by: &str,
    ) -> Result<Option<Version>, DreamError> {
        let lease = self.acquire("proposal review").await?;
        let result = async {
            self.recover(&lease).await?;
            self.record_outside_edits(&lease).await?;
            let now = self.snapshot_now().await?;
            if now.get(&proposal.path) != proposal.before.as_ref() {
                return Err(DreamError::Memory(MemoryError::Conflict {
                    what: format!(
                        "{} changed since this proposal was made; reject it (Dream will propose again from the new text)",
                        proposal.path
                    ),
                }));
            }
            let message = format!(
                "dream: approved proposal {} to {}\n\nApproved by {by}; proposed {} from journal entries {}-{}.\n\n{}",
                proposal.id(),
                proposal.path,
                proposal.at.format("%Y-%m-%d %H:%M UTC"),
                proposal.entries.0,
                proposal.entries.1,
                proposal.reason.trim()
            );
            let files = BTreeMap::from([(proposal.path.clone(), Some(proposal.after.clone()))]);
            self.apply(
                Plan {
                    files,
                    cursor: None,
                    message: Some(message),
                },
                &now,
                &lease,
            )
            .await
        }
        .await;
        self.give_back(lease).await;
        result
    }

    /// Takes proposal `id` out of this scope's queue and records the decision about it;
    /// the proposal, or `None` when no proposal has that id (another reviewer took it).
    pub async fn settle_proposal(
        &self,
        id: &str,
        approved: bool,
        reason: &str,
        version: Option<&Version>,
    ) -> Result<Option<Proposal>, DreamError> {
        let lease = self.acquire("proposal review").await?;
        let result = async {
            let mut all = self.proposals().await?;
            let Some(at) = all.iter().position(|p| p.id() == id) else {
                return Ok(None);
            };
            let proposal = all.remove(at);
            self.write_proposals(&all).await?;
            let mut review = self.review().await?;
            review.decisions.push(Decision {
                at: self.clock.now(),
                proposal: id.to_owned(),
                path: proposal.path.clone(),
                approved,
                reason: reason.trim().to_owned(),
                version: version.map(|v| v.id.clone()),
            });
            let excess = review.decisions.len().saturating_sub(MAX_DECISIONS);
            review.decisions.drain(..excess);
            self.write_review(&review).await?;
            Ok(Some(proposal))
        }
        .await;
        self.give_back(lease).await;
        result
    }

    async fn write_review(&self, review: &Review) -> Result<(), DreamError> {
        let text = serde_json::to_string_pretty(review).map_err(|e| {
            DreamError::Memory(MemoryError::backend(format!(
                "the review record cannot be encoded: {e}"
            )))
        })?;
        self.documents
            .write_aux(AuxFile::DreamReview, &text)
            .await?;
        Ok(())
    }
}

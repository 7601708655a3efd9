//! A finished run's change: the agent's shared files queued as proposals where configured,
//! everything else committed with the cursor and a version as one unit under the lease.

use super::*;

/// What a run read, for its version message and proposals.
#[derive(Debug, Clone)]
pub(super) struct RunBatch {
    pub(super) trigger: Trigger,
    /// The first and last journal cursor of the batch.
    pub(super) entries: (u64, u64),
    /// Where the lines it adds came from (trailers of its version).
    pub(super) provenance: Provenance,
}

impl Dream {
    /// Commits the run's change, then compacts the journal. A conflict or a lost lease
    /// stops the run with nothing applied (the report says why).
    pub(super) async fn commit_run(
        &self,
        overlay: &Overlay,
        run: RunBatch,
        report: &mut RunReport,
        lease: &Lease,
    ) -> Result<(), DreamError> {
        let review_every_edit = self.review().await?.every_edit;
        let (files, proposals) = self.split_shared(overlay, &run, report, review_every_edit);
        // Proposals are queued before the run's own change is applied: a crash in between
        // repeats the run, and the queue keeps one copy of each proposal.
        self.queue_proposals(proposals).await?;
        // A run that changed nothing but heard known facts again records that too: the
        // facts gain a source, and outlive the forgetting of their first one.
        let message = (!files.is_empty() || !run.provenance.lines.is_empty()).then(|| {
            format!(
                "dream: {} run, journal entries {}-{}\n\n{}\n\n{}",
                run.trigger.name(),
                run.entries.0,
                run.entries.1,
                report.summary,
                run.provenance.trailers()
            )
        });
        let change = MemoryChange {
            fence: lease.fence,
            files,
            cursor: Some(run.entries.1),
            version: message.map(|message| self.version_record(overlay, message, run.entries.1)),
            time: self.clock.now(),
        };
        match self.commit.commit(&change).await {
            Ok(version) => report.version = version,
            Err(refused @ (MemoryError::Conflict { .. } | MemoryError::LeaseLost { .. })) => {
                tracing::warn!(error = %refused, "the run's change was not committed");
                report.status = RunStatus::Stopped(match refused {
                    MemoryError::LeaseLost { what } => StopReason::LeaseLost(what),
                    other => StopReason::Conflict(other.to_string()),
                });
                report.changes.clear();
                report.summary.clear();
                report.proposed.clear();
                return Ok(());
            }
            Err(other) => return Err(other.into()),
        }
        if self.config.journal_max_entries > 0 {
            report.compacted = self
                .journal
                .compact(self.config.journal_max_entries)
                .await?
                .dropped;
        }
        Ok(())
    }

    /// The overlay's changes as file changes to commit and, for the agent's shared files
    /// when this Dream proposes them, proposals (named in the report).
    fn split_shared(
        &self,
        overlay: &Overlay,
        run: &RunBatch,
        report: &mut RunReport,
        review_every_edit: bool,
    ) -> (Vec<FileChange>, Vec<Proposal>) {
        let mut files = Vec::new();
        let mut proposals = Vec::new();
        for (target, before, text) in overlay.changes() {
            let shared = self.config.propose_shared && is_shared(&target);
            if shared || review_every_edit {
                report.proposed.push(target.path());
                proposals.push(Proposal {
                    at: self.clock.now(),
                    path: target.path(),
                    before: before.map(str::to_owned),
                    after: text.to_owned(),
                    entries: run.entries,
                    reason: report.summary.clone(),
                    shared,
                });
            } else {
                files.push(FileChange {
                    expected: overlay.expected(&target),
                    file: target,
                    text: Some(text.to_owned()),
                });
            }
        }
        (files, proposals)
    }

    /// The version a run records: the tracked files as the overlay leaves them (without the
    /// shared files it only proposes) and Dream's cursor after the batch.
    fn version_record(&self, overlay: &Overlay, message: String, cursor: u64) -> VersionRecord {
        let mut tracked = overlay.snapshot();
        if self.config.propose_shared {
            tracked.retain(|path, _| sandbox::parse(path).is_ok_and(|target| !is_shared(&target)));
        }
        tracked.insert(CURSOR_PATH.to_owned(), cursor.to_string());
        VersionRecord {
            message,
            files: tracked,
        }
    }
}

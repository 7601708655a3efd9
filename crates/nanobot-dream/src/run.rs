//! A Dream run and the versioning commands around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use nanobot_llm_port::text::CallPlacement;
use nanobot_llm_port::tokens::estimate_prompt_tokens;
use nanobot_llm_port::{Clock, LlmClient, LlmRequest, Message, TokenCounter, ToolChoice};
use nanobot_memory_store::{
    AuxFile, CURSOR_PATH, Document, Expected, FileChange, HistoryJournal, HistoryJournalExt,
    JournalEntry, Lease, MemoryChange, MemoryCommit, MemoryDocuments, MemoryDocumentsExt,
    MemoryError, MemoryLease, MemoryVersions, Recovery, Snapshot, StepwiseCommit, Version,
    VersionRecord,
};
use serde_json::Value;

mod audit;
mod commit;
mod declined;
mod forget;
mod guard;
mod lineage;
mod plan_loop;
mod proposals;
mod report;
mod review;
mod state;
mod supersede;
mod tool_loop;
mod versions;

pub use audit::MemoryAudit;
use commit::RunBatch;
use declined::{ASK_AGAIN_PLAN, ASK_AGAIN_TOOLS, AskAgain, declined};
pub use forget::{ForgetLines, Forgotten};
pub use guard::Repeat;
pub use lineage::{BlameLine, HistoryMatches, Origin, PastLine};
pub use proposals::Proposal;
pub use report::{RestoreReport, RunReport, RunStatus, StopReason, Trigger};
pub use review::{Decision, Review};
pub use state::StoppedRun;
pub use supersede::Superseded;
pub use tool_loop::text_tool_calls;
pub use versions::diff_snapshots;

use crate::config::{DreamConfig, DreamMode};
use crate::diff::{FileDiff, file_diff, summary};
use crate::error::DreamError;
use crate::overlay::Overlay;
use crate::prompt;
use crate::provenance::Provenance;
use crate::sandbox::{self, Target};

/// The memory ports a Dream works on: one scope's.
#[derive(Clone)]
pub struct DreamStores {
    /// The journal it reads and whose cursor it moves.
    pub journal: Arc<dyn HistoryJournal>,
    /// The memory files.
    pub documents: Arc<dyn MemoryDocuments>,
    /// The versions (`Err`: why versioning is unavailable; runs still work, log, show and
    /// restore say why they cannot).
    pub versions: Result<Arc<dyn MemoryVersions>, Arc<MemoryError>>,
    /// The lease: one run at a time.
    pub lease: Arc<dyn MemoryLease>,
    /// How a run's change is applied: all or nothing, under the lease.
    pub commit: Arc<dyn MemoryCommit>,
}

impl DreamStores {
    /// The stores of a backend without transactions (files, memory): the change is applied
    /// step by step by a [`StepwiseCommit`] over the other stores.
    pub fn stepwise(
        journal: Arc<dyn HistoryJournal>,
        documents: Arc<dyn MemoryDocuments>,
        versions: Result<Arc<dyn MemoryVersions>, Arc<MemoryError>>,
        lease: Arc<dyn MemoryLease>,
    ) -> DreamStores {
        let commit = Arc::new(StepwiseCommit::new(
            documents.clone(),
            journal.clone(),
            versions.as_ref().ok().cloned(),
            lease.clone(),
        ));
        DreamStores {
            journal,
            documents,
            versions,
            lease,
            commit,
        }
    }
}

/// Dream over injected ports.
pub struct Dream {
    llm: Arc<dyn LlmClient>,
    journal: Arc<dyn HistoryJournal>,
    documents: Arc<dyn MemoryDocuments>,
    versions: Result<Arc<dyn MemoryVersions>, Arc<MemoryError>>,
    lease: Arc<dyn MemoryLease>,
    commit: Arc<dyn MemoryCommit>,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    config: DreamConfig,
    progress: Option<Progress>,
}

/// Receives one line per step of a run ("step 2 of at most 30: edit_file SOUL.md"), for a
/// terminal or a log.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for Dream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dream")
            .field("config", &self.config)
            .field("versioning", &self.versions.is_ok())
            .finish_non_exhaustive()
    }
}

/// Whether `target` is one of the agent's shared files.
fn is_shared(target: &Target) -> bool {
    matches!(target, Target::Document(Document::Soul) | Target::Skill(_))
}

impl Dream {
    /// Dream over one scope's `stores`.
    pub fn new(
        config: DreamConfig,
        llm: Arc<dyn LlmClient>,
        stores: DreamStores,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<Self, DreamError> {
        config.validate()?;
        Ok(Dream {
            llm,
            journal: stores.journal,
            documents: stores.documents,
            versions: stores.versions,
            lease: stores.lease,
            commit: stores.commit,
            clock,
            counter,
            config,
            progress: None,
        })
    }

    /// Reports each step of a run to `progress`.
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    fn tell(&self, line: &str) {
        if let Some(progress) = &self.progress {
            progress(line);
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DreamConfig {
        &self.config
    }

    async fn acquire(&self, what: &str) -> Result<Lease, DreamError> {
        let holder = format!(
            "{what}, pid {}, since {}",
            std::process::id(),
            self.clock.now().format("%Y-%m-%d %H:%M:%S UTC")
        );
        match self
            .lease
            .try_acquire(&holder, self.config.lease_ttl)
            .await?
        {
            Some(lease) => Ok(lease),
            None => Err(DreamError::AlreadyRunning {
                holder: self
                    .lease
                    .holder()
                    .await?
                    .map_or_else(|| "another run".into(), |h| h.holder),
            }),
        }
    }

    /// Renews `lease` when a third of its time is gone; `Err` when it was lost.
    async fn keep(&self, lease: &mut Lease) -> Result<(), MemoryError> {
        if lease.renewal_due(self.clock.now()) {
            self.lease.renew(lease).await?;
        }
        Ok(())
    }

    /// Finishes (or abandons, with a warning) a change an interrupted run left.
    async fn recover(&self, lease: &Lease) -> Result<(), DreamError> {
        if let Recovery::Abandoned { reason } = self.commit.recover(lease.fence).await? {
            tracing::warn!(%reason, "an interrupted Dream change was abandoned");
        }
        Ok(())
    }

    fn versions(&self) -> Result<&Arc<dyn MemoryVersions>, DreamError> {
        self.versions
            .as_ref()
            .map_err(|e| DreamError::VersioningUnavailable {
                reason: match e.as_ref() {
                    MemoryError::VersioningUnavailable { reason } => reason.clone(),
                    other => other.to_string(),
                },
            })
    }

    /// Runs Dream once: reads the next batch, lets the model edit a private copy of the
    /// memory files, and applies the result only if the model finished.
    pub async fn run(&self, trigger: Trigger) -> Result<RunReport, DreamError> {
        self.run_inner(trigger, false).await
    }

    /// A run that shows the changes it would make and applies nothing (the cursor stays).
    pub async fn dry_run(&self) -> Result<RunReport, DreamError> {
        self.run_inner(Trigger::Manual, true).await
    }

    #[tracing::instrument(name = "dream_run", skip(self), fields(trigger = trigger.name()))]
    async fn run_inner(&self, trigger: Trigger, dry_run: bool) -> Result<RunReport, DreamError> {
        let started = std::time::Instant::now();
        let result = self.run_logged(trigger, dry_run).await;
        if !dry_run {
            count_run(&result);
        }
        match &result {
            Ok(report) => tracing::info!(
                status = ?report.status,
                steps = report.steps,
                tool_calls = report.tool_calls,
                tokens = report.tokens,
                changes = report.changes.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "dream run finished"
            ),
            Err(e) => tracing::warn!(error = %e, "dream run failed"),
        }
        result
    }

    async fn run_logged(&self, trigger: Trigger, dry_run: bool) -> Result<RunReport, DreamError> {
        let mut lease = self
            .acquire(if dry_run { "dry run" } else { trigger.name() })
            .await?;
        let result = self.run_leased(trigger, dry_run, &mut lease).await;
        self.give_back(lease).await;
        result
    }

    /// Gives the lease back at once (a database's would otherwise wait for its expiry when
    /// the process exits).
    async fn give_back(&self, lease: Lease) {
        if let Err(e) = self.lease.release(lease).await {
            tracing::warn!(error = %e, "the Dream lease was not given back; it will expire");
        }
    }

    /// One run under `lease`: the next batch, the model's edits on a private overlay, and
    /// the change committed when the model finished.
    async fn run_leased(
        &self,
        trigger: Trigger,
        dry_run: bool,
        lease: &mut Lease,
    ) -> Result<RunReport, DreamError> {
        let started = self.clock.now();
        self.recover(lease).await?;
        let mut report = RunReport::new(self.mode(), dry_run, started);
        let pending = self
            .journal
            .unprocessed(Some(self.config.batch_entries))
            .await?;
        let count = prompt::batch_len(
            &pending,
            self.config.batch_entries,
            self.config.batch_tokens,
            self.counter.as_ref(),
        );
        let batch: &[JournalEntry] = &pending[..count];
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return self.finish_run(report, dry_run).await;
        };
        report.batch = Some((first.cursor, last.cursor, batch.len()));
        self.tell(&format!(
            "reading {} journal entries ({}-{})",
            batch.len(),
            first.cursor,
            last.cursor
        ));
        if !dry_run {
            report.outside_edits = self.record_outside_edits(lease).await?;
        }
        let mut overlay =
            Overlay::load(self.documents.as_ref(), self.config.max_file_chars).await?;
        report.status = self.edit(&mut overlay, batch, &mut report, lease).await?;
        if report.completed() {
            report.superseded = supersede::replace_corrected(&mut overlay, batch);
            report.repeats = guard::refuse_repeats(&mut overlay);
            report.changes = overlay
                .changes()
                .into_iter()
                .filter_map(|(t, old, new)| file_diff(&t.path(), old, Some(new)))
                .collect();
            report.summary = summary(&report.changes);
            if !dry_run {
                let changed: Vec<(String, Option<&str>, &str)> = overlay
                    .changes()
                    .into_iter()
                    .map(|(t, before, after)| (t.path(), before, after))
                    .collect();
                let curated: Vec<(String, &str)> = Document::ALL
                    .into_iter()
                    .filter_map(|d| Some((d.path().to_owned(), overlay.get(&Target::Document(d))?)))
                    .collect();
                let provenance = Provenance::attribute(batch, &changed, &curated);
                let run = RunBatch {
                    trigger,
                    entries: (first.cursor, last.cursor),
                    provenance,
                };
                self.commit_run(&overlay, run, &mut report, lease).await?;
            }
        }
        self.finish_run(report, dry_run).await
    }

    /// The model's edits of `overlay` from `batch`, in the run's mode.
    async fn edit(
        &self,
        overlay: &mut Overlay,
        batch: &[JournalEntry],
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> Result<RunStatus, DreamError> {
        let custom = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        let chars = self.config.prompt_file_chars;
        if report.mode == DreamMode::Plan {
            let instructions = match custom.as_deref() {
                Some(text) if !text.trim().is_empty() => prompt::instructions(Some(text)),
                _ => crate::plan::default_instructions(),
            };
            let user = format!(
                "{}\n\n{}",
                prompt::user_message(&instructions, overlay, batch, chars),
                crate::plan::ANSWER_FORMAT
            );
            let facts = crate::plan::facts(batch);
            Ok(self.plan_loop(overlay, user, &facts, report, lease).await)
        } else {
            let instructions = prompt::instructions(custom.as_deref());
            let user = prompt::user_message(&instructions, overlay, batch, chars);
            Ok(self.agent_loop(overlay, user, report, lease).await)
        }
    }

    /// Records the run (unless it was a dry run) and closes its report.
    async fn finish_run(
        &self,
        mut report: RunReport,
        dry_run: bool,
    ) -> Result<RunReport, DreamError> {
        if !dry_run {
            self.record_run(&report).await?;
        }
        report.finished = self.clock.now();
        Ok(report)
    }

    /// The mode runs use: the configured one, `Auto` resolved by the backend's
    /// capabilities (no native tool calls: plan mode).
    pub fn mode(&self) -> DreamMode {
        match self.config.mode {
            DreamMode::Auto if !self.llm.capabilities().supports_tools => DreamMode::Plan,
            DreamMode::Auto => DreamMode::Tools,
            mode => mode,
        }
    }
}

/// Metric: Dream runs, by `outcome` (`completed`, `nothing_to_do`, `stopped`, `failed`).
pub const DREAM_RUNS: &str = "nanobot_dream_runs_total";
/// Metric: Dream's edits, by `result`: `applied` (files changed), `refused` (plan edits
/// refused), `superseded` (lines a correction replaced), `proposed` (queued for review).
pub const DREAM_EDITS: &str = "nanobot_dream_edits_total";

/// Counts a (not dry) run in [`DREAM_RUNS`] and its edits in [`DREAM_EDITS`].
fn count_run(result: &Result<RunReport, DreamError>) {
    let outcome = match result.as_ref().map(|r| &r.status) {
        Ok(RunStatus::Completed) => "completed",
        Ok(RunStatus::NothingToDo) => "nothing_to_do",
        Ok(RunStatus::Stopped(_)) => "stopped",
        Err(_) => "failed",
    };
    metrics::counter!(DREAM_RUNS, "outcome" => outcome).increment(1);
    let Ok(report) = result else {
        return;
    };
    let applied = if report.status == RunStatus::Completed {
        report.changes.len() - report.proposed.len().min(report.changes.len())
    } else {
        0
    };
    for (kind, n) in [
        ("applied", applied),
        ("refused", report.refused.len()),
        ("superseded", report.superseded.len()),
        ("proposed", report.proposed.len()),
    ] {
        metrics::counter!(DREAM_EDITS, "result" => kind).increment(n as u64);
    }
}

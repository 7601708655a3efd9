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

use crate::config::{DreamConfig, DreamMode};
use crate::diff::{FileDiff, file_diff, summary};
use crate::error::DreamError;
use crate::overlay::Overlay;
use crate::prompt;
use crate::sandbox::{self, Target};

/// What started a run (it names the run in the change log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The schedule.
    Scheduled,
    /// A person (`/dream`).
    Manual,
}

impl Trigger {
    fn name(self) -> &'static str {
        match self {
            Trigger::Scheduled => "scheduled",
            Trigger::Manual => "manual",
        }
    }
}

/// Why a run stopped before the model finished.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// It used every model call it was allowed.
    StepBudget {
        /// The calls made.
        steps: usize,
    },
    /// It used its token budget.
    TokenBudget {
        /// The tokens used.
        tokens: u64,
    },
    /// The model made the same call again and again.
    RepeatedCall {
        /// The tool.
        tool: String,
    },
    /// The model kept making edits that change nothing.
    NoOpEdits,
    /// The model answered with nothing.
    EmptyAnswer,
    /// The model's answer was cut by its output limit.
    Truncated,
    /// The model could not be reached or failed.
    ModelError(String),
    /// Plan mode: no answer was a usable edit plan (not JSON, or not the schema's shape).
    InvalidPlan(String),
    /// Plan mode: every edit of the plan was refused, again after being told why.
    PlanRefused {
        /// Why the last plan's edits were refused.
        reasons: Vec<String>,
    },
    /// The run lost its lease (it stalled past it and another run took it): it stopped
    /// and committed nothing.
    LeaseLost(String),
    /// The run finished, but a file it changed was changed by someone else meanwhile: it
    /// committed nothing, and the next run reads the entries again.
    Conflict(String),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::StepBudget { steps } => write!(f, "step budget used ({steps} model calls)"),
            StopReason::TokenBudget { tokens } => write!(f, "token budget used ({tokens} tokens)"),
            StopReason::RepeatedCall { tool } => write!(f, "loop: the same {tool} call repeated"),
            StopReason::NoOpEdits => write!(f, "loop: repeated edits that change nothing"),
            StopReason::EmptyAnswer => write!(f, "empty final answer"),
            StopReason::Truncated => write!(f, "final answer cut by the output limit"),
            StopReason::ModelError(e) => write!(f, "model error: {e}"),
            StopReason::InvalidPlan(why) => write!(f, "no usable edit plan: {why}"),
            StopReason::PlanRefused { reasons } => {
                write!(
                    f,
                    "every edit of the plan was refused: {}",
                    reasons.join("; ")
                )
            }
            StopReason::LeaseLost(what) => write!(f, "the lease was lost ({what})"),
            StopReason::Conflict(what) => {
                write!(f, "a file changed while the run worked ({what})")
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// No journal entries after the cursor: no model call, nothing changed.
    NothingToDo,
    /// The model finished; its changes were applied (or shown, in a dry run).
    Completed,
    /// The run stopped; nothing was applied and the cursor did not move.
    Stopped(StopReason),
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// How it ended.
    pub status: RunStatus,
    /// Whether it was a dry run (nothing applied whatever the status).
    pub dry_run: bool,
    /// The journal entries shown to the model: (first cursor, last cursor, count).
    pub batch: Option<(u64, u64, usize)>,
    /// Model calls.
    pub steps: usize,
    /// Tool calls, and how many of them the tools refused.
    pub tool_calls: usize,
    /// Tool calls that returned an error to the model.
    pub tool_errors: usize,
    /// Tokens used (as the provider reported, else estimated).
    pub tokens: u64,
    /// The file changes (applied, or that would be applied in a dry run).
    pub changes: Vec<FileDiff>,
    /// The change-log body built from `changes`.
    pub summary: String,
    /// The version recording the change, when one was saved.
    pub version: Option<Version>,
    /// A version saved first for edits made outside Dream since the last version.
    pub outside_edits: Option<Version>,
    /// The model's final answer (never used for the change log).
    pub final_text: Option<String>,
    /// How the model edited: [`DreamMode::Tools`] or [`DreamMode::Plan`] (never `Auto`).
    pub mode: DreamMode,
    /// Plan mode: the edits refused (which, and why); they changed nothing.
    pub refused: Vec<String>,
    /// Journal entries compacted away after the run.
    pub compacted: usize,
    /// Files whose changes were queued as proposals, not written (`propose_shared`).
    pub proposed: Vec<String>,
    /// When the run started and ended (from the injected clock).
    pub started: DateTime<Utc>,
    /// When it ended.
    pub finished: DateTime<Utc>,
}

impl RunReport {
    /// Whether the run completed (the cursor moved past its batch, unless a dry run).
    pub fn completed(&self) -> bool {
        self.status == RunStatus::Completed
    }
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The version whose earlier state was restored.
    pub undone: Version,
    /// The new version recording the restore (restore it to undo the restore).
    pub version: Option<Version>,
    /// The files changed by the restore.
    pub changes: Vec<FileDiff>,
}

/// The memory ports a Dream works on: one scope's.
#[derive(Clone)]
pub struct DreamStores {
    /// The journal it reads and whose cursor it moves.
    pub journal: Arc<dyn HistoryJournal>,
    /// The memory files.
    pub documents: Arc<dyn MemoryDocuments>,
    /// The versions (`Err`: why versioning is unavailable; runs still work, log, show and
    /// restore say why they cannot).
    pub versions: Result<Arc<dyn MemoryVersions>, String>,
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
        versions: Result<Arc<dyn MemoryVersions>, String>,
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
    versions: Result<Arc<dyn MemoryVersions>, String>,
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

/// A change a user's or a chat's Dream proposed to a file of the agent scope (`SOUL.md`, a
/// skill), kept for an operator to review: the scope may read those files, never write them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
}

impl Proposal {
    /// The proposal as a line diff against the text the run read.
    pub fn diff(&self) -> Option<FileDiff> {
        file_diff(&self.path, self.before.as_deref(), Some(&self.after))
    }
}

/// Whether `target` is one of the agent's shared files.
fn is_shared(target: &Target) -> bool {
    matches!(target, Target::Document(Document::Soul) | Target::Skill(_))
}

/// Changes to apply as one unit: path to new text (`None` deletes a skill), Dream's cursor
/// afterwards, and the version message when the change is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    files: BTreeMap<String, Option<String>>,
    cursor: Option<u64>,
    message: Option<String>,
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
            .map_err(|reason| DreamError::VersioningUnavailable {
                reason: reason.clone(),
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

    async fn run_leased(
        &self,
        trigger: Trigger,
        dry_run: bool,
        lease: &mut Lease,
    ) -> Result<RunReport, DreamError> {
        let started = self.clock.now();
        self.recover(lease).await?;
        let mut report = RunReport {
            status: RunStatus::NothingToDo,
            dry_run,
            batch: None,
            steps: 0,
            tool_calls: 0,
            tool_errors: 0,
            tokens: 0,
            changes: Vec::new(),
            summary: String::new(),
            version: None,
            outside_edits: None,
            final_text: None,
            mode: self.mode(),
            refused: Vec::new(),
            compacted: 0,
            proposed: Vec::new(),
            started,
            finished: started,
        };
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
            if !dry_run {
                self.record_run(started).await?;
            }
            report.finished = self.clock.now();
            return Ok(report);
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
        let custom = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        let status = if report.mode == DreamMode::Plan {
            let instructions = match custom.as_deref() {
                Some(text) if !text.trim().is_empty() => prompt::instructions(Some(text)),
                _ => crate::plan::default_instructions(),
            };
            let user = format!(
                "{}\n\n{}",
                prompt::user_message(
                    &instructions,
                    &overlay,
                    batch,
                    self.config.prompt_file_chars
                ),
                crate::plan::ANSWER_FORMAT
            );
            let facts = crate::plan::facts(batch);
            self.plan_loop(&mut overlay, user, &facts, &mut report, lease)
                .await
        } else {
            let instructions = prompt::instructions(custom.as_deref());
            let user = prompt::user_message(
                &instructions,
                &overlay,
                batch,
                self.config.prompt_file_chars,
            );
            self.agent_loop(&mut overlay, user, &mut report, lease)
                .await
        };
        report.status = status;

        if report.completed() {
            report.changes = overlay
                .changes()
                .into_iter()
                .filter_map(|(t, old, new)| file_diff(&t.path(), old, Some(new)))
                .collect();
            report.summary = summary(&report.changes);
            if !dry_run {
                let mut files = Vec::new();
                let mut proposals = Vec::new();
                for (target, before, text) in overlay.changes() {
                    if self.config.propose_shared && is_shared(&target) {
                        report.proposed.push(target.path());
                        proposals.push(Proposal {
                            at: self.clock.now(),
                            path: target.path(),
                            before: before.map(str::to_owned),
                            after: text.to_owned(),
                            entries: (first.cursor, last.cursor),
                        });
                    } else {
                        files.push(FileChange {
                            expected: overlay.expected(&target),
                            file: target,
                            text: Some(text.to_owned()),
                        });
                    }
                }
                // Proposals are queued before the run's own change is applied: a crash in
                // between repeats the run, and the queue keeps one copy of each proposal.
                self.queue_proposals(proposals).await?;
                let message = (!files.is_empty()).then(|| {
                    format!(
                        "dream: {} run, journal entries {}-{}\n\n{}",
                        trigger.name(),
                        first.cursor,
                        last.cursor,
                        report.summary
                    )
                });
                let version = message.map(|message| {
                    let mut tracked = overlay.snapshot();
                    if self.config.propose_shared {
                        tracked.retain(|path, _| {
                            sandbox::parse(path).is_ok_and(|target| !is_shared(&target))
                        });
                    }
                    tracked.insert(CURSOR_PATH.to_owned(), last.cursor.to_string());
                    VersionRecord {
                        message,
                        files: tracked,
                    }
                });
                let change = MemoryChange {
                    fence: lease.fence,
                    files,
                    cursor: Some(last.cursor),
                    version,
                    time: self.clock.now(),
                };
                match self.commit.commit(&change).await {
                    Ok(version) => report.version = version,
                    Err(
                        refused @ (MemoryError::Conflict { .. } | MemoryError::LeaseLost { .. }),
                    ) => {
                        tracing::warn!(error = %refused, "the run's change was not committed");
                        report.status = RunStatus::Stopped(match refused {
                            MemoryError::LeaseLost { what } => StopReason::LeaseLost(what),
                            other => StopReason::Conflict(other.to_string()),
                        });
                        report.changes.clear();
                        report.summary.clear();
                        report.proposed.clear();
                        self.record_run(started).await?;
                        report.finished = self.clock.now();
                        return Ok(report);
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
            }
        }
        if !dry_run {
            self.record_run(started).await?;
        }
        report.finished = self.clock.now();
        Ok(report)
    }

    async fn agent_loop(
        &self,
        overlay: &mut Overlay,
        user: String,
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> RunStatus {
        let tools = prompt::tools();
        let mut messages = vec![Message::system(prompt::SYSTEM), Message::user(user)];
        let mut repeated: HashMap<(String, String), usize> = HashMap::new();
        let mut no_ops = 0;
        while report.steps < self.config.max_steps {
            report.steps += 1;
            self.tell(&format!(
                "step {} of at most {}: asking the model",
                report.steps, self.config.max_steps
            ));
            let request = LlmRequest::new(self.config.model.clone(), messages.clone())
                .with_tools(tools.clone())
                .with_tool_choice(ToolChoice::Auto)
                .with_max_tokens(self.config.max_output_tokens);
            let response = match self.call_counted(&request, report, lease).await {
                Ok(response) => response,
                Err(stop) => return stop,
            };
            let mut calls = response.message.tool_calls().to_vec();
            let mut assistant = response.message.clone();
            if calls.is_empty() {
                // Small local models often write the call as JSON in their text instead of
                // using the tool-call channel: accept that form too.
                calls = text_tool_calls(&response.message.text_content(), report.steps);
                if !calls.is_empty() {
                    assistant.tool_calls = Some(calls.clone());
                }
            }
            if calls.is_empty() {
                if response.is_truncated() {
                    return RunStatus::Stopped(StopReason::Truncated);
                }
                let text = response.message.text_content();
                if text.trim().is_empty() {
                    return RunStatus::Stopped(StopReason::EmptyAnswer);
                }
                report.final_text = Some(text);
                return RunStatus::Completed;
            }
            messages.push(Message::Assistant(assistant));
            for call in &calls {
                report.tool_calls += 1;
                let key = (call.function.name.clone(), call.function.arguments.clone());
                let seen = repeated.entry(key).or_insert(0);
                *seen += 1;
                if *seen >= self.config.max_repeated_calls {
                    return RunStatus::Stopped(StopReason::RepeatedCall {
                        tool: call.function.name.clone(),
                    });
                }
                let target = serde_json::from_str::<Value>(&call.function.arguments)
                    .ok()
                    .and_then(|a| a.get("path").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default();
                self.tell(&format!("  {} {target}", call.function.name));
                let outcome = overlay.call(&call.function.name, &call.function.arguments);
                if outcome.is_error {
                    report.tool_errors += 1;
                }
                if outcome.no_op_edit {
                    no_ops += 1;
                    if no_ops >= self.config.max_no_op_edits {
                        return RunStatus::Stopped(StopReason::NoOpEdits);
                    }
                }
                messages.push(Message::tool_result(
                    call.id.clone(),
                    call.function.name.clone(),
                    outcome.text,
                ));
            }
            if report.tokens >= self.config.max_tokens {
                return RunStatus::Stopped(StopReason::TokenBudget {
                    tokens: report.tokens,
                });
            }
        }
        RunStatus::Stopped(StopReason::StepBudget {
            steps: report.steps,
        })
    }

    /// One model call of a run, its tokens added to the report (as the provider reported
    /// them, else estimated from the request and the answer); a failed call is the run's
    /// stop.
    async fn call_counted(
        &self,
        request: &LlmRequest,
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> Result<nanobot_llm_port::LlmResponse, RunStatus> {
        // A run that lost its lease stops before it spends another call.
        self.keep(lease).await.map_err(|e| {
            RunStatus::Stopped(match e {
                MemoryError::LeaseLost { what } => StopReason::LeaseLost(what),
                other => StopReason::LeaseLost(other.to_string()),
            })
        })?;
        let response = self
            .llm
            .complete(request)
            .await
            .map_err(|e| RunStatus::Stopped(StopReason::ModelError(e.to_string())))?;
        report.tokens += match &response.usage {
            Some(usage) => usage.prompt_tokens + usage.completion_tokens,
            None => {
                let mut answer = request.messages.clone();
                answer.push(Message::Assistant(response.message.clone()));
                estimate_prompt_tokens(self.counter.as_ref(), &answer, &request.tools) as u64
            }
        };
        Ok(response)
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

    /// Plan mode: each step asks for one edit plan and applies it to the overlay through the
    /// same checks as tool calls. A step that is not a usable plan, or whose every edit is
    /// refused, is answered with the reason and asked again, within the step and token
    /// budgets; the first plan that changes something, or an empty one, completes the run.
    async fn plan_loop(
        &self,
        overlay: &mut Overlay,
        user: String,
        facts: &[String],
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> RunStatus {
        let structured = self.llm.capabilities().supports_structured_output;
        let files = crate::plan::files(overlay);
        let headings = crate::plan::headings(overlay, &files);
        let mut messages = vec![Message::system(crate::plan::SYSTEM), Message::user(user)];
        let mut last_problem: Option<StopReason> = None;
        while report.steps < self.config.max_steps {
            report.steps += 1;
            self.tell(&format!(
                "step {} of at most {}: asking the model for an edit plan",
                report.steps, self.config.max_steps
            ));
            let Some(max_tokens) = self.answer_room(&messages) else {
                return RunStatus::Stopped(StopReason::ModelError(
                    "the plan request leaves no room for an answer in the model's context window; lower batch_tokens or prompt_file_chars".into(),
                ));
            };
            let mut request = LlmRequest::new(self.config.model.clone(), messages.clone())
                .with_max_tokens(max_tokens)
                .with_temperature(0.0);
            if structured {
                request =
                    request.with_response_format(crate::plan::format(&files, &headings, facts));
            }
            let response = match self.call_counted(&request, report, lease).await {
                Ok(response) => response,
                Err(stop) => return stop,
            };
            let text = response.message.text_content();
            tracing::debug!(step = report.steps, answer = %text, "edit plan answered");
            let feedback = match crate::plan::parse(&text) {
                Err(_) if response.is_truncated() => {
                    last_problem = Some(StopReason::Truncated);
                    "Your plan was cut off by the output limit. Answer a shorter plan: fewer, shorter edits.".to_owned()
                }
                Err(why) => {
                    last_problem = Some(StopReason::InvalidPlan(why.clone()));
                    format!(
                        "That was not a usable edit plan: {why}. Answer with the JSON plan only."
                    )
                }
                Ok(edits) => {
                    report.tool_calls += edits.len();
                    let applied = crate::plan::apply(overlay, &edits);
                    for line in &applied.refused {
                        self.tell(&format!("  refused {line}"));
                    }
                    report.tool_errors += applied.refused.len();
                    report.refused.extend(applied.refused.iter().cloned());
                    self.tell(&format!(
                        "  plan of {} edits: {} applied, {} already there ({} repeats), {} refused",
                        edits.len(),
                        applied.changed,
                        applied.no_ops,
                        applied.repeats,
                        applied.refused.len()
                    ));
                    if applied.changed > 0 || applied.refused.is_empty() {
                        report.final_text = Some(format!(
                            "{} of {} planned edits applied",
                            applied.changed,
                            edits.len()
                        ));
                        return RunStatus::Completed;
                    }
                    last_problem = Some(StopReason::PlanRefused {
                        reasons: applied.refused.clone(),
                    });
                    format!(
                        "No edit could be applied, the files are unchanged:\n- {}\nAnswer a corrected plan (copy old_text exactly from the files shown above), or empty lists.",
                        applied.refused.join("\n- ")
                    )
                }
            };
            if report.tokens >= self.config.max_tokens {
                return RunStatus::Stopped(StopReason::TokenBudget {
                    tokens: report.tokens,
                });
            }
            // Only the last attempt and why it failed: the request stays the size of the
            // first one, whatever the number of steps.
            messages.truncate(2);
            messages.push(Message::Assistant(response.message.clone()));
            messages.push(Message::user(feedback));
        }
        RunStatus::Stopped(last_problem.unwrap_or(StopReason::StepBudget {
            steps: report.steps,
        }))
    }

    /// The output tokens a plan request may ask for: the configured cap, less when the
    /// backend's context window (from its capabilities; 0 means unknown) leaves less
    /// beside the prompt (counted, plus a fifth for the tokenizers' difference). `None`
    /// when fewer than 128 would be left.
    fn answer_room(&self, messages: &[Message]) -> Option<u32> {
        let window = self.llm.capabilities().context_window as usize;
        if window == 0 {
            return Some(self.config.max_output_tokens);
        }
        let prompt = estimate_prompt_tokens(self.counter.as_ref(), messages, &[]);
        let room = window.checked_sub(prompt + prompt / 5 + 64)?;
        (room >= 128).then(|| {
            self.config
                .max_output_tokens
                .min(u32::try_from(room).unwrap_or(u32::MAX))
        })
    }

    /// The tracked files now: the durable documents, the skills and Dream's cursor (without
    /// the agent's shared files when this Dream serves another scope).
    async fn snapshot_now(&self) -> Result<Snapshot, DreamError> {
        let mut files = Snapshot::new();
        let own = |t: &Target| !(self.config.propose_shared && is_shared(t));
        for document in Document::ALL {
            if !own(&Target::Document(document)) {
                continue;
            }
            if let Some(text) = self.documents.read_text(document).await? {
                files.insert(document.path().to_owned(), text);
            }
        }
        if own(&Target::Skill(String::new())) {
            for skill in self.documents.skills().await?.skills {
                files.insert(Target::Skill(skill.name).path(), skill.document.text);
            }
        }
        files.insert(
            CURSOR_PATH.to_owned(),
            self.journal.dream_cursor().await?.to_string(),
        );
        Ok(files)
    }

    /// Saves a version for edits made outside Dream since the latest one (or the first
    /// version), so a Dream version only ever holds Dream's own changes.
    async fn record_outside_edits(&self, lease: &Lease) -> Result<Option<Version>, DreamError> {
        let Ok(versions) = &self.versions else {
            return Ok(None);
        };
        self.lease.check(lease.fence).await?;
        let now = self.snapshot_now().await?;
        let latest = versions.log(1).await?;
        let message = match latest.first() {
            None => "memory: initial state".to_owned(),
            Some(v) => {
                let before = versions.files_at(&v.id).await?;
                if before == now {
                    return Ok(None);
                }
                format!(
                    "memory: edits made outside Dream\n\n{}",
                    summary(&diff_snapshots(&before, &now))
                )
            }
        };
        Ok(versions.commit(&message, &now, self.clock.now()).await?)
    }

    /// Applies `plan` through the commit port under `lease`: each file changes only if it
    /// is still as `now` had it.
    async fn apply(
        &self,
        plan: Plan,
        now: &Snapshot,
        lease: &Lease,
    ) -> Result<Option<Version>, DreamError> {
        let mut files = Vec::new();
        let mut tracked = now.clone();
        for (path, text) in &plan.files {
            let target = sandbox::parse(path).map_err(|reason| {
                DreamError::Memory(MemoryError::InvalidName {
                    name: path.clone(),
                    reason,
                })
            })?;
            let current = match &target {
                Target::Document(d) => self.documents.read(*d).await?,
                Target::Skill(name) => self.documents.read_skill(name).await?,
            };
            // The restore was decided on `now`: a file changed since is a conflict.
            let expected = match (&current, now.get(path)) {
                (Some(read), Some(seen)) if read.text == *seen => Expected::Version(read.version),
                (None, None) => Expected::Absent,
                _ => {
                    return Err(DreamError::Memory(MemoryError::Conflict {
                        what: format!(
                            "{path} changed while the restore was prepared; run it again"
                        ),
                    }));
                }
            };
            match text {
                Some(text) => tracked.insert(path.clone(), text.clone()),
                None => tracked.remove(path),
            };
            files.push(FileChange {
                file: target,
                expected,
                text: text.clone(),
            });
        }
        if let Some(cursor) = plan.cursor {
            tracked.insert(CURSOR_PATH.to_owned(), cursor.to_string());
        }
        let change = MemoryChange {
            fence: lease.fence,
            files,
            cursor: plan.cursor,
            version: plan.message.map(|message| VersionRecord {
                message,
                files: tracked,
            }),
            time: self.clock.now(),
        };
        Ok(self.commit.commit(&change).await?)
    }

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

    async fn write_proposals(&self, proposals: &[Proposal]) -> Result<(), DreamError> {
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

    async fn queue_proposals(&self, new: Vec<Proposal>) -> Result<(), DreamError> {
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

    async fn record_run(&self, at: DateTime<Utc>) -> Result<(), DreamError> {
        let mut state = self.state().await?;
        state.insert("last_run_at".into(), Value::String(at.to_rfc3339()));
        self.documents
            .write_aux(AuxFile::DreamState, &Value::Object(state).to_string())
            .await?;
        Ok(())
    }

    pub(crate) async fn state(&self) -> Result<serde_json::Map<String, Value>, DreamError> {
        Ok(self
            .documents
            .read_aux(AuxFile::DreamState)
            .await?
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default())
    }

    pub(crate) async fn write_state(
        &self,
        state: serde_json::Map<String, Value>,
    ) -> Result<(), DreamError> {
        self.documents
            .write_aux(AuxFile::DreamState, &Value::Object(state).to_string())
            .await?;
        Ok(())
    }

    /// When Dream last ran (persisted, so a restart catches up).
    pub async fn last_run(&self) -> Result<Option<DateTime<Utc>>, DreamError> {
        Ok(self
            .state()
            .await?
            .get("last_run_at")
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc)))
    }

    /// With Dream disabled: moves the cursor to the latest entry (never back), so Recent
    /// History in every prompt does not grow without bound. Whether it moved.
    pub async fn fast_forward_cursor(&self) -> Result<bool, DreamError> {
        let latest = self.journal.latest_cursor().await?;
        if self.journal.dream_cursor().await? < latest {
            self.journal.set_dream_cursor(latest).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The newest `limit` versions, newest first.
    pub async fn log(&self, limit: usize) -> Result<Vec<Version>, DreamError> {
        Ok(self.versions()?.log(limit).await?)
    }

    /// Version `id` and its changes against the version before it.
    pub async fn show(&self, id: &str) -> Result<(Version, Vec<FileDiff>), DreamError> {
        let versions = self.versions()?;
        let version = versions.resolve(id).await?;
        let after = versions.files_at(&version.id).await?;
        let before = match &version.parent {
            Some(parent) => versions.files_at(parent).await?,
            None => Snapshot::new(),
        };
        Ok((version, diff_snapshots(&before, &after)))
    }

    /// Brings the memory files and the cursor back to their state before version `id` (a
    /// Dream version), recorded as a new version that can itself be restored (undone).
    pub async fn restore(&self, id: &str) -> Result<RestoreReport, DreamError> {
        let lease = self.acquire("restore").await?;
        let result = self.restore_leased(id, &lease).await;
        self.give_back(lease).await;
        result
    }

    async fn restore_leased(&self, id: &str, lease: &Lease) -> Result<RestoreReport, DreamError> {
        self.recover(lease).await?;
        let versions = self.versions()?;
        let undone = versions.resolve(id).await?;
        if !undone.message.starts_with("dream:") {
            return Err(DreamError::Memory(MemoryError::UnknownVersion {
                id: format!(
                    "{id} (version {} was not made by Dream; only Dream versions can be restored)",
                    undone.short_id()
                ),
            }));
        }
        let Some(parent) = &undone.parent else {
            return Err(DreamError::NothingBefore {
                id: undone.short_id().to_owned(),
            });
        };
        // Edits made outside Dream since the last version are kept in a version first.
        self.record_outside_edits(lease).await?;
        let target = versions.files_at(parent).await?;
        let now = self.snapshot_now().await?;
        let changes = diff_snapshots(&now, &target);
        let mut files = BTreeMap::new();
        let paths: BTreeSet<&String> = now.keys().chain(target.keys()).collect();
        for path in paths {
            if path == CURSOR_PATH || now.get(path) == target.get(path) {
                continue;
            }
            files.insert(path.clone(), target.get(path).cloned());
        }
        let cursor = target
            .get(CURSOR_PATH)
            .and_then(|c| c.trim().parse::<u64>().ok());
        let message = format!(
            "dream: restore to before {}\n\nUndoes {} \"{}\" and everything after it; restore this version to undo the restore.\n\n{}",
            undone.short_id(),
            undone.short_id(),
            undone.subject(),
            summary(&changes)
        );
        let version = self
            .apply(
                Plan {
                    files,
                    cursor,
                    message: Some(message),
                },
                &now,
                lease,
            )
            .await?;
        Ok(RestoreReport {
            undone,
            version,
            changes,
        })
    }

    /// The instructions a run uses, and whether they are the workspace's own.
    pub async fn instructions(&self) -> Result<(String, bool), DreamError> {
        let custom = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        let is_custom = custom.as_deref().is_some_and(|t| !t.trim().is_empty());
        Ok((prompt::instructions(custom.as_deref()), is_custom))
    }

    /// Writes the default instructions to `prompts/dream.md` for editing, unless it already
    /// has content. Whether it was written.
    pub async fn init_instructions(&self) -> Result<bool, DreamError> {
        let current = self.documents.read_aux(AuxFile::DreamPrompt).await?;
        if current.as_deref().is_some_and(|t| !t.trim().is_empty()) {
            return Ok(false);
        }
        let text = format!("{}\n", prompt::default_instructions());
        self.documents
            .write_aux(AuxFile::DreamPrompt, &text)
            .await?;
        Ok(true)
    }
}

/// Tool calls written as JSON in an answer's text (`{"name": "write_file", "arguments":
/// {...}}`, possibly fenced, possibly several, anywhere in the text), for models without
/// native tool calls. Only Dream's own tool names count.
pub fn text_tool_calls(text: &str, step: usize) -> Vec<nanobot_llm_port::ToolCall> {
    const TOOLS: [&str; 4] = ["list_files", "read_file", "edit_file", "write_file"];
    nanobot_llm_port::text::tool_calls_in_text(text, &TOOLS, CallPlacement::Anywhere, |n| {
        format!("text_{step}_{n}")
    })
}

/// File diffs between two snapshots (Dream's cursor left out).
pub fn diff_snapshots(before: &Snapshot, after: &Snapshot) -> Vec<FileDiff> {
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter(|p| p.as_str() != CURSOR_PATH)
        .filter_map(|p| {
            file_diff(
                p,
                before.get(p).map(String::as_str),
                after.get(p).map(String::as_str),
            )
        })
        .collect()
}

//! The Consolidator: archives the oldest part of a session into the journal when its prompt
//! outgrows the budget, and the whole live part when it goes idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use nanobot_llm_port::text::strip_think;
use nanobot_llm_port::tokens::estimate_json_message_tokens;
use nanobot_llm_port::{
    CountingEstimator, FinishReason, LlmClient, LlmError, LlmRequest, Message, PromptEstimator,
    TokenCounter, ToolChoice, ToolDefinition,
};
use nanobot_memory_store::{
    ArchiveCommit, HistoryJournal, MemoryError, NewEntry, SessionArchive, archive_digest,
};
use nanobot_session_store::{
    HistoryOptions, LAST_SUMMARY_KEY, MAX_WRITE_ATTEMPTS, RECALLED_FIELD, Replayed, Session,
    SessionHandle, SessionKey, SessionManager, StoredMessage, get_history, get_history_counted,
    python_isoformat,
};
use serde_json::{Value, json};

use crate::config::ConsolidationConfig;
use crate::error::ConsolidationError;
use crate::prompt::{PromptBuilder, archive_instruction};
use crate::raw::{format_messages, raw_entries};

/// A whole-session token estimate a test scripts (see `Consolidator::with_session_estimates`).
#[cfg(feature = "test-util")]
pub type SessionEstimates = Arc<dyn Fn(&Session) -> usize + Send + Sync>;

/// The answer a model gives when nothing is worth keeping.
pub const NOTHING: &str = "(nothing)";

/// What the probe request carries as its current message when a session's prompt is sized.
pub const PROBE_MESSAGE: &str = "[token-probe]";

/// What the archiving model reads instead of a tool result that recalled stored memory.
pub const RECALLED_PLACEHOLDER: &str =
    "[memory recalled by a search; it is already stored, do not summarise it again]";

/// Why an archive fell back to the raw messages.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RawReason {
    /// The configuration leaves no input budget.
    NoBudget,
    /// The messages cannot be replayed in full within the budget (one message too large).
    NotReplayable,
    /// The archive request itself would not fit the budget.
    RequestTooLarge,
    /// The model call failed.
    CallFailed(LlmError),
    /// The answer was cut by the output limit or ended in a provider error.
    Unfinished(FinishReason),
    /// The model called tools instead of answering.
    ToolCalls,
    /// The answer was empty.
    Empty,
    /// The structured answer did not parse as the schema asked.
    InvalidStructured(String),
    /// The first request failed, and so did the structured one asked after it.
    Retried {
        /// Why the first answer was unusable (`None` when the schema was asked first).
        first: Option<Box<RawReason>>,
        /// Why the structured answer was unusable.
        structured: Box<RawReason>,
    },
}

impl std::fmt::Display for RawReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawReason::NoBudget => f.write_str("the configuration leaves no input budget"),
            RawReason::NotReplayable => {
                f.write_str("a message is too large to replay within the budget")
            }
            RawReason::RequestTooLarge => {
                f.write_str("the archive request would not fit the budget")
            }
            RawReason::CallFailed(e) => write!(f, "the model call failed: {e}"),
            RawReason::Unfinished(reason) => write!(f, "the answer was unfinished ({reason:?})"),
            RawReason::ToolCalls => f.write_str("the model called tools instead of answering"),
            RawReason::Empty => f.write_str("the answer was empty"),
            RawReason::InvalidStructured(why) => {
                write!(
                    f,
                    "the structured answer was not what the schema asked: {why}"
                )
            }
            RawReason::Retried { first, structured } => match first {
                Some(first) => write!(f, "{first}; asked again with a schema: {structured}"),
                None => write!(f, "asked with a schema: {structured}"),
            },
        }
    }
}

/// What one archive did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Archived {
    /// The model's summary was journaled (exactly this text, cleaned and capped).
    Summary {
        /// The stored text.
        text: String,
        /// Its journal cursor.
        cursor: u64,
    },
    /// The model found nothing worth keeping; nothing was journaled.
    Nothing,
    /// The messages themselves were journaled, in one or more parts.
    Raw {
        /// The cursors of the parts.
        cursors: Vec<u64>,
        /// Why no summary.
        reason: RawReason,
    },
    /// A journal entry already covered these messages (a crash came between its append and
    /// the pointer move): the pointer was moved without archiving them twice.
    Recovered {
        /// The entry's cursor.
        cursor: u64,
    },
    /// Another writer archived these messages first (the session's pointer had moved when
    /// this archive was committed): this archive was discarded, nothing was journaled.
    Superseded,
}

/// An archive decided but not committed yet: the entries it journals and what they are.
enum Prepared {
    Summary(String),
    Nothing,
    Raw {
        parts: Vec<String>,
        reason: RawReason,
    },
}

impl Prepared {
    fn entries(&self) -> Vec<String> {
        match self {
            Prepared::Summary(text) => vec![text.clone()],
            Prepared::Nothing => Vec::new(),
            Prepared::Raw { parts, .. } => parts.clone(),
        }
    }

    /// What was archived, with the cursors the commit gave the entries.
    fn committed(self, cursors: Vec<u64>) -> Archived {
        match self {
            Prepared::Summary(text) => Archived::Summary {
                cursor: cursors.first().copied().unwrap_or_default(),
                text,
            },
            Prepared::Nothing => Archived::Nothing,
            Prepared::Raw { reason, .. } => Archived::Raw { cursors, reason },
        }
    }
}

/// One archive of messages `[start, end)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveRecord {
    /// The first message archived.
    pub start: usize,
    /// One past the last.
    pub end: usize,
    /// What was written.
    pub outcome: Archived,
}

/// What a consolidation did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsolidationReport {
    /// The prompt estimate before (provider-reported tokens when given).
    pub estimate_before: usize,
    /// The estimate after the last archive.
    pub estimate_after: usize,
    /// The archives made, oldest first.
    pub archives: Vec<ArchiveRecord>,
    /// Still at or over the budget afterwards: no further boundary (one turn larger than the
    /// budget, or the round limit). The next request may not fit; replay trimming is left.
    pub over_budget: bool,
}

/// Archives sessions into the journal. One per bot; all its work on one session is
/// serialized by a per-session lock, held across the model call.
pub struct Consolidator {
    config: ConsolidationConfig,
    llm: Arc<dyn LlmClient>,
    journal: Arc<dyn HistoryJournal>,
    archive: Arc<dyn SessionArchive>,
    sessions: Arc<SessionManager>,
    prompt: Arc<dyn PromptBuilder>,
    counter: Arc<dyn TokenCounter>,
    estimator: Arc<dyn PromptEstimator>,
    /// Whole-session estimates a test scripts instead of the replay's count.
    #[cfg(feature = "test-util")]
    session_estimates: Option<SessionEstimates>,
    locks: Mutex<HashMap<SessionKey, Weak<tokio::sync::Mutex<()>>>>,
    /// Token counts of recent request frames, by content.
    frames: Mutex<HashMap<u64, usize>>,
}

impl std::fmt::Debug for Consolidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consolidator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Consolidator {
    /// A Consolidator; the configuration is checked first. `archive` commits an archive of
    /// `sessions` into `journal` (entries and pointer move as one operation).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: ConsolidationConfig,
        llm: Arc<dyn LlmClient>,
        journal: Arc<dyn HistoryJournal>,
        archive: Arc<dyn SessionArchive>,
        sessions: Arc<SessionManager>,
        prompt: Arc<dyn PromptBuilder>,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<Self, ConsolidationError> {
        config.validate()?;
        Ok(Consolidator {
            estimator: Arc::new(CountingEstimator(Arc::clone(&counter))),
            config,
            llm,
            journal,
            archive,
            sessions,
            prompt,
            counter,
            #[cfg(feature = "test-util")]
            session_estimates: None,
            locks: Mutex::new(HashMap::new()),
            frames: Mutex::new(HashMap::new()),
        })
    }

    /// Sizes requests with `estimator` instead of the token counter (a provider's own
    /// counter, or a test's script).
    pub fn with_estimator(mut self, estimator: Arc<dyn PromptEstimator>) -> Self {
        self.estimator = estimator;
        self
    }

    /// Test hook: `estimates` sizes whole sessions instead of the replay's count, so a test
    /// decides when a session is over its budget.
    #[cfg(feature = "test-util")]
    pub fn with_session_estimates(mut self, estimates: SessionEstimates) -> Self {
        self.session_estimates = Some(estimates);
        self
    }

    /// The settings.
    pub fn config(&self) -> &ConsolidationConfig {
        &self.config
    }

    /// The per-session lock: consolidation, idle compaction and `/new` archives of one
    /// session never overlap.
    pub fn lock_for(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, weak| weak.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }

    /// The tokens the session's next request would take: its full replay (per-message
    /// estimates, cached on the messages), plus the system prompt, a probe message and the
    /// tools.
    pub fn estimate(&self, session: &Session) -> usize {
        #[cfg(feature = "test-util")]
        if let Some(estimates) = &self.session_estimates {
            return estimates(session);
        }
        let (_, history_tokens) = get_history_counted(
            session.messages(),
            session.last_consolidated(),
            &HistoryOptions::default(),
            self.counter.as_ref(),
        );
        history_tokens + self.frame_tokens(session, PROBE_MESSAGE)
    }

    /// The tokens of a request around the history: system prompt, `current` and tools.
    /// Frames repeat (the same system prompt turn after turn), so their counts are kept.
    fn frame_tokens(&self, session: &Session, current: &str) -> usize {
        self.count_frame(
            &self.prompt.build(session, &[], current),
            &self.prompt.tools(),
        )
    }

    /// [`Consolidator::frame_tokens`] of a frame already built.
    fn estimate_messages(&self, messages: &[Message]) -> usize {
        self.estimator.prompt(messages, &[])
    }

    fn count_frame(&self, frame: &[Message], tools: &[ToolDefinition]) -> usize {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut hasher = DefaultHasher::new();
        for message in frame {
            // Text is hashed as it is (a system prompt is kilobytes: no JSON escaping of it
            // per estimate); anything else as its JSON.
            match message {
                Message::System(system)
                    if system.content.as_text().is_some()
                        && system.name.is_none()
                        && system.extra.is_empty() =>
                {
                    ("system", system.content.as_text()).hash(&mut hasher);
                }
                Message::User(user)
                    if user.content.as_text().is_some()
                        && user.name.is_none()
                        && user.extra.is_empty() =>
                {
                    ("user", user.content.as_text()).hash(&mut hasher);
                }
                other => serde_json::to_string(other)
                    .unwrap_or_default()
                    .hash(&mut hasher),
            }
        }
        serde_json::to_string(&tools)
            .unwrap_or_default()
            .hash(&mut hasher);
        let fingerprint = hasher.finish();
        if let Some(tokens) = self
            .frames
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fingerprint)
        {
            return *tokens;
        }
        let tokens = self.estimator.prompt(frame, tools);
        let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        if frames.len() >= 64 {
            frames.clear();
        }
        frames.insert(fingerprint, tokens);
        tokens
    }

    /// Whether the frame around a history (system prompt, `current`, tools) fits in `room`
    /// tokens: by the estimator's cheap bound when that settles it, else by the count.
    fn frame_fits(&self, session: &Session, current: &str, room: usize) -> bool {
        let frame = self.prompt.build(session, &[], current);
        let tools = self.prompt.tools();
        if self
            .estimator
            .prompt_at_most(&frame, &tools)
            .is_some_and(|bound| bound <= room)
        {
            return true;
        }
        self.count_frame(&frame, &tools) <= room
    }

    /// Whether the next request of this session would not fit (the estimate reaches the
    /// budget): then consolidation must run before the request, else it can wait.
    pub fn needs_consolidation(
        &self,
        handle: &SessionHandle,
        reported_prompt_tokens: Option<usize>,
    ) -> bool {
        self.config.context_window > 0
            && reported_prompt_tokens.unwrap_or_else(|| handle.read(|s| self.estimate(s)))
                >= self.config.budget()
    }

    /// Archives the oldest user-turn-aligned slices of the session while its prompt is over
    /// the budget, until it is at most `budget * ratio` (at most `max_rounds` archives; a raw
    /// fallback stops the run). `reported_prompt_tokens`, the provider's count for the last
    /// request, is used instead of the first estimate when given.
    #[tracing::instrument(
        name = "consolidation",
        skip_all,
        fields(
            session = %key.log_id(),
            estimate_before = tracing::field::Empty,
            estimate_after = tracing::field::Empty,
            archives = tracing::field::Empty,
        )
    )]
    pub async fn maybe_consolidate(
        &self,
        key: &SessionKey,
        reported_prompt_tokens: Option<usize>,
    ) -> Result<ConsolidationReport, ConsolidationError> {
        let started = std::time::Instant::now();
        let result = self
            .maybe_consolidate_inner(key, reported_prompt_tokens)
            .await;
        let span = tracing::Span::current();
        match &result {
            Ok(report) => {
                span.record("estimate_before", report.estimate_before);
                span.record("estimate_after", report.estimate_after);
                span.record("archives", report.archives.len());
                if !report.archives.is_empty() {
                    tracing::info!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        over_budget = report.over_budget,
                        "consolidated"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "consolidation failed"),
        }
        result
    }

    async fn maybe_consolidate_inner(
        &self,
        key: &SessionKey,
        reported_prompt_tokens: Option<usize>,
    ) -> Result<ConsolidationReport, ConsolidationError> {
        self.consolidate_rounds(key, reported_prompt_tokens, self.config.max_rounds)
            .await
    }

    /// Works a backlog off: consolidations of at most `max_rounds` archives each, the lock
    /// released between them (so a turn's own consolidation never waits for a whole
    /// backlog), until the prompt is at the target, nothing more can be archived, an archive
    /// falls back to raw, or `max_background_rounds` archives were made. One report for all.
    #[tracing::instrument(name = "backlog", skip_all, fields(session = %key.log_id()))]
    pub async fn consolidate_backlog(
        &self,
        key: &SessionKey,
        reported_prompt_tokens: Option<usize>,
    ) -> Result<ConsolidationReport, ConsolidationError> {
        let mut total: Option<ConsolidationReport> = None;
        let mut reported = reported_prompt_tokens;
        loop {
            let made = total.as_ref().map_or(0, |t| t.archives.len());
            let rounds = self
                .config
                .max_rounds
                .min(self.config.max_background_rounds.saturating_sub(made));
            if rounds == 0 {
                break;
            }
            let report = self
                .consolidate_rounds(key, reported.take(), rounds)
                .await?;
            let progressed = !report.archives.is_empty();
            let stop = !progressed
                || report.estimate_after <= self.config.target()
                || report
                    .archives
                    .iter()
                    .any(|r| matches!(r.outcome, Archived::Raw { .. }));
            let total = total.get_or_insert_with(|| ConsolidationReport {
                estimate_before: report.estimate_before,
                ..ConsolidationReport::default()
            });
            total.estimate_after = report.estimate_after;
            total.over_budget = report.over_budget;
            total.archives.extend(report.archives);
            if stop {
                break;
            }
        }
        Ok(total.unwrap_or_default())
    }

    async fn consolidate_rounds(
        &self,
        key: &SessionKey,
        reported_prompt_tokens: Option<usize>,
        max_rounds: usize,
    ) -> Result<ConsolidationReport, ConsolidationError> {
        let mut report = ConsolidationReport::default();
        if self.config.context_window == 0 {
            return Ok(report);
        }
        let lock = self.lock_for(key);
        let _serialized = lock.lock().await;
        let handle = self.sessions.get_or_create(key).await?;
        if handle.message_count() == 0 {
            return Ok(report);
        }
        let (budget, target) = (self.config.budget(), self.config.target());
        let mut estimate =
            reported_prompt_tokens.unwrap_or_else(|| handle.read(|s| self.estimate(s)));
        report.estimate_before = estimate;
        report.estimate_after = estimate;
        if estimate < budget {
            return Ok(report);
        }
        let mut summaries: Vec<String> = Vec::new();
        for _ in 0..max_rounds {
            if estimate <= target {
                break;
            }
            let excess = estimate.saturating_sub(target).max(1);
            let Some(end) = handle.read(|s| {
                let cap = self.slice_cap(s);
                self.pick_boundary_within(s, excess, cap)
            }) else {
                break;
            };
            let record = self.archive(&handle, end).await?;
            let raw = matches!(record.outcome, Archived::Raw { .. });
            if let Archived::Summary { text, .. } = &record.outcome {
                summaries.push(text.clone());
            }
            report.archives.push(record);
            estimate = handle.read(|s| self.estimate(s));
            report.estimate_after = estimate;
            if raw {
                // The model is presumably degraded: the next run starts afresh.
                break;
            }
        }
        // Every round's summary joins the session's summary, not only the last one.
        if !summaries.is_empty() {
            self.remember_summary(&handle, &summaries.join("\n"), None)
                .await?;
        }
        report.over_budget = report.estimate_after >= budget;
        Ok(report)
    }

    /// Archives everything not yet archived (the session went idle): one summary of the whole
    /// live part, kept in the session's metadata for the next turn's prompt. Messages added
    /// while the model answers stay live. `None` when there was nothing to archive.
    #[tracing::instrument(name = "idle_compaction", skip_all, fields(session = %key.log_id()))]
    pub async fn compact_idle(
        &self,
        key: &SessionKey,
    ) -> Result<Option<ArchiveRecord>, ConsolidationError> {
        let started = std::time::Instant::now();
        let result = self.compact_idle_inner(key).await;
        match &result {
            Ok(Some(record)) => tracing::info!(
                messages = record.end - record.start,
                raw = matches!(record.outcome, Archived::Raw { .. }),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "idle session archived"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "idle compaction failed"),
        }
        result
    }

    async fn compact_idle_inner(
        &self,
        key: &SessionKey,
    ) -> Result<Option<ArchiveRecord>, ConsolidationError> {
        let lock = self.lock_for(key);
        let _serialized = lock.lock().await;
        let handle = self.sessions.get_or_create(key).await?;
        let (pointer, end, last_active) = handle.read(|s| {
            (
                s.last_consolidated(),
                s.messages().len(),
                s.meta().updated_at,
            )
        });
        if pointer >= end {
            return Ok(None);
        }
        let record = self.archive(&handle, end).await?;
        if let Archived::Summary { text, .. } = &record.outcome {
            self.remember_summary(&handle, text, Some(last_active))
                .await?;
        }
        Ok(Some(record))
    }

    /// Archives the messages from the pointer to `end` of a session the caller holds the lock
    /// of (nanobot's `/new` archives a detached copy this way). The entries and the pointer
    /// move are one commit ([`SessionArchive`]); the pointer moves to `end` whatever the
    /// model answered, except when storage fails or another writer archived the messages
    /// first ([`Archived::Superseded`]).
    pub async fn archive(
        &self,
        handle: &SessionHandle,
        end: usize,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let key = handle.key().clone();
        let (start, chunk) = handle.read(|s| {
            let start = s.last_consolidated();
            (
                start,
                s.messages()[start.min(end)..end.min(s.messages().len())].to_vec(),
            )
        });
        if chunk.is_empty() {
            return Ok(ArchiveRecord {
                start,
                end: start,
                outcome: Archived::Nothing,
            });
        }
        if let Some((to, cursor)) = self.already_archived(handle, start).await? {
            let outcome = match self.commit(handle, start, to, &[]).await? {
                Some(_) => Archived::Recovered { cursor },
                None => Archived::Superseded,
            };
            return Ok(ArchiveRecord {
                start,
                end: to,
                outcome,
            });
        }
        let request = handle.read(|session| self.build_request(session, start, end));
        let prepared = self
            .journal_archive(&key, start, end, &chunk, request)
            .await?;
        let outcome = match self.commit(handle, start, end, &prepared.entries()).await? {
            Some(cursors) => prepared.committed(cursors),
            None => Archived::Superseded,
        };
        Ok(ArchiveRecord {
            start,
            end,
            outcome,
        })
    }

    /// Commits the archive of `[start, end)` with `entries`: the journal entries and the
    /// pointer move (and the provider's continuation state dropped) as one operation. A
    /// session another writer changed meanwhile is reloaded and the commit tried again;
    /// `None` when the pointer is no longer at `start` (someone else archived it).
    async fn commit(
        &self,
        handle: &SessionHandle,
        start: usize,
        end: usize,
        entries: &[String],
    ) -> Result<Option<Vec<u64>>, ConsolidationError> {
        let key = handle.key().clone();
        let mut attempt = 1;
        loop {
            let digest = handle.read(|s| {
                let messages = s.messages();
                archive_digest(&messages[start.min(messages.len())..end.min(messages.len())])
            });
            let result = self
                .sessions
                .commit_meta(
                    handle,
                    |s| {
                        if s.last_consolidated() != start || s.set_last_consolidated(end).is_err() {
                            return false;
                        }
                        s.set_provider_state(None);
                        true
                    },
                    async |expected, meta| {
                        let committed = self
                            .archive
                            .commit_archive(&ArchiveCommit {
                                session: &key,
                                expected,
                                from: start as u64,
                                to: end as u64,
                                digest: &digest,
                                entries,
                                meta,
                            })
                            .await?;
                        Ok::<_, ConsolidationError>((committed.revision, committed.cursors))
                    },
                )
                .await;
            match result {
                Err(ConsolidationError::Memory(MemoryError::Conflict { .. }))
                    if attempt < MAX_WRITE_ATTEMPTS =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Archives the live part of a detached copy of a session into the journal, moving no
    /// pointer anywhere: nanobot's `/new`, which empties the session at once and archives
    /// what it held in the background. The caller keeps the session's lock only for the
    /// clear, not for this call.
    pub async fn archive_snapshot(
        &self,
        snapshot: &Session,
    ) -> Result<ArchiveRecord, ConsolidationError> {
        let (start, end) = (snapshot.last_consolidated(), snapshot.messages().len());
        let chunk = &snapshot.messages()[start.min(end)..];
        if chunk.is_empty() {
            return Ok(ArchiveRecord {
                start,
                end: start,
                outcome: Archived::Nothing,
            });
        }
        let request = self.build_request(snapshot, start, end);
        let prepared = self
            .journal_archive(snapshot.key(), start, end, chunk, request)
            .await?;
        let digest = archive_digest(chunk);
        let texts = prepared.entries();
        let entries: Vec<NewEntry<'_>> = texts
            .iter()
            .map(|text| {
                NewEntry::text(text)
                    .from_session(snapshot.key().as_str())
                    .covering(start as u64, end as u64)
                    .with_digest(&digest)
            })
            .collect();
        let cursors = self.journal.append(&entries).await?;
        Ok(ArchiveRecord {
            start,
            end,
            outcome: prepared.committed(cursors),
        })
    }

    /// Runs [`Consolidator::consolidate_backlog`] as a background task, so a reply never
    /// waits for it (the caller runs [`Consolidator::maybe_consolidate`], a bounded number
    /// of archives, inline only when the next request would not fit).
    pub fn consolidate_in_background(
        self: &Arc<Self>,
        key: SessionKey,
        reported_prompt_tokens: Option<usize>,
    ) -> tokio::task::JoinHandle<Result<ConsolidationReport, ConsolidationError>> {
        let consolidator = Arc::clone(self);
        tokio::spawn(async move {
            consolidator
                .consolidate_backlog(&key, reported_prompt_tokens)
                .await
        })
    }

    /// Journals the archive of `[start, end)`: the model's answer when the request could
    /// be made, else the messages themselves.
    async fn journal_archive(
        &self,
        key: &SessionKey,
        start: usize,
        end: usize,
        chunk: &[nanobot_session_store::StoredMessage],
        request: Result<LlmRequest, RawReason>,
    ) -> Result<Prepared, ConsolidationError> {
        // Capabilities are asked only when they matter (a usable first answer needs none).
        let structured = || self.llm.capabilities().supports_structured_output;
        let first = if self.config.structured_first && structured() {
            None
        } else {
            let reason = match request {
                Err(reason) => reason,
                Ok(request) => match self.ask(&request).await? {
                    Ok(done) => return Ok(done),
                    Err(reason) => reason,
                },
            };
            let worth_retrying = !matches!(reason, RawReason::NoBudget | RawReason::CallFailed(_));
            if !(self.config.structured_retry && worth_retrying && structured()) {
                return Ok(self.archive_raw(key, start, end, chunk, reason));
            }
            Some(Box::new(reason))
        };
        match self.ask_structured(chunk).await? {
            Ok(done) => Ok(done),
            Err(second) => {
                let reason = RawReason::Retried {
                    first,
                    structured: Box::new(second),
                };
                Ok(self.archive_raw(key, start, end, chunk, reason))
            }
        }
    }

    /// The archive of `chunk` asked with a JSON schema in a request of its own (a short
    /// system message and the messages as text, so it fits where the session's prompt does
    /// not), rendered as nanobot-ai's `- [mark] fact` lines. `Err` says why it is unusable.
    async fn ask_structured(
        &self,
        chunk: &[nanobot_session_store::StoredMessage],
    ) -> Result<Result<Prepared, RawReason>, ConsolidationError> {
        let Some(request) = self.structured_request(chunk) else {
            return Ok(Err(RawReason::RequestTooLarge));
        };
        let response = match self.complete_in_time(&request).await {
            Err(error) => return Ok(Err(RawReason::CallFailed(error))),
            Ok(response) => response,
        };
        if !matches!(response.finish_reason, FinishReason::Stop) {
            return Ok(Err(RawReason::Unfinished(response.finish_reason)));
        }
        let text = match crate::structured::render(&strip_think(&response.text_content())) {
            Err(why) => return Ok(Err(RawReason::InvalidStructured(why))),
            Ok(None) => return Ok(Ok(Prepared::Nothing)),
            Ok(Some(text)) => text,
        };
        Ok(Ok(self.summary(&text)))
    }

    /// The model's answer to an archive request, a timeout after `call_timeout` counting as
    /// a failed call.
    async fn complete_in_time(
        &self,
        request: &LlmRequest,
    ) -> Result<nanobot_llm_port::LlmResponse, LlmError> {
        match tokio::time::timeout(self.config.call_timeout, self.llm.complete(request)).await {
            Err(_) => Err(LlmError::Timeout {
                after: self.config.call_timeout,
            }),
            Ok(answer) => answer,
        }
    }

    /// `text` (capped) as the archive's one entry.
    fn summary(&self, text: &str) -> Prepared {
        Prepared::Summary(cap(text, self.config.summary_max_chars))
    }

    /// The structured archive request for `chunk`, or `None` when it cannot fit the window
    /// with room for an answer.
    fn structured_request(
        &self,
        chunk: &[nanobot_session_store::StoredMessage],
    ) -> Option<LlmRequest> {
        let messages =
            crate::structured::messages(&crate::structured::conversation(&format_messages(chunk)));
        let prompt = self.estimate_messages(&messages);
        // Our count is cl100k's; the model's tokenizer differs, so keep a proportional margin.
        let margin = (prompt / 5).max(64);
        let room = self
            .config
            .context_window
            .checked_sub(prompt + margin)?
            .min(self.config.structured_max_output_tokens);
        if room < 96 {
            return None;
        }
        let mut request = LlmRequest::new(self.config.model.clone(), messages)
            .with_max_tokens(u32::try_from(room).unwrap_or(u32::MAX))
            .with_response_format(crate::structured::format());
        request.temperature = Some(self.config.temperature.unwrap_or(0.0));
        Some(request)
    }

    /// An archive of this session from `start` that is journaled but whose pointer move was
    /// lost (a crash between the two steps of a backend without transactions): one whose
    /// digest matches the session's messages, found by the journal's index. Its end and
    /// first cursor.
    async fn already_archived(
        &self,
        handle: &SessionHandle,
        start: usize,
    ) -> Result<Option<(usize, u64)>, ConsolidationError> {
        let found = self
            .archive
            .find_archive(handle.key(), start as u64)
            .await?;
        Ok(found.iter().rev().find_map(|archive| {
            let to = usize::try_from(archive.to).ok()?;
            let matches = handle.read(|s| {
                let messages = s.messages();
                to > start
                    && to <= messages.len()
                    && archive.digest.as_deref()
                        == Some(archive_digest(&messages[start..to]).as_str())
            });
            matches.then(|| (to, archive.cursors.first().copied().unwrap_or_default()))
        }))
    }

    /// `history` with the content of every tool result that recalled memory (marked with
    /// [`RECALLED_FIELD`] among `messages`) replaced by [`RECALLED_PLACEHOLDER`]: the model
    /// summarising the conversation sees that a search happened, not the recalled text, so
    /// nothing recalled is archived a second time.
    fn hide_recalled(history: Vec<Replayed>, messages: &[StoredMessage]) -> Vec<Replayed> {
        let recalled: std::collections::HashSet<&str> = messages
            .iter()
            .filter(|m| m.flag(RECALLED_FIELD))
            .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
            .collect();
        if recalled.is_empty() {
            return history;
        }
        history
            .into_iter()
            .map(|row| {
                let is_recalled = row.get("role").and_then(Value::as_str) == Some("tool")
                    && row
                        .get("tool_call_id")
                        .and_then(Value::as_str)
                        .is_some_and(|id| recalled.contains(id));
                if !is_recalled {
                    return row;
                }
                let mut hidden = (*row).clone();
                hidden.insert("content".into(), Value::String(RECALLED_PLACEHOLDER.into()));
                Arc::new(hidden)
            })
            .collect()
    }

    /// The archive request for messages `[start, end)`, or why it cannot be made.
    fn build_request(
        &self,
        session: &Session,
        start: usize,
        end: usize,
    ) -> Result<LlmRequest, RawReason> {
        let budget = self.config.budget();
        if budget == 0 {
            return Err(RawReason::NoBudget);
        }
        {
            let counter = self.counter.as_ref();
            let (history, history_tokens) = get_history_counted(
                &session.messages()[..end],
                start,
                &HistoryOptions::with_token_budget(budget),
                counter,
            );
            // The session's own copies of the chunk: their projections are cached by now.
            let messages = session.messages();
            let archived = get_history(
                &messages[start.min(end)..end.min(messages.len())],
                0,
                &HistoryOptions::default(),
                counter,
            );
            if archived.is_empty()
                || archived.len() > history.len()
                || history[history.len() - archived.len()..] != archived[..]
            {
                return Err(RawReason::NotReplayable);
            }
            let history = Self::hide_recalled(history, &messages[..end.min(messages.len())]);
            let instruction = archive_instruction(archived.len());
            if history_tokens > budget
                || !self.frame_fits(session, &instruction, budget - history_tokens)
            {
                return Err(RawReason::RequestTooLarge);
            }
            let messages = self.prompt.build(session, &history, &instruction);
            let tools = self.prompt.tools();
            let mut request = LlmRequest::new(self.config.model.clone(), messages);
            if !tools.is_empty() {
                request = request.with_tools(tools).with_tool_choice(ToolChoice::None);
            }
            if self.config.max_output_tokens > 0 {
                request = request.with_max_tokens(
                    u32::try_from(self.config.max_output_tokens).unwrap_or(u32::MAX),
                );
            }
            if let Some(temperature) = self.config.temperature {
                request = request.with_temperature(temperature);
            }
            Ok(request)
        }
    }

    /// Asks the model for the summary and journals what it says (or the raw messages).
    async fn ask(
        &self,
        request: &LlmRequest,
    ) -> Result<Result<Prepared, RawReason>, ConsolidationError> {
        let reason = match self.complete_in_time(request).await {
            Err(error) => RawReason::CallFailed(error),
            Ok(response)
                if !matches!(
                    response.finish_reason,
                    FinishReason::Stop | FinishReason::ToolCalls
                ) =>
            {
                RawReason::Unfinished(response.finish_reason)
            }
            Ok(response) if !response.tool_calls_made().is_empty() => RawReason::ToolCalls,
            Ok(response) => {
                let text = response.text_content();
                let trimmed = text.trim();
                if trimmed.is_empty() {
                    RawReason::Empty
                } else if trimmed == NOTHING {
                    return Ok(Ok(Prepared::Nothing));
                } else {
                    return Ok(Ok(self.summary(&strip_think(trimmed))));
                }
            }
        };
        Ok(Err(reason))
    }

    /// The messages themselves as the archive, split into parts rather than cut.
    fn archive_raw(
        &self,
        key: &SessionKey,
        start: usize,
        end: usize,
        chunk: &[nanobot_session_store::StoredMessage],
        reason: RawReason,
    ) -> Prepared {
        tracing::warn!(
            session = %key.log_id(),
            start,
            end,
            reason = %reason,
            "archive fell back to the raw messages"
        );
        let lines = format_messages(chunk);
        Prepared::Raw {
            parts: raw_entries(chunk.len(), &lines, self.config.raw_part_max_chars),
            reason,
        }
    }

    /// Adds `summary` to the session's summary (`_last_summary`): the previous text is
    /// kept ahead of the new one, oldest lines dropped first when the whole would exceed
    /// twice the summary cap.
    async fn remember_summary(
        &self,
        handle: &SessionHandle,
        summary: &str,
        last_active: Option<chrono::NaiveDateTime>,
    ) -> Result<(), ConsolidationError> {
        let limit = self.config.summary_max_chars * 2;
        handle.update(|s| {
            let previous = s
                .meta()
                .metadata
                .get(LAST_SUMMARY_KEY)
                .and_then(|v| v.get("text"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut text = if previous.is_empty() {
                summary.to_owned()
            } else {
                format!("{previous}\n{summary}")
            };
            while text.chars().count() > limit {
                match text.find('\n') {
                    Some(cut) => text.replace_range(..=cut, ""),
                    None => {
                        text = text.chars().skip(text.chars().count() - limit).collect();
                    }
                }
            }
            let active = last_active.unwrap_or(s.meta().updated_at);
            s.metadata_mut().insert(
                LAST_SUMMARY_KEY.into(),
                json!({"text": text, "last_active": python_isoformat(active)}),
            );
        });
        self.sessions.save(handle).await?;
        Ok(())
    }

    /// The most tokens one archived slice may hold, so its archive request fits in one call:
    /// the session's request fits the budget around it (the frame counted, a tenth kept for
    /// the estimate's error), and, when the schema is asked first, so does the structured
    /// request. nanobot picks by the excess alone, so a backlog larger than the window
    /// becomes one request that never fits and one raw dump.
    pub fn slice_cap(&self, session: &Session) -> usize {
        let frame = self.frame_tokens(session, &archive_instruction(1));
        let mut cap = self.config.budget().saturating_sub(frame) / 10 * 9;
        if self.config.structured_first {
            let structured_frame = self.estimate_messages(&crate::structured::messages(""));
            let room = self
                .config
                .context_window
                .saturating_sub(self.config.structured_max_output_tokens + 64)
                .saturating_sub(structured_frame);
            // The structured request keeps a fifth of its prompt as margin.
            cap = cap.min(room / 6 * 5);
        }
        cap.max(1)
    }

    /// [`Consolidator::pick_boundary`] with slices of at most `max_tokens`: the boundary
    /// stops at the last user turn that keeps the slice within `max_tokens`, even before
    /// `tokens_to_remove` is reached (the rest is archived by the next rounds). A first turn
    /// larger than `max_tokens` is still one slice (it is archived raw when it cannot be
    /// asked).
    pub fn pick_boundary_within(
        &self,
        session: &Session,
        tokens_to_remove: usize,
        max_tokens: usize,
    ) -> Option<usize> {
        let start = session.last_consolidated();
        let messages = session.messages();
        if start >= messages.len() || tokens_to_remove == 0 {
            return None;
        }
        let mut removed = 0;
        let mut last = None;
        for (index, message) in messages.iter().enumerate().skip(start) {
            if index > start && message.role() == Some("user") {
                if removed > max_tokens {
                    return last.or(Some(index));
                }
                if removed >= tokens_to_remove {
                    return Some(index);
                }
                last = Some(index);
            }
            removed += estimate_json_message_tokens(self.counter.as_ref(), message.fields());
        }
        last
    }

    /// nanobot's `pick_consolidation_boundary`: walking from the pointer, the first user
    /// message (after the first message) before which at least `tokens_to_remove` tokens
    /// lie, else the last user message seen; `None` without one. Slices end before a user
    /// turn, so a tool call is never split from its results.
    pub fn pick_boundary(&self, session: &Session, tokens_to_remove: usize) -> Option<usize> {
        self.pick_boundary_within(session, tokens_to_remove, usize::MAX)
    }
}

/// `text` cut to `max_chars` characters with nanobot's visible marker.
fn cap(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max_chars).collect();
    format!("{cut}\n... (truncated)")
}

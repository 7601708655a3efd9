//! When to archive: under token pressure, a backlog, idle sessions, in the background.

use super::*;

impl Consolidator {
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

    pub(super) async fn maybe_consolidate_inner(
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

    pub(super) async fn consolidate_rounds(
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

    pub(super) async fn compact_idle_inner(
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
}

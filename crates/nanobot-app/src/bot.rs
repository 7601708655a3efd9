//! The stack, wired: sessions, the journal and documents on files, the Consolidator and
//! AutoCompact, Dream with its versions, the context builder, and a model. Everything here a
//! user can wire by hand (see `examples/minimal-bot`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use context_builder::govern::{GovernorConfig, GovernorState, govern};
use context_builder::{
    BuilderConfig, ContextBuilder, CurrentMessage, Host, JournalEntry, Summary, Turn,
    WorkspaceSnapshot,
};
use dream::{Dream, DreamConfig, DreamSchedule};
use llm_port::{Cl100kBase, Clock, LlmClient, LlmRequest, Message, TextSink, TokenCounter, Usage};
use memory_core::{
    AutoCompact, ConsolidationConfig, Consolidator, PromptBuilder, SessionSummary,
    replayed_messages,
};
use memory_store::{
    FileDocuments, FileJournal, FileLease, GitVersions, HistoryJournalExt, MemoryVersions,
    WorkspaceLoader,
};
use session_store::{
    Durability, FileSessionStore, FileStoreOptions, HistoryOptions, Replayed, Session, SessionKey,
    SessionManager, StoredMessage, get_history_counted,
};

use crate::config::{Config, Provider};
use crate::error::{AppError, Saved};

/// The parts of a bot, shared by its commands.
pub struct Bot {
    /// The configuration it runs with.
    pub config: Config,
    /// Sessions.
    pub sessions: Arc<SessionManager>,
    /// The history journal.
    pub journal: Arc<FileJournal>,
    /// The durable documents.
    pub documents: Arc<FileDocuments>,
    /// The prompt builder.
    pub builder: Arc<ContextBuilder>,
    /// Token-pressure and idle archiving.
    pub consolidator: Arc<Consolidator>,
    /// Idle timers (`None` when the idle TTL is 0).
    pub autocompact: Option<Arc<AutoCompact>>,
    /// Dream.
    pub dream: Arc<Dream>,
    /// The Dream schedule (`None` when disabled).
    pub schedule: Option<DreamSchedule>,
    /// The model.
    pub llm: Arc<dyn LlmClient>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    loader: Arc<WorkspaceLoader>,
    prompt: Arc<ContextPrompt>,
    counter: Arc<dyn TokenCounter>,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What one turn did.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// The answer.
    pub answer: String,
    /// The prompt's estimate (the build report's total).
    pub prompt_tokens: usize,
    /// What the provider reported.
    pub usage: Option<Usage>,
    /// Archives made before the turn because the request would not fit.
    pub consolidated_before: usize,
}

/// The model the configuration names.
pub fn model_client(config: &Config) -> Result<Arc<dyn LlmClient>, AppError> {
    let timeouts = llm_http::Timeouts {
        connect: Duration::from_secs(10),
        idle: Duration::from_secs(config.request_timeout_secs),
    };
    let client: Arc<dyn LlmClient> = match config.provider {
        Provider::OpenAi | Provider::Local => Arc::new(llm_openai::OpenAiClient::new(
            llm_openai::OpenAiConfig::new(&config.base_url, &config.model)
                .with_api_key(config.api_key.clone())
                .streaming(config.stream)
                .with_context_window(&config.model, saturating_u32(config.context_window))
                .with_timeouts(timeouts)
                .with_native_tools(config.native_tools),
        )?),
        Provider::Anthropic => {
            let mut anthropic = llm_anthropic::AnthropicConfig::new(&config.model)
                .with_base_url(&config.base_url)
                .with_api_key(config.api_key.clone())
                .streaming(config.stream)
                .with_timeouts(timeouts);
            anthropic.context_window = saturating_u32(config.context_window);
            anthropic.default_max_tokens = saturating_u32(config.max_output_tokens);
            Arc::new(llm_anthropic::AnthropicClient::new(anthropic)?)
        }
    };
    Ok(Arc::new(llm_port::Retry::new(
        llm_port::Timeout::new(
            client,
            Duration::from_secs(config.request_timeout_secs),
            Arc::new(llm_port::TokioClock::system()),
        ),
        llm_port::RetryPolicy::default(),
        Arc::new(llm_port::TokioClock::system()),
    )))
}

impl Bot {
    /// Opens the workspace of `config` with `llm`, creating what is missing.
    pub async fn open(
        config: Config,
        llm: Arc<dyn LlmClient>,
        clock: Arc<dyn Clock>,
    ) -> Result<Bot, AppError> {
        let workspace = config.workspace.clone();
        std::fs::create_dir_all(&workspace).map_err(|e| AppError::Config {
            key: "workspace".into(),
            file: config.source.clone(),
            reason: format!("{} cannot be created: {e}", workspace.display()),
        })?;
        let counter: Arc<dyn TokenCounter> = Arc::new(Cl100kBase);
        let durability = match config.durability.as_str() {
            "none" => Durability::None,
            "always" => Durability::Always,
            _ => Durability::TurnEnd,
        };
        let options = FileStoreOptions {
            durability,
            clock: clock.clone(),
        };
        // An existing nanobot-ai workspace keeps its sessions where nanobot-ai put them.
        let nanobot_layout = match config.layout.as_str() {
            "nanobot" => true,
            "auto" => workspace.join(".nanobot/workspace-id").is_file(),
            _ => false,
        };
        let store = if nanobot_layout {
            FileSessionStore::open_nanobot(&workspace, &config.sessions_root, options)?
        } else {
            FileSessionStore::open_workspace(&workspace, options)?
        };
        let sessions = Arc::new(
            SessionManager::new(Arc::new(store), clock.clone(), counter.clone())
                .with_recorded_token_counts(true),
        );
        let journal = Arc::new(FileJournal::open_with(
            &workspace,
            clock.clone(),
            memory_store::JournalDurability::default(),
        )?);
        let documents = Arc::new(FileDocuments::open(&workspace)?);
        // This bot offers the model no tools, so the tool notes are left out.
        let mut builder_config = BuilderConfig::new(Host::this_build());
        builder_config.tool_contract = false;
        // The builder's caps suit large windows; a small window gets proportional ones, so
        // unprocessed history or a grown MEMORY.md cannot fill it.
        let window = config.context_window;
        builder_config.limits.recent_history_tokens = (window / 5).clamp(200, 8_000);
        builder_config.limits.memory_tokens = (window / 4).clamp(400, 16_000);
        builder_config.limits.bootstrap_file_tokens = (window / 8).clamp(200, 8_000);
        let builder = Arc::new(ContextBuilder::new(builder_config, counter.clone()));
        let loader = Arc::new(WorkspaceLoader::new(&workspace)?);
        let prompt = Arc::new(ContextPrompt {
            builder: builder.clone(),
            loader: loader.clone(),
            inputs: Mutex::new(HashMap::new()),
        });
        let mut consolidation = ConsolidationConfig::new(
            config.model.clone(),
            config.context_window,
            config.max_output_tokens,
        );
        consolidation.ratio = config.consolidation_ratio;
        consolidation.structured_first = config.archive_with_schema;
        consolidation.temperature = config.temperature;
        // An archive call may take as long as any other call to this model.
        consolidation.call_timeout = Duration::from_secs(config.request_timeout_secs);
        let consolidator = Arc::new(Consolidator::new(
            consolidation,
            llm.clone(),
            journal.clone(),
            sessions.clone(),
            prompt.clone(),
            counter.clone(),
        )?);
        let autocompact = (config.idle_ttl_minutes > 0).then(|| {
            AutoCompact::new(
                consolidator.clone(),
                Duration::from_secs(config.idle_ttl_minutes.saturating_mul(60)),
            )
        });
        let versions: Result<Arc<dyn MemoryVersions>, String> = GitVersions::open(&workspace)
            .map(|g| Arc::new(g) as Arc<dyn MemoryVersions>)
            .map_err(|e| e.to_string());
        let mut dream_config = DreamConfig::new(config.model.clone());
        dream_config.max_steps = config.dream_max_steps;
        dream_config.mode = config.dream_mode;
        dream_config.max_tokens = config.dream_max_tokens;
        dream_config.batch_entries = config.dream_batch_entries;
        // Dream writes whole files: it needs more room to answer than a chat turn.
        dream_config.max_output_tokens = saturating_u32(config.max_output_tokens.max(1_024));
        dream_config.batch_tokens = (config.context_window / 3).max(256);
        dream_config.prompt_file_chars = (config.context_window).clamp(1_000, 16_000);
        let dream = Arc::new(
            Dream::new(
                dream_config,
                llm.clone(),
                journal.clone(),
                documents.clone(),
                versions,
                Arc::new(FileLease::open(&workspace)?),
                clock.clone(),
                counter.clone(),
            )?
            .with_progress(progress_printer()),
        );
        let schedule = if config.dream_enabled {
            Some(DreamSchedule::from_settings(
                config.dream_interval_hours,
                config.dream_cron.as_deref(),
                chrono::FixedOffset::east_opt(0).unwrap_or_else(|| chrono::Utc.fix()),
            )?)
        } else {
            // Disabled Dream: Recent History must not grow without bound.
            dream.fast_forward_cursor().await?;
            None
        };
        Ok(Bot {
            loader,
            config,
            sessions,
            journal,
            documents,
            builder,
            consolidator,
            autocompact,
            dream,
            schedule,
            llm,
            clock,
            prompt,
            counter,
            background: Mutex::new(Vec::new()),
        })
    }

    fn replay_budget(&self) -> usize {
        self.config
            .context_window
            .saturating_sub(self.config.max_output_tokens + 1_024)
            .max(128)
    }

    /// What a prompt of this workspace reads besides the session: the workspace files and
    /// the newest journal entries Dream has not processed yet (the builder keeps the newest
    /// of them that fit; older ones are counted in a marker line).
    async fn prompt_inputs(&self) -> Result<PromptInputs, AppError> {
        let snapshot = self.loader.load()?;
        let entries = self
            .journal
            .unprocessed_newest(RECENT_HISTORY_ENTRIES)
            .await?;
        Ok((snapshot, entries))
    }

    /// The prompt for `text` in session `key`, as the next turn would send it.
    pub async fn build_prompt(
        &self,
        key: &SessionKey,
        text: &str,
    ) -> Result<context_builder::BuiltPrompt, AppError> {
        let inputs = self.prompt_inputs().await?;
        self.prompt.remember(key, inputs.clone());
        self.build_prompt_from(key, text, inputs).await
    }

    /// The prompt from inputs the caller has read (and recorded for archive requests).
    async fn build_prompt_from(
        &self,
        key: &SessionKey,
        text: &str,
        (snapshot, entries): PromptInputs,
    ) -> Result<context_builder::BuiltPrompt, AppError> {
        let handle = self.sessions.get_or_create(key).await?;
        let summary = handle.read(summary_of);
        let options = HistoryOptions {
            max_tokens: self.replay_budget(),
            ..HistoryOptions::default()
        };
        let (rows, history_tokens) = handle.read(|s| {
            get_history_counted(
                s.messages(),
                s.last_consolidated(),
                &options,
                self.counter.as_ref(),
            )
        });
        let history = replayed_messages(&rows);
        Ok(self.builder.build(
            &snapshot,
            &Turn {
                channel: Some(key.channel()),
                session_key: Some(key.as_str()),
                summary: summary.as_ref(),
                history: &history,
                history_tokens: Some(history_tokens),
                journal: &entries,
                current: Some(CurrentMessage::user(text)),
                ..Turn::default()
            },
        )?)
    }

    /// One turn, in nanobot's order: consolidate first if the request would not fit, build
    /// the context, save the user's message, call the model (its text goes to `sink` as it
    /// arrives), save the answer, consolidate in the background.
    ///
    /// The turn holds the session's turn lock from loading it to the saved answer, so turns
    /// of one session never interleave, across processes too; past
    /// `storage.turn_wait_secs` it fails with "session busy" and writes nothing. A failure
    /// says what was saved ([`AppError::Turn`]).
    pub async fn turn(
        &self,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, AppError> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "turn",
            session = %key.log_id(),
            prompt_tokens = tracing::field::Empty,
            consolidated_before = tracing::field::Empty,
        );
        tracing::debug!(parent: &span, key = %key, "turn started");
        let started = std::time::Instant::now();
        let result = self
            .turn_traced(key, text, sink)
            .instrument(span.clone())
            .await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(report) => {
                span.record("prompt_tokens", report.prompt_tokens);
                span.record("consolidated_before", report.consolidated_before);
                tracing::info!(parent: &span, elapsed_ms, "turn finished");
            }
            Err(e) => tracing::info!(parent: &span, elapsed_ms, error = %e, "turn failed"),
        }
        result
    }

    async fn turn_traced(
        &self,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, AppError> {
        let _busy = self.autocompact.as_ref().map(|a| a.turn_started(key));
        let _turn = self
            .sessions
            .lock_turn(key, Duration::from_secs(self.config.turn_wait_secs))
            .await
            .map_err(|e| AppError::turn(key, Saved::Nothing, e))?;
        let mut saved = Saved::Nothing;
        let result = self.turn_locked(key, text, sink, &mut saved).await;
        result.map_err(|e| AppError::turn(key, saved, e))
    }

    async fn turn_locked(
        &self,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
        saved: &mut Saved,
    ) -> Result<TurnReport, AppError> {
        let handle = self.sessions.get_or_create(key).await?;
        // The archive requests made before the turn share this turn's inputs.
        let inputs = self.prompt_inputs().await?;
        self.prompt.remember(key, inputs.clone());
        let mut consolidated_before = 0;
        if self.consolidator.needs_consolidation(&handle, None) {
            let report = self.consolidator.maybe_consolidate(key, None).await?;
            record_raw_archives(&self.sessions, self.clock.as_ref(), key, &report.archives).await;
            consolidated_before = report.archives.len();
        }
        let built = self.build_prompt_from(key, text, inputs).await?;
        let mut user = StoredMessage::user(text);
        if let Some(marker) = &built.runtime_context {
            user = user.with("_runtime_context", marker.to_json());
        }
        handle.add_message(user);
        self.sessions.save(&handle).await?;
        *saved = Saved::UserMessage;

        let input_budget = GovernorConfig::input_budget_for(
            self.config.context_window,
            Some(self.config.max_output_tokens),
            None,
        );
        let initial = built.messages.len();
        let governed = govern(
            &built.messages,
            initial,
            &[],
            &GovernorConfig::new(input_budget),
            &mut GovernorState::default(),
            self.builder.as_ref(),
        );
        let mut request = LlmRequest::new(self.config.model.clone(), governed.messages)
            .with_max_tokens(saturating_u32(self.config.max_output_tokens))
            .with_cache_breakpoint(built.report.stable_prefix_bytes);
        if let Some(temperature) = self.config.temperature {
            request = request.with_temperature(temperature);
        }
        let response = self.llm.complete_streaming(&request, sink).await?;
        let answer = llm_port::text::strip_think(&response.message.text_content());
        handle.add_message(StoredMessage::assistant(answer.clone()));
        self.sessions.save(&handle).await?;
        *saved = Saved::Answer;
        self.sessions.end_turn(&handle).await?;

        let reported = response.usage.as_ref().map(|u| u.prompt_tokens as usize);
        let task = self
            .consolidator
            .consolidate_in_background(key.clone(), reported);
        let (sessions, clock, key_owned) = (self.sessions.clone(), self.clock.clone(), key.clone());
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tokio::spawn(async move {
                let failure = match task.await {
                    Ok(Ok(report)) => {
                        record_raw_archives(
                            &sessions,
                            clock.as_ref(),
                            &key_owned,
                            &report.archives,
                        )
                        .await;
                        None
                    }
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(e) => Some(format!("the task ended abnormally: {e}")),
                };
                if let Some(error) = failure {
                    record_background_failure(
                        &sessions,
                        clock.as_ref(),
                        &key_owned,
                        "consolidation",
                        &error,
                    )
                    .await;
                }
            }));
        if let Some(autocompact) = &self.autocompact {
            autocompact.touch(key);
        }
        Ok(TurnReport {
            answer,
            prompt_tokens: built.report.total_tokens,
            usage: response.usage,
            consolidated_before,
        })
    }

    /// Waits for background consolidations and saves every session (before exiting).
    pub async fn finish(&self) -> Result<(), AppError> {
        let tasks: Vec<_> = self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        let (_, error) = self.sessions.flush_all().await;
        match error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// `/new`: the live part is archived into the journal, then the session starts over.
    pub async fn new_session(&self, key: &SessionKey) -> Result<String, AppError> {
        let handle = self.sessions.get_or_create(key).await?;
        let snapshot = handle.snapshot();
        let record = self.consolidator.archive_snapshot(&snapshot).await?;
        self.sessions.clear(&handle).await?;
        if let Some(autocompact) = &self.autocompact {
            autocompact.forget(key);
        }
        Ok(match record.end - record.start {
            0 => "New session started.".to_owned(),
            n => format!("New session started; the {n} earlier messages were archived to memory."),
        })
    }
}

/// The session metadata field that holds the last failure of background work on the
/// session (`{"at", "what", "error"}`), so `/status` and `nanobot sessions show` can report
/// it from any process. nanobot-ai keeps unknown metadata as it is.
pub const BACKGROUND_FAILURE_KEY: &str = "_nanobot_rs_background_failure";

/// Logs a failure of background work (`what`: consolidation, idle compaction) on `key` and
/// records it in the session's metadata. A failure to record it is logged too; neither
/// can fail the caller.
pub async fn record_background_failure(
    sessions: &SessionManager,
    clock: &dyn Clock,
    key: &SessionKey,
    what: &str,
    error: &str,
) {
    tracing::warn!(session = %key.log_id(), what, error, "background work failed");
    let at = clock.now().format("%Y-%m-%d %H:%M:%S UTC").to_string();
    record_note(
        sessions,
        key,
        BACKGROUND_FAILURE_KEY,
        serde_json::json!({"at": at, "what": what, "error": error}),
    )
    .await;
}

/// Stores `value` under `field` of the session's metadata and saves it; a failure is
/// logged, never returned (these notes must not fail the work they describe).
async fn record_note(
    sessions: &SessionManager,
    key: &SessionKey,
    field: &str,
    value: serde_json::Value,
) {
    let Ok(handle) = sessions.get_or_create(key).await else {
        return;
    };
    handle.update(|s| {
        s.metadata_mut().insert(field.into(), value);
    });
    if let Err(e) = sessions.end_turn(&handle).await {
        tracing::warn!(session = %key.log_id(), field, error = %e, "the note could not be recorded");
    }
}

/// The session metadata field that holds the last archive of the session that fell back
/// to the raw messages (`{"at", "messages", "reason"}`): why no summary was made is shown by
/// `/status` and `nanobot sessions show`, not only in the log.
pub const RAW_ARCHIVE_KEY: &str = "_nanobot_rs_last_raw_archive";

/// Records the last raw archive among `archives` (if any) in the session's metadata and
/// logs it; a failure to record is logged and never fails the caller.
pub async fn record_raw_archives(
    sessions: &SessionManager,
    clock: &dyn Clock,
    key: &SessionKey,
    archives: &[memory_core::ArchiveRecord],
) {
    let Some((record, reason)) = archives.iter().rev().find_map(|r| match &r.outcome {
        memory_core::Archived::Raw { reason, .. } => Some((r, reason)),
        _ => None,
    }) else {
        return;
    };
    let at = clock.now().format("%Y-%m-%d %H:%M:%S UTC").to_string();
    record_note(
        sessions,
        key,
        RAW_ARCHIVE_KEY,
        serde_json::json!({
            "at": at,
            "messages": format!("{}-{}", record.start, record.end),
            "reason": reason.to_string(),
        }),
    )
    .await;
}

/// The last raw archive of a session, as one line: when, which messages, and why.
pub fn last_raw_archive(session: &Session) -> Option<String> {
    let raw = session.meta().metadata.get(RAW_ARCHIVE_KEY)?;
    Some(format!(
        "{} messages {}: {}",
        raw.get("at")?.as_str()?,
        raw.get("messages")?.as_str()?,
        raw.get("reason")?.as_str()?
    ))
}

/// The last recorded background failure of a session, as one line.
pub fn background_failure(session: &Session) -> Option<String> {
    let failure = session.meta().metadata.get(BACKGROUND_FAILURE_KEY)?;
    Some(format!(
        "{} {}: {}",
        failure.get("at")?.as_str()?,
        failure.get("what")?.as_str()?,
        failure.get("error")?.as_str()?
    ))
}

/// Dream's steps: on a terminal one line rewritten in place, otherwise plain lines (on
/// stderr, so scripted output stays clean).
fn progress_printer() -> dream::Progress {
    use std::io::{IsTerminal, Write};
    let terminal = std::io::stderr().is_terminal();
    Arc::new(move |line: &str| {
        let mut err = std::io::stderr();
        if terminal {
            let _ = write!(err, "\r\x1b[2K[dream] {line}");
        } else {
            let _ = writeln!(err, "[dream] {line}");
        }
        let _ = err.flush();
    })
}

/// The session's archived-context summary, as the context builder takes it.
fn summary_of(session: &Session) -> Option<Summary> {
    SessionSummary::of(session).map(|s| Summary {
        text: s.text,
        last_active: s.last_active,
    })
}

/// Clears the progress line on a terminal once the work is done.
pub fn clear_progress() {
    use std::io::{IsTerminal, Write};
    if std::io::stderr().is_terminal() {
        let mut err = std::io::stderr();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// How many of the newest unprocessed journal entries a prompt is offered (the builder
/// keeps the newest that fit its Recent History cap).
const RECENT_HISTORY_ENTRIES: usize = 200;

/// How many sessions' prompt inputs the archive-request builder keeps.
const PROMPT_INPUTS_KEPT: usize = 256;

/// The workspace snapshot and journal entries a prompt was built from.
type PromptInputs = (WorkspaceSnapshot, Vec<JournalEntry>);

/// A `u32` setting from a `usize` one, saturating instead of wrapping.
fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The Consolidator's archive requests through the context builder, so they share the
/// conversation's prompt prefix (and its provider cache). The inputs are kept per session:
/// an archive request of one session never sees what another session's prompt was built
/// from. A session with none recorded (an idle compaction after a restart) gets the
/// workspace as it is now and no journal entries.
struct ContextPrompt {
    builder: Arc<ContextBuilder>,
    loader: Arc<WorkspaceLoader>,
    inputs: Mutex<HashMap<SessionKey, PromptInputs>>,
}

impl ContextPrompt {
    fn remember(&self, key: &SessionKey, inputs: PromptInputs) {
        let mut kept = self.inputs.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= PROMPT_INPUTS_KEPT && !kept.contains_key(key) {
            kept.clear();
        }
        kept.insert(key.clone(), inputs);
    }

    fn inputs_for(&self, key: &SessionKey) -> PromptInputs {
        let kept = self
            .inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned();
        kept.unwrap_or_else(|| (self.loader.load().unwrap_or_default(), Vec::new()))
    }
}

impl PromptBuilder for ContextPrompt {
    fn build(&self, session: &Session, history: &[Replayed], current: &str) -> Vec<Message> {
        let key = session.key();
        let (snapshot, entries) = self.inputs_for(key);
        let summary = summary_of(session);
        let history = replayed_messages(history);
        match self.builder.build(
            &snapshot,
            &Turn {
                channel: Some(key.channel()),
                session_key: Some(key.as_str()),
                summary: summary.as_ref(),
                history: &history,
                journal: &entries,
                current: Some(CurrentMessage::user(current)),
                ..Turn::default()
            },
        ) {
            Ok(built) => built.messages,
            Err(_) => {
                let mut messages = vec![Message::system(String::new())];
                messages.extend(history);
                memory_core::append_user_text(&mut messages, current);
                messages
            }
        }
    }
}

use chrono::Offset;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn snapshot(user: &str) -> WorkspaceSnapshot {
        WorkspaceSnapshot {
            user_md: Some(format!("# User\n\n{user}\n")),
            ..WorkspaceSnapshot::default()
        }
    }

    /// Issue 12.6: an archive request of one session is built from the inputs recorded
    /// for that session, never from another session's.
    #[test]
    fn archive_prompts_use_their_own_sessions_inputs() {
        let dir = std::env::temp_dir().join(format!("nanobot-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let counter: Arc<dyn TokenCounter> = Arc::new(Cl100kBase);
        let mut config = BuilderConfig::new(Host::this_build());
        config.tool_contract = false;
        let prompt = ContextPrompt {
            builder: Arc::new(ContextBuilder::new(config, counter)),
            loader: Arc::new(WorkspaceLoader::new(&dir).unwrap()),
            inputs: Mutex::new(HashMap::new()),
        };
        let (a, b) = (
            SessionKey::new("telegram:a").unwrap(),
            SessionKey::new("telegram:b").unwrap(),
        );
        prompt.remember(&a, (snapshot("canary-of-a"), Vec::new()));
        prompt.remember(&b, (snapshot("canary-of-b"), Vec::new()));
        let session_a = Session::new(a.clone(), chrono::NaiveDateTime::default());
        let built = prompt.build(&session_a, &[], "summarise");
        let system = built[0]
            .content()
            .map(llm_port::Content::joined_text)
            .unwrap_or_default();
        assert!(system.contains("canary-of-a"), "{system}");
        assert!(!system.contains("canary-of-b"), "{system}");
        // A session with nothing recorded reads the workspace, not the last session's.
        let c = Session::new(
            SessionKey::new("telegram:c").unwrap(),
            chrono::NaiveDateTime::default(),
        );
        let system = prompt.build(&c, &[], "summarise")[0]
            .content()
            .map(llm_port::Content::joined_text)
            .unwrap_or_default();
        assert!(!system.contains("canary-of"), "{system}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

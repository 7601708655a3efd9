//! The agent: the model, the prompt builder and a memory backend, and the turn over one
//! scope's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nanobot_context_builder::govern::{GovernorConfig, GovernorState, govern};
use nanobot_context_builder::{
    BuiltPrompt, ContextBuilder, CurrentMessage, Turn, WorkspaceSnapshot,
};
use nanobot_dream::{Dream, DreamConfig, RunReport, Trigger};
use nanobot_llm_port::text::CallPlacement;
use nanobot_llm_port::{
    Clock, LlmClient, LlmRequest, Message, Metered, RepetitionControls, TextSink, TokenCounter,
    ToolCall, ToolChoice, ToolDefinition, Usage,
};
use nanobot_memory_core::{AutoCompact, ConsolidationConfig, Consolidator, replayed_messages};
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_store::HistoryJournalExt;
use nanobot_session_store::{
    HistoryOptions, RECALLED_FIELD, SessionHandle, SessionKey, StoredMessage, get_history_counted,
};

mod answer;
mod open_scopes;
mod scopes;
mod settings;

use answer::ToolRound;
use open_scopes::OpenScopes;
pub use settings::{AgentSettings, TurnReport};

use crate::counts::count_turn;
use crate::error::{Saved, TurnError};
use crate::memory::{ContextPrompt, MemoryBackend, PromptInputs, ScopeMemory, summary_of};
use crate::notes::{record_background_failure, record_compaction, record_raw_archives};
use crate::options::{self, Earlier, TurnOptions};
use crate::tools::{ToolContext, ToolOutput, TurnTool};

/// How many of the newest unprocessed journal entries a prompt is offered (the builder
/// keeps the newest that fit its Recent History cap).
const RECENT_HISTORY_ENTRIES: usize = 200;

/// Scopes kept open by default ([`AgentSettings::max_open_scopes`]).
pub const DEFAULT_MAX_OPEN_SCOPES: usize = 1_024;

/// Rounds of tool calls per turn by default: a search, a narrower search, and room for a
/// bot's own tool.
pub const DEFAULT_MAX_TOOL_STEPS: usize = 4;

/// An agent: a model, a prompt builder and the memory of its scopes, opened through a
/// [`MemoryBackend`] on first use and kept apart (no cache, lock or lease is shared
/// between two scopes' memories).
pub struct Agent {
    settings: AgentSettings,
    /// The model as turns call it (each call counted as a `turn` call).
    llm: Arc<dyn LlmClient>,
    /// The same model as archives and Dream call it (counted under their own purpose).
    archive_llm: Arc<dyn LlmClient>,
    dream_llm: Arc<dyn LlmClient>,
    clock: Arc<dyn Clock>,
    counter: Arc<dyn TokenCounter>,
    builder: Arc<ContextBuilder>,
    backend: Arc<dyn MemoryBackend>,
    progress: Option<nanobot_dream::Progress>,
    memories: tokio::sync::Mutex<OpenScopes>,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    tools: Vec<Arc<dyn TurnTool>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent over `backend`, answering with `llm`.
    pub fn new(
        settings: AgentSettings,
        llm: Arc<dyn LlmClient>,
        builder: Arc<ContextBuilder>,
        backend: Arc<dyn MemoryBackend>,
        clock: Arc<dyn Clock>,
        counter: Arc<dyn TokenCounter>,
    ) -> Self {
        Agent {
            settings,
            archive_llm: Arc::new(Metered::new(llm.clone(), "archive")),
            dream_llm: Arc::new(Metered::new(llm.clone(), "dream")),
            llm: Arc::new(Metered::new(llm, "turn")),
            clock,
            counter,
            builder,
            backend,
            progress: None,
            memories: tokio::sync::Mutex::new(OpenScopes::default()),
            background: Mutex::new(Vec::new()),
            tools: Vec::new(),
        }
    }

    /// Offers `tool` to the model in every turn with memory (after the tools added before
    /// it). A model without native tool calls is offered none ([`Agent::tool_status`]).
    pub fn with_tool(mut self, tool: Arc<dyn TurnTool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Which tools turns of `memory` offer, or why none, as a line for `/status`.
    pub fn tool_status(&self, memory: &ScopeMemory) -> String {
        if self.tools.is_empty() {
            return "Tools: none".to_owned();
        }
        if !self.llm.capabilities().supports_tools {
            return "Tools: none offered (the model has no native tool calls; \
                    set llm.native_tools = true if it has)"
                .to_owned();
        }
        let (offered, left_out): (Vec<_>, Vec<_>) =
            self.tools.iter().partition(|t| t.offered_in(memory));
        let name_of = |t: &&Arc<dyn TurnTool>| t.definition().function.name;
        let names: Vec<String> = offered.iter().map(name_of).collect();
        let left_out: Vec<String> = left_out.iter().map(name_of).collect();
        let mut line = if names.is_empty() {
            "Tools: none offered".to_owned()
        } else {
            format!("Tools: {}", names.join(", "))
        };
        if !left_out.is_empty() {
            line.push_str(&format!(
                " ({} not offered: this storage keeps no search index)",
                left_out.join(", ")
            ));
        }
        line
    }

    /// Dream's steps go to `progress`.
    pub fn with_progress(mut self, progress: nanobot_dream::Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The settings.
    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// The model.
    pub fn llm(&self) -> &Arc<dyn LlmClient> {
        &self.llm
    }

    /// The token counter.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The prompt builder.
    pub fn builder(&self) -> &Arc<ContextBuilder> {
        &self.builder
    }

    /// What a prompt of `memory` reads besides the session: its files and the newest
    /// journal entries Dream has not processed yet.
    async fn prompt_inputs(&self, memory: &ScopeMemory) -> Result<PromptInputs, TurnError> {
        let snapshot = memory.prompt_files.load().await?;
        let entries = memory
            .journal
            .unprocessed_newest(RECENT_HISTORY_ENTRIES)
            .await?;
        Ok((snapshot, entries))
    }

    /// The prompt for `text` in session `key` of `memory`, as the next turn would send it.
    pub async fn build_prompt(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
    ) -> Result<BuiltPrompt, TurnError> {
        let inputs = self.prompt_inputs(memory).await?;
        memory.prompt.remember(key, inputs.clone());
        self.build_prompt_from(memory, key, text, None, inputs)
            .await
    }

    async fn build_prompt_from(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
        instructions: Option<&str>,
        (snapshot, entries): PromptInputs,
    ) -> Result<BuiltPrompt, TurnError> {
        let handle = memory.sessions.get_or_create(key).await?;
        let summary = handle.read(summary_of);
        let mut options = HistoryOptions::default();
        options.max_tokens = self.settings.replay_budget();
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
                instructions,
                ..Turn::default()
            },
        )?)
    }

    /// One turn in `memory`, in nanobot's order: consolidate first if the request would not
    /// fit, build the context, save the user's message, call the model (its text goes to
    /// `sink` as it arrives), save the answer, consolidate in the background.
    ///
    /// The turn holds the session's turn lock from loading it to the saved answer, so turns
    /// of one session never interleave, across processes too; past
    /// [`AgentSettings::turn_wait`] it fails with "session busy" and writes nothing. A
    /// failure says what was saved ([`TurnError::Turn`]).
    pub async fn turn(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, TurnError> {
        self.turn_with(memory, key, text, &TurnOptions::default(), sink)
            .await
    }

    /// [`Agent::turn`] with `options`: a client's instructions for this turn, and an
    /// idempotency key (checked under the turn lock; an answered key returns its answer,
    /// whole, to `sink` and in the report, without calling the model).
    pub async fn turn_with(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
        options: &TurnOptions,
        sink: &TextSink,
    ) -> Result<TurnReport, TurnError> {
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
            .turn_traced(memory, key, text, options, sink)
            .instrument(span.clone())
            .await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        count_turn(started.elapsed(), &result);
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
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
        options: &TurnOptions,
        sink: &TextSink,
    ) -> Result<TurnReport, TurnError> {
        let _busy = memory.autocompact.as_ref().map(|a| a.turn_started(key));
        let turn = memory
            .sessions
            .lock_turn(key, self.settings.turn_wait)
            .await
            .map_err(|e| TurnError::turn(key, Saved::Nothing, e))?;
        let mut saved = Saved::Nothing;
        let result = self
            .turn_locked(memory, key, text, options, sink, &mut saved)
            .await;
        // Given back before the turn returns, so the next turn (another process's too)
        // finds the session free at once.
        turn.release().await;
        result.map_err(|e| TurnError::turn(key, saved, e))
    }

    async fn turn_locked(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        text: &str,
        options: &TurnOptions,
        sink: &TextSink,
        saved: &mut Saved,
    ) -> Result<TurnReport, TurnError> {
        let handle = memory.sessions.get_or_create(key).await?;
        if let Some(report) = replayed(&handle, options, sink)? {
            return Ok(report);
        }
        // The archive requests made before the turn share this turn's inputs.
        let inputs = self.prompt_inputs(memory).await?;
        memory.prompt.remember(key, inputs.clone());
        let consolidated_before = self.consolidate_before(memory, key, &handle).await?;
        let built = self
            .build_prompt_from(memory, key, text, options.instructions.as_deref(), inputs)
            .await?;
        let mut user = StoredMessage::user(text);
        if let Some(marker) = &built.runtime_context {
            user = user.with("_runtime_context", marker.to_json());
        }
        handle.add_message(user);
        memory.sessions.save(&handle).await?;
        *saved = Saved::UserMessage;

        let tools = ToolRound {
            memory,
            key,
            handle: &handle,
        };
        let answered = self.answer(&built, Some(tools), sink).await?;
        handle.add_message(StoredMessage::assistant(answered.text.clone()));
        if let Some(idempotency) = &options.idempotency {
            // In the same write as the answer: a retry finds both or neither.
            handle.update(|s| {
                options::record(
                    s,
                    idempotency,
                    built.report.total_tokens,
                    answered.usage.as_ref(),
                );
            });
        }
        memory.sessions.save(&handle).await?;
        *saved = Saved::Answer;
        memory.sessions.end_turn(&handle).await?;

        let reported = answered.usage.as_ref().map(|u| u.prompt_tokens as usize);
        self.consolidate_in_background(memory, key, reported);
        if let Some(autocompact) = &memory.autocompact {
            autocompact.touch(key);
        }
        Ok(TurnReport {
            answer: answered.text,
            prompt_tokens: built.report.total_tokens,
            usage: answered.usage,
            consolidated_before,
            tool_calls: answered.tool_calls,
            replayed: false,
        })
    }

    /// Archives what the session's new turn would not fit beside (before the prompt is
    /// built); how many archives were made.
    async fn consolidate_before(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        handle: &SessionHandle,
    ) -> Result<usize, TurnError> {
        if !memory.consolidator.needs_consolidation(handle, None) {
            return Ok(0);
        }
        let report = memory.consolidator.maybe_consolidate(key, None).await?;
        record_raw_archives(&memory.sessions, self.clock.as_ref(), key, &report.archives).await;
        Ok(report.archives.len())
    }

    fn consolidate_in_background(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
        reported: Option<usize>,
    ) {
        let task = memory
            .consolidator
            .consolidate_in_background(key.clone(), reported);
        let (sessions, clock, key) = (memory.sessions.clone(), self.clock.clone(), key.clone());
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tokio::spawn(async move {
                let failure = match task.await {
                    Ok(Ok(report)) => {
                        record_raw_archives(&sessions, clock.as_ref(), &key, &report.archives)
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
                        &key,
                        "consolidation",
                        &error,
                    )
                    .await;
                }
            }));
    }

    /// A turn that reads and writes no memory (the sender could not be identified, or is
    /// the bot itself): the prompt holds the agent's shared files (`SOUL.md`, `AGENTS.md`,
    /// skills) and this message only; nothing is saved or archived.
    pub async fn turn_without_memory(
        &self,
        key: &SessionKey,
        text: &str,
        sink: &TextSink,
    ) -> Result<TurnReport, TurnError> {
        self.turn_without_memory_with(key, &[], text, &TurnOptions::default(), sink)
            .await
    }

    /// [`Agent::turn_without_memory`] with the conversation so far as the caller holds it
    /// (`history`: an API client that keeps its own history sends it with every request)
    /// and a client's instructions; the history is governed to the window like a
    /// session's. An idempotency key has nothing to be checked against and is ignored:
    /// nothing is stored.
    pub async fn turn_without_memory_with(
        &self,
        key: &SessionKey,
        history: &[Message],
        text: &str,
        options: &TurnOptions,
        sink: &TextSink,
    ) -> Result<TurnReport, TurnError> {
        let shared = self.backend.shared_prompt_files().load().await?;
        let snapshot = WorkspaceSnapshot {
            user_md: None,
            memory_md: None,
            ..shared
        };
        let built = self.builder.build(
            &snapshot,
            &Turn {
                channel: Some(key.channel()),
                session_key: Some(key.as_str()),
                history,
                current: Some(CurrentMessage::user(text)),
                instructions: options.instructions.as_deref(),
                ..Turn::default()
            },
        )?;
        let answered = self
            .answer(&built, None, sink)
            .await
            .map_err(|e| TurnError::turn(key, Saved::Nothing, e))?;
        Ok(TurnReport {
            answer: answered.text,
            prompt_tokens: built.report.total_tokens,
            usage: answered.usage,
            consolidated_before: 0,
            tool_calls: answered.tool_calls,
            replayed: false,
        })
    }

    /// `/new`: the live part of `key` is archived into the journal, then the session
    /// starts over.
    pub async fn new_session(
        &self,
        memory: &ScopeMemory,
        key: &SessionKey,
    ) -> Result<String, TurnError> {
        let handle = memory.sessions.get_or_create(key).await?;
        let snapshot = handle.snapshot();
        let record = memory.consolidator.archive_snapshot(&snapshot).await?;
        memory.sessions.clear(&handle).await?;
        if let Some(autocompact) = &memory.autocompact {
            autocompact.forget(key);
        }
        Ok(match record.end - record.start {
            0 => "New session started.".to_owned(),
            n => format!("New session started; the {n} earlier messages were archived to memory."),
        })
    }

    /// Waits for background consolidations and saves every session of every open scope
    /// (before exiting).
    pub async fn finish(&self) -> Result<(), TurnError> {
        let tasks: Vec<_> = self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        let memories: Vec<Arc<ScopeMemory>> = self.memories.lock().await.all();
        let mut first_error = None;
        for memory in memories {
            let (_, error) = memory.sessions.flush_all().await;
            if first_error.is_none() {
                first_error = error;
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// A `u32` setting from a `usize` one, saturating instead of wrapping.
pub(crate) fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The earlier answer to a retried request (its idempotency key already answered), sent to
/// `sink` again; an error when the key was used for another request.
fn replayed(
    handle: &SessionHandle,
    options: &TurnOptions,
    sink: &TextSink,
) -> Result<Option<TurnReport>, TurnError> {
    let Some(idempotency) = &options.idempotency else {
        return Ok(None);
    };
    match handle.read(|s| options::earlier(s, idempotency)) {
        Some(Earlier::Answered {
            answer,
            prompt_tokens,
            usage,
        }) => {
            sink(&answer);
            Ok(Some(TurnReport {
                answer,
                prompt_tokens,
                usage,
                consolidated_before: 0,
                tool_calls: Vec::new(),
                replayed: true,
            }))
        }
        Some(Earlier::OtherRequest) => Err(TurnError::IdempotencyKeyReused {
            key: idempotency.key.clone(),
        }),
        Some(Earlier::Gone) | None => Ok(None),
    }
}

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
    Clock, LlmClient, LlmRequest, Message, TextSink, TokenCounter, ToolCall, ToolChoice,
    ToolDefinition, Usage,
};
use nanobot_memory_core::{AutoCompact, ConsolidationConfig, Consolidator, replayed_messages};
use nanobot_memory_scope::ScopeKey;
use nanobot_memory_store::HistoryJournalExt;
use nanobot_session_store::{
    HistoryOptions, RECALLED_FIELD, SessionHandle, SessionKey, StoredMessage, get_history_counted,
};

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

/// How an agent's turns and memory policies are set.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The model to ask.
    pub model: String,
    /// Its context window, in tokens.
    pub context_window: usize,
    /// Output tokens asked for per answer.
    pub max_output_tokens: usize,
    /// Sampling temperature (`None`: the provider's default).
    pub temperature: Option<f32>,
    /// How long a turn waits for another turn of the same session.
    pub turn_wait: Duration,
    /// The Consolidator of every scope.
    pub consolidation: ConsolidationConfig,
    /// Dream of every scope (`propose_shared` is set for scopes other than the agent's).
    pub dream: DreamConfig,
    /// Whether Dream runs at all; when it does not, its cursor follows the journal so
    /// Recent History cannot grow without bound.
    pub dream_enabled: bool,
    /// Idle compaction after this long (`None`: never).
    pub idle_ttl: Option<Duration>,
    /// How many rounds of tool calls one turn may make; the request after the last round
    /// offers no tools, so the model answers.
    pub max_tool_steps: usize,
    /// How many scopes' memories stay open in this process (a server meets many users).
    /// Past it, the least recently used scope that nothing holds and that has no session
    /// waiting for idle compaction is closed (it opens again from storage when used); a
    /// scope still in use or waiting is never closed, so the bound can be passed while
    /// that many are busy.
    pub max_open_scopes: usize,
}

impl AgentSettings {
    /// Settings for `model` with a `context_window`-token window and answers of up to
    /// `max_output_tokens`, every policy at its default.
    pub fn new(model: impl Into<String>, context_window: usize, max_output_tokens: usize) -> Self {
        let model = model.into();
        AgentSettings {
            consolidation: ConsolidationConfig::new(
                model.clone(),
                context_window,
                max_output_tokens,
            ),
            dream: DreamConfig::new(model.clone()),
            model,
            context_window,
            max_output_tokens,
            temperature: None,
            turn_wait: Duration::from_secs(30),
            dream_enabled: true,
            idle_ttl: None,
            max_tool_steps: DEFAULT_MAX_TOOL_STEPS,
            max_open_scopes: DEFAULT_MAX_OPEN_SCOPES,
        }
    }

    fn replay_budget(&self) -> usize {
        self.context_window
            .saturating_sub(self.max_output_tokens + 1_024)
            .max(128)
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
    /// Tool calls the model made in this turn, in order (their names).
    pub tool_calls: Vec<String>,
    /// The answer is an earlier turn's, returned again for the same idempotency key: the
    /// model was not called and nothing was saved.
    pub replayed: bool,
}

/// An agent: a model, a prompt builder and the memory of its scopes, opened through a
/// [`MemoryBackend`] on first use and kept apart (no cache, lock or lease is shared
/// between two scopes' memories).
pub struct Agent {
    settings: AgentSettings,
    llm: Arc<dyn LlmClient>,
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
            llm,
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

    /// The memory of `scope`, opened on first use.
    pub async fn memory(&self, scope: &ScopeKey) -> Result<Arc<ScopeMemory>, TurnError> {
        let mut memories = self.memories.lock().await;
        if let Some(memory) = memories.get(scope) {
            return Ok(memory);
        }
        let memory = Arc::new(self.open(scope).await?);
        memories.insert(scope.clone(), memory.clone());
        let closed = memories.close_past(self.settings.max_open_scopes);
        // Flushed without the map: other scopes' requests do not wait for these writes.
        drop(memories);
        for closed in closed {
            // Nothing holds it and no session waits: only unflushed tidying can be left.
            let (_, error) = closed.sessions.flush_all().await;
            if let Some(error) = error {
                tracing::warn!(%error, "a closed scope's sessions could not be flushed");
            }
        }
        Ok(memory)
    }

    /// How many scopes' memories are open in this process.
    pub async fn open_scopes(&self) -> usize {
        self.memories.lock().await.entries.len()
    }

    /// Idle compaction in every open scope: each session idle for
    /// [`AgentSettings::idle_ttl`] is archived (its recent tail kept live), as the CLI bot's
    /// background task does for its one scope. A server calls it from one sweeper task.
    /// Raw archives and failures are recorded in the session, as for the CLI bot.
    pub async fn compact_idle(&self) -> Vec<(ScopeKey, nanobot_memory_core::Compacted)> {
        let open: Vec<Arc<ScopeMemory>> = self.memories.lock().await.all();
        let mut done = Vec::new();
        for memory in open {
            let Some(autocompact) = &memory.autocompact else {
                continue;
            };
            for compacted in autocompact.compact_due().await {
                record_compaction(&memory.sessions, self.clock.as_ref(), &compacted).await;
                done.push((memory.scope.clone(), compacted));
            }
        }
        done
    }

    /// Closes the memory of `scope` in this process (before its storage is erased): the
    /// next use opens it again.
    pub async fn forget_memory(&self, scope: &ScopeKey) {
        self.memories.lock().await.entries.remove(scope);
    }

    async fn open(&self, scope: &ScopeKey) -> Result<ScopeMemory, TurnError> {
        let stores = self.backend.open(scope).await?;
        let prompt = Arc::new(ContextPrompt {
            builder: self.builder.clone(),
            inputs: Mutex::new(HashMap::new()),
            latest: Mutex::new(stores.prompt_files.load().await?),
        });
        let consolidator = Arc::new(Consolidator::new(
            self.settings.consolidation.clone(),
            self.llm.clone(),
            stores.journal.clone(),
            stores.archive.clone(),
            stores.sessions.clone(),
            prompt.clone(),
            self.counter.clone(),
        )?);
        let autocompact = self
            .settings
            .idle_ttl
            .map(|ttl| AutoCompact::new(consolidator.clone(), ttl));
        let mut dream_config = self.settings.dream.clone();
        dream_config.propose_shared = !scope.subject.is_agent();
        let mut dream = Dream::new(
            dream_config,
            self.llm.clone(),
            stores.dream_stores(),
            self.clock.clone(),
            self.counter.clone(),
        )?;
        if let Some(progress) = &self.progress {
            dream = dream.with_progress(progress.clone());
        }
        if !self.settings.dream_enabled {
            dream.fast_forward_cursor().await?;
        }
        Ok(ScopeMemory {
            scope: scope.clone(),
            sessions: stores.sessions,
            journal: stores.journal,
            documents: stores.documents,
            consolidator,
            autocompact,
            dream: Arc::new(dream),
            index: stores.index,
            vectors: stores.vectors,
            prompt_files: stores.prompt_files,
            prompt,
        })
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
        let options = HistoryOptions {
            max_tokens: self.settings.replay_budget(),
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
        if let Some(idempotency) = &options.idempotency {
            match handle.read(|s| options::earlier(s, idempotency)) {
                Some(Earlier::Answered {
                    answer,
                    prompt_tokens,
                    usage,
                }) => {
                    sink(&answer);
                    return Ok(TurnReport {
                        answer,
                        prompt_tokens,
                        usage,
                        consolidated_before: 0,
                        tool_calls: Vec::new(),
                        replayed: true,
                    });
                }
                Some(Earlier::OtherRequest) => {
                    return Err(TurnError::IdempotencyKeyReused {
                        key: idempotency.key.clone(),
                    });
                }
                Some(Earlier::Gone) | None => {}
            }
        }
        // The archive requests made before the turn share this turn's inputs.
        let inputs = self.prompt_inputs(memory).await?;
        memory.prompt.remember(key, inputs.clone());
        let mut consolidated_before = 0;
        if memory.consolidator.needs_consolidation(&handle, None) {
            let report = memory.consolidator.maybe_consolidate(key, None).await?;
            record_raw_archives(&memory.sessions, self.clock.as_ref(), key, &report.archives).await;
            consolidated_before = report.archives.len();
        }
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

    /// The model's answer to `built`, each request governed to the window; its text streams
    /// to `sink`. With `tools`, the tools offered in the scope are offered to the model: each
    /// round of calls is run, stored in the session with its results and saved, and the
    /// model asked again, for at most [`AgentSettings::max_tool_steps`] rounds; the request
    /// after the last round offers no tools, so the turn ends with an answer.
    async fn answer(
        &self,
        built: &BuiltPrompt,
        tools: Option<ToolRound<'_>>,
        sink: &TextSink,
    ) -> Result<Answered, TurnError> {
        let input_budget = GovernorConfig::input_budget_for(
            self.settings.context_window,
            Some(self.settings.max_output_tokens),
            None,
        );
        let governor = GovernorConfig::new(input_budget);
        let mut state = GovernorState::default();
        let offered: Vec<&Arc<dyn TurnTool>> = match &tools {
            Some(round) if self.llm.capabilities().supports_tools => self
                .tools
                .iter()
                .filter(|t| t.offered_in(round.memory))
                .collect(),
            _ => Vec::new(),
        };
        let definitions: Vec<ToolDefinition> = offered.iter().map(|t| t.definition()).collect();
        let initial = built.messages.len();
        let mut messages = built.messages.clone();
        let mut tool_calls = Vec::new();
        let mut step = 0;
        loop {
            let offer = !definitions.is_empty() && step < self.settings.max_tool_steps;
            let offered_now: &[ToolDefinition] = if offer { &definitions } else { &[] };
            let governed = govern(
                &messages,
                initial,
                offered_now,
                &governor,
                &mut state,
                self.builder.as_ref(),
            );
            let mut request = LlmRequest::new(self.settings.model.clone(), governed.messages)
                .with_max_tokens(saturating_u32(self.settings.max_output_tokens))
                .with_cache_breakpoint(built.report.stable_prefix_bytes);
            if offer {
                request = request.with_tools(definitions.clone());
            } else if !definitions.is_empty() {
                // Earlier rounds' calls are in the messages; the tools stay defined so the
                // request is valid, and the model is told to answer.
                request = request
                    .with_tools(definitions.clone())
                    .with_tool_choice(ToolChoice::None);
            }
            if let Some(temperature) = self.settings.temperature {
                request = request.with_temperature(temperature);
            }
            let mut response = self.llm.complete_streaming(&request, sink).await?;
            let mut calls = match &response.message.tool_calls {
                Some(calls) if offer => calls.clone(),
                _ => Vec::new(),
            };
            if offer && calls.is_empty() {
                let written = text_tool_calls(&response.message.text_content(), &definitions, step);
                if !written.is_empty() {
                    // A small model wrote its calls as text; they are run and stored as the
                    // calls they mean, so the conversation replays as native tool calls.
                    tracing::debug!(calls = written.len(), "tool calls written as text");
                    response.message.content = None;
                    response.message.tool_calls = Some(written.clone());
                    calls = written;
                }
            }
            let (Some(round), false) = (&tools, calls.is_empty()) else {
                return Ok(Answered {
                    text: nanobot_llm_port::text::strip_think(&response.message.text_content()),
                    usage: response.usage,
                    tool_calls,
                });
            };
            step += 1;
            let context = ToolContext {
                memory: round.memory,
                session: round.key,
            };
            // Ids a provider (or the text fallback) gives again, across turns too, would make
            // the governor drop the new results as answers to the old calls.
            let calls = unique_call_ids(calls, round.handle);
            response.message.tool_calls = Some(calls.clone());
            let call_message = Message::Assistant(response.message.clone());
            let mut stored = vec![StoredMessage::from_llm(&call_message)];
            messages.push(call_message);
            for call in calls {
                let name = call.function.name.clone();
                // `definitions` lists the offered tools in order: no definition is built
                // again per call.
                let output = match definitions
                    .iter()
                    .position(|d| d.function.name == name)
                    .map(|i| offered[i])
                {
                    Some(tool) => tool.call(context, &call.function.arguments).await,
                    None => ToolOutput::text(format!(
                        "there is no tool named {name:?}; the tools are: {}",
                        definitions
                            .iter()
                            .map(|d| d.function.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                };
                tracing::debug!(tool = %name, chars = output.content.len(), "tool call run");
                let mut result =
                    StoredMessage::tool_result(&call.id, &name, output.content.clone());
                if output.recalled {
                    result = result.with(RECALLED_FIELD, true);
                }
                stored.push(result);
                messages.push(Message::tool_result(
                    call.id.clone(),
                    name.clone(),
                    output.content,
                ));
                tool_calls.push(name);
            }
            // Saved round by round: a turn that fails later keeps the calls it made.
            for message in stored {
                round.handle.add_message(message);
            }
            round.memory.sessions.save(round.handle).await?;
        }
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

    /// One Dream tick: a run in every scope whose journal has entries Dream has not read,
    /// one scope after another; idle scopes cost no model call. Each scope's result is
    /// reported on its own, so one failing scope does not stop the others.
    pub async fn dream_tick(
        &self,
        trigger: Trigger,
    ) -> Result<Vec<(ScopeKey, Result<RunReport, TurnError>)>, TurnError> {
        let mut results = Vec::new();
        for scope in self.backend.scopes_with_dream_work().await? {
            let result = match self.memory(&scope).await {
                Ok(memory) => memory.dream.run(trigger).await.map_err(TurnError::from),
                Err(e) => Err(e),
            };
            results.push((scope, result));
        }
        Ok(results)
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

/// The scopes open in this process, each with when it was last used.
#[derive(Default)]
struct OpenScopes {
    entries: HashMap<ScopeKey, (Arc<ScopeMemory>, u64)>,
    uses: u64,
}

impl OpenScopes {
    fn get(&mut self, scope: &ScopeKey) -> Option<Arc<ScopeMemory>> {
        self.uses += 1;
        let (memory, used) = self.entries.get_mut(scope)?;
        *used = self.uses;
        Some(memory.clone())
    }

    fn insert(&mut self, scope: ScopeKey, memory: Arc<ScopeMemory>) {
        self.uses += 1;
        self.entries.insert(scope, (memory, self.uses));
    }

    fn all(&self) -> Vec<Arc<ScopeMemory>> {
        self.entries.values().map(|(m, _)| m.clone()).collect()
    }

    /// Closes least recently used scopes until at most `max` are open, skipping any that
    /// something holds (a turn, a request) or whose sessions wait for idle compaction.
    fn close_past(&mut self, max: usize) -> Vec<Arc<ScopeMemory>> {
        let mut closed = Vec::new();
        while self.entries.len() > max.max(1) {
            let Some(oldest) = self
                .entries
                .iter()
                .filter(|(_, (memory, _))| {
                    Arc::strong_count(memory) == 1
                        && memory.autocompact.as_ref().is_none_or(|a| a.tracked() == 0)
                })
                .min_by_key(|(_, (_, used))| *used)
                .map(|(scope, _)| scope.clone())
            else {
                break;
            };
            if let Some((memory, _)) = self.entries.remove(&oldest) {
                closed.push(memory);
            }
        }
        closed
    }
}

/// The tool calls a model wrote as its whole answer's text instead of as native calls
/// (small local models do: a fenced JSON block, or the `<tool_call>` tags of their template
/// that the server did not parse). A call quoted in prose, or a name not offered, is an
/// ordinary answer.
fn text_tool_calls(text: &str, offered: &[ToolDefinition], step: usize) -> Vec<ToolCall> {
    let names: Vec<&str> = offered.iter().map(|d| d.function.name.as_str()).collect();
    nanobot_llm_port::text::tool_calls_in_text(
        text,
        &names,
        CallPlacement::WholeAnswer,
        |n| match n {
            0 => format!("call_text_{step}"),
            n => format!("call_text_{step}_{n}"),
        },
    )
}

/// `calls` with every id that is empty, repeated among them, or already answered in the
/// session replaced by a new one (`call_<messages in the session>_<position>`), so each
/// result answers exactly one call.
fn unique_call_ids(mut calls: Vec<ToolCall>, handle: &SessionHandle) -> Vec<ToolCall> {
    let (mut taken, count) = handle.read(|session| {
        let taken: std::collections::HashSet<String> = session
            .messages()
            .iter()
            .filter_map(|m| m.get("tool_call_id").and_then(serde_json::Value::as_str))
            .map(str::to_owned)
            .collect();
        (taken, session.messages().len())
    });
    for (position, call) in calls.iter_mut().enumerate() {
        if call.id.is_empty() || !taken.insert(call.id.clone()) {
            call.id = format!("call_{count}_{position}");
            taken.insert(call.id.clone());
        }
    }
    calls
}

/// Where a turn's tool calls run and are stored.
struct ToolRound<'a> {
    memory: &'a ScopeMemory,
    key: &'a SessionKey,
    handle: &'a SessionHandle,
}

/// What the model finally answered.
struct Answered {
    text: String,
    usage: Option<Usage>,
    tool_calls: Vec<String>,
}

/// A `u32` setting from a `usize` one, saturating instead of wrapping.
pub(crate) fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

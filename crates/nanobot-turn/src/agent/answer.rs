//! The model's answer to a built prompt, with rounds of tool calls run and saved.

use super::*;

impl Agent {
    /// The request of one step: the governed messages, the output cap, the cache
    /// breakpoint and, while tools may still be called, the tools.
    fn request(
        &self,
        messages: Vec<Message>,
        built: &BuiltPrompt,
        definitions: &[ToolDefinition],
        offer: bool,
    ) -> LlmRequest {
        let mut request = LlmRequest::new(self.settings.model.clone(), messages)
            .with_max_tokens(saturating_u32(self.settings.max_output_tokens))
            .with_cache_breakpoint(built.report.stable_prefix_bytes);
        if offer {
            request = request.with_tools(definitions.to_vec());
        } else if !definitions.is_empty() {
            // Earlier rounds' calls are in the messages; the tools stay defined so the
            // request is valid, and the model is told to answer.
            request = request
                .with_tools(definitions.to_vec())
                .with_tool_choice(ToolChoice::None);
        }
        if let Some(temperature) = self.settings.temperature {
            request = request.with_temperature(temperature);
        }
        self.settings.repetition.apply(request)
    }

    /// Runs one round of calls and saves it in the session with its results (round by
    /// round: a turn that fails later keeps the calls it made); each tool's name and result
    /// message, for the next request.
    async fn run_round(
        &self,
        round: &ToolRound<'_>,
        offered: Offered<'_, '_>,
        calls: Vec<ToolCall>,
        call_message: &Message,
    ) -> Result<Vec<(String, Message)>, TurnError> {
        let context = ToolContext {
            memory: round.memory,
            session: round.key,
        };
        let mut stored = vec![StoredMessage::from_llm(call_message)];
        let mut results = Vec::new();
        for call in calls {
            let name = call.function.name.clone();
            let output = match offered.tool(&name) {
                Some(tool) => tool.call(context, &call.function.arguments).await,
                None => ToolOutput::text(format!(
                    "there is no tool named {name:?}; the tools are: {}",
                    offered.names()
                )),
            };
            tracing::debug!(tool = %name, chars = output.content.len(), "tool call run");
            let mut result = StoredMessage::tool_result(&call.id, &name, output.content.clone());
            if output.recalled {
                result = result.with(RECALLED_FIELD, true);
            }
            stored.push(result);
            let message = Message::tool_result(call.id.clone(), name.clone(), output.content);
            results.push((name, message));
        }
        for message in stored {
            round.handle.add_message(message);
        }
        round.memory.sessions.save(round.handle).await?;
        Ok(results)
    }

    /// The model's answer to `built`, each request governed to the window; its text streams
    /// to `sink`. With `tools`, the tools offered in the scope are offered to the model: each
    /// round of calls is run, stored in the session with its results and saved, and the
    /// model asked again, for at most [`AgentSettings::max_tool_steps`] rounds; the request
    /// after the last round offers no tools, so the turn ends with an answer.
    pub(super) async fn answer(
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
            let request = self.request(governed.messages, built, &definitions, offer);
            let mut response = self.llm.complete_streaming(&request, sink).await?;
            let calls = calls_in(&mut response.message, offer, &definitions, step);
            let (Some(round), false) = (&tools, calls.is_empty()) else {
                return Ok(Answered {
                    text: nanobot_llm_port::text::strip_think(&response.message.text_content()),
                    usage: response.usage,
                    tool_calls,
                });
            };
            step += 1;
            // Ids a provider (or the text fallback) gives again, across turns too, would make
            // the governor drop the new results as answers to the old calls.
            let calls = unique_call_ids(calls, round.handle);
            response.message.tool_calls = Some(calls.clone());
            let call_message = Message::Assistant(response.message.clone());
            messages.push(call_message.clone());
            let offered_tools = Offered {
                tools: &offered,
                definitions: &definitions,
            };
            let results = self
                .run_round(round, offered_tools, calls, &call_message)
                .await?;
            for (name, message) in results {
                messages.push(message);
                tool_calls.push(name);
            }
        }
    }
}

/// The tool calls a model wrote as its whole answer's text instead of as native calls
/// (small local models do: a fenced JSON block, or the `<tool_call>` tags of their template
/// that the server did not parse). A call quoted in prose, or a name not offered, is an
/// ordinary answer.
pub(super) fn text_tool_calls(
    text: &str,
    offered: &[ToolDefinition],
    step: usize,
) -> Vec<ToolCall> {
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
pub(super) fn unique_call_ids(mut calls: Vec<ToolCall>, handle: &SessionHandle) -> Vec<ToolCall> {
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
pub(super) struct ToolRound<'a> {
    pub(super) memory: &'a ScopeMemory,
    pub(super) key: &'a SessionKey,
    pub(super) handle: &'a SessionHandle,
}

/// What the model finally answered.
pub(super) struct Answered {
    pub(super) text: String,
    pub(super) usage: Option<Usage>,
    pub(super) tool_calls: Vec<String>,
}

/// The tools offered in a turn, with their definitions in the same order.
#[derive(Clone, Copy)]
struct Offered<'t, 'a> {
    tools: &'t [&'a Arc<dyn TurnTool>],
    definitions: &'t [ToolDefinition],
}

impl Offered<'_, '_> {
    /// The offered tool called `name` (`definitions` lists them in order: no definition is
    /// built again per call).
    fn tool(&self, name: &str) -> Option<&Arc<dyn TurnTool>> {
        self.definitions
            .iter()
            .position(|d| d.function.name == name)
            .map(|i| self.tools[i])
    }

    /// The offered tools' names, for a model that called another.
    fn names(&self) -> String {
        self.definitions
            .iter()
            .map(|d| d.function.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The calls of an answer: native calls while tools are offered, else calls a small model
/// wrote as its whole answer's text, which then become the message's native calls (so the
/// conversation replays as native tool calls).
fn calls_in(
    message: &mut nanobot_llm_port::AssistantMessage,
    offer: bool,
    definitions: &[ToolDefinition],
    step: usize,
) -> Vec<ToolCall> {
    if !offer {
        return Vec::new();
    }
    if let Some(calls) = &message.tool_calls
        && !calls.is_empty()
    {
        return calls.clone();
    }
    let written = text_tool_calls(&message.text_content(), definitions, step);
    if !written.is_empty() {
        tracing::debug!(calls = written.len(), "tool calls written as text");
        message.content = None;
        message.tool_calls = Some(written.clone());
    }
    written
}

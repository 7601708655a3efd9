//! Tools mode: the model edits the overlay through tool calls, step by step.

use super::*;

/// What stops a tool loop that goes round in circles.
#[derive(Default)]
pub(super) struct LoopGuard {
    /// How often each (tool, arguments) was called.
    repeated: HashMap<(String, String), usize>,
    /// Edits that changed nothing.
    no_ops: usize,
}

impl Dream {
    pub(super) async fn agent_loop(
        &self,
        overlay: &mut Overlay,
        user: String,
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> RunStatus {
        let tools = prompt::tools();
        let mut messages = vec![Message::system(prompt::SYSTEM), Message::user(user)];
        let mut guard = LoopGuard::default();
        let mut asked_again = 0;
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
                let changed = !overlay.changes().is_empty();
                let Some(reason) = declined(&response, &text, changed) else {
                    report.final_text = Some(text);
                    return RunStatus::Completed;
                };
                let again = AskAgain {
                    messages: &mut messages,
                    asked: &mut asked_again,
                    say: ASK_AGAIN_TOOLS,
                    keep: None,
                };
                if let Err(stop) = self.ask_again(again, &response, reason) {
                    return stop;
                }
                continue;
            }
            messages.push(Message::Assistant(assistant));
            for call in &calls {
                match self.run_call(overlay, call, report, &mut guard) {
                    Ok(result) => messages.push(result),
                    Err(stop) => return stop,
                }
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

    /// Runs one tool call on the overlay; its result message, or the stop it causes (the
    /// same call repeated too often, too many edits that change nothing).
    fn run_call(
        &self,
        overlay: &mut Overlay,
        call: &nanobot_llm_port::ToolCall,
        report: &mut RunReport,
        guard: &mut LoopGuard,
    ) -> Result<Message, RunStatus> {
        report.tool_calls += 1;
        let key = (call.function.name.clone(), call.function.arguments.clone());
        let seen = guard.repeated.entry(key).or_insert(0);
        *seen += 1;
        if *seen >= self.config.max_repeated_calls {
            return Err(RunStatus::Stopped(StopReason::RepeatedCall {
                tool: call.function.name.clone(),
            }));
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
            guard.no_ops += 1;
            if guard.no_ops >= self.config.max_no_op_edits {
                return Err(RunStatus::Stopped(StopReason::NoOpEdits));
            }
        }
        Ok(Message::tool_result(
            call.id.clone(),
            call.function.name.clone(),
            outcome.text,
        ))
    }

    /// One model call of a run, its tokens added to the report (as the provider reported
    /// them, else estimated from the request and the answer); a failed call is the run's
    /// stop.
    pub(super) async fn call_counted(
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

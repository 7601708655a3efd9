//! Plan mode: the model answers one edit plan per step, applied through the same checks.

use super::*;

impl Dream {
    /// Plan mode: each step asks for one edit plan and applies it to the overlay through the
    /// same checks as tool calls. A step that is not a usable plan, or whose every edit is
    /// refused, is answered with the reason and asked again, within the step and token
    /// budgets; the first plan that changes something, or an empty one, completes the run.
    pub(super) async fn plan_loop(
        &self,
        overlay: &mut Overlay,
        user: String,
        facts: &[String],
        report: &mut RunReport,
        lease: &mut Lease,
    ) -> RunStatus {
        let format = self
            .llm
            .capabilities()
            .supports_structured_output
            .then(|| crate::plan::format(overlay, facts));
        let mut messages = vec![Message::system(crate::plan::SYSTEM), Message::user(user)];
        let mut last_problem: Option<StopReason> = None;
        let mut asked_again = 0;
        while report.steps < self.config.max_steps {
            report.steps += 1;
            let request = match self.plan_request(report.steps, &messages, format.clone()) {
                Ok(request) => request,
                Err(stop) => return stop,
            };
            let response = match self.call_counted(&request, report, lease).await {
                Ok(response) => response,
                Err(stop) => return stop,
            };
            let text = response.message.text_content();
            tracing::debug!(step = report.steps, answer = %text, "edit plan answered");
            let parsed = crate::plan::parse(&text);
            if parsed.is_err()
                && !response.is_truncated()
                && let Some(reason) = declined(&response, &text, false)
            {
                let again = AskAgain {
                    messages: &mut messages,
                    asked: &mut asked_again,
                    say: ASK_AGAIN_PLAN,
                    keep: Some(2),
                };
                last_problem = Some(match self.ask_again(again, &response, reason) {
                    Ok(reason) => reason,
                    Err(stop) => return stop,
                });
                continue;
            }
            let feedback = match parsed {
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
                Ok(edits) => match self.apply_plan(overlay, &edits, report) {
                    None => return RunStatus::Completed,
                    Some((problem, feedback)) => {
                        last_problem = Some(problem);
                        feedback
                    }
                },
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

    /// Step `step`'s request, announced: the conversation so far, greedy, an answer as
    /// long as the window leaves room for, in `format` when the backend enforces one.
    fn plan_request(
        &self,
        step: usize,
        messages: &[Message],
        format: Option<nanobot_llm_port::ResponseFormat>,
    ) -> Result<LlmRequest, RunStatus> {
        self.tell(&format!(
            "step {step} of at most {}: asking the model for an edit plan",
            self.config.max_steps
        ));
        let Some(max_tokens) = self.answer_room(messages) else {
            return Err(RunStatus::Stopped(StopReason::ModelError(
                "the plan request leaves no room for an answer in the model's context window; lower batch_tokens or prompt_file_chars".into(),
            )));
        };
        let request = LlmRequest::new(self.config.model.clone(), messages.to_vec())
            .with_max_tokens(max_tokens)
            .with_temperature(0.0);
        Ok(match format {
            Some(format) => request.with_response_format(format),
            None => request,
        })
    }

    /// Applies a parsed plan to the overlay. `None` completes the run (something changed, or
    /// nothing was refused); otherwise why not, and the feedback that asks again.
    fn apply_plan(
        &self,
        overlay: &mut Overlay,
        edits: &[crate::plan::PlanEdit],
        report: &mut RunReport,
    ) -> Option<(StopReason, String)> {
        report.tool_calls += edits.len();
        let applied = crate::plan::apply(overlay, edits);
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
            return None;
        }
        let feedback = format!(
            "No edit could be applied, the files are unchanged:\n- {}\nAnswer a corrected plan (copy old_text exactly from the files shown above), or empty lists.",
            applied.refused.join("\n- ")
        );
        Some((
            StopReason::PlanRefused {
                reasons: applied.refused,
            },
            feedback,
        ))
    }

    /// The output tokens a plan request may ask for: the configured cap, less when the
    /// backend's context window (from its capabilities; 0 means unknown) leaves less
    /// beside the prompt (counted, plus a fifth for the tokenizers' difference). `None`
    /// when fewer than 128 would be left.
    pub(super) fn answer_room(&self, messages: &[Message]) -> Option<u32> {
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
}

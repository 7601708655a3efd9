//! Asking the model for a slice's summary, plain or structured, within the time allowed.

use super::*;

impl Consolidator {
    /// The archive of `chunk` asked with a JSON schema in a request of its own (a short
    /// system message and the messages as text, so it fits where the session's prompt does
    /// not), rendered as nanobot-ai's `- [mark] fact` lines. `Err` says why it is unusable.
    pub(super) async fn ask_structured(
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
        let lines = format_messages(chunk);
        let text = match crate::structured::render(&strip_think(&response.text_content()), &lines) {
            Err(why) => return Ok(Err(RawReason::InvalidStructured(why))),
            Ok(None) => return Ok(Ok(Prepared::Nothing)),
            Ok(Some(text)) => text,
        };
        Ok(Ok(self.summary(&text)))
    }

    /// The model's answer to an archive request, a timeout after `call_timeout` counting as
    /// a failed call.
    pub(super) async fn complete_in_time(
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
    pub(super) fn summary(&self, text: &str) -> Prepared {
        Prepared::Summary(cap(text, self.config.summary_max_chars))
    }

    /// The structured archive request for `chunk`, or `None` when it cannot fit the window
    /// with room for an answer.
    pub(super) fn structured_request(
        &self,
        chunk: &[nanobot_session_store::StoredMessage],
    ) -> Option<LlmRequest> {
        let (messages, format) = crate::structured::request(&format_messages(chunk));
        let cap = self.config.structured_max_output_tokens;
        let room_after = |prompt: usize| {
            // Our count is cl100k's; the model's tokenizer differs: a proportional margin.
            let margin = (prompt / 5).max(64);
            self.config
                .context_window
                .checked_sub(prompt + margin)
                .map(|room| room.min(cap))
        };
        // A bound that already leaves the whole answer room settles it without counting
        // the request's tokens (a count can only be smaller, and the room is capped).
        let bounded = self
            .estimator
            .prompt_at_most(&messages, &[])
            .and_then(room_after)
            .filter(|&room| room == cap);
        let room = match bounded {
            Some(room) => room,
            None => room_after(self.estimate_messages(&messages))?,
        };
        if room < 96 {
            return None;
        }
        let mut request = LlmRequest::new(self.config.model.clone(), messages)
            .with_max_tokens(u32::try_from(room).unwrap_or(u32::MAX))
            .with_response_format(format);
        request.temperature = Some(self.config.temperature.unwrap_or(0.0));
        Some(request)
    }

    /// `history` with the content of every tool result that recalled memory (marked with
    /// [`RECALLED_FIELD`] among `messages`) replaced by [`RECALLED_PLACEHOLDER`]: the model
    /// summarising the conversation sees that a search happened, not the recalled text, so
    /// nothing recalled is archived a second time.
    pub(super) fn hide_recalled(
        history: Vec<Replayed>,
        messages: &[StoredMessage],
    ) -> Vec<Replayed> {
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
    pub(super) fn build_request(
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
    pub(super) async fn ask(
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
}

/// `text` cut to `max_chars` characters with nanobot's visible marker.
pub(super) fn cap(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max_chars).collect();
    format!("{cut}\n... (truncated)")
}

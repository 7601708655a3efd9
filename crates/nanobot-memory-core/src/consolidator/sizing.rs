//! Sizing a session's next request, and where an archive's slice ends.

use super::*;

impl Consolidator {
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
    pub(super) fn frame_tokens(&self, session: &Session, current: &str) -> usize {
        self.count_frame(
            &self.prompt.build(session, &[], current),
            &self.prompt.tools(),
        )
    }

    /// [`Consolidator::frame_tokens`] of a frame already built.
    pub(super) fn estimate_messages(&self, messages: &[Message]) -> usize {
        self.estimator.prompt(messages, &[])
    }

    pub(super) fn count_frame(&self, frame: &[Message], tools: &[ToolDefinition]) -> usize {
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
    pub(super) fn frame_fits(&self, session: &Session, current: &str, room: usize) -> bool {
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

    /// The most tokens one archived slice may hold, so its archive request fits in one call:
    /// the session's request fits the budget around it (the frame counted, a tenth kept for
    /// the estimate's error), and, when the schema is asked first, so does the structured
    /// request. nanobot picks by the excess alone, so a backlog larger than the window
    /// becomes one request that never fits and one raw dump.
    pub fn slice_cap(&self, session: &Session) -> usize {
        let frame = self.frame_tokens(session, &archive_instruction(1));
        let mut cap = self.config.budget().saturating_sub(frame) / 10 * 9;
        if self.config.structured_first {
            let structured_frame = self.estimate_messages(&crate::structured::frame());
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

//! The system prompt part by part, in nanobot's order.

use super::*;

impl ContextBuilder {
    pub(super) fn bootstrap_part(&self, ws: &WorkspaceSnapshot, out: &mut SystemPrompt) {
        let limits = &self.config.limits;
        // 2. Bootstrap files.
        let mut files: Vec<(&'static str, String)> = Vec::with_capacity(3);
        let mut templates_only = false;
        let sources = [
            ("AGENTS.md", ws.agents_md.as_deref(), 0),
            ("SOUL.md", ws.soul_md.as_deref(), 1),
            ("USER.md", ws.user_md.as_deref(), 2),
        ];
        for (name, text, slot) in sources {
            let Some(mut text) = text else { continue };
            if name == "SOUL.md"
                && Document::Soul
                    .legacy_template()
                    .is_some_and(|legacy| legacy.trim() == text.trim())
            {
                text = Document::Soul.template();
            }
            if text.trim().is_empty() {
                continue;
            }
            let unedited = match name {
                "AGENTS.md" => text.trim() == AGENTS_TEMPLATE.trim(),
                "USER.md" => Document::User.is_unedited_template(text),
                _ => false,
            };
            if unedited {
                templates_only = true;
                continue;
            }
            let (text, cut) = self.cap(slot, name, text, limits.bootstrap_file_tokens);
            out.truncations.extend(cut);
            files.push((name, text));
        }
        if files.is_empty() {
            let why = if templates_only {
                Omission::Template
            } else {
                Omission::Empty
            };
            out.omitted.push((Part::Bootstrap, why));
        } else {
            out.push(Part::Bootstrap, |t| {
                for (i, (name, text)) in files.iter().enumerate() {
                    if i > 0 {
                        t.push_str("\n\n");
                    }
                    t.push_str("## ");
                    t.push_str(name);
                    t.push_str("\n\n");
                    t.push_str(text);
                }
            });
        }
    }

    pub(super) fn memory_part(
        &self,
        ws: &WorkspaceSnapshot,
        turn: &Turn<'_>,
        out: &mut SystemPrompt,
    ) {
        let limits = &self.config.limits;
        // 4. Memory.
        match ws.memory_md.as_deref() {
            _ if turn.exclude_memory => out.omitted.push((Part::Memory, Omission::Disabled)),
            None => out.omitted.push((Part::Memory, Omission::Empty)),
            Some(text) if text.trim().is_empty() => {
                out.omitted.push((Part::Memory, Omission::Empty))
            }
            Some(text) if Document::Memory.is_unedited_template(text) => {
                out.omitted.push((Part::Memory, Omission::Template))
            }
            Some(text) => {
                let (text, cut) = self.cap(3, "MEMORY.md", text, limits.memory_tokens);
                out.truncations.extend(cut);
                out.push(Part::Memory, |t| {
                    t.push_str("# Memory\n\n## Long-term Memory\n");
                    t.push_str(&text);
                });
            }
        }
    }

    pub(super) fn skill_parts(&self, ws: &WorkspaceSnapshot, out: &mut SystemPrompt) {
        // 5. Active skills; 6. the index of the others.
        let enabled: Vec<&SkillFile> = ws
            .skills
            .iter()
            .map(|s| s.as_ref())
            .filter(|s| !self.config.disabled_skills.contains(s.name()))
            .collect();
        let active: Vec<&SkillFile> = enabled
            .iter()
            .copied()
            .filter(|s| s.always && s.is_available())
            .collect();
        if active.is_empty() {
            out.omitted.push((Part::ActiveSkills, Omission::Empty));
        } else {
            out.push(Part::ActiveSkills, |t| {
                t.push_str("# Active Skills\n\n");
                write_skill_bodies(t, &active);
            });
        }
        let listed: Vec<&SkillFile> = enabled
            .iter()
            .copied()
            .filter(|s| !(s.always && s.is_available()))
            .collect();
        if listed.is_empty() {
            out.omitted.push((Part::SkillsIndex, Omission::Empty));
        } else {
            out.push(Part::SkillsIndex, |t| {
                t.push_str(SKILLS_HEADER);
                write_skills_index(t, ws, &listed);
            });
        }
    }

    pub(super) fn instructions_part(&self, turn: &Turn<'_>, out: &mut SystemPrompt) {
        let limits = &self.config.limits;
        // The client's instructions, after everything stable.
        if let Some(text) = turn.instructions.filter(|t| !t.trim().is_empty()) {
            let (text, cut) = self.cap(
                4,
                "the client's instructions",
                text.trim(),
                limits.bootstrap_file_tokens,
            );
            out.truncations.extend(cut);
            out.push(Part::Instructions, |t| {
                t.push_str(INSTRUCTIONS_HEADER);
                t.push_str(&text);
            });
        }
    }

    pub(super) fn recent_part(&self, turn: &Turn<'_>, out: &mut SystemPrompt) {
        let limits = &self.config.limits;
        // 7. Recent History.
        if turn.exclude_recent_history {
            out.omitted.push((Part::RecentHistory, Omission::Disabled));
        } else {
            let scope = Scope {
                session_key: turn.session_key,
                unified: self.config.unified_session,
                summary: turn.summary,
                max_entries: limits.recent_history_entries,
                max_tokens: limits.recent_history_tokens,
            };
            let (text, report) = recent::render(
                turn.journal,
                &scope,
                self.counter.as_ref(),
                &self.entry_tokens,
            );
            out.recent = report;
            match text {
                Some(text) => out.push(Part::RecentHistory, |t| t.push_str(&text)),
                None => out.omitted.push((Part::RecentHistory, Omission::Empty)),
            }
        }
    }
}

/// 8. The session summary.
pub(super) fn summary_part(turn: &Turn<'_>, out: &mut SystemPrompt) {
    match turn.summary {
        None => out.omitted.push((Part::Summary, Omission::Empty)),
        Some(summary) if summary.text == "(nothing)" => out
            .omitted
            .push((Part::Summary, Omission::NothingSummarised)),
        Some(summary) => out.push(Part::Summary, |t| {
            t.push_str("[Archived Context Summary]\n\nPrevious conversation summary (last active ");
            t.push_str(&summary.last_active);
            t.push_str("):\n");
            t.push_str(&summary.text);
        }),
    }
}

impl SystemPrompt {
    /// Appends a part (after the separator), remembering where it stands and how far the
    /// stable prefix reaches.
    pub(super) fn push(&mut self, part: Part, write: impl FnOnce(&mut String)) {
        if !self.parts.is_empty() {
            self.text.push_str(SEPARATOR);
        }
        let start = self.text.len();
        write(&mut self.text);
        self.parts.push((part, start, self.text.len()));
        if part.is_stable() {
            self.stable_bytes = self.text.len();
        }
    }
}

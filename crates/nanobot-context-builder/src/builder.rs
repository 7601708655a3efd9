//! The builder: a workspace snapshot and a turn in, messages and a report out.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use nanobot_llm_port::tokens::{PER_MESSAGE_OVERHEAD, estimate_message_tokens};
use nanobot_llm_port::{Content, ContentPart, Message, TokenCounter};
use nanobot_memory_store::{Document, JournalEntry};
use nanobot_prompt_inputs::{SkillFile, SkillSource, WorkspaceSnapshot};
use sha2::{Digest, Sha256};

use crate::current::{
    self, CurrentMessage, RuntimeBlock, RuntimeContextMarker, Speaker, skill_references,
};
use crate::error::ContextError;
use crate::identity::{self, Host};
use crate::memo::Memo;
use crate::recent::{self, EntryCounts, RecentHistoryReport, Scope};
use crate::report::{BuildReport, HistoryTokens, Omission, Part, PartReport, Truncation};
use crate::truncate;

mod parts;
mod skills;
mod types;

use parts::summary_part;
use skills::*;
pub use types::{BuilderConfig, BuiltPrompt, Limits, Summary, Turn};

/// The separator between system-prompt parts.
pub const SEPARATOR: &str = "\n\n---\n\n";

const TOOL_CONTRACT_FILE: &str = include_str!("../templates/tool_contract.md");
const AGENTS_TEMPLATE: &str = include_str!("../templates/AGENTS.md");

/// The tool usage notes, as nanobot-ai renders them (Jinja drops the file's last newline).
fn tool_contract() -> &'static str {
    TOOL_CONTRACT_FILE
        .strip_suffix('\n')
        .unwrap_or(TOOL_CONTRACT_FILE)
}

/// Builds prompts. Pure: no IO, no clock, no LLM; the same inputs give the same bytes.
/// It remembers token counts and cuts of unchanged parts between builds, which only makes
/// repeated builds cheaper.
pub struct ContextBuilder {
    config: BuilderConfig,
    counter: Arc<dyn TokenCounter>,
    part_tokens: Memo<usize>,
    capped: Memo<(String, Option<Truncation>)>,
    prefix_hash: Memo<String>,
    entry_tokens: EntryCounts,
}

impl std::fmt::Debug for ContextBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextBuilder")
            .field("config", &self.config)
            .field("encoding", &self.counter.encoding())
            .finish_non_exhaustive()
    }
}

/// The system prompt with its parts.
struct SystemPrompt {
    text: String,
    parts: Vec<(Part, usize, usize)>,
    omitted: Vec<(Part, Omission)>,
    truncations: Vec<Truncation>,
    stable_bytes: usize,
    recent: RecentHistoryReport,
}

impl ContextBuilder {
    /// A builder with `config`, estimating tokens with `counter`.
    pub fn new(config: BuilderConfig, counter: Arc<dyn TokenCounter>) -> Self {
        ContextBuilder {
            config,
            counter,
            part_tokens: Memo::new(Part::SYSTEM.len()),
            capped: Memo::new(5),
            prefix_hash: Memo::new(1),
            entry_tokens: EntryCounts::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BuilderConfig {
        &self.config
    }

    /// The system prompt alone.
    pub fn system_prompt(&self, workspace: &WorkspaceSnapshot, turn: &Turn<'_>) -> String {
        self.assemble_system(workspace, turn).text
    }

    /// The replayed history's tokens: the caller's count when it gave one.
    fn history_tokens(&self, turn: &Turn<'_>) -> (usize, HistoryTokens) {
        match turn.history_tokens {
            Some(tokens) => (tokens, HistoryTokens::FromCaller),
            None => (
                turn.history.iter().map(|m| self.message_tokens(m)).sum(),
                HistoryTokens::Counted,
            ),
        }
    }

    /// Tokens and bytes of each system part, and of the separators between them.
    fn system_reports(&self, system: &SystemPrompt) -> Vec<PartReport> {
        let counter = self.counter.as_ref();
        let mut report_parts = Vec::with_capacity(12);
        for &(part, start, end) in &system.parts {
            let text = &system.text[start..end];
            let tokens = self
                .part_tokens
                .get(part.slot(), text, || counter.count(text));
            report_parts.push(PartReport {
                part,
                bytes: text.len(),
                tokens,
            });
        }
        if system.parts.len() > 1 {
            let count = system.parts.len() - 1;
            report_parts.push(PartReport {
                part: Part::Separators,
                bytes: SEPARATOR.len() * count,
                tokens: counter.count(SEPARATOR) * count,
            });
        }
        report_parts
    }

    /// Builds the messages and the report.
    pub fn build(
        &self,
        workspace: &WorkspaceSnapshot,
        turn: &Turn<'_>,
    ) -> Result<BuiltPrompt, ContextError> {
        let system = self.assemble_system(workspace, turn);

        let mut report_parts = self.system_reports(&system);
        let stable_prefix = &system.text[..system.stable_bytes];
        let stable_prefix_hash = self
            .prefix_hash
            .get(0, stable_prefix, || hex_sha256(stable_prefix));

        let mut messages = Vec::with_capacity(turn.history.len() + 2);
        messages.push(Message::system(system.text.clone()));
        messages.extend_from_slice(turn.history);
        let (history_tokens, source) = self.history_tokens(turn);
        if !turn.history.is_empty() {
            report_parts.push(PartReport {
                part: Part::History,
                bytes: turn.history.iter().map(message_bytes).sum(),
                tokens: history_tokens,
            });
        }

        let mut runtime_context = None;
        let mut invoked_skills = Vec::new();
        let mut images = Vec::new();
        let mut framed = 1;
        if let Some(current) = &turn.current {
            let (mut content, paths) = current::content(current);
            images = paths;
            if current.speaker == Speaker::User {
                let mut blocks = current::validate_blocks(&current.runtime_context)?;
                if let Some((block, names)) = self.explicit_skills(workspace, &current.text) {
                    if !blocks.contains(&block) {
                        blocks.push(block);
                    }
                    invoked_skills = names;
                }
                runtime_context = current::append_runtime_context(&mut content, &blocks);
            }
            let message = current_message(current.speaker, content);
            report_parts.push(PartReport {
                part: Part::Current,
                bytes: message_bytes(&message),
                tokens: self.message_tokens(&message) - PER_MESSAGE_OVERHEAD,
            });
            framed += 1;
            current::push_merged(&mut messages, message);
        }
        report_parts.push(PartReport {
            part: Part::Framing,
            bytes: 0,
            tokens: PER_MESSAGE_OVERHEAD * framed,
        });
        let total_tokens = report_parts.iter().map(|p| p.tokens).sum();
        Ok(BuiltPrompt {
            messages,
            runtime_context,
            report: BuildReport {
                parts: report_parts,
                omitted: system.omitted,
                truncations: system.truncations,
                total_tokens,
                stable_prefix_bytes: system.stable_bytes,
                stable_prefix_hash,
                recent_history: system.recent,
                history_messages: turn.history.len(),
                history_tokens: source,
                invoked_skills,
                images,
            },
        })
    }

    /// One message's estimate: nanobot's per-message estimate, with each image at the
    /// configured flat cost instead of its base64 text.
    pub fn message_tokens(&self, message: &Message) -> usize {
        let images = match message.content() {
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter(|p| matches!(p, ContentPart::ImageUrl { .. }))
                .count(),
            _ => 0,
        };
        if images == 0 {
            return estimate_message_tokens(self.counter.as_ref(), message);
        }
        let mut without = message.clone();
        if let Message::User(m) = &mut without
            && let Content::Parts(parts) = &mut m.content
        {
            parts.retain(|p| !matches!(p, ContentPart::ImageUrl { .. }));
        }
        estimate_message_tokens(self.counter.as_ref(), &without)
            + images * self.config.limits.image_tokens
    }

    fn image_count(messages: &[Message]) -> usize {
        messages
            .iter()
            .filter_map(Message::content)
            .map(|c| match c {
                Content::Parts(parts) => parts
                    .iter()
                    .filter(|p| matches!(p, ContentPart::ImageUrl { .. }))
                    .count(),
                Content::Text(_) => 0,
            })
            .sum()
    }

    fn assemble_system(&self, ws: &WorkspaceSnapshot, turn: &Turn<'_>) -> SystemPrompt {
        let mut out = SystemPrompt {
            text: String::with_capacity(
                8192 + ws.memory_md.as_ref().map_or(0, String::len)
                    + ws.soul_md.as_ref().map_or(0, String::len),
            ),
            parts: Vec::with_capacity(8),
            omitted: Vec::new(),
            truncations: Vec::new(),
            stable_bytes: 0,
            recent: RecentHistoryReport::default(),
        };
        // 1. Identity.
        let identity = identity::render(
            &self.config.host,
            &ws.agent_dir,
            ws.project_dir.as_deref(),
            turn.channel.unwrap_or(""),
        );
        out.push(Part::Identity, |t| t.push_str(&identity));
        self.bootstrap_part(ws, &mut out);
        // 3. Tool contract.
        if self.config.tool_contract {
            out.push(Part::ToolContract, |t| t.push_str(tool_contract()));
        } else {
            out.omitted.push((Part::ToolContract, Omission::Disabled));
        }
        self.memory_part(ws, turn, &mut out);
        self.skill_parts(ws, &mut out);
        self.instructions_part(turn, &mut out);
        self.recent_part(turn, &mut out);
        summary_part(turn, &mut out);
        out
    }

    /// `text` cut to `cap` tokens, remembered per slot.
    fn cap(
        &self,
        slot: usize,
        file: &'static str,
        text: &str,
        cap: usize,
    ) -> (String, Option<Truncation>) {
        // A text of at most `cap` bytes has at most `cap` tokens: no count needed.
        if text.len() <= cap {
            return (text.to_owned(), None);
        }
        self.capped.get(slot, text, || {
            let counter = self.counter.as_ref();
            let tokens = counter.count(text);
            if tokens <= cap {
                return (text.to_owned(), None);
            }
            let marker = format!(
                "\n\n[... {file} is cut here: it is over its {cap}-token limit in the prompt; read the file for the rest.]"
            );
            (
                truncate::head(text, cap, &marker, counter),
                Some(Truncation { file, tokens, cap }),
            )
        })
    }

    /// The explicit-skills block for `$name` references in `text`, and the names.
    fn explicit_skills(
        &self,
        ws: &WorkspaceSnapshot,
        text: &str,
    ) -> Option<(RuntimeBlock, Vec<String>)> {
        if !text.contains('$') {
            return None;
        }
        let invoked: Vec<&SkillFile> = skill_references(text)
            .into_iter()
            .filter_map(|name| {
                ws.skills
                    .iter()
                    .map(|s| s.as_ref())
                    .find(|s| s.name() == name)
            })
            .filter(|s| {
                s.is_available() && !s.always && !self.config.disabled_skills.contains(s.name())
            })
            .collect();
        if invoked.is_empty() {
            return None;
        }
        let mut content = String::from("[Active Skills — instructions for this user turn]\n");
        write_skill_bodies(&mut content, &invoked);
        content.push_str("\n[/Active Skills]");
        Some((
            RuntimeBlock::new("explicit_skills", content),
            invoked.iter().map(|s| s.name().to_owned()).collect(),
        ))
    }
}

fn message_bytes(message: &Message) -> usize {
    match message.content() {
        Some(Content::Text(text)) => text.len(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text, .. } => text.len(),
                ContentPart::ImageUrl { image_url, .. } => image_url.url.len(),
                _ => 0,
            })
            .sum(),
        None => 0,
    }
}

fn hex_sha256(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The builder's estimator serves governance too, so budgets and reports agree: text as
/// nanobot counts it, each image at [`Limits::image_tokens`].
impl nanobot_llm_port::tokens::PromptEstimator for ContextBuilder {
    fn message(&self, message: &Message) -> usize {
        self.message_tokens(message)
    }

    fn prompt(&self, messages: &[Message], tools: &[nanobot_llm_port::ToolDefinition]) -> usize {
        nanobot_llm_port::tokens::estimate_prompt_tokens(self.counter.as_ref(), messages, tools)
            + Self::image_count(messages) * self.config.limits.image_tokens
    }

    /// The payload's bytes and framing (a counter never counts more tokens than bytes),
    /// plus the images at their flat cost.
    fn prompt_at_most(
        &self,
        messages: &[Message],
        tools: &[nanobot_llm_port::ToolDefinition],
    ) -> Option<usize> {
        Some(
            nanobot_llm_port::tokens::prompt_tokens_at_most(messages, tools)
                + Self::image_count(messages) * self.config.limits.image_tokens,
        )
    }
}

/// The current message, from whoever speaks.
fn current_message(speaker: Speaker, content: nanobot_llm_port::Content) -> Message {
    match speaker {
        Speaker::User => Message::User(nanobot_llm_port::UserMessage {
            content,
            name: None,
            extra: Default::default(),
        }),
        Speaker::Assistant => Message::Assistant(nanobot_llm_port::AssistantMessage {
            content: Some(content),
            ..Default::default()
        }),
    }
}

//! The archive request: the same prompt a turn of the session would send, ending with the
//! instruction to summarise the last messages.

use nanobot_llm_port::{
    AssistantMessage, Content, Message, SystemMessage, ToolDefinition, ToolMessage, UserMessage,
};
use nanobot_session_store::{Replayed, Session};
use serde_json::Value;

/// Builds the request a normal turn of a session sends: system prompt, replayed history,
/// then `current` as the user's message. The Consolidator asks for exactly this shape so its
/// archive calls share the conversation's prompt prefix and hit the provider's cache. The
/// context builder implements it for real bots; [`PlainPrompt`] is the minimal one.
pub trait PromptBuilder: Send + Sync {
    /// The request messages.
    fn build(&self, session: &Session, history: &[Replayed], current: &str) -> Vec<Message>;

    /// The tools a turn offers (sent with archive calls too, with tool choice `none`).
    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }
}

/// A fixed system prompt, the history, and the current message (merged into a trailing user
/// message, as nanobot-ai does).
#[derive(Debug, Clone, Default)]
pub struct PlainPrompt {
    /// The system prompt.
    pub system: String,
    /// Tools offered.
    pub tools: Vec<ToolDefinition>,
}

impl PromptBuilder for PlainPrompt {
    fn build(&self, _session: &Session, history: &[Replayed], current: &str) -> Vec<Message> {
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(Message::system(self.system.clone()));
        messages.extend(replayed_messages(history));
        append_user_text(&mut messages, current);
        messages
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.tools.clone()
    }
}

/// Replayed rows as typed messages; a row no provider could take (a stored record of an
/// impossible shape) is left out.
pub fn replayed_messages(history: &[Replayed]) -> Vec<Message> {
    history
        .iter()
        .filter_map(|row| replayed_message(row))
        .collect()
}

/// One replayed row as a typed message. Plain rows (text content, the usual fields) are
/// built directly; anything else goes through serde.
fn replayed_message(row: &serde_json::Map<String, Value>) -> Option<Message> {
    let text = |key: &str| row.get(key).and_then(Value::as_str).map(str::to_owned);
    let plain = row.keys().all(|k| {
        matches!(
            k.as_str(),
            "role" | "content" | "name" | "tool_call_id" | "reasoning_content"
        )
    });
    let content = row.get("content");
    if plain && matches!(content, Some(Value::String(_)) | Some(Value::Null) | None) {
        let body = content
            .and_then(Value::as_str)
            .map(|t| Content::Text(t.to_owned()));
        let name = text("name");
        return match row.get("role").and_then(Value::as_str)? {
            "user" => Some(Message::User(UserMessage {
                content: body?,
                name,
                extra: Default::default(),
            })),
            "system" => Some(Message::System(SystemMessage {
                content: body?,
                name,
                extra: Default::default(),
            })),
            "tool" => Some(Message::Tool(ToolMessage {
                content: body?,
                tool_call_id: text("tool_call_id")?,
                name,
                extra: Default::default(),
            })),
            "assistant" => Some(Message::Assistant(AssistantMessage {
                content: body,
                reasoning_content: text("reasoning_content"),
                tool_calls: None,
                name,
                extra: Default::default(),
            })),
            _ => None,
        };
    }
    serde_json::from_value(Value::Object(row.clone())).ok()
}

/// Adds `text` as the user's message, merged with a blank line into a trailing user message
/// with plain text (two user turns in a row are refused by some providers).
pub fn append_user_text(messages: &mut Vec<Message>, text: &str) {
    if let Some(Message::User(last)) = messages.last_mut()
        && let nanobot_llm_port::Content::Text(existing) = &mut last.content
    {
        existing.push_str("\n\n");
        existing.push_str(text);
        return;
    }
    messages.push(Message::user(text));
}

/// The instruction appended to an archive request, for the last `count` messages.
pub fn archive_instruction(count: usize) -> String {
    ARCHIVE_INSTRUCTION.replace("{{ archive_count }}", &count.to_string())
}

const ARCHIVE_INSTRUCTION: &str = "\
Write a memory overview of only the final {{ archive_count }} conversation messages above. \
Earlier messages are there to resolve references; do not summarise them again.

Skip by default. Keep a fact only if it passes all four SNIP tests:
- Signal: the user would have to repeat it if it were forgotten.
- Novel: it does not restate another fact from these messages.
- Important: it prevents rework, or records a preference or a rule.
- Persistent: it will still matter in about two weeks.

Write one line per fact, as `- [mark] fact`, with one of these marks:
- [permanent] core preferences, personal traits, habits;
- [durable] technical discoveries, project knowledge, configuration;
- [ephemeral] the state of an active task, temporary decisions;
- [correction] a fact that corrects an earlier memory, saying what changed;
- [skip] filler, facts the code repository already records, audit-only breadcrumbs.

Order by priority: the user's corrections and preferences, then solutions, decisions, events, and facts about the environment.
Do not repeat facts already listed in the system prompt's Recent History.
Do not mark a fact [skip] merely because it may already be in long-term memory.
Answer with the fact lines only, or with exactly (nothing) when nothing is worth keeping.";

//! Per-request governance (spec context.md 3.5): before every model call of a turn, a
//! governed copy of the message list is made legal and fitted to the input budget. The
//! stored conversation is never changed. Pure: oversized tool results are returned as
//! [`Offload`]s for the caller to write, never written here.

use std::collections::{BTreeSet, HashSet};

use nanobot_llm_port::{Content, ContentPart, Message, ToolDefinition, ToolMessage};

/// The text of a tool call that was never answered (interrupted run, crash).
pub const BACKFILL_TEXT: &str = "[Tool result unavailable — call was interrupted or lost]";

/// An assistant placeholder nanobot-ai writes for omitted turns; removed before sending.
pub const PLACEHOLDER_TEXT: &str = "[Previous assistant message omitted.]";

/// What replaces a large tool result of this run when the request does not fit.
pub const COMPACTED_TEXT: &str = "[Error: this tool result was compacted to fit the context window and is no longer available. Do not repeat the same call unchanged: retry with a narrower request (a smaller range, a more specific pattern, fewer results), or tell the user the task cannot fit in the context window.]";

/// Put at the start of the first kept message when older messages were snipped, so the
/// model knows the conversation does not start there.
pub const SNIPPED_MARKER: &str = "[Earlier conversation omitted to fit the context window]";

/// Suffix of a text cut to a character cap.
pub const TRUNCATED_SUFFIX: &str = "\n... (truncated)";

/// Tools whose large results of the current run may be compacted.
pub const COMPACTABLE_TOOLS: [&str; 8] = [
    "read_file",
    "exec",
    "grep",
    "find_files",
    "web_search",
    "web_fetch",
    "list_dir",
    "list_exec_sessions",
];

/// How requests are governed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GovernorConfig {
    /// The request's input budget in tokens; 0 turns compaction and snipping off.
    pub input_budget: usize,
    /// A tool result longer than this many characters is offloaded (or cut).
    pub max_tool_result_chars: usize,
    /// Where offloaded results go, as the model should read it (nanobot-ai:
    /// `<project>/.nanobot/tool-results/<session>`); `None` cuts instead of offloading.
    pub offload_dir: Option<String>,
    /// Characters of an offloaded result shown as its preview.
    pub preview_chars: usize,
    /// Tools whose results are never offloaded (they bound themselves; offloading
    /// `read_file` would make the model read its own offload again).
    pub offload_exempt: BTreeSet<String>,
    /// Tools whose large results of this run may be compacted.
    pub compactable: BTreeSet<String>,
    /// Results shorter than this many characters are never compacted.
    pub min_compact_chars: usize,
    /// Compaction stops at this share of the budget (percent).
    pub target_percent: usize,
}

impl GovernorConfig {
    /// nanobot's defaults for `input_budget`.
    pub fn new(input_budget: usize) -> Self {
        GovernorConfig {
            input_budget,
            max_tool_result_chars: 16_000,
            offload_dir: None,
            preview_chars: 1_200,
            offload_exempt: BTreeSet::from(["read_file".to_owned()]),
            compactable: COMPACTABLE_TOOLS.iter().map(|s| (*s).to_owned()).collect(),
            min_compact_chars: 500,
            target_percent: 85,
        }
    }

    /// The input budget nanobot derives: `block_limit` when set, else the window less the
    /// output reserve (`max_tokens`, 4,096 when unset) and a 1,024-token safety margin; 0
    /// (no budget) when the window is 0.
    pub fn input_budget_for(
        window: usize,
        max_tokens: Option<usize>,
        block_limit: Option<usize>,
    ) -> usize {
        if let Some(limit) = block_limit {
            return limit;
        }
        if window == 0 {
            return 0;
        }
        window.saturating_sub(max_tokens.unwrap_or(4_096) + 1_024)
    }
}

/// How tokens are estimated: the builder's estimator by default, injectable in tests (the
/// one estimator trait of the family, re-exported under the name governance uses).
pub use nanobot_llm_port::tokens::PromptEstimator as Estimator;

/// What a run remembers between its requests: compacted results stay compacted, so the
/// request prefix is the same from one model call to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GovernorState {
    compacted: BTreeSet<String>,
}

impl GovernorState {
    /// The tool calls whose results were compacted so far.
    pub fn compacted(&self) -> &BTreeSet<String> {
        &self.compacted
    }
}

/// A tool result to save before the request is sent (if the file does not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offload {
    /// The call it answers.
    pub tool_call_id: String,
    /// Where the model was told it is.
    pub path: String,
    /// The whole result.
    pub content: String,
}

/// What governance did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GovernReport {
    /// Placeholder assistant messages removed.
    pub placeholders_removed: usize,
    /// Tool calls without a usable name removed.
    pub malformed_calls_removed: usize,
    /// Tool results that answered nothing (or something already answered), dropped.
    pub orphans_dropped: usize,
    /// Calls given the backfill result.
    pub backfilled: Vec<String>,
    /// Results offloaded to files.
    pub offloaded: Vec<String>,
    /// Results cut to the character cap.
    pub truncated: Vec<String>,
    /// Results compacted, this request (re-applied ones included).
    pub compacted: Vec<String>,
    /// Messages snipped from the front.
    pub snipped: usize,
    /// The estimate before: with an input budget, the estimator's cheap upper bound when
    /// that fits the budget (a request that fits is not tokenized), else the estimate.
    pub tokens_before: usize,
    /// The same of what is sent.
    pub tokens_after: usize,
}

/// The governed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Governed {
    /// What to send.
    pub messages: Vec<Message>,
    /// Files to write first.
    pub offloads: Vec<Offload>,
    /// What was done.
    pub report: GovernReport,
}

/// Governs `messages` (the first `initial` of which were built before this run's tool
/// calls) for a request offering `tools`.
pub fn govern(
    messages: &[Message],
    initial: usize,
    tools: &[ToolDefinition],
    config: &GovernorConfig,
    state: &mut GovernorState,
    estimator: &dyn Estimator,
) -> Governed {
    let mut report = GovernReport::default();
    // Each message with its position in the run's list, for "produced by this run".
    let mut list: Vec<(usize, Message)> = messages.iter().cloned().enumerate().collect();
    report.tokens_before = fitting_estimate(messages, tools, config.input_budget, estimator);

    // 1. Placeholder assistants.
    let before = list.len();
    list.retain(|(_, m)| !is_placeholder(m));
    report.placeholders_removed = before - list.len();

    // 2. Tool calls without a name.
    report.malformed_calls_removed += drop_unnamed_calls(&mut list);

    // 3, 4. Orphans out, interrupted calls answered.
    report.orphans_dropped += drop_orphans(&mut list);
    report.backfilled.extend(backfill(&mut list));

    // 5. Tool-result sizes.
    let offloads = cap_tool_results(&mut list, config, &mut report);

    // 6. Compaction of this run's large results.
    if config.input_budget > 0 {
        for (_, message) in &mut list {
            if let Message::Tool(tool) = message
                && state.compacted.contains(&tool.tool_call_id)
            {
                tool.content = Content::Text(COMPACTED_TEXT.to_owned());
                report.compacted.push(tool.tool_call_id.clone());
            }
        }
        let estimate = compact_this_run(
            &mut list,
            initial,
            tools,
            config,
            state,
            &mut report,
            estimator,
        );

        // 7. Snip the oldest messages.
        if estimate > config.input_budget {
            report.snipped = snip(&mut list, tools, config.input_budget, estimator);
            // 8, 9. Legal again.
            report.orphans_dropped += drop_orphans(&mut list);
            report.backfilled.extend(backfill(&mut list));
        }
    }
    let messages: Vec<Message> = list.into_iter().map(|(_, m)| m).collect();
    report.tokens_after = fitting_estimate(&messages, tools, config.input_budget, estimator);
    Governed {
        messages,
        offloads,
        report,
    }
}

/// Removes tool calls without a name (and an assistant message left with nothing); how
/// many calls went.
fn drop_unnamed_calls(list: &mut Vec<(usize, Message)>) -> usize {
    let mut removed = 0;
    list.retain_mut(|(_, m)| {
        let Message::Assistant(a) = m else {
            return true;
        };
        let Some(calls) = &mut a.tool_calls else {
            return true;
        };
        let count = calls.len();
        calls.retain(|c| !c.function.name.is_empty());
        removed += count - calls.len();
        if count > 0 && calls.is_empty() {
            a.tool_calls = None;
            return a.content.as_ref().is_some_and(|c| !content_is_blank(c));
        }
        true
    });
    removed
}

/// Tool results within their size: blank ones say so, long ones are offloaded to a file
/// (with a reference left) or truncated; the files to write.
fn cap_tool_results(
    list: &mut [(usize, Message)],
    config: &GovernorConfig,
    report: &mut GovernReport,
) -> Vec<Offload> {
    let mut offloads = Vec::new();
    for (_, message) in list.iter_mut() {
        let Message::Tool(tool) = message else {
            continue;
        };
        let name = tool.name.clone().unwrap_or_default();
        if content_is_blank(&tool.content) {
            let label = if name.is_empty() { "tool" } else { &name };
            tool.content = Content::Text(format!("({label} completed with no output)"));
            continue;
        }
        if config.offload_exempt.contains(&name) {
            continue;
        }
        let Some(text) = plain_text(&tool.content) else {
            continue;
        };
        let chars = text.chars().count();
        if config.max_tool_result_chars == 0 || chars <= config.max_tool_result_chars {
            continue;
        }
        let replacement = match &config.offload_dir {
            Some(dir) => {
                let path = format!("{dir}/{}.txt", safe_filename(&tool.tool_call_id));
                let reference = reference_text(&path, &text, chars, config);
                offloads.push(Offload {
                    tool_call_id: tool.tool_call_id.clone(),
                    path,
                    content: text,
                });
                report.offloaded.push(tool.tool_call_id.clone());
                reference
            }
            None => {
                report.truncated.push(tool.tool_call_id.clone());
                truncate_chars(&text, config.max_tool_result_chars)
            }
        };
        tool.content = Content::Text(replacement);
    }
    offloads
}

/// Compacts this run's large results, newest last, until the request is under its target
/// (the last one: under the budget); the estimate after.
fn compact_this_run(
    list: &mut [(usize, Message)],
    initial: usize,
    tools: &[ToolDefinition],
    config: &GovernorConfig,
    state: &mut GovernorState,
    report: &mut GovernReport,
    estimator: &dyn Estimator,
) -> usize {
    let current: Vec<Message> = list.iter().map(|(_, m)| m.clone()).collect();
    let mut estimate = fitting_estimate(&current, tools, config.input_budget, estimator);
    if estimate > config.input_budget {
        let target = config.input_budget * config.target_percent / 100;
        let candidates: Vec<usize> = list
            .iter()
            .enumerate()
            .filter(|(_, (origin, m))| {
                *origin >= initial
                    && matches!(m, Message::Tool(t)
                        if config.compactable.contains(t.name.as_deref().unwrap_or(""))
                            && !state.compacted.contains(&t.tool_call_id)
                            && t.content.as_text().is_some_and(|s| s.chars().count() >= config.min_compact_chars))
            })
            .map(|(i, _)| i)
            .collect();
        let last = candidates.len().saturating_sub(1);
        for (n, index) in candidates.into_iter().enumerate() {
            let stop_at = if n == last {
                config.input_budget
            } else {
                target
            };
            if estimate <= stop_at {
                break;
            }
            if let (_, Message::Tool(tool)) = &mut list[index] {
                tool.content = Content::Text(COMPACTED_TEXT.to_owned());
                state.compacted.insert(tool.tool_call_id.clone());
                report.compacted.push(tool.tool_call_id.clone());
            }
            estimate = prompt_of(list, tools, estimator);
        }
    }
    estimate
}

/// A tool result cut to `max_chars` for storage (nanobot-ai stores at most
/// `max_tool_result_chars` of a result for later replays, `read_file` included).
pub fn truncate_for_storage(message: &Message, max_chars: usize) -> Option<Message> {
    let Message::Tool(tool) = message else {
        return None;
    };
    let text = tool.content.as_text()?;
    if max_chars == 0 || text.chars().count() <= max_chars {
        return None;
    }
    Some(Message::Tool(ToolMessage {
        content: Content::Text(truncate_chars(text, max_chars)),
        ..tool.clone()
    }))
}

fn is_placeholder(message: &Message) -> bool {
    matches!(message, Message::Assistant(a)
        if a.tool_calls().is_empty()
            && a.content.as_ref().and_then(Content::as_text).is_some_and(|t| t.trim() == PLACEHOLDER_TEXT))
}

fn content_is_blank(content: &Content) -> bool {
    match content {
        Content::Text(t) => t.trim().is_empty(),
        Content::Parts(parts) => parts
            .iter()
            .all(|p| p.as_text().is_some_and(|t| t.trim().is_empty())),
    }
}

/// Text content, or parts that are all text joined by newlines; `None` when there is an
/// image or another kind of part (left alone).
fn plain_text(content: &Content) -> Option<String> {
    match content {
        Content::Text(t) => Some(t.clone()),
        Content::Parts(parts) => parts
            .iter()
            .map(ContentPart::as_text)
            .collect::<Option<Vec<_>>>()
            .map(|texts| texts.join("\n")),
    }
}

fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}{TRUNCATED_SUFFIX}", &text[..cut]),
        None => text.to_owned(),
    }
}

/// nanobot's `safe_filename`: characters unsafe in a file name become `_`.
fn safe_filename(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if matches!(c, '<' | '>' | ':' | '"' | '/' | '\\' | '|' | '?' | '*') || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        "_".to_owned()
    } else {
        cleaned.to_owned()
    }
}

/// nanobot-ai's reference text for an offloaded result.
fn reference_text(path: &str, text: &str, chars: usize, config: &GovernorConfig) -> String {
    let preview_end = text
        .char_indices()
        .nth(config.preview_chars)
        .map_or(text.len(), |(i, _)| i);
    let mut out = format!(
        "[tool output persisted]\nFull output saved to workspace path: {path}\nOriginal size: {chars} chars\nPreview:\n{}",
        &text[..preview_end]
    );
    if preview_end < text.len() {
        out.push_str("\n...\nPreview is also truncated.");
    }
    out.push_str("\nResult truncated. Read the saved file if you need the complete output.");
    if out.chars().count() > config.max_tool_result_chars {
        out = format!("[truncated: {path}]");
    }
    out
}

/// The estimator's cheap bound when `budget` is set and the bound fits it (no tokenizing
/// for a request that fits), else its estimate.
fn fitting_estimate(
    messages: &[Message],
    tools: &[ToolDefinition],
    budget: usize,
    estimator: &dyn Estimator,
) -> usize {
    if budget > 0
        && let Some(bound) = estimator.prompt_at_most(messages, tools)
        && bound <= budget
    {
        return bound;
    }
    estimator.prompt(messages, tools)
}

fn prompt_of(
    list: &[(usize, Message)],
    tools: &[ToolDefinition],
    estimator: &dyn Estimator,
) -> usize {
    let messages: Vec<Message> = list.iter().map(|(_, m)| m.clone()).collect();
    estimator.prompt(&messages, tools)
}

/// Drops tool results with no id, an id no earlier assistant declared, or an id already
/// answered; how many.
fn drop_orphans(list: &mut Vec<(usize, Message)>) -> usize {
    let mut declared: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    let before = list.len();
    list.retain(|(_, m)| match m {
        Message::Assistant(a) => {
            declared.extend(a.tool_calls().iter().map(|c| c.id.clone()));
            true
        }
        Message::Tool(t) => {
            !t.tool_call_id.is_empty()
                && declared.contains(&t.tool_call_id)
                && answered.insert(t.tool_call_id.clone())
        }
        _ => true,
    });
    before - list.len()
}

/// Answers every declared call that has no result with [`BACKFILL_TEXT`], right after the
/// assistant's existing results; the ids answered.
fn backfill(list: &mut Vec<(usize, Message)>) -> Vec<String> {
    let answered: HashSet<&str> = list
        .iter()
        .filter_map(|(_, m)| match m {
            Message::Tool(t) => Some(t.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut inserts: Vec<(usize, usize, Message)> = Vec::new();
    let mut filled = Vec::new();
    for (i, (origin, m)) in list.iter().enumerate() {
        let missing: Vec<_> = m
            .tool_calls()
            .iter()
            .filter(|c| !c.id.is_empty() && !answered.contains(c.id.as_str()))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let mut at = i + 1;
        while at < list.len() && matches!(list[at].1, Message::Tool(_)) {
            at += 1;
        }
        for call in missing {
            filled.push(call.id.clone());
            inserts.push((
                at,
                *origin,
                Message::tool_result(call.id.clone(), call.function.name.clone(), BACKFILL_TEXT),
            ));
        }
    }
    for (at, origin, message) in inserts.into_iter().rev() {
        list.insert(at, (origin, message));
    }
    filled
}

/// Keeps the system messages and the newest others that fit, starting at a user message;
/// how many were dropped.
fn snip(
    list: &mut Vec<(usize, Message)>,
    tools: &[ToolDefinition],
    budget: usize,
    estimator: &dyn Estimator,
) -> usize {
    let (system, rest): (Vec<_>, Vec<_>) = list
        .drain(..)
        .partition(|(_, m)| matches!(m, Message::System(_)));
    let system_messages: Vec<Message> = system.iter().map(|(_, m)| m.clone()).collect();
    let reserve = system_messages
        .iter()
        .map(|m| estimator.message(m))
        .sum::<usize>()
        .max(estimator.prompt(&system_messages, tools));
    let mut kept_from = rest.len();
    let mut used = reserve;
    for (i, (_, m)) in rest.iter().enumerate().rev() {
        let cost = estimator.message(m);
        if kept_from < rest.len() && used + cost > budget {
            break;
        }
        used += cost;
        kept_from = i;
    }
    let is_user = |m: &Message| matches!(m, Message::User(_));
    let start = match rest[kept_from..].iter().position(|(_, m)| is_user(m)) {
        Some(offset) => kept_from + offset,
        None => rest
            .iter()
            .rposition(|(_, m)| is_user(m))
            .unwrap_or(kept_from),
    };
    let dropped = start;
    let mut kept: Vec<(usize, Message)> = rest.into_iter().skip(start).collect();
    if dropped > 0
        && let Some((_, Message::User(user))) = kept.first_mut()
    {
        user.content = match std::mem::replace(&mut user.content, Content::Text(String::new())) {
            Content::Text(t) => Content::Text(format!("{SNIPPED_MARKER}\n\n{t}")),
            Content::Parts(mut parts) => {
                parts.insert(0, ContentPart::text(SNIPPED_MARKER));
                Content::Parts(parts)
            }
        };
    }
    // Leading results whose calls were snipped away.
    let lead = kept
        .iter()
        .take_while(|(_, m)| matches!(m, Message::Tool(_)))
        .count();
    kept.drain(..lead);
    list.extend(system);
    list.extend(kept);
    dropped + lead
}

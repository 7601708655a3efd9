//! `get_history`: the live tail of a session, cleaned and trimmed for a model.
//!
//! It follows nanobot's replay (`../shared/spec/session.md`, section 4) step by step, with
//! three deliberate differences, documented in `docs/DIFFERENCES.md`:
//!
//! - A tool result with no matching call is dropped on its own; nanobot drops it *and every
//!   earlier message* (one orphan in the middle erased whole valid turns).
//! - A record without a string `role`, or with a role a provider would refuse, is skipped;
//!   nanobot fails the whole turn with a `KeyError`.
//! - When the token budget cuts the tail to a user turn, a proactive delivery
//!   (`_channel_delivery`) the user was answering is kept, as it is without a budget.
//!
//! Token estimates of the projected messages are cached on the messages, so asking again
//! for a long session's history does not count it again.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use nanobot_llm_port::TokenCounter;
use nanobot_llm_port::tokens::estimate_json_message_tokens;
use serde_json::{Map, Value};

use crate::message::{Speaker, StoredMessage, TOKENS_FIELD};

mod project;

use project::project;
pub use project::public_copy;
pub(crate) use project::sanitize_assistant_text;

/// The raw tail always replayed after compaction, extended to the user turn that began it.
pub const MIN_REPLAY_MESSAGES: usize = 8;

/// Fields a provider needs; everything else (timestamps, media, flags) stays home.
const REPLAYED_FIELDS: [&str; 5] = [
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "thinking_blocks",
];

/// One replayed message: `role`, `content` and the provider fields (`tool_calls`,
/// `tool_call_id`, `name`, `reasoning_content`, `thinking_blocks`). Shared, because the
/// projection of each stored message is computed once and reused by later calls.
pub type Replayed = Arc<Map<String, Value>>;

/// How much history to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryOptions {
    /// At most this many messages before cleaning (0: no cap). Production replay uses 0.
    pub max_messages: usize,
    /// At most this many estimated tokens (0: no budget). The newest message is always kept.
    pub max_tokens: usize,
    /// With `max_messages`, extend the window back to the user turn that began it.
    pub extend_to_user: bool,
    /// Keep model-only runtime context appended to user turns (off for views shown to
    /// people).
    pub include_runtime_context: bool,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            max_messages: 0,
            max_tokens: 0,
            extend_to_user: false,
            include_runtime_context: true,
        }
    }
}

impl HistoryOptions {
    /// Replay within a token budget, as a turn asks for it.
    pub fn with_token_budget(max_tokens: usize) -> Self {
        HistoryOptions {
            max_tokens,
            ..HistoryOptions::default()
        }
    }
}

/// The replay budget nanobot derives from a model: window minus max output minus a 1,024
/// token safety margin; half the window (at least 128) when that leaves nothing; 0 (no
/// trimming) without a window.
pub fn replay_token_budget(context_window: usize, max_output_tokens: usize) -> usize {
    if context_window == 0 {
        return 0;
    }
    match context_window.checked_sub(max_output_tokens.max(1) + 1024) {
        Some(budget) if budget > 0 => budget,
        _ => (context_window / 2).max(128),
    }
}

/// The replayable history of `messages` whose first `last_consolidated` are archived.
pub fn get_history(
    messages: &[StoredMessage],
    last_consolidated: usize,
    options: &HistoryOptions,
    counter: &dyn TokenCounter,
) -> Vec<Replayed> {
    replay(messages, last_consolidated, options, counter)
        .into_iter()
        .map(|(projected, _)| projected)
        .collect()
}

/// [`get_history`] and the token estimate of what it returns: the sum of each message's
/// estimate (nanobot's `estimate_message_tokens`, framing included), from the per-message
/// cache, so asking again costs no tokenization.
pub fn get_history_counted(
    messages: &[StoredMessage],
    last_consolidated: usize,
    options: &HistoryOptions,
    counter: &dyn TokenCounter,
) -> (Vec<Replayed>, usize) {
    let fingerprint = fingerprint(counter);
    let include = options.include_runtime_context;
    let mut tokens = 0;
    let replayed = replay(messages, last_consolidated, options, counter);
    let stored: Vec<&StoredMessage> = replayed.iter().map(|(_, m)| *m).collect();
    prime_costs(&stored, include, counter, fingerprint);
    let history = replayed
        .into_iter()
        .map(|(projected, stored)| {
            tokens += cost(stored, include, counter, fingerprint).unwrap_or(0);
            projected
        })
        .collect();
    (history, tokens)
}

fn replay<'a>(
    messages: &'a [StoredMessage],
    last_consolidated: usize,
    options: &HistoryOptions,
    counter: &dyn TokenCounter,
) -> Vec<(Replayed, &'a StoredMessage)> {
    let pointer = last_consolidated.min(messages.len());
    let mut start = pointer;
    if pointer > 0 {
        start = start.min(recent_start(messages, MIN_REPLAY_MESSAGES, true));
    }
    let replayable = &messages[start..];

    let mut from = 0;
    if options.max_messages > 0 {
        let floor_pulled_archive = start < pointer;
        let unarchived = messages.len() - pointer;
        if !(floor_pulled_archive && unarchived < options.max_messages) {
            from = recent_start(replayable, options.max_messages, options.extend_to_user);
        }
    }
    let mut slice = &replayable[from..];
    slice = &slice[align_to_user(slice)..];

    let kept = without_orphans(slice);
    let include = options.include_runtime_context;
    let start = if options.max_tokens == 0 {
        0
    } else {
        budget_start(&kept, options, counter)
    };
    let mut out: Vec<(Replayed, &StoredMessage)> = kept[start..]
        .iter()
        .filter_map(|m| project_cached(m, include).map(|p| (p, *m)))
        .collect();
    if start > 0 {
        drop_unanswerable_results(&mut out);
    }
    out
}

fn role(message: &StoredMessage) -> Option<&str> {
    match message.shape().speaker {
        Speaker::User => Some("user"),
        Speaker::Assistant => Some("assistant"),
        Speaker::Tool => Some("tool"),
        Speaker::System => Some("system"),
        Speaker::Other => None,
    }
}

fn is_user(message: &StoredMessage) -> bool {
    message.shape().speaker == Speaker::User
}

/// nanobot's `recent_message_start_index`.
fn recent_start(messages: &[StoredMessage], n: usize, extend_to_user: bool) -> usize {
    if n == 0 {
        return messages.len();
    }
    let start = messages.len().saturating_sub(n);
    if !extend_to_user || messages.len() <= n || messages[start..].iter().any(is_user) {
        return start;
    }
    match messages[..start].iter().rposition(is_user) {
        None => start,
        Some(user) if user > 0 && messages[user - 1].shape().delivery => user - 1,
        Some(user) => user,
    }
}

/// Index of the first user message (or the delivery just before it); 0 without users.
fn align_to_user(messages: &[StoredMessage]) -> usize {
    match messages.iter().position(is_user) {
        Some(user) if user > 0 && messages[user - 1].shape().delivery => user - 1,
        Some(user) => user,
        None => 0,
    }
}

/// The messages with orphan tool results removed: a result whose `tool_call_id` no earlier
/// assistant message declared. nanobot drops everything before an orphan too; we drop
/// only the orphan.
fn without_orphans(messages: &[StoredMessage]) -> Vec<&StoredMessage> {
    let mut declared: HashSet<&str> = HashSet::new();
    let mut kept = Vec::with_capacity(messages.len());
    for message in messages {
        let shape = message.shape();
        match shape.speaker {
            Speaker::Assistant => declared.extend(shape.declares.iter().map(String::as_str)),
            Speaker::Tool => {
                if let Some(id) = &shape.answers
                    && !declared.contains(id.as_str())
                {
                    continue;
                }
            }
            _ => {}
        }
        kept.push(message);
    }
    kept
}

/// Identifies a counter for the per-message cache: same encoding, same counts.
fn fingerprint(counter: &dyn TokenCounter) -> u64 {
    let mut hasher = DefaultHasher::new();
    counter.encoding().hash(&mut hasher);
    hasher.finish()
}

/// The count recorded in the message for this counter's encoding (see [`TOKENS_FIELD`]).
fn recorded_tokens(message: &StoredMessage, counter: &dyn TokenCounter) -> Option<u32> {
    let count = message
        .get(TOKENS_FIELD)?
        .get(counter.encoding())?
        .as_u64()?;
    u32::try_from(count).ok().filter(|&c| c != NOT_REPLAYED)
}

/// The replay token estimate of one message (`None` when replay leaves it out), computed
/// once and cached on the message.
pub fn message_tokens(message: &StoredMessage, counter: &dyn TokenCounter) -> Option<usize> {
    cost(message, true, counter, fingerprint(counter))
}

/// Marks a message the projection drops, in the token cache.
const NOT_REPLAYED: u32 = u32::MAX;

/// The estimate of a message's projection, or `None` when it is not replayed; cached on the
/// stored message for model replay (the public view projects differently).
fn cost(
    message: &StoredMessage,
    include: bool,
    counter: &dyn TokenCounter,
    fingerprint: u64,
) -> Option<usize> {
    if include && let Some(tokens) = message.cached_tokens(fingerprint) {
        return (tokens != NOT_REPLAYED).then_some(tokens as usize);
    }
    if include && let Some(tokens) = recorded_tokens(message, counter) {
        message.cache_tokens(fingerprint, tokens);
        return Some(tokens as usize);
    }
    let tokens = if include {
        message
            .cached_projection(|| project(message, true).map(Arc::new))
            .as_ref()
            .map(|p| estimate_json_message_tokens(counter, p))
    } else {
        project(message, false).map(|p| estimate_json_message_tokens(counter, &p))
    };
    if include {
        let cached = tokens.map_or(NOT_REPLAYED, |t| {
            u32::try_from(t).unwrap_or(NOT_REPLAYED - 1)
        });
        message.cache_tokens(fingerprint, cached);
    }
    tokens
}

/// The projection, from the message's cache for model replay (the public view projects
/// differently and is not cached).
fn project_cached(message: &StoredMessage, include: bool) -> Option<Replayed> {
    if include {
        message
            .cached_projection(|| project(message, true).map(Arc::new))
            .clone()
    } else {
        project(message, false).map(Arc::new)
    }
}

/// How many messages are counted in parallel first; each later stretch is twice the one
/// before (a long history is counted in a few stretches, a short one barely past its end).
const PRIME_CHUNK: usize = 256;

/// Fills the token cache of `messages` using the machine's cores; the cache makes the
/// result the same as counting one by one. Small stretches are counted on the caller's
/// thread.
fn prime_costs(
    messages: &[&StoredMessage],
    include: bool,
    counter: &dyn TokenCounter,
    fingerprint: u64,
) {
    if !include {
        return;
    }
    let missing: Vec<&StoredMessage> = messages
        .iter()
        .copied()
        .filter(|m| m.cached_tokens(fingerprint).is_none())
        .collect();
    if missing.len() < 64 {
        return;
    }
    let threads = crate::cores().min(4);
    if threads < 2 {
        return;
    }
    let per_thread = missing.len().div_ceil(threads);
    let count = |part: &[&StoredMessage]| {
        for message in part {
            let _ = cost(message, include, counter, fingerprint);
        }
    };
    std::thread::scope(|scope| {
        let mut parts = missing.chunks(per_thread);
        // The caller counts a part itself: one thread fewer to start, and its own
        // per-thread caches are the warm ones.
        let own = parts.next();
        for part in parts {
            scope.spawn(move || count(part));
        }
        if let Some(part) = own {
            count(part);
        }
    });
}

/// A user turn that replay keeps.
fn is_replayed_user(message: &StoredMessage) -> bool {
    let shape = message.shape();
    shape.speaker == Speaker::User && !shape.command
}

/// Step 6: where the newest messages within the budget begin, moved to a user turn. Only
/// the messages it walks over are projected (and only once: counts are cached).
fn budget_start(
    kept: &[&StoredMessage],
    options: &HistoryOptions,
    counter: &dyn TokenCounter,
) -> usize {
    let fingerprint = fingerprint(counter);
    let include = options.include_runtime_context;
    let mut total = 0usize;
    let mut first_kept = kept.len();
    let (mut next_stretch, mut stretch) = (0, PRIME_CHUNK);
    for (i, message) in kept.iter().enumerate().rev() {
        if kept.len() - 1 - i == next_stretch {
            // Count the next stretch (walking back) on every core before walking it.
            prime_costs(
                &kept[(i + 1).saturating_sub(stretch)..=i],
                include,
                counter,
                fingerprint,
            );
            next_stretch += stretch;
            stretch *= 2;
        }
        let Some(tokens) = cost(message, include, counter, fingerprint) else {
            continue;
        };
        if first_kept < kept.len() && total + tokens > options.max_tokens {
            break;
        }
        total += tokens;
        first_kept = i;
    }
    if first_kept == kept.len() {
        return kept.len();
    }
    let start = match kept[first_kept..].iter().position(|m| is_replayed_user(m)) {
        Some(offset) => first_kept + offset,
        None => kept
            .iter()
            .rposition(|m| is_replayed_user(m))
            .unwrap_or(first_kept),
    };
    // Keep the proactive delivery the user was answering, as replay without a budget does.
    if start > 0 && is_replayed_user(kept[start]) && kept[start - 1].shape().delivery {
        start - 1
    } else {
        start
    }
}

/// After a cut, results whose call was cut away cannot be answered: drop them.
fn drop_unanswerable_results(kept: &mut Vec<(Replayed, &StoredMessage)>) {
    let mut declared: HashSet<&str> = HashSet::new();
    kept.retain(|(_, stored)| {
        let shape = stored.shape();
        match shape.speaker {
            Speaker::Assistant => {
                declared.extend(shape.declares.iter().map(String::as_str));
                true
            }
            Speaker::Tool => shape
                .answers
                .as_deref()
                .is_none_or(|id| declared.contains(id)),
            _ => true,
        }
    });
}

//! What a caller adds to one turn besides its text: a client's own instructions, and an
//! idempotency key that makes a retried request return the answer it already got.

use nanobot_llm_port::Usage;
use nanobot_session_store::Session;
use serde_json::{Map, Value, json};

/// The session metadata field holding the idempotency records of a session:
/// `{"<key>": {"fingerprint", "answer_at", "answer_sum", "prompt_tokens", "usage"?, "seq"}}`. The answer
/// itself is the session's message at `answer_at` (checked against `answer_sum`), so a
/// record costs a hundred bytes, not an answer's worth, in every metadata record.
pub const IDEMPOTENCY_KEY_FIELD: &str = "_nanobot_rs_idempotency";

/// How many records a session keeps (the newest): retries come within minutes.
pub const IDEMPOTENCY_RECORDS: usize = 32;

/// Options of one turn ([`crate::Agent::turn_with`]); the default is a plain turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnOptions {
    /// A client's own instructions (an API caller's system message): in the system prompt
    /// right after its stable prefix, for this turn only (never stored).
    pub instructions: Option<String>,
    /// Makes a retried request safe: see [`IdempotencyKey`].
    pub idempotency: Option<IdempotencyKey>,
}

impl TurnOptions {
    /// With a client's instructions.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// With an idempotency key.
    pub fn with_idempotency(mut self, key: IdempotencyKey) -> Self {
        self.idempotency = Some(key);
        self
    }
}

/// A request's idempotency key and a fingerprint of the request. Checked under the
/// session's turn lock, so it holds across processes: a turn whose key the session already
/// answered returns that answer without calling the model (and saves nothing); the same key
/// with another fingerprint fails with [`crate::TurnError::IdempotencyKeyReused`]. The
/// record is saved with the answer, in the same write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// The client's key.
    pub key: String,
    /// What identifies the request (a hash of what the turn was asked).
    pub fingerprint: String,
}

/// What an earlier turn with the same key left.
pub(crate) enum Earlier {
    /// Its answer, the prompt's estimate and what the provider reported.
    Answered {
        answer: String,
        prompt_tokens: usize,
        usage: Option<Usage>,
    },
    /// The key came with another request.
    OtherRequest,
    /// The key is known but its answer is no longer in the session (cleared or cut): the
    /// turn runs again.
    Gone,
}

/// The earlier turn of `key` in `session`, if any.
pub(crate) fn earlier(session: &Session, key: &IdempotencyKey) -> Option<Earlier> {
    let record = session
        .meta()
        .metadata
        .get(IDEMPOTENCY_KEY_FIELD)?
        .get(&key.key)?;
    if record.get("fingerprint").and_then(Value::as_str) != Some(key.fingerprint.as_str()) {
        return Some(Earlier::OtherRequest);
    }
    let answer = record
        .get("answer_at")
        .and_then(Value::as_u64)
        .and_then(|at| session.messages().get(usize::try_from(at).ok()?))
        .filter(|m| m.role() == Some("assistant"))
        .and_then(|m| m.content()?.as_str().map(str::to_owned))
        .filter(|text| record.get("answer_sum").and_then(Value::as_str) == Some(&sum(text)));
    Some(match answer {
        Some(answer) => Earlier::Answered {
            answer,
            prompt_tokens: record
                .get("prompt_tokens")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0),
            usage: record
                .get("usage")
                .and_then(|u| serde_json::from_value(u.clone()).ok()),
        },
        None => Earlier::Gone,
    })
}

/// Records that `key` was answered by the session's last message, keeping the newest
/// [`IDEMPOTENCY_RECORDS`].
pub(crate) fn record(
    session: &mut Session,
    key: &IdempotencyKey,
    prompt_tokens: usize,
    usage: Option<&Usage>,
) {
    let Some(answer_at) = session.messages().len().checked_sub(1) else {
        return;
    };
    let answer_sum = session.messages()[answer_at]
        .content()
        .and_then(Value::as_str)
        .map(sum)
        .unwrap_or_default();
    let metadata = session.metadata_mut();
    let mut records = match metadata.remove(IDEMPOTENCY_KEY_FIELD) {
        Some(Value::Object(records)) => records,
        _ => Map::new(),
    };
    let seq = |r: &Value| r.get("seq").and_then(Value::as_u64).unwrap_or(0);
    let next = records.values().map(seq).max().map_or(0, |s| s + 1);
    let mut record = json!({
        "fingerprint": key.fingerprint,
        "answer_at": answer_at,
        "answer_sum": answer_sum,
        "prompt_tokens": prompt_tokens,
        "seq": next,
    });
    if let Some(usage) = usage.and_then(|u| serde_json::to_value(u).ok()) {
        record["usage"] = usage;
    }
    records.insert(key.key.clone(), record);
    while records.len() > IDEMPOTENCY_RECORDS {
        let Some(oldest) = records
            .iter()
            .min_by_key(|(_, r)| seq(r))
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        records.remove(&oldest);
    }
    metadata.insert(IDEMPOTENCY_KEY_FIELD.into(), Value::Object(records));
}

/// FNV-1a (64 bits) of an answer, as hex: enough to tell the recorded answer from
/// another message at the same place after a clear.
fn sum(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

//! Scope keys: whose memory something is, and the directory name derived from it.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ScopeError;

/// The longest id part (a sender or chat id) accepted, in UTF-8 bytes. Ids are short; this
/// leaves room for namespaced ids while refusing pasted documents.
pub const MAX_ID_BYTES: usize = 16 * 1024;

/// The longest platform (channel) name accepted.
pub const MAX_PLATFORM_BYTES: usize = 64;

/// Directory names longer than this get the hashed form: well under NAME_MAX (255).
const MAX_NAME_BYTES: usize = 160;

/// Prefix of hashed directory names. `~` is outside the base32 alphabet, so a hashed name
/// can never be the encoding of another key.
const HASHED_PREFIX: &str = "~h";

/// A platform name: `telegram`, `discord`, `cli`. ASCII letters, digits, `-`, `_` and `.`,
/// so the first `:` of a key always ends it and an id cannot pose as a platform.
fn validate_platform(platform: &str) -> Result<(), ScopeError> {
    let ok = !platform.is_empty()
        && platform.len() <= MAX_PLATFORM_BYTES
        && platform
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ScopeError::InvalidKey {
            key: preview(platform),
            reason: format!(
                "a platform is 1 to {MAX_PLATFORM_BYTES} ASCII letters, digits, '-', '_' or '.'"
            ),
        })
    }
}

/// An id as a platform reports it: any text but the empty one, up to [`MAX_ID_BYTES`].
/// Slashes, dots, NUL and control characters are all fine, because names on disk are
/// derived by encoding, never by pasting the id into a path.
fn validate_id(id: &str) -> Result<(), ScopeError> {
    let reason = if id.is_empty() {
        Some("the id is empty".to_owned())
    } else if id.len() > MAX_ID_BYTES {
        Some(format!(
            "the id has {} bytes, more than the {MAX_ID_BYTES} allowed",
            id.len()
        ))
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ScopeError::InvalidKey {
            key: preview(id),
            reason,
        }),
        None => Ok(()),
    }
}

/// A user, platform-qualified (`telegram:123` is not `discord:123`), or a linked canonical
/// id (`id:<opaque>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserKey(String);

impl UserKey {
    /// The user `id` of `platform`.
    pub fn new(platform: &str, id: &str) -> Result<UserKey, ScopeError> {
        validate_platform(platform)?;
        validate_id(id)?;
        Ok(UserKey(format!("{platform}:{id}")))
    }

    /// Parses `platform:id` (the platform ends at the first `:`).
    pub fn parse(text: &str) -> Result<UserKey, ScopeError> {
        let (platform, id) = text.split_once(':').ok_or_else(|| ScopeError::InvalidKey {
            key: preview(text),
            reason: "a user is written platform:id, as in telegram:123".into(),
        })?;
        UserKey::new(platform, id)
    }

    /// The key as written, `platform:id`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The platform part.
    pub fn platform(&self) -> &str {
        self.0.split_once(':').map_or(&self.0, |(p, _)| p)
    }

    /// The id part.
    pub fn id(&self) -> &str {
        self.0.split_once(':').map_or("", |(_, id)| id)
    }
}

impl TryFrom<String> for UserKey {
    type Error = ScopeError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        UserKey::parse(&text)
    }
}

impl From<UserKey> for String {
    fn from(key: UserKey) -> String {
        key.0
    }
}

impl fmt::Display for UserKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A chat, `channel:chat_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChatKey(String);

impl ChatKey {
    /// Chat `chat_id` of `channel`.
    pub fn new(channel: &str, chat_id: &str) -> Result<ChatKey, ScopeError> {
        validate_platform(channel)?;
        validate_id(chat_id)?;
        Ok(ChatKey(format!("{channel}:{chat_id}")))
    }

    /// Parses `channel:chat_id`.
    pub fn parse(text: &str) -> Result<ChatKey, ScopeError> {
        let (channel, id) = text.split_once(':').ok_or_else(|| ScopeError::InvalidKey {
            key: preview(text),
            reason: "a chat is written channel:chat_id, as in telegram:-100".into(),
        })?;
        ChatKey::new(channel, id)
    }

    /// The key as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ChatKey {
    type Error = ScopeError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        ChatKey::parse(&text)
    }
}

impl From<ChatKey> for String {
    fn from(key: ChatKey) -> String {
        key.0
    }
}

impl fmt::Display for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whose memory within an agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    /// The whole agent: nanobot's one memory, today's workspace.
    Agent,
    /// One user (their direct messages).
    User(UserKey),
    /// One chat (a group, or every chat in `chat` isolation).
    Chat(ChatKey),
}

impl Subject {
    /// The canonical text: `agent`, `user:<platform:id>` or `chat:<channel:chat_id>`.
    pub fn canonical(&self) -> String {
        match self {
            Subject::Agent => "agent".to_owned(),
            Subject::User(user) => format!("user:{user}"),
            Subject::Chat(chat) => format!("chat:{chat}"),
        }
    }

    /// Reads [`Subject::canonical`] back.
    pub fn parse(text: &str) -> Result<Subject, ScopeError> {
        if text == "agent" {
            return Ok(Subject::Agent);
        }
        if let Some(rest) = text.strip_prefix("user:") {
            return UserKey::parse(rest).map(Subject::User);
        }
        if let Some(rest) = text.strip_prefix("chat:") {
            return ChatKey::parse(rest).map(Subject::Chat);
        }
        Err(ScopeError::InvalidKey {
            key: preview(text),
            reason: "a scope is agent, user:<platform:id> or chat:<channel:chat_id>".into(),
        })
    }

    /// Whether this is the agent's own scope.
    pub fn is_agent(&self) -> bool {
        matches!(self, Subject::Agent)
    }

    /// The directory name of this subject's scope under `scopes/` (`None` for the agent,
    /// whose scope is the workspace itself): the lowercase unpadded base32 of the canonical
    /// text, or `~h` and its SHA-256 when that would be too long. Only `a-z`, `2-7`, `~` and
    /// hex digits ever appear, so a name can never hold `/` or `..`, and two keys that
    /// differ only in letter case stay apart even on a case-insensitive file system.
    pub fn dir_name(&self) -> Option<String> {
        if self.is_agent() {
            return None;
        }
        let canonical = self.canonical();
        let encoded = base32_lower(canonical.as_bytes());
        if encoded.len() <= MAX_NAME_BYTES {
            return Some(encoded);
        }
        let digest = Sha256::digest(canonical.as_bytes());
        let mut name = String::from(HASHED_PREFIX);
        for byte in digest {
            name.push_str(&format!("{byte:02x}"));
        }
        Some(name)
    }

    /// The subject whose unhashed directory name is `name`; `None` for hashed names (their
    /// key is in the directory's `scope.json`) and for anything that is not such a name.
    pub fn from_dir_name(name: &str) -> Option<Subject> {
        let bytes = base32_lower_decode(name)?;
        let text = String::from_utf8(bytes).ok()?;
        let subject = Subject::parse(&text).ok()?;
        (subject.dir_name().as_deref() == Some(name)).then_some(subject)
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl Serialize for Subject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.canonical())
    }
}

impl<'de> Deserialize<'de> for Subject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Subject::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The default tenant and agent: one person's bot on one machine, where both are implied
/// by the workspace directory.
pub const DEFAULT_NAME: &str = "default";

/// A scope: one memory. Every piece of memory belongs to exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ScopeKey {
    /// Who runs the agent (one organisation of a shared server).
    pub tenant: String,
    /// Which agent.
    pub agent: String,
    /// Whose memory within the agent.
    pub subject: Subject,
}

impl ScopeKey {
    /// `subject` of agent `agent` of tenant `tenant`; both names follow the platform rule.
    pub fn new(tenant: &str, agent: &str, subject: Subject) -> Result<ScopeKey, ScopeError> {
        validate_platform(tenant)?;
        validate_platform(agent)?;
        Ok(ScopeKey {
            tenant: tenant.to_owned(),
            agent: agent.to_owned(),
            subject,
        })
    }

    /// `subject` of the default tenant's default agent (the embedded, one-workspace case).
    pub fn local(subject: Subject) -> ScopeKey {
        ScopeKey {
            tenant: DEFAULT_NAME.to_owned(),
            agent: DEFAULT_NAME.to_owned(),
            subject,
        }
    }

    /// The agent scope this scope reads shared files (`SOUL.md`, `skills/`) from.
    pub fn agent_scope(&self) -> ScopeKey {
        ScopeKey {
            subject: Subject::Agent,
            ..self.clone()
        }
    }
}

impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tenant == DEFAULT_NAME && self.agent == DEFAULT_NAME {
            write!(f, "{}", self.subject)
        } else {
            write!(f, "{}/{}/{}", self.tenant, self.agent, self.subject)
        }
    }
}

/// A short, printable excerpt of refused text for error messages.
pub(crate) fn preview(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .take(40)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if text.chars().count() > 40 {
        format!("{cleaned}…")
    } else {
        cleaned
    }
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// RFC 4648 base32, lowercase, unpadded.
fn base32_lower(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    for chunk in bytes.chunks(5) {
        let mut buffer = [0u8; 5];
        buffer[..chunk.len()].copy_from_slice(chunk);
        let n = buffer.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b));
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..chars {
            out.push(char::from(BASE32[((n >> (35 - 5 * i)) & 31) as usize]));
        }
    }
    out
}

/// Decodes [`base32_lower`]; `None` for anything it could not have written.
fn base32_lower_decode(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || matches!(text.len() % 8, 1 | 3 | 6) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    for chunk in text.as_bytes().chunks(8) {
        let mut n = 0u64;
        for (i, &c) in chunk.iter().enumerate() {
            let value = BASE32.iter().position(|&a| a == c)? as u64;
            n |= value << (35 - 5 * i);
        }
        let len = chunk.len() * 5 / 8;
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[3..3 + len]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_round_trips() {
        for text in [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdef",
            "user:telegram:1",
        ] {
            let encoded = base32_lower(text.as_bytes());
            if !text.is_empty() {
                assert_eq!(
                    base32_lower_decode(&encoded).as_deref(),
                    Some(text.as_bytes())
                );
            }
        }
        assert_eq!(base32_lower(b"foobar"), "mzxw6ytboi");
    }
}

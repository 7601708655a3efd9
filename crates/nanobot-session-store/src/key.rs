//! Session keys and the file names derived from them.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::error::SessionError;

/// The longest key accepted, in UTF-8 bytes. Chat ids are short; a kilobyte leaves room for
/// thread keys and namespaced ids while refusing pasted documents.
pub const MAX_KEY_BYTES: usize = 1024;

/// Longest base64url file stem before the hashed fallback: 255 bytes of NAME_MAX, minus
/// `.jsonl`, minus room for temporary and sidecar suffixes.
const MAX_STEM_BYTES: usize = 200;

/// Prefix of hashed file stems. `~` is outside the base64url alphabet, so a hashed stem can
/// never be mistaken for the encoding of another key.
const HASHED_STEM_PREFIX: &str = "~h";

/// A validated session key, by convention `channel:chat_id` (e.g. `telegram:42`).
///
/// Any non-empty string up to [`MAX_KEY_BYTES`] without NUL characters is accepted; slashes,
/// dots and colons are fine because file names are derived by encoding, never by pasting
/// the key into a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey(String);

impl SessionKey {
    /// Validates `key`.
    pub fn new(key: impl Into<String>) -> Result<Self, SessionError> {
        let key = key.into();
        let reason = if key.is_empty() {
            Some("it is empty".to_owned())
        } else if key.len() > MAX_KEY_BYTES {
            Some(format!(
                "it has {} bytes, more than the {MAX_KEY_BYTES} allowed",
                key.len()
            ))
        } else if key.contains('\0') {
            Some("it contains a NUL character".to_owned())
        } else {
            None
        };
        match reason {
            Some(reason) => Err(SessionError::InvalidKey {
                key: preview(&key),
                reason,
            }),
            None => Ok(SessionKey(key)),
        }
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The channel part: everything before the first colon, or the whole key.
    pub fn channel(&self) -> &str {
        self.0
            .split_once(':')
            .map_or(&self.0, |(channel, _)| channel)
    }

    /// Whether this is an internal session that idle compaction and listings for people
    /// skip (`dream:` keys).
    pub fn is_internal(&self) -> bool {
        self.0.starts_with("dream:")
    }

    /// A short, stable stand-in for the key in logs (the first 12 hex digits of its
    /// SHA-256): a key names a person's chat, so logs at info level carry this instead.
    pub fn log_id(&self) -> String {
        let digest = Sha256::digest(self.0.as_bytes());
        digest[..6].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The file stem nanobot-ai uses: unpadded base64url of the key's UTF-8 bytes. Keys whose
    /// encoding would not fit a file name get `~h` and the SHA-256 of the key instead (the
    /// metadata record keeps the full key, and loading checks it).
    pub fn storage_stem(&self) -> String {
        let encoded = base64url_encode(self.0.as_bytes());
        if encoded.len() <= MAX_STEM_BYTES {
            return encoded;
        }
        let digest = Sha256::digest(self.0.as_bytes());
        let mut stem = String::from(HASHED_STEM_PREFIX);
        for byte in digest {
            stem.push_str(&format!("{byte:02x}"));
        }
        stem
    }

    /// The key a canonical base64url file stem encodes; `None` for hashed stems, padded or
    /// non-canonical encodings and foreign files.
    pub fn from_storage_stem(stem: &str) -> Option<SessionKey> {
        let bytes = base64url_decode(stem)?;
        let key = String::from_utf8(bytes).ok()?;
        let key = SessionKey::new(key).ok()?;
        (base64url_encode(key.as_str().as_bytes()) == stem).then_some(key)
    }

    /// Whether `stem` is a hashed stem (its key is only in the file's metadata).
    pub fn is_hashed_stem(stem: &str) -> bool {
        stem.starts_with(HASHED_STEM_PREFIX)
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SessionKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for SessionKey {
    type Error = SessionError;

    fn try_from(key: &str) -> Result<Self, Self::Error> {
        SessionKey::new(key)
    }
}

impl TryFrom<String> for SessionKey {
    type Error = SessionError;

    fn try_from(key: String) -> Result<Self, Self::Error> {
        SessionKey::new(key)
    }
}

/// A short, printable excerpt of a refused key for error messages.
fn preview(key: &str) -> String {
    let cleaned: String = key
        .chars()
        .take(40)
        .map(|c| if c == '\0' { '␀' } else { c })
        .collect();
    if key.chars().count() > 40 {
        format!("{cleaned}…")
    } else {
        cleaned
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// RFC 4648 base64 with the URL alphabet and no padding.
pub(crate) fn base64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Decodes unpadded base64url; `None` on any character outside the alphabet, on padding
/// and on an impossible length.
pub(crate) fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let value = ALPHABET.iter().position(|&a| a == c)? as u32;
            n |= value << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    Some(out)
}

//! The current message: text, images, runtime-context blocks and explicitly invoked skills,
//! and its merge into a trailing message of the same role.

use nanobot_llm_port::{Content, ContentPart, Message};
use serde_json::{Value, json};

use crate::error::ContextError;

/// Who speaks the current message. Always the user in a bot's turn; an assistant message
/// exists for callers that replay a transcript.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Speaker {
    /// A user turn: images and runtime context are attached.
    #[default]
    User,
    /// An assistant message: text only.
    Assistant,
}

/// An image attached to the current message. The caller reads the file (the builder does
/// no IO); the builder checks that the bytes are an image and inlines them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Where the image came from (reported back, never sent to the model).
    pub path: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// Context a runtime provider adds to a user turn (a quoted excerpt, an active goal, ...),
/// appended after the user's text and persisted with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeBlock {
    /// What produced it (`webui_quote`, `goal`, ...).
    pub source: String,
    /// The text, already wrapped by its provider.
    pub content: String,
}

impl RuntimeBlock {
    /// A block from `source`.
    pub fn new(source: impl Into<String>, content: impl Into<String>) -> Self {
        RuntimeBlock {
            source: source.into(),
            content: content.into(),
        }
    }
}

/// The message the turn is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentMessage {
    /// Who speaks it.
    pub speaker: Speaker,
    /// The text (with any attachment references the caller added).
    pub text: String,
    /// Images, in order; files that are not images are skipped.
    pub images: Vec<Image>,
    /// Runtime-context blocks, in the order their providers ran.
    pub runtime_context: Vec<RuntimeBlock>,
}

impl CurrentMessage {
    /// A user message with `text`.
    pub fn user(text: impl Into<String>) -> Self {
        CurrentMessage {
            text: text.into(),
            ..CurrentMessage::default()
        }
    }

    /// Adds an image.
    pub fn with_image(mut self, path: impl Into<String>, bytes: Vec<u8>) -> Self {
        self.images.push(Image {
            path: path.into(),
            bytes,
        });
        self
    }

    /// Adds a runtime-context block.
    pub fn with_runtime_context(mut self, block: RuntimeBlock) -> Self {
        self.runtime_context.push(block);
        self
    }
}

/// What was appended to the user's content as runtime context, so the caller can persist it
/// with the message (nanobot-ai's `_runtime_context`) and views can remove it exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContextMarker {
    /// The blocks' sources, in order.
    pub sources: Vec<String>,
    /// How the blocks were appended.
    pub appended: Appended,
}

/// How runtime context was appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// To text content, as this suffix (after a blank line).
    Suffix(String),
    /// To content with images, as these text parts.
    Blocks(Vec<String>),
}

impl RuntimeContextMarker {
    /// The marker as nanobot-ai persists it on the stored user message
    /// (`{"version": 1, "sources": [...], "suffix": ...}` or `"blocks": [...]`).
    pub fn to_json(&self) -> Value {
        match &self.appended {
            Appended::Suffix(suffix) => {
                json!({"version": 1, "sources": self.sources, "suffix": suffix})
            }
            Appended::Blocks(blocks) => json!({
                "version": 1,
                "sources": self.sources,
                "blocks": blocks.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>(),
            }),
        }
    }
}

/// The validated blocks: source and content trimmed, empty contents dropped.
pub(crate) fn validate_blocks(blocks: &[RuntimeBlock]) -> Result<Vec<RuntimeBlock>, ContextError> {
    let mut out = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.iter().enumerate() {
        let source = block.source.trim();
        if source.is_empty() {
            return Err(ContextError::EmptyRuntimeSource { index });
        }
        let content = block.content.trim();
        if !content.is_empty() {
            out.push(RuntimeBlock::new(source, content));
        }
    }
    Ok(out)
}

/// The current message's content: images first (when any are images), then the text; and
/// the paths of the images used.
pub(crate) fn content(message: &CurrentMessage) -> (Content, Vec<String>) {
    if message.speaker != Speaker::User || message.images.is_empty() {
        return (Content::Text(message.text.clone()), Vec::new());
    }
    let mut parts = Vec::with_capacity(message.images.len() + 1);
    let mut paths = Vec::new();
    for image in &message.images {
        let Some(mime) = sniff_image(&image.bytes).or_else(|| mime_from_extension(&image.path))
        else {
            continue;
        };
        parts.push(ContentPart::image_data(mime, &base64(&image.bytes)));
        paths.push(image.path.clone());
    }
    if parts.is_empty() {
        return (Content::Text(message.text.clone()), Vec::new());
    }
    parts.push(ContentPart::text(message.text.clone()));
    (Content::Parts(parts), paths)
}

/// Appends runtime-context blocks to `content`; the marker when there were any.
pub(crate) fn append_runtime_context(
    content: &mut Content,
    blocks: &[RuntimeBlock],
) -> Option<RuntimeContextMarker> {
    if blocks.is_empty() {
        return None;
    }
    let sources = blocks.iter().map(|b| b.source.clone()).collect();
    let appended = match content {
        Content::Parts(parts) => {
            let texts: Vec<String> = blocks.iter().map(|b| b.content.clone()).collect();
            parts.extend(texts.iter().map(|t| ContentPart::text(t.clone())));
            Appended::Blocks(texts)
        }
        Content::Text(text) => {
            let suffix = blocks
                .iter()
                .map(|b| b.content.as_str())
                .collect::<Vec<_>>()
                .join("\n\n");
            if text.is_empty() {
                text.push_str(&suffix);
            } else {
                text.push_str("\n\n");
                text.push_str(&suffix);
            }
            Appended::Suffix(suffix)
        }
    };
    Some(RuntimeContextMarker { sources, appended })
}

/// Adds `message` at the end of `messages`, merged into the last message when both are
/// user (or both assistant) messages: two texts join with a blank line (an empty side
/// yields the other), anything else concatenates as parts.
pub(crate) fn push_merged(messages: &mut Vec<Message>, message: Message) {
    let same_role =
        messages.len() > 1 && messages.last().map(Message::role) == Some(message.role());
    if !same_role {
        messages.push(message);
        return;
    }
    let Some(last) = messages.last_mut() else {
        messages.push(message);
        return;
    };
    let new = match message {
        Message::User(m) => Some(m.content),
        Message::Assistant(m) => m.content,
        _ => None,
    };
    let slot = match last {
        Message::User(m) => &mut m.content,
        Message::Assistant(m) => m.content.get_or_insert(Content::Text(String::new())),
        _ => return,
    };
    *slot = merge(std::mem::replace(slot, Content::Text(String::new())), new);
}

fn merge(left: Content, right: Option<Content>) -> Content {
    match (left, right) {
        (left, None) => left,
        (Content::Text(l), Some(Content::Text(r))) => {
            if l.is_empty() {
                Content::Text(r)
            } else if r.is_empty() {
                Content::Text(l)
            } else {
                Content::Text(format!("{l}\n\n{r}"))
            }
        }
        (l, Some(r)) => {
            let mut parts = into_parts(l);
            parts.extend(into_parts(r));
            Content::Parts(parts)
        }
    }
}

fn into_parts(content: Content) -> Vec<ContentPart> {
    match content {
        Content::Text(text) => vec![ContentPart::text(text)],
        Content::Parts(parts) => parts,
    }
}

/// The names referenced as `$name` in `text`, first occurrence first: a `$` not preceded
/// by a word character or another `$`, then letters, digits, `_` or `-`.
pub(crate) fn skill_references(text: &str) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let mut previous: Option<char> = None;
    for (at, ch) in text.char_indices() {
        let prev = previous;
        previous = Some(ch);
        if ch != '$' {
            continue;
        }
        if prev.is_some_and(|p| p == '$' || p == '_' || p.is_alphanumeric()) {
            continue;
        }
        let rest = &text[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        if end > 0 && !names.contains(&&rest[..end]) {
            names.push(&rest[..end]);
        }
    }
    names
}

/// The image type from the file's first bytes (PNG, JPEG, GIF, WebP).
fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The image type from the file name, as Python's `mimetypes` guesses it.
fn mime_from_extension(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" | "jpe" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "svg" => "image/svg+xml",
        "tif" | "tiff" => "image/tiff",
        "ico" => "image/vnd.microsoft.icon",
        "avif" => "image/avif",
        "heic" => "image/heic",
        _ => return None,
    })
}

/// Standard base64 with padding.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn skill_references_follow_nanobot() {
        assert_eq!(skill_references("use $review now"), ["review"]);
        assert!(skill_references("a$review $$review").is_empty());
        assert_eq!(skill_references("$alpha $alpha $beta"), ["alpha", "beta"]);
        assert_eq!(skill_references("($x-y_z)"), ["x-y_z"]);
        assert_eq!(skill_references("é$no"), Vec::<&str>::new());
    }
}

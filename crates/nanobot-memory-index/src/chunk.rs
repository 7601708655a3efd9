//! What an index holds: chunks of text, each named by the source a search result shows the
//! model (`history#12`, `MEMORY.md#Travel`, `session:telegram:42#7`), and how the three
//! kinds of memory are cut into them.

use chrono::NaiveDateTime;
use nanobot_llm_port::tokens::TokenCounter;
use serde::{Deserialize, Serialize};

/// Where a chunk comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A journal entry (`memory/history.jsonl`).
    History,
    /// A section of a durable memory file (`MEMORY.md`, `USER.md`, `SOUL.md`).
    Memory,
    /// A user or assistant message of a session.
    Sessions,
}

impl SourceKind {
    /// Every kind, in a fixed order.
    pub const ALL: [SourceKind; 3] = [
        SourceKind::History,
        SourceKind::Memory,
        SourceKind::Sessions,
    ];

    /// The name the tool's `sources` argument uses.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::History => "history",
            SourceKind::Memory => "memory",
            SourceKind::Sessions => "sessions",
        }
    }

    /// The kind a `sources` name stands for.
    pub fn from_name(name: &str) -> Option<SourceKind> {
        SourceKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A piece of text an index can return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Which memory it is part of.
    pub kind: SourceKind,
    /// What replaces it as a whole: the entry (`history#12`), the file (`MEMORY.md`) or the
    /// message (`session:telegram:42#7`). See [`group_of`].
    pub group: String,
    /// The name a hit shows (`MEMORY.md#Travel`); several chunks of a long section share it.
    pub source: String,
    /// Its position among the chunks of its group, from 0.
    pub part: u32,
    /// The text as written (snippets come from it; the index holds its normalised tokens).
    pub text: String,
    /// When it was written, where known.
    pub at: Option<NaiveDateTime>,
}

/// The source name of journal entry `cursor`.
pub fn history_source(cursor: u64) -> String {
    format!("history#{cursor}")
}

/// The source name of message `seq` (0-based, every role counted) of session `key`.
pub fn session_source(key: &str, seq: usize) -> String {
    format!("{}{seq}", session_prefix(key))
}

/// What the sources of every message of session `key` start with (`session:telegram:42#`):
/// remove it to forget the session.
pub fn session_prefix(key: &str) -> String {
    format!("session:{key}#")
}

/// The group a source belongs to: a memory file's sections are replaced together when the
/// file changes; an entry and a message are each their own group.
pub fn group_of(source: &str) -> &str {
    if source.starts_with("history#") || source.starts_with("session:") {
        return source;
    }
    source.split_once('#').map_or(source, |(file, _)| file)
}

/// Reads the timestamps nanobot writes: `2026-03-01 09:30` in the journal, ISO 8601 in
/// sessions (with or without fractions). Anything else is no time at all.
pub fn parse_timestamp(text: &str) -> Option<NaiveDateTime> {
    let text = text.trim();
    [
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S%.f",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
}

/// The chunk of one journal entry.
pub fn journal_chunk(cursor: u64, timestamp: &str, content: &str) -> Chunk {
    let source = history_source(cursor);
    Chunk {
        kind: SourceKind::History,
        group: source.clone(),
        source,
        part: 0,
        text: content.to_owned(),
        at: parse_timestamp(timestamp),
    }
}

/// The chunk of one session message, or none: only user and assistant text is indexed
/// (tool calls and tool results would repeat what the messages around them say, and a
/// result recalled from memory must not be found again as if it were new).
pub fn session_chunk(
    key: &str,
    seq: usize,
    role: &str,
    content: &str,
    timestamp: Option<&str>,
) -> Option<Chunk> {
    if !matches!(role, "user" | "assistant") || content.trim().is_empty() {
        return None;
    }
    let source = session_source(key, seq);
    Some(Chunk {
        kind: SourceKind::Sessions,
        group: source.clone(),
        source,
        part: 0,
        text: content.to_owned(),
        at: timestamp.and_then(parse_timestamp),
    })
}

/// How a memory file is cut: at headings, then a long section into windows of about
/// `max_tokens` with `overlap_tokens` repeated from the window before (OpenClaw's 400/80).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Chunking {
    /// The most tokens a chunk should hold.
    pub max_tokens: usize,
    /// How many tokens of the previous window the next one repeats.
    pub overlap_tokens: usize,
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking {
            max_tokens: 400,
            overlap_tokens: 80,
        }
    }
}

/// The chunks of memory file `file` (`MEMORY.md`): one per heading's section (the heading
/// line included, since it names the topic), long sections in overlapping windows. Text
/// before the first heading is the section `file#` (empty heading). Empty sections are
/// left out. Sources repeat when headings do; hits are told apart by part.
pub fn memory_chunks(
    file: &str,
    text: &str,
    at: Option<NaiveDateTime>,
    counter: &dyn TokenCounter,
    chunking: Chunking,
) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut heading = String::new();
    let mut section: Vec<&str> = Vec::new();
    let mut part = 0u32;
    let mut emit = |heading: &str, section: &[&str], chunks: &mut Vec<Chunk>| {
        if section
            .iter()
            .all(|line| line.trim().is_empty() || is_heading(line).is_some())
        {
            return;
        }
        let source = format!("{file}#{heading}");
        for window in windows(&section.join("\n"), counter, chunking) {
            chunks.push(Chunk {
                kind: SourceKind::Memory,
                group: file.to_owned(),
                source: source.clone(),
                part,
                text: window,
                at,
            });
            part += 1;
        }
    };
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        match is_heading(line).filter(|_| !in_fence) {
            Some(title) => {
                emit(&heading, &section, &mut chunks);
                heading = title.to_owned();
                section = vec![line];
            }
            None => section.push(line),
        }
    }
    emit(&heading, &section, &mut chunks);
    chunks
}

/// The title of a Markdown ATX heading (`## Travel` → `Travel`).
fn is_heading(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

/// `text` in windows of at most `max_tokens` (a single piece longer than that is cut
/// at word, then character, boundaries), each starting with up to `overlap_tokens` of the
/// end of the window before.
fn windows(text: &str, counter: &dyn TokenCounter, chunking: Chunking) -> Vec<String> {
    let max = chunking.max_tokens.max(1);
    if counter.count(text) <= max {
        return vec![text.trim_end().to_owned()];
    }
    let pieces: Vec<(String, usize)> = pieces(text, counter, max);
    let mut out = Vec::new();
    let mut start = 0;
    while start < pieces.len() {
        let mut end = start;
        let mut total = 0;
        while end < pieces.len() && (end == start || total + pieces[end].1 <= max) {
            total += pieces[end].1;
            end += 1;
        }
        out.push(
            pieces[start..end]
                .iter()
                .map(|(piece, _)| piece.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        );
        if end >= pieces.len() {
            break;
        }
        // Step back over the last pieces of this window that fit in the overlap, never
        // back to where this window started (so every window moves forward).
        let mut next = end;
        let mut overlap = 0;
        while next > start + 1 && overlap + pieces[next - 1].1 <= chunking.overlap_tokens {
            overlap += pieces[next - 1].1;
            next -= 1;
        }
        start = next;
    }
    out
}

/// Paragraphs and lines of `text` with their token counts; a line longer than `max` tokens
/// is cut into word groups, a word longer than that into character groups.
fn pieces(text: &str, counter: &dyn TokenCounter, max: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let count = counter.count(line);
        if count <= max {
            out.push((line.to_owned(), count));
            continue;
        }
        let mut group = String::new();
        let mut group_count = 0;
        for word in line.split_whitespace() {
            let word_count = counter.count(word) + 1;
            if word_count > max {
                if !group.is_empty() {
                    out.push((std::mem::take(&mut group), group_count));
                    group_count = 0;
                }
                let chars: Vec<char> = word.chars().collect();
                // A word with no spaces in it (a CJK paragraph, a blob): cut by characters;
                // for CJK a cut can hold somewhat more than `max` tokens, which is counted.
                for cut in chars.chunks(max) {
                    let cut: String = cut.iter().collect();
                    let cut_count = counter.count(&cut);
                    out.push((cut, cut_count));
                }
                continue;
            }
            if group_count + word_count > max && !group.is_empty() {
                out.push((std::mem::take(&mut group), group_count));
                group_count = 0;
            }
            if !group.is_empty() {
                group.push(' ');
            }
            group.push_str(word);
            group_count += word_count;
        }
        if !group.is_empty() {
            out.push((group, group_count));
        }
    }
    out
}

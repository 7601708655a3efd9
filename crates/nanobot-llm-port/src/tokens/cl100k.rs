//! `cl100k_base` counts without a regex engine: tiktoken's pre-tokenizer written out as code
//! (the engine's anchored searches were most of the time of a count), each piece's byte-pair
//! count from `bpe-openai`'s tables, a per-thread cache of short pieces (`cache.rs`), and
//! long pieces outside ASCII cut where no token can cross (`seams.rs`).
//!
//! The pattern, whose alternatives are tried in order at each position:
//! `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*`
//! `|\s*[\r\n]+|\s+(?!\S)|\s+`. The tests hold every piece to `bpe-openai`'s own splitter.

use std::cell::RefCell;
use std::sync::LazyLock;

use bpe_openai::byte_pair_encoding::BytePairEncoding;

use cache::PieceCache;

mod cache;
mod seams;

/// The number of `cl100k_base` tokens of `text`.
pub(super) fn count(text: &str) -> usize {
    let bpe = &bpe_openai::cl100k_base().bpe;
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        Pieces::new(text)
            .map(|piece| count_piece(&mut cache, bpe, piece.as_bytes()))
            .sum()
    })
}

thread_local! {
    static CACHE: RefCell<PieceCache> = RefCell::new(PieceCache::default());
}

/// The count of one pre-tokenizer piece.
fn count_piece(cache: &mut PieceCache, bpe: &BytePairEncoding, piece: &[u8]) -> usize {
    if piece.is_ascii() || piece.len() <= 7 {
        return count_part(cache, bpe, piece);
    }
    // Outside ASCII, a long piece is usually characters seen before in a new order (Chinese
    // has no spaces): counted by its parts, each from the cache (`seams.rs`).
    if let Some(tokens) = cache.get(piece) {
        return tokens;
    }
    let mut tokens = 0;
    seams::cl100k().for_each_part(bpe, piece, |part| tokens += count_part(cache, bpe, part));
    cache.put(piece, tokens);
    tokens
}

/// The count of a piece or a part of one, from the cache when it is short.
fn count_part(cache: &mut PieceCache, bpe: &BytePairEncoding, part: &[u8]) -> usize {
    if part.len() == 1 {
        // Every byte is a token of its own.
        return 1;
    }
    cache.get_or_count(part, || bpe.count(part))
}

/// The pre-tokenizer's pieces of a text, in order; together they are the text.
pub(crate) struct Pieces<'a> {
    rest: &'a str,
}

impl<'a> Pieces<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Pieces { rest: text }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let len = piece_len(self.rest);
        let (piece, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(piece)
    }
}

/// What the pattern tells apart about a character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\r` or `\n`.
    Newline,
    /// Any other `\s`.
    Space,
    /// Everything else.
    Other,
}

fn class(c: char) -> Class {
    LETTERS.class(c)
}

/// The class of each ASCII character, looked up instead of matched (most text is ASCII).
static ASCII_CLASSES: [Class; 128] = {
    let mut classes = [Class::Other; 128];
    let mut byte = 0;
    while byte < 128 {
        classes[byte] = match byte as u8 {
            b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
            b'0'..=b'9' => Class::Number,
            b'\r' | b'\n' => Class::Newline,
            b' ' | b'\t' | b'\x0B' | b'\x0C' => Class::Space,
            _ => Class::Other,
        };
        byte += 1;
    }
    classes
};

/// The byte length of the piece `rest` starts with (`rest` is not empty).
fn piece_len(rest: &str) -> usize {
    let mut chars = rest.chars();
    let Some(first) = chars.next() else {
        return 0;
    };
    let after_first = &rest[first.len_utf8()..];
    if first == '\''
        && let Some(len) = contraction_len(after_first)
    {
        return 1 + len;
    }
    let second = after_first.chars().next().map(class);
    match class(first) {
        Class::Letter => run_len(rest, |k| k == Class::Letter),
        Class::Space | Class::Other if second == Some(Class::Letter) => {
            first.len_utf8() + run_len(after_first, |k| k == Class::Letter)
        }
        Class::Number => {
            let mut len = 0;
            for c in rest.chars().take(3) {
                if class(c) != Class::Number {
                    break;
                }
                len += c.len_utf8();
            }
            len
        }
        Class::Other => symbols_len(rest),
        Class::Space if first == ' ' && second == Some(Class::Other) => {
            1 + symbols_len(after_first)
        }
        Class::Space | Class::Newline => whitespace_len(rest),
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d` without the apostrophe, any case (`ſ` folds to `s`).
fn contraction_len(after: &str) -> Option<usize> {
    let mut chars = after.chars();
    let first = chars.next()?;
    let second = chars.next();
    match first {
        's' | 'S' | 't' | 'T' | 'm' | 'M' | 'd' | 'D' => Some(1),
        'ſ' => Some(first.len_utf8()),
        'r' | 'R' | 'v' | 'V' if matches!(second, Some('e' | 'E')) => Some(2),
        'l' | 'L' if matches!(second, Some('l' | 'L')) => Some(2),
        _ => None,
    }
}

/// The bytes at the start of `text` whose characters are all of a class `keep` accepts.
fn run_len(text: &str, keep: impl Fn(Class) -> bool) -> usize {
    // ASCII byte by byte; characters are decoded from the first other byte on.
    let ascii = text
        .bytes()
        .position(|b| !b.is_ascii() || !keep(ASCII_CLASSES[usize::from(b)]))
        .unwrap_or(text.len());
    if text.as_bytes().get(ascii).is_none_or(u8::is_ascii) {
        return ascii;
    }
    let rest = &text[ascii..];
    let letters = &*LETTERS;
    ascii
        + rest
            .char_indices()
            .find(|&(_, c)| !keep(letters.class(c)))
            .map_or(rest.len(), |(at, _)| at)
}

/// `[^\s\p{L}\p{N}]+[\r\n]*`.
fn symbols_len(text: &str) -> usize {
    let symbols = run_len(text, |k| k == Class::Other);
    symbols + run_len(&text[symbols..], |k| k == Class::Newline)
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at a run of whitespace.
fn whitespace_len(text: &str) -> usize {
    let run = run_len(text, |k| matches!(k, Class::Space | Class::Newline));
    let spaces = &text[..run];
    // Up to and including the run's last line break, when it has one.
    if let Some(last_break) = spaces.rfind(['\r', '\n']) {
        return last_break + 1;
    }
    if run == text.len() {
        return run;
    }
    // Followed by a non-space: all but the last space, which goes with what follows.
    match spaces.char_indices().next_back() {
        Some((last, _)) if last > 0 => last,
        _ => run,
    }
}

/// `\p{L}` (general category Letter), from the Unicode tables of the regex crates already
/// in the tree; a bitmap for the Basic Multilingual Plane, ranges beyond it.
struct Letters {
    bmp: Vec<u64>,
    astral: Vec<(char, char)>,
}

static LETTERS: LazyLock<Letters> = LazyLock::new(Letters::load);

impl Letters {
    fn load() -> Letters {
        let mut letters = Letters {
            bmp: vec![0; 0x10000 / 64],
            astral: Vec::new(),
        };
        for (start, end) in letter_ranges() {
            for code in u32::from(start)..=u32::from(end) {
                if code < 0x10000 {
                    letters.bmp[code as usize / 64] |= 1 << (code % 64);
                }
            }
            if u32::from(end) >= 0x10000 {
                letters.astral.push((start.max('\u{10000}'), end));
            }
        }
        letters
    }

    fn class(&self, c: char) -> Class {
        if c.is_ascii() {
            ASCII_CLASSES[c as usize]
        } else if self.contains(c) {
            Class::Letter
        } else if c.is_numeric() {
            Class::Number
        } else if c.is_whitespace() {
            Class::Space
        } else {
            Class::Other
        }
    }

    fn contains(&self, c: char) -> bool {
        let code = u32::from(c);
        if code < 0x10000 {
            return self.bmp[code as usize / 64] & (1 << (code % 64)) != 0;
        }
        self.astral
            .binary_search_by(|&(start, end)| {
                if end < c {
                    std::cmp::Ordering::Less
                } else if start > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }
}

/// The ranges of `\p{L}` as `regex-syntax` knows them.
fn letter_ranges() -> Vec<(char, char)> {
    use regex_syntax::hir::{Class as HirClass, HirKind};
    // A fixed pattern the crate's own tables answer; it cannot fail to parse.
    let Ok(hir) = regex_syntax::parse(r"\p{L}") else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(HirClass::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_bench_workload::testing::random_texts;

    /// `bpe-openai`'s own pre-tokenizer: the regex our code replaces.
    fn reference(text: &str) -> Vec<&str> {
        bpe_openai::cl100k_base().split(text).collect()
    }

    fn assert_same_pieces(text: &str) {
        let ours: Vec<&str> = Pieces::new(text).collect();
        assert_eq!(ours, reference(text), "pieces of {text:?}");
    }

    #[test]
    fn pieces_match_the_regex_on_the_benchmark_messages() {
        let stream = nanobot_bench_workload::message_stream(7, 2_000);
        for message in &stream {
            let text = serde_json::to_string(message).unwrap_or_default();
            assert_same_pieces(&text);
            if let Some(content) = message.get("content").and_then(serde_json::Value::as_str) {
                assert_same_pieces(content);
                assert_eq!(count(content), bpe_openai::cl100k_base().count(content));
            }
        }
    }

    #[test]
    fn pieces_match_the_regex_on_random_mixtures_of_every_class() {
        // Letters of several scripts and cases (`ſ` folds to `s`, `ʰ` is a modifier letter),
        // digits and other numbers, combining marks (not letters), every kind of space and
        // line break, apostrophes and the letters of contractions, symbols, emoji.
        let alphabet: Vec<String> = "aZéſsStTrReEvVlLdDmMk'''1٣Ⅻ½ \t\n\r\u{3000}\u{a0}\u{85}\u{2028}\u{b}我語!.\",-_😀𝒜\u{301}ʰ🙂"
            .chars()
            .map(String::from)
            .collect();
        for text in random_texts(7, &alphabet, 23).take(20_000) {
            assert_same_pieces(&text);
        }
    }

    #[test]
    fn counts_match_the_reference_on_random_text_of_many_scripts() {
        // Long runs of letters of scripts without spaces, mixed with Latin words, spaces and
        // punctuation: the pieces the seams cut, and the cache seeing them again.
        let words = [
            "我们",
            "今天",
            "去",
            "公园",
            "散步",
            "東京",
            "の",
            "天気",
            "は",
            "晴れ",
            "です",
            "한국어",
            "를",
            "배우다",
            "привет",
            "мир",
            "naïve",
            "über",
            "hello",
            " ",
            "、",
            "。",
            "！",
            "42",
            "😀",
            "ção",
            "\n",
        ];
        let reference = bpe_openai::cl100k_base();
        for text in random_texts(11, &words, 30).take(3_000) {
            assert_eq!(count(&text), reference.count(&text), "{text:?}");
        }
    }

    #[test]
    fn counts_match_the_reference_and_the_cache_changes_nothing() {
        let texts = [
            "",
            "hello world",
            "I'm sure they'll say it's fine, DON'T they?",
            "   leading and trailing   \n\n  ",
            "数字 12345 and ½ of ⅻ",
            "emoji 😀😀 and tabs\t\there",
        ];
        for _ in 0..2 {
            for text in texts {
                assert_eq!(
                    count(text),
                    bpe_openai::cl100k_base().count(text),
                    "{text:?}"
                );
            }
        }
    }
}

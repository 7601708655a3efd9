//! The one text normaliser of every backend: what is indexed and what is searched are the
//! same tokens, so SQLite's FTS5 (`unicode61`) and PostgreSQL (`to_tsvector('simple', ..)`)
//! tokenise alike and rank the same words.
//!
//! 1. NFKC (full-width letters and digits become ASCII, compatibility forms fold);
//! 2. lower case;
//! 3. words are runs of letters, digits and combining marks; anything else separates;
//! 4. every run of CJK characters (Han, kana, Hangul) becomes its overlapping bigrams
//!    (`用户喜欢喝茶` → `用户 户喜 喜欢 欢喝 喝茶`), so a two-character query finds its
//!    sentence without a dictionary; a lone CJK character stays one token.
//!
//! Scripts written without spaces other than CJK (Thai, Lao, Khmer, Burmese) are kept as
//! whole runs: a query finds them only by the whole run (see `docs/SEARCH.md`).

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

/// A token longer than this many characters is cut: base64 blobs and hashes pasted into a
/// chat must not make index rows large (PostgreSQL refuses lexemes over 2,047 bytes).
pub const MAX_TOKEN_CHARS: usize = 64;

/// The tokens of `text`, in order (duplicates kept).
///
/// ```
/// use nanobot_memory_index::tokens;
/// assert_eq!(tokens("ＥＲＲ_Conn-Refused 5432"), ["err", "conn", "refused", "5432"]);
/// assert_eq!(tokens("用户喜欢喝茶。"), ["用户", "户喜", "喜欢", "欢喝", "喝茶"]);
/// ```
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |token| out.push(token.to_owned()));
    out
}

/// Calls `visit` with each token of `text`, in order, the same tokens as [`tokens`] without
/// a `String` for each (the words lane counts words in its candidates this way).
///
/// ASCII is read as it is: NFKC and Unicode lower case leave it ASCII, and no ASCII
/// character composes with the one before it, so a lower-case ASCII word is visited as a
/// slice of `text`. Only the non-ASCII runs, with the ASCII character just before each (a
/// base an accent may compose with), go through NFKC, and only when the quick check says
/// they are not in NFKC already (Chinese and most accented text are).
pub fn for_each_token(text: &str, mut visit: impl FnMut(&str)) {
    let mut state = Tokenizer::default();
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let ascii_end = bytes[start..]
            .iter()
            .position(|b| !b.is_ascii())
            .map_or(bytes.len(), |n| start + n);
        let fast_end = if ascii_end < bytes.len() && ascii_end > start {
            ascii_end - 1
        } else {
            ascii_end
        };
        // Both ends of each part are at ASCII bytes or the text's ends: char boundaries.
        state.ascii(text.get(start..fast_end).unwrap_or_default(), &mut visit);
        if fast_end == bytes.len() {
            break;
        }
        let slow_end = bytes[ascii_end..]
            .iter()
            .position(u8::is_ascii)
            .map_or(bytes.len(), |n| ascii_end + n);
        state.unicode(text.get(fast_end..slow_end).unwrap_or_default(), &mut visit);
        start = slow_end;
    }
    state.finish(&mut visit);
}

/// The tokenizer's state between parts of a text: the word being read, the CJK run, and
/// a buffer for the CJK bigrams.
#[derive(Default)]
struct Tokenizer {
    word: String,
    cjk: Vec<char>,
    pair: String,
}

impl Tokenizer {
    /// An ASCII part: words that end inside it and have no capitals are visited as they
    /// are; the rest go through the word buffer.
    fn ascii(&mut self, part: &str, visit: &mut impl FnMut(&str)) {
        let bytes = part.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if !bytes[i].is_ascii_alphanumeric() {
                self.flush(visit);
                i += 1;
                continue;
            }
            let end = bytes[i..]
                .iter()
                .position(|b| !b.is_ascii_alphanumeric())
                .map_or(bytes.len(), |n| i + n);
            let word = &part[i..end];
            self.flush_cjk(visit);
            let complete = self.word.is_empty() && end < bytes.len();
            if complete && !word.bytes().any(|b| b.is_ascii_uppercase()) {
                visit(&word[..word.len().min(MAX_TOKEN_CHARS)]);
            } else {
                self.word
                    .extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
                if end < bytes.len() {
                    flush_word(&mut self.word, visit);
                }
            }
            i = end;
        }
    }

    /// A part that is not all ASCII, through NFKC (unless already in it) and lower case.
    fn unicode(&mut self, part: &str, visit: &mut impl FnMut(&str)) {
        if part.chars().all(nfkc_inert) || is_nfkc_quick(part.chars()) == IsNormalized::Yes {
            for c in part.chars() {
                self.char(c, visit);
            }
        } else {
            for c in part.nfkc() {
                self.char(c, visit);
            }
        }
    }

    /// One character after NFKC: a CJK run's (no case to fold), else lower-cased, a word's
    /// or a separator (no lower case is CJK).
    fn char(&mut self, c: char, visit: &mut impl FnMut(&str)) {
        if is_cjk(c) {
            flush_word(&mut self.word, visit);
            self.cjk.push(c);
            return;
        }
        for c in c.to_lowercase() {
            if c.is_alphanumeric() || is_mark(c) {
                self.flush_cjk(visit);
                self.word.push(c);
            } else {
                self.flush(visit);
            }
        }
    }

    fn flush(&mut self, visit: &mut impl FnMut(&str)) {
        flush_word(&mut self.word, visit);
        self.flush_cjk(visit);
    }

    /// The CJK run's bigrams (a lone character as itself).
    fn flush_cjk(&mut self, visit: &mut impl FnMut(&str)) {
        match self.cjk.len() {
            0 => return,
            1 => {
                self.pair.clear();
                self.pair.push(self.cjk[0]);
                visit(&self.pair);
            }
            _ => {
                for window in self.cjk.windows(2) {
                    self.pair.clear();
                    self.pair.extend(window);
                    visit(&self.pair);
                }
            }
        }
        self.cjk.clear();
    }

    fn finish(mut self, visit: &mut impl FnMut(&str)) {
        self.flush(visit);
    }
}

/// `text` as the backends index it: its tokens joined by single spaces.
pub fn normalize(text: &str) -> String {
    tokens(text).join(" ")
}

/// One term of a query after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTerm {
    /// The token.
    pub text: String,
    /// Whether it matches every token that starts with it: a lone CJK character, which
    /// the index only holds inside bigrams.
    pub prefix: bool,
}

/// The distinct terms of a query, in the order they first appear.
///
/// ```
/// use nanobot_memory_index::query_terms;
/// let terms = query_terms("茶 tea TEA");
/// assert_eq!(terms.len(), 2);
/// assert!(terms[0].prefix && !terms[1].prefix);
/// ```
pub fn query_terms(query: &str) -> Vec<QueryTerm> {
    let mut terms: Vec<QueryTerm> = Vec::new();
    for token in tokens(query) {
        if terms.iter().any(|t| t.text == token) {
            continue;
        }
        let mut chars = token.chars();
        let prefix = matches!((chars.next(), chars.next()), (Some(c), None) if is_cjk(c));
        terms.push(QueryTerm {
            text: token,
            prefix,
        });
    }
    terms
}

/// Characters NFKC leaves as they are and that compose with nothing before them: ASCII,
/// kana, Han ideographs and Hangul syllables (a syllable may compose with a final jamo
/// after it, which is not inert, so such text still goes through NFKC). A cheap test that
/// spares the quick check's table lookups for most Chinese, Japanese and Korean text.
fn nfkc_inert(c: char) -> bool {
    c.is_ascii()
        || matches!(c as u32,
            0x3041..=0x3096       // Hiragana (not the compatibility 309F)
            | 0x30A1..=0x30FA     // Katakana (not the compatibility 30FF)
            | 0x3400..=0x4DBF     // CJK extension A
            | 0x4E00..=0x9FFF     // CJK unified ideographs
            | 0xAC00..=0xD7A3     // Hangul syllables
        )
}

/// Whether `c` is written without spaces between words and indexed as bigrams.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3100..=0x312F    // Bopomofo
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x3134F  // CJK extensions B to G
    )
}

/// Combining marks that belong to the word before them (accents NFKC could not compose,
/// Indic vowel signs and viramas), which `char::is_alphanumeric` does not count.
fn is_mark(c: char) -> bool {
    matches!(c as u32,
        0x0300..=0x036F
        | 0x0483..=0x0489
        | 0x0591..=0x05BD
        | 0x0610..=0x061A
        | 0x064B..=0x065F
        | 0x0900..=0x0903
        | 0x093A..=0x094F
        | 0x0951..=0x0957
        | 0x0962..=0x0963
        | 0x0981..=0x0983
        | 0x09BC..=0x09D7
        | 0x0A01..=0x0A51
        | 0x0B01..=0x0B57
        | 0x0BBE..=0x0BCD
        | 0x0C00..=0x0C56
        | 0x0D00..=0x0D57
        | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF
        | 0x20D0..=0x20FF
        | 0xFE20..=0xFE2F
    )
}

fn flush_word(word: &mut String, visit: &mut impl FnMut(&str)) {
    if word.is_empty() {
        return;
    }
    match word.char_indices().nth(MAX_TOKEN_CHARS) {
        Some((cut, _)) => visit(&word[..cut]),
        None => visit(word),
    }
    word.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the whole text through NFKC and lower case, one character at a time;
    /// words cut at `MAX_TOKEN_CHARS`, CJK runs as their bigrams.
    fn reference(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut cjk: Vec<char> = Vec::new();
        let end_word = |word: &mut String, out: &mut Vec<String>| {
            if !word.is_empty() {
                out.push(word.chars().take(MAX_TOKEN_CHARS).collect());
                word.clear();
            }
        };
        let end_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
            match cjk.len() {
                0 => {}
                1 => out.push(cjk[0].to_string()),
                _ => out.extend(cjk.windows(2).map(|pair| pair.iter().collect::<String>())),
            }
            cjk.clear();
        };
        for c in text.nfkc().flat_map(char::to_lowercase) {
            if is_cjk(c) {
                end_word(&mut word, &mut out);
                cjk.push(c);
            } else if c.is_alphanumeric() || is_mark(c) {
                end_cjk(&mut cjk, &mut out);
                word.push(c);
            } else {
                end_word(&mut word, &mut out);
                end_cjk(&mut cjk, &mut out);
            }
        }
        end_word(&mut word, &mut out);
        end_cjk(&mut cjk, &mut out);
        out
    }

    #[test]
    fn ascii_runs_read_fast_give_the_tokens_of_the_whole_text_through_nfkc() {
        let texts = [
            "",
            "plain ASCII, with punctuation! and 42 numbers",
            "cafe\u{301} au lait",
            "e\u{301}",
            "\u{301}e",
            "Ａnna met 用户喜欢喝茶 at 5pm",
            "用户喜欢喝茶",
            "a用b户c",
            "ＥＲＲ_Conn-Refused 5432",
            "Kelvin \u{212A} and ﬁne ligatures",
            "mixed: naïve résumé, 東京 trip ok",
            "x\u{300}\u{301}y Å",
            "trailing e\u{301}",
            "한국어 text 테스트",
            "emoji 🙂 between words",
        ];
        let long = format!(
            "{} {}é {} 用户{}",
            "a".repeat(70),
            "B".repeat(80),
            "c".repeat(64),
            "d".repeat(65)
        );
        for text in texts.iter().copied().chain([long.as_str()]) {
            assert_eq!(tokens(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn random_mixes_of_ascii_marks_cjk_and_compatibility_forms_agree_with_the_definition() {
        let alphabet: Vec<char> = "aZe9 ._-\u{301}\u{308}\u{327}用户喝茶ＡＢ１\u{212A}ﬁ한\u{1100}\u{1161}\u{11A8}ÅéÖ🙂\u{0915}\u{094D}か\u{3099}가ｶﾞ\u{3000}"
            .chars()
            .collect();
        let mut seed: u64 = 31;
        for _ in 0..3_000 {
            let mut text = String::new();
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let length = (seed >> 59) as usize;
            for _ in 0..length {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
            }
            assert_eq!(tokens(&text), reference(&text), "{text:?}");
        }
    }
}

//! BERT's uncased WordPiece tokenizer, as the reference server (`llm/local_embed_server.py`)
//! and Hugging Face's `BertTokenizer` do it: drop control characters, space out CJK
//! characters, lower case, strip accents, split at whitespace and punctuation, then the
//! longest word pieces of the vocabulary from the left (`##` for a piece inside a word).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// A word longer than this many characters is one unknown token.
const MAX_WORD_CHARS: usize = 100;

/// The vocabulary and its special tokens.
pub(crate) struct WordPiece {
    vocab: HashMap<String, u32>,
    unknown: u32,
    pub(crate) cls: u32,
    pub(crate) sep: u32,
}

impl WordPiece {
    /// From `vocab.txt`: one piece per line, its id the line number.
    pub(crate) fn new(vocab_text: &str) -> Result<WordPiece, String> {
        let vocab: HashMap<String, u32> = vocab_text
            .lines()
            .enumerate()
            .map(|(i, line)| (line.to_owned(), i as u32))
            .collect();
        let id = |piece: &str| {
            vocab
                .get(piece)
                .copied()
                .ok_or_else(|| format!("the vocabulary has no {piece}"))
        };
        Ok(WordPiece {
            unknown: id("[UNK]")?,
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            vocab,
        })
    }

    /// How many pieces the vocabulary holds.
    pub(crate) fn len(&self) -> usize {
        self.vocab.len()
    }

    /// `[CLS]`, the pieces of `text`, `[SEP]`: at most `max` ids.
    pub(crate) fn ids(&self, text: &str, max: usize) -> Vec<u32> {
        let mut ids = vec![self.cls];
        for word in words(text) {
            if ids.len() >= max {
                break;
            }
            self.pieces(&word, &mut ids);
        }
        ids.truncate(max.saturating_sub(1).max(1));
        ids.push(self.sep);
        ids
    }

    fn pieces(&self, word: &str, ids: &mut Vec<u32>) {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() > MAX_WORD_CHARS {
            ids.push(self.unknown);
            return;
        }
        let mut found: Vec<u32> = Vec::new();
        let mut start = 0;
        let mut piece = String::new();
        while start < chars.len() {
            let mut end = chars.len();
            let mut matched = None;
            while start < end {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.extend(&chars[start..end]);
                if let Some(&id) = self.vocab.get(&piece) {
                    matched = Some(id);
                    break;
                }
                end -= 1;
            }
            let Some(id) = matched else {
                ids.push(self.unknown);
                return;
            };
            found.push(id);
            start = end;
        }
        ids.extend(found);
    }
}

/// The words and punctuation marks of `text`, cleaned, lower-cased, accents stripped.
fn words(text: &str) -> Vec<String> {
    let mut spaced = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\0' || c == '\u{FFFD}' || (is_control(c) && !matches!(c, '\t' | '\n' | '\r')) {
            continue;
        }
        if is_cjk(c) {
            spaced.push(' ');
            spaced.push(c);
            spaced.push(' ');
        } else {
            spaced.push(c);
        }
    }
    let folded: String = spaced
        .to_lowercase()
        .nfd()
        .filter(|&c| !is_combining_mark(c))
        .collect();
    let mut out = Vec::new();
    for token in folded.split_whitespace() {
        let mut current = String::new();
        for c in token.chars() {
            if is_punctuation(c) {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                out.push(c.to_string());
            } else {
                current.push(c);
            }
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

/// Control and format characters (Unicode categories Cc and Cf).
fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(c as u32,
            0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x180E | 0x200B..=0x200F
            | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
}

/// The characters BERT's tokenizer puts in a word of their own: ASCII symbols and Unicode
/// punctuation.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32,
            0x00A1 | 0x00A7 | 0x00AB | 0x00B6 | 0x00B7 | 0x00BB | 0x00BF | 0x037E | 0x0387
            | 0x055A..=0x055F | 0x0589 | 0x058A | 0x05BE | 0x05C0 | 0x05C3 | 0x05C6 | 0x05F3
            | 0x05F4 | 0x0609 | 0x060A | 0x060C | 0x060D | 0x061B | 0x061E | 0x061F
            | 0x066A..=0x066D | 0x06D4 | 0x0964 | 0x0965 | 0x0970 | 0x0E4F | 0x0E5A | 0x0E5B
            | 0x2010..=0x2027 | 0x2030..=0x2043 | 0x2045..=0x2051 | 0x2053..=0x205E
            | 0x207D | 0x207E | 0x208D | 0x208E | 0x2308..=0x230B | 0x2329 | 0x232A
            | 0x2768..=0x2775 | 0x27C5 | 0x27C6 | 0x27E6..=0x27EF | 0x2983..=0x2998
            | 0x29D8..=0x29DB | 0x29FC | 0x29FD | 0x2CF9..=0x2CFC | 0x2CFE | 0x2CFF
            | 0x2E00..=0x2E2E | 0x2E30..=0x2E4F | 0x3001..=0x3003 | 0x3008..=0x3011
            | 0x3014..=0x301F | 0x3030 | 0x303D | 0x30A0 | 0x30FB | 0xFE10..=0xFE19
            | 0xFE30..=0xFE52 | 0xFE54..=0xFE61 | 0xFE63 | 0xFE68 | 0xFE6A | 0xFE6B
            | 0xFF01..=0xFF03 | 0xFF05..=0xFF0A | 0xFF0C..=0xFF0F | 0xFF1A | 0xFF1B
            | 0xFF1F | 0xFF20 | 0xFF3B..=0xFF3D | 0xFF3F | 0xFF5B | 0xFF5D | 0xFF5F..=0xFF65)
}

/// The CJK ideographs BERT's tokenizer spaces out (not kana or Hangul).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn words_are_cleaned_folded_and_split_at_punctuation() {
        assert_eq!(
            words("Café, naïve! 我们 don't\u{200B}"),
            ["cafe", ",", "naive", "!", "我", "们", "don", "'", "t"]
        );
    }
}

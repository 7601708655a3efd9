//! Where a piece can be cut without changing its count.
//!
//! A byte-pair encoding only ever merges neighbours into a token of its vocabulary, so at a
//! position of a piece that no vocabulary token covers (with the piece's own bytes on both
//! sides), no merge ever crosses it: the two sides are encoded independently and their
//! counts add up. Chinese and Japanese text has no spaces, so a sentence (with any Latin
//! word written against it) is one pre-tokenizer piece, too long to cache and seldom seen
//! twice; cut at such seams, it becomes characters and short words the cache already holds.
//!
//! Only boundaries where a character outside ASCII meets another character are tried: few
//! vocabulary tokens cover those (between two ASCII characters thousands do).

use std::sync::LazyLock;

use bpe_openai::byte_pair_encoding::BytePairEncoding;

/// The vocabulary's tokens that cover a character boundary outside ASCII, by the two bytes
/// on either side of the boundary.
pub(super) struct Seams {
    /// One bit per byte pair: does any token cover a boundary between these two bytes?
    covered: Vec<u64>,
    /// `spans[starts[pair]..starts[pair + 1]]`: the (token, offset of the boundary in it)
    /// covering a boundary between the bytes of `pair`.
    starts: Vec<u32>,
    spans: Vec<(u32, u32)>,
}

static SEAMS: LazyLock<Seams> = LazyLock::new(|| Seams::of(&bpe_openai::cl100k_base().bpe));

/// The seams of `cl100k_base` (built on first use, from the vocabulary itself).
pub(super) fn cl100k() -> &'static Seams {
    &SEAMS
}

/// A boundary between the bytes `before` and `after` that a cut is tried at: `after` starts
/// a character, and one of the two is outside ASCII.
fn is_tried(before: u8, after: u8) -> bool {
    !is_continuation(after) && (!before.is_ascii() || !after.is_ascii())
}

/// A UTF-8 continuation byte (never the first byte of a character).
fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

fn pair(before: u8, after: u8) -> usize {
    usize::from(before) << 8 | usize::from(after)
}

impl Seams {
    fn of(bpe: &BytePairEncoding) -> Seams {
        let mut found: Vec<(u32, u32, u32)> = Vec::new();
        for token in 0..u32::try_from(bpe.num_tokens()).unwrap_or(u32::MAX) {
            let bytes = bpe.token_bytes(token);
            for at in 1..bytes.len() {
                if is_tried(bytes[at - 1], bytes[at]) {
                    let key = pair(bytes[at - 1], bytes[at]) as u32;
                    found.push((key, token, at as u32));
                }
            }
        }
        found.sort_unstable();
        let mut covered = vec![0u64; (1 << 16) / 64];
        let mut starts = vec![0u32; (1 << 16) + 1];
        for &(key, _, _) in &found {
            covered[key as usize / 64] |= 1 << (key % 64);
            starts[key as usize + 1] += 1;
        }
        for key in 0..1 << 16 {
            starts[key + 1] += starts[key];
        }
        let spans = found
            .into_iter()
            .map(|(_, token, at)| (token, at))
            .collect();
        Seams {
            covered,
            starts,
            spans,
        }
    }

    /// Calls `part` with the parts of `piece` between its seams, in order (the whole piece
    /// when it has none).
    pub(super) fn for_each_part(
        &self,
        bpe: &BytePairEncoding,
        piece: &[u8],
        mut part: impl FnMut(&[u8]),
    ) {
        let mut start = 0;
        for at in 1..piece.len() {
            if is_tried(piece[at - 1], piece[at]) && !self.is_covered(bpe, piece, at) {
                part(&piece[start..at]);
                start = at;
            }
        }
        part(&piece[start..]);
    }

    /// Does a vocabulary token lie over the boundary before `piece[at]`, matching the
    /// piece's bytes on both sides?
    fn is_covered(&self, bpe: &BytePairEncoding, piece: &[u8], at: usize) -> bool {
        let key = pair(piece[at - 1], piece[at]);
        if self.covered[key / 64] & (1 << (key % 64)) == 0 {
            return false;
        }
        let spans = &self.spans[self.starts[key] as usize..self.starts[key + 1] as usize];
        spans.iter().any(|&(token, offset)| {
            let bytes = bpe.token_bytes(token);
            at.checked_sub(offset as usize)
                .and_then(|from| piece.get(from..from + bytes.len()))
                .is_some_and(|there| there == bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobot_bench_workload::testing::random_texts;

    fn parts(piece: &str) -> Vec<String> {
        let bpe = &bpe_openai::cl100k_base().bpe;
        let mut out = Vec::new();
        cl100k().for_each_part(bpe, piece.as_bytes(), |part| {
            out.push(String::from_utf8_lossy(part).into_owned());
        });
        out
    }

    #[test]
    fn ascii_is_never_cut_and_parts_are_the_whole_piece() {
        assert_eq!(parts("hello"), ["hello"]);
        assert_eq!(parts(" world"), [" world"]);
        for piece in ["我们今天去公园hello", " über", "naïve", "日本語のテキスト"]
        {
            assert_eq!(parts(piece).concat(), piece);
        }
    }

    #[test]
    fn counts_of_the_parts_add_up_to_the_count_of_the_piece() {
        let bpe = &bpe_openai::cl100k_base().bpe;
        let alphabet: Vec<String> = "我们的是了不在有人这中大为上个国和地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实日军者意无力它与长把机十民第公此已工使情明性知全三又关点正业外将两高间由问很最重并物手应战向头文体政美相见被利什二等产或新己制身果加西斯月话合回特代内信表化老给世位次度门任常先海通教儿原东声提立及比员解水名真论处走义各入几口认条平系气题活尔更别打女变四神总何电数安少报才结反受目太量再感建务做接必场件计管期市直德资命山金指克许统区保至队形社便空决治展马科司五基眼书非则听白却界达光放强即像难且权思王象完设式色路记南品住告类求据程北边死张该交规万取拉格望觉术领共确传师观清今切院让识候带导争运笑飞风步改收根干造言联持组每济车亲极"
            .chars()
            .chain("aZéüïñ 'ſ.,!?1234\u{3000}、。「」—…“”’😀".chars())
            // Kana, Hangul, Cyrillic, Greek, Arabic, Devanagari: scripts with tokens of
            // several characters.
            .chain("のにはをたがでてとしれさあいうえおかきくけこアイウエオカキクケコ한국어는의이가을를에서привет мирздравствуйαβγδεζηθمرحباالعربيةनमस्तेहिंदी".chars())
            .map(String::from)
            .collect();
        let rounds = std::env::var("SEAMS_ROUNDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(40_000);
        // Two thirds Chinese alone, a third every script mixed.
        let chinese = random_texts(5, &alphabet[..200], 40).take(rounds * 2 / 3);
        let mixed = random_texts(6, &alphabet, 40).take(rounds / 3);
        for text in chinese.chain(mixed) {
            let whole = bpe.count(text.as_bytes());
            let mut sum = 0;
            cl100k().for_each_part(bpe, text.as_bytes(), |part| sum += bpe.count(part));
            assert_eq!(sum, whole, "{text:?} cut into {:?}", parts(&text));
        }
    }
}

//! A per-thread cache of the counts of short pieces (words repeat; the count of a piece never
//! depends on its neighbours).
//!
//! The tables are direct-mapped: a piece has one slot, and a newcomer takes it over. A
//! lookup is one multiply and one memory access (a hash map's was two, and a third of a
//! count), the memory is fixed (1.5 MB a thread, zeroed pages the system hands out as they
//! are first touched), and a text made to collide costs its own counting time, nothing more.

/// Pieces at most this long are cached: longer ones rarely repeat.
pub(super) const MAX_CACHED_PIECE: usize = 24;
/// 65,536 slots of pieces of up to 7 bytes (most words with their space).
const WORD_BITS: u32 = 16;
/// 16,384 slots of pieces of 8 to 24 bytes.
const PIECE_BITS: u32 = 14;
/// Fibonacci hashing's multiplier (2^64 over the golden ratio): the top bits of the
/// product are well mixed.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

pub(super) struct PieceCache {
    /// `[piece packed with its length, count]`; an empty slot is all zero (no packed piece is).
    words: Vec<[u64; 2]>,
    /// `[the piece's bytes as three words, length << 32 | count]`; an empty slot's length is 0.
    pieces: Vec<[u64; 4]>,
}

impl Default for PieceCache {
    fn default() -> Self {
        PieceCache {
            words: vec![[0; 2]; 1 << WORD_BITS],
            pieces: vec![[0; 4]; 1 << PIECE_BITS],
        }
    }
}

impl PieceCache {
    /// The count of `piece` (at least two bytes long), from the cache or from `count`.
    pub(super) fn get_or_count(&mut self, piece: &[u8], count: impl FnOnce() -> usize) -> usize {
        if let Some(tokens) = self.get(piece) {
            return tokens;
        }
        let tokens = count();
        self.put(piece, tokens);
        tokens
    }

    /// The cached count of `piece`, if its slot holds it.
    pub(super) fn get(&self, piece: &[u8]) -> Option<usize> {
        match Key::of(piece)? {
            Key::Word(word) => {
                let slot = &self.words[slot_of(word, WORD_BITS)];
                (slot[0] == word).then_some(slot[1] as usize)
            }
            Key::Piece(key, mixed) => {
                let slot = &self.pieces[slot_of(mixed, PIECE_BITS)];
                (slot[..3] == key[..3] && slot[3] >> 32 == key[3])
                    .then_some((slot[3] & u64::from(u32::MAX)) as usize)
            }
        }
    }

    /// Keeps the count of `piece` in its slot (nothing for a piece too long to cache).
    pub(super) fn put(&mut self, piece: &[u8], tokens: usize) {
        let stored = u64::try_from(tokens)
            .unwrap_or(u64::MAX)
            .min(u64::from(u32::MAX));
        match Key::of(piece) {
            Some(Key::Word(word)) => self.words[slot_of(word, WORD_BITS)] = [word, stored],
            Some(Key::Piece(key, mixed)) => {
                self.pieces[slot_of(mixed, PIECE_BITS)] =
                    [key[0], key[1], key[2], key[3] << 32 | stored];
            }
            None => {}
        }
    }
}

/// Where a piece is cached, and what its slot holds when it is there.
enum Key {
    /// Up to 7 bytes packed with the length.
    Word(u64),
    /// 8 to 24 bytes as three words and the length, and the four mixed for the slot.
    Piece([u64; 4], u64),
}

impl Key {
    fn of(piece: &[u8]) -> Option<Key> {
        if let Some(word) = packed(piece) {
            return Some(Key::Word(word));
        }
        let [a, b, c] = three_words(piece)?;
        let len = piece.len() as u64;
        let mixed = a ^ b.rotate_left(21) ^ c.rotate_left(42) ^ len;
        Some(Key::Piece([a, b, c, len], mixed))
    }
}

fn slot_of(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(SPREAD) >> (64 - bits)) as usize
}

/// A piece of at most 7 bytes packed with its length (the top byte) into one word.
///
/// Read with two overlapping loads rather than copied into a buffer: a word read back from
/// bytes just stored one by one waits for the stores (that wait was most of a lookup).
fn packed(piece: &[u8]) -> Option<u64> {
    let len = piece.len();
    let bytes = match len {
        0 => 0,
        1 => u64::from(piece[0]),
        2..=3 => load2(piece, 0) | load2(piece, len - 2) << ((len - 2) * 8),
        4..=7 => load4(piece, 0) | load4(piece, len - 4) << ((len - 4) * 8),
        _ => return None,
    };
    Some(bytes | (len as u64) << 56)
}

/// A piece of at most 24 bytes as three little-endian words (zero after its end).
fn three_words(piece: &[u8]) -> Option<[u64; 3]> {
    let len = piece.len();
    // The last word ends at the piece's end: shifted right, the bytes before the word's
    // own part fall off and zeros come in after it.
    let tail = |word_start: usize| match word_start + 8 - len.min(word_start + 8) {
        8 => 0,
        missing => load8(piece, len - 8) >> (missing * 8),
    };
    match len {
        8..=16 => Some([load8(piece, 0), tail(8), 0]),
        17..=MAX_CACHED_PIECE => Some([load8(piece, 0), load8(piece, 8), tail(16)]),
        _ => None,
    }
}

fn load2(bytes: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

fn load4(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u64::from(u32::from_le_bytes(word))
}

fn load8(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys as a byte copy makes them: the piece, zeros, and (for a word) the length.
    fn copied(piece: &[u8]) -> Vec<u64> {
        let mut bytes = [0u8; 32];
        bytes[..piece.len()].copy_from_slice(piece);
        if piece.len() <= 7 {
            bytes[7] = piece.len() as u8;
        }
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn keys_hold_exactly_the_piece_at_every_length() {
        let text: Vec<u8> = (1..=40).collect();
        for len in 0..=MAX_CACHED_PIECE {
            for from in 0..4 {
                let piece = &text[from..from + len];
                let expected = copied(piece);
                match len {
                    0..=7 => assert_eq!(packed(piece), Some(expected[0]), "{len}"),
                    _ => assert_eq!(
                        three_words(piece).map(Vec::from),
                        Some(expected[..3].to_vec()),
                        "{len}"
                    ),
                }
            }
        }
        assert_eq!(packed(&text[..8]), None);
        assert_eq!(three_words(&text[..7]), None);
        assert_eq!(three_words(&text[..25]), None);
    }

    #[test]
    fn a_piece_is_counted_once_and_a_collision_only_replaces_a_slot() {
        let mut cache = PieceCache::default();
        let mut counted = 0;
        for _ in 0..3 {
            for piece in [
                "ab",
                "hello w",
                "a longer piece of text",
                "exactly twenty-four byte",
            ] {
                let tokens = cache.get_or_count(piece.as_bytes(), || {
                    counted += 1;
                    piece.len()
                });
                assert_eq!(tokens, piece.len());
            }
        }
        assert_eq!(counted, 4, "each piece counted once");
        // Far more pieces than slots: every answer is still the piece's own.
        for n in 0..200_000_u32 {
            let piece = format!("w{n}");
            let tokens = cache.get_or_count(piece.as_bytes(), || piece.len() + 100);
            assert_eq!(tokens, piece.len() + 100);
        }
        // Too long to cache: counted every time.
        let long = "x".repeat(MAX_CACHED_PIECE + 1);
        assert_eq!(cache.get_or_count(long.as_bytes(), || 7), 7);
        assert_eq!(cache.get_or_count(long.as_bytes(), || 8), 8);
    }
}

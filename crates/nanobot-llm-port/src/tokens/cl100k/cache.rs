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
fn packed(piece: &[u8]) -> Option<u64> {
    let len = u8::try_from(piece.len()).ok().filter(|&len| len <= 7)?;
    let mut word = [0; 8];
    word[..piece.len()].copy_from_slice(piece);
    word[7] = len;
    Some(u64::from_le_bytes(word))
}

/// A piece of at most 24 bytes as three words (zero after its end).
fn three_words(piece: &[u8]) -> Option<[u64; 3]> {
    let mut bytes = [0; MAX_CACHED_PIECE];
    bytes.get_mut(..piece.len())?.copy_from_slice(piece);
    let word = |at: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    Some([word(0), word(8), word(16)])
}

#[cfg(test)]
mod tests {
    use super::*;

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

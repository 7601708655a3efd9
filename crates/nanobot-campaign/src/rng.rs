//! A small seeded generator (SplitMix64): every campaign decision comes from a seed, so a
//! failure names the seed that replays it.

/// SplitMix64: fast, 64 bits of state, good enough to pick crash points and sizes.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A size spread over orders of magnitude up to `max` (small ones common, large ones
    /// present), so both short lines and lines longer than a page are written.
    pub(crate) fn size(&mut self, max: usize) -> usize {
        let bits = self.below(u64::from(usize::BITS - max.leading_zeros()) + 1);
        let cap = (1u64 << bits).min(max as u64 + 1);
        self.below(cap) as usize
    }
}

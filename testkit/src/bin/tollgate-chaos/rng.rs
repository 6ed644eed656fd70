//! A small seeded random source (splitmix64): a run is repeated by its seed
//! as far as timing allows. Not for anything secret.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Rng(AtomicU64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(AtomicU64::new(seed))
    }

    pub fn next(&self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration between `lo_ms` and `hi_ms`.
    pub fn millis(&self, lo_ms: u64, hi_ms: u64) -> std::time::Duration {
        std::time::Duration::from_millis(lo_ms + self.below(hi_ms.saturating_sub(lo_ms) + 1))
    }

    pub fn pick<'a, T>(&self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

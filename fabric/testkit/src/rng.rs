//! A small seeded pseudo-random generator for tests: SplitMix64.
//!
//! Randomised tests (fuzz smokes, fault injection, model checks) want a generator
//! that is deterministic for a seed, so a failure replays from the seed it
//! printed, and that costs no dependency. SplitMix64 (Steele, Lea and Flood,
//! "Fast splittable pseudorandom number generators", 2014) is that: a 64-bit
//! counter stepped by the golden gamma and a finalising mix, good for any seed,
//! 0 included. It is not cryptographic, and the small biases of reducing with `%`
//! are accepted: nothing here needs exact uniformity.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The golden gamma: SplitMix64's counter step.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output for the counter value `z`: a bijective, well-mixing hash
/// of a `u64`. [`Rng`] returns `mix(seed)`, `mix(seed + γ)`, `mix(seed + 2γ)`, …;
/// tests also use it on its own to derive seeds or payload bytes from numbers.
pub fn mix(z: u64) -> u64 {
    let mut z = z.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded SplitMix64 generator: the same seed gives the same sequence, on
/// every platform.
#[derive(Clone, Debug)]
pub struct Rng {
    /// The counter: the next output is `mix(state)`.
    state: u64,
}

impl Rng {
    /// The generator seeded with `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    // Not `Iterator::next`: the sequence never ends, and an `Option` at every
    // call site would say nothing.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let z = self.state;
        self.state = z.wrapping_add(GAMMA);
        mix(z)
    }

    /// Uniform in `0..n` (up to the negligible bias of `%`); 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index uniform in `0..n`, for slices and lengths: [`Rng::below`] in
    /// `usize`; 0 when `n` is 0.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in `r`, both ends included; its start when `r` is empty.
    pub fn range(&mut self, r: RangeInclusive<u64>) -> u64 {
        let (lo, hi) = r.into_inner();
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            // The whole of u64.
            None => self.next(),
        }
    }

    /// `true` with probability `p` (always for `p >= 1`). For `p <= 0` (or NaN)
    /// it is `false` without drawing, so a fault switched off leaves the rest of
    /// the sequence as it was.
    pub fn chance(&mut self, p: f64) -> bool {
        // The top 53 bits, as a float uniform in [0, 1).
        p > 0.0 && ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    /// A duration uniform in `0..=d`, to the nanosecond.
    pub fn upto(&mut self, d: Duration) -> Duration {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.range(0..=ns))
    }

    /// Fill `out` with random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for c in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }

    /// A copy of an element of `v`, uniformly chosen; `None` when `v` is empty.
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        if v.is_empty() {
            None
        } else {
            Some(v[self.index(v.len())])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_sequence() {
        let a: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..8).map(|_| r.next()).collect()
        };
        let mut r = Rng::new(42);
        assert_eq!(a, (0..8).map(|_| r.next()).collect::<Vec<_>>());
        let mut other = Rng::new(43);
        assert_ne!(a[0], other.next());
        // SplitMix64's reference outputs for seed 0 (the counter starts at 0 and
        // the first output is that of γ).
        let mut z = Rng::new(0);
        assert_eq!(z.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(z.next(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn results_keep_to_their_bounds() {
        let mut r = Rng::new(7);
        let mut seen = [false; 5];
        for _ in 0..10_000 {
            let b = r.below(5);
            assert!(b < 5);
            seen[b as usize] = true;
            assert!(r.index(3) < 3);
            assert!((10..=12).contains(&r.range(10..=12)));
            assert!(r.upto(Duration::from_micros(3)) <= Duration::from_micros(3));
            assert!(r.chance(1.0));
        }
        assert!(seen.iter().all(|&s| s), "every value below 5 comes up: {seen:?}");
        let before = r.clone().next();
        assert!(!r.chance(0.0) && !r.chance(-1.0) && !r.chance(f64::NAN));
        assert_eq!(r.clone().next(), before, "chance(0) draws nothing");
        assert_eq!(r.below(0), 0);
        assert_eq!(r.index(0), 0);
        assert_eq!(r.range(9..=9), 9);
        let _whole: u64 = r.range(0..=u64::MAX); // no overflow of the span
        assert_eq!(r.upto(Duration::ZERO), Duration::ZERO);
        assert_eq!(r.pick::<u8>(&[]), None);
        assert_eq!(r.pick(&[3]), Some(3));
        let mut buf = [0u8; 13];
        r.fill(&mut buf);
        assert!(buf.iter().any(|&b| b != 0));
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2_000..3_000).contains(&hits), "{hits} of 10 000 at p = 0.25");
    }
}

//! The channel's clock: a point in time as nanoseconds in a `u64`, so that the
//! per-datagram time arithmetic (round-trip samples, deadlines) is integer
//! arithmetic rather than `Instant`'s seconds-and-nanoseconds pairs.

use std::ops::{Add, AddAssign};
use std::time::Duration;

/// A point in time: nanoseconds on a monotonic clock, counted from a base the
/// caller picks ([`Nanos::now`] reads `CLOCK_MONOTONIC`, the clock of
/// [`std::time::Instant`]; tests may start from [`Nanos::ZERO`]). One channel
/// must be driven by one clock. Additions saturate (at 584 years).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The base of the clock.
    pub const ZERO: Nanos = Nanos(0);

    /// The time now on `CLOCK_MONOTONIC`.
    #[inline]
    pub fn now() -> Nanos {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
        // exists on the systems we build for, so the call cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Nanos((ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64))
    }

    /// The nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub fn nanos_since(self, earlier: Nanos) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.nanos_since(earlier))
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later (as
    /// [`std::time::Instant::duration_since`]).
    #[inline]
    pub fn duration_since(self, earlier: Nanos) -> Duration {
        self.saturating_duration_since(earlier)
    }

    /// `ns` nanoseconds later.
    #[inline]
    pub fn after(self, ns: u64) -> Nanos {
        Nanos(self.0.saturating_add(ns))
    }
}

/// A duration in nanoseconds, saturated at `u64::MAX` (584 years).
#[inline]
pub(super) fn nanos(d: Duration) -> u64 {
    // In u64 arithmetic: `as_nanos` computes in u128.
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

impl Add<Duration> for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, d: Duration) -> Nanos {
        self.after(nanos(d))
    }
}

impl AddAssign<Duration> for Nanos {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

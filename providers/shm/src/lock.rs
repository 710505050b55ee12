//! The endpoint's lock: taking it is one compare-and-swap and releasing it one
//! store, where a `std::sync::Mutex` adds poisoning checks at both ends.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A lock for an endpoint's state. A thread that finds it taken spins briefly,
/// then yields its time slice until it is free. There is no poisoning (the
/// endpoint ignored it before: every holder leaves the state consistent between
/// statements that could panic), and a panicking holder's guard releases the lock
/// as it unwinds.
pub(crate) struct SpinLock<T> {
    /// Whether a guard exists.
    locked: AtomicBool,
    val: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and at most one guard exists
// at a time (`locked` is set by the compare-and-swap that creates one and cleared
// when it drops, with Acquire/Release ordering the holders' accesses), so threads
// sharing the lock use `T` one at a time, as with a `Mutex`: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `val`.
    pub(crate) const fn new(val: T) -> SpinLock<T> {
        SpinLock { locked: AtomicBool::new(false), val: UnsafeCell::new(val) }
    }

    /// Take the lock, waiting for it if it is held.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }
}

/// Access to the value of a [`SpinLock`], which it releases when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `SpinLock`'s Sync), so no mutable
        // reference to the value exists while this one lives.
        unsafe { &*self.lock.val.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this the only
        // reference derived from it.
        unsafe { &mut *self.lock.val.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: the holder's accesses happen before the next holder's Acquire.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;
    use std::thread;

    /// Increments from several threads under the lock are never lost.
    #[test]
    fn counts_under_contention() {
        let l = SpinLock::new(0u64);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        *l.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*l.lock(), 80_000);
    }

    /// A holder that panics releases the lock as it unwinds.
    #[test]
    fn panic_releases() {
        let l = SpinLock::new(1u32);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = l.lock();
            panic!("holder panics");
        }));
        assert!(r.is_err());
        assert_eq!(*l.lock(), 1);
    }
}

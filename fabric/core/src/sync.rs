//! Synchronisation for state held a few dozen instructions at a time on the data
//! path: a completion queue's entries, its table of operations in flight, a
//! waiter's bound objects. [`SpinLock`] costs one compare-and-swap to take and one
//! store to release, where `std::sync::Mutex` adds a poison check on each side;
//! nothing that may block or run caller code may be done under it.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A lock for state held a few dozen instructions at a time (a completion
/// queue's entries and operation table, a waiter's bound objects): taking it is one
/// compare-and-swap and releasing it one store. A thread that finds it taken spins
/// briefly, then yields its time slice until it is free. There is no poisoning: a
/// guard dropped while unwinding releases the lock, so a holder must leave the value
/// consistent at every point where it could panic.
pub struct SpinLock<T> {
    /// Whether a guard exists: set by the compare-and-swap that creates one,
    /// cleared by its drop.
    locked: AtomicBool,
    /// The value; reached only through the one guard.
    val: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and at most one guard
// exists at a time (`locked` is set by the compare-and-swap that creates one and
// cleared when it drops), so threads sharing the lock use `T` one at a time, as
// with a `Mutex`: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `val`.
    pub const fn new(val: T) -> SpinLock<T> {
        SpinLock { locked: AtomicBool::new(false), val: UnsafeCell::new(val) }
    }

    /// Take the lock, waiting for it if it is held.
    #[inline(always)]
    pub fn lock(&self) -> SpinGuard<'_, T> {
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
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `SpinLock`'s Sync), so no
        // mutable reference to the value exists while this one lives.
        unsafe { &*self.lock.val.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this the
        // only reference derived from it.
        unsafe { &mut *self.lock.val.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;
    use std::sync::Arc;

    /// Four threads add to a plain counter under the lock: no increment is lost
    /// (without the lock, the read-modify-writes race and the total comes up short).
    #[test]
    fn the_lock_excludes() {
        let l = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = l.lock();
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(*l.lock(), 80_000);
    }

    /// A holder that panics releases the lock as it unwinds; the value is usable.
    #[test]
    fn a_panicking_holder_releases() {
        let l = Arc::new(SpinLock::new(vec![1u8]));
        let l2 = Arc::clone(&l);
        let r = std::thread::spawn(move || {
            let g = l2.lock();
            assert!(g.is_empty(), "deliberate panic under the lock");
        })
        .join();
        assert!(r.is_err());
        l.lock().push(2);
        assert_eq!(*l.lock(), vec![1, 2]);
    }
}

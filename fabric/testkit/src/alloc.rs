//! A counting global allocator for the tests that check a data path allocates
//! nothing.
//!
//! A test binary installs it once and counts what a closure allocates on the
//! calling thread with [`count`]:
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: fabric_testkit::alloc::Counting = fabric_testkit::alloc::Counting;
//!
//! fn main() {
//!     let (v, n) = fabric_testkit::alloc::count(|| vec![1u8; 16]);
//!     assert_eq!((v.len(), n), (16, 1));
//! }
//! ```
//!
//! Every call is forwarded unchanged to the system allocator; only allocations
//! and reallocations made by the counting thread while [`count`] runs are
//! counted, so other threads of the test harness do not disturb the figure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The allocator: the system's, plus a count (see the module docs).
pub struct Counting;

/// Allocations counted since [`count`] last started.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted now: true only inside [`count`].
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter
// only observes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(p, l, n) }
    }
}

/// Count one allocation if this thread is counting. `try_with`: a thread-local
/// being torn down (a thread exiting) is not counting.
fn note() {
    if ARMED.try_with(|a| a.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Run `f` and return what it returns with the number of heap allocations (and
/// reallocations) it made on this thread. Counts only where [`Counting`] is the
/// binary's global allocator (elsewhere the count is always 0).
pub fn count<T>(f: impl FnOnce() -> T) -> (T, usize) {
    ALLOCS.store(0, Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    let out = f();
    ARMED.with(|a| a.set(false));
    (out, ALLOCS.load(Ordering::SeqCst))
}

#[cfg(test)]
mod tests {
    #[global_allocator]
    static GLOBAL: super::Counting = super::Counting;

    /// What the closure allocates is counted, and only that: a closure that
    /// allocates nothing counts 0, one that builds a vector and grows it counts
    /// both, and another thread's allocation meanwhile is not counted.
    #[test]
    fn counts_this_threads_allocations() {
        let ((), n) = super::count(|| {
            std::hint::black_box(1 + 1);
        });
        assert_eq!(n, 0);
        let (v, n) = super::count(|| {
            let mut v: Vec<u64> = std::hint::black_box(Vec::with_capacity(1));
            v.extend([1, 2]);
            std::hint::black_box(v)
        });
        assert_eq!((v.len(), n), (2, 2), "one allocation and one reallocation");
        // Another thread allocates while this one counts: the two meet at a
        // barrier before and after (waiting at one allocates nothing).
        let before = std::sync::Barrier::new(2);
        let after = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                before.wait();
                std::hint::black_box(vec![0u8; 64]);
                after.wait();
            });
            let ((), n) = super::count(|| {
                before.wait();
                after.wait();
            });
            assert_eq!(n, 0, "the other thread's allocation was counted");
        });
    }
}

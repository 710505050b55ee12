//! The synchronisation primitives of the lock-free code, in one place.
//!
//! [`crate::ring`] takes its atomics and its cell type from here and nowhere else, so that
//! `tests/loom_ring.rs` can compile the very same `ring.rs` against a `sync` module of its
//! own that maps these names to `loom` for model checking. Both modules must offer the same
//! names with the same signatures.

pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Whether the types here have the plain-data layout the shared-memory ring relies on
/// (a bare `u64` per atomic, the bare value per cell). False in the loom shim, where the
/// ring lives only on the heap.
pub(crate) const PLAIN_LAYOUT: bool = true;

/// [`std::cell::UnsafeCell`] with the closure-based access API of `loom::cell::UnsafeCell`.
///
/// Same layout as `T` (and as `std::cell::UnsafeCell<T>`), so it may live in shared memory;
/// an all-zero bit pattern is a valid cell whenever it is a valid `T`.
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    pub(crate) const fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Run `f` with a pointer through which the contents may be read.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Run `f` with a pointer through which the contents may be written.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Expands to the items given. Wraps the unit tests of `ring.rs`, which are std-only (they
/// poke at the raw bytes of the shared layout); the loom shim's version expands to nothing.
#[cfg(test)]
macro_rules! std_only {
    ($($item:item)*) => { $($item)* };
}
#[cfg(test)]
pub(crate) use std_only;

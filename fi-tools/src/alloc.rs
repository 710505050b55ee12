//! The tools' memory allocator: the system's, placing what a benchmark allocates
//! as libfabric's fabtests (`ft_alloc_bufs`) and perftest place their buffers.
//! An allocation of a page or more starts on a page, and one of a cache line or
//! more on a cache line; smaller ones are the system's own.
//!
//! This matters to what the tools measure. The kernel copies a large message
//! faster between page-aligned buffers: a 64 KiB `process_vm_readv` (shm's cross
//! memory attach) pins 16 pages instead of 17 and copies aligned, and so do a
//! socket's copies (tcp). A 64 B message in a buffer that straddles two cache
//! lines costs a second line on each side. The data buffers of `fi_pingpong` and
//! `fi_perf` are `fabric::Buf`s, allocated once through this allocator.
//!
//! The alignment is a function of the size alone, so `dealloc` and `realloc`
//! (given the layout `alloc` was given) find the layout the allocation was made
//! with.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// A page.
pub const PAGE: usize = 4096;
/// A cache line.
pub const LINE: usize = 64;

/// The system allocator, aligning allocations of a cache line or a page and more.
pub struct ToolAlloc;

/// The layout an allocation of `l` is made with: `l` with its alignment raised to
/// a page (size of a page or more) or a cache line (a line or more), where that
/// layout exists; `l` itself otherwise.
fn placed(l: Layout) -> Layout {
    let want = if l.size() >= PAGE {
        PAGE
    } else if l.size() >= LINE {
        LINE
    } else {
        return l;
    };
    Layout::from_size_align(l.size(), l.align().max(want)).unwrap_or(l)
}

// SAFETY: every method hands `System` the layout `placed` gives for the layout it
// was called with; `placed` depends on the layout alone, so an allocation is
// freed (and reallocated) with the very layout `System` made it with, as
// `GlobalAlloc` requires, and each returned block is at least as large and as
// aligned as asked.
unsafe impl GlobalAlloc for ToolAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: `placed(l)` has a non-zero size when `l` has (the caller's
        // promise), and is a valid layout.
        unsafe { System.alloc(placed(l)) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(placed(l)) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by this allocator with `l` (the caller's
        // promise), so by `System` with `placed(l)`.
        unsafe { System.dealloc(p, placed(l)) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's promises for `p`, `l` and `new_size` hold.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        let (old_placed, new_placed) = (placed(l), placed(new));
        if old_placed.align() == l.align() && new_placed.align() == l.align() {
            // Neither size is raised: the system's realloc keeps the block's
            // alignment, which is `l`'s.
            // SAFETY: `p` was made by `System` with `l` itself (`placed(l) == l`).
            return unsafe { System.realloc(p, l, new_size) };
        }
        // SAFETY: `new_placed` is a valid layout of non-zero size (`new_size` is
        // non-zero: the caller's promise).
        let q = unsafe { System.alloc(new_placed) };
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct, the old one holds
            // `l.size()` bytes and the new one `new_size`; `p` was made by
            // `System` with `placed(l)`.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                System.dealloc(p, old_placed);
            }
        }
        q
    }
}

/// The tools' allocator, for every program linking this crate.
#[global_allocator]
static TOOL_ALLOC: ToolAlloc = ToolAlloc;

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::Buf;

    #[test]
    fn data_buffers_are_placed_as_libfabric_tools_place_theirs() {
        for cap in [PAGE, 65536, 1 << 20, 3 * PAGE + 5] {
            assert_eq!(Buf::new(cap).as_ptr() as usize % PAGE, 0, "{cap} bytes on a page");
        }
        for cap in [LINE, 100, PAGE - 1] {
            assert_eq!(Buf::new(cap).as_ptr() as usize % LINE, 0, "{cap} bytes on a line");
        }
        assert_eq!(placed(Layout::from_size_align(8, 8).unwrap()), Layout::from_size_align(8, 8).unwrap());
        assert_eq!(placed(Layout::from_size_align(PAGE, 8192).unwrap()).align(), 8192);
    }

    #[test]
    fn growing_and_shrinking_keeps_the_bytes_and_the_placement() {
        let mut v: Vec<u8> = (0..40u8).collect();
        for n in [63usize, 64, 4095, 4096, 70000, 100, 10] {
            v.resize(n.max(40), 7);
            v.shrink_to_fit();
            assert_eq!(&v[..40], &(0..40u8).collect::<Vec<_>>()[..], "{n}");
            let want = if v.capacity() >= PAGE {
                PAGE
            } else if v.capacity() >= LINE {
                LINE
            } else {
                1
            };
            assert_eq!(v.as_ptr() as usize % want, 0, "{n}");
            v.truncate(40);
        }
    }
}

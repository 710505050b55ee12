//! Byte ranges of scattered memory.
//!
//! An operation's memory is a list of pieces (an I/O vector): local
//! [`IoVec`]s, or a peer's `(address, length)` pairs. Its bytes are numbered
//! as if the pieces were laid end to end; every provider needs the pieces
//! holding a range of those bytes (a chunk of a rendezvous, the part of a read
//! an answer fills) and copies into or out of a range. This module is the one
//! walk over pieces that does it; nothing here allocates.
//!
//! Ranges are clipped: bytes past the end of the pieces are simply not there,
//! and empty pieces are never produced.

use crate::rx::IOV_LIMIT;
use fabric_core::prov::IoVec;

/// A piece of memory: an address and a length in bytes.
pub trait Piece: Copy {
    /// The empty piece, for the unused slots of an output array.
    const EMPTY: Self;
    /// Its length in bytes.
    fn bytes(&self) -> u64;
    /// The `len` bytes of it starting `skip` bytes in (`skip + len <= self.bytes()`).
    fn part(&self, skip: u64, len: u64) -> Self;
}

impl Piece for IoVec {
    const EMPTY: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

    fn bytes(&self) -> u64 {
        self.len as u64
    }

    fn part(&self, skip: u64, len: u64) -> IoVec {
        // wrapping_add: no dereference here, and skip < len keeps it in the piece.
        IoVec { base: self.base.wrapping_add(skip as usize), len: len as usize }
    }
}

/// `(address, length)`: memory named by address, such as a peer's.
impl Piece for (u64, u64) {
    const EMPTY: (u64, u64) = (0, 0);

    fn bytes(&self) -> u64 {
        self.1
    }

    fn part(&self, skip: u64, len: u64) -> (u64, u64) {
        (self.0.wrapping_add(skip), len)
    }
}

/// Call `f` with each non-empty part of `pieces` holding bytes `off..off + len`
/// (clipped to the end of `pieces`), in order, until `f` returns `false`. The
/// one walk the rest of this module is built on, for callers that fill their own
/// kind of vector (a `libc::iovec` array for `sendmsg`, say).
pub fn walk<P: Piece>(pieces: &[P], off: u64, len: u64, mut f: impl FnMut(P) -> bool) {
    let end = off.saturating_add(len);
    let mut start = 0u64;
    for p in pieces {
        if start >= end {
            break;
        }
        let stop = start.saturating_add(p.bytes());
        let (lo, hi) = (off.max(start), end.min(stop));
        if hi > lo && !f(p.part(lo - start, hi - lo)) {
            return;
        }
        start = stop;
    }
}

/// How many of the bytes `off..off + len` lie below `cap`.
#[inline]
pub fn clip(cap: u64, off: u64, len: u64) -> u64 {
    len.min(cap.saturating_sub(off))
}

/// Write into `out` the pieces of `pieces` holding bytes `off..off + len`
/// (clipped to the end of `pieces`, and to `out.len()` pieces); returns how many.
pub fn slice_into<P: Piece>(pieces: &[P], off: u64, len: u64, out: &mut [P]) -> usize {
    let mut n = 0;
    walk(pieces, off, len, |p| match out.get_mut(n) {
        Some(o) => {
            *o = p;
            n += 1;
            n < out.len()
        }
        None => false,
    });
    n
}

/// The pieces of `pieces` holding bytes `off..off + len`, at most [`IOV_LIMIT`],
/// and how many there are (see [`slice_into`]).
pub fn slice<P: Piece>(pieces: &[P], off: u64, len: u64) -> ([P; IOV_LIMIT], usize) {
    let mut out = [P::EMPTY; IOV_LIMIT];
    let n = slice_into(pieces, off, len, &mut out);
    (out, n)
}

/// Copy `bytes` into the pieces at logical offset `off`, never past `cap` (nor
/// past the end of the pieces).
///
/// The pieces must be valid for writes and not overlap `bytes`: they are a
/// posted receive's, under `post_recv`'s contract.
pub fn copy_into(iov: &[IoVec], cap: usize, off: u64, bytes: &[u8]) {
    let n = clip(cap as u64, off, bytes.len() as u64) as usize;
    let mut src = &bytes[..n];
    walk(iov, off, n as u64, |v| {
        // SAFETY: `v` is a part of a piece of a posted receive (valid for writes
        // under post_recv's contract), and the walk never yields more than the
        // `n` bytes `src` holds; the source is a distinct buffer of ours.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), v.base, v.len) };
        src = &src[v.len..];
        true
    });
}

/// Gather `len` bytes at logical offset `off` of `iov` into `dst` (the reverse
/// of [`copy_into`], for a transport that copies a send's pieces into its own
/// buffer).
///
/// # Safety
/// The pieces are valid for reads; `dst..dst + len` is valid for writes and
/// does not overlap them. (Pieces shorter than `off + len` in total leave the
/// rest of `dst` untouched.)
pub unsafe fn gather(iov: &[IoVec], off: usize, dst: *mut u8, len: usize) {
    let mut done = 0usize;
    walk(iov, off as u64, len as u64, |v| {
        // SAFETY: the walk yields at most `len` bytes in all, so done + v.len <= len;
        // the piece is valid for reads and `dst` for writes, per the contract.
        unsafe { std::ptr::copy_nonoverlapping(v.base, dst.add(done), v.len) };
        done += v.len;
        true
    });
}

/// Copy `len` bytes from `src` to `dst` (which do not overlap), inline for
/// messages of up to 64 bytes (two to four unaligned moves, from the start and
/// from the end, which overlap when the length is not a power of two) and
/// through `memcpy` above (tested first, so that a larger copy pays one
/// compare): a small message's copy then costs no call, and no registers
/// saved around one, on the data path that carries it.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst` for
/// writes of `len` bytes, the two ranges disjoint.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    use std::ptr::{read_unaligned, write_unaligned};
    /// Copy `len` bytes, `N <= len <= 2 * N`, as two `N`-byte moves.
    ///
    /// # Safety
    /// As `copy_bytes`, with `N <= len <= 2 * N`.
    #[inline(always)]
    unsafe fn two<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: `N <= len`, so both `N`-byte ranges, at 0 and at `len - N`,
        // lie inside the `len` bytes the caller vouches for; the source and
        // the destination are disjoint, so writing the head changes no byte
        // of the tail read after it.
        unsafe {
            write_unaligned(dst.cast::<[u8; N]>(), read_unaligned(src.cast::<[u8; N]>()));
            let tail = read_unaligned(src.add(len - N).cast::<[u8; N]>());
            write_unaligned(dst.add(len - N).cast::<[u8; N]>(), tail);
        }
    }
    // SAFETY: each arm's bounds satisfy `two`'s (or are the caller's own for
    // the byte and memcpy arms).
    unsafe {
        if len > 64 {
            std::ptr::copy_nonoverlapping(src, dst, len);
            return;
        }
        match len {
            32.. => two::<32>(src, dst, len),
            16.. => two::<16>(src, dst, len),
            8.. => two::<8>(src, dst, len),
            4.. => two::<4>(src, dst, len),
            _ => {
                for i in 0..len {
                    *dst.add(i) = *src.add(i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_bytes_copies_exactly_the_length() {
        let src: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..=150 {
            for off in [0, 1, 7] {
                let mut dst = [0xeeu8; 200];
                // SAFETY: both ranges are inside their vectors, which are distinct.
                unsafe { copy_bytes(src[off..].as_ptr(), dst[5..].as_mut_ptr(), len) };
                assert_eq!(&dst[5..5 + len], &src[off..off + len], "len {len} off {off}");
                assert!(dst[..5].iter().chain(&dst[5 + len..]).all(|&b| b == 0xee), "len {len}: outside written");
            }
        }
    }

    fn flat(pieces: &[(u64, u64)]) -> Vec<u64> {
        pieces.iter().flat_map(|&(a, l)| a..a + l).collect()
    }

    #[test]
    fn slices_cover_exactly_the_range() {
        // With an empty piece in the middle and at the end.
        let pieces = [(1000u64, 10u64), (5000, 3), (7000, 0), (9000, 20), (11000, 0)];
        let all = flat(&pieces);
        for off in 0..=all.len() as u64 {
            for len in 0..=(all.len() as u64 - off) {
                let (out, n) = slice(&pieces, off, len);
                assert_eq!(flat(&out[..n]), all[off as usize..(off + len) as usize], "off {off} len {len}");
                assert!(out[..n].iter().all(|p| p.1 > 0), "no empty piece");
            }
        }
    }

    #[test]
    fn piece_boundaries() {
        let pieces = [(100u64, 10u64), (200, 10)];
        let (out, n) = slice(&pieces, 10, 10);
        assert_eq!(&out[..n], &[(200, 10)]);
        let (out, n) = slice(&pieces, 0, 10);
        assert_eq!(&out[..n], &[(100, 10)]);
        let (out, n) = slice(&pieces, 9, 2);
        assert_eq!(&out[..n], &[(109, 1), (200, 1)]);
    }

    #[test]
    fn empty_cases() {
        let none: [(u64, u64); 0] = [];
        assert_eq!(slice(&none, 0, 10).1, 0);
        let pieces = [(100u64, 10u64)];
        assert_eq!(slice(&pieces, 3, 0).1, 0);
        assert_eq!(slice(&pieces, 10, 5).1, 0, "offset at the end");
        assert_eq!(slice(&pieces, 50, 5).1, 0, "offset past the end");
        assert_eq!(slice(&pieces, u64::MAX, u64::MAX).1, 0);
    }

    #[test]
    fn range_past_the_end_is_clipped() {
        let pieces = [(1000u64, 10u64), (5000, 3), (9000, 20)];
        let (out, n) = slice(&pieces, 30, 100);
        assert_eq!(&out[..n], &[(9017, 3)]);
        let (out, n) = slice(&pieces, 5, u64::MAX);
        assert_eq!(&out[..n], &[(1005, 5), (5000, 3), (9000, 20)]);
    }

    #[test]
    fn output_is_bounded() {
        let pieces: Vec<(u64, u64)> = (0..20).map(|i| (i * 100, 1)).collect();
        let (out, n) = slice(&pieces, 0, 20);
        assert_eq!(n, IOV_LIMIT);
        assert_eq!(out[IOV_LIMIT - 1], (700, 1));
        let mut two = [(0u64, 0u64); 2];
        assert_eq!(slice_into(&pieces, 3, 10, &mut two), 2);
        assert_eq!(two, [(300, 1), (400, 1)]);
        assert_eq!(slice_into(&pieces, 3, 10, &mut []), 0);
    }

    #[test]
    fn iovec_slices_point_into_their_pieces() {
        let mut a = [0u8; 10];
        let mut b = [0u8; 10];
        let iov = [IoVec { base: a.as_mut_ptr(), len: 10 }, IoVec { base: b.as_mut_ptr(), len: 10 }];
        let (s, n) = slice(&iov, 8, 5);
        assert_eq!(n, 2);
        assert_eq!((s[0].len, s[1].len), (2, 3));
        assert_eq!(s[0].base, a.as_mut_ptr().wrapping_add(8));
        assert_eq!(s[1].base, b.as_mut_ptr());
        assert_eq!(slice(&iov, 20, 5).1, 0);
    }

    #[test]
    fn clip_bounds() {
        assert_eq!(clip(10, 4, 100), 6);
        assert_eq!(clip(10, 4, 3), 3);
        assert_eq!(clip(10, 10, 3), 0);
        assert_eq!(clip(10, 11, 3), 0);
    }

    #[test]
    fn copy_into_and_gather_round_trip() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 0];
        let mut c = [0u8; 5];
        let iov = [
            IoVec { base: a.as_mut_ptr(), len: 3 },
            IoVec { base: b.as_mut_ptr(), len: 0 },
            IoVec { base: c.as_mut_ptr(), len: 5 },
        ];
        copy_into(&iov, 8, 2, &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!((a, c), ([0, 0, 1], [2, 3, 4, 5, 6]), "clipped at cap");
        copy_into(&iov, 6, 5, &[9, 9, 9]);
        assert_eq!(c, [2, 3, 9, 5, 6], "clipped at a smaller cap");
        copy_into(&iov, 8, 8, &[7]);
        assert_eq!(c, [2, 3, 9, 5, 6], "nothing at cap");

        let mut out = [0xffu8; 6];
        // SAFETY: the pieces are live arrays of ours; `out` is distinct.
        unsafe { gather(&iov, 2, out.as_mut_ptr(), 5) };
        assert_eq!(out, [1, 2, 3, 9, 5, 0xff]);
        let mut out = [0xffu8; 4];
        // SAFETY: as above; the pieces end before `out` is full.
        unsafe { gather(&iov, 6, out.as_mut_ptr(), 4) };
        assert_eq!(out, [5, 6, 0xff, 0xff], "the rest untouched");
    }
}

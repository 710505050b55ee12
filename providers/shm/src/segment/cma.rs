//! Cross-memory attach: copies between our memory and another process's
//! (`process_vm_readv`/`process_vm_writev`), and the probe that tells whether they are
//! allowed.

use super::liveness::to_pid;
use fabric_core::prov::IoVec;
use fabric_core::Error;
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::ptr;

/// Most iovec elements one `process_vm_readv`/`process_vm_writev` call takes (`IOV_MAX`).
const IOV_MAX: usize = 1024;

/// The value of every process's probe (see [`cma_probe`]).
pub const PROBE_VALUE: u64 = u64::from_le_bytes(*b"fab-CMA!");

/// Where our probe lies: the address of a static `u64` holding [`PROBE_VALUE`]. A
/// segment's header publishes it, so that a peer can check with [`cma_probe`] that it may
/// read our memory.
pub fn local_probe_addr() -> u64 {
    static PROBE: u64 = PROBE_VALUE;
    ptr::addr_of!(PROBE) as u64
}

/// Whether we can read process `pid`'s memory with `process_vm_readv` and the 8 bytes at
/// `remote_addr` there hold [`PROBE_VALUE`] (`remote_addr` being that process's
/// [`local_probe_addr`]). False where cross-memory attach is not allowed (ptrace rules,
/// Yama's `ptrace_scope`, seccomp) and for a process that is not one of us.
pub fn cma_probe(pid: i32, remote_addr: u64) -> bool {
    let mut value = 0u64;
    let local = [IoVec { base: ptr::addr_of_mut!(value).cast(), len: 8 }];
    // SAFETY: the one local piece is `value`, ours, 8 bytes, and no reference to it exists
    // during the call.
    matches!(unsafe { cma_read(pid, &local, &[(remote_addr, 8)]) }, Ok(8)) && value == PROBE_VALUE
}

/// A cross-memory transfer that stopped: how many bytes had moved, and why.
#[derive(Debug)]
pub struct CmaError {
    /// Bytes moved before the error (a prefix of the transfer).
    pub done: usize,
    /// The error: `ESRCH` (no such process), `EPERM` (not allowed), `EFAULT` (a remote
    /// range not mapped), ...
    pub error: io::Error,
}

impl fmt::Display for CmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cross-memory transfer failed after {} bytes: {}", self.done, self.error)
    }
}

impl std::error::Error for CmaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<CmaError> for Error {
    fn from(e: CmaError) -> Error {
        e.error.into()
    }
}

/// Copy from process `pid`'s memory (`remote`: address and length pairs, in order) into
/// ours (`local`, in order): `min(total local, total remote)` bytes, over as many system
/// calls as it takes (partial transfers, at most 1024 pieces a call). The bytes moved.
///
/// Remote lengths may come from a hostile peer: they only bound what is read over there
/// (the kernel checks those addresses); what is written here is bounded by `local`.
///
/// # Safety
///
/// Every local piece is valid for writes of `len` bytes for the whole call, and nothing
/// reads or writes those bytes meanwhile (the kernel writes them behind Rust's back).
pub unsafe fn cma_read(pid: i32, local: &[IoVec], remote: &[(u64, u64)]) -> std::result::Result<usize, CmaError> {
    // SAFETY: forwarded contract (the kernel writes only to the local pieces).
    unsafe { cma_transfer(false, pid, local, remote) }
}

/// Copy from our memory (`local`, in order) into process `pid`'s (`remote`: address and
/// length pairs, in order): `min(total local, total remote)` bytes, over as many system
/// calls as it takes. The bytes moved. See [`cma_read`].
///
/// # Safety
///
/// Every local piece is valid for reads of `len` bytes for the whole call, and nothing
/// writes those bytes meanwhile.
pub unsafe fn cma_write(pid: i32, local: &[IoVec], remote: &[(u64, u64)]) -> std::result::Result<usize, CmaError> {
    // SAFETY: forwarded contract (the kernel only reads the local pieces).
    unsafe { cma_transfer(true, pid, local, remote) }
}

/// Largest transfer of one call: the kernel refuses totals beyond `ssize_t`.
const MAX_CALL: usize = isize::MAX as usize;

/// Most iovec elements [`cma_transfer`] passes to one call: fewer than the kernel's
/// [`IOV_MAX`], so that both lists fit on the stack (the transfer continues with more
/// calls when there are more pieces).
const CALL_IOVS: usize = 64;
const _: () = assert!(CALL_IOVS <= IOV_MAX);

/// A list of at most [`CALL_IOVS`] iovecs on the stack, left uninitialized past its
/// length: a transfer writes the few entries it uses, and zeroing both 1 KiB arrays
/// per call (a `memset` of 2 KiB, ~300 instructions a round trip at 64 KiB) bought
/// nothing.
struct Iovecs {
    v: [MaybeUninit<libc::iovec>; CALL_IOVS],
    len: usize,
}

impl Iovecs {
    fn new() -> Iovecs {
        Iovecs { v: [const { MaybeUninit::uninit() }; CALL_IOVS], len: 0 }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Append `x` (the caller checks `len() < CALL_IOVS`).
    fn push(&mut self, x: libc::iovec) {
        self.v[self.len] = MaybeUninit::new(x);
        self.len += 1;
    }

    fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    fn as_mut_slice(&mut self) -> &mut [libc::iovec] {
        // SAFETY: entries `..len` were written by `push` (`len` only grows there,
        // one entry at a time), and `MaybeUninit<T>` has `T`'s layout.
        unsafe { std::slice::from_raw_parts_mut(self.v.as_mut_ptr().cast::<libc::iovec>(), self.len) }
    }

    fn as_ptr(&self) -> *const libc::iovec {
        self.v.as_ptr().cast()
    }
}

/// The body of [`cma_read`] (`write` false) and [`cma_write`] (`write` true).
///
/// # Safety
///
/// That of `cma_read` or `cma_write`.
unsafe fn cma_transfer(
    write: bool,
    pid: i32,
    local: &[IoVec],
    remote: &[(u64, u64)],
) -> std::result::Result<usize, CmaError> {
    let fail = |done: usize, errno: i32| CmaError { done, error: io::Error::from_raw_os_error(errno) };
    let Some(p) = to_pid(pid) else { return Err(fail(0, libc::ESRCH)) };
    // The usual large message: one piece on each side, moved by one call. Anything
    // short of all of it (a partial transfer, an error, an interruption) is done
    // again from the start by the general loop below, which says how far it got
    // (moving the same bytes twice changes nothing).
    if let ([l], &[(addr, rlen)]) = (local, remote) {
        let want = (l.len as u64).min(rlen) as usize;
        if let Ok(a) = usize::try_from(addr) {
            if want > 0 && want <= MAX_CALL && a.checked_add(want).is_some() {
                let lv = libc::iovec { iov_base: l.base.cast(), iov_len: want };
                let rv = libc::iovec { iov_base: a as *mut libc::c_void, iov_len: want };
                let n = if write {
                    // SAFETY: the local piece is the caller's, valid for reads of
                    // `want <= len` bytes (contract of cma_write); the remote range
                    // is checked by the kernel; both iovecs live during the call.
                    unsafe { libc::process_vm_writev(p, &lv, 1, &rv, 1, 0) }
                } else {
                    // SAFETY: the local piece is the caller's, valid for writes of
                    // `want <= len` bytes and unaliased (contract of cma_read); the
                    // kernel writes at most that; both iovecs live during the call.
                    unsafe { libc::process_vm_readv(p, &lv, 1, &rv, 1, 0) }
                };
                if n == want as isize {
                    return Ok(want);
                }
            }
        }
    }
    // Cursors: the next byte is at offset `loff` of local piece `li` (`loff` < its length
    // unless it is past the end), and at offset `roff` of remote piece `ri`.
    let (mut li, mut loff) = (0usize, 0usize);
    let (mut ri, mut roff) = (0usize, 0u64);
    let mut done = 0usize;
    // On the stack: a large message's copy runs in progress, which allocates nothing.
    let mut lv = Iovecs::new();
    let mut rv = Iovecs::new();
    loop {
        // The next local pieces: at most CALL_IOVS of them, at most MAX_CALL bytes.
        lv.clear();
        let mut ltotal = 0usize;
        let (mut i, mut off) = (li, loff);
        while lv.len() < CALL_IOVS && i < local.len() && ltotal < MAX_CALL {
            let rem = local[i].len.saturating_sub(off);
            let take = rem.min(MAX_CALL - ltotal);
            if take > 0 {
                lv.push(libc::iovec { iov_base: local[i].base.wrapping_add(off).cast(), iov_len: take });
                ltotal += take;
            }
            i += 1;
            off = 0;
        }
        // The remote pieces for as many bytes (at most).
        rv.clear();
        let mut rtotal = 0usize;
        let (mut j, mut off) = (ri, roff);
        while rv.len() < CALL_IOVS && j < remote.len() && rtotal < ltotal {
            let (addr, len) = remote[j];
            let rem = len.saturating_sub(off);
            let take = rem.min((ltotal - rtotal) as u64) as usize;
            if take > 0 {
                // An address past the end of the address space: nothing there to reach.
                let Some(a) = addr.checked_add(off).and_then(|a| usize::try_from(a).ok()) else {
                    if rtotal == 0 {
                        return Err(fail(done, libc::EFAULT));
                    }
                    break;
                };
                rv.push(libc::iovec { iov_base: a as *mut libc::c_void, iov_len: take });
                rtotal += take;
            }
            j += 1;
            off = 0;
        }
        if rtotal == 0 {
            // One side is exhausted.
            return Ok(done);
        }
        // Trim the local pieces to the remote bytes.
        let mut keep = rtotal;
        let mut count = 0;
        for v in lv.as_mut_slice() {
            if keep == 0 {
                break;
            }
            v.iov_len = v.iov_len.min(keep);
            keep -= v.iov_len;
            count += 1;
        }
        lv.truncate(count);
        let n = {
            let args = (p, lv.as_ptr(), lv.len() as libc::c_ulong, rv.as_ptr(), rv.len() as libc::c_ulong, 0);
            if write {
                // SAFETY: the local pieces lie within the caller's pieces, which are valid
                // for reads (contract of cma_write); remote addresses are checked by the
                // kernel; both arrays are valid for their lengths during the call.
                unsafe { libc::process_vm_writev(args.0, args.1, args.2, args.3, args.4, args.5) }
            } else {
                // SAFETY: the local pieces lie within the caller's pieces, which are valid
                // for writes and unaliased (contract of cma_read); the kernel writes at
                // most their lengths; both arrays are valid for their lengths.
                unsafe { libc::process_vm_readv(args.0, args.1, args.2, args.3, args.4, args.5) }
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(CmaError { done, error: e });
        }
        let n = n as usize;
        if n == 0 {
            // A remote piece that is not mapped (the kernel stops at the first one).
            return Err(fail(done, libc::EFAULT));
        }
        done += n;
        // Advance both cursors by n bytes (n <= rtotal: within the pieces just used).
        let mut k = n;
        while k > 0 && li < local.len() {
            let rem = local[li].len.saturating_sub(loff);
            if k < rem {
                loff += k;
                k = 0;
            } else {
                k -= rem;
                li += 1;
                loff = 0;
            }
        }
        let mut k = n as u64;
        while k > 0 && ri < remote.len() {
            let rem = remote[ri].1.saturating_sub(roff);
            if k < rem {
                roff += k;
                k = 0;
            } else {
                k -= rem;
                ri += 1;
                roff = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::testutil::dead_pid;

    #[test]
    fn cma_probe_finds_ourselves() {
        let me = std::process::id() as i32;
        let addr = local_probe_addr();
        assert_eq!(local_probe_addr(), addr);
        assert!(cma_probe(me, addr));
        // Readable, but not the probe.
        let other = PROBE_VALUE ^ 1;
        assert!(!cma_probe(me, ptr::addr_of!(other) as u64));
        assert!(!cma_probe(me, 8));
        assert!(!cma_probe(me, u64::MAX - 3));
        let (pid, _) = dead_pid();
        assert!(!cma_probe(pid, addr));
        assert!(!cma_probe(0, addr));
        assert!(!cma_probe(-1, addr));
    }

    /// Split `buf` into pieces of the given lengths (cycled), the last one cut short.
    fn split(buf: &mut [u8], lens: &[usize]) -> Vec<IoVec> {
        let mut out = Vec::new();
        let mut at = 0;
        for &l in lens.iter().cycle() {
            if at >= buf.len() {
                break;
            }
            let l = l.min(buf.len() - at);
            out.push(IoVec { base: buf[at..].as_mut_ptr(), len: l });
            at += l;
        }
        out
    }

    fn remote_of(v: &[IoVec]) -> Vec<(u64, u64)> {
        v.iter().map(|p| (p.base as u64, p.len as u64)).collect()
    }

    #[test]
    fn cma_moves_data_across_many_pieces() {
        let me = std::process::id() as i32;
        const N: usize = 100_000;
        let mut src: Vec<u8> = (0..N).map(|i| (i * 7 + i / 251) as u8).collect();
        // Remote: 4000+ pieces (several calls' worth), some empty.
        let remote = remote_of(&split(&mut src, &[1, 0, 17, 3, 40, 0, 2]));
        assert!(remote.len() > 3 * IOV_MAX);
        // Local: other cuts, 500 bytes more than the remote total: the last piece is
        // partly filled.
        let mut dst = vec![0xeeu8; N + 500];
        let local = split(&mut dst, &[5, 31, 0, 9, 64]);
        assert!(local.len() > IOV_MAX);
        // SAFETY: the local pieces lie in `dst`, ours, not otherwise accessed meanwhile.
        let n = unsafe { cma_read(me, &local, &remote) }.unwrap();
        assert_eq!(n, N);
        assert_eq!(&dst[..N], &src[..]);
        assert!(dst[N..].iter().all(|&b| b == 0xee));

        // And back, by writing: local pieces of `src2` into the remote pieces of `out`.
        let mut src2: Vec<u8> = (0..N).map(|i| (i * 13) as u8).collect();
        let mut out = vec![0u8; N];
        let remote = remote_of(&split(&mut out, &[3, 1000, 0, 1]));
        let local = split(&mut src2[..N - 10], &[2, 0, 77]);
        // SAFETY: the local pieces lie in `src2`, ours; the remote ones in `out`, ours,
        // which nothing references during the call.
        let n = unsafe { cma_write(me, &local, &remote) }.unwrap();
        assert_eq!(n, N - 10);
        assert_eq!(&out[..N - 10], &src2[..N - 10]);
        assert!(out[N - 10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn cma_never_trusts_remote_lengths() {
        let me = std::process::id() as i32;
        let src = [9u8; 64];
        let mut dst = [0u8; 100];
        let local = [IoVec { base: dst.as_mut_ptr(), len: 10 }];
        // SAFETY: the local piece is 10 bytes of `dst`, ours.
        let n = unsafe { cma_read(me, &local, &[(src.as_ptr() as u64, u64::MAX)]) }.unwrap();
        assert_eq!(n, 10);
        assert_eq!(&dst[..10], &[9; 10]);
        assert!(dst[10..].iter().all(|&b| b == 0));
        // Nothing to move.
        // SAFETY: as above.
        assert_eq!(unsafe { cma_read(me, &local, &[]) }.unwrap(), 0);
        // SAFETY: no local piece.
        assert_eq!(unsafe { cma_read(me, &[], &[(src.as_ptr() as u64, 64)]) }.unwrap(), 0);
    }

    #[test]
    fn one_piece_each_side_moves_the_shorter_length_and_stops_at_a_hole() {
        let me = std::process::id() as i32;
        let src: Vec<u8> = (0..5000).map(|i| (i * 3) as u8).collect();
        for (llen, rlen) in [(5000usize, 5000u64), (3000, 5000), (5000, 1234)] {
            let mut dst = vec![0u8; 5000];
            let local = [IoVec { base: dst.as_mut_ptr(), len: llen }];
            // SAFETY: the local piece lies in `dst`, ours, not otherwise accessed meanwhile.
            let n = unsafe { cma_read(me, &local, &[(src.as_ptr() as u64, rlen)]) }.unwrap();
            let want = llen.min(rlen as usize);
            assert_eq!(n, want);
            assert_eq!(&dst[..want], &src[..want]);
            assert!(dst[want..].iter().all(|&b| b == 0));
        }
        // A remote range whose second page is not mapped: the first page moves,
        // and the error says so.
        const PAGE: usize = 4096;
        // SAFETY: a fresh private anonymous mapping, then its second page unmapped;
        // neither call touches memory of ours.
        let base = unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            std::ptr::write_bytes(m.cast::<u8>(), 7, PAGE);
            assert_eq!(libc::munmap(m.cast::<u8>().add(PAGE).cast(), PAGE), 0);
            m as u64
        };
        let mut dst = vec![0u8; 2 * PAGE];
        let local = [IoVec { base: dst.as_mut_ptr(), len: 2 * PAGE }];
        // SAFETY: the local piece is `dst`, ours.
        let e = unsafe { cma_read(me, &local, &[(base, 2 * PAGE as u64)]) }.unwrap_err();
        assert_eq!((e.done, e.error.raw_os_error()), (PAGE, Some(libc::EFAULT)));
        assert!(dst[..PAGE].iter().all(|&b| b == 7));
        // SAFETY: the first page, still mapped, ours.
        assert_eq!(unsafe { libc::munmap(base as *mut libc::c_void, PAGE) }, 0);
    }

    #[test]
    fn cma_errors_say_how_far_they_got() {
        let me = std::process::id() as i32;
        let src = [5u8; 100];
        let mut dst = [0u8; 300];
        let local = [IoVec { base: dst.as_mut_ptr(), len: 300 }];
        // A hole after the first 100 bytes.
        let remote = [(src.as_ptr() as u64, 100), (8, 100), (src.as_ptr() as u64, 100)];
        // SAFETY: the local piece is `dst`, ours.
        let e = unsafe { cma_read(me, &local, &remote) }.unwrap_err();
        assert_eq!(e.done, 100);
        assert_eq!(e.error.raw_os_error(), Some(libc::EFAULT));
        assert_eq!(&dst[..100], &[5; 100]);
        assert_eq!(Error::from(e), Error::Fault);
        // An address past the end of the address space.
        // SAFETY: as above.
        let e = unsafe { cma_read(me, &local, &[(u64::MAX, 10)]) }.unwrap_err();
        assert_eq!(e.done, 0);
        // No such process.
        let (pid, _) = dead_pid();
        // SAFETY: as above.
        let e = unsafe { cma_read(pid, &local, &[(src.as_ptr() as u64, 100)]) }.unwrap_err();
        assert_eq!((e.done, e.error.raw_os_error()), (0, Some(libc::ESRCH)));
        // SAFETY: as above.
        let e = unsafe { cma_write(0, &local, &[(src.as_ptr() as u64, 100)]) }.unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::ESRCH));
    }
}

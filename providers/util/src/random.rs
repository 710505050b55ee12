//! Random bits from the kernel, for keys and epochs that must not collide.
//!
//! One safe wrapper over `getrandom(2)` for the whole provider layer: memory
//! region keys ([`crate::mr`]), shared-memory segment names and connection
//! epochs all draw from here. [`fill`] and [`u64()`] report a failing random
//! source as an error; [`u64_or_fallback`] is for values that only need to
//! differ (names, epochs), and never fails.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::time::SystemTime;

/// Fill `buf` with random bytes from the kernel's random source.
///
/// Retries on `EINTR` and continues after short reads until every byte is
/// written. An empty `buf` succeeds at once. Any other failure of
/// `getrandom(2)` is returned (with `buf` partly written).
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0usize;
    while got < buf.len() {
        let rest = &mut buf[got..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes for the
        // duration of the call, and getrandom writes at most that many.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += r as usize;
    }
    Ok(())
}

/// 64 random bits from the kernel's random source (see [`fill`]).
pub fn u64() -> io::Result<u64> {
    let mut buf = [0u8; 8];
    fill(&mut buf)?;
    Ok(u64::from_ne_bytes(buf))
}

/// 64 random bits: [`u64()`], or, where the kernel's source fails, bits hashed from
/// std's randomly seeded hasher, the process id and the time. For values that
/// only need to differ from one another (names, epochs), never for secrets.
pub fn u64_or_fallback() -> u64 {
    u64().unwrap_or_else(|_| fallback())
}

/// Bits for when `getrandom` fails: each `RandomState` is keyed afresh.
fn fallback() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_empty_is_ok() {
        fill(&mut []).unwrap();
    }

    #[test]
    fn fill_writes_every_byte() {
        // 4 KiB of zeros staying zero in any 64-byte window is all but impossible.
        let mut buf = vec![0u8; 4096];
        fill(&mut buf).unwrap();
        assert!(buf.chunks(64).all(|c| c.iter().any(|&b| b != 0)));
    }

    #[test]
    fn draws_differ() {
        let a: Vec<u64> = (0..16).map(|_| u64().unwrap()).collect();
        let mut b = a.clone();
        b.sort_unstable();
        b.dedup();
        assert_eq!(a.len(), b.len());
        assert_ne!(u64_or_fallback(), u64_or_fallback());
    }

    #[test]
    fn fallback_draws_differ() {
        assert_ne!(fallback(), fallback());
    }
}

//! Endpoint addresses in their C form: a `struct sockaddr_in`/`sockaddr_in6`
//! for socket addresses (as libfabric's tcp and udp providers give them), a
//! NUL-terminated string for `FI_ADDR_STR` (shm).

use fabric_core::{Address, Error, Result};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

/// The longest string address accepted.
const STR_MAX: usize = 4096;

/// The C bytes of `addr` (what `fi_getname` writes).
pub(crate) fn to_c(addr: &Address) -> Vec<u8> {
    crate::info::addr_to_c_bytes(addr)
}

/// Parse one C address at `p` (at most `max` readable bytes, `usize::MAX` when
/// the caller gave no length): the address and the bytes it took.
///
/// # Safety
/// `p` is valid for reads of the address it holds (its sockaddr by family, or
/// its string up to the NUL), within `max` bytes.
pub(crate) unsafe fn from_c(p: *const u8, max: usize) -> Result<(Address, usize)> {
    if p.is_null() || max < 2 {
        return Err(Error::Inval);
    }
    // SAFETY: at least two bytes are readable (a family or two characters).
    let family = unsafe { (p as *const libc::sa_family_t).read_unaligned() } as i32;
    if family == libc::AF_INET && max >= std::mem::size_of::<libc::sockaddr_in>() {
        // SAFETY: a sockaddr_in is readable at p (family says so, max allows it).
        let s = unsafe { (p as *const libc::sockaddr_in).read_unaligned() };
        let ip = Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes());
        let a = SocketAddrV4::new(ip, u16::from_be(s.sin_port));
        return Ok((Address::Sockaddr(a.into()), std::mem::size_of::<libc::sockaddr_in>()));
    }
    if family == libc::AF_INET6 && max >= std::mem::size_of::<libc::sockaddr_in6>() {
        // SAFETY: as above for sockaddr_in6.
        let s = unsafe { (p as *const libc::sockaddr_in6).read_unaligned() };
        let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
        let a = SocketAddrV6::new(ip, u16::from_be(s.sin6_port), u32::from_be(s.sin6_flowinfo), s.sin6_scope_id);
        return Ok((Address::Sockaddr(a.into()), std::mem::size_of::<libc::sockaddr_in6>()));
    }
    let limit = max.min(STR_MAX);
    let mut n = 0;
    // SAFETY: the string is readable up to its NUL, which comes within `limit`.
    while n < limit && unsafe { p.add(n).read() } != 0 {
        n += 1;
    }
    // SAFETY: the `n` bytes just read.
    let bytes = unsafe { std::slice::from_raw_parts(p, n) };
    let a = Address::from_bytes(bytes)?;
    Ok((a, (n + 1).min(max)))
}

/// Copy `bytes` to the caller's `(buf, *len)` as `fi_getname` does: `*len` set
/// to the full length, `-FI_ETOOSMALL` when it did not fit.
///
/// # Safety
/// `len` is NULL or valid for reads and writes; `buf` is NULL or valid for
/// writes of `*len` bytes.
pub(crate) unsafe fn copy_out(bytes: &[u8], buf: *mut u8, len: *mut usize) -> std::ffi::c_int {
    if len.is_null() {
        return crate::fid::EINVAL;
    }
    // SAFETY: a valid in/out length, per the caller.
    let room = unsafe { *len };
    // SAFETY: as above.
    unsafe { *len = bytes.len() };
    if buf.is_null() || room < bytes.len() {
        if !buf.is_null() && room > 0 {
            // SAFETY: `buf` has room for `room` bytes; libfabric fills what fits.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, room) };
        }
        return crate::fid::err(Error::TooSmall);
    }
    // SAFETY: `buf` has room for `bytes.len()` bytes (checked).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    0
}

//! The socket glue of the udp provider, shared by its DGRAM and RDM endpoints:
//! opening and binding a UDP socket, and moving one datagram with one system call
//! straight between the socket and the application's memory (`sendmsg` gathering
//! an `IoVec` list, `recvmsg` scattering into one and saying how long the datagram
//! really was).

use crate::{Config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::IoVec;
use fabric_core::{fi_log, Error, Result};
use socket2::{Domain, SockAddr, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// Most pieces one datagram is gathered from or scattered into: an operation's
/// `IOV_LIMIT` plus room for a protocol's headers.
pub(crate) const MAX_IOV: usize = 16;

/// Open a UDP socket of the family of IPv6 (`ipv6`) or IPv4, not bound yet:
/// non-blocking and close-on-exec, with the configured buffer sizes, never
/// fragmenting its datagrams (the "don't fragment" bit: a datagram larger than
/// the path's MTU fails with `FI_EMSGSIZE`), and (IPv4) receiving only the
/// multicast groups it joined itself (not every group some socket of the host
/// joined, Linux's default).
pub(crate) fn open(ipv6: bool, cfg: &Config) -> Result<Socket> {
    let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
    // socket2 sets close-on-exec.
    let sock = Socket::new(domain, Type::DGRAM, Some(socket2::Protocol::UDP))?;
    sock.set_nonblocking(true)?;
    if cfg.rcvbuf > 0 {
        sock.set_recv_buffer_size(cfg.rcvbuf)?;
    }
    if cfg.sndbuf > 0 {
        sock.set_send_buffer_size(cfg.sndbuf)?;
    }
    let (level, opt, val) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
    };
    setsockopt_int(&sock, level, opt, val)?;
    if ipv6 {
        sock.set_only_v6(true)?;
    } else {
        sock.set_multicast_all_v4(false)?;
    }
    Ok(sock)
}

fn setsockopt_int(sock: &Socket, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> Result<()> {
    // SAFETY: `val` is a valid c_int that outlives the call, and its size is given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            &val as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Bind `sock` to `addr` (port 0: a free one); the address it is bound to.
pub(crate) fn bind(sock: &Socket, addr: SocketAddr) -> Result<SocketAddr> {
    sock.bind(&addr.into()).inspect_err(|e| {
        fi_log!(Level::Info, NAME, "ep_ctrl", "cannot bind a socket to {addr}: {e}");
    })?;
    sock.local_addr()?.as_socket().ok_or(Error::Inval)
}

/// The error of a failed send: back-pressure (the socket's or the device's queue
/// is full) is `FI_EAGAIN`.
fn send_error(e: std::io::Error) -> Error {
    match Error::from(e) {
        Error::NoBufs => Error::Again,
        other => other,
    }
}

/// A `msghdr` kept from one system call to the next, so that each writes only
/// the fields it changes: all zeroes when made (no name, no pieces, no control
/// data), and the control fields stay so.
pub(crate) struct MsgHdr(libc::msghdr);

// SAFETY: a msghdr is plain data but for its pointers, which each call here writes
// just before its system call and only the kernel reads, during that call; nothing
// dereferences them otherwise, so a MsgHdr moved to another thread shares nothing
// with the one it left.
unsafe impl Send for MsgHdr {}

impl MsgHdr {
    /// An empty header.
    pub(crate) fn new() -> MsgHdr {
        // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value.
        MsgHdr(unsafe { std::mem::zeroed() })
    }
}

/// Send one datagram to `dest`, gathered from `iov` straight from memory with one
/// `sendmsg`: the bytes sent. `Err(Again)` when the socket cannot take it now,
/// `Err(MsgSize)` when it is larger than the path carries, `Err(Inval)` for more
/// than [`MAX_IOV`] pieces.
///
/// # Safety
/// Every `IoVec` in `iov` must be valid for reads of its length for the duration
/// of the call.
#[inline(always)]
pub(crate) unsafe fn send_iov(sock: &Socket, iov: &[IoVec], dest: &SockAddr) -> Result<usize> {
    // SAFETY: the caller's contract, which is `send_with`'s.
    unsafe { send_with(&mut MsgHdr::new(), sock, iov, dest) }
}

/// [`send_iov`] through `hdr`, a header kept by the caller (only its name and
/// pieces are written).
///
/// # Safety
/// As [`send_iov`].
#[inline(always)]
pub(crate) unsafe fn send_with(hdr: &mut MsgHdr, sock: &Socket, iov: &[IoVec], dest: &SockAddr) -> Result<usize> {
    if iov.len() > MAX_IOV {
        return Err(Error::Inval);
    }
    let msg = &mut hdr.0;
    msg.msg_name = dest.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = dest.len();
    // An `IoVec` is a `struct iovec` (see `as_iovecs`): the kernel reads the
    // caller's list as it is.
    msg.msg_iov = as_iovecs(iov);
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points to the destination address and to `iov.len()`
        // iovecs, which describe memory valid for reads (the caller's contract),
        // and to no control data; the kernel only reads them.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        match failed_send() {
            Some(e) => return Err(e),
            None => continue,
        }
    }
}

/// What the `sendmsg` that just failed means: `None` to try again (a signal
/// interrupted it), else the error ([`send_error`]; `Again` for `EAGAIN`).
#[cold]
#[inline(never)]
fn failed_send() -> Option<Error> {
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EAGAIN) {
        return Some(Error::Again);
    }
    (e.kind() != std::io::ErrorKind::Interrupted).then(|| send_error(e))
}

// `IoVec` is `#[repr(C)]` { pointer, length }, as `struct iovec` is.
const _: () = assert!(
    std::mem::size_of::<IoVec>() == std::mem::size_of::<libc::iovec>()
        && std::mem::align_of::<IoVec>() == std::mem::align_of::<libc::iovec>()
        && std::mem::offset_of!(IoVec, base) == std::mem::offset_of!(libc::iovec, iov_base)
        && std::mem::offset_of!(IoVec, len) == std::mem::offset_of!(libc::iovec, iov_len)
);

/// A list of pieces as the kernel's `struct iovec` array (the same layout,
/// checked above). The kernel never writes the array itself, only (for a receive)
/// the memory it describes, so the `*mut` is only what `msghdr` asks for.
fn as_iovecs(iov: &[IoVec]) -> *mut libc::iovec {
    iov.as_ptr() as *mut libc::iovec
}

/// Send one datagram of `data` to `dest` (a copy-free `sendto`), as
/// [`send_iov`].
pub(crate) fn send_slice(sock: &Socket, data: &[u8], dest: &SockAddr) -> Result<usize> {
    let iov = [IoVec { base: data.as_ptr() as *mut u8, len: data.len() }];
    // SAFETY: `iov` describes `data`, which is borrowed (valid for reads) for the
    // whole call; `send_iov` only reads through it.
    unsafe { send_iov(sock, &iov, dest) }
}

/// One datagram taken from a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Datagram {
    /// Bytes written into the buffers.
    pub len: usize,
    /// The datagram's size: more than `len` when it was truncated to fit.
    pub size: usize,
    /// The sender (IPv4-mapped IPv6 addresses given as IPv4).
    pub src: Option<SocketAddr>,
}

/// Take one datagram from `sock`, scattering it straight into `iov` with one
/// `recvmsg`; a datagram longer than the buffers is truncated to them, and
/// [`Datagram::size`] says how long it was. `Err(Again)` when none is waiting,
/// `Err(Inval)` for more than [`MAX_IOV`] pieces.
///
/// # Safety
/// Every `IoVec` in `iov` must be valid for writes of its length and not be read
/// or written by anyone else for the duration of the call.
pub(crate) unsafe fn recv_iov(sock: &Socket, iov: &[IoVec]) -> Result<Datagram> {
    let mut src = RawSource::new();
    // SAFETY: the caller's contract, which is `recv_raw`'s.
    let size = unsafe { recv_raw(sock, iov, &mut src) }?;
    Ok(Datagram { len: size.min(IoVec::total(iov)), size, src: src.addr() })
}

/// The sender's address the kernel wrote: an IPv4 address read directly, any
/// other family through socket2 (IPv4-mapped IPv6 addresses given as IPv4).
///
/// # Safety
/// `p` points to a `sockaddr_storage` whose first `len` bytes the kernel wrote.
unsafe fn source_of(p: *const libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    // SAFETY: `ss_family` lies in the first bytes, which the kernel writes for any
    // address it returns; `len` says whether it returned one.
    if len as usize >= std::mem::size_of::<libc::sockaddr_in>() && unsafe { (*p).ss_family } as i32 == libc::AF_INET {
        // SAFETY: an AF_INET address of full length: a `sockaddr_in` was written.
        let sin = unsafe { &*(p as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        return Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)));
    }
    if len == 0 {
        return None;
    }
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut full: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: the first `n` bytes at `p` were written by the kernel (the
    // contract); `full` is our own storage of at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, &mut full as *mut libc::sockaddr_storage as *mut u8, n) };
    // SAFETY: `full` holds the address the kernel wrote, `n` bytes of it.
    let sa = unsafe { SockAddr::new(full, n as libc::socklen_t) };
    sa.as_socket().map(unmap)
}

/// What the `recvmsg` that just failed means: `None` to try again (a signal
/// interrupted it), else the error (`Again` for `EAGAIN`).
#[cold]
#[inline(never)]
fn failed_recv() -> Option<Error> {
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EAGAIN) {
        return Some(Error::Again);
    }
    (e.kind() != std::io::ErrorKind::Interrupted).then(|| e.into())
}

/// A sender's address as [`recv_raw`] leaves it: the kernel's bytes, read only
/// when needed. An IPv4 sender (the common case) is compared and remembered by its
/// [`key`](RawSource::key) alone, without building a `SocketAddr`. One is made
/// once per endpoint and reused for every datagram, so it costs nothing per receive.
pub(crate) struct RawSource {
    /// All zeroes when made, then what the kernel wrote last: always initialised,
    /// so reading any of it is sound; only the first `len` bytes mean something.
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
    /// The `recvmsg` header: each receive writes only its name, name length and
    /// pieces.
    hdr: MsgHdr,
}

impl RawSource {
    /// Room for any sender's address; none yet.
    pub(crate) fn new() -> RawSource {
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
        RawSource { storage: unsafe { std::mem::zeroed() }, len: 0, hdr: MsgHdr::new() }
    }

    /// An IPv4 sender's family, port and address in one nonzero word (the first
    /// eight bytes of its `sockaddr_in`, as the kernel wrote them: equal for equal
    /// senders, and never 0, the family being `AF_INET`), or 0 for any other sender
    /// (or none).
    #[inline]
    pub(crate) fn key(&self) -> u64 {
        if (self.len as usize) < std::mem::size_of::<libc::sockaddr_in>()
            || i32::from(self.storage.ss_family) != libc::AF_INET
        {
            return 0;
        }
        // A `sockaddr_in` starts with its family, port and address, in eight bytes.
        self.first_word()
    }

    /// The first eight bytes of the sender's address as one word, or 0 when the
    /// kernel gave less than a `sockaddr_in`: equal to [`key`](RawSource::key) for
    /// an IPv4 sender, and for any other sender 0 or a word whose family is not
    /// `AF_INET`, so unequal to every IPv4 sender's key. Comparing it against a
    /// remembered key answers "the same IPv4 sender?" without checking the family.
    #[inline]
    pub(crate) fn word(&self) -> u64 {
        if (self.len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
            return 0;
        }
        self.first_word()
    }

    /// The storage's first eight bytes, as one word.
    #[inline]
    fn first_word(&self) -> u64 {
        const _: () = assert!(
            std::mem::align_of::<libc::sockaddr_storage>() >= std::mem::align_of::<u64>()
                && std::mem::size_of::<libc::sockaddr_storage>() >= std::mem::size_of::<u64>()
        );
        // SAFETY: the storage is always initialised (zeroed when made, then written
        // by the kernel), aligned for a u64 and longer than one (checked above).
        unsafe { std::ptr::read(&self.storage as *const libc::sockaddr_storage as *const u64) }
    }

    /// The sender's address (IPv4-mapped IPv6 addresses given as IPv4), `None`
    /// when the kernel gave none.
    pub(crate) fn addr(&self) -> Option<SocketAddr> {
        let len = self.len.min(std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t);
        // SAFETY: the first `len` bytes of the storage were written by the kernel.
        unsafe { source_of(&self.storage, len) }
    }
}

/// Take one datagram from `sock`, scattering it straight into `iov` with one
/// `recvmsg`, and leave its sender in `src` as the kernel wrote it: the
/// datagram's size (more than the buffers hold when it was truncated to them).
/// `Err(Again)` when none is waiting, `Err(Inval)` for more than [`MAX_IOV`]
/// pieces.
///
/// # Safety
/// Every `IoVec` in `iov` must be valid for writes of its length and not be read
/// or written by anyone else for the duration of the call.
#[inline]
pub(crate) unsafe fn recv_raw(sock: &Socket, iov: &[IoVec], src: &mut RawSource) -> Result<usize> {
    if iov.len() > MAX_IOV {
        return Err(Error::Inval);
    }
    // The header's control fields stay as made (none); the kernel writes back
    // only the name length and the flags.
    let msg = &mut src.hdr.0;
    msg.msg_name = &mut src.storage as *mut libc::sockaddr_storage as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = as_iovecs(iov);
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points to `src`'s storage (its size given) and to
        // `iov.len()` iovecs valid for writes and not otherwise accessed (the
        // caller's contract); the kernel writes at most those lengths and reads
        // the iovec array only. MSG_TRUNC makes it return the datagram's real
        // size.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        if n >= 0 {
            src.len = msg.msg_namelen;
            return Ok(n as usize);
        }
        match failed_recv() {
            Some(e) => return Err(e),
            None => continue,
        }
    }
}

/// Drop one datagram waiting on `sock` without copying it: its size and sender.
/// `Err(Again)` when none is waiting.
pub(crate) fn discard(sock: &Socket) -> Result<Datagram> {
    // SAFETY: no pieces: nothing is written but the address and flags.
    unsafe { recv_iov(sock, &[]) }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(ip) => SocketAddr::new(ip.into(), v6.port()),
            None => a,
        },
        a => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config { iface: None, rcvbuf: 0, sndbuf: 0 }
    }

    fn pair() -> (Socket, SocketAddr, Socket, SocketAddr) {
        let a = open(false, &cfg()).unwrap();
        let an = bind(&a, "127.0.0.1:0".parse().unwrap()).unwrap();
        let b = open(false, &cfg()).unwrap();
        let bn = bind(&b, "127.0.0.1:0".parse().unwrap()).unwrap();
        (a, an, b, bn)
    }

    fn wait_readable(s: &Socket) {
        let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 5000) };
    }

    #[test]
    fn gather_scatter_and_truncation() {
        let (a, an, b, bn) = pair();
        let head = *b"head";
        let body = [7u8; 100];
        let iov =
            [IoVec { base: head.as_ptr() as *mut u8, len: 4 }, IoVec { base: body.as_ptr() as *mut u8, len: 100 }];
        // SAFETY: both pieces are live arrays.
        assert_eq!(unsafe { send_iov(&a, &iov, &bn.into()) }.unwrap(), 104);
        wait_readable(&b);
        let mut x = [0u8; 10];
        let mut y = [0u8; 50];
        let out = [IoVec { base: x.as_mut_ptr(), len: 10 }, IoVec { base: y.as_mut_ptr(), len: 50 }];
        // SAFETY: both pieces are live, unaliased arrays.
        let d = unsafe { recv_iov(&b, &out) }.unwrap();
        assert_eq!(d, Datagram { len: 60, size: 104, src: Some(an) });
        assert_eq!(&x[..4], b"head");
        assert_eq!(x[4..], [7; 6]);
        assert_eq!(y, [7; 50]);
        // SAFETY: as above.
        assert_eq!(unsafe { recv_iov(&b, &out) }.unwrap_err(), Error::Again);
        send_slice(&a, b"gone", &bn.into()).unwrap();
        wait_readable(&b);
        assert_eq!(discard(&b).unwrap(), Datagram { len: 0, size: 4, src: Some(an) });
        assert_eq!(discard(&b).unwrap_err(), Error::Again);
    }

    #[test]
    fn raw_sources_key_ipv4_senders() {
        let (a, an, b, bn) = pair();
        let (c, cn, _, _) = pair();
        send_slice(&a, b"one", &bn.into()).unwrap();
        send_slice(&c, b"two", &bn.into()).unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            wait_readable(&b);
            let mut buf = [0u8; 2];
            let out = [IoVec { base: buf.as_mut_ptr(), len: 2 }];
            let mut src = RawSource::new();
            // SAFETY: one live, unaliased array.
            let n = unsafe { recv_raw(&b, &out, &mut src) }.unwrap();
            assert_eq!(n, 3, "the datagram's size, beyond the buffer");
            got.push((src.key(), src.addr().unwrap(), buf));
        }
        assert_eq!((got[0].1, got[0].2), (an, *b"on"));
        assert_eq!((got[1].1, got[1].2), (cn, *b"tw"));
        assert!(got[0].0 != 0 && got[1].0 != 0, "IPv4 senders have a key");
        assert_ne!(got[0].0, got[1].0, "two senders, two keys");
        // One source reused for both senders, as an endpoint does: each gets its key again.
        send_slice(&a, b"three", &bn.into()).unwrap();
        wait_readable(&b);
        let mut src = RawSource::new();
        // SAFETY: no pieces.
        unsafe { recv_raw(&b, &[], &mut src) }.unwrap();
        let first = src.key();
        send_slice(&c, b"four", &bn.into()).unwrap();
        wait_readable(&b);
        // SAFETY: no pieces.
        unsafe { recv_raw(&b, &[], &mut src) }.unwrap();
        assert_eq!((first, src.key(), src.addr()), (got[0].0, got[1].0, Some(cn)));
        let mut src = RawSource::new();
        assert_eq!(src.key(), 0, "no sender yet");
        // SAFETY: no pieces.
        assert_eq!(unsafe { recv_raw(&b, &[], &mut src) }.unwrap_err(), Error::Again);
    }

    #[test]
    fn oversized_datagrams_are_refused() {
        let (a, _, _, bn) = pair();
        let big = vec![0u8; 70000];
        assert_eq!(send_slice(&a, &big, &bn.into()).unwrap_err(), Error::MsgSize);
        let many = [IoVec { base: big.as_ptr() as *mut u8, len: 1 }; MAX_IOV + 1];
        // SAFETY: every piece is one byte of `big`.
        assert_eq!(unsafe { send_iov(&a, &many, &bn.into()) }.unwrap_err(), Error::Inval);
    }
}

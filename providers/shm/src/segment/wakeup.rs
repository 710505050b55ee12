//! Wake-ups: a datagram to an abstract unix socket named after the endpoint
//! ([`Waker`] receives, [`wake`] sends).

use super::valid_name;
use fabric_core::{Error, Result};
use std::io;
use std::mem::{self, offset_of};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::OnceLock;

/// The abstract unix socket address of endpoint `name`: `"\0" + name`.
fn abstract_addr(name: &str) -> Option<(libc::sockaddr_un, libc::socklen_t)> {
    if !valid_name(name) {
        return None;
    }
    // SAFETY: sockaddr_un is plain integers and bytes, for which all zeroes is valid.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace. NAME_MAX + 1 < 108 bytes.
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    Some((addr, len as libc::socklen_t))
}

/// A new non-blocking, close-on-exec unix datagram socket.
fn dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket touches no memory of ours.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The receiving end of an endpoint's wake-ups: a non-blocking unix datagram socket bound
/// to the abstract address `"\0" + name`. Poll [`fd`](Waker::fd) for reading to sleep,
/// and [`drain`](Waker::drain) it after waking.
///
/// Abstract addresses have no permissions: any process (of the network namespace) may
/// wake us, which costs a spurious wake-up at worst.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// Bind the wake-up socket of endpoint `name`. [`Error::AddrInUse`] when another
    /// socket has the address, [`Error::Inval`] for an invalid name.
    pub fn bind(name: &str) -> Result<Waker> {
        let (addr, len) = abstract_addr(name).ok_or(Error::Inval)?;
        let fd = dgram_socket()?;
        // SAFETY: `addr` is a valid sockaddr_un of which `len` bytes are initialised; bind
        // only reads it.
        let r = unsafe { libc::bind(fd.as_raw_fd(), ptr::addr_of!(addr).cast(), len) };
        if r != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Waker { fd })
    }

    /// The socket, to poll for reading.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Read every pending wake-up; how many there were.
    pub fn drain(&self) -> usize {
        let mut n = 0;
        let mut buf = [0u8; 16];
        loop {
            // SAFETY: receives at most buf.len() bytes into `buf`, which is ours.
            let r = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if r >= 0 {
                n += 1;
                continue;
            }
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return n;
        }
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Wake endpoint `name`: send a one-byte datagram to its [`Waker`]. Best effort, never
/// blocks: errors are ignored (nobody bound, or a full queue, which means wake-ups are
/// pending already).
pub fn wake(name: &str) {
    static SENDER: OnceLock<Option<OwnedFd>> = OnceLock::new();
    let Some((addr, len)) = abstract_addr(name) else { return };
    let Some(fd) = SENDER.get_or_init(|| dgram_socket().ok()) else { return };
    let byte = 1u8;
    // SAFETY: sends one byte from `byte`; `addr` is a valid sockaddr_un of which `len`
    // bytes are initialised. Both are only read.
    unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            ptr::addr_of!(byte).cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            ptr::addr_of!(addr).cast(),
            len,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::new_name;
    use crate::segment::testutil::poll_in;

    #[test]
    fn wake_makes_the_waker_readable() {
        let name = new_name();
        let w = Waker::bind(&name).unwrap();
        assert_eq!(Waker::bind(&name).unwrap_err(), Error::AddrInUse);
        assert_eq!(Waker::bind("a/b").unwrap_err(), Error::Inval);
        assert!(!poll_in(w.fd(), 0));
        assert_eq!(w.drain(), 0);
        wake(&name);
        assert!(poll_in(w.fd(), 1000));
        assert_eq!(w.drain(), 1);
        assert!(!poll_in(w.fd(), 0));
        // Many wake-ups never block, whatever the queue holds.
        for _ in 0..10_000 {
            wake(&name);
        }
        assert!(poll_in(w.fd(), 1000));
        assert!(w.drain() >= 1);
        assert!(!poll_in(w.fd(), 0));
        // Nobody there, or no valid name: ignored.
        wake(&new_name());
        wake("../bad");
        drop(w);
        wake(&name);
    }
}

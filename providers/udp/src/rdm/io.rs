//! The socket calls of the data path, straight to the system (no `io::Error`
//! built for the `EAGAIN` that ends every receive pass, no socket address
//! converted for every datagram sent).

use socket2::SockAddr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Read one datagram into `buf` (the socket is non-blocking): its length and
/// sender, or the error number (`EAGAIN` when none waits).
pub(super) fn recv_from(fd: RawFd, buf: &mut [u8]) -> Result<(usize, SocketAddr), i32> {
    let mut ss = std::mem::MaybeUninit::<libc::sockaddr_storage>::uninit();
    let mut sl = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `buf` is writable for `buf.len()` bytes and `ss` for `sl` bytes;
    // the kernel writes no more than that into either.
    let n = unsafe { libc::recvfrom(fd, buf.as_mut_ptr().cast(), buf.len(), 0, ss.as_mut_ptr().cast(), &mut sl) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    let ss = ss.as_ptr();
    // SAFETY: the kernel wrote the sender's address (`sl` bytes) into `ss`; its
    // family field says which of the address types it is, and `sl` that it is
    // whole. The reads are unaligned-safe: `sockaddr_storage` is aligned for
    // every address type.
    let from = unsafe {
        match i32::from((*ss).ss_family) {
            libc::AF_INET if sl as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
                let a = &*ss.cast::<libc::sockaddr_in>();
                SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 if sl as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let a = &*ss.cast::<libc::sockaddr_in6>();
                SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                ))
            }
            _ => return Err(libc::EAFNOSUPPORT),
        }
    };
    Ok((n as usize, from))
}

/// Send `data` as one datagram to `to` (the socket is non-blocking): the
/// error number on failure (`EAGAIN` when the socket buffer is full).
pub(super) fn send_to(fd: RawFd, data: &[u8], to: &SockAddr) -> Result<(), i32> {
    // SAFETY: `data` is readable for its length, `to` holds a socket address of
    // `to.len()` bytes.
    let n = unsafe { libc::sendto(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL, to.as_ptr(), to.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_datagram_there_and_back() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(a) = UdpSocket::bind(host) else { continue };
            let b = UdpSocket::bind(host).unwrap();
            a.set_nonblocking(true).unwrap();
            b.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 16];
            assert_eq!(recv_from(b.as_raw_fd(), &mut buf), Err(libc::EAGAIN));
            send_to(a.as_raw_fd(), b"hello", &SockAddr::from(b.local_addr().unwrap())).unwrap();
            // Loopback delivers at once; wait for it all the same.
            let got = loop {
                match recv_from(b.as_raw_fd(), &mut buf) {
                    Err(libc::EAGAIN) => std::thread::yield_now(),
                    r => break r,
                }
            };
            assert_eq!(got, Ok((5, a.local_addr().unwrap())));
            assert_eq!(&buf[..5], b"hello");
        }
    }
}

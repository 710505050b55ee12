//! The thin layer over libibverbs and librdmacm (through `rdma-sys`): each C object
//! the provider uses, owned by one Rust value that releases it on drop, and the
//! few calls the rest of the crate makes. Every `unsafe` block of the crate that
//! calls C is here or says why it is sound where it is.
//!
//! Thread safety: libibverbs and librdmacm objects may be used from any thread
//! (rdma-core serialises inside each call where the object needs it); the
//! provider calls them under its own locks anyway, so the `Send`/`Sync`
//! implementations below only say that the pointers may cross threads.

use rdma_sys as sys;
use std::ffi::CStr;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

mod cm;
mod device;
mod resources;

pub(crate) use cm::*;
pub(crate) use device::*;
pub(crate) use resources::*;

/// `IBV_LINK_LAYER_INFINIBAND` (not in rdma-sys's bindings).
pub(crate) const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;

/// The errno of the last failed C call.
pub(crate) fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// A C call's integer result: 0 is success; otherwise the error (some calls return
/// the errno, others -1 with errno set).
fn check(r: i32) -> io::Result<()> {
    match r {
        0 => Ok(()),
        -1 => Err(last_err()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        _ => Err(last_err()),
    }
}

/// Set `O_NONBLOCK` on a descriptor the C library owns.
fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor owned by a live verbs object; no pointers.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(last_err());
        }
    }
    Ok(())
}

//! One-sided operations (`struct fi_ops_rma`): `fi_write`, `fi_read` and their
//! variants, posted straight to the provider with the caller's buffers; reads
//! and writes complete on the transmit queue.

use crate::abi;
use crate::ep::{with_ep, Ep};
use crate::ep_msg::{inject_bytes, iovs};
use crate::fid::{self, EINVAL};
use fabric_core::prov::{IoVec, RmaOp};
use fabric_core::{FiAddr, OpFlags, RmaIov};
use std::ffi::c_void;

/// The most remote pieces one operation takes.
const RMA_IOV_MAX: usize = 4;

static RMA_OPS: abi::fi_ops_rma = abi::fi_ops_rma {
    size: std::mem::size_of::<abi::fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
};

/// The table for `fid_ep.rma`.
pub(crate) fn ops() -> *mut abi::fi_ops_rma {
    &RMA_OPS as *const _ as *mut _
}

/// Post a read (`rx`) or write of `iov` to `rma` at `peer`.
///
/// # Safety
/// The buffers `iov` describes stay valid until the operation's completion.
#[allow(clippy::too_many_arguments)]
unsafe fn post(
    e: &Ep,
    read: bool,
    iov: &[IoVec],
    peer: u64,
    rma: &[RmaIov],
    ctx: *mut c_void,
    data: u64,
    flags: OpFlags,
) -> isize {
    let op = RmaOp { iov, addr: FiAddr(peer), rma, context: ctx as u64, user_context: ctx as u64, data };
    // SAFETY: the caller's buffers, valid until completion (libfabric's rule).
    let r = unsafe {
        if read {
            e.prov().post_read(&op, flags)
        } else {
            e.prov().post_write(&op, flags)
        }
    };
    fid::sret(r)
}

/// `fi_read`/`fi_write` and their `v` forms: the local pieces, one remote piece.
///
/// # Safety
/// `ep_` NULL or a live fid; `iov` valid for `count` entries, their buffers
/// until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn post_iov(
    what: &str,
    ep_: *mut abi::fid_ep,
    read: bool,
    iov: *const abi::iovec,
    count: usize,
    peer: u64,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
    data: u64,
    extra: OpFlags,
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: the caller's array of `count` entries.
        let Some(v) = (unsafe { iovs(iov, count, e.tx_iov_limit) }) else {
            return EINVAL as isize;
        };
        let rma = [RmaIov { addr, len: IoVec::total(v), key }];
        // SAFETY: the caller's buffers, valid until completion.
        unsafe { post(e, read, v, peer, &rma, ctx, data, e.tx_flags() | extra) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// `fi_readmsg`/`fi_writemsg`.
///
/// # Safety
/// `msg` NULL or valid; its buffers valid until completion.
unsafe fn post_msg(what: &str, ep_: *mut abi::fid_ep, read: bool, msg: *const abi::fi_msg_rma, flags: u64) -> isize {
    let f = |e: &Ep| {
        // SAFETY: NULL or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL as isize;
        };
        // SAFETY: the message's array of `iov_count` entries.
        let Some(v) = (unsafe { iovs(m.msg_iov, m.iov_count, e.tx_iov_limit) }) else {
            return EINVAL as isize;
        };
        let n = m.rma_iov_count;
        if n == 0 || n > RMA_IOV_MAX || m.rma_iov.is_null() {
            return EINVAL as isize;
        }
        let mut rma = [RmaIov { addr: 0, len: 0, key: 0 }; RMA_IOV_MAX];
        for (i, r) in rma.iter_mut().enumerate().take(n) {
            // SAFETY: the message's `rma_iov_count` remote pieces.
            let c = unsafe { m.rma_iov.add(i).read_unaligned() };
            *r = RmaIov { addr: c.addr, len: c.len, key: c.key };
        }
        // SAFETY: the caller's buffers, valid until completion.
        unsafe { post(e, read, v, m.addr, &rma[..n], m.context, m.data, e.tx_msg(flags)) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// One buffer as an iovec.
fn one(buf: *const c_void, len: usize) -> abi::iovec {
    abi::iovec { iov_base: buf as *mut c_void, iov_len: len }
}

unsafe extern "C" fn read(
    ep: *mut abi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: abi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    let v = one(buf, len);
    // SAFETY: the caller's arguments, as fi_read documents them.
    unsafe { post_iov("fi_read", ep, true, &v, 1, src, addr, key, ctx, 0, OpFlags::empty()) }
}

unsafe extern "C" fn readv(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: abi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_readv documents them.
    unsafe { post_iov("fi_readv", ep, true, iov, count, src, addr, key, ctx, 0, OpFlags::empty()) }
}

unsafe extern "C" fn readmsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_readmsg documents them.
    unsafe { post_msg("fi_readmsg", ep, true, msg, flags) }
}

unsafe extern "C" fn write(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    let v = one(buf, len);
    // SAFETY: the caller's arguments, as fi_write documents them.
    unsafe { post_iov("fi_write", ep, false, &v, 1, dest, addr, key, ctx, 0, OpFlags::empty()) }
}

unsafe extern "C" fn writev(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_writev documents them.
    unsafe { post_iov("fi_writev", ep, false, iov, count, dest, addr, key, ctx, 0, OpFlags::empty()) }
}

unsafe extern "C" fn writemsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_writemsg documents them.
    unsafe { post_msg("fi_writemsg", ep, false, msg, flags) }
}

unsafe extern "C" fn writedata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    let v = one(buf, len);
    // SAFETY: the caller's arguments, as fi_writedata documents them.
    unsafe { post_iov("fi_writedata", ep, false, &v, 1, dest, addr, key, ctx, data, OpFlags::REMOTE_CQ_DATA) }
}

/// `fi_inject_write` and `fi_inject_writedata`: copied before return, no
/// completion.
#[allow(clippy::too_many_arguments)]
fn inject_any(
    what: &str,
    ep_: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    addr: u64,
    key: u64,
    flags: OpFlags,
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: the caller's `len` bytes, read during the call only.
        let Some(bytes) = (unsafe { inject_bytes(e, buf, len) }) else {
            return EINVAL as isize;
        };
        let rma = [RmaIov { addr, len, key }];
        let op = RmaOp { iov: &[], addr: FiAddr(dest), rma: &rma, context: 0, user_context: 0, data };
        fid::sret(e.prov().inject_write(bytes, &op, flags))
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

unsafe extern "C" fn inject(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    inject_any("fi_inject_write", ep, buf, len, 0, dest, addr, key, OpFlags::empty())
}

unsafe extern "C" fn injectdata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    inject_any("fi_inject_writedata", ep, buf, len, data, dest, addr, key, OpFlags::REMOTE_CQ_DATA)
}

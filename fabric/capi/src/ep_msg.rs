//! Messages (`struct fi_ops_msg`): `fi_send`, `fi_recv` and their variants,
//! posted straight to the provider with the caller's buffers (no copy, no
//! allocation); `void *context` is the operation's completion context.

use crate::abi;
use crate::ep::{with_ep, Ep};
use crate::fid::{self, EINVAL};
use fabric_core::prov::{IoVec, Op};
use fabric_core::{FiAddr, OpFlags};
use std::ffi::c_void;

static MSG_OPS: abi::fi_ops_msg = abi::fi_ops_msg {
    size: std::mem::size_of::<abi::fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
};

/// The table for `fid_ep.msg`.
pub(crate) fn ops() -> *mut abi::fi_ops_msg {
    &MSG_OPS as *const _ as *mut _
}

/// What one data-transfer call posts, besides its buffers.
pub(crate) struct Post {
    /// Peer (destination or source filter).
    pub(crate) addr: u64,
    /// The caller's context.
    pub(crate) context: *mut c_void,
    /// Remote CQ data.
    pub(crate) data: u64,
    /// Tag.
    pub(crate) tag: u64,
    /// Ignore mask.
    pub(crate) ignore: u64,
}

/// The caller's iovec array as IoVecs (same layout: `struct iovec`).
///
/// # Safety
/// `iov` is NULL or valid for reads of `count` entries, for `'a`.
#[inline(always)]
pub(crate) unsafe fn iovs<'a>(iov: *const abi::iovec, count: usize, limit: usize) -> Option<&'a [IoVec]> {
    if count > limit || (iov.is_null() && count > 0) {
        return None;
    }
    if count == 0 {
        return Some(&[]);
    }
    const _: () = assert!(std::mem::size_of::<IoVec>() == std::mem::size_of::<abi::iovec>());
    // SAFETY: `struct iovec` and `IoVec` are both `{ pointer, size_t }` in C
    // layout; the caller's array holds `count` entries.
    Some(unsafe { std::slice::from_raw_parts(iov as *const IoVec, count) })
}

/// Post a send (`rx` false) or receive of `iov` on `e`.
///
/// # Safety
/// The buffers `iov` describes stay valid (for reads of a send, writes of a
/// receive) until the operation's completion, as libfabric requires of callers.
#[inline(always)]
pub(crate) unsafe fn post(e: &Ep, rx: bool, iov: &[IoVec], p: &Post, flags: OpFlags) -> isize {
    let addr = if rx && !e.directed { FiAddr::UNSPEC } else { FiAddr(p.addr) };
    let op = Op {
        iov,
        addr,
        context: p.context as u64,
        user_context: p.context as u64,
        data: p.data,
        tag: p.tag,
        ignore: p.ignore,
    };
    // SAFETY: the caller's buffers, valid until completion (see above).
    let r = unsafe {
        if rx {
            e.prov().post_recv(&op, flags)
        } else {
            e.prov().post_send(&op, flags)
        }
    };
    fid::sret(r)
}

/// Post one buffer.
///
/// # Safety
/// `ep` is NULL or a live fid; `buf` valid for `len` bytes until completion.
#[inline(always)]
pub(crate) unsafe fn post_buf(
    what: &str,
    ep_: *mut abi::fid_ep,
    rx: bool,
    buf: *const c_void,
    len: usize,
    p: Post,
    extra: OpFlags,
) -> isize {
    let f = |e: &Ep| {
        if buf.is_null() && len > 0 {
            return EINVAL as isize;
        }
        let iov = [IoVec { base: buf as *mut u8, len }];
        let flags = if rx { e.rx_flags() } else { e.tx_flags() } | extra;
        // SAFETY: the caller's buffer, valid until completion.
        unsafe { post(e, rx, &iov, &p, flags) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// Post an iovec array.
///
/// # Safety
/// As [`post_buf`], for each of the `count` entries of `iov`.
#[inline(always)]
pub(crate) unsafe fn post_iov(
    what: &str,
    ep_: *mut abi::fid_ep,
    rx: bool,
    iov: *const abi::iovec,
    count: usize,
    p: Post,
    extra: OpFlags,
) -> isize {
    let f = |e: &Ep| {
        let limit = if rx { e.rx_iov_limit } else { e.tx_iov_limit };
        // SAFETY: the caller's array of `count` entries.
        let Some(v) = (unsafe { iovs(iov, count, limit) }) else {
            return EINVAL as isize;
        };
        let flags = if rx { e.rx_flags() } else { e.tx_flags() } | extra;
        // SAFETY: the caller's buffers, valid until completion.
        unsafe { post(e, rx, v, &p, flags) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// Inject `len` bytes at `buf` (copied before return; no completion).
///
/// # Safety
/// `ep` is NULL or a live fid; `buf` valid for `len` bytes during the call.
#[inline(always)]
pub(crate) unsafe fn inject_buf(
    what: &str,
    ep_: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    p: Post,
    flags: OpFlags,
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: the caller's buffer of `len` bytes, read during the call only.
        let Some(data) = (unsafe { inject_bytes(e, buf, len) }) else {
            return EINVAL as isize;
        };
        let op =
            Op { iov: &[], addr: FiAddr(p.addr), context: 0, user_context: 0, data: p.data, tag: p.tag, ignore: 0 };
        // An endpoint whose tx_attr.op_flags has FI_MULTICAST sends to groups.
        fid::sret(e.prov().inject(data, &op, flags | (e.tx_flags() & OpFlags::MULTICAST)))
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// Post a message struct (`fi_msg`, `fi_msg_tagged`): `parts` reads its
/// iovec array, entry count and [`Post`]; `extra` joins the message flags.
///
/// # Safety
/// `msg` NULL or valid; its buffers as [`post_iov`]'s.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn post_msg<M>(
    what: &str,
    ep_: *mut abi::fid_ep,
    rx: bool,
    msg: *const M,
    flags: u64,
    extra: OpFlags,
    parts: impl FnOnce(&M) -> (*const abi::iovec, usize, Post),
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: NULL or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL as isize;
        };
        let (iov, count, p) = parts(m);
        let limit = if rx { e.rx_iov_limit } else { e.tx_iov_limit };
        // SAFETY: the message's array of `count` entries.
        let Some(v) = (unsafe { iovs(iov, count, limit) }) else {
            return EINVAL as isize;
        };
        let f = if rx { e.rx_msg(flags) } else { e.tx_msg(flags) } | extra;
        // SAFETY: the caller's buffers, valid until completion.
        unsafe { post(e, rx, v, &p, f) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// The parts of a `struct fi_msg`.
fn msg_parts(m: &abi::fi_msg) -> (*const abi::iovec, usize, Post) {
    (m.msg_iov, m.iov_count, Post { addr: m.addr, context: m.context, data: m.data, tag: 0, ignore: 0 })
}

/// The `len` bytes at `buf` an inject copies: `None` for NULL with a length,
/// or more than `e` injects.
///
/// # Safety
/// `buf` NULL or valid for reads of `len` bytes, for `'a`.
#[inline(always)]
pub(crate) unsafe fn inject_bytes<'a>(e: &Ep, buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if (buf.is_null() && len > 0) || len > e.inject_size {
        return None;
    }
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: the caller's buffer of `len` bytes.
    Some(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

fn plain(addr: u64, context: *mut c_void) -> Post {
    Post { addr, context, data: 0, tag: 0, ignore: 0 }
}

unsafe extern "C" fn recv(
    ep: *mut abi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: abi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_recv documents them.
    unsafe { post_buf("fi_recv", ep, true, buf, len, plain(src, context), OpFlags::empty()) }
}

unsafe extern "C" fn recvv(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: abi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_recvv documents them.
    unsafe { post_iov("fi_recvv", ep, true, iov, count, plain(src, context), OpFlags::empty()) }
}

unsafe extern "C" fn recvmsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_recvmsg documents them.
    unsafe { post_msg("fi_recvmsg", ep, true, msg, flags, OpFlags::empty(), msg_parts) }
}

unsafe extern "C" fn send(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: abi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_send documents them.
    unsafe { post_buf("fi_send", ep, false, buf, len, plain(dest, context), OpFlags::empty()) }
}

unsafe extern "C" fn sendv(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: abi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's arguments, as fi_sendv documents them.
    unsafe { post_iov("fi_sendv", ep, false, iov, count, plain(dest, context), OpFlags::empty()) }
}

unsafe extern "C" fn sendmsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_sendmsg documents them.
    unsafe { post_msg("fi_sendmsg", ep, false, msg, flags, OpFlags::empty(), msg_parts) }
}

unsafe extern "C" fn inject(ep: *mut abi::fid_ep, buf: *const c_void, len: usize, dest: abi::fi_addr_t) -> isize {
    // SAFETY: the caller's arguments, as fi_inject documents them.
    unsafe { inject_buf("fi_inject", ep, buf, len, plain(dest, std::ptr::null_mut()), OpFlags::empty()) }
}

unsafe extern "C" fn senddata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: abi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let p = Post { addr: dest, context, data, tag: 0, ignore: 0 };
    // SAFETY: the caller's arguments, as fi_senddata documents them.
    unsafe { post_buf("fi_senddata", ep, false, buf, len, p, OpFlags::REMOTE_CQ_DATA) }
}

unsafe extern "C" fn injectdata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: abi::fi_addr_t,
) -> isize {
    let p = Post { addr: dest, context: std::ptr::null_mut(), data, tag: 0, ignore: 0 };
    // SAFETY: the caller's arguments, as fi_injectdata documents them.
    unsafe { inject_buf("fi_injectdata", ep, buf, len, p, OpFlags::REMOTE_CQ_DATA) }
}

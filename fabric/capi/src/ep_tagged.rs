//! Tagged messages (`struct fi_ops_tagged`): as `ep_msg`, with a tag and, for
//! receives, an ignore mask; `fi_trecvmsg` takes `FI_PEEK`, `FI_CLAIM` and
//! `FI_DISCARD` where the provider has them.

use crate::abi;
use crate::ep_msg::{inject_buf, post_buf, post_iov, post_msg, Post};
use fabric_core::OpFlags;
use std::ffi::c_void;

static TAGGED_OPS: abi::fi_ops_tagged = abi::fi_ops_tagged {
    size: std::mem::size_of::<abi::fi_ops_tagged>(),
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

/// The table for `fid_ep.tagged`.
pub(crate) fn ops() -> *mut abi::fi_ops_tagged {
    &TAGGED_OPS as *const _ as *mut _
}

fn tagged(addr: u64, context: *mut c_void, tag: u64, ignore: u64) -> Post {
    Post { addr, context, data: 0, tag, ignore }
}

unsafe extern "C" fn recv(
    ep: *mut abi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: abi::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    let p = tagged(src, context, tag, ignore);
    // SAFETY: the caller's arguments, as fi_trecv documents them.
    unsafe { post_buf("fi_trecv", ep, true, buf, len, p, OpFlags::TAGGED) }
}

unsafe extern "C" fn recvv(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: abi::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    let p = tagged(src, context, tag, ignore);
    // SAFETY: the caller's arguments, as fi_trecvv documents them.
    unsafe { post_iov("fi_trecvv", ep, true, iov, count, p, OpFlags::TAGGED) }
}

/// The parts of a `struct fi_msg_tagged`.
fn msg_parts(m: &abi::fi_msg_tagged) -> (*const abi::iovec, usize, Post) {
    (m.msg_iov, m.iov_count, Post { addr: m.addr, context: m.context, data: m.data, tag: m.tag, ignore: m.ignore })
}

unsafe extern "C" fn recvmsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_trecvmsg documents them.
    unsafe { post_msg("fi_trecvmsg", ep, true, msg, flags, OpFlags::TAGGED, msg_parts) }
}

unsafe extern "C" fn send(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: abi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let p = tagged(dest, context, tag, 0);
    // SAFETY: the caller's arguments, as fi_tsend documents them.
    unsafe { post_buf("fi_tsend", ep, false, buf, len, p, OpFlags::TAGGED) }
}

unsafe extern "C" fn sendv(
    ep: *mut abi::fid_ep,
    iov: *const abi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: abi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let p = tagged(dest, context, tag, 0);
    // SAFETY: the caller's arguments, as fi_tsendv documents them.
    unsafe { post_iov("fi_tsendv", ep, false, iov, count, p, OpFlags::TAGGED) }
}

unsafe extern "C" fn sendmsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_tsendmsg documents them.
    unsafe { post_msg("fi_tsendmsg", ep, false, msg, flags, OpFlags::TAGGED, msg_parts) }
}

unsafe extern "C" fn inject(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: abi::fi_addr_t,
    tag: u64,
) -> isize {
    let p = tagged(dest, std::ptr::null_mut(), tag, 0);
    // SAFETY: the caller's arguments, as fi_tinject documents them.
    unsafe { inject_buf("fi_tinject", ep, buf, len, p, OpFlags::TAGGED) }
}

unsafe extern "C" fn senddata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: abi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let p = Post { addr: dest, context, data, tag, ignore: 0 };
    // SAFETY: the caller's arguments, as fi_tsenddata documents them.
    unsafe { post_buf("fi_tsenddata", ep, false, buf, len, p, OpFlags::TAGGED | OpFlags::REMOTE_CQ_DATA) }
}

unsafe extern "C" fn injectdata(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: abi::fi_addr_t,
    tag: u64,
) -> isize {
    let p = Post { addr: dest, context: std::ptr::null_mut(), data, tag, ignore: 0 };
    // SAFETY: the caller's arguments, as fi_tinjectdata documents them.
    unsafe { inject_buf("fi_tinjectdata", ep, buf, len, p, OpFlags::TAGGED | OpFlags::REMOTE_CQ_DATA) }
}

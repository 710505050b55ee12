//! Atomic operations (`struct fi_ops_atomic`): `fi_atomic`, `fi_fetch_atomic`,
//! `fi_compare_atomic` and their `v`/`msg` forms (one `fi_ioc` each: a
//! provider's atomic takes one operand buffer), and the `*valid` queries.
//! `fi_inject_atomic` answers `-FI_ENOSYS` (the provider contract has no
//! copy-at-once atomic).

use crate::abi;
use crate::ep::{with_ep, Ep};
use crate::fid::{self, EINVAL};
use fabric_core::prov::{AtomicDesc, IoVec};
use fabric_core::{AtomicKind, AtomicOp, Datatype, Error, FiAddr, OpFlags, RmaIov};
use std::ffi::{c_int, c_void};

static ATOMIC_OPS: abi::fi_ops_atomic = abi::fi_ops_atomic {
    size: std::mem::size_of::<abi::fi_ops_atomic>(),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    readwrite: Some(readwrite),
    readwritev: Some(readwritev),
    readwritemsg: Some(readwritemsg),
    compwrite: Some(compwrite),
    compwritev: Some(compwritev),
    compwritemsg: Some(compwritemsg),
    writevalid: Some(writevalid),
    readwritevalid: Some(readwritevalid),
    compwritevalid: Some(compwritevalid),
};

/// The table for `fid_ep.atomic`.
pub(crate) fn ops() -> *mut abi::fi_ops_atomic {
    &ATOMIC_OPS as *const _ as *mut _
}

/// The operation and datatype of a C call, if both are libfabric's.
fn op_type(datatype: abi::fi_datatype, op: abi::fi_op) -> Option<(AtomicOp, Datatype)> {
    let o = AtomicOp::from_u8(u8::try_from(op).ok()?)?;
    let d = Datatype::from_u8(u8::try_from(datatype).ok()?)?;
    Some((o, d))
}

/// What one atomic call names.
struct Call {
    kind: AtomicKind,
    op: abi::fi_op,
    datatype: abi::fi_datatype,
    count: usize,
    operand: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    peer: u64,
    addr: u64,
    key: u64,
    context: *mut c_void,
    data: u64,
}

/// Post `c` on `e` with `flags`.
///
/// # Safety
/// The operand and compare buffers (`count` elements) stay valid for reads,
/// the result buffer for writes, until the completion.
unsafe fn post(e: &Ep, c: &Call, flags: OpFlags) -> isize {
    let Some((op, datatype)) = op_type(c.datatype, c.op) else {
        return EINVAL as isize;
    };
    if !op.kind_allows(c.kind) {
        return EINVAL as isize;
    }
    let Some(bytes) = c.count.checked_mul(datatype.size()) else {
        return EINVAL as isize;
    };
    let needs_operand = op != AtomicOp::Read;
    if (needs_operand && c.operand.is_null() && c.count > 0)
        || (c.kind == AtomicKind::Compare && c.compare.is_null())
        || (c.kind != AtomicKind::Plain && c.result.is_null())
    {
        return EINVAL as isize;
    }
    let piece = |p: *const c_void, on: bool| IoVec { base: p as *mut u8, len: if on { bytes } else { 0 } };
    let d = AtomicDesc {
        kind: c.kind,
        op,
        datatype,
        count: c.count,
        operand: piece(c.operand, needs_operand),
        compare: piece(c.compare, c.kind == AtomicKind::Compare),
        result: piece(c.result, c.kind != AtomicKind::Plain),
        addr: FiAddr(c.peer),
        rma: RmaIov { addr: c.addr, len: bytes, key: c.key },
        context: c.context as u64,
        user_context: c.context as u64,
    };
    let _ = c.data;
    // SAFETY: the caller's buffers, valid until completion (libfabric's rule).
    fid::sret(unsafe { e.ops.post_atomic(&d, flags) })
}

/// Run `c` on the endpoint behind `ep_` with its default transmit flags.
///
/// # Safety
/// As [`post`]; `ep_` NULL or a live fid.
unsafe fn call(what: &str, ep_: *mut abi::fid_ep, c: Call) -> isize {
    let f = |e: &Ep| {
        // SAFETY: the caller's buffers, as above.
        unsafe { post(e, &c, e.tx_flags()) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// The one `fi_ioc` of a `v` or `msg` form: its address and count.
///
/// # Safety
/// `ioc` NULL or valid for `n` entries.
unsafe fn one_ioc(ioc: *const abi::fi_ioc, n: usize) -> Option<(*mut c_void, usize)> {
    if n != 1 || ioc.is_null() {
        return None;
    }
    // SAFETY: one readable entry (checked).
    let v = unsafe { ioc.read_unaligned() };
    Some((v.addr, v.count))
}

/// Post a `struct fi_msg_atomic` with optional compare and result iocs.
///
/// # Safety
/// As [`post`], for the message's buffers.
unsafe fn call_msg(
    what: &str,
    ep_: *mut abi::fid_ep,
    kind: AtomicKind,
    msg: *const abi::fi_msg_atomic,
    compare: (*const abi::fi_ioc, usize),
    result: (*const abi::fi_ioc, usize),
    flags: u64,
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: NULL or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL as isize;
        };
        // SAFETY: the message's iocs.
        let Some((operand, count)) = (unsafe { one_ioc(m.msg_iov, m.iov_count) }) else {
            return EINVAL as isize;
        };
        if m.rma_iov_count != 1 || m.rma_iov.is_null() {
            return EINVAL as isize;
        }
        // SAFETY: one remote piece (checked).
        let r = unsafe { m.rma_iov.read_unaligned() };
        let cmp = match kind {
            // SAFETY: the caller's compare iocs.
            AtomicKind::Compare => match unsafe { one_ioc(compare.0, compare.1) } {
                Some((p, _)) => p as *const c_void,
                None => return EINVAL as isize,
            },
            _ => std::ptr::null(),
        };
        let res = match kind {
            AtomicKind::Plain => std::ptr::null_mut(),
            // SAFETY: the caller's result iocs.
            _ => match unsafe { one_ioc(result.0, result.1) } {
                Some((p, _)) => p,
                None => return EINVAL as isize,
            },
        };
        if r.count != count {
            return EINVAL as isize;
        }
        let c = Call {
            kind,
            op: m.op,
            datatype: m.datatype,
            count,
            operand,
            compare: cmp,
            result: res,
            peer: m.addr,
            addr: r.addr,
            key: r.key,
            context: m.context,
            data: m.data,
        };
        // SAFETY: the caller's buffers, as above.
        unsafe { post(e, &c, e.tx_msg(flags)) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

unsafe extern "C" fn write(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    let c = Call {
        kind: AtomicKind::Plain,
        op,
        datatype,
        count,
        operand: buf,
        compare: std::ptr::null(),
        result: std::ptr::null_mut(),
        peer: dest,
        addr,
        key,
        context,
        data: 0,
    };
    // SAFETY: the caller's arguments, as fi_atomic documents them.
    unsafe { call("fi_atomic", ep, c) }
}

unsafe extern "C" fn writev(
    ep: *mut abi::fid_ep,
    iov: *const abi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's iocs.
    let Some((buf, n)) = (unsafe { one_ioc(iov, count) }) else {
        return EINVAL as isize;
    };
    // SAFETY: the caller's arguments, as fi_atomicv documents them.
    unsafe { write(ep, buf, n, std::ptr::null_mut(), dest, addr, key, datatype, op, context) }
}

unsafe extern "C" fn writemsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_atomic, flags: u64) -> isize {
    let none = (std::ptr::null(), 0);
    // SAFETY: the caller's arguments, as fi_atomicmsg documents them.
    unsafe { call_msg("fi_atomicmsg", ep, AtomicKind::Plain, msg, none, none, flags) }
}

unsafe extern "C" fn inject(
    ep: *mut abi::fid_ep,
    _buf: *const c_void,
    _count: usize,
    _dest: abi::fi_addr_t,
    _addr: u64,
    _key: u64,
    _datatype: abi::fi_datatype,
    _op: abi::fi_op,
) -> isize {
    // SAFETY: the caller's endpoint, class-checked.
    if unsafe { crate::ep::ep(ep) }.is_none() {
        return EINVAL as isize;
    }
    fid::serr(Error::NoSys)
}

unsafe extern "C" fn readwrite(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    let c = Call {
        kind: AtomicKind::Fetch,
        op,
        datatype,
        count,
        operand: buf,
        compare: std::ptr::null(),
        result,
        peer: dest,
        addr,
        key,
        context,
        data: 0,
    };
    // SAFETY: the caller's arguments, as fi_fetch_atomic documents them.
    unsafe { call("fi_fetch_atomic", ep, c) }
}

unsafe extern "C" fn readwritev(
    ep: *mut abi::fid_ep,
    iov: *const abi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut abi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's iocs.
    let (Some((buf, n)), Some((res, _))) = (unsafe { one_ioc(iov, count) }, unsafe { one_ioc(resultv, result_count) })
    else {
        return EINVAL as isize;
    };
    let nul = std::ptr::null_mut();
    // SAFETY: the caller's arguments, as fi_fetch_atomicv documents them.
    unsafe { readwrite(ep, buf, n, nul, res, nul, dest, addr, key, datatype, op, context) }
}

unsafe extern "C" fn readwritemsg(
    ep: *mut abi::fid_ep,
    msg: *const abi::fi_msg_atomic,
    resultv: *mut abi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let none = (std::ptr::null(), 0);
    let res = (resultv as *const abi::fi_ioc, result_count);
    // SAFETY: the caller's arguments, as fi_fetch_atomicmsg documents them.
    unsafe { call_msg("fi_fetch_atomicmsg", ep, AtomicKind::Fetch, msg, none, res, flags) }
}

unsafe extern "C" fn compwrite(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    let c = Call {
        kind: AtomicKind::Compare,
        op,
        datatype,
        count,
        operand: buf,
        compare,
        result,
        peer: dest,
        addr,
        key,
        context,
        data: 0,
    };
    // SAFETY: the caller's arguments, as fi_compare_atomic documents them.
    unsafe { call("fi_compare_atomic", ep, c) }
}

unsafe extern "C" fn compwritev(
    ep: *mut abi::fid_ep,
    iov: *const abi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const abi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut abi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's iocs.
    let iocs = unsafe { (one_ioc(iov, count), one_ioc(comparev, compare_count), one_ioc(resultv, result_count)) };
    let (Some((buf, n)), Some((cmp, _)), Some((res, _))) = iocs else {
        return EINVAL as isize;
    };
    let nul = std::ptr::null_mut();
    // SAFETY: the caller's arguments, as fi_compare_atomicv documents them.
    unsafe { compwrite(ep, buf, n, nul, cmp, nul, res, nul, dest, addr, key, datatype, op, context) }
}

unsafe extern "C" fn compwritemsg(
    ep: *mut abi::fid_ep,
    msg: *const abi::fi_msg_atomic,
    comparev: *const abi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut abi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let cmp = (comparev, compare_count);
    let res = (resultv as *const abi::fi_ioc, result_count);
    // SAFETY: the caller's arguments, as fi_compare_atomicmsg documents them.
    unsafe { call_msg("fi_compare_atomicmsg", ep, AtomicKind::Compare, msg, cmp, res, flags) }
}

/// The `*valid` queries: `*count` the most elements one operation takes.
///
/// # Safety
/// `ep_` NULL or a live fid; `count` NULL or valid for a write.
unsafe fn valid(
    ep_: *mut abi::fid_ep,
    kind: AtomicKind,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    count: *mut usize,
) -> c_int {
    let f = |e: &Ep| {
        if count.is_null() {
            return EINVAL;
        }
        let Some((o, d)) = op_type(datatype, op) else {
            return fid::err(Error::OpNotSupp);
        };
        match e.domain.atomic_valid(o, d, kind) {
            Ok(n) => {
                // SAFETY: non-NULL out-pointer.
                unsafe { *count = n };
                0
            }
            Err(err) => fid::err(err),
        }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep("fi_atomicvalid", ep_, EINVAL, f) }
}

unsafe extern "C" fn writevalid(
    ep: *mut abi::fid_ep,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { valid(ep, AtomicKind::Plain, datatype, op, count) }
}

unsafe extern "C" fn readwritevalid(
    ep: *mut abi::fid_ep,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { valid(ep, AtomicKind::Fetch, datatype, op, count) }
}

unsafe extern "C" fn compwritevalid(
    ep: *mut abi::fid_ep,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { valid(ep, AtomicKind::Compare, datatype, op, count) }
}

/// `fi_query_atomic` (`domain->ops->query_atomic`): `attr.count` the most
/// elements, `attr.size` the element size; `flags` `FI_FETCH_ATOMIC` or
/// `FI_COMPARE_ATOMIC` pick the kind.
pub(crate) fn query(
    d: &dyn fabric_core::prov::DomainOps,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    attr: *mut abi::fi_atomic_attr,
    flags: u64,
) -> c_int {
    if attr.is_null() {
        return EINVAL;
    }
    let kind = match flags & (abi::FI_FETCH_ATOMIC | abi::FI_COMPARE_ATOMIC) {
        0 => AtomicKind::Plain,
        abi::FI_FETCH_ATOMIC => AtomicKind::Fetch,
        abi::FI_COMPARE_ATOMIC => AtomicKind::Compare,
        _ => return EINVAL,
    };
    let Some((o, dt)) = op_type(datatype, op) else {
        return fid::err(Error::OpNotSupp);
    };
    match d.atomic_valid(o, dt, kind) {
        Ok(n) => {
            // SAFETY: the caller's attribute struct, non-NULL.
            unsafe { attr.write_unaligned(abi::fi_atomic_attr { count: n, size: dt.size() }) };
            0
        }
        Err(e) => fid::err(e),
    }
}

//! Atomic operations (`struct fi_ops_atomic`): `fi_atomic`, `fi_fetch_atomic`,
//! `fi_compare_atomic`, their `v`/`msg` forms, `fi_inject_atomic`, and the
//! `*valid` queries. A provider's atomic takes one piece per buffer: operands
//! over several `fi_ioc`s are gathered on the stack (the provider copies them
//! during the call, as for `FI_INJECT`), results over several must follow each
//! other in memory (`-FI_EINVAL` otherwise).

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

impl Call {
    /// A plain atomic (`fi_atomic`, `fi_inject_atomic`).
    #[allow(clippy::too_many_arguments)]
    fn plain(
        op: abi::fi_op,
        datatype: abi::fi_datatype,
        count: usize,
        operand: *const c_void,
        peer: u64,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> Call {
        let (compare, result, data) = (std::ptr::null(), std::ptr::null_mut(), 0);
        Call { kind: AtomicKind::Plain, op, datatype, count, operand, compare, result, peer, addr, key, context, data }
    }
}

/// Bytes the operands of several `fi_ioc`s may take once gathered: the most one
/// atomic covers (`fi_atomicvalid`'s count times the element size) on every
/// provider here.
const GATHER_MAX: usize = 4096;

/// Post `c` on `e` with `flags`. With `FI_INJECT` in `flags` (at most
/// `inject_size` bytes, `-FI_EINVAL` beyond) or `copy`, the provider copies the
/// operands before returning; an inject without `FI_COMPLETION` reports nothing.
///
/// # Safety
/// The operand and compare buffers (`count` elements) stay valid for reads,
/// the result buffer for writes, until the completion (the operands only during
/// the call with `copy` or `FI_INJECT`).
unsafe fn post(e: &Ep, c: &Call, flags: OpFlags, copy: bool) -> isize {
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
    let inject = flags.contains(OpFlags::INJECT);
    if inject && bytes > e.inject_size {
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
    if inject || copy {
        // SAFETY: the operands are valid during the call, the result until
        // completion (libfabric's rule).
        return fid::sret(unsafe { e.prov().inject_atomic(&d, flags) });
    }
    // SAFETY: the caller's buffers, valid until completion (libfabric's rule).
    fid::sret(unsafe { e.prov().post_atomic(&d, flags) })
}

/// Run `c` on the endpoint behind `ep_` with its default transmit flags, or
/// as `fi_inject_atomic` (`FI_INJECT` alone: no completion) with `inject`.
///
/// # Safety
/// As [`post`]; `ep_` NULL or a live fid.
unsafe fn call(what: &str, ep_: *mut abi::fid_ep, c: Call, inject: bool) -> isize {
    let f = |e: &Ep| {
        let flags = if inject { OpFlags::INJECT } else { e.tx_flags() };
        // SAFETY: the caller's buffers, as above.
        unsafe { post(e, &c, flags, false) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// The `fi_ioc`s of one buffer of a `v` or `msg` call (`n` entries at `p`).
#[derive(Clone, Copy)]
struct Iocs {
    p: *const abi::fi_ioc,
    n: usize,
}

impl Iocs {
    /// Entry `i`.
    ///
    /// # Safety
    /// `p` valid for `n > i` entries.
    unsafe fn at(&self, i: usize) -> abi::fi_ioc {
        // SAFETY: as the caller guarantees.
        unsafe { self.p.add(i).read_unaligned() }
    }

    /// Whether there are 1 to `limit` entries at a non-NULL `p`.
    fn usable(&self, limit: usize) -> bool {
        !self.p.is_null() && self.n >= 1 && self.n <= limit
    }

    /// The operands as one piece of `(address, elements)` of `size` bytes each:
    /// one entry in place, several gathered into `buf` (`copied` set); `None`
    /// for no entries, more than `limit`, or more than `buf` holds.
    ///
    /// # Safety
    /// `p` NULL or valid for `n` entries, each readable for its elements.
    unsafe fn gather(
        &self,
        limit: usize,
        size: usize,
        buf: &mut [u8],
        copied: &mut bool,
    ) -> Option<(*const c_void, usize)> {
        if !self.usable(limit) {
            return None;
        }
        if self.n == 1 {
            // SAFETY: one entry (checked).
            let v = unsafe { self.at(0) };
            return Some((v.addr, v.count));
        }
        let (mut count, mut off) = (0usize, 0usize);
        for i in 0..self.n {
            // SAFETY: `i < n` entries.
            let v = unsafe { self.at(i) };
            let len = v.count.checked_mul(size)?;
            let end = off.checked_add(len).filter(|&e| e <= buf.len())?;
            if len > 0 {
                if v.addr.is_null() {
                    return None;
                }
                // SAFETY: the caller's entry is readable for `len` bytes; `buf`
                // has room up to `end` (checked).
                unsafe { std::ptr::copy_nonoverlapping(v.addr as *const u8, buf[off..end].as_mut_ptr(), len) };
            }
            count += v.count;
            off = end;
        }
        *copied = true;
        Some((buf.as_ptr() as *const c_void, count))
    }

    /// The result buffers as one piece: one entry, or several that follow each
    /// other in memory (the provider writes one piece); `None` otherwise.
    ///
    /// # Safety
    /// `p` NULL or valid for `n` entries.
    unsafe fn adjacent(&self, limit: usize, size: usize) -> Option<(*mut c_void, usize)> {
        if !self.usable(limit) {
            return None;
        }
        // SAFETY: at least one entry (checked).
        let first = unsafe { self.at(0) };
        let mut count = first.count;
        for i in 1..self.n {
            // SAFETY: `i < n` entries.
            let v = unsafe { self.at(i) };
            let next = (first.addr as usize).checked_add(count.checked_mul(size)?)?;
            if v.addr as usize != next {
                return None;
            }
            count = count.checked_add(v.count)?;
        }
        Some((first.addr, count))
    }
}

/// What a `v` or `msg` call names besides its local buffers.
struct Target {
    op: abi::fi_op,
    datatype: abi::fi_datatype,
    peer: u64,
    addr: u64,
    key: u64,
    /// Elements at `addr` (the `msg` forms' `fi_rma_ioc`), if the call says.
    count: Option<usize>,
    context: *mut c_void,
    data: u64,
}

/// Post a call whose local buffers are `fi_ioc`s: operands over several are
/// gathered (and copied by the provider during the call), results over
/// several must follow each other in memory; every side must name the same
/// number of elements, at most `fi_atomicvalid`'s, in at most `tx_iov_limit`
/// entries. `-FI_EINVAL` otherwise.
///
/// # Safety
/// As [`post`], for the iocs' buffers; each `Iocs` NULL or valid for its
/// entries.
unsafe fn post_iocs(
    e: &Ep,
    kind: AtomicKind,
    t: &Target,
    operand: Iocs,
    compare: Iocs,
    result: Iocs,
    flags: OpFlags,
) -> isize {
    let Some((_, datatype)) = op_type(t.datatype, t.op) else {
        return EINVAL as isize;
    };
    let (size, limit) = (datatype.size(), e.tx_iov_limit);
    let mut bufs = [[0u8; GATHER_MAX]; 2];
    let [obuf, cbuf] = &mut bufs;
    let mut copy = false;
    // SAFETY: the caller's operand iocs.
    let Some((op_buf, count)) = (unsafe { operand.gather(limit, size, obuf, &mut copy) }) else {
        return EINVAL as isize;
    };
    let cmp = match kind {
        // SAFETY: the caller's compare iocs.
        AtomicKind::Compare => match unsafe { compare.gather(limit, size, cbuf, &mut copy) } {
            Some((p, n)) if n == count => p,
            _ => return EINVAL as isize,
        },
        _ => std::ptr::null(),
    };
    let res = match kind {
        AtomicKind::Plain => std::ptr::null_mut(),
        // SAFETY: the caller's result iocs.
        _ => match unsafe { result.adjacent(limit, size) } {
            Some((p, n)) if n == count => p,
            _ => return EINVAL as isize,
        },
    };
    if t.count.is_some_and(|n| n != count) {
        return EINVAL as isize;
    }
    let c = Call {
        kind,
        op: t.op,
        datatype: t.datatype,
        count,
        operand: op_buf,
        compare: cmp,
        result: res,
        peer: t.peer,
        addr: t.addr,
        key: t.key,
        context: t.context,
        data: t.data,
    };
    // SAFETY: the caller's buffers (gathered ones live through the call).
    unsafe { post(e, &c, flags, copy) }
}

/// Post a `struct fi_msg_atomic` with its compare and result iocs.
///
/// # Safety
/// As [`post_iocs`], for the message's buffers.
unsafe fn call_msg(
    what: &str,
    ep_: *mut abi::fid_ep,
    kind: AtomicKind,
    msg: *const abi::fi_msg_atomic,
    compare: Iocs,
    result: Iocs,
    flags: u64,
) -> isize {
    let f = |e: &Ep| {
        // SAFETY: NULL or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return EINVAL as isize;
        };
        if m.rma_iov_count != 1 || m.rma_iov.is_null() {
            return EINVAL as isize;
        }
        // SAFETY: one remote piece (checked).
        let r = unsafe { m.rma_iov.read_unaligned() };
        let t = Target {
            op: m.op,
            datatype: m.datatype,
            peer: m.addr,
            addr: r.addr,
            key: r.key,
            count: Some(r.count),
            context: m.context,
            data: m.data,
        };
        let operand = Iocs { p: m.msg_iov, n: m.iov_count };
        // SAFETY: the caller's buffers, as above.
        unsafe { post_iocs(e, kind, &t, operand, compare, result, e.tx_msg(flags)) }
    };
    // SAFETY: the caller's endpoint.
    unsafe { with_ep(what, ep_, EINVAL as isize, f) }
}

/// Post a `v` call (`fi_atomicv`, `fi_fetch_atomicv`, `fi_compare_atomicv`).
///
/// # Safety
/// As [`post_iocs`]; `ep_` NULL or a live fid.
unsafe fn call_v(what: &str, ep_: *mut abi::fid_ep, kind: AtomicKind, t: Target, iocs: [Iocs; 3]) -> isize {
    let f = |e: &Ep| {
        // SAFETY: the caller's buffers, as above.
        unsafe { post_iocs(e, kind, &t, iocs[0], iocs[1], iocs[2], e.tx_flags()) }
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
    let c = Call::plain(op, datatype, count, buf, dest, addr, key, context);
    // SAFETY: the caller's arguments, as fi_atomic documents them.
    unsafe { call("fi_atomic", ep, c, false) }
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
    let t = Target { op, datatype, peer: dest, addr, key, count: None, context, data: 0 };
    let none = Iocs { p: std::ptr::null(), n: 0 };
    // SAFETY: the caller's arguments, as fi_atomicv documents them.
    unsafe { call_v("fi_atomicv", ep, AtomicKind::Plain, t, [Iocs { p: iov, n: count }, none, none]) }
}

unsafe extern "C" fn writemsg(ep: *mut abi::fid_ep, msg: *const abi::fi_msg_atomic, flags: u64) -> isize {
    let none = Iocs { p: std::ptr::null(), n: 0 };
    // SAFETY: the caller's arguments, as fi_atomicmsg documents them.
    unsafe { call_msg("fi_atomicmsg", ep, AtomicKind::Plain, msg, none, none, flags) }
}

/// `fi_inject_atomic`: the operand is copied before the call returns (at most
/// `inject_size` bytes, `-FI_EINVAL` beyond) and no completion is reported.
unsafe extern "C" fn inject(
    ep: *mut abi::fid_ep,
    buf: *const c_void,
    count: usize,
    dest: abi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
) -> isize {
    let c = Call::plain(op, datatype, count, buf, dest, addr, key, std::ptr::null_mut());
    // SAFETY: the caller's arguments, as fi_inject_atomic documents them (the
    // operand is read during the call only).
    unsafe { call("fi_inject_atomic", ep, c, true) }
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
    unsafe { call("fi_fetch_atomic", ep, c, false) }
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
    let t = Target { op, datatype, peer: dest, addr, key, count: None, context, data: 0 };
    let iocs = [Iocs { p: iov, n: count }, Iocs { p: std::ptr::null(), n: 0 }, Iocs { p: resultv, n: result_count }];
    // SAFETY: the caller's arguments, as fi_fetch_atomicv documents them.
    unsafe { call_v("fi_fetch_atomicv", ep, AtomicKind::Fetch, t, iocs) }
}

unsafe extern "C" fn readwritemsg(
    ep: *mut abi::fid_ep,
    msg: *const abi::fi_msg_atomic,
    resultv: *mut abi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let none = Iocs { p: std::ptr::null(), n: 0 };
    let res = Iocs { p: resultv, n: result_count };
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
    unsafe { call("fi_compare_atomic", ep, c, false) }
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
    let t = Target { op, datatype, peer: dest, addr, key, count: None, context, data: 0 };
    let iocs =
        [Iocs { p: iov, n: count }, Iocs { p: comparev, n: compare_count }, Iocs { p: resultv, n: result_count }];
    // SAFETY: the caller's arguments, as fi_compare_atomicv documents them.
    unsafe { call_v("fi_compare_atomicv", ep, AtomicKind::Compare, t, iocs) }
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
    let cmp = Iocs { p: comparev, n: compare_count };
    let res = Iocs { p: resultv, n: result_count };
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

//! `fi_cq_open` and the completion queue (`struct fid_cq`): completions are read
//! from the provider into a small array on the stack and written straight into
//! the caller's entries in the format the queue was opened with. Each format has
//! its own ops table (chosen at open), so a read never looks the format up; a
//! read of one entry (`fi_cq_read(cq, &e, 1)`, the common case) takes a path of
//! its own through a single stack entry.

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::prov::CqOps;
use fabric_core::wait::CqMember;
use fabric_core::{Caps, CqAttr, CqEntry, CqFormat, Error, WaitObj};
use fabric_util::cq::UtilCq;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// `-FI_EAGAIN`: no completion to read.
const EAGAIN: isize = -(libc::EAGAIN as isize);

/// Entries read from the provider per call into it.
const CHUNK: usize = 16;

/// Entries read from the provider per call into it for a read of at most
/// this many.
const SMALL_CHUNK: usize = 8;

/// A completion queue as C holds it.
#[repr(C)]
pub(crate) struct Cq {
    c: abi::fid_cq,
    /// The provider's queue.
    pub(crate) ops: Arc<dyn CqOps>,
    /// `ops` as a plain pointer, for the reads: calling through it skips
    /// locating the object inside the `Arc`'s allocation on every call.
    prov: *const dyn CqOps,
    /// `ops` as the providers' shared queue type when it is one (null
    /// otherwise): a read of one entry then calls it directly and has the
    /// entry written into the caller's from where it lies in the queue.
    util: *const UtilCq,
    /// Whether the queue has a wait object (`fi_cq_sread` allowed).
    wait: bool,
    /// The endpoints bound to it.
    pub(crate) refs: fid::Refs,
    /// Its hold on the domain.
    _domain: fid::Hold,
    /// The wait set and poll sets it is in, left at close.
    pub(crate) sets: crate::wait::Memberships,
}

// SAFETY: repr(C), first field `fid_cq`, whose first field is `struct fid`.
unsafe impl CObject for Cq {
    const CLASS: usize = abi::FI_CLASS_CQ;
}

impl fid::Parent for Cq {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, control);

/// The ops tables of the four entry formats, `FI_CQ_FORMAT_CONTEXT` (1) to
/// `FI_CQ_FORMAT_TAGGED` (4), at index format - 1.
static CQ_OPS: [abi::fi_ops_cq; 4] = [
    cq_ops::<{ abi::FI_CQ_FORMAT_CONTEXT }>(),
    cq_ops::<{ abi::FI_CQ_FORMAT_MSG }>(),
    cq_ops::<{ abi::FI_CQ_FORMAT_DATA }>(),
    cq_ops::<{ abi::FI_CQ_FORMAT_TAGGED }>(),
];

/// The ops table of a queue whose caller entries are of format `F`.
const fn cq_ops<const F: abi::fi_cq_format>() -> abi::fi_ops_cq {
    abi::fi_ops_cq {
        size: std::mem::size_of::<abi::fi_ops_cq>(),
        read: Some(read::<F>),
        readfrom: Some(readfrom::<F>),
        readerr: Some(readerr),
        sread: Some(sread::<F>),
        sreadfrom: Some(sreadfrom::<F>),
        signal: Some(signal),
        strerror: Some(strerror),
    }
}

impl Cq {
    /// The provider's queue.
    #[inline(always)]
    fn prov(&self) -> &dyn CqOps {
        // SAFETY: `prov` points at the object `self.ops` owns, which lives as
        // long as `self`.
        unsafe { &*self.prov }
    }

    /// The provider's queue as [`UtilCq`], if it is one.
    #[inline(always)]
    fn util(&self) -> Option<&UtilCq> {
        // SAFETY: null, or pointing at the object `self.ops` owns (as `prov`),
        // which lives as long as `self`.
        unsafe { self.util.as_ref() }
    }
}

/// `fi_cq_open` (`domain->ops->cq_open`).
pub(crate) unsafe extern "C" fn fi_cq_open(
    domain: *mut abi::fid_domain,
    attr: *mut abi::fi_cq_attr,
    cq: *mut *mut abi::fid_cq,
    context: *mut c_void,
) -> c_int {
    guard("fi_cq_open", EINVAL, || {
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's out-pointer and domain, class-checked.
        let d = match unsafe { fid::open_under::<Domain, _>(cq, domain as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        let (format, cformat) = match a.format {
            abi::FI_CQ_FORMAT_UNSPEC | abi::FI_CQ_FORMAT_CONTEXT => (CqFormat::Context, abi::FI_CQ_FORMAT_CONTEXT),
            abi::FI_CQ_FORMAT_MSG => (CqFormat::Msg, abi::FI_CQ_FORMAT_MSG),
            abi::FI_CQ_FORMAT_DATA => (CqFormat::Data, abi::FI_CQ_FORMAT_DATA),
            abi::FI_CQ_FORMAT_TAGGED => (CqFormat::Tagged, abi::FI_CQ_FORMAT_TAGGED),
            _ => return EINVAL,
        };
        // SAFETY: the caller's `wait_set`, class-checked.
        let wait_set = match unsafe { crate::wait::wait_set_of(a.wait_obj, a.wait_set) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let wait_obj = match wait_set {
            // A member of a wait set is watched through its descriptor.
            Some(_) => WaitObj::Fd,
            None => match fid::wait_obj(a.wait_obj) {
                Ok(w) => w,
                Err(e) => return e,
            },
        };
        if a.wait_cond != abi::FI_CQ_COND_NONE {
            return fid::err(Error::NoSys);
        }
        let ops = match d.ops.cq_open(&CqAttr { size: a.size, format, wait_obj }) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let sets = crate::wait::Memberships::new(ops.fid());
        if let Some(w) = &wait_set {
            let r = sets.join(w, Arc::new(CqMember(Arc::clone(&ops))), context);
            if r != 0 {
                return r;
            }
        }
        let table = &CQ_OPS[(cformat - abi::FI_CQ_FORMAT_CONTEXT) as usize];
        let obj = Cq {
            c: abi::fid_cq { fid: fid::fid(abi::FI_CLASS_CQ, context, &FID_OPS), ops: table as *const _ as *mut _ },
            prov: Arc::as_ptr(&ops),
            util: ops.as_any().downcast_ref::<UtilCq>().map_or(std::ptr::null(), |u| u as *const UtilCq),
            ops,
            wait: wait_obj != WaitObj::None,
            refs: fid::Refs::default(),
            _domain: d.refs.hold(),
            sets,
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(cq, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        unsafe { fid::close_parent::<Cq>(f) }
    })
}

/// `fi_control`: `FI_GETWAIT` gives the queue's file descriptor.
unsafe extern "C" fn control(f: *mut abi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(cq) = (unsafe { fid::get::<Cq>(f as *const c_void) }) else {
            return EINVAL;
        };
        match command {
            abi::FI_GETWAIT => {
                if arg.is_null() {
                    return EINVAL;
                }
                match cq.ops.wait_fd() {
                    Ok(fd) => {
                        // SAFETY: FI_GETWAIT's argument is an `int *` for an fd wait object.
                        unsafe { *(arg as *mut c_int) = fd };
                        0
                    }
                    Err(e) => fid::err(e),
                }
            }
            _ => fid::err(Error::NoSys),
        }
    })
}

/// `fi_trywait` for one object (a completion queue; others answer
/// `-FI_EINVAL`).
///
/// # Safety
/// `f` is NULL or a live fid.
pub(crate) unsafe fn trywait_fid(f: *mut abi::fid) -> c_int {
    // SAFETY: as the caller guarantees; class-checked.
    match unsafe { fid::get::<Cq>(f as *const c_void) } {
        Some(cq) => fid::ret(cq.ops.trywait()),
        None => EINVAL,
    }
}

/// The size of one caller entry of format `F`.
const fn entry_size<const F: abi::fi_cq_format>() -> usize {
    match F {
        abi::FI_CQ_FORMAT_MSG => std::mem::size_of::<abi::fi_cq_msg_entry>(),
        abi::FI_CQ_FORMAT_DATA => std::mem::size_of::<abi::fi_cq_data_entry>(),
        abi::FI_CQ_FORMAT_TAGGED => std::mem::size_of::<abi::fi_cq_tagged_entry>(),
        _ => std::mem::size_of::<abi::fi_cq_entry>(),
    }
}

/// Write `e` as the caller's entry of format `F` at `out`.
///
/// # Safety
/// `out` is valid for a write of one entry of format `F` (alignment not assumed).
#[inline(always)]
unsafe fn write_entry<const F: abi::fi_cq_format>(e: &CqEntry, out: *mut u8) {
    let t = abi::fi_cq_tagged_entry {
        op_context: e.op_context as *mut c_void,
        flags: e.flags.bits(),
        len: e.len,
        buf: e.buf as *mut c_void,
        data: e.data,
        tag: e.tag,
    };
    // SAFETY: each arm writes one entry of its format, which the caller made room
    // for; the formats are prefixes of `fi_cq_tagged_entry`.
    unsafe {
        match F {
            abi::FI_CQ_FORMAT_MSG => (out as *mut abi::fi_cq_msg_entry).write_unaligned(abi::fi_cq_msg_entry {
                op_context: t.op_context,
                flags: t.flags,
                len: t.len,
            }),
            abi::FI_CQ_FORMAT_DATA => (out as *mut abi::fi_cq_data_entry).write_unaligned(abi::fi_cq_data_entry {
                op_context: t.op_context,
                flags: t.flags,
                len: t.len,
                buf: t.buf,
                data: t.data,
            }),
            abi::FI_CQ_FORMAT_TAGGED => (out as *mut abi::fi_cq_tagged_entry).write_unaligned(t),
            _ => (out as *mut abi::fi_cq_entry).write_unaligned(abi::fi_cq_entry { op_context: t.op_context }),
        }
    }
}

/// Write entry `e` into `buf` in format `F`, and its source into `src` unless
/// `src` is NULL.
///
/// # Safety
/// As [`read_one`]'s contract.
#[inline(always)]
unsafe fn write_out<const F: abi::fi_cq_format>(e: &CqEntry, buf: *mut c_void, src: *mut abi::fi_addr_t) {
    // SAFETY: as this function's contract.
    unsafe {
        write_entry::<F>(e, buf as *mut u8);
        if !src.is_null() {
            src.write_unaligned(e.src.0);
        }
    }
}

/// Read one completion into `buf` (its source into `src`), without blocking:
/// the path of `fi_cq_read(cq, &e, 1)`.
///
/// # Safety
/// `buf` is valid for one entry of format `F`; `src` is NULL or valid for one
/// address.
#[inline(always)]
unsafe fn read_one<const F: abi::fi_cq_format>(q: &Cq, buf: *mut c_void, src: *mut abi::fi_addr_t) -> isize {
    if let Some(u) = q.util() {
        // The entry goes from the queue's ring into the caller's, under the
        // queue's lock (the closure only writes the caller's memory).
        // SAFETY: as this function's contract.
        let r = u.read_one_with(|e| unsafe { write_out::<F>(e, buf, src) });
        return match r {
            Ok(()) => 1,
            Err(Error::Again) => EAGAIN,
            Err(err) => fid::serr(err),
        };
    }
    match q.prov().read_one() {
        Ok(e) => {
            // SAFETY: as this function's contract.
            unsafe { write_out::<F>(&e, buf, src) };
            1
        }
        Err(Error::Again) => EAGAIN,
        Err(err) => fid::serr(err),
    }
}

/// Read up to `count` completions into `buf` (and their sources into `src`),
/// blocking up to `block` first when given.
///
/// # Safety
/// `buf` is valid for `count` entries of format `F`; `src` is NULL or valid for
/// `count` addresses.
#[inline(never)]
unsafe fn read_into<const F: abi::fi_cq_format>(
    q: &Cq,
    buf: *mut c_void,
    count: usize,
    src: *mut abi::fi_addr_t,
    block: Option<Option<std::time::Duration>>,
) -> isize {
    if buf.is_null() && count > 0 {
        return EINVAL as isize;
    }
    if count == 0 {
        // Nothing to read: progress only (as libfabric's queues do).
        return match q.prov().read(&mut []) {
            Ok(_) | Err(Error::Again) => 0,
            Err(e) => fid::serr(e),
        };
    }
    if count <= SMALL_CHUNK {
        // SAFETY: as this function's contract.
        unsafe { read_chunks::<F, SMALL_CHUNK>(q, buf, count, src, block) }
    } else {
        // SAFETY: as this function's contract.
        unsafe { read_chunks::<F, CHUNK>(q, buf, count, src, block) }
    }
}

/// [`read_into`] through a stack array of `N` provider entries (all of which
/// are cleared first: the fewer, the cheaper a read of a few entries).
///
/// # Safety
/// As [`read_into`]; `count` is at least 1.
#[inline(never)]
unsafe fn read_chunks<const F: abi::fi_cq_format, const N: usize>(
    q: &Cq,
    buf: *mut c_void,
    count: usize,
    src: *mut abi::fi_addr_t,
    block: Option<Option<std::time::Duration>>,
) -> isize {
    let size = entry_size::<F>();
    let mut entries = [CqEntry::new(0, Caps::empty()); N];
    let mut got = 0usize;
    let mut first = true;
    while got < count {
        let want = (count - got).min(N);
        let r = match block {
            Some(t) if first => {
                if !q.wait {
                    return fid::serr(Error::NoSys);
                }
                q.prov().sread(&mut entries[..want], t)
            }
            _ => q.prov().read(&mut entries[..want]),
        };
        first = false;
        let n = match r {
            Ok(n) => n.min(want),
            Err(_) if got > 0 => break,
            Err(e) => return fid::serr(e),
        };
        for (i, e) in entries[..n].iter().enumerate() {
            // SAFETY: entry `got + i` of the caller's `count` entries.
            unsafe { write_entry::<F>(e, (buf as *mut u8).add((got + i) * size)) };
            if !src.is_null() {
                // SAFETY: `src` has room for `count` addresses.
                unsafe { src.add(got + i).write_unaligned(e.src.0) };
            }
        }
        got += n;
        if n < want {
            break;
        }
    }
    if got == 0 {
        return fid::serr(Error::Again);
    }
    got as isize
}

/// `fi_cq_read` and `fi_cq_readfrom` (`src` NULL or not): one entry through
/// [`read_one`], more (or none) through [`read_into`]. Inline into each entry
/// point (the guard costs nothing on the way through), so a read of one entry
/// makes one call, the provider's.
///
/// # Safety
/// As `fi_cq_readfrom` documents its arguments.
#[inline(always)]
unsafe fn read_common<const F: abi::fi_cq_format>(
    cq: *mut abi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut abi::fi_addr_t,
) -> isize {
    // SAFETY: the caller's queue, class-checked.
    let Some(q) = (unsafe { fid::get::<Cq>(cq as *const c_void) }) else {
        return EINVAL as isize;
    };
    if count == 1 && !buf.is_null() {
        // SAFETY: the caller's entry and source address.
        return unsafe { read_one::<F>(q, buf, src) };
    }
    // SAFETY: the caller's `count` entries and sources.
    unsafe { read_into::<F>(q, buf, count, src, None) }
}

unsafe extern "C" fn read<const F: abi::fi_cq_format>(cq: *mut abi::fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: the caller's arguments, as fi_cq_read documents them.
    guard("fi_cq_read", EINVAL as isize, || unsafe { read_common::<F>(cq, buf, count, std::ptr::null_mut()) })
}

unsafe extern "C" fn readfrom<const F: abi::fi_cq_format>(
    cq: *mut abi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut abi::fi_addr_t,
) -> isize {
    // SAFETY: the caller's arguments, as fi_cq_readfrom documents them.
    guard("fi_cq_readfrom", EINVAL as isize, || unsafe { read_common::<F>(cq, buf, count, src) })
}

unsafe extern "C" fn sread<const F: abi::fi_cq_format>(
    cq: *mut abi::fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: forwarded as received.
    unsafe { sreadfrom::<F>(cq, buf, count, std::ptr::null_mut(), cond, timeout) }
}

unsafe extern "C" fn sreadfrom<const F: abi::fi_cq_format>(
    cq: *mut abi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut abi::fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    let t = fid::timeout(timeout);
    guard("fi_cq_sread", EINVAL as isize, || {
        // SAFETY: the caller's queue, class-checked.
        let Some(q) = (unsafe { fid::get::<Cq>(cq as *const c_void) }) else {
            return EINVAL as isize;
        };
        // SAFETY: the caller's arguments, as fi_cq_sreadfrom documents them.
        unsafe { read_into::<F>(q, buf, count, src, Some(t)) }
    })
}

/// Error data handed out with `fi_cq_readerr` (none is kept: `err_data_size` 0).
unsafe extern "C" fn readerr(cq: *mut abi::fid_cq, buf: *mut abi::fi_cq_err_entry, _flags: u64) -> isize {
    guard("fi_cq_readerr", EINVAL as isize, || {
        // SAFETY: the caller's queue, class-checked.
        let Some(q) = (unsafe { fid::get::<Cq>(cq as *const c_void) }) else {
            return EINVAL as isize;
        };
        if buf.is_null() {
            return EINVAL as isize;
        }
        let e = match q.ops.readerr() {
            Ok(e) => e,
            Err(e) => return fid::serr(e),
        };
        let out = abi::fi_cq_err_entry {
            op_context: e.entry.op_context as *mut c_void,
            flags: e.entry.flags.bits(),
            len: e.entry.len,
            buf: e.entry.buf as *mut c_void,
            data: e.entry.data,
            tag: e.entry.tag,
            olen: e.olen,
            err: e.err.errno(),
            prov_errno: e.prov_errno,
            err_data: std::ptr::null_mut(),
            err_data_size: 0,
        };
        // SAFETY: the caller's entry, non-NULL.
        unsafe { buf.write_unaligned(out) };
        1
    })
}

unsafe extern "C" fn signal(cq: *mut abi::fid_cq) -> c_int {
    guard("fi_cq_signal", EINVAL, || {
        // SAFETY: the caller's queue, class-checked.
        match unsafe { fid::get::<Cq>(cq as *const c_void) } {
            Some(q) => {
                q.ops.signal();
                0
            }
            None => EINVAL,
        }
    })
}

/// `fi_cq_strerror`: the text of a provider error number, copied to `buf` when
/// given, else a string that lives as long as the process.
unsafe extern "C" fn strerror(
    _cq: *mut abi::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard("fi_cq_strerror", c"Unknown error".as_ptr(), || {
        let s = crate::exports::fi_strerror(prov_errno);
        if buf.is_null() || len == 0 {
            return s;
        }
        // SAFETY: fi_strerror returns a NUL-terminated static string.
        let bytes = unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` has room for `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        buf
    })
}

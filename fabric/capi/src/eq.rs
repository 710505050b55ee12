//! `fi_eq_open` and the event queue (`struct fid_eq`): connection events as
//! `struct fi_eq_cm_entry` (a connection request's `fi_info` allocated for the
//! caller, who frees it with `fi_freeinfo`), errors as `struct fi_eq_err_entry`,
//! the application's own events (`fi_eq_write`) as the bytes it wrote.

use crate::fabric::Fabric;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::prov::EqOps;
use fabric_core::{EqAttr, EqEvent, Error};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

/// Which C object each provider object id belongs to, for the `fid` of events:
/// shared with the endpoints bound to the queue, which remove themselves at close.
#[derive(Default)]
pub(crate) struct Fids(Mutex<HashMap<u64, usize>>);

impl Fids {
    /// Record that provider object `id` is the C object `c`.
    pub(crate) fn add(&self, id: u64, c: *mut abi::fid) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id, c as usize);
    }

    /// Forget provider object `id`.
    pub(crate) fn remove(&self, id: u64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    fn get(&self, id: u64) -> *mut abi::fid {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&id).copied().unwrap_or(0) as *mut abi::fid
    }
}

/// An event queue as C holds it.
#[repr(C)]
pub(crate) struct Eq {
    c: abi::fid_eq,
    /// The provider's queue.
    pub(crate) ops: Arc<dyn EqOps>,
    /// The C objects bound to it.
    pub(crate) fids: Arc<Fids>,
    /// The error data of the last `fi_eq_readerr`, valid until the next read.
    err_data: Mutex<Vec<u8>>,
    /// The endpoints bound to it.
    pub(crate) refs: fid::Refs,
    /// Its hold on the fabric.
    _fabric: fid::Hold,
    /// The wait set it is in, left at close.
    sets: crate::wait::Memberships,
}

// SAFETY: repr(C), first field `fid_eq`, whose first field is `struct fid`.
unsafe impl CObject for Eq {
    const CLASS: usize = abi::FI_CLASS_EQ;
}

impl fid::Parent for Eq {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, control);

static EQ_OPS: abi::fi_ops_eq = abi::fi_ops_eq {
    size: std::mem::size_of::<abi::fi_ops_eq>(),
    read: Some(read),
    readerr: Some(readerr),
    write: Some(write),
    sread: Some(sread),
    strerror: Some(strerror),
};

/// `fi_eq_open` (`fabric->ops->eq_open`).
pub(crate) unsafe extern "C" fn fi_eq_open(
    fabric: *mut abi::fid_fabric,
    attr: *mut abi::fi_eq_attr,
    eq: *mut *mut abi::fid_eq,
    context: *mut c_void,
) -> c_int {
    guard("fi_eq_open", EINVAL, || {
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's out-pointer and fabric, class-checked.
        let f = match unsafe { fid::open_under::<Fabric, _>(eq, fabric as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        // SAFETY: the caller's `wait_set`, class-checked.
        let wait_set = match unsafe { crate::wait::wait_set_of(a.wait_obj, a.wait_set) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let wait_obj = match wait_set {
            // A member of a wait set is watched through its descriptor.
            Some(_) => fabric_core::WaitObj::Fd,
            None => match fid::wait_obj(a.wait_obj) {
                Ok(w) => w,
                Err(e) => return e,
            },
        };
        let ops = match f.ops.eq_open(&EqAttr { size: a.size, wait_obj }) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let sets = crate::wait::Memberships::new(ops.fid());
        if let Some(w) = &wait_set {
            let r = sets.join(w, Arc::new(fabric_core::wait::EqMember(Arc::clone(&ops))), context);
            if r != 0 {
                return r;
            }
        }
        let obj = Eq {
            c: abi::fid_eq { fid: fid::fid(abi::FI_CLASS_EQ, context, &FID_OPS), ops: &EQ_OPS as *const _ as *mut _ },
            ops,
            fids: Arc::default(),
            err_data: Mutex::new(Vec::new()),
            refs: fid::Refs::default(),
            _fabric: f.refs.hold(),
            sets,
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(eq, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        unsafe { fid::close_parent::<Eq>(f) }
    })
}

unsafe extern "C" fn control(f: *mut abi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(q) = (unsafe { fid::get::<Eq>(f as *const c_void) }) else {
            return EINVAL;
        };
        match command {
            abi::FI_GETWAIT if !arg.is_null() => match q.ops.wait_fd() {
                Ok(fd) => {
                    // SAFETY: FI_GETWAIT's argument is an `int *` for an fd wait object.
                    unsafe { *(arg as *mut c_int) = fd };
                    0
                }
                Err(e) => fid::err(e),
            },
            abi::FI_GETWAIT => EINVAL,
            _ => fid::err(Error::NoSys),
        }
    })
}

/// Write `ev` to the caller's `(event, buf, len)`: the bytes written.
///
/// # Safety
/// `event` is NULL or valid for a write; `buf` valid for `len` bytes.
unsafe fn deliver(q: &Eq, ev: EqEvent, event: *mut u32, buf: *mut c_void, len: usize) -> isize {
    let head = std::mem::size_of::<abi::fi_eq_cm_entry>();
    if buf.is_null() || len < head {
        return EINVAL as isize;
    }
    let c_fid = q.fids.get(ev.fid());
    let (code, info, data) = match ev {
        EqEvent::User { event: code, data } => {
            // SAFETY: NULL or the caller's event out-pointer.
            unsafe { fid::put(event, code) };
            let n = data.len().min(len);
            // SAFETY: `buf` has room for `len >= n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n) };
            return n as isize;
        }
        EqEvent::ConnReq { info, data, .. } => {
            // SAFETY: `to_c` hands over a new fi_info the caller frees.
            let i = match unsafe { crate::ep_cm::connreq_info(&info) } {
                Ok(i) => i,
                Err(e) => return fid::serr(e),
            };
            (abi::FI_CONNREQ, i, data)
        }
        EqEvent::Connected { data, .. } => (abi::FI_CONNECTED, std::ptr::null_mut(), data),
        EqEvent::Shutdown { .. } => (abi::FI_SHUTDOWN, std::ptr::null_mut(), Vec::new()),
        _ => return fid::serr(Error::NoSys),
    };
    // SAFETY: NULL or the caller's event out-pointer.
    unsafe { fid::put(event, code) };
    let entry = buf as *mut abi::fi_eq_cm_entry;
    // SAFETY: `buf` has room for the entry's head (checked).
    unsafe {
        std::ptr::addr_of_mut!((*entry).fid).write_unaligned(c_fid);
        std::ptr::addr_of_mut!((*entry).info).write_unaligned(info);
    }
    let n = data.len().min(len - head);
    // SAFETY: `buf` has `len - head` bytes after the head.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (buf as *mut u8).add(head), n) };
    (head + n) as isize
}

unsafe fn read_any(
    eq: *mut abi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    block: Option<Option<std::time::Duration>>,
) -> isize {
    // SAFETY: the caller's queue, class-checked.
    let Some(q) = (unsafe { fid::get::<Eq>(eq as *const c_void) }) else {
        return EINVAL as isize;
    };
    if buf.is_null() || len < std::mem::size_of::<abi::fi_eq_cm_entry>() {
        return EINVAL as isize;
    }
    let r = match block {
        Some(t) => q.ops.sread(t),
        None if flags & abi::FI_PEEK != 0 => q.ops.peek(),
        None => q.ops.read(),
    };
    match r {
        // SAFETY: the caller's buffers, as fi_eq_read documents them.
        Ok(ev) => unsafe { deliver(q, ev, event, buf, len) },
        Err(e) => fid::serr(e),
    }
}

unsafe extern "C" fn read(eq: *mut abi::fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    // SAFETY: the caller's arguments, as fi_eq_read documents them.
    guard("fi_eq_read", EINVAL as isize, || unsafe { read_any(eq, event, buf, len, flags, None) })
}

unsafe extern "C" fn sread(
    eq: *mut abi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    let t = fid::timeout(timeout);
    // SAFETY: the caller's arguments, as fi_eq_sread documents them.
    guard("fi_eq_sread", EINVAL as isize, || unsafe { read_any(eq, event, buf, len, flags, Some(t)) })
}

unsafe extern "C" fn readerr(eq: *mut abi::fid_eq, buf: *mut abi::fi_eq_err_entry, _flags: u64) -> isize {
    guard("fi_eq_readerr", EINVAL as isize, || {
        // SAFETY: the caller's queue, class-checked.
        let Some(q) = (unsafe { fid::get::<Eq>(eq as *const c_void) }) else {
            return EINVAL as isize;
        };
        if buf.is_null() {
            return EINVAL as isize;
        }
        let e = match q.ops.readerr() {
            Ok(e) => e,
            Err(e) => return fid::serr(e),
        };
        let c_fid = q.fids.get(e.fid);
        let context = if c_fid.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: a live C object bound to this queue (removed at its close).
            unsafe { (*c_fid).context }
        };
        // libfabric (API 1.5 on): a caller that gives a buffer of its own in
        // `err_data`/`err_data_size` gets the error data copied into it (as much
        // as fits, the size set to that); otherwise it gets a pointer to the
        // queue's copy, valid until the next `fi_eq_readerr`.
        // SAFETY: the caller's entry, non-NULL: its two fields are read.
        let (user, user_size) = unsafe { ((*buf).err_data, (*buf).err_data_size) };
        let (err_data, err_data_size) = if !user.is_null() && user_size > 0 {
            let n = user_size.min(e.data.len());
            // SAFETY: the caller's buffer of `user_size` bytes; `n` is no more.
            unsafe { std::ptr::copy_nonoverlapping(e.data.as_ptr(), user as *mut u8, n) };
            (user, n)
        } else {
            let mut keep = q.err_data.lock().unwrap_or_else(|p| p.into_inner());
            *keep = e.data;
            let p = if keep.is_empty() { std::ptr::null_mut() } else { keep.as_mut_ptr() as *mut c_void };
            (p, keep.len())
        };
        let out = abi::fi_eq_err_entry {
            fid: c_fid,
            context,
            data: 0,
            err: e.err.errno(),
            prov_errno: e.prov_errno,
            err_data,
            err_data_size,
        };
        // SAFETY: the caller's entry, non-NULL.
        unsafe { buf.write_unaligned(out) };
        std::mem::size_of::<abi::fi_eq_err_entry>() as isize
    })
}

/// `fi_eq_write`: the caller's event and a copy of its `len` bytes, queued
/// after everything queued so far (as libfabric's `util_eq`, whether or not the
/// queue was opened with `FI_WRITE`; `flags` are not used); a read returns the
/// event number and the bytes (truncated to the reader's buffer). Returns
/// `len`; `-FI_EINVAL` for a NULL buffer of non-zero length.
unsafe extern "C" fn write(eq: *mut abi::fid_eq, event: u32, buf: *const c_void, len: usize, _flags: u64) -> isize {
    guard("fi_eq_write", EINVAL as isize, || {
        // SAFETY: the caller's queue, class-checked.
        let Some(q) = (unsafe { fid::get::<Eq>(eq as *const c_void) }) else {
            return EINVAL as isize;
        };
        if (buf.is_null() && len > 0) || len > isize::MAX as usize {
            return EINVAL as isize;
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's buffer, readable for `len` bytes (non-NULL).
            unsafe { std::slice::from_raw_parts(buf as *const u8, len) }.to_vec()
        };
        match q.ops.write(EqEvent::User { event, data }) {
            Ok(()) => len as isize,
            Err(e) => fid::serr(e),
        }
    })
}

unsafe extern "C" fn strerror(
    _eq: *mut abi::fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
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
}

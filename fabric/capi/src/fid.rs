//! What every C object shares: the Rust object behind a `struct fid *`, found by
//! checking the fid's class and casting back (each object is a `#[repr(C)]`
//! struct whose first field is its C `fid_*` struct), boxed and leaked at open,
//! reclaimed by `fi_close`; error numbers as C sees them; the `fi_ops` entries
//! that every class shares.

use crate::abi;
use fabric_core::Error;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// `-FI_EINVAL`.
pub(crate) const EINVAL: c_int = -libc::EINVAL;
/// `-FI_ENOSYS`.
pub(crate) const ENOSYS: c_int = -libc::ENOSYS;
/// `-FI_EBUSY`.
pub(crate) const EBUSY: c_int = -libc::EBUSY;

/// An error as a libfabric return value (a negative error number).
/// `-FI_EAGAIN`, the answer of a busy queue or a full ring that callers
/// poll through, needs no call into the error table.
#[inline(always)]
pub(crate) fn err(e: Error) -> c_int {
    match e {
        Error::Again => -libc::EAGAIN,
        e => -e.errno(),
    }
}

/// [`err`] for the `ssize_t` returns of data-transfer calls.
#[inline(always)]
pub(crate) fn serr(e: Error) -> isize {
    err(e) as isize
}

/// [`err`] out of line, for the results of calls that mostly succeed: their
/// success is then one test.
#[cold]
#[inline(never)]
fn err_cold(e: Error) -> c_int {
    err(e)
}

/// `0` or the negative error number of a result.
#[inline(always)]
pub(crate) fn ret(r: fabric_core::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => err_cold(e),
    }
}

/// [`ret`] as `ssize_t`.
#[inline(always)]
pub(crate) fn sret(r: fabric_core::Result<()>) -> isize {
    ret(r) as isize
}

/// A Rust object whose first field is the C `fid_*` struct of `CLASS`.
///
/// # Safety
/// The implementing type is `#[repr(C)]` and its first field is a C struct whose
/// first field is `struct fid`: a pointer to the object is a valid `struct fid *`.
pub(crate) unsafe trait CObject: Sized {
    /// Its `fclass` (`FI_CLASS_*`).
    const CLASS: usize;
}

/// Leak `obj` for C: the pointer is its `struct fid_*`.
pub(crate) fn leak<T: CObject>(obj: T) -> *mut T {
    Box::into_raw(Box::new(obj))
}

/// The object behind `fid`, if `fid` is non-NULL and of class `T::CLASS`.
///
/// # Safety
/// `fid` is NULL or points at a live `struct fid` (one this library handed out, or
/// at least readable memory that starts with one).
pub(crate) unsafe fn get<'a, T: CObject>(fid: *const c_void) -> Option<&'a T> {
    let fid = fid as *const abi::fid;
    if fid.is_null() {
        return None;
    }
    // SAFETY: the caller passes a pointer to a readable `struct fid`.
    if unsafe { (*fid).fclass } != T::CLASS {
        return None;
    }
    // SAFETY: objects of this class handed out by this library are `T`s (CObject).
    Some(unsafe { &*(fid as *const T) })
}

/// Take back the object behind `fid` for `fi_close`; its class is reset first,
/// so that a second close of the same pointer finds no object (while the memory
/// is not reused).
///
/// # Safety
/// As [`get`]; the object must not be used afterwards.
pub(crate) unsafe fn reclaim<T: CObject>(fid: *mut abi::fid) -> Option<Box<T>> {
    // SAFETY: as the caller guarantees.
    unsafe { get::<T>(fid as *const c_void) }?;
    // SAFETY: checked above: `fid` is a live `T` leaked by `leak`.
    unsafe { (*fid).fclass = abi::FI_CLASS_UNSPEC };
    // SAFETY: as above; the box is the one `leak` made.
    Some(unsafe { Box::from_raw(fid as *mut T) })
}

/// How many open objects depend on an object: those opened under it (a
/// domain's endpoints, queues, counters, address vectors and regions; a
/// fabric's domains, event queues and passive endpoints) and the endpoints
/// bound to it (a queue, counter or address vector). As libfabric's
/// `ofi_atomic` references: `fi_close` of the object answers `-FI_EBUSY`, and
/// leaves it usable, while any is open.
#[derive(Default)]
pub(crate) struct Refs(Arc<AtomicUsize>);

impl Refs {
    /// One more dependent, until the [`Hold`] is dropped (with the object
    /// holding it).
    pub(crate) fn hold(&self) -> Hold {
        self.0.fetch_add(1, Ordering::AcqRel);
        Hold(Arc::clone(&self.0))
    }

    /// Whether any dependent is open.
    pub(crate) fn busy(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// A dependent's reference on an object's [`Refs`], released on drop.
pub(crate) struct Hold(Arc<AtomicUsize>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An object others depend on (see [`Refs`]).
pub(crate) trait Parent: CObject {
    /// Its dependents.
    fn refs(&self) -> &Refs;
}

/// `fi_close` of an object others may depend on: `-FI_EBUSY` (the object left
/// as it was) while any does, `-FI_EINVAL` for a wrong or closed fid, else the
/// object is freed (releasing its own holds on its parent).
///
/// # Safety
/// As [`reclaim`].
pub(crate) unsafe fn close_parent<T: Parent>(f: *mut abi::fid) -> c_int {
    // SAFETY: as the caller guarantees; class-checked.
    match unsafe { get::<T>(f as *const c_void) } {
        None => EINVAL,
        Some(o) if o.refs().busy() => EBUSY,
        // SAFETY: as above; the object is not used afterwards.
        Some(_) => match unsafe { reclaim::<T>(f) } {
            Some(_) => 0,
            None => EINVAL,
        },
    }
}

/// The first steps of every open below a parent (`fi_domain`, `fi_endpoint`,
/// `fi_passive_ep`, `fi_cq_open`, `fi_eq_open`, `fi_av_open`, `fi_cntr_open`):
/// a NULL out-pointer is `-FI_EINVAL`; else `*out` is cleared (so a failed open
/// leaves NULL), and the parent must be a live object of class `P::CLASS`
/// (`-FI_EINVAL` otherwise). [`hand_out`] ends the open.
///
/// # Safety
/// `out` is NULL or writable; `parent` as for [`get`].
pub(crate) unsafe fn open_under<'a, P: CObject, C>(out: *mut *mut C, parent: *const c_void) -> Result<&'a P, c_int> {
    if out.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: a non-NULL out-pointer, writable per the caller.
    unsafe { *out = std::ptr::null_mut() };
    // SAFETY: as the caller guarantees; class-checked.
    unsafe { get::<P>(parent) }.ok_or(EINVAL)
}

/// The last step of an open: `obj` is leaked to C as `*out` (0).
///
/// # Safety
/// `out` is non-NULL and writable (checked by [`open_under`]); `C` is the C
/// struct that is `T`'s first field.
pub(crate) unsafe fn hand_out<T: CObject, C>(out: *mut *mut C, obj: T) -> c_int {
    // SAFETY: as the caller guarantees.
    unsafe { *out = leak(obj) as *mut C };
    0
}

/// A `struct fid` of class `class` with the caller's context and an ops table.
pub(crate) fn fid(class: usize, context: *mut c_void, ops: &'static abi::fi_ops) -> abi::fid {
    abi::fid { fclass: class, context, ops: ops as *const abi::fi_ops as *mut abi::fi_ops }
}

/// `fi_bind` on an object that binds nothing.
pub(crate) unsafe extern "C" fn no_bind(_fid: *mut abi::fid, _bfid: *mut abi::fid, _flags: u64) -> c_int {
    ENOSYS
}

/// `fi_control` on an object without controls.
pub(crate) unsafe extern "C" fn no_control(_fid: *mut abi::fid, _command: c_int, _arg: *mut c_void) -> c_int {
    ENOSYS
}

/// `fi_open_ops`: no extension ops are offered.
pub(crate) unsafe extern "C" fn no_ops_open(
    _fid: *mut abi::fid,
    _name: *const c_char,
    _flags: u64,
    ops: *mut *mut c_void,
    _context: *mut c_void,
) -> c_int {
    if !ops.is_null() {
        // SAFETY: a non-NULL out-pointer from the caller.
        unsafe { *ops = std::ptr::null_mut() };
    }
    ENOSYS
}

/// `fi_tostr` of a fid: not offered.
pub(crate) unsafe extern "C" fn no_tostr(_fid: *const abi::fid, _buf: *mut c_char, _len: usize) -> c_int {
    ENOSYS
}

/// `fi_set_ops`: not offered.
pub(crate) unsafe extern "C" fn no_ops_set(
    _fid: *mut abi::fid,
    _name: *const c_char,
    _flags: u64,
    _ops: *mut c_void,
    _context: *mut c_void,
) -> c_int {
    ENOSYS
}

/// A `fi_ops` table with `close` (and optionally `bind`, `control`) given.
macro_rules! fi_ops {
    ($close:expr) => {
        $crate::fid::fi_ops!($close, $crate::fid::no_bind, $crate::fid::no_control)
    };
    ($close:expr, $bind:expr, $control:expr) => {
        $crate::abi::fi_ops {
            size: std::mem::size_of::<$crate::abi::fi_ops>(),
            close: Some($close),
            bind: Some($bind),
            control: Some($control),
            ops_open: Some($crate::fid::no_ops_open),
            tostr: Some($crate::fid::no_tostr),
            ops_set: Some($crate::fid::no_ops_set),
        }
    };
}
pub(crate) use fi_ops;

/// Write `val` through `out` if it is non-NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, val: T) {
    if !out.is_null() {
        // SAFETY: as the caller guarantees.
        unsafe { out.write(val) };
    }
}

/// A C string argument as `&str` (`None` for NULL or invalid UTF-8).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn cstr<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: as the caller guarantees.
    unsafe { std::ffi::CStr::from_ptr(s) }.to_str().ok()
}

/// A timeout in milliseconds as the blocking calls take it (negative: forever).
pub(crate) fn timeout(ms: c_int) -> Option<std::time::Duration> {
    (ms >= 0).then(|| std::time::Duration::from_millis(ms as u64))
}

/// A queue's `wait_obj` (`fi_cq_attr`, `fi_eq_attr`): none, or an fd for
/// `FI_WAIT_UNSPEC`/`FI_WAIT_FD`; any other kind is `-FI_ENOSYS`.
pub(crate) fn wait_obj(w: abi::fi_wait_obj) -> Result<fabric_core::WaitObj, c_int> {
    match w {
        abi::FI_WAIT_NONE => Ok(fabric_core::WaitObj::None),
        abi::FI_WAIT_UNSPEC | abi::FI_WAIT_FD => Ok(fabric_core::WaitObj::Fd),
        _ => Err(err(Error::NoSys)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_numbers_are_libfabrics_negated() {
        for e in [Error::Again, Error::Inval, Error::NoSys, Error::Avail, Error::Other(1234)] {
            assert_eq!(err(e), -e.errno());
            assert_eq!(serr(e), -(e.errno() as isize));
            assert_eq!(ret(Err(e)), -e.errno());
            assert_eq!(sret(Err(e)), -(e.errno() as isize));
        }
        assert_eq!(err(Error::Again), -11);
        assert_eq!(ret(Ok(())), 0);
        assert_eq!(sret(Ok(())), 0);
    }
}

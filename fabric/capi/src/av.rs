//! `fi_av_open` and the address vector (`struct fid_av`): addresses in their C
//! form (see `addr`) to `fi_addr_t` handles and back.

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL, ENOSYS};
use crate::{abi, addr, exports::guard};
use fabric_core::prov::AvOps;
use fabric_core::{AvAttr, AvType, Error, FiAddr};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// An address vector as C holds it.
#[repr(C)]
pub(crate) struct Av {
    c: abi::fid_av,
    /// The provider's address vector.
    pub(crate) ops: Arc<dyn AvOps>,
}

// SAFETY: repr(C), first field `fid_av`, whose first field is `struct fid`.
unsafe impl CObject for Av {
    const CLASS: usize = abi::FI_CLASS_AV;
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close);

static AV_OPS: abi::fi_ops_av = abi::fi_ops_av {
    size: std::mem::size_of::<abi::fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(av_set),
};

/// The most addresses one call may insert or remove.
const COUNT_MAX: usize = 1 << 24;

/// `fi_av_open` (`domain->ops->av_open`).
pub(crate) unsafe extern "C" fn fi_av_open(
    domain: *mut abi::fid_domain,
    attr: *mut abi::fi_av_attr,
    av: *mut *mut abi::fid_av,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_open", EINVAL, || {
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's out-pointer and domain, class-checked.
        let d = match unsafe { fid::open_under::<Domain, _>(av, domain as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        let av_type = match a.r#type {
            abi::FI_AV_UNSPEC => AvType::Unspec,
            abi::FI_AV_MAP => AvType::Map,
            abi::FI_AV_TABLE => AvType::Table,
            _ => return EINVAL,
        };
        if !a.name.is_null() || a.flags != 0 {
            return fid::err(Error::NoSys);
        }
        let ops = match d.ops.av_open(&AvAttr { av_type, count: a.count }) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let obj = Av {
            c: abi::fid_av { fid: fid::fid(abi::FI_CLASS_AV, context, &FID_OPS), ops: &AV_OPS as *const _ as *mut _ },
            ops,
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(av, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        match unsafe { fid::reclaim::<Av>(f) } {
            Some(_) => 0,
            None => EINVAL,
        }
    })
}

/// `fi_av_insert`: the addresses are packed one after the other; returns how
/// many were inserted. Those that fail get `FI_ADDR_NOTAVAIL`.
unsafe extern "C" fn insert(
    av: *mut abi::fid_av,
    addrs: *const c_void,
    count: usize,
    fi_addr: *mut abi::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard("fi_av_insert", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        if (addrs.is_null() && count > 0) || count > COUNT_MAX || flags != 0 {
            return EINVAL;
        }
        let mut p = addrs as *const u8;
        let mut done = 0usize;
        for i in 0..count {
            // SAFETY: the caller's packed addresses: each is readable in full.
            let r = unsafe { addr::from_c(p, usize::MAX) }.and_then(|(a, n)| Ok((v.ops.insert(&[a])?, n)));
            let out = match r {
                Ok((handles, n)) => {
                    // SAFETY: advancing within the caller's packed addresses.
                    p = unsafe { p.add(n) };
                    match handles.first() {
                        Some(h) => {
                            done += 1;
                            h.0
                        }
                        None => abi::FI_ADDR_NOTAVAIL,
                    }
                }
                Err(_) => {
                    if !fi_addr.is_null() {
                        for j in i..count {
                            // SAFETY: `fi_addr` has room for `count` handles.
                            unsafe { fi_addr.add(j).write_unaligned(abi::FI_ADDR_NOTAVAIL) };
                        }
                    }
                    break;
                }
            };
            if !fi_addr.is_null() {
                // SAFETY: `fi_addr` has room for `count` handles.
                unsafe { fi_addr.add(i).write_unaligned(out) };
            }
        }
        done as c_int
    })
}

unsafe extern "C" fn insertsvc(
    _av: *mut abi::fid_av,
    _node: *const c_char,
    _service: *const c_char,
    _fi_addr: *mut abi::fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn insertsym(
    _av: *mut abi::fid_av,
    _node: *const c_char,
    _nodecnt: usize,
    _service: *const c_char,
    _svccnt: usize,
    _fi_addr: *mut abi::fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    ENOSYS
}

unsafe extern "C" fn remove(av: *mut abi::fid_av, fi_addr: *mut abi::fi_addr_t, count: usize, _flags: u64) -> c_int {
    guard("fi_av_remove", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        if (fi_addr.is_null() && count > 0) || count > COUNT_MAX {
            return EINVAL;
        }
        let handles: Vec<FiAddr> = (0..count)
            // SAFETY: `fi_addr` holds `count` handles.
            .map(|i| FiAddr(unsafe { fi_addr.add(i).read_unaligned() }))
            .collect();
        fid::ret(v.ops.remove(&handles))
    })
}

unsafe extern "C" fn lookup(av: *mut abi::fid_av, fi_addr: abi::fi_addr_t, out: *mut c_void, len: *mut usize) -> c_int {
    guard("fi_av_lookup", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        match v.ops.lookup(FiAddr(fi_addr)) {
            // SAFETY: the caller's buffer and in/out length.
            Ok(a) => unsafe { addr::copy_out(&addr::to_c(&a), out as *mut u8, len) },
            Err(e) => fid::err(e),
        }
    })
}

/// `fi_av_straddr`: the address as text (`fi_sockaddr_in://...`), truncated to
/// `*len` with `*len` set to the full length plus the NUL.
unsafe extern "C" fn straddr(
    av: *mut abi::fid_av,
    a: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard("fi_av_straddr", std::ptr::null(), || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return std::ptr::null();
        };
        if buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: the caller's address.
        let Ok((addr, _)) = (unsafe { addr::from_c(a as *const u8, usize::MAX) }) else {
            return std::ptr::null();
        };
        let s = v.ops.straddr(&addr);
        // SAFETY: the caller's in/out length.
        let room = unsafe { *len };
        // SAFETY: as above.
        unsafe { *len = s.len() + 1 };
        if room > 0 {
            let n = s.len().min(room - 1);
            // SAFETY: `buf` has room for `room` bytes; `n + 1 <= room`.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        buf
    })
}

unsafe extern "C" fn av_set(
    _av: *mut abi::fid_av,
    _attr: *mut abi::fi_av_set_attr,
    set: *mut *mut abi::fid_av_set,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(set, std::ptr::null_mut()) };
    ENOSYS
}

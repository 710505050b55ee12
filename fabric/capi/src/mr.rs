//! Memory registration (`struct fi_ops_mr` of a domain): `fi_mr_reg`,
//! `fi_mr_regv` (one piece), `fi_mr_regattr`, and the region (`struct fid_mr`,
//! whose `mem_desc` and `key` C reads directly: `fi_mr_desc`, `fi_mr_key`;
//! `fi_mr_refresh`).

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::flags::{bits_to_names, CAP_NAMES};
use fabric_core::prov::MrOps;
use fabric_core::{Error, MrAccess};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A memory region as C holds it.
#[repr(C)]
pub(crate) struct Mr {
    c: abi::fid_mr,
    /// The provider's region.
    pub(crate) ops: Arc<dyn MrOps>,
    /// The registered memory: its start and length.
    region: (usize, usize),
    /// Its hold on the domain.
    _domain: fid::Hold,
}

// SAFETY: repr(C), first field `fid_mr`, whose first field is `struct fid`.
unsafe impl CObject for Mr {
    const CLASS: usize = abi::FI_CLASS_MR;
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, control);

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(m) = (unsafe { fid::get::<Mr>(f as *const c_void) }) else {
            return EINVAL;
        };
        if let Err(e) = m.ops.close() {
            return fid::err(e);
        }
        // SAFETY: checked above.
        drop(unsafe { fid::reclaim::<Mr>(f) });
        0
    })
}

/// `fi_control`: `FI_REFRESH` (`fi_mr_refresh`). Registrations here are of
/// host memory that the providers reach by its address, with nothing pinned or
/// cached to update: a refresh of a live region succeeds without effect, once
/// each `iovec` given is checked to lie inside the region (`-FI_EINVAL`
/// otherwise, or for a NULL argument or flags). Other commands are
/// `-FI_ENOSYS`.
unsafe extern "C" fn control(f: *mut abi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(m) = (unsafe { fid::get::<Mr>(f as *const c_void) }) else {
            return EINVAL;
        };
        if command != abi::FI_REFRESH {
            return fid::err(Error::NoSys);
        }
        // SAFETY: NULL or FI_REFRESH's `struct fi_mr_modify *`.
        let Some(modify) = (unsafe { (arg as *const abi::fi_mr_modify).as_ref() }) else {
            return EINVAL;
        };
        let (iov, count) = (modify.attr.mr_iov, modify.attr.iov_count);
        if modify.flags != 0 || (iov.is_null() && count > 0) {
            return EINVAL;
        }
        let (start, len) = m.region;
        for i in 0..count {
            // SAFETY: the caller's `count` iovecs (non-NULL, checked).
            let v = unsafe { iov.add(i).read_unaligned() };
            let inside = (v.iov_base as usize)
                .checked_sub(start)
                .and_then(|off| off.checked_add(v.iov_len))
                .is_some_and(|end| end <= len);
            if !inside {
                return EINVAL;
            }
        }
        0
    })
}

/// Register `len` bytes at `buf` on the domain behind `f`.
///
/// # Safety
/// `f` NULL or a live fid; `buf` the caller's memory, valid while registered.
unsafe fn register(
    f: *mut abi::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    key: u64,
    mr: *mut *mut abi::fid_mr,
    context: *mut c_void,
) -> c_int {
    if mr.is_null() {
        return EINVAL;
    }
    // SAFETY: non-NULL out-pointer.
    unsafe { *mr = std::ptr::null_mut() };
    // SAFETY: the caller's domain, class-checked.
    let Some(d) = (unsafe { fid::get::<Domain>(f as *const c_void) }) else {
        return EINVAL;
    };
    if buf.is_null() && len > 0 {
        return EINVAL;
    }
    let access = MrAccess::from_bits_truncate(access);
    // SAFETY: the caller's memory, valid while registered (libfabric's rule).
    let ops = match unsafe { d.ops.mr_reg(buf as *mut u8, len, access, key) } {
        Ok(o) => o,
        Err(e) => return fid::err(e),
    };
    // Registrations are few (windows, bounce buffers), never per operation:
    // `FI_LOG_LEVEL=debug` shows what a program exposes to its peers.
    fabric_core::fi_log!(
        fabric_core::log::Level::Debug,
        &d.info.fabric_attr.prov_name,
        "mr",
        "fi_mr_reg: {len} bytes at {buf:p}, access {}, key {:#x}",
        access_names(access),
        ops.key()
    );
    let obj = Mr {
        c: abi::fid_mr {
            fid: fid::fid(abi::FI_CLASS_MR, context, &FID_OPS),
            mem_desc: ops.desc() as *mut c_void,
            key: ops.key(),
        },
        ops,
        region: (buf as usize, len),
        _domain: d.refs.hold(),
    };
    // SAFETY: non-NULL out-pointer.
    unsafe { *mr = fid::leak(obj) as *mut abi::fid_mr };
    0
}

/// `fi_mr_reg`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn fi_mr_reg(
    f: *mut abi::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    key: u64,
    flags: u64,
    mr: *mut *mut abi::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_reg", EINVAL, || {
        if offset != 0 || flags != 0 {
            return fid::err(Error::NoSys);
        }
        // SAFETY: the caller's arguments, as fi_mr_reg documents them.
        unsafe { register(f, buf, len, access, key, mr, context) }
    })
}

/// `fi_mr_regv`: one piece (`mr_iov_limit` 1).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn fi_mr_regv(
    f: *mut abi::fid,
    iov: *const abi::iovec,
    count: usize,
    access: u64,
    offset: u64,
    key: u64,
    flags: u64,
    mr: *mut *mut abi::fid_mr,
    context: *mut c_void,
) -> c_int {
    guard("fi_mr_regv", EINVAL, || {
        if count != 1 || iov.is_null() {
            return EINVAL;
        }
        if offset != 0 || flags != 0 {
            return fid::err(Error::NoSys);
        }
        // SAFETY: the caller's one iovec.
        let v = unsafe { iov.read_unaligned() };
        // SAFETY: the caller's memory, as fi_mr_regv documents it.
        unsafe { register(f, v.iov_base, v.iov_len, access, key, mr, context) }
    })
}

/// `fi_mr_regattr`: one piece of host memory.
pub(crate) unsafe extern "C" fn fi_mr_regattr(
    f: *mut abi::fid,
    attr: *const abi::fi_mr_attr,
    flags: u64,
    mr: *mut *mut abi::fid_mr,
) -> c_int {
    guard("fi_mr_regattr", EINVAL, || {
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        if a.iov_count != 1 || a.mr_iov.is_null() {
            return EINVAL;
        }
        if a.offset != 0 || flags != 0 || a.iface != abi::FI_HMEM_SYSTEM {
            return fid::err(Error::NoSys);
        }
        // SAFETY: the attribute's one iovec.
        let v = unsafe { a.mr_iov.read_unaligned() };
        // SAFETY: the caller's memory, as fi_mr_regattr documents it.
        unsafe { register(f, v.iov_base, v.iov_len, a.access, a.requested_key, mr, a.context) }
    })
}

/// Access rights as a log line names them (`FI_READ, FI_REMOTE_WRITE`; `none`),
/// libfabric's names, not Rust's debug text.
fn access_names(access: MrAccess) -> String {
    let names = bits_to_names(access.bits(), CAP_NAMES);
    if names.is_empty() {
        "none".to_string()
    } else {
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_is_named_as_libfabric() {
        assert_eq!(access_names(MrAccess::READ | MrAccess::REMOTE_WRITE), "FI_READ, FI_REMOTE_WRITE");
        assert_eq!(access_names(MrAccess::empty()), "none");
    }
}

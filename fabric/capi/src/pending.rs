//! Exports not implemented yet: each answers as libfabric does for what is
//! absent (`-FI_ENOSYS`, NULL, nothing). Each moves to its own module as it is
//! implemented; this file goes when it is empty.

use std::ffi::{c_int, c_void};

const NOSYS: c_int = -38;

/// `fi_fabric` (FABRIC_1.1).
#[no_mangle]
pub extern "C" fn fabric_capi_fabric(_attr: *mut c_void, fabric: *mut *mut c_void, _ctx: *mut c_void) -> c_int {
    if !fabric.is_null() {
        // SAFETY: the caller passes a valid out-pointer (checked non-NULL).
        unsafe { *fabric = std::ptr::null_mut() };
    }
    NOSYS
}

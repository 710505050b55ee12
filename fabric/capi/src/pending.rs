//! Exports not implemented yet: each answers as libfabric does for what is
//! absent (`-FI_ENOSYS`, NULL, nothing). Each moves to its own module as it is
//! implemented; this file goes when it is empty.

use std::ffi::{c_char, c_int, c_void};

const NOSYS: c_int = -38;

/// `fi_getparams`.
#[no_mangle]
pub extern "C" fn fi_getparams(params: *mut *mut c_void, count: *mut c_int) -> c_int {
    if !params.is_null() {
        // SAFETY: the caller passes valid out-pointers (checked non-NULL).
        unsafe { *params = std::ptr::null_mut() };
    }
    if !count.is_null() {
        // SAFETY: as above.
        unsafe { *count = 0 };
    }
    NOSYS
}

/// `fi_freeparams`.
#[no_mangle]
pub extern "C" fn fi_freeparams(_params: *mut c_void) {}

/// `fi_param_get`.
#[no_mangle]
pub extern "C" fn fi_param_get(_prov: *mut c_void, _name: *const c_char, _value: *mut c_void) -> c_int {
    NOSYS
}

/// `fi_log_enabled`.
#[no_mangle]
pub extern "C" fn fi_log_enabled(_prov: *const c_void, _level: c_int, _subsys: c_int) -> c_int {
    0
}

/// `fi_log_ready`.
#[no_mangle]
pub extern "C" fn fi_log_ready(_prov: *const c_void, _level: c_int, _subsys: c_int, _showtime: *mut u64) -> c_int {
    0
}

/// What `fi_log` (shim.c) formatted: written as fabric's log lines are.
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_log(_prov: *const c_void, level: c_int, _subsys: c_int, msg: *const c_char) {
    if msg.is_null() {
        return;
    }
    // SAFETY: the caller (shim.c) passes a NUL-terminated string it formatted.
    let text = unsafe { std::ffi::CStr::from_ptr(msg) }.to_string_lossy();
    let level = match level {
        0 => fabric_core::log::Level::Warn,
        1 => fabric_core::log::Level::Info,
        2 => fabric_core::log::Level::Debug,
        _ => fabric_core::log::Level::Trace,
    };
    fabric_core::fi_log!(level, "core", "core", "{text}");
}

/// What `fi_param_define` (shim.c) was given, its help formatted.
///
/// # Safety
/// `name` and `help` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_param_define(
    _prov: *const c_void,
    name: *const c_char,
    _type: c_int,
    _help: *const c_char,
) -> c_int {
    if name.is_null() {
        return -libc::EINVAL;
    }
    0
}

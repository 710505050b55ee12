//! The exported functions. libfabric 1.17 exports sixteen names (everything else a
//! C program calls is a `static inline` in its headers that jumps through an
//! object's ops tables); four of them have several versions: `fi_getinfo`,
//! `fi_freeinfo`, `fi_dupinfo` (FABRIC_1.0 to 1.2 compat, 1.3 default) and
//! `fi_fabric` (1.0 compat, 1.1 default). The default versions are the Rust
//! functions `fabric_capi_*`, bound to their names by `.symver` (see [`symver`]);
//! the compat versions serve binaries built before libfabric 1.3 against the older
//! `struct fi_info` layouts, which this library does not implement: they fail
//! cleanly (README, "Using fabric from C").

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

/// `FI_VERSION(1, 17)`: the API version whose ABI this library implements.
pub const API_VERSION: u32 = (1 << 16) | 17;

/// Bind `$name@$at$node` (`@@` default, `@` compat) to the function `$imp`: a
/// trampoline (one jump) carrying the versioned name, defined in the same object
/// as its `.symver`, as the assembler requires. `$tag` makes the trampoline's own
/// (local) name unique.
macro_rules! symver {
    ($name:literal, $imp:literal, $node:literal, $tag:literal, $at:literal) => {
        std::arch::global_asm!(
            ".text",
            concat!(".globl ", $name, "_v", $tag),
            concat!(".type ", $name, "_v", $tag, ",@function"),
            concat!($name, "_v", $tag, ":"),
            concat!("jmp ", $imp),
            concat!(".size ", $name, "_v", $tag, ", .-", $name, "_v", $tag),
            concat!(".symver ", $name, "_v", $tag, ", ", $name, $at, "FABRIC_", $node),
        );
    };
}

symver!("fi_getinfo", "fabric_capi_getinfo", "1.3", "13", "@@");
symver!("fi_freeinfo", "fabric_capi_freeinfo", "1.3", "13", "@@");
symver!("fi_dupinfo", "fabric_capi_dupinfo", "1.3", "13", "@@");
symver!("fi_fabric", "fabric_capi_fabric", "1.1", "11", "@@");
symver!("fi_getinfo", "fabric_capi_getinfo_compat", "1.0", "10", "@");
symver!("fi_getinfo", "fabric_capi_getinfo_compat", "1.1", "11", "@");
symver!("fi_getinfo", "fabric_capi_getinfo_compat", "1.2", "12", "@");
symver!("fi_freeinfo", "fabric_capi_freeinfo_compat", "1.0", "10", "@");
symver!("fi_freeinfo", "fabric_capi_freeinfo_compat", "1.1", "11", "@");
symver!("fi_freeinfo", "fabric_capi_freeinfo_compat", "1.2", "12", "@");
symver!("fi_dupinfo", "fabric_capi_dupinfo_compat", "1.0", "10", "@");
symver!("fi_dupinfo", "fabric_capi_dupinfo_compat", "1.1", "11", "@");
symver!("fi_dupinfo", "fabric_capi_dupinfo_compat", "1.2", "12", "@");
symver!("fi_fabric", "fabric_capi_fabric_compat", "1.0", "10", "@");

/// Run `f`, turning a panic into `err` (and a log line): no Rust panic may
/// unwind into C. Inlined into every entry point, so that the data-transfer
/// calls pay no call or argument packing for it; the panic's handling is out
/// of line ([`panicked`]).
#[inline(always)]
pub fn guard<T>(what: &str, err: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            panicked(what, p);
            err
        }
    }
}

/// Log the panic `p` caught in the entry point `what`.
#[cold]
#[inline(never)]
fn panicked(what: &str, p: Box<dyn std::any::Any + Send>) {
    let why = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    fabric_core::fi_log!(fabric_core::log::Level::Warn, "core", "core", "{what}: internal error: {why}");
}

/// The warning a pre-1.3 binary gets from a compat entry point, once.
fn pre_1_3(what: &str) {
    fabric_core::log::warn_once(
        "capi-pre-1.3",
        "core",
        "core",
        format_args!("{what}: a program built against libfabric before 1.3 (older struct fi_info) is not supported"),
    );
}

/// `fi_version`: the API version this library implements (1.17).
#[no_mangle]
pub extern "C" fn fi_version() -> u32 {
    API_VERSION
}

/// `fi_strerror`: the text of a libfabric error number (sign ignored): libc's
/// below 256, libfabric's own above. The strings live as long as the process.
#[no_mangle]
pub extern "C" fn fi_strerror(errnum: c_int) -> *const c_char {
    static TEXTS: OnceLock<Mutex<Vec<(i32, &'static CStr)>>> = OnceLock::new();
    let n = errnum.unsigned_abs().min(i32::MAX as u32) as i32;
    guard("fi_strerror", c"Unspecified error".as_ptr(), || {
        let texts = TEXTS.get_or_init(|| Mutex::new(Vec::new()));
        let mut t = texts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = t.iter().find(|(k, _)| *k == n) {
            return s.as_ptr();
        }
        let text = if n < 256 {
            // SAFETY: strerror returns a valid NUL-terminated string (possibly in a
            // buffer the next call reuses: it is copied at once, under our lock).
            unsafe { CStr::from_ptr(libc::strerror(n)) }.to_string_lossy().into_owned()
        } else {
            fabric_core::strerror(n)
        };
        let leaked: &'static CStr = Box::leak(CString::new(text).unwrap_or_default().into_boxed_c_str());
        t.push((n, leaked));
        leaked.as_ptr()
    })
}

/// `fi_open`: opens named framework objects. None exists here (`mr_cache`, which
/// Open MPI asks for, is libfabric's memory registration cache): `-FI_ENOSYS`.
#[no_mangle]
pub unsafe extern "C" fn fi_open(
    _version: u32,
    name: *const c_char,
    _attr: *mut c_void,
    _attr_len: usize,
    _flags: u64,
    fid: *mut *mut c_void,
    _context: *mut c_void,
) -> c_int {
    if !fid.is_null() {
        // SAFETY: the caller passes a valid out-pointer (checked non-NULL).
        unsafe { *fid = std::ptr::null_mut() };
    }
    if name.is_null() {
        return -libc::EINVAL;
    }
    -(fabric_core::Error::NoSys.errno())
}

/// Compat `fi_getinfo` (FABRIC_1.0 to 1.2): refused, see the module docs.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_getinfo_compat(
    _version: u32,
    _node: *const c_char,
    _service: *const c_char,
    _flags: u64,
    _hints: *const c_void,
    info: *mut *mut c_void,
) -> c_int {
    pre_1_3("fi_getinfo");
    if !info.is_null() {
        // SAFETY: the caller passes a valid out-pointer (checked non-NULL).
        unsafe { *info = std::ptr::null_mut() };
    }
    -(fabric_core::Error::NoSys.errno())
}

/// Compat `fi_freeinfo`: nothing was ever handed out through the compat entry
/// points, so there is nothing to free.
#[no_mangle]
pub extern "C" fn fabric_capi_freeinfo_compat(_info: *mut c_void) {
    pre_1_3("fi_freeinfo");
}

/// Compat `fi_dupinfo`: NULL (no old-layout info can be made).
#[no_mangle]
pub extern "C" fn fabric_capi_dupinfo_compat(_info: *const c_void) -> *mut c_void {
    pre_1_3("fi_dupinfo");
    std::ptr::null_mut()
}

/// Compat `fi_fabric` (FABRIC_1.0): refused.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_fabric_compat(
    _attr: *mut c_void,
    fabric: *mut *mut c_void,
    _ctx: *mut c_void,
) -> c_int {
    pre_1_3("fi_fabric");
    if !fabric.is_null() {
        // SAFETY: the caller passes a valid out-pointer (checked non-NULL).
        unsafe { *fabric = std::ptr::null_mut() };
    }
    -(fabric_core::Error::NoSys.errno())
}

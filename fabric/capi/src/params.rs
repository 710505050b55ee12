//! Parameters and logging through the C ABI: `fi_getparams`, `fi_freeparams`,
//! `fi_param_get`, the Rust side of `fi_param_define` and `fi_log` (`shim.c`),
//! `fi_log_enabled`, `fi_log_ready`.
//!
//! The parameters are fabric's (`fabric::params()`: the core's, then each
//! provider's) followed by those C code defined with `fi_param_define`; the log
//! is fabric's (`FI_LOG_LEVEL`, `FI_LOG_PROV`), so a C provider's or
//! application's `FI_LOG` lines come out with fabric's.

use crate::abi::{self, fi_param, fi_provider};
use crate::exports::guard;
use crate::info::{c_str, c_strdup, neg, EOTHER};
use fabric_core::log::Level;
use fabric_core::{Error, ParamType};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

/// A parameter C code defined: its variable, type and help.
struct Defined {
    var: String,
    kind: abi::fi_param_type,
    help: String,
}

/// The parameters defined through `fi_param_define`, in order.
static DEFINED: Mutex<Vec<Defined>> = Mutex::new(Vec::new());

/// `fi_param_type` of a fabric parameter type.
fn kind_to_c(k: ParamType) -> abi::fi_param_type {
    match k {
        ParamType::Str => abi::FI_PARAM_STRING,
        ParamType::Int => abi::FI_PARAM_INT,
        ParamType::Bool => abi::FI_PARAM_BOOL,
        ParamType::Size => abi::FI_PARAM_SIZE_T,
    }
}

/// The provider name of a C `struct fi_provider` (`None` for NULL: the core).
///
/// # Safety
/// `prov` is NULL or a valid `fi_provider` whose name is NULL or a string.
unsafe fn prov_name(prov: *const fi_provider) -> Option<String> {
    // SAFETY: the caller's guarantee.
    let p = unsafe { prov.as_ref() }?;
    // SAFETY: as above.
    unsafe { c_str(p.name) }
}

/// The variable of parameter `name` of `prov`: `FI_<PROV>_<NAME>`, or
/// `FI_<NAME>` for the core, upper case.
fn var_name(prov: Option<&str>, name: &str) -> String {
    match prov {
        Some(p) => format!("FI_{}_{}", p, name),
        None => format!("FI_{name}"),
    }
    .to_ascii_uppercase()
    .replace(['-', ';'], "_")
}

/// Every parameter as (variable, type, help): fabric's, then those C defined.
fn all_params() -> Vec<(String, abi::fi_param_type, String)> {
    let mut v: Vec<(String, abi::fi_param_type, String)> =
        fabric::params().iter().map(|p| (p.env_name(), kind_to_c(p.kind), p.help_text())).collect();
    let d = DEFINED.lock().unwrap_or_else(|e| e.into_inner());
    for p in d.iter() {
        if !v.iter().any(|(n, _, _)| *n == p.var) {
            v.push((p.var.clone(), p.kind, p.help.clone()));
        }
    }
    v
}

/// Rust side of `fi_param_define` (`shim.c` formats the help): declare a
/// parameter, listed by `fi_getparams` and read by `fi_param_get`. `-FI_EINVAL`
/// for a NULL name or an unknown type; defining one twice is `-FI_EALREADY`,
/// as libfabric answers.
///
/// # Safety
/// `prov` NULL or a valid `fi_provider`; `name`, `help` NULL or strings.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_param_define(
    prov: *const fi_provider,
    name: *const c_char,
    kind: c_int,
    help: *const c_char,
) -> c_int {
    // SAFETY: the caller's guarantees.
    let (Some(name), prov, help) = (unsafe { c_str(name) }, unsafe { prov_name(prov) }, unsafe { c_str(help) }) else {
        return neg(Error::Inval);
    };
    if !(abi::FI_PARAM_STRING..=abi::FI_PARAM_SIZE_T).contains(&kind) {
        return neg(Error::Inval);
    }
    guard("fi_param_define", EOTHER, || {
        let var = var_name(prov.as_deref(), &name);
        let mut d = DEFINED.lock().unwrap_or_else(|e| e.into_inner());
        if d.iter().any(|p| p.var == var) {
            return neg(Error::Already);
        }
        let help = match &prov {
            Some(p) => format!("{p}: {}", help.unwrap_or_default()),
            None => help.unwrap_or_default(),
        };
        d.push(Defined { var, kind, help });
        0
    })
}

/// `fi_param_get` (FABRIC_1.0): the value of parameter `name` of `prov` (NULL:
/// the core) from the environment, into `value` as its type says (`char *`
/// pointing into the environment, `int`, `int` 0/1, `size_t`). `-FI_ENOENT` if
/// no such parameter is defined, `-FI_ENODATA` if it is unset, `-FI_EINVAL` for
/// a value its type cannot hold or a NULL argument.
///
/// # Safety
/// `prov` NULL or a valid `fi_provider`; `name` NULL or a string; `value`
/// NULL or valid for the parameter's type.
#[no_mangle]
pub unsafe extern "C" fn fi_param_get(prov: *mut fi_provider, name: *const c_char, value: *mut c_void) -> c_int {
    // SAFETY: the caller's guarantees.
    let (Some(name), prov) = (unsafe { c_str(name) }, unsafe { prov_name(prov) }) else {
        return neg(Error::Inval);
    };
    if value.is_null() {
        return neg(Error::Inval);
    }
    guard("fi_param_get", EOTHER, || {
        let var = var_name(prov.as_deref(), &name);
        let Some((_, kind, _)) = all_params().into_iter().find(|(n, _, _)| *n == var) else {
            return neg(Error::NoEnt);
        };
        let Ok(cvar) = std::ffi::CString::new(var) else { return neg(Error::Inval) };
        // SAFETY: getenv of a NUL-terminated name; the result is NULL or a string
        // in the environment, as libfabric hands out.
        let raw = unsafe { libc::getenv(cvar.as_ptr()) };
        // SAFETY: NULL or a string.
        let Some(text) = (unsafe { c_str(raw) }) else { return neg(Error::NoData) };
        match kind {
            // SAFETY: value is valid for the parameter's type (here and below).
            abi::FI_PARAM_STRING => unsafe { *(value as *mut *const c_char) = raw },
            abi::FI_PARAM_INT => match fabric_core::param::parse_int(&text).and_then(|n| c_int::try_from(n).ok()) {
                // SAFETY: as above.
                Some(n) => unsafe { *(value as *mut c_int) = n },
                None => return neg(Error::Inval),
            },
            abi::FI_PARAM_BOOL => match fabric_core::param::parse_bool(&text) {
                // SAFETY: as above.
                Some(b) => unsafe { *(value as *mut c_int) = c_int::from(b) },
                None => return neg(Error::Inval),
            },
            _ => match fabric_core::param::parse_size(&text) {
                // SAFETY: as above.
                Some(n) => unsafe { *(value as *mut usize) = n },
                None => return neg(Error::Inval),
            },
        }
        0
    })
}

/// `fi_getparams` (FABRIC_1.0): every parameter (name, type, help, value set
/// in the environment or NULL) as a libc-allocated array ending in an all-NULL
/// entry, its length in `count`; free with `fi_freeparams`.
///
/// # Safety
/// `params` and `count` NULL (then `-FI_EINVAL`) or valid out-pointers.
#[no_mangle]
pub unsafe extern "C" fn fi_getparams(params: *mut *mut fi_param, count: *mut c_int) -> c_int {
    if params.is_null() || count.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: valid out-pointers (checked non-NULL).
    unsafe {
        *params = std::ptr::null_mut();
        *count = 0;
    }
    guard("fi_getparams", EOTHER, || {
        let all = all_params();
        // SAFETY: calloc of len+1 entries (the last stays all NULL).
        let arr = unsafe { libc::calloc(all.len() + 1, std::mem::size_of::<fi_param>()) } as *mut fi_param;
        if arr.is_null() {
            return neg(Error::NoMem);
        }
        for (i, (var, kind, help)) in all.iter().enumerate() {
            let value = std::env::var(var).ok().map_or(std::ptr::null_mut(), |v| c_strdup(&v));
            // SAFETY: i < len: an entry of arr.
            let e = unsafe { &mut *arr.add(i) };
            e.name = c_strdup(var);
            e.r#type = *kind;
            e.help_string = c_strdup(help);
            e.value = value;
            if e.name.is_null() || e.help_string.is_null() {
                // SAFETY: arr is ours, NULL-terminated past the entries filled.
                unsafe { fi_freeparams(arr) };
                return neg(Error::NoMem);
            }
        }
        // SAFETY: valid out-pointers.
        unsafe {
            *params = arr;
            *count = c_int::try_from(all.len()).unwrap_or(c_int::MAX);
        }
        0
    })
}

/// `fi_freeparams` (FABRIC_1.0): free what `fi_getparams` gave (NULL: nothing).
///
/// # Safety
/// `params` NULL or an array `fi_getparams` returned.
#[no_mangle]
pub unsafe extern "C" fn fi_freeparams(params: *mut fi_param) {
    if params.is_null() {
        return;
    }
    let mut i = 0;
    // SAFETY: the array ends in an entry whose name is NULL; every string in it
    // is libc memory.
    unsafe {
        loop {
            let e = &*params.add(i);
            if e.name.is_null() {
                break;
            }
            libc::free(e.name as *mut c_void);
            libc::free(e.help_string as *mut c_void);
            libc::free(e.value as *mut c_void);
            i += 1;
        }
        libc::free(params.cast());
    }
}

/// fabric's level of a C `enum fi_log_level` (WARN 0, TRACE 1, INFO 2, DEBUG 3).
fn level_from_c(level: c_int) -> Option<Level> {
    Some(match level {
        0 => Level::Warn,
        1 => Level::Trace,
        2 => Level::Info,
        3 => Level::Debug,
        _ => return None,
    })
}

/// The name of a C `enum fi_log_subsys`, as libfabric's log lines print it.
fn subsys_name(subsys: c_int) -> &'static str {
    const NAMES: &[&str] = &["core", "fabric", "domain", "ep_ctrl", "ep_data", "av", "cq", "eq", "mr", "cntr"];
    usize::try_from(subsys).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("core")
}

/// `fi_log_enabled` (FABRIC_1.0): whether a line at `level` from `prov` (NULL:
/// the core) would be written (`FI_LOG_LEVEL`, `FI_LOG_PROV`).
///
/// # Safety
/// `prov` NULL or a valid `fi_provider`.
#[no_mangle]
pub unsafe extern "C" fn fi_log_enabled(prov: *const fi_provider, level: c_int, _subsys: c_int) -> c_int {
    // SAFETY: the caller's guarantee.
    let name = unsafe { prov_name(prov) }.unwrap_or_else(|| "core".into());
    guard("fi_log_enabled", 0, || level_from_c(level).map_or(0, |l| c_int::from(fabric_core::log::enabled(l, &name))))
}

/// `fi_log_ready` (FABRIC_1.6): [`fi_log_enabled`], for libfabric's rate-limited
/// `FI_LOG_SPARSE` (`showtime` is its next allowed time; fabric does not limit,
/// so it is left as it is).
///
/// # Safety
/// As [`fi_log_enabled`]; `showtime` is not read.
#[no_mangle]
pub unsafe extern "C" fn fi_log_ready(
    prov: *const fi_provider,
    level: c_int,
    subsys: c_int,
    _showtime: *mut u64,
) -> c_int {
    // SAFETY: the caller's guarantee.
    unsafe { fi_log_enabled(prov, level, subsys) }
}

/// What `fi_log` (`shim.c`) formatted: written as fabric's log lines are, under
/// the provider's name and libfabric's subsystem name.
///
/// # Safety
/// `prov` NULL or a valid `fi_provider`; `msg` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_log(prov: *const fi_provider, level: c_int, subsys: c_int, msg: *const c_char) {
    // SAFETY: the caller's guarantees.
    let (Some(text), name) = (unsafe { c_str(msg) }, unsafe { prov_name(prov) }) else { return };
    let name = name.unwrap_or_else(|| "core".into());
    guard("fi_log", (), || {
        if let Some(l) = level_from_c(level) {
            if fabric_core::log::enabled(l, &name) {
                fabric_core::log::write(l, &name, subsys_name(subsys), format_args!("{text}"));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_list_define_and_get() {
        let mut prov: fi_provider = unsafe_zeroed();
        prov.name = c"unitprov".as_ptr();
        // SAFETY: prov and the strings are valid.
        unsafe {
            assert_eq!(fabric_capi_param_define(&prov, c"knob".as_ptr(), abi::FI_PARAM_INT, c"a knob".as_ptr()), 0);
            assert_eq!(
                fabric_capi_param_define(&prov, c"knob".as_ptr(), abi::FI_PARAM_INT, c"again".as_ptr()),
                neg(Error::Already)
            );
            assert_eq!(fabric_capi_param_define(&prov, std::ptr::null(), 0, std::ptr::null()), neg(Error::Inval));
            let mut n: c_int = 0;
            let name = c"knob".as_ptr();
            let pp = &mut prov as *mut fi_provider;
            assert_eq!(fi_param_get(pp, name, (&mut n as *mut c_int).cast()), neg(Error::NoData));
            std::env::set_var("FI_UNITPROV_KNOB", "0x10");
            assert_eq!(fi_param_get(pp, name, (&mut n as *mut c_int).cast()), 0);
            assert_eq!(n, 16);
            assert_eq!(fi_param_get(pp, c"nope".as_ptr(), (&mut n as *mut c_int).cast()), neg(Error::NoEnt));
            assert_eq!(fi_param_get(pp, name, std::ptr::null_mut()), neg(Error::Inval));
            let mut list: *mut fi_param = std::ptr::null_mut();
            let mut count: c_int = 0;
            assert_eq!(fi_getparams(&mut list, &mut count), 0);
            let entries = std::slice::from_raw_parts(list, count as usize + 1);
            let names: Vec<String> = entries[..count as usize].iter().map(|e| c_str(e.name).unwrap()).collect();
            assert_eq!(names[0], "FI_PROVIDER");
            let mine = entries.iter().find(|e| c_str(e.name).as_deref() == Some("FI_UNITPROV_KNOB")).unwrap();
            assert_eq!(c_str(mine.value).as_deref(), Some("0x10"));
            assert_eq!(c_str(mine.help_string).as_deref(), Some("unitprov: a knob"));
            assert!(entries[count as usize].name.is_null());
            fi_freeparams(list);
            assert_eq!(fi_getparams(std::ptr::null_mut(), &mut count), neg(Error::Inval));
        }
    }

    #[test]
    fn log_levels_are_libfabrics() {
        assert_eq!(level_from_c(1), Some(Level::Trace));
        assert_eq!(level_from_c(2), Some(Level::Info));
        assert_eq!(level_from_c(9), None);
        assert_eq!(subsys_name(4), "ep_data");
        // SAFETY: NULL provider and message are accepted.
        unsafe { fabric_capi_log(std::ptr::null(), 0, 0, std::ptr::null()) };
    }

    /// An all-zero `fi_provider` (NULL name and entry points).
    fn unsafe_zeroed() -> fi_provider {
        // SAFETY: fi_provider is plain data: integers, pointers and Options of
        // function pointers, for which all-zero is NULL/None.
        unsafe { std::mem::zeroed() }
    }
}

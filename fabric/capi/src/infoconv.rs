//! The `fi_info` conversions the object constructors use: `info`'s, plus the
//! connection request a `handle` may carry (`ep_cm`).

use crate::abi;
use fabric_core::{Error, Info, Result};

/// The Rust entry of a C `fi_info` given to `fi_domain`, `fi_endpoint` or
/// `fi_passive_ep`; `Err(Inval)` for NULL.
///
/// # Safety
/// `c` is NULL or a valid `fi_info` (see `info::info_from_c`); its `handle` is
/// NULL or a live fid.
pub(crate) unsafe fn from_c(c: *const abi::fi_info) -> Result<Info> {
    // SAFETY: NULL or valid, per the caller.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return Err(Error::Inval);
    };
    // SAFETY: as the caller guarantees.
    let mut info = unsafe { crate::info::info_from_c(c) }?;
    if !c.handle.is_null() {
        // SAFETY: a live fid, class-checked.
        info.handle = Some(unsafe { crate::ep_cm::handle_of(c.handle) }.ok_or(Error::Inval)?);
    }
    Ok(info)
}

/// A new C `fi_info` for `info` (freed by the caller with `fi_freeinfo`).
pub(crate) fn to_c(info: &Info) -> Result<*mut abi::fi_info> {
    let c = crate::info::info_to_c(info);
    if c.is_null() {
        return Err(Error::NoMem);
    }
    Ok(c)
}

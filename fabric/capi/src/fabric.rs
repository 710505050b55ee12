//! `fi_fabric` and the fabric object (`struct fid_fabric`): parent of domains,
//! event queues and passive endpoints.

use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::prov::{FabricOps, Provider};
use fabric_core::{Error, Hints, Info};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A fabric as C holds it.
#[repr(C)]
pub(crate) struct Fabric {
    c: abi::fid_fabric,
    /// The provider.
    pub(crate) prov: Arc<dyn Provider>,
    /// The provider's fabric.
    pub(crate) ops: Arc<dyn FabricOps>,
    /// The entry the fabric was found by.
    pub(crate) info: Info,
    /// Its open domains, event queues and passive endpoints.
    pub(crate) refs: fid::Refs,
}

// SAFETY: repr(C), first field `fid_fabric`, whose first field is `struct fid`.
unsafe impl CObject for Fabric {
    const CLASS: usize = abi::FI_CLASS_FABRIC;
}

impl fid::Parent for Fabric {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close);

static FABRIC_OPS: abi::fi_ops_fabric = abi::fi_ops_fabric {
    size: std::mem::size_of::<abi::fi_ops_fabric>(),
    domain: Some(crate::domain::fi_domain),
    passive_ep: Some(crate::ep_cm::fi_passive_ep),
    eq_open: Some(crate::eq::fi_eq_open),
    wait_open: Some(crate::wait::fi_wait_open),
    trywait: Some(trywait),
    domain2: Some(crate::domain::fi_domain2),
};

/// The provider named by a C `prov_name` (`tcp`, or a layered `tcp;ofi_rxm`).
pub(crate) fn provider(name: &str) -> Option<Arc<dyn Provider>> {
    let core = name.split(';').next().unwrap_or(name);
    fabric::providers().into_iter().find(|p| p.name() == core)
}

/// `fi_fabric` (FABRIC_1.1): open the fabric an `fi_info`'s `fabric_attr` names.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_fabric(
    attr: *mut abi::fi_fabric_attr,
    fabric: *mut *mut abi::fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard("fi_fabric", -libc::EFAULT, || {
        if attr.is_null() || fabric.is_null() {
            return EINVAL;
        }
        // SAFETY: non-NULL out-pointer from the caller.
        unsafe { *fabric = std::ptr::null_mut() };
        // SAFETY: the caller's attribute struct, non-NULL.
        let a = unsafe { &*attr };
        // SAFETY: C strings of the caller's attributes (NULL or NUL-terminated).
        let (Some(prov_name), name) = (unsafe { fid::cstr(a.prov_name) }, unsafe { fid::cstr(a.name) }) else {
            return EINVAL;
        };
        let Some(prov) = provider(prov_name) else {
            return fid::err(Error::NoData);
        };
        let mut hints = Hints::new().provider(prov.name());
        if let Some(n) = name {
            hints = hints.fabric(n);
        }
        let info = match prov.getinfo(&hints) {
            Ok(v) => match v.into_iter().find(|i| name.map_or(true, |n| i.fabric_attr.name == n)) {
                Some(i) => i,
                None => return fid::err(Error::NoData),
            },
            Err(e) => return fid::err(e),
        };
        let ops = match prov.fabric(&info) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let api_version = if a.api_version != 0 { a.api_version } else { crate::exports::API_VERSION };
        let obj = Fabric {
            c: abi::fid_fabric {
                fid: fid::fid(abi::FI_CLASS_FABRIC, context, &FID_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version,
            },
            prov,
            ops,
            info,
            refs: fid::Refs::default(),
        };
        // SAFETY: non-NULL out-pointer (checked).
        unsafe { *fabric = fid::leak(obj) as *mut abi::fid_fabric };
        0
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: `f` is the caller's fid; its class is checked.
        unsafe { fid::close_parent::<Fabric>(f) }
    })
}

/// `fi_trywait`: `0` when every listed queue, counter or wait set may be
/// waited on, `-FI_EAGAIN` when one has something to read already.
unsafe extern "C" fn trywait(fabric: *mut abi::fid_fabric, fids: *mut *mut abi::fid, count: c_int) -> c_int {
    guard("fi_trywait", EINVAL, || {
        // SAFETY: the caller's fabric, class-checked.
        if unsafe { fid::get::<Fabric>(fabric as *const c_void) }.is_none() || count < 0 {
            return EINVAL;
        }
        if count > 0 && fids.is_null() {
            return EINVAL;
        }
        for i in 0..count as usize {
            // SAFETY: `fids` holds `count` pointers.
            let f = unsafe { *fids.add(i) };
            // SAFETY: each is the caller's fid, class-checked by `trywait_fid`.
            let r = unsafe { crate::wait::trywait_fid(f) };
            if r != 0 {
                return r;
            }
        }
        0
    })
}

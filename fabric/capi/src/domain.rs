//! `fi_domain` and the domain object (`struct fid_domain`): parent of completion
//! queues, counters, address vectors, endpoints and memory regions.

use crate::fabric::Fabric;
use crate::fid::{self, CObject, EINVAL, ENOSYS};
use crate::{abi, exports::guard};
use fabric_core::prov::DomainOps;
use fabric_core::Info;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A domain as C holds it.
#[repr(C)]
pub(crate) struct Domain {
    c: abi::fid_domain,
    /// The provider's domain.
    pub(crate) ops: Arc<dyn DomainOps>,
    /// The entry it was opened with.
    pub(crate) info: Info,
    /// Its open endpoints, queues, counters, address vectors and regions.
    pub(crate) refs: fid::Refs,
    /// Its hold on the fabric.
    _fabric: fid::Hold,
}

// SAFETY: repr(C), first field `fid_domain`, whose first field is `struct fid`.
unsafe impl CObject for Domain {
    const CLASS: usize = abi::FI_CLASS_DOMAIN;
}

impl fid::Parent for Domain {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, fid::no_control);

static DOMAIN_OPS: abi::fi_ops_domain = abi::fi_ops_domain {
    size: std::mem::size_of::<abi::fi_ops_domain>(),
    av_open: Some(crate::av::fi_av_open),
    cq_open: Some(crate::cq::fi_cq_open),
    endpoint: Some(crate::ep::fi_endpoint),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(crate::cntr::fi_cntr_open),
    poll_open: Some(crate::poll::fi_poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(query_atomic),
    query_collective: Some(query_collective),
    endpoint2: Some(crate::ep::fi_endpoint2),
};

static MR_OPS: abi::fi_ops_mr = abi::fi_ops_mr {
    size: std::mem::size_of::<abi::fi_ops_mr>(),
    reg: Some(crate::mr::fi_mr_reg),
    regv: Some(crate::mr::fi_mr_regv),
    regattr: Some(crate::mr::fi_mr_regattr),
};

/// `fi_domain` (`fabric->ops->domain`).
pub(crate) unsafe extern "C" fn fi_domain(
    fabric: *mut abi::fid_fabric,
    info: *mut abi::fi_info,
    domain: *mut *mut abi::fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fi_domain2(fabric, info, domain, 0, context) }
}

/// `fi_domain2` (`fabric->ops->domain2`); no flags are defined.
pub(crate) unsafe extern "C" fn fi_domain2(
    fabric: *mut abi::fid_fabric,
    info: *mut abi::fi_info,
    domain: *mut *mut abi::fid_domain,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_domain", EINVAL, || {
        // SAFETY: the caller's out-pointer and fabric, class-checked.
        let f = match unsafe { fid::open_under::<Fabric, _>(domain, fabric as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's fi_info (NULL is refused there).
        let info = match unsafe { crate::infoconv::from_c(info) } {
            Ok(i) => i,
            Err(e) => return fid::err(e),
        };
        let ops = match f.ops.domain(&info) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let obj = Domain {
            c: abi::fid_domain {
                fid: fid::fid(abi::FI_CLASS_DOMAIN, context, &FID_OPS),
                ops: &DOMAIN_OPS as *const _ as *mut _,
                mr: &MR_OPS as *const _ as *mut _,
            },
            ops,
            info,
            refs: fid::Refs::default(),
            _fabric: f.refs.hold(),
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(domain, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        unsafe { fid::close_parent::<Domain>(f) }
    })
}

unsafe extern "C" fn scalable_ep(
    _d: *mut abi::fid_domain,
    _info: *mut abi::fi_info,
    sep: *mut *mut abi::fid_ep,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(sep, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn stx_ctx(
    _d: *mut abi::fid_domain,
    _attr: *mut abi::fi_tx_attr,
    stx: *mut *mut abi::fid_stx,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(stx, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn srx_ctx(
    _d: *mut abi::fid_domain,
    _attr: *mut abi::fi_rx_attr,
    rx: *mut *mut abi::fid_ep,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(rx, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn query_atomic(
    d: *mut abi::fid_domain,
    datatype: abi::fi_datatype,
    op: abi::fi_op,
    attr: *mut abi::fi_atomic_attr,
    flags: u64,
) -> c_int {
    guard("fi_query_atomic", EINVAL, || {
        // SAFETY: the caller's domain, class-checked.
        match unsafe { fid::get::<Domain>(d as *const c_void) } {
            Some(dom) => crate::ep_atomic::query(dom.ops.as_ref(), datatype, op, attr, flags),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn query_collective(
    _d: *mut abi::fid_domain,
    _coll: abi::fi_collective_op,
    _attr: *mut abi::fi_collective_attr,
    _flags: u64,
) -> c_int {
    ENOSYS
}

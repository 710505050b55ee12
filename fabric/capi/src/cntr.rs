//! `fi_cntr_open` and the counter (`struct fid_cntr`).

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::prov::CntrOps;
use fabric_core::wait::CntrMember;
use fabric_core::Error;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A counter as C holds it.
#[repr(C)]
pub(crate) struct Cntr {
    c: abi::fid_cntr,
    /// The provider's counter.
    pub(crate) ops: Arc<dyn CntrOps>,
    /// The endpoints bound to it.
    pub(crate) refs: fid::Refs,
    /// Its hold on the domain.
    _domain: fid::Hold,
    /// The wait set and poll sets it is in, left at close.
    pub(crate) sets: crate::wait::Memberships,
}

// SAFETY: repr(C), first field `fid_cntr`, whose first field is `struct fid`.
unsafe impl CObject for Cntr {
    const CLASS: usize = abi::FI_CLASS_CNTR;
}

impl fid::Parent for Cntr {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close);

static CNTR_OPS: abi::fi_ops_cntr = abi::fi_ops_cntr {
    size: std::mem::size_of::<abi::fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
};

/// `fi_cntr_open` (`domain->ops->cntr_open`).
pub(crate) unsafe extern "C" fn fi_cntr_open(
    domain: *mut abi::fid_domain,
    attr: *mut abi::fi_cntr_attr,
    cntr: *mut *mut abi::fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard("fi_cntr_open", EINVAL, || {
        // SAFETY: the caller's out-pointer and domain, class-checked.
        let d = match unsafe { fid::open_under::<Domain, _>(cntr, domain as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        let mut wait_set = None;
        if !attr.is_null() {
            // SAFETY: the caller's attributes, non-NULL.
            let a = unsafe { &*attr };
            if a.events != abi::FI_CNTR_EVENTS_COMP {
                return fid::err(Error::NoSys);
            }
            // SAFETY: the caller's `wait_set`, class-checked.
            wait_set = match unsafe { crate::wait::wait_set_of(a.wait_obj, a.wait_set) } {
                Ok(w) => w,
                Err(e) => return e,
            };
        }
        let ops = match d.ops.cntr_open() {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let sets = crate::wait::Memberships::new(ops.fid());
        if let Some(w) = &wait_set {
            let r = sets.join(w, Arc::new(CntrMember::new(Arc::clone(&ops))), context);
            if r != 0 {
                return r;
            }
        }
        let obj = Cntr {
            c: abi::fid_cntr {
                fid: fid::fid(abi::FI_CLASS_CNTR, context, &FID_OPS),
                ops: &CNTR_OPS as *const _ as *mut _,
            },
            ops,
            refs: fid::Refs::default(),
            _domain: d.refs.hold(),
            sets,
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(cntr, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        unsafe { fid::close_parent::<Cntr>(f) }
    })
}

/// Run `f` on the counter behind `c`, `err` if it is not one.
fn with<T>(what: &str, c: *mut abi::fid_cntr, err: T, f: impl FnOnce(&Cntr) -> T) -> T
where
    T: Copy,
{
    guard(what, err, || {
        // SAFETY: the caller's counter, class-checked.
        match unsafe { fid::get::<Cntr>(c as *const c_void) } {
            Some(k) => f(k),
            None => err,
        }
    })
}

unsafe extern "C" fn read(c: *mut abi::fid_cntr) -> u64 {
    with("fi_cntr_read", c, 0, |k| k.ops.read())
}

unsafe extern "C" fn readerr(c: *mut abi::fid_cntr) -> u64 {
    with("fi_cntr_readerr", c, 0, |k| k.ops.readerr())
}

unsafe extern "C" fn add(c: *mut abi::fid_cntr, v: u64) -> c_int {
    with("fi_cntr_add", c, EINVAL, |k| {
        k.ops.add(v);
        0
    })
}

unsafe extern "C" fn set(c: *mut abi::fid_cntr, v: u64) -> c_int {
    with("fi_cntr_set", c, EINVAL, |k| {
        k.ops.set(v);
        0
    })
}

unsafe extern "C" fn adderr(c: *mut abi::fid_cntr, v: u64) -> c_int {
    with("fi_cntr_adderr", c, EINVAL, |k| {
        k.ops.adderr(v);
        0
    })
}

unsafe extern "C" fn seterr(c: *mut abi::fid_cntr, v: u64) -> c_int {
    with("fi_cntr_seterr", c, EINVAL, |k| {
        k.ops.seterr(v);
        0
    })
}

unsafe extern "C" fn wait(c: *mut abi::fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    with("fi_cntr_wait", c, EINVAL, |k| fid::ret(k.ops.wait(threshold, fid::timeout(timeout))))
}

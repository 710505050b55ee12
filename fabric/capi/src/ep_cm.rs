//! Connection management (`struct fi_ops_cm`) of active endpoints, the passive
//! endpoint (`struct fid_pep`: `fi_passive_ep`, `fi_pep_bind`, `fi_listen`,
//! `fi_reject`), and the connection request a `FI_CONNREQ` event's `fi_info`
//! carries as its `handle` (`FI_CLASS_CONNREQ`), consumed by `fi_endpoint` +
//! `fi_accept` or by `fi_reject`.

use crate::ep::{ep, Ep};
use crate::fabric::Fabric;
use crate::fid::{self, CObject, EINVAL, ENOSYS};
use crate::{abi, addr, exports::guard};
use fabric_core::info::ConnHandle;
use fabric_core::prov::PassiveEpOps;
use fabric_core::{Error, Info};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

/// A pending connection request as C holds it (`fi_info.handle`).
#[repr(C)]
pub(crate) struct ConnReq {
    c: abi::fid,
    /// The provider's handle on the request.
    pub(crate) handle: ConnHandle,
}

// SAFETY: repr(C), first field `struct fid`.
unsafe impl CObject for ConnReq {
    const CLASS: usize = abi::FI_CLASS_CONNREQ;
}

static CONNREQ_OPS: abi::fi_ops = fid::fi_ops!(connreq_close);

unsafe extern "C" fn connreq_close(f: *mut abi::fid) -> c_int {
    // SAFETY: the caller's fid, class-checked.
    match unsafe { fid::reclaim::<ConnReq>(f) } {
        Some(_) => 0,
        None => EINVAL,
    }
}

/// The C `fi_info` of a connection request: a new `fi_info` (the caller frees
/// it with `fi_freeinfo`) whose `handle` is a connection request object. The
/// object stays until `fi_reject` consumes it or the process ends (libfabric's
/// `fi_freeinfo` does not free the handle either).
///
/// # Safety
/// None beyond Rust's: the result is handed to C.
pub(crate) unsafe fn connreq_info(info: &Info) -> fabric_core::Result<*mut abi::fi_info> {
    let Some(handle) = info.handle.clone() else {
        return Err(Error::Inval);
    };
    let c = crate::infoconv::to_c(info)?;
    let req = fid::leak(ConnReq { c: fid::fid(abi::FI_CLASS_CONNREQ, std::ptr::null_mut(), &CONNREQ_OPS), handle });
    // SAFETY: `c` is the fi_info just allocated.
    unsafe { (*c).handle = req as *mut abi::fid };
    Ok(c)
}

/// The provider's handle behind a C `fi_info.handle`, if it is a connection
/// request of this library.
///
/// # Safety
/// `h` is NULL or a live fid.
pub(crate) unsafe fn handle_of(h: *mut abi::fid) -> Option<ConnHandle> {
    // SAFETY: as the caller guarantees; class-checked.
    unsafe { fid::get::<ConnReq>(h as *const c_void) }.map(|r| r.handle.clone())
}

static EP_CM_OPS: abi::fi_ops_cm = abi::fi_ops_cm {
    size: std::mem::size_of::<abi::fi_ops_cm>(),
    setname: Some(ep_setname),
    getname: Some(ep_getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(no_listen),
    accept: Some(accept),
    reject: Some(no_reject),
    shutdown: Some(shutdown),
    join: Some(crate::mc::join),
};

/// The table for `fid_ep.cm`.
pub(crate) fn ep_cm_ops() -> *mut abi::fi_ops_cm {
    &EP_CM_OPS as *const _ as *mut _
}

unsafe extern "C" fn ep_setname(f: *mut abi::fid, a: *mut c_void, len: usize) -> c_int {
    guard("fi_setname", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's address of `len` bytes.
        match unsafe { addr::from_c(a as *const u8, len) } {
            Ok((a, _)) => fid::ret(e.ops.setname(&a)),
            Err(err) => fid::err(err),
        }
    })
}

unsafe extern "C" fn ep_getname(f: *mut abi::fid, a: *mut c_void, len: *mut usize) -> c_int {
    guard("fi_getname", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        match e.ops.getname() {
            // SAFETY: the caller's buffer and in/out length.
            Ok(n) => unsafe { addr::copy_out(&addr::to_c(&n), a as *mut u8, len) },
            Err(err) => fid::err(err),
        }
    })
}

unsafe extern "C" fn getpeer(ep_: *mut abi::fid_ep, a: *mut c_void, len: *mut usize) -> c_int {
    guard("fi_getpeer", EINVAL, || {
        // SAFETY: the caller's endpoint, class-checked.
        let Some(e) = (unsafe { ep(ep_) }) else {
            return EINVAL;
        };
        match e.ops.getpeer() {
            // SAFETY: the caller's buffer and in/out length.
            Ok(n) => unsafe { addr::copy_out(&addr::to_c(&n), a as *mut u8, len) },
            Err(err) => fid::err(err),
        }
    })
}

/// The caller's connection data.
///
/// # Safety
/// `param` is NULL or valid for `len` bytes.
unsafe fn param<'a>(param: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if param.is_null() || len > 1 << 16 {
        return None;
    }
    // SAFETY: as the caller guarantees.
    Some(unsafe { std::slice::from_raw_parts(param as *const u8, len) })
}

unsafe extern "C" fn connect(ep_: *mut abi::fid_ep, a: *const c_void, p: *const c_void, plen: usize) -> c_int {
    guard("fi_connect", EINVAL, || {
        // SAFETY: the caller's endpoint, class-checked.
        let Some(e) = (unsafe { ep(ep_) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's connection data.
        let Some(data) = (unsafe { param(p, plen) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's address.
        match unsafe { addr::from_c(a as *const u8, usize::MAX) } {
            Ok((a, _)) => fid::ret(e.ops.connect(&a, data)),
            Err(err) => fid::err(err),
        }
    })
}

unsafe extern "C" fn accept(ep_: *mut abi::fid_ep, p: *const c_void, plen: usize) -> c_int {
    guard("fi_accept", EINVAL, || {
        // SAFETY: the caller's endpoint, class-checked.
        let Some(e) = (unsafe { ep(ep_) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's connection data.
        let Some(data) = (unsafe { param(p, plen) }) else {
            return EINVAL;
        };
        fid::ret(e.ops.accept(data))
    })
}

unsafe extern "C" fn shutdown(ep_: *mut abi::fid_ep, _flags: u64) -> c_int {
    guard("fi_shutdown", EINVAL, || {
        // SAFETY: the caller's endpoint, class-checked.
        match unsafe { ep(ep_) } {
            Some(e) => fid::ret(e.ops.shutdown()),
            None => EINVAL,
        }
    })
}

/// `fi_join` on a passive endpoint: no multicast there.
unsafe extern "C" fn no_join(
    _ep: *mut abi::fid_ep,
    _addr: *const c_void,
    _flags: u64,
    mc: *mut *mut abi::fid_mc,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(mc, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn no_listen(_pep: *mut abi::fid_pep) -> c_int {
    ENOSYS
}

unsafe extern "C" fn no_reject(_pep: *mut abi::fid_pep, _h: *mut abi::fid, _p: *const c_void, _l: usize) -> c_int {
    ENOSYS
}

unsafe extern "C" fn no_connect(_ep: *mut abi::fid_ep, _a: *const c_void, _p: *const c_void, _l: usize) -> c_int {
    ENOSYS
}

unsafe extern "C" fn no_accept(_ep: *mut abi::fid_ep, _p: *const c_void, _l: usize) -> c_int {
    ENOSYS
}

unsafe extern "C" fn no_shutdown(_ep: *mut abi::fid_ep, _flags: u64) -> c_int {
    ENOSYS
}

unsafe extern "C" fn no_getpeer(_ep: *mut abi::fid_ep, _a: *mut c_void, _l: *mut usize) -> c_int {
    ENOSYS
}

// ---- passive endpoints ----

/// A passive endpoint as C holds it.
#[repr(C)]
pub(crate) struct Pep {
    c: abi::fid_pep,
    /// The provider's passive endpoint.
    pub(crate) ops: Arc<dyn PassiveEpOps>,
    /// The object map of the bound event queue.
    eq_fids: Mutex<Option<Arc<crate::eq::Fids>>>,
    /// Its hold on the bound event queue.
    bound_eq: Mutex<Option<fid::Hold>>,
    /// Its hold on the fabric.
    _fabric: fid::Hold,
}

// SAFETY: repr(C), first field `fid_pep`, whose first field is `struct fid`.
unsafe impl CObject for Pep {
    const CLASS: usize = abi::FI_CLASS_PEP;
}

static PEP_FID_OPS: abi::fi_ops = fid::fi_ops!(pep_close, pep_bind, pep_control);

static PEP_OPS: abi::fi_ops_ep = abi::fi_ops_ep {
    size: std::mem::size_of::<abi::fi_ops_ep>(),
    cancel: Some(pep_cancel),
    getopt: Some(pep_getopt),
    setopt: Some(pep_setopt),
    tx_ctx: Some(pep_tx_ctx),
    rx_ctx: Some(pep_rx_ctx),
    rx_size_left: Some(pep_size_left),
    tx_size_left: Some(pep_size_left),
};

static PEP_CM_OPS: abi::fi_ops_cm = abi::fi_ops_cm {
    size: std::mem::size_of::<abi::fi_ops_cm>(),
    setname: Some(pep_setname),
    getname: Some(pep_getname),
    getpeer: Some(no_getpeer),
    connect: Some(no_connect),
    listen: Some(listen),
    accept: Some(no_accept),
    reject: Some(reject),
    shutdown: Some(no_shutdown),
    join: Some(no_join),
};

/// `fi_passive_ep` (`fabric->ops->passive_ep`).
pub(crate) unsafe extern "C" fn fi_passive_ep(
    fabric: *mut abi::fid_fabric,
    info: *mut abi::fi_info,
    pep: *mut *mut abi::fid_pep,
    context: *mut c_void,
) -> c_int {
    guard("fi_passive_ep", EINVAL, || {
        // SAFETY: the caller's out-pointer and fabric, class-checked.
        let f = match unsafe { fid::open_under::<Fabric, _>(pep, fabric as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's fi_info (NULL refused there).
        let info = match unsafe { crate::infoconv::from_c(info) } {
            Ok(i) => i,
            Err(e) => return fid::err(e),
        };
        let ops = match f.ops.passive_ep(&info) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let obj = Pep {
            c: abi::fid_pep {
                fid: fid::fid(abi::FI_CLASS_PEP, context, &PEP_FID_OPS),
                ops: &PEP_OPS as *const _ as *mut _,
                cm: &PEP_CM_OPS as *const _ as *mut _,
            },
            ops,
            eq_fids: Mutex::new(None),
            bound_eq: Mutex::new(None),
            _fabric: f.refs.hold(),
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(pep, obj) }
    })
}

unsafe extern "C" fn pep_close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(p) = (unsafe { fid::get::<Pep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if let Err(e) = p.ops.close() {
            return fid::err(e);
        }
        if let Some(fids) = p.eq_fids.lock().unwrap_or_else(|e| e.into_inner()).take() {
            fids.remove(p.ops.fid());
        }
        // SAFETY: checked above.
        drop(unsafe { fid::reclaim::<Pep>(f) });
        0
    })
}

unsafe extern "C" fn pep_bind(f: *mut abi::fid, bfid: *mut abi::fid, _flags: u64) -> c_int {
    guard("fi_pep_bind", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(p) = (unsafe { fid::get::<Pep>(f as *const c_void) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's fid to bind, class-checked.
        let Some(eq) = (unsafe { fid::get::<crate::eq::Eq>(bfid as *const c_void) }) else {
            return EINVAL;
        };
        if let Err(e) = p.ops.bind_eq(&eq.ops) {
            return fid::err(e);
        }
        eq.fids.add(p.ops.fid(), f);
        *p.eq_fids.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&eq.fids));
        *p.bound_eq.lock().unwrap_or_else(|e| e.into_inner()) = Some(eq.refs.hold());
        0
    })
}

/// `fi_control` on a passive endpoint: `FI_BACKLOG` is accepted (the provider
/// sizes its own backlog).
unsafe extern "C" fn pep_control(f: *mut abi::fid, command: c_int, _arg: *mut c_void) -> c_int {
    // SAFETY: the caller's fid, class-checked.
    if unsafe { fid::get::<Pep>(f as *const c_void) }.is_none() {
        return EINVAL;
    }
    match command {
        abi::FI_BACKLOG => 0,
        _ => ENOSYS,
    }
}

unsafe extern "C" fn pep_setname(f: *mut abi::fid, a: *mut c_void, len: usize) -> c_int {
    guard("fi_setname", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(p) = (unsafe { fid::get::<Pep>(f as *const c_void) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's address of `len` bytes.
        match unsafe { addr::from_c(a as *const u8, len) } {
            Ok((a, _)) => fid::ret(p.ops.setname(&a)),
            Err(e) => fid::err(e),
        }
    })
}

unsafe extern "C" fn pep_getname(f: *mut abi::fid, a: *mut c_void, len: *mut usize) -> c_int {
    guard("fi_getname", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(p) = (unsafe { fid::get::<Pep>(f as *const c_void) }) else {
            return EINVAL;
        };
        match p.ops.getname() {
            // SAFETY: the caller's buffer and in/out length.
            Ok(n) => unsafe { addr::copy_out(&addr::to_c(&n), a as *mut u8, len) },
            Err(e) => fid::err(e),
        }
    })
}

unsafe extern "C" fn listen(pep: *mut abi::fid_pep) -> c_int {
    guard("fi_listen", EINVAL, || {
        // SAFETY: the caller's passive endpoint, class-checked.
        match unsafe { fid::get::<Pep>(pep as *const c_void) } {
            Some(p) => fid::ret(p.ops.listen()),
            None => EINVAL,
        }
    })
}

unsafe extern "C" fn reject(pep: *mut abi::fid_pep, h: *mut abi::fid, p: *const c_void, plen: usize) -> c_int {
    guard("fi_reject", EINVAL, || {
        // SAFETY: the caller's passive endpoint, class-checked.
        let Some(pe) = (unsafe { fid::get::<Pep>(pep as *const c_void) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's connection data.
        let Some(data) = (unsafe { param(p, plen) }) else {
            return EINVAL;
        };
        // SAFETY: the caller's handle, class-checked.
        let Some(req) = (unsafe { fid::reclaim::<ConnReq>(h) }) else {
            return EINVAL;
        };
        fid::ret(pe.ops.reject(&req.handle, data))
    })
}

unsafe extern "C" fn pep_cancel(_f: *mut abi::fid, _context: *mut c_void) -> isize {
    ENOSYS as isize
}

unsafe extern "C" fn pep_getopt(
    f: *mut abi::fid,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    guard("fi_getopt", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(p) = (unsafe { fid::get::<Pep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if level != abi::FI_OPT_ENDPOINT || val.is_null() || len.is_null() {
            return EINVAL;
        }
        if name != abi::FI_OPT_CM_DATA_SIZE {
            return fid::err(Error::NoProtoOpt);
        }
        // SAFETY: the caller's in/out length, non-NULL.
        if unsafe { *len } < std::mem::size_of::<usize>() {
            return fid::err(Error::TooSmall);
        }
        // SAFETY: room for a size_t (checked).
        unsafe {
            (val as *mut usize).write_unaligned(p.ops.cm_data_size());
            *len = std::mem::size_of::<usize>();
        }
        0
    })
}

unsafe extern "C" fn pep_setopt(
    _f: *mut abi::fid,
    _level: c_int,
    _name: c_int,
    _val: *const c_void,
    _len: usize,
) -> c_int {
    fid::err(Error::NoProtoOpt)
}

unsafe extern "C" fn pep_tx_ctx(
    _sep: *mut abi::fid_ep,
    _index: c_int,
    _attr: *mut abi::fi_tx_attr,
    tx: *mut *mut abi::fid_ep,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(tx, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn pep_rx_ctx(
    _sep: *mut abi::fid_ep,
    _index: c_int,
    _attr: *mut abi::fi_rx_attr,
    rx: *mut *mut abi::fid_ep,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(rx, std::ptr::null_mut()) };
    ENOSYS
}

unsafe extern "C" fn pep_size_left(_ep: *mut abi::fid_ep) -> isize {
    ENOSYS as isize
}

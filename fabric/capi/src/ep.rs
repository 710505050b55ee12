//! `fi_endpoint` and the active endpoint (`struct fid_ep`): binding, enabling,
//! options and cancel here; the data-transfer tables in `ep_msg` and
//! `ep_tagged`, connection management in `ep_cm`.

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL, ENOSYS};
use crate::{abi, exports::guard};
use fabric_core::prov::{DomainOps, EndpointOps, EqOps};
use fabric_core::{BindFlags, Caps, EpType, Error, Mode, OpFlags};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// An active endpoint as C holds it.
#[repr(C)]
pub(crate) struct Ep {
    c: abi::fid_ep,
    /// The provider's endpoint.
    pub(crate) ops: Arc<dyn EndpointOps>,
    /// `ops` as a plain pointer, for the data-transfer calls: calling through
    /// it skips locating the object inside the `Arc`'s allocation on every call.
    prov: *const dyn EndpointOps,
    /// The provider's domain (atomic queries).
    pub(crate) domain: Arc<dyn DomainOps>,
    /// Flags every transmit operation is posted with (`FI_COMPLETION` unless the
    /// transmit queue was bound with `FI_SELECTIVE_COMPLETION`, then the
    /// `tx_attr.op_flags` default; and `FI_DELIVERY_COMPLETE` if the
    /// `tx_attr.op_flags` have it).
    tx_flags: AtomicU64,
    /// The same for receives.
    rx_flags: AtomicU64,
    /// Flags a `*msg` call adds to the caller's: `FI_COMPLETION` unless selective.
    tx_msg_flags: AtomicU64,
    /// The same for receives.
    rx_msg_flags: AtomicU64,
    /// The most iovec entries a transmit takes.
    pub(crate) tx_iov_limit: usize,
    /// The most iovec entries a receive takes.
    pub(crate) rx_iov_limit: usize,
    /// `FI_COMPLETION` if the entry's `tx_attr.op_flags` has it: what a transmit
    /// without flags of its own gets on a selective-completion queue (with
    /// [`TX_STICKY`] flags of the `tx_attr.op_flags`: `FI_MULTICAST`,
    /// `FI_DELIVERY_COMPLETE`).
    tx_default: OpFlags,
    /// The same from `rx_attr.op_flags`.
    rx_default: OpFlags,
    /// The most bytes an inject takes.
    pub(crate) inject_size: usize,
    /// Whether receives honour their source address (`FI_DIRECTED_RECV`); without
    /// it libfabric ignores the address a receive is posted with.
    pub(crate) directed: bool,
    /// The last `FI_OPT_MIN_MULTI_RECV` the provider accepted (0, the
    /// providers' default, until set), for `fi_getopt`.
    min_multi_recv: AtomicUsize,
    /// The bound event queue: its ops, for the events of calls on the endpoint
    /// itself (`FI_JOIN_COMPLETE`), and its object map, to forget this endpoint
    /// at close.
    eq: Mutex<Option<BoundEq>>,
    /// Its holds on the queues, counters and address vector bound to it.
    bound: Mutex<Vec<fid::Hold>>,
    /// Its hold on the domain.
    _domain: fid::Hold,
}

/// An event queue bound to an endpoint: its ops and its object map.
type BoundEq = (Arc<dyn EqOps>, Arc<crate::eq::Fids>);

// SAFETY: repr(C), first field `fid_ep`, whose first field is `struct fid`.
unsafe impl CObject for Ep {
    const CLASS: usize = abi::FI_CLASS_EP;
}

impl Ep {
    /// The provider's endpoint.
    #[inline(always)]
    pub(crate) fn prov(&self) -> &dyn EndpointOps {
        // SAFETY: `prov` points at the object `self.ops` owns, which lives as
        // long as `self`.
        unsafe { &*self.prov }
    }

    /// The bound event queue, if any.
    pub(crate) fn eq(&self) -> Option<Arc<dyn EqOps>> {
        self.eq.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(ops, _)| Arc::clone(ops))
    }

    /// Flags for a transmit operation without its own (`fi_send`, `fi_tsend`...).
    #[inline(always)]
    pub(crate) fn tx_flags(&self) -> OpFlags {
        OpFlags::from_bits_retain(self.tx_flags.load(Ordering::Relaxed))
    }

    /// Flags for a receive operation without its own.
    #[inline(always)]
    pub(crate) fn rx_flags(&self) -> OpFlags {
        OpFlags::from_bits_retain(self.rx_flags.load(Ordering::Relaxed))
    }

    /// The caller's flags of a `*msg` transmit, as posted.
    pub(crate) fn tx_msg(&self, flags: u64) -> OpFlags {
        OpFlags::from_bits_truncate(flags) | OpFlags::from_bits_retain(self.tx_msg_flags.load(Ordering::Relaxed))
    }

    /// Keep `refs`' object open while this endpoint is (it was bound).
    fn hold(&self, refs: &fid::Refs) {
        self.bound.lock().unwrap_or_else(|p| p.into_inner()).push(refs.hold());
    }

    /// The caller's flags of a `*msg` receive, as posted.
    pub(crate) fn rx_msg(&self, flags: u64) -> OpFlags {
        OpFlags::from_bits_truncate(flags) | OpFlags::from_bits_retain(self.rx_msg_flags.load(Ordering::Relaxed))
    }
}

/// The `tx_attr.op_flags` a transmit without flags of its own is posted with
/// whatever the binding (fi_endpoint(3): the default flags of data transfers):
/// delivery complete, and multicast (every destination then names a group).
const TX_STICKY: OpFlags = OpFlags::DELIVERY_COMPLETE.union(OpFlags::MULTICAST);

/// The endpoint behind a `struct fid_ep *`.
///
/// # Safety
/// `ep` is NULL or a live fid.
#[inline(always)]
pub(crate) unsafe fn ep<'a>(ep: *mut abi::fid_ep) -> Option<&'a Ep> {
    // SAFETY: as the caller guarantees; class-checked.
    unsafe { fid::get::<Ep>(ep as *const c_void) }
}

/// Run `f` on the endpoint behind `ep_` under [`guard`](crate::exports::guard):
/// `err` for NULL, another class, or a panic.
///
/// # Safety
/// `ep_` is NULL or a live fid.
#[inline(always)]
pub(crate) unsafe fn with_ep<T: Copy>(what: &str, ep_: *mut abi::fid_ep, err: T, f: impl FnOnce(&Ep) -> T) -> T {
    crate::exports::guard(what, err, || {
        // SAFETY: the caller's endpoint, class-checked.
        match unsafe { ep(ep_) } {
            Some(e) => f(e),
            None => err,
        }
    })
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, bind, control);

static EP_OPS: abi::fi_ops_ep = abi::fi_ops_ep {
    size: std::mem::size_of::<abi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(size_left),
    tx_size_left: Some(size_left),
};

/// `fi_endpoint` (`domain->ops->endpoint`).
pub(crate) unsafe extern "C" fn fi_endpoint(
    domain: *mut abi::fid_domain,
    info: *mut abi::fi_info,
    ep: *mut *mut abi::fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fi_endpoint2(domain, info, ep, 0, context) }
}

/// `fi_endpoint2`; no flags are defined.
pub(crate) unsafe extern "C" fn fi_endpoint2(
    domain: *mut abi::fid_domain,
    info: *mut abi::fi_info,
    ep: *mut *mut abi::fid_ep,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    guard("fi_endpoint", EINVAL, || {
        // SAFETY: the caller's out-pointer and domain, class-checked.
        let d = match unsafe { fid::open_under::<Domain, _>(ep, domain as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's fi_info (NULL refused there).
        let info = match unsafe { crate::infoconv::from_c(info) } {
            Ok(i) => i,
            Err(e) => return fid::err(e),
        };
        let ops = match d.ops.endpoint(&info) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        // libfabric's rule for the remote CQ data of RMA writes: a completion of
        // its own, no receive consumed, unless the application runs in
        // FI_RX_CQ_DATA mode. Endpoints without RMA answer FI_EOPNOTSUPP.
        let _ = ops.set_rx_cq_data(info.mode.contains(Mode::RX_CQ_DATA));
        let ep_type = info.ep_attr.ep_type;
        let obj = Ep {
            c: abi::fid_ep {
                fid: fid::fid(abi::FI_CLASS_EP, context, &FID_OPS),
                ops: &EP_OPS as *const _ as *mut _,
                cm: crate::ep_cm::ep_cm_ops(),
                msg: crate::ep_msg::ops(),
                rma: crate::ep_rma::ops(),
                tagged: crate::ep_tagged::ops(),
                atomic: crate::ep_atomic::ops(),
                collective: std::ptr::null_mut(),
            },
            prov: Arc::as_ptr(&ops),
            ops,
            domain: Arc::clone(&d.ops),
            tx_flags: AtomicU64::new((OpFlags::COMPLETION | (info.tx_attr.op_flags & TX_STICKY)).bits()),
            rx_flags: AtomicU64::new(OpFlags::COMPLETION.bits()),
            tx_msg_flags: AtomicU64::new(OpFlags::COMPLETION.bits()),
            rx_msg_flags: AtomicU64::new(OpFlags::COMPLETION.bits()),
            tx_iov_limit: info.tx_attr.iov_limit.max(1),
            rx_iov_limit: info.rx_attr.iov_limit.max(1),
            tx_default: info.tx_attr.op_flags & (OpFlags::COMPLETION | TX_STICKY),
            rx_default: info.rx_attr.op_flags & OpFlags::COMPLETION,
            inject_size: if ep_type == EpType::Unspec { 0 } else { info.tx_attr.inject_size },
            directed: info.caps.contains(Caps::DIRECTED_RECV) || info.rx_attr.caps.contains(Caps::DIRECTED_RECV),
            min_multi_recv: AtomicUsize::new(0),
            eq: Mutex::new(None),
            bound: Mutex::new(Vec::new()),
            _domain: d.refs.hold(),
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(ep, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if let Err(err) = e.ops.close() {
            return fid::err(err);
        }
        if let Some((_, fids)) = e.eq.lock().unwrap_or_else(|p| p.into_inner()).take() {
            fids.remove(e.ops.fid());
        }
        // SAFETY: checked above; the provider has let go of every buffer.
        drop(unsafe { fid::reclaim::<Ep>(f) });
        0
    })
}

/// `fi_ep_bind`: a completion queue (`FI_TRANSMIT`, `FI_RECV`,
/// `FI_SELECTIVE_COMPLETION`), an address vector, an event queue or a counter.
unsafe extern "C" fn bind(f: *mut abi::fid, bfid: *mut abi::fid, flags: u64) -> c_int {
    guard("fi_ep_bind", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if bfid.is_null() {
            return EINVAL;
        }
        let b = BindFlags::from_bits_truncate(flags);
        // SAFETY: the caller's fid to bind; readable when non-NULL.
        let class = unsafe { (*bfid).fclass };
        let bv = bfid as *const c_void;
        match class {
            abi::FI_CLASS_CQ => {
                // SAFETY: class-checked.
                let Some(cq) = (unsafe { fid::get::<crate::cq::Cq>(bv) }) else { return EINVAL };
                if let Err(err) = e.ops.bind_cq(&cq.ops, b) {
                    return fid::err(err);
                }
                e.hold(&cq.refs);
                let sel = b.contains(BindFlags::SELECTIVE_COMPLETION);
                let always = if sel { 0 } else { OpFlags::COMPLETION.bits() };
                if b.contains(BindFlags::TRANSMIT) {
                    e.tx_msg_flags.store(always, Ordering::Relaxed);
                    if sel {
                        e.tx_flags.store(e.tx_default.bits(), Ordering::Relaxed);
                    }
                }
                if b.contains(BindFlags::RECV) {
                    e.rx_msg_flags.store(always, Ordering::Relaxed);
                    if sel {
                        e.rx_flags.store(e.rx_default.bits(), Ordering::Relaxed);
                    }
                }
                0
            }
            abi::FI_CLASS_AV => {
                // SAFETY: class-checked.
                let Some(av) = (unsafe { fid::get::<crate::av::Av>(bv) }) else { return EINVAL };
                if let Err(err) = e.ops.bind_av(&av.ops) {
                    return fid::err(err);
                }
                e.hold(&av.refs);
                0
            }
            abi::FI_CLASS_EQ => {
                // SAFETY: class-checked.
                let Some(eq) = (unsafe { fid::get::<crate::eq::Eq>(bv) }) else { return EINVAL };
                if let Err(err) = e.ops.bind_eq(&eq.ops) {
                    return fid::err(err);
                }
                e.hold(&eq.refs);
                eq.fids.add(e.ops.fid(), f);
                *e.eq.lock().unwrap_or_else(|p| p.into_inner()) = Some((Arc::clone(&eq.ops), Arc::clone(&eq.fids)));
                0
            }
            abi::FI_CLASS_CNTR => {
                // SAFETY: class-checked.
                let Some(c) = (unsafe { fid::get::<crate::cntr::Cntr>(bv) }) else { return EINVAL };
                if let Err(err) = e.ops.bind_cntr(&c.ops, b) {
                    return fid::err(err);
                }
                e.hold(&c.refs);
                0
            }
            _ => EINVAL,
        }
    })
}

/// `fi_control`: `FI_ENABLE`.
unsafe extern "C" fn control(f: *mut abi::fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard("fi_control", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        match command {
            abi::FI_ENABLE => fid::ret(e.ops.enable()),
            _ => ENOSYS,
        }
    })
}

/// `fi_cancel`: the operations posted with `context` complete with
/// `FI_ECANCELED`.
unsafe extern "C" fn cancel(f: *mut abi::fid, context: *mut c_void) -> isize {
    guard("fi_cancel", EINVAL as isize, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL as isize;
        };
        fid::sret(e.ops.cancel(context as u64))
    })
}

unsafe extern "C" fn getopt(
    f: *mut abi::fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    guard("fi_getopt", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if level != abi::FI_OPT_ENDPOINT || optval.is_null() || optlen.is_null() {
            return EINVAL;
        }
        let value = match optname {
            abi::FI_OPT_CM_DATA_SIZE => e.ops.cm_data_size(),
            abi::FI_OPT_MIN_MULTI_RECV => e.min_multi_recv.load(Ordering::Relaxed),
            _ => return fid::err(Error::NoProtoOpt),
        };
        // SAFETY: the caller's in/out length, non-NULL.
        if unsafe { *optlen } < std::mem::size_of::<usize>() {
            return fid::err(Error::TooSmall);
        }
        // SAFETY: room for a size_t (checked).
        unsafe {
            (optval as *mut usize).write_unaligned(value);
            *optlen = std::mem::size_of::<usize>();
        }
        0
    })
}

unsafe extern "C" fn setopt(
    f: *mut abi::fid,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    guard("fi_setopt", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(e) = (unsafe { fid::get::<Ep>(f as *const c_void) }) else {
            return EINVAL;
        };
        if level != abi::FI_OPT_ENDPOINT || optval.is_null() {
            return EINVAL;
        }
        match optname {
            abi::FI_OPT_MIN_MULTI_RECV if optlen >= std::mem::size_of::<usize>() => {
                // SAFETY: a size_t at `optval` (length checked).
                let v = unsafe { (optval as *const usize).read_unaligned() };
                if let Err(err) = e.ops.set_min_multi_recv(v) {
                    return fid::err(err);
                }
                e.min_multi_recv.store(v, Ordering::Relaxed);
                0
            }
            abi::FI_OPT_MIN_MULTI_RECV => EINVAL,
            _ => fid::err(Error::NoProtoOpt),
        }
    })
}

unsafe extern "C" fn tx_ctx(
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

unsafe extern "C" fn rx_ctx(
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

/// `fi_rx_size_left`, `fi_tx_size_left`: `-FI_ENOSYS`, as libfabric 1.17's
/// rxm and shm answer (no provider here counts its free slots); `-FI_EINVAL`
/// for a fid that is not an endpoint.
unsafe extern "C" fn size_left(ep_: *mut abi::fid_ep) -> isize {
    // SAFETY: the caller's endpoint.
    unsafe { with_ep("fi_size_left", ep_, EINVAL as isize, |_| ENOSYS as isize) }
}

//! The verbs domain (one device port): the protection domain, memory registration
//! (`ibv_reg_mr`), completion queues, counters, address vectors and endpoints.
//!
//! The domain's device context is librdmacm's (`rdma_get_devices`), because the
//! connection identifiers librdmacm creates use it: their QPs must share the
//! domain's protection domain and completion queues.

use crate::attr::{self, Port};
use crate::fabric::VerbsFabric;
use crate::ibv::{self, CmDevices, Context, Pd};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{AvOps, CntrOps, CqOps, DomainOps, EndpointOps, MrOps};
use fabric_core::Progress as ProgressModel;
use fabric_core::{fi_log, AvAttr, CqAttr, EpType, Error, Info, MrAccess, MrMode, Result};
use fabric_util::domain::DomainObjects;
use fabric_util::mr::UtilMr;
use fabric_util::progress::{AutoProgress, Progress};
use rdma_sys as sys;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A verbs domain.
pub(crate) struct VerbsDomain {
    fid: u64,
    info: Info,
    fabric: Arc<VerbsFabric>,
    /// The port, as discovered.
    pub(crate) port: Port,
    /// Its queues, counters, AVs, and the registry of its regions under their
    /// remote keys (for emulated atomics, which the target applies itself).
    pub(crate) objs: DomainObjects,
    /// Regions registered by the application, for finding the local key of a
    /// buffer an operation names. Weak: a region closes when the application
    /// drops it (its entry goes at the next registration).
    regions: Mutex<Vec<RegionRef>>,
    /// With `FI_PROGRESS_AUTO`: the progress thread.
    auto: Option<AutoProgress>,
    /// Asynchronous events read from the device and not yet taken by the
    /// endpoint whose QP they concern: (event type, QP number).
    async_events: Mutex<Vec<(u32, u32)>>,
    // Drop order: the PD before the context, the context before librdmacm's list.
    pub(crate) pd: Pd,
    pub(crate) ctx: Context,
    _devs: CmDevices,
    me: Weak<VerbsDomain>,
}

impl VerbsDomain {
    pub(crate) fn new(fabric: Arc<VerbsFabric>, info: &Info) -> Result<Arc<VerbsDomain>> {
        let port = attr::port_of(info)?;
        let devs = CmDevices::get().map_err(|e| {
            fi_log!(Level::Warn, NAME, "domain", "rdma_get_devices failed: {e}");
            Error::NoDev
        })?;
        let ctx = devs.find(&port.dev).ok_or_else(|| {
            fi_log!(Level::Warn, NAME, "domain", "librdmacm does not know device {}", port.dev);
            Error::NoDev
        })?;
        let pd = Pd::new(&ctx).map_err(|e| {
            fi_log!(Level::Warn, NAME, "domain", "ibv_alloc_pd on {} failed: {e}", port.dev);
            Error::from(e)
        })?;
        if let Err(e) = ctx.async_fd() {
            fi_log!(Level::Warn, NAME, "domain", "cannot poll {}'s asynchronous events: {e}", port.dev);
        }
        let auto = match info.domain_attr.data_progress {
            ProgressModel::Auto => Some(AutoProgress::start("fabric-verbs-progress")?),
            _ => None,
        };
        Ok(Arc::new_cyclic(|me| VerbsDomain {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            port,
            // Keys are the device's remote keys: the registry takes them as given.
            objs: DomainObjects::new(NAME, MrMode::VIRT_ADDR, crate::ep::is_verbs_addr),
            regions: Mutex::new(Vec::new()),
            auto,
            async_events: Mutex::new(Vec::new()),
            pd,
            ctx,
            _devs: devs,
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<VerbsFabric> {
        &self.fabric
    }

    /// Have the domain's progress thread (`FI_PROGRESS_AUTO`) drive `ep`.
    pub(crate) fn bind_auto_progress(&self, ep: Weak<dyn Progress>) -> Result<()> {
        match &self.auto {
            Some(a) => a.bind(ep),
            None => Ok(()),
        }
    }

    /// The application's region covering `base..base+len`, if any is open,
    /// and one a peer may read when `remote_read`.
    /// The bounds are compared in the list itself; only a region that covers
    /// the buffer is looked at (kept alive and asked whether it is open).
    pub(crate) fn find_region(&self, base: *const u8, len: usize, remote_read: bool) -> Option<Arc<VerbsMr>> {
        let (lo, hi) = (base as usize, (base as usize).checked_add(len)?);
        let g = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .filter(|e| e.lo <= lo && hi <= e.hi && (e.remote_read || !remote_read))
            .find_map(|e| e.mr.upgrade().filter(|r| r.is_open()))
    }

    /// Asynchronous events about QP `qpn`, taken from the device's queue (and
    /// device-wide events, logged).
    pub(crate) fn take_async(&self, qpns: &dyn Fn(u32) -> bool) -> Vec<(u32, u32)> {
        let mut g = self.async_events.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((t, qpn)) = self.ctx.async_event() {
            if qpn == 0 {
                let (name, failure) = ibv::async_event_str(t);
                let level = if failure { Level::Warn } else { Level::Info };
                fi_log!(level, NAME, "domain", "{}: {name} ({t})", self.port.dev);
            } else {
                g.push((t, qpn));
            }
        }
        let mut mine = Vec::new();
        g.retain(|&(t, q)| {
            if qpns(q) {
                mine.push((t, q));
                false
            } else {
                true
            }
        });
        // Events about QPs nobody claims (closed meanwhile) are not kept forever.
        if g.len() > 1024 {
            g.drain(..512);
        }
        mine
    }
}

/// An entry of the domain's list of regions: a region's bounds and access, and the
/// region.
struct RegionRef {
    /// The region's first byte's address.
    lo: usize,
    /// One past its last byte's.
    hi: usize,
    /// Whether a peer may read it ([`VerbsMr`]'s `remote_read`).
    remote_read: bool,
    /// The region (dead once the application has dropped it).
    mr: Weak<VerbsMr>,
}

/// A region registered with the device (`ibv_reg_mr`), also known to the domain's
/// registry under its remote key.
pub(crate) struct VerbsMr {
    base: usize,
    len: usize,
    /// Registered with `IBV_ACCESS_REMOTE_READ` (a peer may read it: the
    /// pieces of a rendezvous send are announced with its key).
    remote_read: bool,
    mr: Mutex<Option<ibv::Mr>>,
    lkey: u32,
    rkey: u32,
    util: Arc<UtilMr>,
    open: AtomicBool,
}

impl VerbsMr {
    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

/// `IBV_ACCESS_*` flags for libfabric's access bits. Local write is always
/// granted (receives and reads land in any region the provider finds), and a
/// region for sending may be read by the peer (large messages are read by the
/// receiver, as libfabric's rxm does).
pub(crate) fn ibv_access(a: MrAccess) -> u32 {
    let mut f = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    if a.intersects(MrAccess::REMOTE_WRITE) {
        f |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 | sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
    }
    if a.intersects(MrAccess::REMOTE_READ | MrAccess::SEND) {
        f |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    f
}

impl MrOps for VerbsMr {
    fn key(&self) -> u64 {
        self.rkey as u64
    }

    fn desc(&self) -> u64 {
        self.lkey as u64
    }

    fn refresh(&self) -> Result<()> {
        Ok(())
    }

    fn close(&self) -> Result<()> {
        self.open.store(false, Ordering::Release);
        let _ = self.util.close();
        self.mr.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }
}

impl DomainOps for VerbsDomain {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn info(&self) -> &Info {
        &self.info
    }

    fn cq_open(&self, attr: &CqAttr) -> Result<Arc<dyn CqOps>> {
        self.objs.cq_open(attr)
    }

    fn cntr_open(&self) -> Result<Arc<dyn CntrOps>> {
        self.objs.cntr_open()
    }

    fn av_open(&self, attr: &AvAttr) -> Result<Arc<dyn AvOps>> {
        self.objs.av_open(attr)
    }

    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let me = self.me.upgrade().expect("a domain method runs while the domain lives");
        match info.ep_attr.ep_type {
            EpType::Msg | EpType::Rdm => crate::ep::new_ep(me, info),
            t => {
                fi_log!(Level::Warn, NAME, "domain", "{t} endpoints are not offered by verbs");
                Err(Error::Inval)
            }
        }
    }

    fn atomic_valid(
        &self,
        op: fabric_core::AtomicOp,
        dt: fabric_core::Datatype,
        kind: fabric_core::AtomicKind,
    ) -> Result<usize> {
        fabric_util::atomic::valid(op, dt, kind)
    }

    unsafe fn mr_reg(
        &self,
        base: *mut u8,
        len: usize,
        access: MrAccess,
        _requested_key: u64,
    ) -> Result<Arc<dyn MrOps>> {
        if base.is_null() && len > 0 {
            return Err(Error::Inval);
        }
        let flags = ibv_access(access);
        // SAFETY: the caller keeps the memory allocated while registered (mr_reg's
        // contract), which is ibv::Mr::new's.
        let mr = unsafe { ibv::Mr::new(&self.pd, base, len, flags) }.map_err(|e| {
            fi_log!(Level::Warn, NAME, "mr", "ibv_reg_mr of {len} bytes failed: {e}");
            Error::from(e)
        })?;
        let (lkey, rkey) = (mr.lkey(), mr.rkey());
        // SAFETY: as above: the same memory, under the same contract.
        let util = unsafe { self.objs.mrs().register(base, len, access, rkey as u64)? };
        let r = Arc::new(VerbsMr {
            base: base as usize,
            len,
            remote_read: flags & sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0 != 0,
            mr: Mutex::new(Some(mr)),
            lkey,
            rkey,
            util,
            open: AtomicBool::new(true),
        });
        let mut g = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|e| e.mr.strong_count() > 0);
        g.push(RegionRef {
            lo: r.base,
            hi: r.base.saturating_add(r.len),
            remote_read: r.remote_read,
            mr: Arc::downgrade(&r),
        });
        Ok(r)
    }
}

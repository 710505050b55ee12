//! The shm domain (this host): completion queues, counters, address vectors,
//! memory registration and endpoints.

use crate::ep::ShmEp;
use crate::fabric::ShmFabric;
use fabric_core::prov::{AvOps, CntrOps, CqOps, DomainOps, EndpointOps, MrOps};
use fabric_core::Progress as ProgressModel;
use fabric_core::{AvAttr, CqAttr, Info, MrAccess, Result};
use fabric_util::av::UtilAv;
use fabric_util::cntr::UtilCntr;
use fabric_util::cq::UtilCq;
use fabric_util::mr::MrRegistry;
use fabric_util::progress::{AutoProgress, FidRegistry, Progress};
use std::sync::{Arc, Mutex, Weak};

/// An shm domain.
pub(crate) struct ShmDomain {
    fid: u64,
    info: Info,
    fabric: Arc<ShmFabric>,
    cqs: FidRegistry<UtilCq>,
    cntrs: FidRegistry<UtilCntr>,
    avs: FidRegistry<UtilAv>,
    mrs: Arc<MrRegistry>,
    /// With `FI_PROGRESS_AUTO`: the progress thread.
    auto: Option<AutoProgress>,
    /// Serializes the atomics applied to this domain's regions (every endpoint's).
    atomics: Mutex<()>,
    me: Weak<ShmDomain>,
}

impl ShmDomain {
    pub(crate) fn new(fabric: Arc<ShmFabric>, info: &Info) -> Result<Arc<ShmDomain>> {
        let auto = match info.domain_attr.data_progress {
            ProgressModel::Auto => Some(AutoProgress::start("fabric-shm-progress")?),
            _ => None,
        };
        // Segments of processes that died without closing their endpoints.
        let stale = crate::segment::cleanup_stale();
        if stale > 0 {
            fabric_core::fi_log!(
                fabric_core::log::Level::Info,
                crate::NAME,
                "domain",
                "removed {stale} segment(s) of dead processes"
            );
        }
        Ok(Arc::new_cyclic(|me| ShmDomain {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            cqs: FidRegistry::new(),
            cntrs: FidRegistry::new(),
            avs: FidRegistry::new(),
            mrs: MrRegistry::new(info.domain_attr.mr_mode),
            auto,
            atomics: Mutex::new(()),
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<ShmFabric> {
        &self.fabric
    }

    pub(crate) fn find_cq(&self, fid: u64) -> Option<Arc<UtilCq>> {
        self.cqs.find(fid)
    }

    pub(crate) fn find_cntr(&self, fid: u64) -> Option<Arc<UtilCntr>> {
        self.cntrs.find(fid)
    }

    pub(crate) fn find_av(&self, fid: u64) -> Option<Arc<UtilAv>> {
        self.avs.find(fid)
    }

    /// The domain's memory-key registry.
    pub(crate) fn mrs(&self) -> &MrRegistry {
        &self.mrs
    }

    /// The lock held while an atomic is applied to one of the domain's regions.
    pub(crate) fn atomic_lock(&self) -> &Mutex<()> {
        &self.atomics
    }
}

impl DomainOps for ShmDomain {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn info(&self) -> &Info {
        &self.info
    }

    fn cq_open(&self, attr: &CqAttr) -> Result<Arc<dyn CqOps>> {
        let cq = UtilCq::new(attr)?;
        self.cqs.add(CqOps::fid(&*cq), &cq);
        Ok(cq)
    }

    fn cntr_open(&self) -> Result<Arc<dyn CntrOps>> {
        let c = UtilCntr::new()?;
        self.cntrs.add(CntrOps::fid(&*c), &c);
        Ok(c)
    }

    fn av_open(&self, attr: &AvAttr) -> Result<Arc<dyn AvOps>> {
        let av = UtilAv::new(attr, crate::NAME, crate::attr::is_shm_addr)?;
        self.avs.add(AvOps::fid(&*av), &av);
        Ok(av)
    }

    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let me = self.me.upgrade().expect("a domain method runs while the domain lives");
        let ep = ShmEp::new(me, info)?;
        if let Some(a) = &self.auto {
            let w: Weak<dyn Progress> = Arc::downgrade(&ep) as Weak<dyn Progress>;
            a.bind(w)?;
        }
        Ok(ep)
    }

    fn atomic_valid(
        &self,
        op: fabric_core::AtomicOp,
        dt: fabric_core::Datatype,
        kind: fabric_core::AtomicKind,
    ) -> Result<usize> {
        fabric_util::atomic::valid(op, dt, kind)
    }

    unsafe fn mr_reg(&self, base: *mut u8, len: usize, access: MrAccess, requested_key: u64) -> Result<Arc<dyn MrOps>> {
        // SAFETY: the caller upholds mr_reg's contract, which is register's.
        let mr = unsafe { self.mrs.register(base, len, access, requested_key)? };
        Ok(mr)
    }
}

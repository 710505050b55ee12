//! What every provider's domain holds the same way: the completion queues,
//! counters and address vectors opened on it (found again by fid when an endpoint
//! binds them), the memory-key registry, and the lock that serializes atomics on
//! the domain's regions. A provider's domain keeps one [`DomainObjects`] and
//! answers `cq_open`, `cntr_open`, `av_open` and `mr_reg` through it.

use crate::av::UtilAv;
use crate::cntr::UtilCntr;
use crate::cq::UtilCq;
use crate::mr::MrRegistry;
use crate::progress::FidRegistry;
use fabric_core::prov::{AvOps, CntrOps, CqOps, MrOps};
use fabric_core::{Address, AvAttr, CqAttr, MrAccess, MrMode, Result};
use std::sync::{Arc, Mutex};

/// The objects a domain opened, and its memory registry.
pub struct DomainObjects {
    /// The provider's name (for the AVs' messages).
    prov: &'static str,
    /// Which addresses the provider's AVs accept.
    accept_addr: fn(&Address) -> bool,
    cqs: FidRegistry<UtilCq>,
    cntrs: FidRegistry<UtilCntr>,
    avs: FidRegistry<UtilAv>,
    mrs: Arc<MrRegistry>,
    /// Serializes the atomics applied to this domain's regions (every endpoint's).
    atomics: Mutex<()>,
}

impl DomainObjects {
    /// For provider `prov`, whose AVs take the addresses `accept_addr` accepts,
    /// with memory registration in `mr_mode`.
    pub fn new(prov: &'static str, mr_mode: MrMode, accept_addr: fn(&Address) -> bool) -> DomainObjects {
        DomainObjects {
            prov,
            accept_addr,
            cqs: FidRegistry::new(),
            cntrs: FidRegistry::new(),
            avs: FidRegistry::new(),
            mrs: MrRegistry::new(mr_mode),
            atomics: Mutex::new(()),
        }
    }

    /// Open a completion queue (`fi_cq_open`).
    pub fn cq_open(&self, attr: &CqAttr) -> Result<Arc<dyn CqOps>> {
        let cq = UtilCq::new(attr)?;
        self.cqs.add(CqOps::fid(&*cq), &cq);
        Ok(cq)
    }

    /// Open a counter (`fi_cntr_open`).
    pub fn cntr_open(&self) -> Result<Arc<dyn CntrOps>> {
        let c = UtilCntr::new()?;
        self.cntrs.add(CntrOps::fid(&*c), &c);
        Ok(c)
    }

    /// Open an address vector (`fi_av_open`).
    pub fn av_open(&self, attr: &AvAttr) -> Result<Arc<dyn AvOps>> {
        let av = UtilAv::new(attr, self.prov, self.accept_addr)?;
        self.avs.add(AvOps::fid(&*av), &av);
        Ok(av)
    }

    /// Register memory (`fi_mr_reg`).
    ///
    /// # Safety
    /// As [`MrRegistry::register`]: the memory stays valid while registered.
    pub unsafe fn mr_reg(&self, base: *mut u8, len: usize, access: MrAccess, key: u64) -> Result<Arc<dyn MrOps>> {
        // SAFETY: the caller upholds register's contract.
        let mr = unsafe { self.mrs.register(base, len, access, key)? };
        Ok(mr)
    }

    /// The completion queue with this fid, if it was opened here and lives.
    pub fn find_cq(&self, fid: u64) -> Option<Arc<UtilCq>> {
        self.cqs.find(fid)
    }

    /// The counter with this fid, if it was opened here and lives.
    pub fn find_cntr(&self, fid: u64) -> Option<Arc<UtilCntr>> {
        self.cntrs.find(fid)
    }

    /// The address vector with this fid, if it was opened here and lives.
    pub fn find_av(&self, fid: u64) -> Option<Arc<UtilAv>> {
        self.avs.find(fid)
    }

    /// The memory-key registry (shared: a provider that registers regions itself,
    /// under keys of its own, registers them here too).
    pub fn mrs(&self) -> &Arc<MrRegistry> {
        &self.mrs
    }

    /// The lock held while an atomic is applied to one of the domain's regions.
    pub fn atomic_lock(&self) -> &Mutex<()> {
        &self.atomics
    }
}

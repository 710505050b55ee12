//! The tcp domain (one interface): completion queues, counters, address vectors,
//! memory registration and endpoints.

use crate::ep::TcpEp;
use crate::fabric::TcpFabric;
use fabric_core::prov::{AvOps, CntrOps, CqOps, DomainOps, EndpointOps, MrOps};
use fabric_core::Progress as ProgressModel;
use fabric_core::{Address, AvAttr, CqAttr, Info, MrAccess, Result};
use fabric_util::domain::DomainObjects;
use fabric_util::progress::{AutoProgress, Progress};
use std::sync::{Arc, Weak};

/// A tcp domain.
pub(crate) struct TcpDomain {
    fid: u64,
    info: Info,
    fabric: Arc<TcpFabric>,
    /// Its queues, counters, AVs and memory registry.
    pub(crate) objs: DomainObjects,
    /// With `FI_PROGRESS_AUTO`: the progress thread and what it waits on.
    auto: Option<AutoProgress>,
    me: Weak<TcpDomain>,
}

fn accept_addr(a: &Address) -> bool {
    a.sockaddr().is_some()
}

impl TcpDomain {
    pub(crate) fn new(fabric: Arc<TcpFabric>, info: &Info) -> Result<Arc<TcpDomain>> {
        let auto = match info.domain_attr.data_progress {
            ProgressModel::Auto => Some(AutoProgress::start("fabric-tcp-progress")?),
            _ => None,
        };
        Ok(Arc::new_cyclic(|me| TcpDomain {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            objs: DomainObjects::new(crate::NAME, info.domain_attr.mr_mode, accept_addr),
            auto,
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<TcpFabric> {
        &self.fabric
    }
}

impl DomainOps for TcpDomain {
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
        let ep = TcpEp::new(me, info)?;
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
        // SAFETY: the caller upholds mr_reg's contract, which is DomainObjects::mr_reg's.
        unsafe { self.objs.mr_reg(base, len, access, requested_key) }
    }
}

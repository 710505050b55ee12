//! The shm domain (this host): completion queues, counters, address vectors,
//! memory registration and endpoints.

use crate::ep::ShmEp;
use crate::fabric::ShmFabric;
use fabric_core::Progress as ProgressModel;
use fabric_core::{Info, Result};
use fabric_util::domain::DomainObjects;
use fabric_util::progress::{AutoProgress, Progress};
use std::sync::{Arc, Weak};

/// An shm domain.
pub(crate) struct ShmDomain {
    fid: u64,
    info: Info,
    fabric: Arc<ShmFabric>,
    /// Its queues, counters, AVs and memory registry.
    pub(crate) objs: DomainObjects,
    /// With `FI_PROGRESS_AUTO`: the progress thread.
    auto: Option<AutoProgress>,
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
            objs: DomainObjects::new(crate::NAME, info.domain_attr.mr_mode, crate::attr::is_shm_addr),
            auto,
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<ShmFabric> {
        &self.fabric
    }
}

fabric_util::domain_ops!(ShmDomain, endpoint: |d, info| {
    let me = d.me.upgrade().expect("a domain method runs while the domain lives");
    let ep = ShmEp::new(me, info)?;
    if let Some(a) = &d.auto {
        let w: Weak<dyn Progress> = Arc::downgrade(&ep) as Weak<dyn Progress>;
        a.bind(w)?;
    }
    Ok(ep)
});

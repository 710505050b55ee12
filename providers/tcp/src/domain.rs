//! The tcp domain (one interface): completion queues, counters, address vectors,
//! memory registration and endpoints.

use crate::ep::TcpEp;
use crate::fabric::TcpFabric;
use fabric_core::Progress as ProgressModel;
use fabric_core::{Address, Info, Result};
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

fabric_util::domain_ops!(TcpDomain, endpoint: |d, info| {
    let me = d.me.upgrade().expect("a domain method runs while the domain lives");
    let ep = TcpEp::new(me, info)?;
    if let Some(a) = &d.auto {
        let w: Weak<dyn Progress> = Arc::downgrade(&ep) as Weak<dyn Progress>;
        a.bind(w)?;
    }
    Ok(ep)
});

//! The tcp fabric: opens domains, event queues and passive endpoints.

use crate::domain::TcpDomain;
use crate::pep::TcpPep;
use fabric_core::prov::{DomainOps, EqOps, FabricOps, PassiveEpOps};
use fabric_core::{EqAttr, Info, Result};
use fabric_util::eq::UtilEq;
use std::sync::{Arc, Mutex, Weak};

/// A tcp fabric (one per subnet in use).
pub(crate) struct TcpFabric {
    fid: u64,
    /// Event queues opened here, by fid, so endpoints can bind them.
    eqs: Mutex<Vec<(u64, Weak<UtilEq>)>>,
    me: Weak<TcpFabric>,
}

impl TcpFabric {
    pub(crate) fn new(_info: &Info) -> Arc<TcpFabric> {
        Arc::new_cyclic(|me| TcpFabric {
            fid: fabric_core::prov::next_fid(),
            eqs: Mutex::new(Vec::new()),
            me: me.clone(),
        })
    }

    /// The event queue with this fid, if it was opened on this fabric and lives.
    pub(crate) fn find_eq(&self, fid: u64) -> Option<Arc<UtilEq>> {
        let g = self.eqs.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().find(|(f, _)| *f == fid).and_then(|(_, w)| w.upgrade())
    }

    fn arc(&self) -> Arc<TcpFabric> {
        self.me.upgrade().expect("a fabric method runs while the fabric lives")
    }
}

impl FabricOps for TcpFabric {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(TcpDomain::new(self.arc(), info)?)
    }

    fn eq_open(&self, attr: &EqAttr) -> Result<Arc<dyn EqOps>> {
        let eq = UtilEq::new(attr)?;
        let mut g = self.eqs.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0);
        g.push((fabric_core::prov::EqOps::fid(&*eq), Arc::downgrade(&eq)));
        Ok(eq)
    }

    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        Ok(TcpPep::new(self.arc(), info))
    }
}

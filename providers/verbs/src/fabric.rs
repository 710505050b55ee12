//! The verbs fabric: opens domains (one per device port), event queues and passive
//! endpoints.

use crate::domain::VerbsDomain;
use crate::pep::VerbsPep;
use fabric_core::prov::{DomainOps, EqOps, FabricOps, PassiveEpOps};
use fabric_core::{EqAttr, Info, Result};
use fabric_util::eq::UtilEq;
use fabric_util::progress::FidRegistry;
use std::sync::{Arc, Weak};

/// A verbs fabric.
pub(crate) struct VerbsFabric {
    fid: u64,
    /// Event queues opened here, by fid, so endpoints can bind them.
    eqs: FidRegistry<UtilEq>,
    me: Weak<VerbsFabric>,
}

impl VerbsFabric {
    pub(crate) fn new(_info: &Info) -> Arc<VerbsFabric> {
        Arc::new_cyclic(|me| VerbsFabric {
            fid: fabric_core::prov::next_fid(),
            eqs: FidRegistry::new(),
            me: me.clone(),
        })
    }

    /// The event queue with this fid, if it was opened on this fabric and lives.
    pub(crate) fn find_eq(&self, fid: u64) -> Option<Arc<UtilEq>> {
        self.eqs.find(fid)
    }
}

impl FabricOps for VerbsFabric {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        let me = self.me.upgrade().expect("a fabric method runs while the fabric lives");
        Ok(VerbsDomain::new(me, info)?)
    }

    fn eq_open(&self, attr: &EqAttr) -> Result<Arc<dyn EqOps>> {
        let eq = UtilEq::new(attr)?;
        self.eqs.add(EqOps::fid(&*eq), &eq);
        Ok(eq)
    }

    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        let me = self.me.upgrade().expect("a fabric method runs while the fabric lives");
        Ok(VerbsPep::new(me, info)?)
    }
}

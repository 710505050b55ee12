//! The verbs fabric: opens domains (one per device port), event queues and passive
//! endpoints (the shared [`UtilFabric`]; what is verbs' is what it opens).

use crate::domain::VerbsDomain;
use crate::pep::VerbsPep;
use fabric_core::prov::{DomainOps, PassiveEpOps};
use fabric_core::{Info, Result};
use fabric_util::scaffold::{FabricKind, UtilFabric};
use std::sync::Arc;

/// A verbs fabric.
pub(crate) type VerbsFabric = UtilFabric<Verbs>;

/// What a verbs fabric opens.
pub(crate) struct Verbs;

impl FabricKind for Verbs {
    fn domain(fabric: Arc<VerbsFabric>, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(VerbsDomain::new(fabric, info)?)
    }

    fn passive_ep(fabric: Arc<VerbsFabric>, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        Ok(VerbsPep::new(fabric, info)?)
    }
}

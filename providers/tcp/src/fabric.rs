//! The tcp fabric: opens domains, event queues and passive endpoints (the shared
//! [`UtilFabric`]; what is tcp's is what it opens).

use crate::domain::TcpDomain;
use crate::pep::TcpPep;
use fabric_core::prov::{DomainOps, PassiveEpOps};
use fabric_core::{Info, Result};
use fabric_util::scaffold::{FabricKind, UtilFabric};
use std::sync::Arc;

/// A tcp fabric (one per subnet in use).
pub(crate) type TcpFabric = UtilFabric<Tcp>;

/// What a tcp fabric opens.
pub(crate) struct Tcp;

impl FabricKind for Tcp {
    fn domain(fabric: Arc<TcpFabric>, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(TcpDomain::new(fabric, info)?)
    }

    fn passive_ep(fabric: Arc<TcpFabric>, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        Ok(TcpPep::new(fabric, info))
    }
}

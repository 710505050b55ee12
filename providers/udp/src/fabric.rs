//! The udp fabric (one per subnet in use): opens domains and event queues (the
//! shared [`UtilFabric`]; udp has no passive endpoints).

use crate::domain::UdpDomain;
use fabric_core::prov::DomainOps;
use fabric_core::{Info, Result};
use fabric_util::scaffold::{FabricKind, UtilFabric};
use std::sync::Arc;

/// A udp fabric.
pub(crate) type UdpFabric = UtilFabric<Udp>;

/// What a udp fabric opens.
pub(crate) struct Udp;

impl FabricKind for Udp {
    fn domain(fabric: Arc<UdpFabric>, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(UdpDomain::new(fabric, info)?)
    }
}

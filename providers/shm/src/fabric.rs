//! The shm fabric: opens domains and event queues (the shared
//! [`UtilFabric`]; shm has no passive endpoints).

use crate::domain::ShmDomain;
use fabric_core::prov::DomainOps;
use fabric_core::{Info, Result};
use fabric_util::scaffold::{FabricKind, UtilFabric};
use std::sync::Arc;

/// An shm fabric.
pub(crate) type ShmFabric = UtilFabric<Shm>;

/// What an shm fabric opens.
pub(crate) struct Shm;

impl FabricKind for Shm {
    fn domain(fabric: Arc<ShmFabric>, info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(ShmDomain::new(fabric, info)?)
    }
}

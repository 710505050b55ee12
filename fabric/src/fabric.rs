//! Fabrics: a provider instance over one network.

use crate::domain::Domain;
use crate::ep::PassiveEndpoint;
use crate::eq::EventQueue;
use fabric_core::prov::{FabricOps, Provider};
use fabric_core::{EqAttr, Error, Info, Result};
use std::fmt;
use std::sync::Arc;

pub(crate) struct FabricInner {
    pub(crate) ops: Arc<dyn FabricOps>,
    pub(crate) prov: Arc<dyn Provider>,
    pub(crate) info: Info,
}

/// A fabric (`fid_fabric`): the provider's instance over one network, parent of
/// domains, event queues and passive endpoints. Cloning gives another handle on the
/// same fabric; the fabric lives as long as any handle or child.
#[derive(Clone)]
pub struct Fabric {
    pub(crate) inner: Arc<FabricInner>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("fid", &self.inner.ops.fid())
            .field("provider", &self.inner.prov.name())
            .field("name", &self.inner.info.fabric_attr.name)
            .finish()
    }
}

impl Fabric {
    /// Open the fabric of an entry [`getinfo`](crate::getinfo) returned: the
    /// provider is found by `info.fabric_attr.prov_name` among
    /// [`providers`](crate::providers) (`Err(NoData)` if none has that name).
    pub fn open(info: &Info) -> Result<Fabric> {
        let name = &info.fabric_attr.prov_name;
        let prov = crate::registry::providers().into_iter().find(|p| p.name() == name).ok_or_else(|| {
            fabric_core::fi_log!(
                fabric_core::log::Level::Warn,
                "core",
                "core",
                "no provider named {} is available (feature off, not registered, or excluded by FI_PROVIDER)",
                name
            );
            Error::NoData
        })?;
        Fabric::open_with(prov, info)
    }

    /// Open a fabric of a given provider, bypassing the registry.
    pub fn open_with(prov: Arc<dyn Provider>, info: &Info) -> Result<Fabric> {
        let ops = prov.fabric(info)?;
        Ok(Fabric { inner: Arc::new(FabricInner { ops, prov, info: info.clone() }) })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// The provider of this fabric.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.inner.prov
    }

    /// The entry the fabric was opened with.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }

    /// Open a domain for an entry.
    pub fn domain(&self, info: &Info) -> Result<Domain> {
        Domain::open(self, info)
    }

    /// Open an event queue (connection management events).
    pub fn eq(&self, attr: EqAttr) -> Result<EventQueue> {
        EventQueue::open(self, attr)
    }

    /// Open a passive endpoint (a listener for MSG endpoints).
    pub fn passive_ep(&self, info: &Info) -> Result<PassiveEndpoint> {
        PassiveEndpoint::open(self, info)
    }
}

//! Domains: one device or interface, parent of queues, address vectors, endpoints
//! and memory regions.

use crate::av::AddressVector;
use crate::buf::Buf;
use crate::cntr::Counter;
use crate::cq::CompletionQueue;
use crate::ep::Endpoint;
use crate::fabric::Fabric;
use crate::mr::{MemoryRegion, RegisteredBuf};
use fabric_core::prov::DomainOps;
use fabric_core::{AvAttr, CqAttr, Info, MrAccess, Result};
use std::fmt;
use std::sync::Arc;

pub(crate) struct DomainInner {
    pub(crate) ops: Arc<dyn DomainOps>,
    pub(crate) fabric: Fabric,
}

/// A domain (`fid_domain`): one device or interface. Cloning gives another handle
/// on the same domain; it lives as long as any handle or child, and keeps its
/// fabric alive.
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain")
            .field("fid", &self.inner.ops.fid())
            .field("name", &self.inner.ops.info().domain_attr.name)
            .finish()
    }
}

impl Domain {
    pub(crate) fn open(fabric: &Fabric, info: &Info) -> Result<Domain> {
        let ops = fabric.inner.ops.domain(info)?;
        Ok(Domain { inner: Arc::new(DomainInner { ops, fabric: fabric.clone() }) })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// The entry the domain was opened with.
    pub fn info(&self) -> &Info {
        self.inner.ops.info()
    }

    /// The fabric of this domain.
    pub fn fabric(&self) -> &Fabric {
        &self.inner.fabric
    }

    /// Open a completion queue.
    pub fn cq(&self, attr: CqAttr) -> Result<CompletionQueue> {
        CompletionQueue::open(self, attr)
    }

    /// Open a counter.
    pub fn counter(&self) -> Result<Counter> {
        Counter::open(self)
    }

    /// Open an address vector.
    pub fn av(&self, attr: AvAttr) -> Result<AddressVector> {
        AddressVector::open(self, attr)
    }

    /// Open an active endpoint for an entry (for the passive side of a
    /// connection, the entry of the `ConnReq` event).
    pub fn endpoint(&self, info: &Info) -> Result<Endpoint> {
        Endpoint::open(self, info)
    }

    /// Register a buffer (its whole capacity) for the given access, letting the
    /// provider choose the key. The region owns the buffer until
    /// [`MemoryRegion::close`] gives it back.
    pub fn register(&self, buf: Buf, access: MrAccess) -> Result<MemoryRegion> {
        MemoryRegion::register(self, buf, access, 0)
    }

    /// Register a buffer asking for a key (domains without `FI_MR_PROV_KEY`).
    pub fn register_with_key(&self, buf: Buf, access: MrAccess, requested_key: u64) -> Result<MemoryRegion> {
        MemoryRegion::register(self, buf, access, requested_key)
    }

    /// Register a buffer for the local end of this domain's sends and receives
    /// (`FI_SEND | FI_RECV`, no peer access): see [`RegisteredBuf`].
    pub fn register_buf(&self, buf: Buf) -> Result<RegisteredBuf> {
        RegisteredBuf::register(self, buf)
    }
}

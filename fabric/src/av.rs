//! Address vectors: peer addresses to compact handles.

use crate::domain::Domain;
use fabric_core::prov::AvOps;
use fabric_core::{Address, AvAttr, Error, FiAddr, Result};
use std::fmt;
use std::sync::Arc;

pub(crate) struct AvInner {
    pub(crate) ops: Arc<dyn AvOps>,
    _domain: Domain,
}

/// An address vector (`fid_av`): maps peer [`Address`]es to the [`FiAddr`]
/// handles that RDM and DGRAM operations take. Cloning gives another handle on the
/// same vector.
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

impl fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AddressVector").field("fid", &self.inner.ops.fid()).finish()
    }
}

impl AddressVector {
    pub(crate) fn open(domain: &Domain, attr: AvAttr) -> Result<AddressVector> {
        let ops = domain.inner.ops.av_open(&attr)?;
        Ok(AddressVector { inner: Arc::new(AvInner { ops, _domain: domain.clone() }) })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// Insert addresses; one handle per address, in order. An address of the
    /// wrong format fails the call with `Err(Inval)` and inserts nothing.
    pub fn insert(&self, addrs: &[Address]) -> Result<Vec<FiAddr>> {
        self.inner.ops.insert(addrs)
    }

    /// Insert one address.
    pub fn insert_one(&self, addr: &Address) -> Result<FiAddr> {
        self.inner.ops.insert(std::slice::from_ref(addr))?.first().copied().ok_or(Error::Inval)
    }

    /// Remove handles.
    pub fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        self.inner.ops.remove(addrs)
    }

    /// The address behind a handle.
    pub fn lookup(&self, addr: FiAddr) -> Result<Address> {
        self.inner.ops.lookup(addr)
    }

    /// An address as text (`fi_av_straddr`).
    pub fn straddr(&self, addr: &Address) -> String {
        self.inner.ops.straddr(addr)
    }
}

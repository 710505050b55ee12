//! Multicast groups joined by an endpoint.

use fabric_core::prov::McOps;
use fabric_core::{Address, FiAddr, Result};
use std::fmt;
use std::sync::Arc;

/// A multicast group an endpoint has joined (`fid_mc`), from
/// [`Endpoint::join`](crate::Endpoint::join).
///
/// While it is alive the group's messages arrive on the endpoint's posted
/// receives, and a send posted with `OpFlags::MULTICAST` to [`Multicast::addr`]
/// goes to the group:
///
/// ```no_run
/// # fn f(ep: &fabric::Endpoint) -> fabric::Result<()> {
/// use fabric::{Address, Buf, OpFlags, SendMsg};
/// let group = ep.join(&Address::parse("239.255.0.1:5000")?)?;
/// ep.sendmsg(SendMsg::new(Buf::from(&b"to all"[..]), group.addr(), 7), OpFlags::MULTICAST)?;
/// group.leave()?; // or drop it
/// # Ok(()) }
/// ```
///
/// Leaving (or dropping the handle) is libfabric's `fi_close` on the `fid_mc`.
/// Closing the endpoint leaves every group it joined; a handle left over from it
/// then leaves nothing.
pub struct Multicast {
    ops: Arc<dyn McOps>,
    left: bool,
}

impl fmt::Debug for Multicast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Multicast").field("fid", &self.ops.fid()).field("group", self.ops.group()).finish()
    }
}

impl Multicast {
    pub(crate) fn new(ops: Arc<dyn McOps>) -> Multicast {
        Multicast { ops, left: false }
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.ops.fid()
    }

    /// The group as joined.
    pub fn group(&self) -> &Address {
        self.ops.group()
    }

    /// The destination to send to the group with, in a send posted with
    /// `OpFlags::MULTICAST` (`fi_mc_addr`). It is not an address-vector handle.
    pub fn addr(&self) -> FiAddr {
        self.ops.addr()
    }

    /// Leave the group (`fi_close` on the `fid_mc`). Dropping the handle does the
    /// same, ignoring errors.
    pub fn leave(mut self) -> Result<()> {
        self.left = true;
        self.ops.close()
    }
}

impl Drop for Multicast {
    fn drop(&mut self) {
        if !self.left {
            let _ = self.ops.close();
        }
    }
}

//! Atomics, posted to the engine as one request each, answered by the target
//! with the prior values.

use super::UdpRdmEp;
use fabric_core::prov::AtomicDesc;
use fabric_core::{OpFlags, Result};
use fabric_util::reliable::Nanos;

impl UdpRdmEp {
    /// Post an atomic; with `inject` its operands are copied now; with `flags`
    /// [`OpFlags::silent`] its completion is not reported, else it is when
    /// `flags` has `COMPLETION` or the queue is not selective.
    pub(super) fn atomic_common(&self, a: &AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        let now = Nanos::now();
        let peer = self.check_ready(g, !flags.silent(), a.addr, now)?;
        g.eng.post_atomic(peer, a, inject, flags)?;
        self.pump(g, now);
        Ok(())
    }
}

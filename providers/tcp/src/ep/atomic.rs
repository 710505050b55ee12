//! Atomics of the tcp provider, emulated at the target by the RDM engine.

use super::*;
use fabric_core::prov::AtomicDesc;

impl TcpEp {
    /// Post an atomic; with `inject` its operands are copied now; with `flags`
    /// [`OpFlags::silent`] its completion is not reported, else it is when
    /// `flags` has `COMPLETION` or the queue is not selective.
    pub(super) fn atomic_common(&self, a: &AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        // Checked before a connection is made for it.
        fabric_util::rdm::check_atomic(a)?;
        let mut g = self.lock();
        if !flags.silent() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if g.life != Life::Enabled {
            return Err(Error::OpBadState);
        }
        let conn = self.conn_for(&mut g, a.addr)?;
        let g = &mut *g;
        g.eng.post_atomic(conn, a, inject, flags)?;
        self.pump(g);
        Ok(())
    }

    /// `atomic_common`, a peer out of reach reported as [`TcpEp::unreachable`]
    /// does unless `flags` are [`OpFlags::silent`] (then it is the call's error).
    pub(super) fn atomic_reported(
        &self,
        op: &fabric_core::prov::AtomicDesc,
        inject: bool,
        flags: OpFlags,
    ) -> Result<()> {
        let r = self.atomic_common(op, inject, flags);
        if flags.silent() {
            return r;
        }
        let dir = if op.kind == fabric_core::AtomicKind::Plain { Caps::WRITE } else { Caps::READ };
        self.unreachable(r, op.context, Caps::ATOMIC | dir, op.rma.len)
    }
}

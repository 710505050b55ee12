//! RMA writes and reads of the tcp provider. The protocol is the RDM engine's
//! (`fabric_util::rdm`: requests of at most `RMA_CHUNK` bytes under one id,
//! answered in order; the target side checked against the domain's regions);
//! here they are posted on the peer's connection.

use super::*;
use fabric_core::prov::RmaOp;

impl TcpEp {
    /// Post a write or read.
    pub(super) fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, read: bool, inject: Option<&[u8]>) -> Result<()> {
        Self::check_iov(op.iov)?;
        let [rma] = op.rma else { return Err(Error::Inval) };
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if rma.len != len {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if g.life != Life::Enabled {
            return Err(Error::OpBadState);
        }
        let conn = self.conn_for(&mut g, op.addr)?;
        let g = &mut *g;
        g.eng.post_rma(&g.b, conn, op, flags, read, inject)?;
        self.pump(g);
        Ok(())
    }
}

//! Messages and tagged messages of the tcp provider: posting sends and receives
//! on the RDM engine (`fabric_util::rdm`), which frames them for the peer's
//! connection.

use super::*;

impl TcpEp {
    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Self::check_iov(op.iov)?;
        let id = self.conn_for(&mut g, op.addr)?;
        let g = &mut *g;
        g.eng.post_send(&g.b, id, op, flags, inject, false)?;
        self.pump(g);
        Ok(())
    }

    pub(super) fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        g.b.check_recv(g.enabled && !g.closed)?;
        // RDM: a directed receive's AV handle as given (FI_ADDR_UNSPEC for any).
        let src = if self.ep_type == EpType::Rdm { op.addr } else { FiAddr::UNSPEC };
        g.eng.post_recv(&g.b, op, flags, src)?;
        self.pump(g);
        Ok(())
    }
}

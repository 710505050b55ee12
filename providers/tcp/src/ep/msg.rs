//! Messages and tagged messages of the tcp provider: posting sends and receives
//! on the RDM engine (`fabric_util::rdm`), which frames them for the peer's
//! connection.

use super::*;
use crate::conn::send_frame;
use fabric_util::rdm::SendNow;

impl TcpEp {
    #[inline(always)]
    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        if g.life != Life::Enabled {
            return Err(Error::OpBadState);
        }
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Self::check_iov(op.iov)?;
        let id = self.conn_for(&mut g, op.addr)?;
        let g = &mut *g;
        // A connection with nothing queued takes an eager message at once: one
        // `sendmsg` of its header and the user's pieces, no frame queued.
        let Inner { slots, eng, b, .. } = g;
        let conn = slots[id.idx as usize].conn.as_mut().filter(|c| c.state == ConnState::Ready && c.txq.is_empty());
        let Some(conn) = conn.filter(|_| !eng.wants_transmit()) else {
            g.eng.post_send(&g.b, id, op, flags, inject, false)?;
            self.pump(g);
            return Ok(());
        };
        let fd = conn.fd();
        // SAFETY: the pieces are the user's send buffers (valid for reads under
        // post_send's contract) or the inject's data, read during the call.
        let sent = eng.send_now(
            b,
            id,
            op,
            flags,
            inject,
            #[inline(always)]
            |head, pieces| unsafe { send_frame(fd, head, pieces) },
            |f, written| conn.txq.push_back(TxOp { f, sent: written, control: false }),
        )?;
        match sent {
            SendNow::Done => {}
            SendNow::Partial => self.flush_conn(g, id),
            SendNow::Queued => self.pump(g),
        }
        Ok(())
    }

    #[inline]
    pub(super) fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        g.b.check_recv(g.life == Life::Enabled)?;
        // RDM: a directed receive's AV handle as given (FI_ADDR_UNSPEC for any).
        let src = if self.ep_type == EpType::Rdm { op.addr } else { FiAddr::UNSPEC };
        g.eng.post_recv(&g.b, op, flags, src)?;
        if g.eng.wants_transmit() {
            self.pump(g);
        }
        Ok(())
    }
}

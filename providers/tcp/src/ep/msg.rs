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
        let g = &mut *g;
        // The conversation's peer again, its connection up and idle (the common
        // case): found and written to in one straight line (`send_now` refuses
        // too many pieces, as `check_iov` does).
        let last = g.last_addr;
        if last.addr == op.addr && g.b.av.as_ref().is_some_and(|av| av.version() == g.cache_version) {
            let Inner { slots, eng, b, .. } = &mut *g;
            if let Some(conn) = Self::slot_conn(slots, last.id).filter(|c| Self::takes_now(c, eng)) {
                let sent = Self::send_direct(conn, eng, b, last.id, op, flags, inject)?;
                return self.sent(g, last.id, sent);
            }
        }
        // Too many pieces is refused before any connection is started for it.
        Self::check_iov(op.iov)?;
        let id = self.conn_for(g, op.addr)?;
        // A connection with nothing queued takes an eager message at once: one
        // `sendmsg` of its header and the user's pieces, no frame queued.
        let Inner { slots, eng, b, .. } = &mut *g;
        let conn = slots[id.idx as usize].conn.as_mut().filter(|c| Self::takes_now(c, eng));
        let Some(conn) = conn else {
            g.eng.post_send(&g.b, id, op, flags, inject, false)?;
            self.pump(g);
            return Ok(());
        };
        let sent = Self::send_direct(conn, eng, b, id, op, flags, inject)?;
        self.sent(g, id, sent)
    }

    /// Whether connection `c` takes an eager message at once: it is up, nothing is
    /// queued on it, and the engine has no frame waiting to go out first.
    #[inline(always)]
    fn takes_now(c: &Conn, eng: &Engine<ConnId>) -> bool {
        c.state == ConnState::Ready && c.txq.is_empty() && !eng.wants_transmit()
    }

    /// An eager message written at once on `conn` (up, nothing queued), the
    /// rest of it queued if the socket took part; a message that is not eager
    /// goes to the engine's queue.
    #[inline(always)]
    fn send_direct(
        conn: &mut Conn,
        eng: &mut Engine<ConnId>,
        b: &Bindings,
        id: ConnId,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
    ) -> Result<SendNow> {
        let fd = conn.fd();
        // SAFETY: the pieces are the user's send buffers (valid for reads under
        // post_send's contract) or the inject's data, read during the call.
        eng.send_now(
            b,
            id,
            op,
            flags,
            inject,
            #[inline(always)]
            |head, pieces| unsafe { send_frame(&mut conn.msg, fd, head, pieces) },
            |f, written| conn.txq.push_back(TxOp { f, sent: written, control: false }),
        )
    }

    /// What follows [`TcpEp::send_direct`] on connection `id`: the rest of a
    /// partly written message, or the engine's queue.
    #[inline(always)]
    fn sent(&self, g: &mut Inner, id: ConnId, sent: SendNow) -> Result<()> {
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

//! Messages: sends (eager, copied or not; rendezvous; injected) and receives,
//! posted to the engine, whose frames go to the peers' channels.

use super::{UdpRdmEp, COPY_BUDGET, EAGER_MAX, MAX_MSG};
use fabric_core::prov::{IoVec, Op};
use fabric_core::{Error, OpFlags, Result};
use fabric_util::reliable::Nanos;
use fabric_util::rx::IOV_LIMIT;

impl UdpRdmEp {
    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if len > MAX_MSG {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        let now = Nanos::now();
        let peer = self.check_ready(g, inject.is_none(), op.addr, now)?;
        // An eager send is copied and completes now (as tcp's completes once in
        // the socket): the channel delivers it reliably from our copy, and the
        // ping-pong of small messages never waits for an acknowledgement. Within
        // a budget (as a socket's send buffer), and only to a peer that has
        // answered us: a first send to a peer that may not exist completes when
        // acknowledged, or fails. (FI_DELIVERY_COMPLETE goes by rendezvous.)
        let heard = Self::peer(g, peer).is_some_and(|p| p.chan.peer_epoch().is_some());
        let dc = flags.contains(OpFlags::DELIVERY_COMPLETE);
        let copy = heard && inject.is_none() && !dc && len <= EAGER_MAX && g.eng.copied() + len <= COPY_BUDGET;
        g.eng.post_send(&g.b, peer, op, flags, inject, copy)?;
        self.pump(g, now);
        Ok(())
    }

    pub(super) fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        g.b.check_recv(g.enabled && !g.closed)?;
        g.eng.post_recv(&g.b, op, flags, op.addr)?;
        // Clear the rendezvous messages it matched.
        if g.eng.wants_transmit() {
            self.pump(g, Nanos::now());
        }
        Ok(())
    }
}

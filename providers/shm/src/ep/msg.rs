//! Messages (`fi_send`/`fi_recv`, tagged or not): posting sends and receives, and
//! the receive side of large messages once they matched a receive (copied across
//! address spaces, or asked for as chunks).

use super::cocopy::COCOPY_MIN;
use super::{local_pieces, InStream, Inner, OpKind, PeerId, Rts, ShmEp, TxOp, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{self, flags, Entry, Kind, Mode, INLINE_MAX};
use crate::segment::{self, BOUNCE_SIZE};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{IoVec, Op};
use fabric_core::{fi_log, Caps, CqEntry, Error, FiAddr, OpFlags, Result};
use fabric_util::iov::{self, gather};
use fabric_util::rx::{msg_flags, RxAction, Target};
use fabric_util::wire::Header;

impl ShmEp {
    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, inject.is_none())?;
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        let data_iov = inject.map(|d| [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }]);
        let iov: &[IoVec] = match &data_iov {
            Some(v) => v,
            None => op.iov,
        };
        // One piece (the common case) without the general sum's loop.
        let len = match iov {
            [v] => v.len,
            _ => IoVec::total(iov),
        };
        let id = self.peer_for(g, op.addr)?;
        let mut e = Entry::new(Kind::Msg);
        e.flags = if tagged { flags::TAGGED } else { 0 };
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            e.flags |= flags::CQ_DATA;
            e.data = op.data;
        }
        e.tag = op.tag;
        e.len = len as u64;
        let cq_flags = Caps::SEND | msg_flags(tagged);
        // FI_DELIVERY_COMPLETE: as a large message whatever its size, which
        // completes on the receiver's `Ack`, sent once the data is in the receive.
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        if len <= INLINE_MAX && !dc {
            e.mode = Mode::Inline;
            // `peer_for` made the path.
            self.push_entry(g, id, &e, |b| {
                let dst = b[proto::HDR..].as_mut_ptr();
                match iov {
                    // SAFETY: the entry has INLINE_MAX >= len bytes after the header;
                    // the piece (len bytes) is valid for reads under the post contract.
                    [v] => unsafe { std::ptr::copy_nonoverlapping(v.base, dst, len) },
                    // SAFETY: as above, for the pieces.
                    _ => unsafe { gather(iov, 0, dst, len) },
                }
            });
        } else if len <= BOUNCE_SIZE && !dc {
            self.send_bounce(g, id, e, iov, len);
        } else {
            if inject.is_some() {
                return Err(Error::MsgSize);
            }
            let mut local = [NULL_IOV; IOV_LIMIT];
            local[..iov.len()].copy_from_slice(iov);
            let opid = g.ops.insert(TxOp {
                peer: id,
                kind: OpKind::Send,
                context: op.context,
                flags: cq_flags,
                len,
                iov: local,
                niov: iov.len(),
                silent: false,
                comp: flags.contains(OpFlags::COMPLETION),
                sent: None,
            });
            e.id = opid;
            self.announce(g, id, e, iov);
            return Ok(());
        }
        if inject.is_none() {
            let mut c = CqEntry::new(op.context, cq_flags);
            c.len = len;
            g.b.tx_done(c, flags.contains(OpFlags::COMPLETION));
        } else {
            g.b.tx_count(false);
        }
        Ok(())
    }

    /// Send the entry of a large transfer: our pieces for the peer to copy, or a
    /// request to be asked for chunks.
    pub(super) fn announce(&self, g: &mut Inner, id: PeerId, mut e: Entry, iov: &[IoVec]) {
        if self.cma_allowed {
            let (pieces, n) = local_pieces(iov);
            e.mode = Mode::Iov;
            e.aux = n as u32;
            self.send_entry(g, id, &e, |b| proto::put_pieces(b, &pieces[..n]));
        } else {
            e.mode = Mode::Stream;
            self.send_entry(g, id, &e, |_| {});
        }
    }

    pub(super) fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        g.b.check_recv(g.enabled && !g.closed)?;
        g.rx.post(&g.b, op, flags, op.addr)?;
        self.run_rx_actions(g);
        Ok(())
    }

    /// Put on the wire what the receive engine asks for.
    #[inline]
    pub(super) fn run_rx_actions(&self, g: &mut Inner) {
        while let Some(a) = g.rx.take_action() {
            self.run_rx_action(g, a);
        }
    }

    /// One action of the receive engine: start a large transfer, or discard one.
    #[inline(never)]
    fn run_rx_action(&self, g: &mut Inner, a: RxAction<Rts>) {
        match a {
            RxAction::Start(m) => self.start_rts(g, m.target, m.hdr, m.src, m.rts),
            RxAction::Discard(r) => {
                let mut e = Entry::new(Kind::Ack);
                e.id = r.id;
                self.send_entry(g, r.peer, &e, |_| {});
            }
        }
    }

    /// A large message matched its receive: copy it across, or ask for chunks.
    fn start_rts(&self, g: &mut Inner, target: Target, hdr: Header, src: FiAddr, r: Rts) {
        if Self::peer(g, r.peer).is_none() {
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        }
        if self.ensure_tx(g, r.peer).is_err() {
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        }
        if r.mode == Mode::Iov && self.cma_ok(g, r.peer) {
            let mut local = [NULL_IOV; IOV_LIMIT];
            let n = g.rx.pieces(&target, 0, hdr.len, &mut local);
            let total = IoVec::total(&local[..n]) as u64;
            if total >= COCOPY_MIN {
                if let Some((slot, job)) = Self::free_job(g, r.peer) {
                    self.start_cocopy(g, (slot, job), target, hdr, src, r, &local[..n]);
                    return;
                }
            }
            let (remote, rn) = iov::slice(&r.pieces[..r.n], 0, total);
            let pid = Self::peer(g, r.peer).map_or(0, |p| p.pid);
            // SAFETY: the local pieces lie in a posted receive (valid for writes
            // under post_recv's contract), clipped to it by `pieces`.
            let res = unsafe { segment::cma_read(pid, &local[..n], &remote[..rn]) };
            let mut ack = Entry::new(Kind::Ack);
            ack.id = r.id;
            match res {
                Ok(_) => g.rx.complete(&g.b, target, &hdr, src, false),
                Err(e) => {
                    fi_log!(Level::Info, NAME, "ep_data", "copy of a {} byte message failed: {e:?}", hdr.len);
                    g.rx.fail(&g.b, target, &hdr, src, Error::Io);
                    ack.aux = Error::Io.errno() as u32;
                }
            }
            self.send_entry(g, r.peer, &ack, |_| {});
        } else {
            g.in_streams.insert((r.peer, r.id), InStream::Msg { target, hdr, src, got: 0 });
            let mut cts = Entry::new(Kind::Cts);
            cts.id = r.id;
            self.send_entry(g, r.peer, &cts, |_| {});
            if hdr.len == 0 {
                self.finish_in_stream(g, r.peer, r.id);
            }
        }
    }

    /// A write with remote CQ data landed: it completes one posted receive (or
    /// waits for the next one).
    pub(super) fn remote_cq_data(&self, g: &mut Inner, peer: PeerId, data: u64) {
        let src = Self::src_of(g, peer);
        g.rx.rma_data(&g.b, src, data);
        self.run_rx_actions(g);
    }
}

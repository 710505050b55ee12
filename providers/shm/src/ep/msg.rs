//! Messages (`fi_send`/`fi_recv`, tagged or not): posting sends and receives, and
//! the receive side of large messages once they matched a receive (copied across
//! address spaces, or asked for as chunks).

use super::cocopy::COCOPY_MIN;
use super::{local_pieces, InStream, Inner, OpKind, PeerId, Pending, Rts, ShmEp, Then, TxOp, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{self, flags, Entry, Kind, Mode, INLINE_MAX};
use crate::ring::ENTRY_PAYLOAD;
use crate::segment::{self, BOUNCE_SIZE};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{IoVec, Op};
use fabric_core::{fi_log, Caps, CqEntry, Error, FiAddr, OpFlags, Result};
use fabric_util::iov::{self, gather};
use fabric_util::rx::{msg_flags, RxAction, Target};
use fabric_util::wire::Header;

/// Write a whole inline message entry: its header, then the `len` bytes of `iov`.
#[inline(always)]
fn fill_inline_msg(b: &mut [u8; ENTRY_PAYLOAD], eflags: u8, tag: u64, data: u64, iov: &[IoVec], len: usize) {
    let e = Entry { mode: Mode::Inline, flags: eflags, len: len as u64, tag, data, ..Entry::new(Kind::Msg) };
    e.encode(b);
    let dst = b[proto::HDR..].as_mut_ptr();
    debug_assert!(len <= INLINE_MAX);
    match iov {
        // SAFETY: the entry has INLINE_MAX >= len bytes after the header (the
        // caller's check); the piece (len bytes) is valid for reads under the post
        // contract.
        [v] => unsafe { fabric_util::iov::copy_bytes(v.base, dst, len) },
        // SAFETY: as above, for the pieces.
        _ => unsafe { gather_cold(iov, dst, len) },
    }
}

/// [`fill_inline_msg`]'s copy of several pieces (out of line: one is the rule).
///
/// # Safety
/// As [`gather`]'s: `dst` has room for `len` bytes, and the pieces, `len` bytes in
/// all, are valid for reads.
#[cold]
#[inline(never)]
unsafe fn gather_cold(iov: &[IoVec], dst: *mut u8, len: usize) {
    // SAFETY: the contract of this function is `gather`'s.
    unsafe { gather(iov, 0, dst, len) }
}

impl ShmEp {
    /// A send or an inject (`inject`: its payload). The common case, one piece that
    /// goes inline, without remote CQ data, into the ring of the last destination
    /// ([`tx_last`](Self::tx_last), which also stands for the endpoint's state), is
    /// all here; anything else goes through [`send_general`](Self::send_general).
    /// Inlined into each caller, so that a send does not test for an inject's
    /// payload.
    #[inline(always)]
    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        let data_iov = inject.map(|d| [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }]);
        let iov: &[IoVec] = match &data_iov {
            Some(v) => v,
            None => op.iov,
        };
        // FI_DELIVERY_COMPLETE (a send as a large message whatever its size: see
        // `send_general`; an inject ignores it) and remote CQ data go the general way.
        let general = if inject.is_none() {
            OpFlags::DELIVERY_COMPLETE | OpFlags::REMOTE_CQ_DATA
        } else {
            OpFlags::REMOTE_CQ_DATA
        };
        if let [v] = iov {
            let len = v.len;
            if len <= INLINE_MAX && !flags.intersects(general) {
                if let Some(t) = Self::tx_last(g, op.addr) {
                    if let Some(mut r) = t.prod.reserve() {
                        let tagged = flags.contains(OpFlags::TAGGED);
                        let eflags = if tagged { flags::TAGGED } else { 0 };
                        // The header and the payload, written in place into the ring's
                        // entry.
                        fill_inline_msg(r.payload(), eflags, op.tag, 0, iov, len);
                        r.publish();
                        Self::wake_tx(t);
                        self.send_done(g, op.context, Caps::SEND | msg_flags(tagged), len, flags, inject.is_some());
                        return Ok(());
                    }
                }
            }
        }
        self.send_general(g, op, flags, inject.is_some(), iov)
    }

    /// A send (or inject) of one piece `v` that fits a bounce buffer, when the peer
    /// behind `op.addr` is cached with a path to it, its ring has room and one of our
    /// bounce buffers there is free: the payload into the buffer, the entry into the
    /// ring, and the send complete. False (nothing done) otherwise.
    #[inline(always)]
    fn send_bounce_cached(&self, g: &mut Inner, op: &Op<'_>, flags: OpFlags, inject: bool, v: &IoVec) -> bool {
        let Some(t) = Self::tx_cached(g, op.addr) else { return false };
        let (eflags, data) = Self::msg_eflags(op, flags);
        let e = Entry { flags: eflags, tag: op.tag, data, ..Entry::new(Kind::Msg) };
        if !Self::bounce_on(t, e, std::slice::from_ref(v), v.len) {
            return false;
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        self.send_done(g, op.context, Caps::SEND | msg_flags(tagged), v.len, flags, inject);
        true
    }

    /// The entry flags and the remote CQ data of a message.
    #[inline(always)]
    fn msg_eflags(op: &Op<'_>, flags: OpFlags) -> (u8, u64) {
        let mut eflags = if flags.contains(OpFlags::TAGGED) { flags::TAGGED } else { 0 };
        let mut data = 0;
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            eflags |= flags::CQ_DATA;
            data = op.data;
        }
        (eflags, data)
    }

    /// [`send_common`](Self::send_common) for everything but its common case: an
    /// endpoint not ready (or without a transmit queue, for a send), several pieces, a
    /// payload that does not go inline (or `FI_DELIVERY_COMPLETE`), remote CQ data, a
    /// destination other than the last, or a full ring.
    #[inline(never)]
    fn send_general(&self, g: &mut Inner, op: &Op<'_>, flags: OpFlags, inject: bool, iov: &[IoVec]) -> Result<()> {
        self.check_ready(g, !inject)?;
        // FI_DELIVERY_COMPLETE: as a large message whatever its size, which
        // completes on the receiver's `Ack`, sent once the data is in the receive.
        let dc = !inject && flags.contains(OpFlags::DELIVERY_COMPLETE);
        // One piece for a bounce buffer, to a peer we have a path to: the bounce
        // buffer's common case, without the general path's lookups and gathering.
        if let [v] = iov {
            if !dc && v.len > INLINE_MAX && v.len <= BOUNCE_SIZE && self.send_bounce_cached(g, op, flags, inject, v) {
                return Ok(());
            }
        }
        if iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        // One piece (the common case) without the general sum's loop.
        let len = match iov {
            [v] => v.len,
            _ => IoVec::total(iov),
        };
        if len > INLINE_MAX || dc {
            return self.send_not_inline(g, op, flags, inject, iov, len);
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        let (eflags, data) = Self::msg_eflags(op, flags);
        let tag = op.tag;
        // The header and the payload, written in place into the ring's entry.
        let pushed = match Self::tx_cached(g, op.addr) {
            Some(t) => match t.prod.reserve() {
                Some(mut r) => {
                    fill_inline_msg(r.payload(), eflags, tag, data, iov, len);
                    r.publish();
                    Self::wake_tx(t);
                    true
                }
                None => false,
            },
            None => false,
        };
        if !pushed {
            let id = self.peer_for(g, op.addr)?;
            let mut entry = [0u8; ENTRY_PAYLOAD];
            fill_inline_msg(&mut entry, eflags, tag, data, iov, len);
            if !Self::push_now(g, id, &entry) {
                return self.queue_inline(g, id, op, flags, inject, entry, len);
            }
        }
        self.send_done(g, op.context, Caps::SEND | msg_flags(tagged), len, flags, inject);
        Ok(())
    }

    /// [`send_common`](Self::send_common) for an inline message (`entry`) that
    /// could not go into the peer's ring now: queue it. A queued send completes only
    /// once its entry is in the peer's ring ([`OpKind::Eager`]); an inject, which
    /// has no completion to delay, is counted now ([`Then::Inject`]).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn queue_inline(
        &self,
        g: &mut Inner,
        id: PeerId,
        op: &Op<'_>,
        flags: OpFlags,
        inject: bool,
        entry: [u8; ENTRY_PAYLOAD],
        len: usize,
    ) -> Result<()> {
        let cq_flags = Caps::SEND | msg_flags(flags.contains(OpFlags::TAGGED));
        let then =
            if inject { Then::Inject } else { Then::Complete(Self::eager_op(g, id, op.context, cq_flags, len, flags)) };
        self.queue(g, id, Pending::Entry { entry, then });
        if inject {
            self.send_done(g, op.context, cq_flags, len, flags, true);
        }
        Ok(())
    }

    /// The operation of a send queued with a copy of its payload, which completes
    /// when its entry is in the peer's ring.
    fn eager_op(g: &mut Inner, id: PeerId, context: u64, cq_flags: Caps, len: usize, flags: OpFlags) -> u64 {
        g.ops.insert(TxOp {
            peer: id,
            kind: OpKind::Eager,
            context,
            flags: cq_flags,
            len,
            iov: [NULL_IOV; IOV_LIMIT],
            niov: 0,
            silent: false,
            comp: flags.contains(OpFlags::COMPLETION),
            sent: None,
        })
    }

    /// A send completed when posted: its completion (or, for an inject, its count).
    #[inline(always)]
    fn send_done(&self, g: &Inner, context: u64, cq_flags: Caps, len: usize, flags: OpFlags, inject: bool) {
        if !inject {
            let mut c = CqEntry::new(context, cq_flags);
            c.len = len;
            g.b.tx_done(c, flags.contains(OpFlags::COMPLETION));
        } else {
            g.b.tx_count(false);
        }
    }

    /// [`send_common`](Self::send_common) for a payload that does not go inline (or
    /// a send with `FI_DELIVERY_COMPLETE`): through a bounce buffer, or announced
    /// for the receiver to fetch.
    #[inline(never)]
    fn send_not_inline(
        &self,
        g: &mut Inner,
        op: &Op<'_>,
        flags: OpFlags,
        inject: bool,
        iov: &[IoVec],
        len: usize,
    ) -> Result<()> {
        let tagged = flags.contains(OpFlags::TAGGED);
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
        let dc = !inject && flags.contains(OpFlags::DELIVERY_COMPLETE);
        if len <= BOUNCE_SIZE && !dc {
            // Complete only once the payload is in the peer's segment (as for
            // inline messages: see `queue_inline`).
            if Self::bounce_now(g, id, e, iov, len) {
                self.send_done(g, op.context, cq_flags, len, flags, inject);
            } else {
                let payload = Self::copy_payload(g, iov, len);
                let then = if inject {
                    Then::Inject
                } else {
                    Then::Complete(Self::eager_op(g, id, op.context, cq_flags, len, flags))
                };
                self.queue(g, id, Pending::Bounce { entry: e, payload, then });
                if inject {
                    self.send_done(g, op.context, cq_flags, len, flags, true);
                }
            }
            return Ok(());
        }
        if inject {
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
        if !g.recv_ok {
            // The error it is: not ready, or no receive queue.
            g.b.check_recv(g.ready)?;
        }
        g.rx.post(&g.b, op, flags, op.addr)?;
        self.run_rx_actions(g);
        Ok(())
    }

    /// Put on the wire what the receive engine asks for (usually nothing: one
    /// compare, the rest out of line).
    #[inline(always)]
    pub(super) fn run_rx_actions(&self, g: &mut Inner) {
        if g.rx.has_actions() {
            self.run_rx_actions_slow(g);
        }
    }

    /// [`run_rx_actions`](Self::run_rx_actions) when there are some.
    #[inline(never)]
    fn run_rx_actions_slow(&self, g: &mut Inner) {
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
                    fi_log!(Level::Info, NAME, "ep_data", "copy of a {} byte message failed: {e}", hdr.len);
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

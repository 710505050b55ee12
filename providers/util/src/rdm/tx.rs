//! The initiator's side: posting sends, RMA and atomics as frames, and completing
//! them as their frames are sent and their answers come in.
//!
//! An operation kept in the table completes when every step it waits for is done
//! (`TxOp::pending`): each of its frames sent (so user memory a frame points at is
//! never let go while a transport may still read it) and each answer in. The first
//! error of any step is the operation's.

use super::{Ctx, Done, Engine, Frame, OpKind, PeerRx, RtsPayload, TxOp, NULL_IOV};
use crate::atomic::{copy_operands, AtomicLens};
use crate::bind::Bindings;
use crate::iov;
use crate::rx::{msg_flags, IOV_LIMIT};
use crate::wire::{AtomicHdr, HdrFlags, Header, OpCode, RmaDesc, ATOMIC_MAX, HDR_LEN, RMA_CHUNK};
use fabric_core::atomic::AtomicKind;
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, IoVec, Op, RmaOp};
use fabric_core::{fi_log, Caps, CqEntry, Error, FiAddr, OpFlags, Result};
use std::fmt;

/// Recycled inject buffers kept.
const POOL_MAX: usize = 64;

/// Check an atomic as posted (operation, type, count, buffer lengths, operand
/// sizes the wire carries): its lengths, or `FI_EINVAL`/`FI_EOPNOTSUPP`.
pub fn check_atomic(a: &AtomicDesc) -> Result<AtomicLens> {
    let max = crate::atomic::valid(a.op, a.datatype, a.kind)?;
    let l = crate::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
    if a.count == 0 || a.count > max || a.rma.len != l.target {
        return Err(Error::Inval);
    }
    if a.operand.len < l.operand || a.compare.len < l.compare || a.result.len < l.result {
        return Err(Error::Inval);
    }
    if l.operand > ATOMIC_MAX || l.compare > ATOMIC_MAX {
        return Err(Error::Inval);
    }
    Ok(l)
}

/// What [`Engine::send_now`] did with a send.
#[derive(Debug)]
pub enum SendNow {
    /// Not an eager message: queued as [`Engine::post_send`] queues it.
    Queued,
    /// Written whole; the send is complete.
    Done,
    /// Written in part: the frame went to the transport with the bytes of it
    /// written (header included). Its sending ([`Engine::frame_done`])
    /// completes the send.
    Partial,
}

/// The header of a message of `len` bytes posted as `op` with `flags`.
fn msg_header(op: &Op<'_>, flags: OpFlags, len: usize) -> Header {
    let mut hf = if flags.contains(OpFlags::TAGGED) { HdrFlags::TAGGED } else { 0 };
    if flags.contains(OpFlags::REMOTE_CQ_DATA) {
        hf |= HdrFlags::CQ_DATA;
    }
    Header { op: OpCode::Msg, flags: HdrFlags(hf), len: len as u64, tag: op.tag, data: op.data, id: 0 }
}

impl<P: Copy + PartialEq + fmt::Debug> Engine<P> {
    /// Post a send of `op` to `peer` (`flags` as `fi_sendmsg`'s). `inject`: the
    /// data, copied now (no completion; the transmit counter counts it now).
    /// `copy`: the transport asks for an eager send to be copied and completed
    /// now (it delivers the copy reliably; see [`Engine::copied`]).
    pub fn post_send(
        &mut self,
        b: &Bindings,
        peer: P,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
        copy: bool,
    ) -> Result<()> {
        self.post_send_with(b, peer, op, flags, inject, copy, |_| Ok(RtsPayload::default()))
    }

    /// [`Engine::post_send`] for a stream transport with nothing queued to `peer`,
    /// which can write at once: a message that goes by
    /// rendezvous asks `rts` for its announcement's payload (given the message's
    /// pieces); its error fails the post, with nothing queued. `rts` is not
    /// called for an eager message, nor outside fetch mode.
    #[allow(clippy::too_many_arguments)]
    pub fn post_send_with(
        &mut self,
        b: &Bindings,
        peer: P,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
        copy: bool,
        rts: impl FnOnce(&[IoVec]) -> Result<RtsPayload>,
    ) -> Result<()> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        let hdr = msg_header(op, flags, len);
        let cq_flags = Caps::SEND | msg_flags(tagged);
        let comp = flags.contains(OpFlags::COMPLETION);
        // FI_DELIVERY_COMPLETE: by rendezvous whatever the size, completing on
        // the receiver's acknowledgement that the data is in the receive.
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        let frame = if let Some(d) = inject {
            b.tx_count(false);
            self.inject_frame(&hdr, d)
        } else if len <= self.cfg.eager_max && !dc {
            if copy {
                let mut v = self.pool.pop().unwrap_or_default();
                v.reserve(len);
                // SAFETY: the pieces are valid for reads under post_send's
                // contract; `v` is our own empty buffer with room for `len`
                // bytes, all of which `gather` writes before they are counted.
                unsafe {
                    iov::gather(op.iov, 0, v.as_mut_ptr(), len);
                    v.set_len(len);
                }
                self.copied += len;
                let mut e = CqEntry::new(op.context, cq_flags);
                e.len = len;
                b.tx_done(e, comp);
                Frame::owned(&hdr, &[], v, Done::Copied(len))
            } else {
                // The common send: built straight into the queue.
                let done = Done::Send { context: op.context, flags: cq_flags, len, comp };
                self.out.push_back((peer, Frame::build(&hdr, &[], op.iov, done, &mut self.spare)));
                return Ok(());
            }
        } else {
            // Fetch mode: the receiver reads the data and its `Cts` comes once
            // the data is in the receive, which a delivery-complete send waits for.
            let (payload, keep) = match self.fetch {
                true => {
                    let r = rts(op.iov)?;
                    (Some(r.bytes), r.keep)
                }
                false => (None, None),
            };
            let dc = dc && !self.fetch;
            let mut src = [NULL_IOV; IOV_LIMIT];
            src[..op.iov.len()].copy_from_slice(op.iov);
            let id = self.ops.insert(TxOp {
                peer,
                kind: OpKind::Send,
                context: op.context,
                flags: cq_flags,
                len,
                src,
                nsrc: op.iov.len(),
                dst: [NULL_IOV; IOV_LIMIT],
                ndst: 0,
                hdr,
                silent: false,
                comp,
                dc,
                announced: true,
                // The `Rts` sent, and its answer in.
                pending: 2,
                got: 0,
                err: None,
                prov_errno: 0,
                keep,
            });
            let mut rts = Header { op: OpCode::Rts, id, ..hdr };
            if dc {
                rts.flags.0 |= HdrFlags::DC;
            }
            match payload {
                Some(p) => Frame::owned(&rts, &[], p, Done::Op(id)),
                None => Frame::new(&rts, &[], &[], Done::Op(id)),
            }
        };
        self.out.push_back((peer, frame));
        Ok(())
    }

    /// [`Engine::post_send`] for a stream transport that can write to `peer` at
    /// once (nothing of the peer's is queued before it): an eager message is
    /// handed to `write` (its encoded header, then its payload pieces), which
    /// returns the bytes the stream took (an error counts as none). Taken whole,
    /// the send completes now, with no frame and nothing kept; taken in part,
    /// its frame and the bytes written go to `park`, for the transport to write
    /// the rest of before anything else to that peer ([`SendNow::Partial`]). Any
    /// other message is queued as [`Engine::post_send`] queues it
    /// ([`SendNow::Queued`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn send_now(
        &mut self,
        b: &Bindings,
        peer: P,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
        write: impl FnOnce(&[u8; HDR_LEN], &[IoVec]) -> Result<usize>,
        park: impl FnOnce(Frame, usize),
    ) -> Result<SendNow> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = match (inject, op.iov) {
            (Some(d), _) => d.len(),
            (None, [v]) => v.len,
            (None, iov) => IoVec::total(iov),
        };
        let eager = inject.is_some() || len <= self.cfg.eager_max && !flags.contains(OpFlags::DELIVERY_COMPLETE);
        if !eager {
            return self.send_later(b, peer, op, flags, inject);
        }
        // Only the encoded header lives on: a partial write builds its frame's
        // header again (out of line), so the fast path keeps no decoded copy.
        let head = msg_header(op, flags, len).encode();
        let piece;
        let pieces = match inject {
            Some(d) => {
                b.tx_count(false);
                // Only read by `write`, during the call.
                piece = IoVec { base: d.as_ptr() as *mut u8, len: d.len() };
                std::slice::from_ref(&piece)
            }
            None => op.iov,
        };
        // One call site: the transport's write is inlined here.
        let wrote = write(&head, pieces).unwrap_or(0);
        if wrote >= HDR_LEN + len {
            if inject.is_none() {
                let mut e = CqEntry::new(op.context, Caps::SEND | msg_flags(flags.contains(OpFlags::TAGGED)));
                e.len = len;
                b.tx_done(e, flags.contains(OpFlags::COMPLETION));
            }
            return Ok(SendNow::Done);
        }
        park(self.partial_frame(op, flags, inject, len), wrote);
        Ok(SendNow::Partial)
    }

    /// The frame of an injected message of header `hdr`: its data `d` copied into
    /// a pooled buffer; nothing completes when it is written.
    fn inject_frame(&mut self, hdr: &Header, d: &[u8]) -> Frame {
        let mut v = self.pool.pop().unwrap_or_default();
        v.extend_from_slice(d);
        Frame::owned(hdr, &[], v, Done::Nothing)
    }

    /// [`Engine::send_now`] of a message that is not eager: queued.
    #[cold]
    #[inline(never)]
    fn send_later(
        &mut self,
        b: &Bindings,
        peer: P,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
    ) -> Result<SendNow> {
        self.post_send(b, peer, op, flags, inject, false)?;
        Ok(SendNow::Queued)
    }

    /// The frame of [`Engine::send_now`]'s eager message of `len` bytes, written
    /// in part: its payload copied (an inject) or its pieces kept.
    #[cold]
    #[inline(never)]
    fn partial_frame(&mut self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>, len: usize) -> Frame {
        let hdr = &msg_header(op, flags, len);
        match inject {
            Some(d) => self.inject_frame(hdr, d),
            None => {
                let cq_flags = Caps::SEND | msg_flags(flags.contains(OpFlags::TAGGED));
                let comp = flags.contains(OpFlags::COMPLETION);
                Frame::build(
                    hdr,
                    &[],
                    op.iov,
                    Done::Send { context: op.context, flags: cq_flags, len, comp },
                    &mut self.spare,
                )
            }
        }
    }

    /// Post a receive (`src`: the source filter, resolved), and answer what it
    /// matched.
    #[inline(always)]
    pub fn post_recv(&mut self, b: &Bindings, op: &Op<'_>, flags: OpFlags, src: FiAddr) -> Result<()> {
        self.rx.post(b, op, flags, src)?;
        self.run_rx_actions();
        Ok(())
    }

    /// Post an RMA write or read to `peer`: requests of at most [`RMA_CHUNK`]
    /// bytes under one id, answered in order. `inject`: a write's data, copied now
    /// (no completion; counted once the target answered).
    pub fn post_rma(
        &mut self,
        b: &Bindings,
        peer: P,
        op: &RmaOp<'_>,
        flags: OpFlags,
        read: bool,
        inject: Option<&[u8]>,
    ) -> Result<()> {
        let _ = b;
        let [rma] = op.rma else { return Err(Error::Inval) };
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if rma.len != len {
            return Err(Error::Inval);
        }
        let chunks = len.div_ceil(RMA_CHUNK).max(1);
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[..op.iov.len()].copy_from_slice(op.iov);
        let id = self.ops.insert(TxOp {
            peer,
            kind: if read { OpKind::Read } else { OpKind::Write },
            context: op.context,
            flags: Caps::RMA | if read { Caps::READ } else { Caps::WRITE },
            len,
            src: [NULL_IOV; IOV_LIMIT],
            nsrc: 0,
            dst: if read { local } else { [NULL_IOV; IOV_LIMIT] },
            ndst: if read { op.iov.len() } else { 0 },
            hdr: Header::new(OpCode::Msg),
            silent: inject.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
            dc: false,
            announced: false,
            // Each request sent, and each answered.
            pending: 2 * chunks as u32,
            got: 0,
            err: None,
            prov_errno: 0,
            keep: None,
        });
        for c in 0..chunks {
            let off = c * RMA_CHUNK;
            let n = (len - off).min(RMA_CHUNK);
            let last = c + 1 == chunks;
            let mut hf = if last { HdrFlags::LAST } else { 0 };
            let addr = rma.addr.wrapping_add(off as u64);
            let frame = if read {
                let h = Header {
                    len: n as u64,
                    flags: HdrFlags(hf),
                    tag: addr,
                    data: rma.key,
                    id,
                    ..Header::new(OpCode::ReadReq)
                };
                Frame::new(&h, &[], &[], Done::Op(id))
            } else {
                let cq_data = last && flags.contains(OpFlags::REMOTE_CQ_DATA);
                if cq_data {
                    hf |= HdrFlags::CQ_DATA;
                }
                let h = Header {
                    len: (RmaDesc::LEN + n) as u64,
                    flags: HdrFlags(hf),
                    // The whole operation's length: its first request lets the
                    // target check the whole range before any byte lands.
                    tag: len as u64,
                    data: if cq_data { op.data } else { 0 },
                    id,
                    ..Header::new(OpCode::WriteReq)
                };
                let desc = RmaDesc { addr, key: rma.key }.encode();
                match inject {
                    Some(d) => {
                        let mut v = self.pool.pop().unwrap_or_default();
                        v.extend_from_slice(&d[off..off + n]);
                        Frame::owned(&h, &desc, v, Done::Op(id))
                    }
                    None => {
                        let (pieces, k) = iov::slice(op.iov, off as u64, n as u64);
                        Frame::build(&h, &desc, &pieces[..k], Done::Op(id), &mut self.spare)
                    }
                }
            };
            self.out.push_back((peer, frame));
        }
        Ok(())
    }

    /// Post an atomic to `peer`: with `inject` its operands are copied now; with
    /// `flags` [`OpFlags::silent`] its completion is not reported (counters count
    /// it), else it is when `flags` has `COMPLETION` or the queue is not selective.
    pub fn post_atomic(&mut self, peer: P, a: &AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        let l = check_atomic(a)?;
        let mut dst = [NULL_IOV; IOV_LIMIT];
        dst[0] = IoVec { base: a.result.base, len: l.result };
        let id = self.ops.insert(TxOp {
            peer,
            kind: OpKind::Atomic,
            context: a.context,
            flags: Caps::ATOMIC | if a.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ },
            len: l.target,
            src: [NULL_IOV; IOV_LIMIT],
            nsrc: 0,
            dst,
            ndst: usize::from(l.result > 0),
            hdr: Header::new(OpCode::Msg),
            silent: flags.silent(),
            comp: flags.contains(OpFlags::COMPLETION),
            dc: false,
            announced: false,
            pending: 2,
            got: 0,
            err: None,
            prov_errno: 0,
            keep: None,
        });
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let ah = AtomicHdr { op: a.op as u8, datatype: a.datatype as u8, kind, count: a.count as u32 };
        let mut prefix = [0u8; RmaDesc::LEN + AtomicHdr::LEN];
        prefix[..RmaDesc::LEN].copy_from_slice(&RmaDesc { addr: a.rma.addr, key: a.rma.key }.encode());
        prefix[RmaDesc::LEN..].copy_from_slice(&ah.encode());
        let h = Header {
            len: (prefix.len() + l.operand + l.compare) as u64,
            flags: HdrFlags(HdrFlags::LAST),
            id,
            ..Header::new(OpCode::AtomicReq)
        };
        let frame = if inject {
            // SAFETY: the operands are valid for reads during the call (inject contract).
            Frame::owned(&h, &prefix, unsafe { copy_operands(a, &l) }, Done::Op(id))
        } else {
            let pieces =
                [IoVec { base: a.operand.base, len: l.operand }, IoVec { base: a.compare.base, len: l.compare }];
            Frame::build(&h, &prefix, &pieces, Done::Op(id), &mut self.spare)
        };
        self.out.push_back((peer, frame));
        Ok(())
    }

    /// Frame `f` to `peer` was sent (for a stream: written; for a reliable
    /// channel: acknowledged). `pr`: the peer's state, where it still has some.
    #[inline]
    pub fn frame_done(&mut self, cx: Ctx<'_>, peer: P, pr: Option<&mut PeerRx>, mut f: Frame) {
        self.frame_done_in(cx, peer, pr, &mut f);
    }

    /// [`Engine::frame_done`] for a frame the transport keeps (and drops
    /// after): completes what waited for `f` and takes back its buffers (its
    /// owned payload and piece list, left empty), without moving the frame.
    pub fn frame_done_in(&mut self, cx: Ctx<'_>, peer: P, pr: Option<&mut PeerRx>, f: &mut Frame) {
        match f.done {
            Done::Nothing | Done::Cleared(_) => {}
            Done::Send { context, flags, len, comp } => {
                let mut e = CqEntry::new(context, flags);
                e.len = len;
                cx.b.tx_done(e, comp);
            }
            Done::Op(id) => self.step(cx.b, id, None),
            Done::Copied(n) => self.copied = self.copied.saturating_sub(n),
            Done::Answer => {
                if let Some(pr) = pr {
                    pr.answers.taken(f.total);
                    // Read requests that waited for room may be answered now.
                    self.serve_waiting(cx, pr, peer);
                }
            }
        }
        if let Some(v) = f.owned.take() {
            self.recycle(v);
        }
        self.recycle_pieces(f);
    }

    /// Frame `f` to `peer` will not be sent (`err`: why).
    pub fn frame_failed(&mut self, b: &Bindings, peer: P, f: Frame, err: Error) {
        self.frame_failed_prov(b, peer, f, err, 0);
    }

    /// [`Engine::frame_failed`] with the transport's own error number
    /// (verbs: the work completion's status), reported with the error
    /// completions of the sends and operations it fails.
    pub fn frame_failed_prov(&mut self, b: &Bindings, peer: P, mut f: Frame, err: Error, prov_errno: i32) {
        match f.done {
            Done::Nothing | Done::Answer => {}
            Done::Send { context, flags, len, .. } => {
                let mut e = CqEntry::new(context, flags);
                e.len = len;
                b.tx_err_prov(e, err, prov_errno);
            }
            Done::Op(id) => self.step_prov(b, id, Some(err), prov_errno),
            Done::Copied(n) => {
                // Its send completed when posted, from this copy.
                self.copied = self.copied.saturating_sub(n);
                fi_log!(
                    Level::Info,
                    self.cfg.name,
                    "ep_data",
                    "a send that had completed (its data copied) failed later: {err}"
                );
            }
            Done::Cleared(id) => {
                if let Some(w) = self.rndv_in.cancel(peer, id) {
                    self.rx.fail(b, w.target, &w.hdr, w.src, err);
                }
            }
        }
        if let Some(v) = f.owned.take() {
            self.recycle(v);
        }
        self.recycle_pieces(&mut f);
    }

    /// Keep the piece list of a frame with several pieces for the next one.
    fn recycle_pieces(&mut self, f: &mut Frame) {
        if f.more.capacity() > 0 && self.spare.len() < POOL_MAX {
            let mut m = std::mem::take(&mut f.more);
            m.clear();
            self.spare.push(m);
        }
    }

    fn recycle(&mut self, mut v: Vec<u8>) {
        if self.pool.len() < POOL_MAX && v.capacity() <= self.cfg.eager_max.max(4096) {
            v.clear();
            self.pool.push(v);
        }
    }

    /// One step of operation `id` is done (with `err`, if it failed); the
    /// operation completes when none is left.
    pub(super) fn step(&mut self, b: &Bindings, id: u64, err: Option<Error>) {
        self.step_prov(b, id, err, 0);
    }

    /// [`Engine::step`], with the transport's error number of `err`.
    fn step_prov(&mut self, b: &Bindings, id: u64, err: Option<Error>, prov_errno: i32) {
        let Some(op) = self.ops.get_mut(id) else { return };
        if op.err.is_none() && err.is_some() {
            op.err = err;
            op.prov_errno = prov_errno;
        }
        op.pending = op.pending.saturating_sub(1);
        if op.pending > 0 {
            return;
        }
        let Some(mut op) = self.ops.remove(id) else { return };
        // What the transport kept for the operation goes before its completion.
        op.keep = None;
        if op.silent {
            if let Some(e) = op.err {
                fi_log!(Level::Warn, self.cfg.name, "ep_data", "an injected operation failed at the target: {e}");
            }
            b.tx_count(op.err.is_some());
            return;
        }
        let mut e = CqEntry::new(op.context, op.flags);
        e.len = op.len;
        match op.err {
            None => b.tx_done(e, op.comp),
            Some(err) => b.tx_err_prov(e, err, op.prov_errno),
        }
    }

    /// Complete operation `id` now with `err` (or its first error), whatever it
    /// still waited for.
    pub(super) fn fail_op(&mut self, b: &Bindings, id: u64, err: Error, prov_errno: i32) {
        if let Some(op) = self.ops.get_mut(id) {
            op.pending = 1;
        }
        self.step_prov(b, id, Some(err), prov_errno);
    }

    /// `Cts` from `peer` for our announced send `id`: its data goes now (fetch
    /// mode: the receiver has fetched it, with `errno` if it failed; the send
    /// completes).
    pub(super) fn on_cts(
        &mut self,
        b: &Bindings,
        peer: P,
        id: u64,
        errno: u64,
    ) -> std::result::Result<(), super::Violation> {
        let Some(o) = self.ops.get_mut(id).filter(|o| o.peer == peer && o.kind == OpKind::Send && o.announced) else {
            return Err(super::Violation::proto(format!("clear to send for no message of ours ({id:#x})")));
        };
        o.announced = false;
        if self.fetch {
            let err = (errno != 0).then(|| Error::from_errno(errno.min(i32::MAX as u64) as i32));
            self.step(b, id, err);
            return Ok(());
        }
        // The data frame sent, and the receiver's `Ack` for a delivery-complete send.
        o.pending += 1 + u32::from(o.dc);
        let mut h = Header { op: OpCode::Data, id, ..o.hdr };
        h.flags.0 &= !HdrFlags::DC;
        let f = Frame::build(&h, &[], &o.src[..o.nsrc], Done::Op(id), &mut self.spare);
        self.out.push_back((peer, f));
        self.step(b, id, None);
        Ok(())
    }

    /// `Nack` from `peer`: the receiver discarded our send `id`, which completes.
    pub(super) fn on_nack(&mut self, b: &Bindings, peer: P, id: u64) -> std::result::Result<(), super::Violation> {
        let Some(o) = self.ops.get_mut(id).filter(|o| o.peer == peer && o.kind == OpKind::Send && o.announced) else {
            return Err(super::Violation::proto(format!("discard of no message of ours ({id:#x})")));
        };
        o.announced = false;
        self.step(b, id, None);
        Ok(())
    }

    /// `Ack` from `peer`: the receiver has the data of our delivery-complete send
    /// `id` (or its receive failed with `errno`).
    pub(super) fn on_ack(
        &mut self,
        b: &Bindings,
        peer: P,
        id: u64,
        errno: u64,
    ) -> std::result::Result<(), super::Violation> {
        let Some(o) = self.ops.get_mut(id).filter(|o| o.peer == peer && o.kind == OpKind::Send && o.dc && !o.announced)
        else {
            return Err(super::Violation::proto(format!("delivery acknowledgement for no send of ours ({id:#x})")));
        };
        // Only one acknowledgement per send.
        o.dc = false;
        let err = (errno != 0).then(|| Error::from_errno(errno.min(i32::MAX as u64) as i32));
        self.step(b, id, err);
        Ok(())
    }
}

//! Frames coming in: where each frame's payload goes once its header is in
//! ([`Engine::begin`]), its bytes ([`Engine::write`], or straight into memory
//! through [`Engine::pieces`] and [`Engine::advance`]), and what its end does
//! ([`Engine::end`]).

use super::{Ctx, Dest, Engine, Fetch, Frame, InFrame, OpKind, PeerRx, RndvIn, RtsRef, Violation, NULL_IOV};
use crate::bind::Bindings;
use crate::matcher::MsgSpec;
use crate::rx::{RxAction, Unexp, UnexpBody, IOV_LIMIT};
use crate::wire::{HdrFlags, Header, OpCode, RmaDesc};
use fabric_core::prov::IoVec;
use fabric_core::{Error, FiAddr};
use std::fmt;

/// What the engine made of a frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Its payload follows: give the engine [`PeerRx::remaining`] bytes, then
    /// call [`Engine::end`].
    Payload,
    /// The frame is handled (it has no payload).
    Done,
    /// Not now: the peer is owed too many answers, or an unexpected message
    /// would exceed the buffering limits of a transport that holds
    /// ([`PeerRx::holding`]). Offer the same header again later
    /// (after answers were sent, or a receive was posted); meanwhile take
    /// nothing more from this peer.
    Hold,
    /// Connection control (`Hello`, `HelloAck`, `Reject`, `Shutdown`): the
    /// transport's own.
    Control,
}

impl fmt::Display for Begin {
    /// What became of the frame, in a log line's words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Begin::Payload => "its payload is awaited",
            Begin::Done => "handled",
            Begin::Hold => "held: the peer is owed too many answers or the buffering limits are reached",
            Begin::Control => "connection control",
        })
    }
}

impl<P: Copy + PartialEq + fmt::Debug> Engine<P> {
    /// The header of a frame from `peer` (reported as source `src`) is in.
    pub fn begin(
        &mut self,
        cx: Ctx<'_>,
        pr: &mut PeerRx,
        peer: P,
        src: FiAddr,
        hdr: Header,
    ) -> Result<Begin, Violation> {
        if pr.arriving.is_some() {
            return Err(Violation::proto("a frame began inside another"));
        }
        if matches!(hdr.op, OpCode::ReadReq | OpCode::WriteReq | OpCode::AtomicReq) && pr.answers.full() {
            // Back-pressure: the peer does not take its answers. Its requests
            // wait until it does.
            return Ok(Begin::Hold);
        }
        let dest = match hdr.op {
            OpCode::Hello | OpCode::HelloAck | OpCode::Reject | OpCode::Shutdown => return Ok(Begin::Control),
            OpCode::Msg => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                match self.rx.match_arrival(&m, hdr.len) {
                    Some(target) => Dest::Recv(target),
                    None => match self.unexp_buf(hdr.len, pr.hold)? {
                        Some(buf) => Dest::Unexp(buf),
                        None => return Ok(Begin::Hold),
                    },
                }
            }
            OpCode::Data if self.fetch => return Err(Violation::proto("data frame of a fetched message")),
            OpCode::Data => {
                let (w, _) = self.rndv_in.handle_data(peer, hdr.id, hdr.len).map_err(Violation::proto)?;
                Dest::Rndv(w)
            }
            OpCode::WriteReq => Dest::Write { pre: [0; RmaDesc::LEN], desc: None, err: None },
            OpCode::AtomicReq => {
                let buf = self
                    .rx
                    .unexp_buf(hdr.len as usize)
                    .map_err(|_| Violation { err: Error::NoMem, why: "no memory for an atomic request".into() })?;
                Dest::Stage(buf)
            }
            OpCode::RmaResp => {
                let Some(op) = self.ops.get(hdr.id).filter(|o| o.peer == peer && o.kind != OpKind::Send) else {
                    return Err(Violation::proto(format!("answer for unknown request {:#x}", hdr.id)));
                };
                let base = if op.kind == OpKind::Read { op.got } else { 0 };
                let room = IoVec::total(&op.dst[..op.ndst]).saturating_sub(base);
                if hdr.len > room as u64 {
                    return Err(Violation::proto("answer longer than what was asked"));
                }
                Dest::Resp { op: hdr.id, base }
            }
            OpCode::Rts | OpCode::Cts | OpCode::Nack | OpCode::Ack | OpCode::ReadReq => Dest::Skip,
        };
        pr.arriving = Some(InFrame { hdr, src, dest, off: 0 });
        if hdr.payload_len() == 0 {
            self.end(cx, pr, peer)?;
            return Ok(Begin::Done);
        }
        Ok(Begin::Payload)
    }

    /// A whole frame from `peer`: its header and the `body` after it, for a
    /// transport whose frames arrive whole. [`Engine::begin`], [`Engine::write`]
    /// and [`Engine::end`] at once, except that a fetch-mode `Rts` keeps its
    /// body as the message's `Rts` payload; any other frame's body is its
    /// payload, of the length its header says. `Payload` is never returned.
    #[inline(always)]
    pub fn frame(
        &mut self,
        cx: Ctx<'_>,
        pr: &mut PeerRx,
        peer: P,
        src: FiAddr,
        hdr: Header,
        body: &[u8],
    ) -> Result<Begin, Violation> {
        if self.frame_eager(cx.b, pr, src, &hdr, body) {
            return Ok(Begin::Done);
        }
        self.frame_other(cx, pr, peer, src, hdr, body)
    }

    /// The common half of [`Engine::frame`]: a whole eager message from a peer
    /// with no frame arriving that matches a posted receive lands there at
    /// once (and completes it); `false` for anything else, which is the
    /// transport's to hand to [`Engine::frame_other`]. For a transport whose
    /// fast path keeps what only the rest needs (the peer, the domain) out of
    /// its way.
    #[inline(always)]
    pub fn frame_eager(&mut self, b: &Bindings, pr: &PeerRx, src: FiAddr, hdr: &Header, body: &[u8]) -> bool {
        if hdr.op != OpCode::Msg || pr.arriving.is_some() || body.len() as u64 != hdr.len {
            return false;
        }
        let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
        let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
        self.rx.deliver_eager(b, &m, hdr.len, data, body)
    }

    /// [`Engine::frame`] of a frame [`Engine::frame_eager`] did not take (any
    /// frame but a message matching a posted receive).
    #[inline(never)]
    pub fn frame_other(
        &mut self,
        cx: Ctx<'_>,
        pr: &mut PeerRx,
        peer: P,
        src: FiAddr,
        hdr: Header,
        body: &[u8],
    ) -> Result<Begin, Violation> {
        if self.fetch && hdr.op == OpCode::Rts {
            if pr.arriving.is_some() {
                return Err(Violation::proto("a frame began inside another"));
            }
            self.arrive_rts(cx.b, peer, src, hdr, body.to_vec());
            return Ok(Begin::Done);
        }
        if body.len() as u64 != hdr.payload_len() {
            return Err(Violation::proto(format!(
                "{} frame of {} bytes carries {}",
                hdr.op,
                hdr.payload_len(),
                body.len()
            )));
        }
        match self.begin(cx, pr, peer, src, hdr)? {
            Begin::Payload => {
                self.write(cx, pr, body)?;
                self.end(cx, pr, peer)?;
                Ok(Begin::Done)
            }
            b => Ok(b),
        }
    }

    /// A rendezvous message announced by `peer` (`payload`: its `Rts`
    /// payload, fetch mode) arrives at the receive engine.
    fn arrive_rts(&mut self, b: &Bindings, peer: P, src: FiAddr, hdr: Header, payload: Vec<u8>) {
        let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
        let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
        let r = RtsRef { peer, id: hdr.id, dc: hdr.flags.has(HdrFlags::DC), payload };
        let u = Unexp { body: UnexpBody::Rts(r), len: hdr.len, data, tag: hdr.tag, rma: false };
        self.rx.arrive(b, m, u);
        self.run_rx_actions();
    }

    /// Fetch mode: the transport fetched message `id` of `peer` (a
    /// [`Fetch`]), or failed to (`err`): its receive completes (or fails with
    /// `err`) and `Cts` tells the sender, with the errno. False when the message
    /// is not waiting (its peer was lost, the endpoint closed).
    pub fn fetched(&mut self, b: &Bindings, peer: P, id: u64, err: Option<Error>) -> bool {
        let Some(w) = self.rndv_in.cancel(peer, id) else { return false };
        match err {
            None => self.rx.complete(b, w.target, &w.hdr, w.src, false),
            Some(e) => self.rx.fail(b, w.target, &w.hdr, w.src, e),
        }
        let cts = Header { id, data: err.map_or(0, |e| e.errno() as u64), ..Header::new(OpCode::Cts) };
        self.out.push_back((peer, Frame::control(&cts)));
        true
    }

    /// A buffer for an unexpected eager message of `len` bytes; `None` to hold it.
    fn unexp_buf(&mut self, len: u64, hold: bool) -> Result<Option<Vec<u8>>, Violation> {
        let cfg = self.cfg;
        if len > cfg.unexp_max_one || self.rx.unexpected_len() >= cfg.unexp_max_count {
            if hold {
                return Ok(None);
            }
            return Err(Violation {
                err: Error::MsgSize,
                why: format!(
                    "protocol error: unexpected eager message of {len} bytes (limit {} bytes, {} messages)",
                    cfg.unexp_max_one, cfg.unexp_max_count
                ),
            });
        }
        match self.rx.unexp_buf(len as usize) {
            Ok(b) => Ok(Some(b)),
            Err(_) if hold => Ok(None),
            Err(_) => Err(Violation { err: Error::NoMem, why: "no memory for an unexpected message".into() }),
        }
    }

    /// Payload bytes of the arriving frame, in order.
    pub fn write(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, bytes: &[u8]) -> Result<(), Violation> {
        let Some(f) = pr.arriving.as_mut() else {
            return Err(Violation::proto("payload outside any frame"));
        };
        if f.off + bytes.len() as u64 > f.hdr.payload_len() {
            return Err(Violation::proto("frame longer than its header says"));
        }
        let off = f.off;
        f.off += bytes.len() as u64;
        match &mut f.dest {
            Dest::Recv(target) => self.rx.write(target, off, bytes),
            Dest::Rndv(w) => self.rx.write(&w.target, off, bytes),
            Dest::Unexp(buf) | Dest::Stage(buf) => buf.extend_from_slice(bytes),
            Dest::Write { pre, desc, err } => {
                Self::write_req_bytes(cx, &mut pr.rma, &f.hdr, off, bytes, pre, desc, err)?;
            }
            Dest::Resp { op, base } => {
                if f.hdr.data == 0 {
                    if let Some(o) = self.ops.get(*op) {
                        let dst = &o.dst[..o.ndst];
                        crate::iov::copy_into(dst, IoVec::total(dst), *base as u64 + off, bytes);
                    }
                }
            }
            Dest::Skip => {}
        }
        Ok(())
    }

    /// The memory where the arriving frame's next bytes go, for a transport that
    /// moves them there itself (a socket read): at most [`PeerRx::remaining`]
    /// bytes, in the pieces of `out`; returns how many are used (0: not plain
    /// memory, use [`Engine::write`]). Then call [`Engine::advance`].
    pub fn pieces(&mut self, pr: &mut PeerRx, out: &mut [IoVec; IOV_LIMIT]) -> usize {
        let Some(f) = pr.arriving.as_mut() else { return 0 };
        let remaining = f.hdr.payload_len() - f.off;
        match &mut f.dest {
            Dest::Recv(target) => self.rx.pieces(target, f.off, remaining, out),
            Dest::Rndv(w) => self.rx.pieces(&w.target, f.off, remaining, out),
            Dest::Resp { op, base } if f.hdr.data == 0 => match self.ops.get(*op) {
                Some(o) => crate::iov::slice_into(&o.dst[..o.ndst], *base as u64 + f.off, remaining, out),
                None => 0,
            },
            Dest::Unexp(buf) | Dest::Stage(buf) => {
                let k = (remaining as usize).min(buf.capacity() - buf.len());
                if k == 0 {
                    return 0;
                }
                // The spare capacity, reserved for the whole payload.
                let p = buf.spare_capacity_mut().as_mut_ptr() as *mut u8;
                out[0] = IoVec { base: p, len: k };
                1
            }
            _ => 0,
        }
    }

    /// `n` bytes went into the pieces [`Engine::pieces`] gave.
    ///
    /// # Safety
    /// Those bytes were written (initialized) by the caller, from the start of
    /// the first piece on, and `n` is at most their total.
    pub unsafe fn advance(&mut self, pr: &mut PeerRx, n: usize) {
        let Some(f) = pr.arriving.as_mut() else { return };
        f.off += n as u64;
        if let Dest::Unexp(buf) | Dest::Stage(buf) = &mut f.dest {
            // SAFETY: the caller initialized these n bytes of the spare capacity
            // `pieces` offered, which is reserved.
            unsafe { buf.set_len(buf.len() + n) };
        }
    }

    /// The arriving frame's payload is complete: deliver it.
    pub fn end(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, peer: P) -> Result<(), Violation> {
        let Some(f) = pr.arriving.as_mut() else {
            return Err(Violation::proto("end of no frame"));
        };
        // The destination is moved out once; the rest of the frame is small.
        let (hdr, src, off) = (f.hdr, f.src, f.off);
        let dest = std::mem::replace(&mut f.dest, Dest::Skip);
        pr.arriving = None;
        if off != hdr.payload_len() {
            let why = Violation::proto("frame shorter than its header says");
            self.drop_arriving(cx.b, InFrame { hdr, src, dest, off }, why.err);
            return Err(why);
        }
        match dest {
            Dest::Recv(target) => self.rx.complete(cx.b, target, &hdr, src, false),
            Dest::Unexp(buf) => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let u = Unexp { body: UnexpBody::Eager(buf), len: hdr.len, data, tag: hdr.tag, rma: false };
                // A receive may have been posted while the payload arrived.
                self.rx.arrive(cx.b, m, u);
                self.run_rx_actions();
            }
            Dest::Rndv(w) => {
                self.rx.complete(cx.b, w.target, &w.hdr, w.src, false);
                if w.hdr.flags.has(HdrFlags::DC) {
                    // The data of a FI_DELIVERY_COMPLETE message is in: say so.
                    let ack = Header { id: w.hdr.id, ..Header::new(OpCode::Ack) };
                    self.out.push_back((peer, Frame::control(&ack)));
                }
            }
            Dest::Write { desc, err, .. } => {
                let err = if desc.is_none() { Some(Error::Access) } else { err };
                self.end_write(cx, pr, peer, src, &hdr, err);
            }
            Dest::Stage(buf) => {
                let r = self.serve_atomic(cx, pr, peer, &hdr, &buf);
                self.rx.recycle(buf);
                r?;
            }
            Dest::Resp { op, .. } => {
                let err = (hdr.data != 0).then(|| Error::from_errno(hdr.data.min(i32::MAX as u64) as i32));
                if let Some(o) = self.ops.get_mut(op) {
                    if o.kind == OpKind::Read {
                        o.got += hdr.len as usize;
                    }
                }
                self.step(cx.b, op, err);
            }
            Dest::Skip => match hdr.op {
                OpCode::ReadReq => {
                    // Answered once the peer has room for the answer.
                    if pr.answers.read(hdr) {
                        self.answer_read(cx, pr, peer, hdr)?;
                    }
                }
                OpCode::Rts => self.arrive_rts(cx.b, peer, src, hdr, Vec::new()),
                OpCode::Cts => self.on_cts(cx.b, peer, hdr.id, hdr.data)?,
                OpCode::Nack => self.on_nack(cx.b, peer, hdr.id)?,
                OpCode::Ack => self.on_ack(cx.b, peer, hdr.id, hdr.data)?,
                op => return Err(Violation::proto(format!("{op:?} has no place here"))),
            },
        }
        Ok(())
    }

    /// Answer the rendezvous messages the receive engine matched (`Cts`, the
    /// data to follow) or discarded (`Nack`).
    #[inline]
    pub(super) fn run_rx_actions(&mut self) {
        if self.rx.has_actions() {
            self.run_rx_actions_queued();
        }
    }

    /// [`Engine::run_rx_actions`] when the receive side has some.
    #[inline(never)]
    fn run_rx_actions_queued(&mut self) {
        while let Some(a) = self.rx.take_action() {
            match a {
                RxAction::Start(m) if self.fetch => {
                    // The transport fetches; `fetched` completes the receive.
                    let RtsRef { peer, id, payload, .. } = m.rts;
                    let mut iov = [NULL_IOV; IOV_LIMIT];
                    let niov = self.rx.pieces(&m.target, 0, m.hdr.len, &mut iov);
                    self.rndv_in.clear(peer, id, m.hdr.len, RndvIn { target: m.target, hdr: m.hdr, src: m.src });
                    self.fetches.push_back(Fetch { peer, id, hdr: m.hdr, iov, niov, payload });
                }
                RxAction::Start(m) => {
                    let RtsRef { peer, id, dc, .. } = m.rts;
                    // The data's completion acknowledges it (the flag and the id
                    // stay in our copy of the header, never on the wire again).
                    let mut hdr = m.hdr;
                    if dc {
                        hdr.flags.0 |= HdrFlags::DC;
                        hdr.id = id;
                    }
                    self.rndv_in.clear(peer, id, m.hdr.len, RndvIn { target: m.target, hdr, src: m.src });
                    let cts = Header { id, ..Header::new(OpCode::Cts) };
                    self.out.push_back((peer, Frame::new(&cts, &[], &[], super::Done::Cleared(id))));
                }
                RxAction::Discard(RtsRef { peer, id, .. }) => {
                    let nack = Header { id, ..Header::new(OpCode::Nack) };
                    self.out.push_back((peer, Frame::control(&nack)));
                }
            }
        }
    }
}

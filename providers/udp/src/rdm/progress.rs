//! Progress: datagrams in from the socket and through the peers' channels to the
//! engine, the engine's frames out through the channels to the socket, the
//! channels' acknowledgements and failures back to the engine, keep-alives, and
//! peers lost.
//!
//! | the channel | udp | the engine |
//! |---|---|---|
//! | a segment, `first` | decodes the header | [`Engine::begin`] |
//! | its bytes | | [`Engine::write`] |
//! | `last` | | [`Engine::end`] |
//! | `Event::Acked(id)` | the peer's oldest frame (`Peer::frames`) | [`Engine::frame_done_in`] |
//! | `Event::Failed(id)` | | [`Engine::frame_failed`] |
//! | [`Channel::send`] | the peer's newest frame | [`Engine::poll_transmit`] |

use super::conn::slot;
use super::io;
use super::{Inner, PeerId, UdpRdmEp, KEEPALIVE, MAX_MSG, RECV_BATCH};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::{fi_log, Error, FiAddr};
use fabric_util::iov::gather;
use fabric_util::progress::Progress;
use fabric_util::rdm::{Begin, Ctx, Done, Engine, Frame, PeerRx, Violation};
use fabric_util::reliable::Nanos;
use fabric_util::reliable::{self, Event, Segment};
use fabric_util::wire::{Header, OpCode, HDR_LEN};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

#[cfg(doc)]
use fabric_util::reliable::Channel;

/// Fill `buf` with bytes `off..` of frame `f`: its head, then its payload.
fn fill_frame(f: &Frame, off: usize, buf: &mut [u8]) {
    let mut done = 0;
    if off < f.head_len {
        let k = (f.head_len - off).min(buf.len());
        buf[..k].copy_from_slice(&f.head[off..off + k]);
        done = k;
    }
    if done == buf.len() {
        return;
    }
    let poff = off + done - f.head_len;
    let rest = &mut buf[done..];
    let k = (f.total - f.head_len).saturating_sub(poff).min(rest.len());
    match f.payload() {
        // One piece (an eager message, copied or not): no walk over pieces.
        [p] if poff + k <= p.len => {
            // SAFETY: the piece is valid for reads until the engine hears of
            // this frame (`frame_done` or `frame_failed`), and it has not: the
            // frame is still with the channel. `poff..poff + k` lies within the
            // piece; `rest` is our datagram buffer, `k` bytes of it.
            unsafe { std::ptr::copy_nonoverlapping(p.base.add(poff), rest.as_mut_ptr(), k) };
        }
        // SAFETY: the payload pieces are valid for reads until the engine hears
        // of this frame (`frame_done` or `frame_failed`), and it has not: the
        // frame is still with the channel. `rest` is our datagram buffer, `k`
        // bytes of it.
        pieces => unsafe { gather(pieces, poff, rest.as_mut_ptr(), k) },
    }
    if k < rest.len() {
        rest[k..].fill(0);
    }
}

/// Takes the segments a channel delivers: one peer's view of the engine.
struct Taker<'a> {
    eng: &'a mut Engine<PeerId>,
    cx: Ctx<'a>,
    pr: &'a mut PeerRx,
    broken: &'a mut Option<Violation>,
    peer: PeerId,
    src: FiAddr,
}

impl Taker<'_> {
    /// Take a segment; `false` leaves it (and what follows) with the channel.
    fn segment(&mut self, seg: Segment<'_>) -> bool {
        if self.broken.is_some() {
            return true;
        }
        match self.take(seg) {
            Ok(taken) => taken,
            Err(v) => {
                *self.broken = Some(v);
                true
            }
        }
    }

    fn take(&mut self, seg: Segment<'_>) -> Result<bool, Violation> {
        let mut bytes = seg.bytes;
        if seg.first {
            let Some(head) = bytes.first_chunk::<HDR_LEN>() else {
                return Err(Violation::proto("first segment shorter than a header"));
            };
            let hdr = Header::decode(head, MAX_MSG as u64).map_err(Violation::proto)?;
            bytes = &bytes[HDR_LEN..];
            match self.eng.begin(self.cx, self.pr, self.peer, self.src, hdr)? {
                Begin::Payload => {}
                // Back-pressure: the peer's requests, or an unexpected message
                // past the limits, wait with the channel.
                Begin::Hold => return Ok(false),
                Begin::Done => {}
                Begin::Control => match hdr.op {
                    // The peer closed its endpoint (an empty reason says so).
                    OpCode::Shutdown => *self.broken = Some(Violation { err: Error::ConnReset, why: String::new() }),
                    // A keep-alive: nothing to do.
                    OpCode::Hello if hdr.len == 0 => {}
                    op => return Err(Violation::proto(format!("frame {op} is not used over udp"))),
                },
            }
            if !self.pr.arriving() {
                // The frame is whole (it has no payload).
                if !bytes.is_empty() {
                    return Err(Violation::proto("frame longer than its header says"));
                }
                return Ok(true);
            }
        }
        self.eng.write(self.cx, self.pr, bytes)?;
        if seg.last {
            self.eng.end(self.cx, self.pr, self.peer)?;
        }
        Ok(true)
    }
}

impl UdpRdmEp {
    /// Give a frame to a peer's channel; when it cannot be sent (the peer is
    /// gone, its channel failed), what waited for it fails, with the error
    /// returned.
    #[inline]
    pub(super) fn queue_frame(&self, g: &mut Inner, peer: PeerId, f: Frame, now: Nanos) -> Result<(), Error> {
        // A completion waits for this frame's acknowledgement (an eager send, a
        // rendezvous send's data): the peer acknowledges it at once.
        let awaited = match f.done {
            Done::Send { .. } => true,
            Done::Op(_) => f.op == OpCode::Data,
            _ => false,
        };
        let send = f.op == OpCode::Msg;
        let len = f.total;
        let Inner { peers, sends, eng, b, .. } = g;
        let Some(p) = slot(peers, peer) else {
            eng.frame_failed(b, peer, f, Error::ConnReset);
            return Err(Error::ConnReset);
        };
        let fid = p.next_fid;
        let r = if awaited { p.chan.send_awaited(now, fid, len) } else { p.chan.send(now, fid, len) };
        if r.is_err() {
            eng.frame_failed(b, peer, f, Error::HostUnreach);
            return Err(Error::HostUnreach);
        }
        p.next_fid += 1;
        p.frames.push_back(f);
        if send {
            *sends += 1;
        }
        Ok(())
    }

    /// Give the engine's frames to their peers' channels, and transmit.
    #[inline]
    pub(super) fn pump(&self, g: &mut Inner, now: Nanos) {
        if g.eng.wants_transmit() {
            self.pump_frames(g, now);
        }
    }

    #[inline(never)]
    fn pump_frames(&self, g: &mut Inner, now: Nanos) {
        // The peer given the last frame; the others in `touched` (the common
        // case, one peer, leaves it empty).
        let mut last: Option<PeerId> = None;
        while let Some((peer, f)) = g.eng.poll_transmit() {
            if self.queue_frame(g, peer, f, now).is_ok() && last != Some(peer) {
                if let Some(l) = last.replace(peer) {
                    if !g.touched.contains(&l) {
                        g.touched.push(l);
                    }
                }
            }
        }
        if !g.touched.is_empty() {
            let mut touched = std::mem::take(&mut g.touched);
            for peer in touched.drain(..) {
                if last != Some(peer) {
                    self.flush_peer(g, peer, now);
                }
            }
            g.touched = touched;
        }
        if let Some(peer) = last {
            self.flush_peer(g, peer, now);
        }
        g.timers_armed(now);
    }

    /// Ask the peers we wait for answers from, and send nothing else to, for a
    /// sign of life (a keep-alive frame they acknowledge): so that a peer that
    /// died is noticed by its channel's time-out.
    fn keepalive(&self, g: &mut Inner, now: Nanos) {
        if now < g.next_keepalive {
            return;
        }
        g.next_keepalive = now + KEEPALIVE;
        for peer in g.eng.awaiting() {
            if Self::peer(g, peer).is_some_and(|p| p.chan.is_idle()) {
                let _ = self.queue_frame(g, peer, Frame::control(&Header::new(OpCode::Hello)), now);
                // Sent by the look at every peer, now.
                g.next_scan = Some(now);
            }
        }
    }

    /// Tell the engine what a peer's channel learnt about its frames.
    fn channel_events(&self, g: &mut Inner, id: PeerId) {
        let Inner { peers, eng, sends, b, .. } = g;
        let cx = self.cx(b);
        let Some(p) = slot(peers, id) else { return };
        while let Some(ev) = p.chan.poll_event() {
            let (fid, ok) = match ev {
                Event::Acked(f) => (f, true),
                Event::Failed(f) => (f, false),
            };
            // The channel reports its messages in the order given: this is the
            // oldest frame.
            debug_assert_eq!(fid, p.next_fid - p.frames.len() as u64);
            if p.frames.front().is_some_and(|f| f.op == OpCode::Msg) {
                *sends -= 1;
            }
            if ok {
                // Completed in place, then dropped: the frame is not moved.
                if let Some(f) = p.frames.front_mut() {
                    eng.frame_done_in(cx, id, Some(&mut p.pr), f);
                    p.frames.pop_front();
                }
            } else if let Some(f) = p.frames.pop_front() {
                // The frame is lost, and with it what waited for it.
                eng.frame_failed(cx.b, id, f, Error::HostUnreach);
            }
        }
    }

    /// Transmit what a peer's channel has due.
    pub(super) fn flush_peer(&self, g: &mut Inner, id: PeerId, now: Nanos) {
        let Inner { peers, sbuf, next_scan, .. } = g;
        let Some(p) = slot(peers, id) else { return };
        let fd = self.sock.as_raw_fd();
        let (frames, first) = (&p.frames, p.next_fid - p.frames.len() as u64);
        let mut fill = |fid: u64, off: usize, buf: &mut [u8]| match frames.get(fid.wrapping_sub(first) as usize) {
            Some(f) => fill_frame(f, off, buf),
            None => buf.fill(0),
        };
        while let Some(n) = p.chan.poll_transmit(now, sbuf, &mut fill) {
            match io::send_to(fd, &sbuf[..n], &p.sa) {
                // What else is due (a delayed acknowledgement comes due
                // through `handle_timeout`, which makes it wanted).
                Ok(()) if p.chan.wants_transmit() => {}
                Ok(()) => break,
                Err(libc::EAGAIN) => {
                    // The socket buffer is full: this datagram is lost like any
                    // other, and retransmitted; stop for now, and try the rest
                    // at the next progress.
                    *next_scan = Some(now);
                    break;
                }
                Err(e) => {
                    let e = std::io::Error::from_raw_os_error(e);
                    fi_log!(Level::Debug, NAME, "ep_data", "send to {} failed: {e}", p.addr);
                    break;
                }
            }
        }
    }

    pub(super) fn progress_locked(&self, g: &mut Inner) {
        if g.closed || !g.enabled {
            return;
        }
        let now = Nanos::now();
        self.receive(g, now);
        self.pump(g, now);
        self.keepalive(g, now);
        if g.next_scan.is_some_and(|t| now >= t) {
            self.scan(g, now);
        }
    }

    /// Look at every peer: run its channel's timers, offer its held segments
    /// again, take its events, transmit; and find when the next look is due
    /// ([`Inner::next_scan`]): at the earliest deadline of a channel, or at once
    /// while a peer holds segments (a receive may have been posted, the peer may
    /// have taken its answers).
    fn scan(&self, g: &mut Inner, now: Nanos) {
        g.next_scan = None;
        let mut next: Option<Nanos> = None;
        for idx in 0..g.peers.len() {
            let Some(p) = g.peers[idx].as_mut() else { continue };
            let id = PeerId { idx: idx as u32, gen: p.gen };
            if p.chan.timer_due(now) {
                p.chan.handle_timeout(now);
            }
            if p.chan.held() > 0 {
                self.deliver_held(g, id);
            }
            self.after_channel(g, id, now);
            let Some(p) = Self::peer(g, id) else { continue };
            let t = if p.chan.held() > 0 { Some(now) } else { p.chan.poll_timeout() };
            next = match (next, t) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        // Peers looked at earlier may have armed timers since (the engine
        // answering another peer): `after_channel` lowered `next_scan` then.
        g.next_scan = match (g.next_scan, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Tell the engine the peer's channel events, send what the engine queued, transmit,
    /// and forget the peer if it broke the protocol, closed, or failed. (The
    /// timers this arms are the caller's to note: [`Inner::timers_armed`].)
    fn after_channel(&self, g: &mut Inner, id: PeerId, now: Nanos) {
        // The channel's events first, then the engine's frames (those the
        // datagram caused and those the events caused, in the engine's order).
        if Self::peer(g, id).is_some_and(|p| p.chan.has_events()) {
            self.channel_events(g, id);
        }
        self.pump(g, now);
        let Some(p) = Self::peer(g, id) else { return };
        if let Some(v) = p.broken.take() {
            if v.why.is_empty() {
                fi_log!(Level::Info, NAME, "ep_data", "peer {} closed its endpoint", p.addr);
            } else {
                fi_log!(Level::Warn, NAME, "ep_data", "{} from {}; dropping the peer", v.why, p.addr);
                // Tell it, so that what it waits for from us fails now rather than
                // at its time-out (best effort, as when we close).
                if self.queue_frame(g, id, Frame::control(&Header::new(OpCode::Shutdown)), now).is_ok() {
                    self.flush_peer(g, id, now);
                }
            }
            self.peer_down(g, id, v.err, now);
            return;
        }
        if p.chan.is_failed() {
            fi_log!(Level::Info, NAME, "ep_data", "peer {} is unreachable: failing what is in flight with it", p.addr);
            self.peer_down(g, id, Error::HostUnreach, now);
            return;
        }
        // A delayed acknowledgement comes due through `handle_timeout`, which
        // makes it wanted.
        if p.chan.wants_transmit() {
            self.flush_peer(g, id, now);
        }
    }

    /// Read the datagrams waiting on the socket.
    fn receive(&self, g: &mut Inner, now: Nanos) {
        let mut buf = std::mem::take(&mut g.rbuf);
        let mut got = false;
        let fd = self.sock.as_raw_fd();
        for _ in 0..RECV_BATCH {
            let (n, from) = match io::recv_from(fd, &mut buf) {
                Ok(r) => r,
                Err(libc::EAGAIN) => break,
                Err(libc::EINTR) => continue,
                Err(e) => {
                    // An ICMP error of an earlier send (port unreachable): the
                    // channel's time-out decides about that peer.
                    fi_log!(Level::Debug, NAME, "ep_data", "receive: {}", std::io::Error::from_raw_os_error(e));
                    continue;
                }
            };
            let (h, payload) = match reliable::Header::decode_with(&buf[..n], false) {
                Ok(r) => r,
                Err(e) => {
                    fi_log!(Level::Debug, NAME, "ep_data", "dropped a datagram from {from}: {e}");
                    continue;
                }
            };
            let Some(mut id) = self.peer_by_sock(g, from, now) else {
                continue;
            };
            got = true;
            let mut r = self.handle(g, id, &h, payload, now);
            if let Err(reliable::Violation::OtherEpoch(e)) = r {
                fi_log!(Level::Info, NAME, "ep_data", "peer {from} restarted (epoch {e:#x})");
                self.peer_down(g, id, Error::ConnReset, now);
                let Some(nid) = self.peer_by_sock(g, from, now) else { continue };
                id = nid;
                r = self.handle(g, id, &h, payload, now);
            }
            if let Err(v) = r {
                fi_log!(Level::Debug, NAME, "ep_data", "dropped a datagram from {from}: {v}");
            }
            self.after_channel(g, id, now);
        }
        g.rbuf = buf;
        if got {
            g.timers_armed(now);
        }
    }

    /// Feed one datagram to a peer's channel, taking its segments.
    fn handle(
        &self,
        g: &mut Inner,
        id: PeerId,
        h: &reliable::Header,
        payload: &[u8],
        now: Nanos,
    ) -> std::result::Result<(), reliable::Violation> {
        let Inner { peers, eng, b, .. } = g;
        let Some(p) = slot(peers, id) else { return Ok(()) };
        let src = Self::src_in(b, p);
        let cx = self.cx(b);
        let mut t = Taker { eng, cx, pr: &mut p.pr, broken: &mut p.broken, peer: id, src };
        p.chan.handle(now, h, payload, &mut |seg| t.segment(seg))
    }

    /// Offer a peer's held segments again (a receive may have been posted, the
    /// peer may have taken its answers).
    fn deliver_held(&self, g: &mut Inner, id: PeerId) {
        let Inner { peers, eng, b, .. } = g;
        let Some(p) = slot(peers, id) else { return };
        let src = Self::src_in(b, p);
        let cx = self.cx(b);
        let mut t = Taker { eng, cx, pr: &mut p.pr, broken: &mut p.broken, peer: id, src };
        p.chan.poll_deliver(&mut |seg| t.segment(seg));
    }

    /// Fail everything in flight with a peer and forget it.
    pub(super) fn peer_down(&self, g: &mut Inner, id: PeerId, err: Error, now: Nanos) {
        let Some(p) = Self::peer(g, id) else { return };
        // Its frames not yet acknowledged fail (`FI_EHOSTUNREACH`), then what
        // else was in flight with it (`err`).
        p.chan.close();
        let addr = p.addr;
        self.channel_events(g, id);
        let Inner { peers, eng, b, .. } = g;
        if let Some(p) = slot(peers, id) {
            eng.peer_lost(self.cx(b), &mut p.pr, id, err);
        }
        g.by_sock.remove(&addr);
        g.by_addr.retain(|_, v| *v != id);
        g.peers[id.idx as usize] = None;
        self.pump(g, now);
    }
}

impl Progress for UdpRdmEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.sock.as_raw_fd())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let g = self.lock();
        let t = g.peers.iter().flatten().filter_map(|p| p.chan.poll_timeout()).min()?;
        // The channels' clock to `Instant`'s.
        let (now, now_ns) = (Instant::now(), Nanos::now());
        Some(now + t.saturating_duration_since(now_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_core::prov::IoVec;

    #[test]
    fn frames_fill_head_then_payload() {
        let mut data: Vec<u8> = (0..100u8).collect();
        let mut h = Header::new(OpCode::Msg);
        h.len = 100;
        let (a, b) = data.split_at_mut(37);
        let pieces = [IoVec { base: a.as_mut_ptr(), len: a.len() }, IoVec { base: b.as_mut_ptr(), len: b.len() }];
        let f = Frame::new(&h, &[], &pieces, Done::Nothing);
        assert_eq!(f.total, HDR_LEN + 100);
        assert_eq!(f.op, OpCode::Msg);
        let expect: Vec<u8> = (0..100u8).collect();
        let mut whole = vec![0u8; f.total];
        // In pieces of every size, the frame reads the same.
        for step in [1usize, 7, 39, 40, 41, 140] {
            let mut off = 0;
            while off < whole.len() {
                let n = step.min(whole.len() - off);
                fill_frame(&f, off, &mut whole[off..off + n]);
                off += n;
            }
            assert_eq!(&whole[..HDR_LEN], &h.encode());
            assert_eq!(&whole[HDR_LEN..], &expect[..]);
        }
    }
}

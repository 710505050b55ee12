//! Transfers as a stream of bounce-buffer chunks (`Data` entries), when cross-memory
//! attach is not available: the sender of a large message or write pushes its chunks
//! after `Cts`, the target of a read answers with them, and the receiver puts them in
//! place.

use super::{InStream, Inner, OpKind, PeerId, ShmEp, Violation, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{flags, Entry, Kind, Mode};
use crate::segment::BOUNCE_SIZE;
use fabric_core::{Error, MrAccess};
use fabric_util::iov::{self, gather};
use std::sync::atomic::Ordering;

impl ShmEp {
    /// Every chunk of an incoming transfer is in.
    pub(super) fn finish_in_stream(&self, g: &mut Inner, peer: PeerId, id: u64) {
        let Some(s) = g.in_streams.remove(&(peer, id)) else { return };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = id;
        match s {
            InStream::Msg { target, hdr, src, .. } => g.rx.complete(&g.b, target, &hdr, src, false),
            InStream::Write { err, data, .. } => match err {
                None => {
                    if let Some(c) = &g.b.rma_write_cntr {
                        c.inc();
                    }
                    if let Some(d) = data {
                        self.remote_cq_data(g, peer, d);
                    }
                }
                Some(e) => ack.aux = e.errno() as u32,
            },
        }
        self.send_entry(g, peer, &ack, |_| {});
    }

    pub(super) fn on_data(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
    ) -> std::result::Result<(), Violation> {
        let s = self.seg.slot(slot);
        let bp = s.bounce_ptr(e.aux as usize);
        let len = e.len as usize;
        let free = || s.bounce_busy[e.aux as usize].store(0, Ordering::Release);
        if e.flags & flags::RESP != 0 {
            // A chunk of a read of ours.
            let Some(op) = g.ops.get_mut(e.id).filter(|o| o.peer == peer && o.kind == OpKind::Read) else {
                free();
                return Err("read data for no read".into());
            };
            if e.addr.checked_add(e.len).map_or(true, |end| end > op.len as u64) {
                free();
                return Err("read data past the end".into());
            }
            let mut out = [NULL_IOV; IOV_LIMIT];
            let n = iov::slice_into(&op.iov[..op.niov], e.addr, iov::clip(op.len as u64, e.addr, e.len), &mut out);
            let mut done = 0;
            for v in &out[..n] {
                // SAFETY: the piece lies in the read's destination (valid for
                // writes); the bounce buffer holds len >= done + v.len bytes.
                unsafe { std::ptr::copy_nonoverlapping(bp.add(done), v.base, v.len) };
                done += v.len;
            }
            free();
            return Ok(());
        }
        let Some(st) = g.in_streams.get_mut(&(peer, e.id)) else {
            free();
            return Err("data for no transfer".into());
        };
        let finished = match st {
            InStream::Msg { target, hdr, got, .. } => {
                if *got != e.addr || e.addr + e.len > hdr.len {
                    free();
                    return Err("message data out of order".into());
                }
                let mut local = [NULL_IOV; IOV_LIMIT];
                let n = g.rx.pieces(target, e.addr, e.len, &mut local);
                let mut done = 0;
                for v in &local[..n] {
                    // SAFETY: the piece lies in the receive (valid for writes); the
                    // bounce buffer holds len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(bp.add(done), v.base, v.len) };
                    done += v.len;
                }
                *got += e.len;
                *got == hdr.len
            }
            InStream::Write { key, addr, len: total, got, err, .. } => {
                if *got != e.addr || e.addr + e.len > *total {
                    free();
                    return Err("write data out of order".into());
                }
                if err.is_none() {
                    let r = self.domain.objs.mrs().with_region(
                        *key,
                        addr.wrapping_add(e.addr),
                        len,
                        MrAccess::REMOTE_WRITE,
                        |p| {
                            // SAFETY: `p` starts `len` checked bytes of an open region
                            // (held open for this call); the bounce buffer holds len.
                            unsafe { std::ptr::copy_nonoverlapping(bp, p, len) }
                        },
                    );
                    *err = r.err();
                }
                *got += e.len;
                *got == *total
            }
        };
        free();
        if finished {
            self.finish_in_stream(g, peer, e.id);
        }
        Ok(())
    }

    /// Push chunks of the operations streaming their data, as bounce buffers and
    /// ring entries allow.
    pub(super) fn push_streams(&self, g: &mut Inner) {
        let mut n = g.streams.len();
        while n > 0 {
            n -= 1;
            let Some(opid) = g.streams.pop_front() else { break };
            let Some(op) = g.ops.get_mut(opid) else { continue };
            let (peer, total, mut sent) = (op.peer, op.len, op.sent.unwrap_or(0));
            let (iov, niov) = (op.iov, op.niov);
            let Some(p) = Self::peer(g, peer) else { continue };
            if !p.queue.is_empty() {
                g.streams.push_back(opid);
                self.note_work();
                continue;
            }
            let Some(t) = p.tx.as_mut() else { continue };
            let mut pushed = false;
            while sent < total && t.prod.has_room() {
                let Some(bi) = t.alloc_bounce() else { break };
                let k = (total - sent).min(BOUNCE_SIZE);
                // SAFETY: the bounce buffer holds BOUNCE_SIZE >= k bytes and is
                // ours until freed; the source pieces are valid for reads.
                unsafe { gather(&iov[..niov], sent, t.bounce_ptr(bi), k) };
                let mut e = Entry::new(Kind::Data);
                e.mode = Mode::Bounce;
                e.aux = bi as u32;
                e.id = opid;
                e.addr = sent as u64;
                e.len = k as u64;
                t.prod.try_push(|b| e.encode(b));
                sent += k;
                pushed = true;
            }
            if pushed {
                Self::wake(p);
            }
            if let Some(op) = g.ops.get_mut(opid) {
                op.sent = Some(sent);
            }
            if sent < total {
                g.streams.push_back(opid);
                self.note_work();
            }
            // Complete once the receiver acknowledges the last chunk.
        }
    }

    /// Answer reads as chunks, as bounce buffers and ring entries allow.
    pub(super) fn push_read_streams(&self, g: &mut Inner) {
        let mut n = g.rd_streams.len();
        while n > 0 {
            n -= 1;
            let Some(mut rs) = g.rd_streams.pop_front() else { break };
            let mrs = self.domain.objs.mrs();
            let mut err: Option<Error> = None;
            {
                let Some(p) = Self::peer(g, rs.peer) else { continue };
                let Some(t) = p.tx.as_mut() else { continue };
                if p.queue.is_empty() {
                    let mut pushed = false;
                    while rs.off < rs.len && t.prod.has_room() {
                        let Some(bi) = t.alloc_bounce() else { break };
                        let k = (rs.len - rs.off).min(BOUNCE_SIZE as u64) as usize;
                        let dst = t.bounce_ptr(bi);
                        let r =
                            mrs.with_region(rs.key, rs.addr.wrapping_add(rs.off), k, MrAccess::REMOTE_READ, |src| {
                                // SAFETY: `src` starts k checked bytes of an open region;
                                // the bounce buffer holds BOUNCE_SIZE >= k bytes.
                                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, k) }
                            });
                        if let Err(e) = r {
                            t.seg.slot(t.slot).bounce_busy[bi].store(0, Ordering::Release);
                            err = Some(e);
                            break;
                        }
                        let mut e = Entry::new(Kind::Data);
                        e.flags = flags::RESP;
                        e.mode = Mode::Bounce;
                        e.aux = bi as u32;
                        e.id = rs.id;
                        e.addr = rs.off;
                        e.len = k as u64;
                        t.prod.try_push(|b| e.encode(b));
                        rs.off += k as u64;
                        pushed = true;
                    }
                    if pushed {
                        Self::wake(p);
                    }
                }
            }
            if err.is_some() || rs.off == rs.len {
                let mut ack = Entry::new(Kind::Ack);
                ack.id = rs.id;
                match err {
                    Some(e) => ack.aux = e.errno() as u32,
                    None => {
                        if let Some(c) = &g.b.rma_read_cntr {
                            c.inc();
                        }
                    }
                }
                self.send_entry(g, rs.peer, &ack, |_| {});
            } else {
                g.rd_streams.push_back(rs);
                self.note_work();
            }
        }
    }
}

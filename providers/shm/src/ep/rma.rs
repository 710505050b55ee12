//! RMA writes and reads: the initiator's posting, and the target's side (checking
//! the key, bounds and access, then copying across address spaces or answering as
//! chunks).

use super::{InStream, Inner, OpKind, PeerId, ReadStream, ShmEp, TxOp, Violation, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{self, flags, Entry, Kind, Mode, INLINE_MAX};
use crate::ring::ENTRY_PAYLOAD;
use crate::segment::{self, BOUNCE_SIZE};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{IoVec, RmaOp};
use fabric_core::{fi_log, Caps, Error, MrAccess, OpFlags, Result};
use fabric_util::iov::gather;

impl ShmEp {
    pub(super) fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, kind: OpKind) -> Result<()> {
        if op.rma.len() != 1 || op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, inject.is_none())?;
        let data_iov = inject.map(|d| [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }]);
        let iov: &[IoVec] = match &data_iov {
            Some(v) => v,
            None => op.iov,
        };
        let len = IoVec::total(iov);
        if op.rma[0].len != len {
            return Err(Error::Inval);
        }
        let id = self.peer_for(g, op.addr)?;
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[..iov.len()].copy_from_slice(iov);
        let mut e = Entry::new(if kind == OpKind::Write { Kind::Write } else { Kind::Read });
        e.key = op.rma[0].key;
        e.addr = op.rma[0].addr;
        e.len = len as u64;
        if kind == OpKind::Write && flags.contains(OpFlags::REMOTE_CQ_DATA) {
            e.flags |= flags::CQ_DATA;
            e.data = op.data;
        }
        let small = kind == OpKind::Write && len <= BOUNCE_SIZE;
        let opid = g.ops.insert(TxOp {
            peer: id,
            kind,
            context: op.context,
            flags: Caps::RMA | if kind == OpKind::Write { Caps::WRITE } else { Caps::READ },
            len,
            // A small write's data travels now: nothing of the caller's is kept.
            iov: if small && inject.is_some() { [NULL_IOV; IOV_LIMIT] } else { local },
            niov: if small && inject.is_some() { 0 } else { iov.len() },
            silent: inject.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
            sent: None,
        });
        e.id = opid;
        if kind == OpKind::Write && len <= INLINE_MAX {
            e.mode = Mode::Inline;
            self.send_entry(g, id, &e, |b| {
                // SAFETY: INLINE_MAX >= len bytes after the header; the pieces are
                // valid for reads.
                unsafe { gather(iov, 0, b[proto::HDR..].as_mut_ptr(), len) }
            });
        } else if small {
            self.send_bounce(g, id, e, iov, len);
        } else {
            if inject.is_some() {
                g.ops.remove(opid);
                return Err(Error::MsgSize);
            }
            self.announce(g, id, e, iov);
        }
        Ok(())
    }

    pub(super) fn on_write(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
        let mrs = self.domain.objs.mrs();
        let status = match e.mode {
            Mode::Inline | Mode::Bounce => {
                let mut buf = std::mem::take(&mut g.scratch);
                self.take_payload(slot, e, raw, &mut buf);
                let r = mrs.copy_in(e.key, e.addr, &buf, MrAccess::REMOTE_WRITE);
                g.scratch = buf;
                r
            }
            Mode::Iov | Mode::Stream => {
                let len = usize::try_from(e.len).map_err(|_| "write too long")?;
                if let Err(err) = mrs.lookup(e.key, e.addr, len, MrAccess::REMOTE_WRITE) {
                    Err(err)
                } else if e.mode == Mode::Iov && self.ensure_tx(g, peer).is_ok() && self.cma_ok(g, peer) {
                    let mut pieces = [(0u64, 0u64); IOV_LIMIT];
                    let n = e.pieces(raw, &mut pieces);
                    let pid = Self::peer(g, peer).map_or(0, |p| p.pid);
                    let r = mrs.with_region(e.key, e.addr, len, MrAccess::REMOTE_WRITE, |p| {
                        let local = [IoVec { base: p, len }];
                        // SAFETY: `p` starts `len` checked bytes of an open region,
                        // held open for this call.
                        unsafe { segment::cma_read(pid, &local, &pieces[..n]) }
                    });
                    match r {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(_)) => Err(Error::Io),
                        Err(e) => Err(e),
                    }
                } else {
                    let st = InStream::Write { key: e.key, addr: e.addr, len: e.len, got: 0, err: None, data };
                    g.in_streams.insert((peer, e.id), st);
                    let mut cts = Entry::new(Kind::Cts);
                    cts.id = e.id;
                    self.send_entry(g, peer, &cts, |_| {});
                    if e.len == 0 {
                        self.finish_in_stream(g, peer, e.id);
                    }
                    return Ok(());
                }
            }
            Mode::None => return Err("write without a payload mode".into()),
        };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = e.id;
        match status {
            Ok(()) => {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
                if let Some(d) = data {
                    self.remote_cq_data(g, peer, d);
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote write of {} bytes: {err}", e.len);
                ack.aux = err.errno() as u32;
            }
        }
        let _ = self.ensure_tx(g, peer);
        self.send_entry(g, peer, &ack, |_| {});
        Ok(())
    }

    pub(super) fn on_read(
        &self,
        g: &mut Inner,
        peer: PeerId,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        if !matches!(e.mode, Mode::Iov | Mode::Stream) {
            return Err("read without its destination".into());
        }
        let len = usize::try_from(e.len).map_err(|_| "read too long")?;
        self.ensure_tx(g, peer).map_err(|_| "cannot answer the peer".to_string())?;
        let mrs = self.domain.objs.mrs();
        let status = if let Err(err) = mrs.lookup(e.key, e.addr, len, MrAccess::REMOTE_READ) {
            Err(err)
        } else if e.mode == Mode::Iov && self.cma_ok(g, peer) {
            let mut pieces = [(0u64, 0u64); IOV_LIMIT];
            let n = e.pieces(raw, &mut pieces);
            let pid = Self::peer(g, peer).map_or(0, |p| p.pid);
            let r = mrs.with_region(e.key, e.addr, len, MrAccess::REMOTE_READ, |p| {
                let local = [IoVec { base: p, len }];
                // SAFETY: `p` starts `len` checked bytes of an open region, held
                // open for this call; cma_write only reads them.
                unsafe { segment::cma_write(pid, &local, &pieces[..n]) }
            });
            match r {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(_)) => Err(Error::Io),
                Err(e) => Err(e),
            }
        } else {
            g.rd_streams.push_back(ReadStream { peer, id: e.id, key: e.key, addr: e.addr, len: e.len, off: 0 });
            self.note_work();
            self.push_read_streams(g);
            return Ok(());
        };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = e.id;
        match status {
            Ok(()) => {
                if let Some(c) = &g.b.rma_read_cntr {
                    c.inc();
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote read of {len} bytes: {err}");
                ack.aux = err.errno() as u32;
            }
        }
        self.send_entry(g, peer, &ack, |_| {});
        Ok(())
    }
}

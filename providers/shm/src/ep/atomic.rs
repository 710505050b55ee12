//! Atomics: the initiator's posting (operands inline or through a bounce buffer) and
//! the target's side (`fabric_util::atomic::serve`, the answer carrying the prior
//! values).

use super::{Inner, OpKind, PeerId, ShmEp, TxOp, Violation, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{self, Entry, Kind, Mode, INLINE_MAX};
use crate::ring::ENTRY_PAYLOAD;
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, IoVec};
use fabric_core::{fi_log, AtomicKind, Caps, Error, OpFlags, Result};
use fabric_util::iov::gather;
use fabric_util::wire::{AtomicHdr, RmaDesc};

impl ShmEp {
    /// Post an atomic (its operands are copied at once: inline or through a
    /// bounce buffer); with `flags` [`OpFlags::silent`] its completion is not
    /// reported, else it is when `flags` has `COMPLETION` or the queue is not
    /// selective.
    pub(super) fn atomic_common(&self, a: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let silent = flags.silent();
        let max = fabric_util::atomic::valid(a.op, a.datatype, a.kind)?;
        let l = fabric_util::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
        if a.count == 0 || a.count > max || a.rma.len != l.target {
            return Err(Error::Inval);
        }
        if a.operand.len < l.operand || a.compare.len < l.compare || a.result.len < l.result {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, !silent)?;
        let id = self.peer_for(g, a.addr)?;
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[0] = IoVec { base: a.result.base, len: l.result };
        let opid = g.ops.insert(TxOp {
            peer: id,
            kind: OpKind::Atomic,
            context: a.context,
            flags: Caps::ATOMIC | if a.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ },
            len: l.target,
            iov: local,
            niov: usize::from(l.result > 0),
            silent,
            comp: flags.contains(OpFlags::COMPLETION),
            sent: None,
        });
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let mut e = Entry::new(Kind::Atomic);
        e.id = opid;
        e.key = a.rma.key;
        e.addr = a.rma.addr;
        e.tag = a.count as u64;
        e.data = u64::from(proto::atomic_aux(a.op as u8, a.datatype as u8, kind));
        let src = [IoVec { base: a.operand.base, len: l.operand }, IoVec { base: a.compare.base, len: l.compare }];
        let len = l.operand + l.compare;
        e.len = len as u64;
        if len <= INLINE_MAX {
            e.mode = Mode::Inline;
            self.send_entry(g, id, &e, |b| {
                // SAFETY: INLINE_MAX >= len bytes after the header; the operands
                // are valid for reads.
                unsafe { gather(&src, 0, b[proto::HDR..].as_mut_ptr(), len) }
            });
        } else {
            self.send_bounce(g, id, e, &src, len);
        }
        Ok(())
    }

    pub(super) fn on_atomic(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        if !matches!(e.mode, Mode::Inline | Mode::Bounce) {
            return Err("atomic without its operands".into());
        }
        let mut args = g.rx.unexp_buf(0).map_err(|_| "no memory".to_string())?;
        self.take_payload(slot, e, raw, &mut args);
        let word = u32::try_from(e.data).map_err(|_| "unknown atomic operation")?;
        let (op, datatype, kind) = proto::atomic_unaux(word);
        let count = u32::try_from(e.tag).map_err(|_| "atomic count too large")?;
        let ah = AtomicHdr { op, datatype, kind, count };
        let desc = RmaDesc { addr: e.addr, key: e.key };
        let mut result = std::mem::take(&mut g.scratch);
        let r = fabric_util::atomic::serve(
            self.domain.objs.mrs(),
            self.domain.objs.atomic_lock(),
            desc,
            ah,
            &args,
            &mut result,
        );
        g.rx.recycle(args);
        let r = r.map_err(|why| why.to_string())?;
        let mut resp = Entry::new(Kind::AtomicResp);
        resp.id = e.id;
        match r {
            Ok(()) => {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote atomic: {err}");
                resp.data = err.errno() as u64;
            }
        }
        self.ensure_tx(g, peer).map_err(|_| "cannot answer the peer".to_string())?;
        let len = result.len();
        resp.len = len as u64;
        if len <= INLINE_MAX {
            resp.mode = Mode::Inline;
            self.send_entry(g, peer, &resp, |b| b[proto::HDR..proto::HDR + len].copy_from_slice(&result));
        } else {
            let src = [IoVec { base: result.as_mut_ptr(), len }];
            self.send_bounce(g, peer, resp, &src, len);
        }
        g.scratch = result;
        Ok(())
    }
}

//! One-sided operations of the verbs provider: RDMA WRITE (WRITE_WITH_IMM for
//! remote CQ data) and READ, posted natively, and the table of native
//! operations in flight (RMA here, native atomics in `atomic.rs`), completed by
//! their work completions.

use super::conn::{Post, Sges, WrKind};
use super::*;
use fabric_core::{Caps, CqEntry};

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// A native operation in flight: an RDMA write or read, a native atomic.
pub(super) struct TxOp {
    pub(super) conn: u64,
    context: u64,
    flags: Caps,
    len: usize,
    /// No completion (inject): errors are only logged.
    silent: bool,
    /// Posted with `FI_COMPLETION` ([`Bindings::tx_done`]).
    comp: bool,
    err: Option<(Error, i32)>,
    /// Work requests of this operation not yet completed: more than one where
    /// its pieces exceed what one request may carry (an RDMA READ on siw
    /// takes one local piece); it ends when the last completes.
    pub(super) parts: u32,
    /// Where an atomic's prior values go.
    pub(super) result: [IoVec; 1],
    /// A native atomic's result (or an injected write's data) is in this
    /// bounce slot.
    pub(super) result_slot: Option<usize>,
    /// Registrations made for this operation's buffers.
    pub(super) tmp: Vec<ibv::Mr>,
    /// An RDM write or read on iWARP, where a target refusing an access ends
    /// the connection (a TERMINATE) and the sender is told no more than that:
    /// an error before it completes is reported as `FI_EACCES`. A write is
    /// followed by a zero-byte READ (its last part), so that it ends once the
    /// target placed it.
    refusable: bool,
}

// SAFETY: the pieces point into buffers the application handed over under the
// post methods' contracts (valid until the completion); they are only
// dereferenced under the endpoint's lock.
unsafe impl Send for TxOp {}

impl TxOp {
    pub(super) fn new(conn: u64, context: u64, flags: Caps, len: usize, silent: bool, comp: bool) -> TxOp {
        TxOp {
            conn,
            context,
            flags,
            len,
            parts: 1,
            silent,
            comp,
            err: None,
            result: [NULL_IOV],
            result_slot: None,
            tmp: Vec::new(),
            refusable: false,
        }
    }
}

impl VerbsEp {
    /// Native operation `opid` is done (with `err`): its registrations and
    /// bounce slot go, then its completion is reported.
    pub(super) fn finish_op(g: &mut Inner, opid: u64, err: Option<(Error, i32)>) {
        let Some(mut op) = g.ops.remove(opid) else { return };
        op.err = op.err.or(err);
        if op.refusable && !g.closed {
            // iWARP reports no refused access to its sender: the target ends
            // the connection (a TERMINATE), which fails or flushes the READ
            // (a write's fence), or drops the connection first. The error
            // RoCE gives (a remote access error) is reported; the device's
            // status stays the provider error.
            if let Some((_, prov_errno)) = op.err {
                op.err = Some((Error::Access, prov_errno));
            }
        }
        drop(op.tmp);
        if let Some(s) = op.result_slot {
            g.tx_free.push(s);
        }
        if op.silent {
            if let Some((e, _)) = op.err {
                fi_log!(Level::Info, NAME, "ep_data", "an inject failed: {e}");
            }
            g.b.tx_count(op.err.is_some());
            return;
        }
        let mut c = CqEntry::new(op.context, op.flags);
        c.len = op.len;
        match op.err {
            None => g.b.tx_done(c, op.comp),
            Some((err, prov_errno)) => g.b.tx_err_prov(c, err, prov_errno),
        }
    }

    /// One work request of operation `opid` completed (with `err`): the
    /// operation ends with its last, with the first error any of them had.
    pub(super) fn part_done(g: &mut Inner, opid: u64, err: Option<(Error, i32)>) {
        let Some(op) = g.ops.get_mut(opid) else { return };
        op.err = op.err.or(err);
        op.parts = op.parts.saturating_sub(1);
        if op.parts == 0 {
            Self::finish_op(g, opid, None);
        }
    }

    /// Copy a native atomic's prior value from its bounce slot to the result.
    pub(super) fn native_atomic_result(&self, g: &mut Inner, opid: u64) {
        let Some(op) = g.ops.get(opid) else { return };
        let (Some(s), r) = (op.result_slot, op.result[0]) else { return };
        if r.len == 0 {
            return;
        }
        // SAFETY: the slot holds the 8 bytes the device wrote; the result buffer
        // is valid for writes until the completion (post contract).
        unsafe { std::ptr::copy_nonoverlapping(self.tx.slot(s), r.base, r.len.min(8)) };
    }

    pub(super) fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, read: bool) -> Result<()> {
        if op.iov.len() > self.iov_limit(false) || op.rma.len() != 1 {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if len > self.info.ep_attr.max_msg_size || (op.rma[0].len as u64) < len as u64 && op.rma[0].len != 0 {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        let cid = self.post_conn(g, op.addr, inject.is_none())?;
        let (silent, comp) = (inject.is_some(), flags.contains(OpFlags::COMPLETION));
        let caps = if read { Caps::RMA | Caps::READ } else { Caps::RMA | Caps::WRITE };
        let mut txop = TxOp::new(cid, op.context, caps, len, silent, comp);
        let mut owned = Vec::new();
        let mut inline = false;
        let inline_max = self.inline_limit(g, cid);
        let sges = match inject {
            Some(d) if !read && d.len() <= inline_max => {
                inline = true;
                owned.extend_from_slice(d);
                Sges::one(sys::ibv_sge { addr: owned.as_ptr() as u64, length: d.len() as u32, lkey: 0 })
            }
            Some(d) => {
                let s = Self::take_slot(g, true).ok_or(Error::Again)?;
                // SAFETY: the slot holds BUF bytes; injects are at most the inject size.
                unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), self.tx.slot(s), d.len().min(BUF)) };
                txop.result_slot = Some(s);
                Sges::one(sys::ibv_sge {
                    addr: self.tx.slot(s) as u64,
                    length: d.len().min(BUF) as u32,
                    lkey: self.tx.mr.lkey(),
                })
            }
            None if !read && len <= inline_max && len > 0 => {
                inline = true;
                owned.resize(len, 0);
                // SAFETY: the pieces are valid for reads (post contract); `owned` has room.
                unsafe { fabric_util::iov::gather(op.iov, 0, owned.as_mut_ptr(), len) };
                Sges::one(sys::ibv_sge { addr: owned.as_ptr() as u64, length: len as u32, lkey: 0 })
            }
            None => self.sges_for(op.iov, &mut txop.tmp)?,
        };
        // iWARP has no write with immediate data: the data follows the write
        // in a SEND (`data_msg`), a part of the operation.
        let iwarp = self.domain.port.iwarp;
        let data_msg = (!read && iwarp && flags.contains(OpFlags::REMOTE_CQ_DATA)).then(|| {
            // The SGE points at the bytes the request owns (moving the Vec
            // does not move its heap buffer).
            let m = super::conn::write_data_msg(op.data).to_vec();
            Post::send(sys::ibv_sge { addr: m.as_ptr() as u64, length: m.len() as u32, lkey: 0 }, true, m)
        });
        // (The endpoint's inline size, which its QPs ask for: this
        // connection's QP may not exist yet.)
        if data_msg.is_some() && super::conn::WRITE_DATA_LEN > self.inline_max {
            fi_log!(
                Level::Warn,
                NAME,
                "ep_data",
                "remote CQ data on iWARP needs {} bytes inline, the QP takes {}",
                super::conn::WRITE_DATA_LEN,
                self.inline_max
            );
            return Err(Error::OpNotSupp);
        }
        let (opcode, imm) = if read {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_READ, None)
        } else if flags.contains(OpFlags::REMOTE_CQ_DATA) && !iwarp {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, Some(op.data as u32))
        } else {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, None)
        };
        // Local pieces per request: the QP's send SGEs, and for a READ also
        // the device's read limit (siw: one).
        let qp_sge = g.conns.get(cid).map_or(1, |c| c.caps.sge.max(1)) as usize;
        let per_wr = if read { qp_sge.min(self.domain.port.max_sge_rd.max(1) as usize) } else { qp_sge };
        let (raddr, rkey) = (op.rma[0].addr, op.rma[0].key as u32);
        // RDM on iWARP: a write completes at its sender when TCP takes it, and
        // a target that refuses it ends the connection. A READ completes only
        // after the writes before it are placed: a zero-byte READ follows the
        // write, which ends with it (the error RoCE reports, reported too).
        txop.refusable = self.rdm() && iwarp;
        let fence = !read && txop.refusable;
        let extra = fence as u32 + data_msg.is_some() as u32;
        if inline || sges.n <= per_wr {
            let post = Post { opcode, sges, inline, raddr, rkey, imm, compare_add: 0, swap: 0, _owned: owned };
            txop.parts += extra;
            let opid = g.ops.insert(txop);
            self.submit(g, cid, WrKind::Rma { op: opid }, post);
            self.after_write(g, cid, opid, data_msg, fence.then_some((raddr, rkey)));
            return Ok(());
        }
        // Several requests, each taking the next `per_wr` pieces at the next
        // remote offset; on one connection they complete in order, and the
        // immediate data (if any) goes with the last, after all the data.
        let parts = sges.n.div_ceil(per_wr);
        txop.parts = parts as u32 + extra;
        let last = parts - 1;
        let opid = g.ops.insert(txop);
        let mut off = 0u64;
        for (i, chunk) in sges.v[..sges.n].chunks(per_wr).enumerate() {
            let mut part = Sges::none();
            for s in chunk {
                part.push(*s)?;
            }
            let post = Post {
                opcode,
                sges: part,
                inline: false,
                raddr: raddr + off,
                rkey,
                imm: if i == last { imm } else { None },
                compare_add: 0,
                swap: 0,
                _owned: Vec::new(),
            };
            off += chunk.iter().map(|s| s.length as u64).sum::<u64>();
            self.submit(g, cid, WrKind::Rma { op: opid }, post);
        }
        self.after_write(g, cid, opid, data_msg, fence.then_some((raddr, rkey)));
        Ok(())
    }

    /// What follows a write of operation `opid` on connection `cid`, as parts of
    /// it: its data message (iWARP's remote CQ data), then its fence READ at
    /// `fence` (RDM on iWARP).
    fn after_write(&self, g: &mut Inner, cid: u64, opid: u64, data: Option<Post>, fence: Option<(u64, u32)>) {
        if let Some(d) = data {
            self.submit(g, cid, WrKind::Rma { op: opid }, d);
        }
        if let Some((raddr, rkey)) = fence {
            self.submit(g, cid, WrKind::Rma { op: opid }, self.fence_read(raddr, rkey));
        }
    }

    /// A zero-byte RDMA READ at `raddr` with key `rkey` (a write's target): it
    /// completes once the writes posted before it on its connection are
    /// placed. The responder checks no key for zero bytes, so a target that
    /// grants writes only answers it too; the READ's one local piece (iWARP
    /// takes one) is zero bytes of the bounce pool.
    fn fence_read(&self, raddr: u64, rkey: u32) -> Post {
        Post {
            opcode: sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
            sges: Sges::one(sys::ibv_sge { addr: self.tx.slot(0) as u64, length: 0, lkey: self.tx.mr.lkey() }),
            inline: false,
            raddr,
            rkey,
            imm: None,
            compare_add: 0,
            swap: 0,
            _owned: Vec::new(),
        }
    }
}

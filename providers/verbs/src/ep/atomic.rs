//! Atomics of the verbs provider: fetch-add and compare-swap of one aligned
//! 64-bit integer natively where the device has atomics (a work request, its
//! prior value landing in a bounce slot), every other one emulated by the RDM
//! engine (`AtomicReq` SEND; the target's engine applies it under the domain's
//! atomic lock and answers `RmaResp`).

use super::conn::{Post, Sges, WrKind};
use super::*;
use fabric_core::{AtomicKind, AtomicOp, Caps, Datatype};

impl VerbsEp {
    pub(super) fn atomic_common(&self, a: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let comp = flags.contains(OpFlags::COMPLETION);
        let l = fabric_util::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
        let mut g = self.lock();
        let g = &mut *g;
        let cid = self.post_conn(g, a.addr, true)?;
        let int64 = matches!(a.datatype, Datatype::Uint64 | Datatype::Int64);
        let native = self.domain.port.atomics
            && int64
            && a.count == 1
            && a.rma.addr % 8 == 0
            && matches!((a.op, a.kind), (AtomicOp::Sum, AtomicKind::Fetch) | (AtomicOp::Cswap, AtomicKind::Compare));
        if native {
            let plain = a.kind == AtomicKind::Plain;
            let caps = Caps::ATOMIC | if plain { Caps::WRITE } else { Caps::READ };
            let mut txop = TxOp::new(cid, a.context, caps, 0, false, comp);
            if !plain {
                txop.result = [a.result];
            }
            let s = Self::take_slot(g, true).ok_or(Error::Again)?;
            txop.result_slot = Some(s);
            // SAFETY: operand and compare hold one 8-byte element (lens checked
            // the count), valid for reads (post contract).
            let operand = unsafe { std::ptr::read_unaligned(a.operand.base as *const u64) };
            let (opcode, compare_add, swap) = if a.op == AtomicOp::Sum {
                (sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD, operand, 0)
            } else {
                // SAFETY: as above for the compare operand.
                let cmp = unsafe { std::ptr::read_unaligned(a.compare.base as *const u64) };
                (sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP, cmp, operand)
            };
            let post = Post {
                opcode,
                sges: Sges::one(sys::ibv_sge { addr: self.tx.slot(s) as u64, length: 8, lkey: self.tx.mr.lkey() }),
                inline: false,
                raddr: a.rma.addr,
                rkey: a.rma.key as u32,
                imm: None,
                compare_add,
                swap,
                _owned: Vec::new(),
            };
            let opid = g.ops.insert(txop);
            self.submit(g, cid, WrKind::Rma { op: opid }, post);
            return Ok(());
        }
        // Emulated: the target's engine applies it and answers.
        if l.operand > fabric_util::wire::ATOMIC_MAX || HEAD_MAX + l.operand + l.compare > BUF {
            return Err(Error::MsgSize);
        }
        self.room(g, cid, HEAD_MAX + l.operand + l.compare)?;
        // Never silent: reported as posted, `FI_COMPLETION` or not.
        g.eng.post_atomic(cid, a, false, flags - OpFlags::INJECT)?;
        self.pump(g);
        Ok(())
    }
}

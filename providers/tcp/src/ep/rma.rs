//! One-sided operations of the tcp provider: RMA writes and reads, and atomics
//! emulated at the target (`fabric_util::atomic`).
//!
//! Initiator: an operation becomes requests of at most `RMA_CHUNK` bytes on the
//! peer's connection, all under one request id; the target answers each in order
//! with `RmaResp` (status, and the data read or the prior values), and the
//! operation completes when every answer is in: a write completes once the target
//! has the data (so an `FI_EACCES` reaches the initiator's queue).
//!
//! Target: every request is checked against the memory-key registry (key, bounds,
//! access) and refused with `FI_EACCES` otherwise, leaving memory untouched and the
//! connection usable. Bytes go in and out of a region only through the registry's
//! `copy_in`/`copy_out`/`with_region`, which hold the region's access lock, so an
//! application closing a region never frees memory a copy is using. Write payloads
//! are staged before they are copied in (a payload spans several progress calls,
//! and the region could be closed in between).

use super::*;
use fabric_core::atomic::{AtomicKind, AtomicOp};
use fabric_core::prov::{AtomicDesc, RmaOp};
use fabric_core::MrAccess;
use fabric_util::atomic::{copy_operands, AtomicLens};
use fabric_util::iov;
use fabric_util::wire::{AtomicHdr, RmaDesc, RMA_CHUNK};

/// An operation we started, waiting for the target's answers.
pub(super) struct RmaPending {
    pub(super) conn: ConnId,
    pub(super) id: u64,
    pub(super) context: u64,
    pub(super) flags: Caps,
    pub(super) len: usize,
    /// Answers still to come.
    pub(super) left: usize,
    /// The first error an answer reported.
    pub(super) err: Option<Error>,
    /// Local memory answers fill (reads, fetched values), and how much is filled.
    pub(super) dest: [IoVec; IOV_LIMIT],
    pub(super) ndest: usize,
    pub(super) filled: usize,
    /// No completion (inject write): errors are only logged.
    pub(super) silent: bool,
    /// Posted with `FI_COMPLETION` ([`fabric_util::bind::Bindings::tx_done`]).
    pub(super) comp: bool,
}

fn proto(e: impl std::fmt::Display) -> (Error, String) {
    (Error::Io, format!("protocol error: {e}"))
}

impl TcpEp {
    fn rma_start(&self, g: &mut Inner, addr: FiAddr) -> Result<(ConnId, u64)> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        let conn = self.conn_for(g, addr)?;
        let id = g.next_rma;
        g.next_rma += 1;
        Ok((conn, id))
    }

    /// Post a write or read.
    pub(super) fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, read: bool, inject: Option<&[u8]>) -> Result<()> {
        Self::check_iov(op.iov)?;
        let [rma] = op.rma else { return Err(Error::Inval) };
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if rma.len != len {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        let (conn, id) = self.rma_start(&mut g, op.addr)?;
        let chunks = len.div_ceil(RMA_CHUNK).max(1);
        let mut dest = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
        if read {
            dest[..op.iov.len()].copy_from_slice(op.iov);
        }
        g.rma_pending.push(RmaPending {
            conn,
            id,
            context: op.context,
            flags: Caps::RMA | if read { Caps::READ } else { Caps::WRITE },
            len,
            left: chunks,
            err: None,
            dest,
            ndest: if read { op.iov.len() } else { 0 },
            filled: 0,
            silent: inject.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
        });
        for c in 0..chunks {
            let off = c * RMA_CHUNK;
            let n = (len - off).min(RMA_CHUNK);
            let last = c + 1 == chunks;
            let last_flag = if last { HdrFlags::LAST } else { 0 };
            let txop = if read {
                let h = Header {
                    len: n as u64,
                    flags: HdrFlags(last_flag),
                    tag: rma.addr.wrapping_add(off as u64),
                    data: rma.key,
                    id,
                    ..Header::new(OpCode::ReadReq)
                };
                TxOp::owned(h.encode(), Vec::new(), false)
            } else {
                let cq_data = last && flags.contains(OpFlags::REMOTE_CQ_DATA);
                let h = Header {
                    len: (RmaDesc::LEN + n) as u64,
                    flags: HdrFlags(last_flag | if cq_data { HdrFlags::CQ_DATA } else { 0 }),
                    tag: len as u64,
                    data: if cq_data { op.data } else { 0 },
                    id,
                    ..Header::new(OpCode::WriteReq)
                };
                let desc = RmaDesc { addr: rma.addr.wrapping_add(off as u64), key: rma.key }.encode();
                match inject {
                    Some(d) => TxOp::owned_prefixed(h.encode(), &desc, d[off..off + n].to_vec(), false),
                    None => {
                        let (pieces, k) = iov::slice(op.iov, off as u64, n as u64);
                        TxOp::user_prefixed(h.encode(), &desc, &pieces[..k], true, TxKind::Request)
                    }
                }
            };
            if let Some(c) = Self::conn_mut(&mut g, conn) {
                c.txq.push_back(txop);
            }
        }
        self.flush_conn(&mut g, conn);
        Ok(())
    }

    /// Post an atomic; with `inject` its operands are copied now; with `flags`
    /// [`OpFlags::silent`] its completion is not reported, else it is when
    /// `flags` has `COMPLETION` or the queue is not selective.
    pub(super) fn atomic_common(&self, a: &AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        let silent = flags.silent();
        let max = fabric_util::atomic::valid(a.op, a.datatype, a.kind)?;
        let size = a.datatype.size();
        let bytes = a.count.checked_mul(size).ok_or(Error::Inval)?;
        if a.count == 0 || a.count > max || a.rma.len != bytes {
            return Err(Error::Inval);
        }
        let operand_len = if a.op == AtomicOp::Read { 0 } else { bytes };
        let compare_len = if a.kind == AtomicKind::Compare { bytes } else { 0 };
        let result_len = if a.kind == AtomicKind::Plain { 0 } else { bytes };
        if a.operand.len < operand_len || a.compare.len < compare_len || a.result.len < result_len {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        if !silent && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        let (conn, id) = self.rma_start(&mut g, a.addr)?;
        let mut dest = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
        dest[0] = IoVec { base: a.result.base, len: result_len };
        g.rma_pending.push(RmaPending {
            conn,
            id,
            context: a.context,
            flags: Caps::ATOMIC | if a.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ },
            len: bytes,
            left: 1,
            err: None,
            dest,
            ndest: usize::from(result_len > 0),
            filled: 0,
            silent,
            comp: flags.contains(OpFlags::COMPLETION),
        });
        let mut prefix = [0u8; RmaDesc::LEN + AtomicHdr::LEN];
        prefix[..RmaDesc::LEN].copy_from_slice(&RmaDesc { addr: a.rma.addr, key: a.rma.key }.encode());
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let ah = AtomicHdr { op: a.op as u8, datatype: a.datatype as u8, kind, count: a.count as u32 };
        prefix[RmaDesc::LEN..].copy_from_slice(&ah.encode());
        let pieces =
            [IoVec { base: a.operand.base, len: operand_len }, IoVec { base: a.compare.base, len: compare_len }];
        let h = Header {
            len: (prefix.len() + operand_len + compare_len) as u64,
            flags: HdrFlags(HdrFlags::LAST),
            id,
            ..Header::new(OpCode::AtomicReq)
        };
        let txop = if inject {
            let l = AtomicLens { target: bytes, operand: operand_len, compare: compare_len, result: result_len };
            // SAFETY: the operands are valid for reads during the call (inject contract).
            TxOp::owned_prefixed(h.encode(), &prefix, unsafe { copy_operands(a, &l) }, false)
        } else {
            TxOp::user_prefixed(h.encode(), &prefix, &pieces, true, TxKind::Request)
        };
        if let Some(c) = Self::conn_mut(&mut g, conn) {
            c.txq.push_back(txop);
        }
        self.flush_conn(&mut g, conn);
        Ok(())
    }

    // ----- target side -----

    /// The start of one request of an operation at the target; whether it may
    /// proceed. An operation sent as several requests is tracked, per connection
    /// (`fabric_util::rma_target`), from its first (which, for a write, carries
    /// the whole length, so the whole range is checked before any byte lands) to
    /// its `LAST`; once one request is refused, the rest of the operation is too.
    /// A peer opening more than `rma_target::OPS_MAX` is disconnected.
    fn rma_begin(
        &self,
        g: &mut Inner,
        conn: ConnId,
        h: &Header,
        whole: Option<(RmaDesc, u64)>,
        need: MrAccess,
    ) -> std::result::Result<bool, (Error, String)> {
        let c = Self::conn_mut(g, conn).ok_or_else(|| proto("request on a closed connection"))?;
        // The first request of the operation: check its whole range once.
        let check = || match whole {
            Some((d, total)) => usize::try_from(total)
                .map_or(true, |n| self.domain.objs.mrs().with_region(d.key, d.addr, n, need, |_| ()).is_err())
                .then_some(Error::Access),
            None => None,
        };
        let refused = c.rma.begin(h.id, h.flags.has(HdrFlags::LAST), check).map_err(proto)?;
        Ok(refused.is_none())
    }

    /// The end of one request (`ok`: it succeeded). On the operation's last
    /// request, whether the operation as a whole succeeded.
    fn rma_end(g: &mut Inner, conn: ConnId, h: &Header, ok: bool) -> Option<bool> {
        let last = h.flags.has(HdrFlags::LAST);
        let err = (!ok).then_some(Error::Access);
        match Self::conn_mut(g, conn) {
            Some(c) => c.rma.end(h.id, last, err).map(|r| r.is_ok()),
            None => last.then_some(ok),
        }
    }

    /// A read request: answered now if the peer has room for the answer
    /// (`rma_target::Answers`), or once it took what it was sent.
    pub(super) fn on_read_req(
        &self,
        g: &mut Inner,
        conn: ConnId,
        h: Header,
    ) -> std::result::Result<(), (Error, String)> {
        let c = Self::conn_mut(g, conn).ok_or_else(|| proto("request on a closed connection"))?;
        if !c.answers.read(h) {
            return Ok(());
        }
        self.answer_read(g, conn, h)
    }

    /// Answer a read request with the bytes, or with the error.
    pub(super) fn answer_read(
        &self,
        g: &mut Inner,
        conn: ConnId,
        h: Header,
    ) -> std::result::Result<(), (Error, String)> {
        let go = self.rma_begin(g, conn, &h, None, MrAccess::REMOTE_READ)?;
        let mut buf = g.rx.unexp_buf(0).unwrap_or_default();
        buf.clear();
        buf.resize(h.len as usize, 0);
        let r = if go {
            self.domain.objs.mrs().copy_out(h.data, h.tag, &mut buf, MrAccess::REMOTE_READ)
        } else {
            Err(Error::Access)
        };
        if let Err(e) = r {
            fi_log!(Level::Info, NAME, "ep_data", "refused a remote read of {} bytes: {e}", h.len);
            buf.clear();
        }
        // Counted once per operation, when its last request went well.
        if Self::rma_end(g, conn, &h, r.is_ok()) == Some(true) {
            if let Some(c) = &g.b.rma_read_cntr {
                c.inc();
            }
        }
        let status = r.err().map_or(0, |e| e.errno());
        let r = Header { len: buf.len() as u64, data: status as u64, id: h.id, ..Header::new(OpCode::RmaResp) };
        self.answer(g, conn, TxOp::answer(r.encode(), buf));
        Ok(())
    }

    /// A write or atomic request's payload is in.
    pub(super) fn on_rma_req(
        &self,
        g: &mut Inner,
        conn: ConnId,
        h: Header,
        buf: Vec<u8>,
    ) -> std::result::Result<(), (Error, String)> {
        let desc = RmaDesc::decode(&buf).ok_or_else(|| proto("request without its target"))?;
        let (status, result) = if h.op == OpCode::WriteReq {
            let data = &buf[RmaDesc::LEN..];
            let go = self.rma_begin(g, conn, &h, Some((desc, h.tag)), MrAccess::REMOTE_WRITE)?;
            let r = if go {
                self.domain.objs.mrs().copy_in(desc.key, desc.addr, data, MrAccess::REMOTE_WRITE)
            } else {
                Err(Error::Access)
            };
            if let Err(e) = r {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote write of {} bytes: {e}", data.len());
            }
            // Counted, and its data delivered, once per operation that went well.
            if Self::rma_end(g, conn, &h, r.is_ok()) == Some(true) {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
                if h.flags.has(HdrFlags::CQ_DATA) {
                    self.remote_cq_data(g, conn, h.data);
                }
            }
            let st = r.err().map_or(0, |e| e.errno());
            (st, Vec::new())
        } else {
            self.apply_atomic(g, desc, &buf[RmaDesc::LEN..])?
        };
        g.rx.recycle(buf);
        let r = Header { len: result.len() as u64, data: status as u64, id: h.id, ..Header::new(OpCode::RmaResp) };
        self.answer(g, conn, TxOp::answer(r.encode(), result));
        Ok(())
    }

    /// Queue an answer to the peer, counted until written.
    fn answer(&self, g: &mut Inner, conn: ConnId, op: TxOp) {
        if let Some(c) = Self::conn_mut(g, conn) {
            c.answers.queued(op.total);
        }
        let _ = self.queue(g, conn, op);
    }

    fn apply_atomic(
        &self,
        g: &mut Inner,
        desc: RmaDesc,
        rest: &[u8],
    ) -> std::result::Result<(i32, Vec<u8>), (Error, String)> {
        let ah = AtomicHdr::decode(rest).ok_or_else(|| proto("atomic without its operation"))?;
        let mut result = Vec::new();
        let r = fabric_util::atomic::serve(
            self.domain.objs.mrs(),
            self.domain.objs.atomic_lock(),
            desc,
            ah,
            &rest[AtomicHdr::LEN..],
            &mut result,
        )
        .map_err(proto)?;
        let status = match r {
            Ok(()) => {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
                0
            }
            Err(e) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote atomic: {e}");
                e.errno()
            }
        };
        Ok((status, result))
    }

    /// A write with remote CQ data arrived: it completes one posted receive (or
    /// waits as an unexpected message for the next one).
    fn remote_cq_data(&self, g: &mut Inner, conn: ConnId, data: u64) {
        let src = self.src_of(g, conn);
        g.rx.rma_data(&g.b, src, data);
        self.run_rx_actions(g);
    }

    // ----- initiator side -----

    /// An answer's header: where its payload goes, if it has one.
    pub(super) fn on_rma_resp(
        &self,
        g: &mut Inner,
        conn: ConnId,
        h: Header,
    ) -> std::result::Result<Option<RxDest>, (Error, String)> {
        let Some(i) = g.rma_pending.iter().position(|p| p.conn == conn && p.id == h.id) else {
            return Err(proto(format!("answer for unknown request {}", h.id)));
        };
        if h.data != 0 {
            let p = &mut g.rma_pending[i];
            p.err.get_or_insert(Error::from_errno(h.data as i32));
        }
        if h.len == 0 {
            self.rma_answered(g, i);
            return Ok(None);
        }
        let p = &g.rma_pending[i];
        let room = IoVec::total(&p.dest[..p.ndest]).saturating_sub(p.filled);
        if h.len as usize > room {
            return Err(proto("answer longer than what was asked"));
        }
        let (iov, niov) = iov::slice(&p.dest[..p.ndest], p.filled as u64, h.len);
        let rec = PostedRecv::new(p.context, &iov[..niov], false);
        Ok(Some(RxDest::RmaData { id: h.id, rec }))
    }

    /// An answer's payload is in.
    pub(super) fn on_rma_data(&self, g: &mut Inner, conn: ConnId, id: u64, len: usize) {
        if let Some(i) = g.rma_pending.iter().position(|p| p.conn == conn && p.id == id) {
            g.rma_pending[i].filled += len;
            self.rma_answered(g, i);
        }
    }

    fn rma_answered(&self, g: &mut Inner, i: usize) {
        let p = &mut g.rma_pending[i];
        p.left -= 1;
        if p.left > 0 {
            return;
        }
        let p = g.rma_pending.swap_remove(i);
        if p.silent {
            if let Some(e) = p.err {
                fi_log!(Level::Warn, NAME, "ep_data", "an injected write failed at the target: {e}");
            }
            g.b.tx_count(p.err.is_some());
            return;
        }
        let mut e = CqEntry::new(p.context, p.flags);
        e.len = p.len;
        match p.err {
            None => g.b.tx_done(e, p.comp),
            Some(err) => g.b.tx_err(e, err),
        }
    }

    /// Fail the one-sided operations waiting on a connection.
    pub(super) fn fail_rma(&self, g: &mut Inner, conn: ConnId, err: Error) {
        let mut i = 0;
        while i < g.rma_pending.len() {
            if g.rma_pending[i].conn == conn {
                let p = g.rma_pending.swap_remove(i);
                if p.silent {
                    g.b.tx_count(true);
                } else {
                    let mut e = CqEntry::new(p.context, p.flags);
                    e.len = p.len;
                    g.b.tx_err(e, err);
                }
            } else {
                i += 1;
            }
        }
    }
}

//! Progress of the verbs provider: the connection manager's and completion
//! channel's events, the CQ polled, each work completion handled (a SEND's is
//! its engine frame's, done or failed; a READ's, its fetch's step; a native
//! operation's, its completion), frames arriving whole handed to the engine.

use super::conn::{WrKind, FIRST_MARKER};
use super::*;
use fabric_core::EqErrEntry;
use fabric_util::rdm::{Begin, Ctx, Violation};
use fabric_util::rx::IOV_LIMIT;
use fabric_util::wire::{Header, OpCode};
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

/// Work completions taken from the CQ per poll.
const WC_BATCH: usize = 32;

/// libfabric's error for a work completion status.
pub(super) fn wc_error(status: u32) -> Error {
    use sys::ibv_wc_status::*;
    match status {
        IBV_WC_LOC_LEN_ERR | IBV_WC_REM_INV_REQ_ERR => Error::MsgSize,
        IBV_WC_LOC_PROT_ERR | IBV_WC_REM_ACCESS_ERR | IBV_WC_MW_BIND_ERR => Error::Access,
        IBV_WC_WR_FLUSH_ERR => Error::Canceled,
        IBV_WC_RETRY_EXC_ERR => Error::TimedOut,
        IBV_WC_RNR_RETRY_EXC_ERR => Error::ConnReset,
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => Error::RemoteIo,
        _ => Error::Io,
    }
}

/// A peer's protocol error.
fn proto(why: impl std::fmt::Display) -> Violation {
    Violation { err: Error::Io, why: format!("protocol error: {why}") }
}

impl VerbsEp {
    /// Handle one work completion.
    pub(super) fn handle_wc(&self, g: &mut Inner, wc: &sys::ibv_wc) {
        let wid = wc.wr_id;
        if wid == super::direct::DIRECT_INJECT {
            return self.direct_inject_done(g, wc);
        }
        if wid & super::direct::DRECV_TAG != 0 {
            return self.direct_recv_done(g, wid & !super::direct::DRECV_TAG, wc);
        }
        let ok = wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS;
        let Some(rec) = g.wrs.get(wid) else { return };
        let cid = rec.conn;
        if cid != 0 && g.conns.get(cid).is_some_and(|c| c.qpn != wc.qp_num) {
            // A completion of a QP dropped since (a destroyed QP's completions
            // stay in the CQ on some devices), whose request id a request of
            // another connection took again: not that request's.
            return;
        }
        if let WrKind::SharedRecv { slot } = rec.kind {
            g.wrs.remove(wid);
            if wc.status == sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                return;
            }
            if !ok {
                fi_log!(Level::Info, NAME, "ep_data", "receive failed: {}", ibv::wc_status_str(wc.status));
            } else if let Some(&cid) = g.by_qpn.get(&wc.qp_num) {
                self.handle_recv(g, cid, slot, true, wc);
            }
            // A frame of a connection gone meanwhile is dropped; the buffer goes
            // back either way.
            if !g.closed {
                let _ = self.post_shared_slot(g, slot);
            }
            return;
        }
        if let WrKind::Recv { slot } = rec.kind {
            g.wrs.remove(wid);
            if !ok {
                if wc.status != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    fi_log!(Level::Info, NAME, "ep_data", "receive failed: {}", ibv::wc_status_str(wc.status));
                }
                return;
            }
            self.handle_recv(g, cid, slot, false, wc);
            if g.conns.get(cid).is_some() && self.post_recv_slot(g, cid, slot).is_ok() {
                if let Some(fc) = g.conns.get_mut(cid).and_then(|c| c.fc.as_mut()) {
                    fc.reposted();
                    self.return_credits(g, cid);
                }
            }
            return;
        }
        let err = (!ok).then(|| {
            let st = wc.status;
            if st != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                fi_log!(
                    Level::Info,
                    NAME,
                    "ep_data",
                    "work request failed: {} (vendor error {:#x})",
                    ibv::wc_status_str(st),
                    wc.vendor_err
                );
            }
            (wc_error(st), st as i32)
        });
        self.wr_done(g, wid, err);
        if !ok && wc.status != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            self.qp_failed(g, cid, wc.status);
        } else if !ok && self.domain.port.iwarp && g.conns.get(cid).is_some() {
            // A flush of a connection we have not dropped: on iWARP, the peer
            // ended it (a TERMINATE: it refused an access, or ran out of
            // buffers) with no error completion before; the connection
            // manager's event may come later. Nothing more goes on its QP.
            self.conn_failed(g, cid, Error::ConnReset, wc.status as i32);
        }
    }

    /// A work request on connection `cid` failed with `status` (not a flush):
    /// the QP is in the error state, so the connection is unusable.
    pub(super) fn qp_failed(&self, g: &mut Inner, cid: u64, status: sys::ibv_wc_status::Type) {
        let e = wc_error(status);
        self.conn_failed(g, cid, if e == Error::Access { Error::Canceled } else { e }, status as i32);
    }

    /// Work request `wid` completed (with `err`).
    pub(super) fn wr_done(&self, g: &mut Inner, wid: u64, err: Option<(Error, i32)>) {
        let Some(rec) = g.wrs.remove(wid) else { return };
        match rec.kind {
            WrKind::Recv { .. } | WrKind::SharedRecv { .. } => {}
            WrKind::DirectSend(d) => Self::direct_send_done(g, d, err),
            WrKind::Frame { slot, frame } => {
                if let Some(s) = slot {
                    g.tx_free.push(s);
                }
                match err {
                    None => {
                        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
                        let pr = g.conns.get_mut(rec.conn).map(|c| &mut c.pr);
                        g.eng.frame_done(cx, rec.conn, pr, frame);
                    }
                    Some((e, prov_errno)) => g.eng.frame_failed_prov(&g.b, rec.conn, frame, e, prov_errno),
                }
            }
            WrKind::Rma { op } => {
                if err.is_none() {
                    self.native_atomic_result(g, op);
                }
                Self::part_done(g, op, err);
            }
            WrKind::RndvRead { fetch } => self.fetch_step(g, fetch, err),
            WrKind::Ctl { slot } => {
                if let Some(s) = slot {
                    g.tx_free.push(s);
                }
            }
        }
        let Some(c) = g.conns.get_mut(rec.conn) else { return };
        c.sq_used = c.sq_used.saturating_sub(1);
        let fc = c.fc.is_some();
        self.drain_backlog(g, rec.conn);
        if fc {
            // A credit message may have waited for room in the send queue.
            self.return_credits(g, rec.conn);
        }
    }

    /// The source of messages arriving on connection `cid`.
    pub(super) fn src_of(g: &mut Inner, cid: u64) -> FiAddr {
        let Some(av) = g.b.av.clone() else { return FiAddr::NOTAVAIL };
        let Some(c) = g.conns.get_mut(cid) else { return FiAddr::NOTAVAIL };
        let v = av.version();
        if c.av_version != v {
            c.src = c.peer.and_then(|p| av.find(&Address::from(p))).unwrap_or(FiAddr::NOTAVAIL);
            c.av_version = v;
        }
        c.src
    }

    /// A frame arrived on connection `cid` in receive buffer `slot` of its own
    /// pool, or of the endpoint's shared pool when `shared`.
    pub(super) fn handle_recv(&self, g: &mut Inner, cid: u64, slot: usize, shared: bool, wc: &sys::ibv_wc) {
        if wc.opcode == sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
            // SAFETY: the union holds the immediate data for this opcode.
            let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
            let src = Self::src_of(g, cid);
            g.eng.rx.rma_data(&g.b, src, imm as u64);
            return;
        }
        let n = (wc.byte_len as usize).min(BUF);
        let r = if let Some(srx) = self.srx.as_ref().filter(|_| shared) {
            // SAFETY: the device wrote `n` bytes into this slot of the shared
            // pool, which lives as long as the endpoint; the slot is not
            // re-posted (and so not written) until this frame is handled.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(srx.pool.slot(slot), n) };
            self.handle_frame(g, cid, bytes)
        } else {
            // Held here while the frame is handled, so that its bytes stay valid
            // whatever handling does to the connection; put back after.
            let Some(pool) = g.conns.get_mut(cid).and_then(|c| c.rx.take()) else { return };
            // SAFETY: the device wrote `n` bytes into this slot of the pool, which
            // lives until the end of this block; the slot is not re-posted (and
            // so not written) until this frame is handled.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(pool.slot(slot), n) };
            let r = self.handle_frame(g, cid, bytes);
            if let Some(c) = g.conns.get_mut(cid) {
                c.rx = Some(pool);
            }
            r
        };
        if let Err(v) = r {
            fi_log!(Level::Warn, NAME, "ep_data", "protocol error from a peer ({v}): dropping the connection");
            self.conn_failed(g, cid, v.err, 0);
        }
    }

    /// A frame arrived whole on connection `cid`: to the engine, after those it
    /// holds of the connection.
    pub(super) fn handle_frame(&self, g: &mut Inner, cid: u64, bytes: &[u8]) -> std::result::Result<(), Violation> {
        if bytes.len() < HDR_LEN && self.domain.port.iwarp {
            if bytes == FIRST_MARKER {
                self.peer_spoke(g, cid);
                return Ok(());
            }
            if let Some(data) = super::conn::decode_write_data(bytes) {
                // A write with remote CQ data, placed before this arrived.
                let src = Self::src_of(g, cid);
                g.eng.rx.rma_data(&g.b, src, data);
                return Ok(());
            }
            if let Some(n) = super::credits::decode(bytes) {
                if let Some(fc) = g.conns.get_mut(cid).and_then(|c| c.fc.as_mut()) {
                    fc.granted(n);
                    self.drain_backlog(g, cid);
                    self.return_credits(g, cid);
                }
                return Ok(());
            }
        }
        let behind = g.conns.get(cid).is_some_and(|c| !c.held.is_empty());
        if behind || !self.deliver(g, cid, bytes)? {
            if let Some(c) = g.conns.get_mut(cid) {
                c.held.push_back(bytes.to_vec());
                g.any_held = true;
            }
        }
        Ok(())
    }

    /// Offer frame `bytes` of connection `cid` to the engine; false when it
    /// holds it (the peer is owed too many answers): offer it again later.
    pub(super) fn deliver(&self, g: &mut Inner, cid: u64, bytes: &[u8]) -> std::result::Result<bool, Violation> {
        let head: &[u8; HDR_LEN] =
            bytes.get(..HDR_LEN).and_then(|h| h.try_into().ok()).ok_or_else(|| proto("short frame"))?;
        let hdr = Header::decode(head, MAX_MSG as u64).map_err(proto)?;
        let body = &bytes[HDR_LEN..];
        match hdr.op {
            OpCode::Msg | OpCode::Cts | OpCode::Nack | OpCode::AtomicReq | OpCode::RmaResp => {}
            // Checked as it arrives, fetched once matched.
            OpCode::Rts => {
                fabric_util::verbs_wire::decode_rts(body, hdr.len, IOV_LIMIT).map_err(proto)?;
            }
            op => return Err(proto(format!("frame {op} is not used over verbs"))),
        }
        let src = Self::src_of(g, cid);
        let Some(c) = g.conns.get_mut(cid) else { return Ok(true) };
        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
        Ok(g.eng.frame(cx, &mut c.pr, cid, src, hdr, body)? != Begin::Hold)
    }

    /// Offer the frames the engine held again, as far as it takes them.
    pub(super) fn retry_held(&self, g: &mut Inner) {
        g.any_held = false;
        for cid in g.conns.ids(|c| !c.held.is_empty()) {
            while let Some(bytes) = g.conns.get_mut(cid).and_then(|c| c.held.pop_front()) {
                match self.deliver(g, cid, &bytes) {
                    Ok(true) => {}
                    Ok(false) => {
                        if let Some(c) = g.conns.get_mut(cid) {
                            c.held.push_front(bytes);
                            g.any_held = true;
                        }
                        break;
                    }
                    Err(v) => {
                        fi_log!(
                            Level::Warn,
                            NAME,
                            "ep_data",
                            "protocol error from a peer ({v}): dropping the connection"
                        );
                        self.conn_failed(g, cid, v.err, 0);
                        break;
                    }
                }
            }
        }
    }

    pub(super) fn progress_locked(&self, g: &mut Inner) {
        // The control channels cost a system call each to read, even empty;
        // a polling loop reads them every CTL_INTERVAL, not on every poll. The
        // clock is read every CLOCK_POLLS calls only: where the clock source
        // has no user-space reading (a guest's hpet) it is a system call too.
        let iwarp = self.domain.port.iwarp;
        g.ctl_tick += 1;
        let mut ctl = g.force_ctl;
        if ctl || iwarp || g.ctl_tick >= CLOCK_POLLS {
            g.ctl_tick = 0;
            let now = Instant::now();
            let every = if iwarp { CTL_INTERVAL_IWARP } else { CTL_INTERVAL };
            ctl = ctl || now.duration_since(g.last_ctl) >= every;
            if ctl {
                g.last_ctl = now;
            }
        }
        if ctl {
            g.force_ctl = false;
            while let Some(ev) = self.cm.next() {
                self.handle_cm(g, ev);
            }
            // Notifications of an armed CQ (armed only before a sleep or a
            // trywait: an armed CQ costs an event per completion) are consumed
            // and not asked for again; the polling below finds the completions.
            let mut cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
            cq.drain_events();
        }
        if self.poll_cq(g) == 0 {
            g.async_tick += 1;
        }
        if g.any_held {
            self.retry_held(g);
        }
        self.pump(g);
        if g.async_tick >= 1024 {
            g.async_tick = 0;
            self.async_events(g);
        }
    }

    /// Handle every work completion the CQ holds; how many.
    pub(super) fn poll_cq(&self, g: &mut Inner) -> usize {
        let mut wcs = [const { MaybeUninit::<sys::ibv_wc>::uninit() }; WC_BATCH];
        let mut total = 0;
        loop {
            let cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
            let got = cq.poll(&mut wcs).unwrap_or(&[]);
            drop(cq);
            for wc in got {
                self.handle_wc(g, wc);
            }
            total += got.len();
            if got.len() < WC_BATCH {
                return total;
            }
        }
    }

    /// The device's asynchronous events about our QPs: errors break their
    /// connections, with the event type as the provider error.
    pub(super) fn async_events(&self, g: &mut Inner) {
        let mine = self.domain.take_async(&|q| g.by_qpn.contains_key(&q));
        for (t, qpn) in mine {
            use sys::ibv_event_type as E;
            let fatal = [E::IBV_EVENT_QP_FATAL, E::IBV_EVENT_QP_REQ_ERR, E::IBV_EVENT_QP_ACCESS_ERR];
            if t == E::IBV_EVENT_COMM_EST as u32 {
                if let Some(c) = g.by_qpn.get(&qpn).and_then(|&cid| g.conns.get(cid)) {
                    c.id.notify_established();
                }
            } else if fatal.iter().any(|e| *e as u32 == t) {
                let (name, _) = ibv::async_event_str(t);
                fi_log!(Level::Warn, NAME, "ep_ctrl", "QP {qpn:#x}: {name} ({t})");
                if let Some(&cid) = g.by_qpn.get(&qpn) {
                    if let Some(eq) = &g.b.eq {
                        eq.push_err(EqErrEntry {
                            fid: self.fid,
                            err: Error::Io,
                            prov_errno: t as i32,
                            data: Vec::new(),
                        });
                    }
                    self.conn_failed(g, cid, Error::Io, t as i32);
                }
            }
        }
    }
}

impl Progress for VerbsEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.wait.fd())
    }

    fn prepare_sleep(&self) {
        // Armed as for a trywait; the progress before the sleep reads every
        // channel.
        self.trywait();
    }

    fn end_sleep(&self) {
        self.lock().force_ctl = true;
    }

    fn trywait(&self) {
        // One notification at the next completion, and the next progress reads
        // the channels whatever the time.
        let cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cq.arm();
        drop(cq);
        self.lock().force_ctl = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_statuses_map_to_libfabric_errors() {
        use sys::ibv_wc_status::*;
        assert_eq!(wc_error(IBV_WC_REM_ACCESS_ERR), Error::Access);
        assert_eq!(wc_error(IBV_WC_WR_FLUSH_ERR), Error::Canceled);
        assert_eq!(wc_error(IBV_WC_RETRY_EXC_ERR), Error::TimedOut);
        assert_eq!(wc_error(IBV_WC_LOC_LEN_ERR), Error::MsgSize);
        assert_eq!(wc_error(IBV_WC_GENERAL_ERR), Error::Io);
    }
}

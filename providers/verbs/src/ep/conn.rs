//! A connection (one RC QP) and its work requests: receive buffers, SENDs of the
//! engine's frames (inline, or from a bounce buffer), RDMA reads, writes and
//! atomics, queued while the connection is not up or its send queue is full.

use super::credits::{self, Credits};
use super::*;
use crate::ibv::QpCaps;
use fabric_util::rdm::{Ctx, PeerRx};
use fabric_util::rx::IOV_LIMIT;

/// Whether work request `p` is a SEND (it fills one of the peer's receive
/// buffers).
fn is_send(p: &Post) -> bool {
    p.opcode == sys::ibv_wr_opcode::IBV_WR_SEND
}

/// What a posted work request is, found again by its `wr_id` (a slab id).
// A SEND holds its frame inline: no allocation per message.
#[allow(clippy::large_enum_variant)]
pub(super) enum WrKind {
    /// Receive buffer `slot` of its connection.
    Recv { slot: usize },
    /// Receive buffer `slot` of the endpoint's shared receive queue (the
    /// connection is the completion's QP).
    SharedRecv { slot: usize },
    /// A SEND of an engine frame: its bounce slot (none if inline), and the
    /// frame (reported done, or failed, at its completion).
    Frame { slot: Option<usize>, frame: Frame },
    /// An RDMA write or read, or a native atomic, of user operation `op`.
    Rma { op: u64 },
    /// A read of an incoming rendezvous message (`fetch`: its [`FetchIn`]).
    RndvRead { fetch: u64 },
    /// A SEND of the direct path (`direct.rs`).
    DirectSend(super::direct::DSend),
    /// A control SEND of iWARP (the active side's first message,
    /// [`FIRST_MARKER`], or a credit message), from bounce slot `slot` when not
    /// inline.
    Ctl { slot: Option<usize> },
}

/// The active side's first message on an iWARP connection: iWARP (MPA) lets
/// the passive side send only once the active side has, so the active side
/// sends these bytes as soon as the connection is up, and the passive side
/// holds its own sends until they arrive. Shorter than any frame's header, so
/// never taken for one.
pub(super) const FIRST_MARKER: [u8; 4] = *b"FBIW";

/// iWARP's remote CQ data of a write (it has no write with immediate data):
/// a SEND of these 4 bytes and the data (u64, little endian), posted after the
/// write on its connection, so that it arrives once the write is placed. Shorter
/// than any frame's header, so never taken for one.
pub(super) const WRITE_DATA_TAG: [u8; 4] = *b"FBWD";
/// Bytes of a write's data message.
pub(super) const WRITE_DATA_LEN: usize = 12;
// Shorter than any frame's header: never taken for a frame.
const _: () = assert!(WRITE_DATA_LEN < HDR_LEN);

/// The write's data message carrying `data`.
pub(super) fn write_data_msg(data: u64) -> [u8; WRITE_DATA_LEN] {
    ctl_msg(WRITE_DATA_TAG, &data.to_le_bytes())
}

/// The data a received SEND's bytes carry, if it is a write's data message.
pub(super) fn decode_write_data(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(ctl_value::<WRITE_DATA_LEN>(WRITE_DATA_TAG, bytes)?.try_into().ok()?))
}

/// An iWARP control message of `N` bytes (a write's data, a credit message):
/// `tag`, then `value` (the rest).
pub(super) fn ctl_msg<const N: usize>(tag: [u8; 4], value: &[u8]) -> [u8; N] {
    let mut m = [0u8; N];
    m[..4].copy_from_slice(&tag);
    m[4..].copy_from_slice(value);
    m
}

/// The value of control message `bytes` if it is one of `tag`, `N` bytes long.
pub(super) fn ctl_value<const N: usize>(tag: [u8; 4], bytes: &[u8]) -> Option<&[u8]> {
    (bytes.len() == N && bytes[..4] == tag).then(|| &bytes[4..])
}

/// A work request not yet posted (its connection is not up, or its send queue
/// is full), or being posted.
pub(super) struct Post {
    pub(super) opcode: u32,
    pub(super) sges: Sges,
    pub(super) inline: bool,
    pub(super) raddr: u64,
    pub(super) rkey: u32,
    pub(super) imm: Option<u32>,
    pub(super) compare_add: u64,
    pub(super) swap: u64,
    /// Bytes an inline SEND carries: the SGE points at them, so they live here
    /// until the post copies them.
    pub(super) _owned: Vec<u8>,
}

impl Post {
    /// A SEND of one piece (`inline`: its bytes are copied by the post;
    /// `owned`: bytes the piece points into, kept while the request waits).
    pub(super) fn send(sge: sys::ibv_sge, inline: bool, owned: Vec<u8>) -> Post {
        Post {
            opcode: sys::ibv_wr_opcode::IBV_WR_SEND,
            sges: Sges::one(sge),
            inline,
            raddr: 0,
            rkey: 0,
            imm: None,
            compare_add: 0,
            swap: 0,
            _owned: owned,
        }
    }
}

/// The scatter-gather entries of one work request, held inline (no allocation):
/// at most [`SGE_MAX`].
#[derive(Clone, Copy)]
pub(super) struct Sges {
    pub(super) v: [sys::ibv_sge; SGE_MAX],
    /// Entries used, `<= SGE_MAX`.
    pub(super) n: usize,
}

/// The largest inline frame assembled on the stack when posted at once.
pub(super) const STACK_INLINE: usize = 1024;

/// The most scatter-gather entries of a work request: an operation's pieces
/// plus one (a frame's header).
pub(super) const SGE_MAX: usize = IOV_LIMIT + 1;

impl Sges {
    pub(super) fn one(s: sys::ibv_sge) -> Sges {
        let mut v = Sges::none();
        v.v[0] = s;
        v.n = 1;
        v
    }

    pub(super) fn none() -> Sges {
        Sges { v: [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; SGE_MAX], n: 0 }
    }

    /// Add one entry; `Err(Inval)` past [`SGE_MAX`].
    pub(super) fn push(&mut self, s: sys::ibv_sge) -> Result<()> {
        let slot = self.v.get_mut(self.n).ok_or(Error::Inval)?;
        *slot = s;
        self.n += 1;
        Ok(())
    }
}

/// A work request posted or waiting in a connection's backlog (which holds
/// its [`Post`] until it goes out, so that the record of every posted request,
/// moved in and out of the table once each, stays small).
pub(super) struct WrRec {
    /// The connection (0, which no slab id is, for a shared receive: its
    /// connection is the completion's QP).
    pub(super) conn: u64,
    pub(super) kind: WrKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Resolving the address and route (active side).
    Resolving,
    /// Connect or accept sent, not yet established.
    Connecting,
    /// Established, iWARP, passive side: the active side's first message
    /// ([`FIRST_MARKER`]) not yet arrived; nothing is sent before it.
    AwaitPeer,
    Up,
}

/// One RC connection.
pub(super) struct Conn {
    pub(super) id: CmId,
    pub(super) state: ConnState,
    /// The peer's endpoint name (RDM), or the peer's address (MSG).
    pub(super) peer: Option<SocketAddr>,
    /// The peer's AV handle (RDM), valid for `av_version`.
    pub(super) src: FiAddr,
    pub(super) av_version: u64,
    /// Its receive buffers (once the QP exists), unless it receives through
    /// the endpoint's shared receive queue.
    pub(super) rx: Option<Pool>,
    pub(super) caps: QpCaps,
    pub(super) qpn: u32,
    /// Send-queue entries in use.
    pub(super) sq_used: u32,
    /// Work requests waiting for the connection or for room, in order: each
    /// one's id in the table and its request.
    pub(super) backlog: VecDeque<(u64, Post)>,
    /// Private data to connect with, once the route is resolved.
    pub(super) connect_data: Vec<u8>,
    /// What the engine keeps of the peer (its frame arriving, its RMA
    /// operations here, the answers it is owed).
    pub(super) pr: PeerRx,
    /// Frames the engine held (the peer is owed too many answers), in order,
    /// with every frame after them: offered again as answers go out.
    pub(super) held: VecDeque<Vec<u8>>,
    /// We connected (the active side), rather than accepted.
    pub(super) active: bool,
    /// The active side's first message arrived (iWARP, passive side), perhaps
    /// before the connection manager said the connection is up.
    pub(super) peer_spoke: bool,
    /// iWARP, active side: how many times the connection started over on a
    /// new identifier because TCP held the port the first one was given.
    pub(super) port_tries: u32,
    /// iWARP: the connection's receive credits (no receiver-not-ready retry:
    /// a SEND only goes where the peer has a buffer posted).
    pub(super) fc: Option<Credits>,
}

impl VerbsEp {
    /// Register a new connection for identifier `id`.
    pub(super) fn add_conn(g: &mut Inner, id: CmId, state: ConnState, peer: Option<SocketAddr>) -> u64 {
        let key = id.raw() as usize;
        let c = Conn {
            id,
            state,
            peer,
            src: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            rx: None,
            caps: QpCaps { send_wr: 0, recv_wr: 0, sge: 0, recv_sge: 0, inline: 0 },
            qpn: 0,
            sq_used: 0,
            backlog: VecDeque::new(),
            connect_data: Vec::new(),
            pr: PeerRx::new(),
            held: VecDeque::new(),
            active: state == ConnState::Resolving,
            peer_spoke: false,
            port_tries: 0,
            fc: None,
        };
        let cid = g.conns.insert(c);
        g.by_id.insert(key, cid);
        cid
    }

    /// Create connection `cid`'s QP and post its receive buffers.
    pub(super) fn setup_qp(&self, g: &mut Inner, cid: u64) -> Result<()> {
        // The direct path (chosen, or offered: `direct.rs`) posts the
        // application's receives, each with a scratch entry.
        let direct = !self.rdm() && g.path != Path::Engine;
        let sge = (IOV_LIMIT + 1).min(self.domain.port.max_sge.max(1) as usize) as u32;
        let want = QpCaps {
            send_wr: SQ_DEPTH,
            recv_wr: if direct { self.rx_depth() } else { NRX as u32 },
            sge,
            recv_sge: if direct { sge } else { 1 },
            inline: self.inline_max as u32,
        };
        // The connection manager picks a connection's device by address: where
        // two devices share one (rxe and siw on one interface), it may pick
        // another than the domain's, whose QP it could not drive.
        let dev = g.conns.get(cid).ok_or(Error::NotConn)?.id.device_name();
        if let Some(dev) = dev.filter(|d| *d != self.domain.port.dev) {
            fi_log!(
                Level::Warn,
                NAME,
                "ep_ctrl",
                "the connection manager chose device {dev} for {}, not this domain's {}: \
                 two RDMA devices share the address (give each its own)",
                self.domain.port.iface.addr,
                self.domain.port.dev
            );
            return Err(Error::AddrNotAvail);
        }
        let srq = self.srx.as_ref().map(|x| &x.srq);
        // Buffers of our own for the engine; the direct path needs none, but
        // the active side offering it keeps them in case the peer declines.
        let active = g.conns.get(cid).is_some_and(|c| c.active);
        let engine = g.path == Path::Engine || (g.path == Path::Offered && active);
        let pool = if srq.is_some() || !engine { None } else { Some(Pool::new(&self.domain, NRX)?) };
        let cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
        let c = g.conns.get_mut(cid).ok_or(Error::NotConn)?;
        c.caps = c.id.create_qp(&self.domain.pd, &cq, srq, want).map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "ibv_create_qp failed: {e}");
            Error::from(e)
        })?;
        drop(cq);
        c.qpn = c.id.qp_num();
        let own = pool.is_some();
        c.rx = pool;
        if own && self.domain.port.iwarp {
            // Both sides post NRX buffers per connection.
            c.fc = Some(Credits::new(NRX as u32));
        }
        let qpn = c.qpn;
        g.by_qpn.insert(qpn, cid);
        if own && g.path == Path::Engine {
            for slot in 0..NRX {
                self.post_recv_slot(g, cid, slot)?;
            }
        }
        Ok(())
    }

    /// Post buffer `slot` of the shared receive queue.
    pub(super) fn post_shared_slot(&self, g: &mut Inner, slot: usize) -> Result<()> {
        let srx = self.srx.as_ref().ok_or(Error::NotConn)?;
        let wid = g.wrs.insert(WrRec { conn: 0, kind: WrKind::SharedRecv { slot } });
        let mut sge = sys::ibv_sge { addr: srx.pool.slot(slot) as u64, length: BUF as u32, lkey: srx.pool.mr.lkey() };
        let mut wr = sys::ibv_recv_wr { wr_id: wid, next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        // SAFETY: the SGE is one slot of the shared pool, registered, which lives
        // as long as the endpoint (and so the SRQ, dropped before it).
        if let Err(e) = unsafe { srx.srq.post_recv(&mut wr) } {
            g.wrs.remove(wid);
            fi_log!(Level::Warn, NAME, "ep_data", "ibv_post_srq_recv failed: {e}");
            return Err(e.into());
        }
        Ok(())
    }

    /// Post receive buffer `slot` of connection `cid`.
    pub(super) fn post_recv_slot(&self, g: &mut Inner, cid: u64, slot: usize) -> Result<()> {
        let wid = g.wrs.insert(WrRec { conn: cid, kind: WrKind::Recv { slot } });
        let Some(c) = g.conns.get(cid) else {
            g.wrs.remove(wid);
            return Err(Error::NotConn);
        };
        let pool = c.rx.as_ref().ok_or(Error::NotConn)?;
        let mut sge = sys::ibv_sge { addr: pool.slot(slot) as u64, length: BUF as u32, lkey: pool.mr.lkey() };
        let mut wr = sys::ibv_recv_wr { wr_id: wid, next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        // SAFETY: the SGE is one slot of the connection's registered pool, which
        // lives as long as the connection (and its QP).
        if let Err(e) = unsafe { c.id.post_recv(&mut wr) } {
            g.wrs.remove(wid);
            fi_log!(Level::Warn, NAME, "ep_data", "ibv_post_recv failed: {e}");
            return Err(e.into());
        }
        Ok(())
    }

    /// Forget connection `cid`: fail what waits on it with `err` (the engine's
    /// frames and everything it had in flight with the peer, native operations),
    /// destroy its identifier and QP.
    pub(super) fn drop_conn(&self, g: &mut Inner, cid: u64, err: Error, prov_errno: i32) {
        let Some(mut c) = g.conns.remove(cid) else { return };
        g.by_id.remove(&(c.id.raw() as usize));
        g.by_qpn.remove(&c.qpn);
        if let Some(p) = c.peer {
            if g.by_peer.get(&p) == Some(&cid) {
                g.by_peer.remove(&p);
            }
        }
        // Work requests of the connection: gone with its QP.
        let mut direct = Vec::new();
        let recvs: Vec<_> = g.drecvs.ids(|r| r.conn == cid).into_iter().filter_map(|id| g.drecvs.remove(id)).collect();
        for wid in g.wrs.ids(|w| w.conn == cid) {
            match g.wrs.remove(wid) {
                Some(WrRec { kind: WrKind::Frame { slot, frame }, .. }) => {
                    if let Some(s) = slot {
                        g.tx_free.push(s);
                    }
                    g.eng.frame_failed_prov(&g.b, cid, frame, err, prov_errno);
                }
                Some(r @ WrRec { kind: WrKind::DirectSend(_), .. }) => direct.push(r),
                _ => {}
            }
        }
        let mut i = 0;
        while i < g.deferred.len() {
            if g.deferred[i].0 == cid {
                let (_, f) = g.deferred.remove(i).expect("index in range");
                g.eng.frame_failed_prov(&g.b, cid, f, err, prov_errno);
            } else {
                i += 1;
            }
        }
        for opid in g.ops.ids(|o| o.conn == cid) {
            Self::finish_op(g, opid, Some((err, prov_errno)));
        }
        // Its fetches: their receives fail with the rest of the peer's.
        for fid in g.fetching.ids(|f| f.conn == cid) {
            g.fetching.remove(fid);
        }
        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
        g.eng.peer_lost_prov(cx, &mut c.pr, cid, err, prov_errno);
        c.id.disconnect();
        drop(c);
        // The QP is gone: the direct path's buffers are the application's again.
        if !direct.is_empty() || !recvs.is_empty() {
            Self::direct_dropped(g, direct, recvs, err, prov_errno);
        }
    }

    /// Queue or post work request `post` of kind `kind` on connection `cid`
    /// (at once when the connection can take it: nothing queued, room).
    pub(super) fn submit(&self, g: &mut Inner, cid: u64, kind: WrKind, mut post: Post) {
        if Self::can_post_now(g, cid, is_send(&post)) {
            self.post_now(g, cid, kind, &mut post);
            return;
        }
        let wid = g.wrs.insert(WrRec { conn: cid, kind });
        if let Some(c) = g.conns.get_mut(cid) {
            c.backlog.push_back((wid, post));
        }
        self.drain_backlog(g, cid);
    }

    /// Whether connection `cid` takes a work request now: up, nothing waiting
    /// before it, room in its send queue, and for a frame's SEND (`send`) a
    /// receive credit (iWARP).
    pub(super) fn can_post_now(g: &Inner, cid: u64, send: bool) -> bool {
        g.conns.get(cid).is_some_and(|c| {
            c.state == ConnState::Up
                && c.backlog.is_empty()
                && c.sq_used < c.caps.send_wr
                && (!send || c.fc.as_ref().map_or(true, Credits::frame_ok))
        })
    }

    /// Post `p` of kind `kind` on connection `cid` now; the caller checked
    /// [`VerbsEp::can_post_now`] (or, for a control SEND, took its credit).
    /// `p`'s memory need only live through the call.
    pub(super) fn post_now(&self, g: &mut Inner, cid: u64, kind: WrKind, p: &mut Post) {
        let frame_send = is_send(p) && !matches!(kind, WrKind::Ctl { .. });
        let wid = g.wrs.insert(WrRec { conn: cid, kind });
        if let Some(c) = g.conns.get_mut(cid) {
            c.sq_used += 1;
            if frame_send {
                if let Some(fc) = c.fc.as_mut() {
                    fc.frame_sent();
                }
            }
        }
        self.post_wr(g, cid, wid, p);
    }

    /// Post work request `wid` (`p`) on connection `cid`, whose send-queue
    /// entry the caller counted; a failure completes it with the error.
    pub(super) fn post_wr(&self, g: &mut Inner, cid: u64, wid: u64, p: &mut Post) {
        let Some(c) = g.conns.get(cid) else {
            // (Callers checked the connection; were it gone, its operation ends.)
            self.wr_done(g, wid, Some((Error::NotConn, 0)));
            return;
        };
        let mut flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        if p.inline {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        // SAFETY: ibv_send_wr is plain data; zeroed is valid.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wid;
        wr.sg_list = p.sges.v.as_mut_ptr();
        wr.num_sge = p.sges.n as i32;
        wr.opcode = p.opcode;
        wr.send_flags = flags;
        if let Some(imm) = p.imm {
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        match p.opcode {
            sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD | sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP => {
                wr.wr.atomic =
                    sys::atomic_t { remote_addr: p.raddr, compare_add: p.compare_add, swap: p.swap, rkey: p.rkey };
            }
            _ => wr.wr.rdma = sys::rdma_t { remote_addr: p.raddr, rkey: p.rkey },
        }
        // SAFETY: every SGE describes registered memory that outlives the
        // request (a bounce slot or pool, a region found or registered for the
        // operation and kept with it), or inline bytes alive during the call
        // (owned by `p`, or the caller's for a post made at once; inline data is
        // copied by the post).
        let r = unsafe { c.id.post_send(&mut wr) };
        if let Err(e) = r {
            fi_log!(
                Level::Warn,
                NAME,
                "ep_data",
                "ibv_post_send failed: {e} (QP state {})",
                c.id.qp_state().map_or_else(|| "unknown".to_string(), |s| s.to_string())
            );
            if let Some(c) = g.conns.get_mut(cid) {
                c.sq_used -= 1;
            }
            let errno = e.raw_os_error().unwrap_or(0);
            self.wr_done(g, wid, Some((Error::from(e), errno)));
        }
    }

    /// Post what waits on connection `cid`, while it is up and has room (and,
    /// for a SEND, a receive credit: iWARP).
    pub(super) fn drain_backlog(&self, g: &mut Inner, cid: u64) {
        loop {
            let Some(c) = g.conns.get_mut(cid) else { return };
            if c.state != ConnState::Up || c.sq_used >= c.caps.send_wr {
                return;
            }
            let Some(&(wid, ref p)) = c.backlog.front() else { return };
            // A request whose record is gone (its operation ended) is dropped.
            let live = g.wrs.get(wid).is_some();
            if let Some(fc) = c.fc.as_mut() {
                // (Backlogged SENDs are frames: control SENDs go at once.)
                if live && is_send(p) {
                    if !fc.frame_ok() {
                        return;
                    }
                    fc.frame_sent();
                }
            }
            let Some((_, mut p)) = c.backlog.pop_front() else { return };
            if !live {
                continue;
            }
            c.sq_used += 1;
            self.post_wr(g, cid, wid, &mut p);
        }
    }

    /// The most bytes a work request on connection `cid` carries inline: what
    /// the endpoint allows and the connection's QP was granted (0 before the QP
    /// exists).
    pub(super) fn inline_limit(&self, g: &Inner, cid: u64) -> usize {
        g.conns.get(cid).map_or(0, |c| self.inline_max.min(c.caps.inline as usize))
    }

    /// A bounce slot, if one is free (user operations leave [`TX_RESERVE`]).
    pub(super) fn take_slot(g: &mut Inner, user: bool) -> Option<usize> {
        if user && g.tx_free.len() <= TX_RESERVE {
            return None;
        }
        g.tx_free.pop()
    }

    /// Send [`FIRST_MARKER`] on connection `cid` (up, iWARP, active side).
    pub(super) fn send_marker(&self, g: &mut Inner, cid: u64) {
        if let Some(fc) = g.conns.get_mut(cid).and_then(|c| c.fc.as_mut()) {
            fc.control_sent();
        }
        if !self.send_ctl(g, cid, &FIRST_MARKER) {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "no bounce buffer for the first message of an iWARP connection");
        }
    }

    /// Return the credits connection `cid` owes its peer (iWARP), if a credit
    /// message is due ([`Credits::update_due`]) and can go now (up, room in
    /// the send queue, a bounce buffer if not inline).
    pub(super) fn return_credits(&self, g: &mut Inner, cid: u64) {
        let Some(c) = g.conns.get(cid) else { return };
        if c.state != ConnState::Up || c.sq_used >= c.caps.send_wr {
            return;
        }
        let Some(n) = c.fc.as_ref().and_then(Credits::update_due) else { return };
        if self.send_ctl(g, cid, &credits::encode(n)) {
            if let Some(fc) = g.conns.get_mut(cid).and_then(|c| c.fc.as_mut()) {
                fc.update_sent(n);
            }
        }
    }

    /// Post control SEND `bytes` (shorter than a frame's header) on connection
    /// `cid` now, ahead of its backlog: inline when the QP takes it inline,
    /// else from a bounce slot; false when no slot is free. Its credit is the
    /// caller's to count.
    fn send_ctl(&self, g: &mut Inner, cid: u64, bytes: &[u8]) -> bool {
        debug_assert!(bytes.len() < HDR_LEN);
        let inline = g.conns.get(cid).is_some_and(|c| c.caps.inline as usize >= bytes.len());
        let (sge, slot) = if inline {
            (sys::ibv_sge { addr: bytes.as_ptr() as u64, length: bytes.len() as u32, lkey: 0 }, None)
        } else {
            let Some(s) = Self::take_slot(g, false) else { return false };
            // SAFETY: the slot holds BUF bytes, more than a control message's.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.tx.slot(s), bytes.len()) };
            let sge =
                sys::ibv_sge { addr: self.tx.slot(s) as u64, length: bytes.len() as u32, lkey: self.tx.mr.lkey() };
            (sge, Some(s))
        };
        // `bytes` lives through the post, which copies them when inline.
        let mut post = Post::send(sge, inline, Vec::new());
        self.post_now(g, cid, WrKind::Ctl { slot }, &mut post);
        true
    }

    /// Send engine frame `f` on connection `cid`: inline when it fits, else
    /// from a bounce slot; `Some(f)` when no slot is free (it waits, in order).
    pub(super) fn send_frame(&self, g: &mut Inner, cid: u64, f: Frame) -> Option<Frame> {
        if g.conns.get(cid).is_none() {
            g.eng.frame_failed(&g.b, cid, f, Error::ConnReset);
            return None;
        }
        let total = f.total;
        debug_assert!(total <= BUF);
        let inline = total <= self.inline_limit(g, cid);
        // (User operations checked for their slot when posted: see `room`.)
        let slot = match inline {
            true => None,
            false => match g.tx_free.pop() {
                Some(s) => Some(s),
                None => return Some(f),
            },
        };
        // An inline frame posted at once is assembled on the stack (the post
        // copies it); one that must wait in the backlog, in `owned`.
        let now = Self::can_post_now(g, cid, true);
        // Not cleared: only the `total` bytes written below are posted.
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); STACK_INLINE];
        let mut owned = Vec::new();
        let dst: *mut u8 = match slot {
            Some(s) => self.tx.slot(s),
            None if now && total <= STACK_INLINE => stack.as_mut_ptr().cast(),
            None => {
                owned.resize(total, 0);
                owned.as_mut_ptr()
            }
        };
        // SAFETY: `dst` has room for `total` bytes (a bounce slot of BUF,
        // `stack` or `owned`); the frame's payload pieces are valid for reads
        // until it is reported done or failed (the engine's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(f.head.as_ptr(), dst, f.head_len);
            fabric_util::iov::gather(f.payload(), 0, dst.add(f.head_len), total - f.head_len);
        }
        let lkey = self.tx.mr.lkey();
        let sge = sys::ibv_sge { addr: dst as u64, length: total as u32, lkey };
        let mut post = Post::send(sge, inline, owned);
        let kind = WrKind::Frame { slot, frame: f };
        if now {
            // `stack` (if used) lives through the post, which copies it.
            self.post_now(g, cid, kind, &mut post);
        } else {
            self.submit(g, cid, kind, post);
        }
        None
    }

    /// Whether a frame of `total` bytes on connection `cid` has room to go now:
    /// inline, or a bounce slot beyond the [`TX_RESERVE`] left for the
    /// endpoint's own answers. A user operation without room fails with
    /// `FI_EAGAIN`.
    pub(super) fn room(&self, g: &Inner, cid: u64, total: usize) -> Result<()> {
        if total > self.inline_limit(g, cid) && g.tx_free.len() <= TX_RESERVE {
            return Err(Error::Again);
        }
        Ok(())
    }

    /// The local key of `len` bytes at `base`, and their remote key when
    /// `remote_read` (a rendezvous send's piece, which the receiver READs):
    /// the application's region covering them (one a peer may read when
    /// `remote_read`: a region registered for sending is, so the announce
    /// costs no registration), or a registration made now and kept in `tmp`
    /// until the operation ends.
    pub(super) fn lkey_for(
        &self,
        base: *mut u8,
        len: usize,
        remote_read: bool,
        tmp: &mut Vec<ibv::Mr>,
    ) -> Result<(u32, u32)> {
        if let Some(r) = self.domain.find_region(base, len, remote_read) {
            return Ok((r.lkey(), if remote_read { r.rkey() } else { 0 }));
        }
        let mut access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_read {
            access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        // SAFETY: the memory is the application's buffer of an operation in
        // flight, valid until its completion (post contract); the registration
        // is dropped when the operation ends, before that completion is reported.
        let mr = unsafe { ibv::Mr::new(&self.domain.pd, base, len, access) }.map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_data", "ibv_reg_mr of a {len}-byte buffer failed: {e}");
            Error::from(e)
        })?;
        let keys = (mr.lkey(), mr.rkey());
        tmp.push(mr);
        Ok(keys)
    }

    /// SGEs for `iov` (non-empty pieces), with local keys.
    pub(super) fn sges_for(&self, iov: &[IoVec], tmp: &mut Vec<ibv::Mr>) -> Result<Sges> {
        let mut v = Sges::none();
        for p in iov.iter().filter(|p| p.len > 0) {
            let (lkey, _) = self.lkey_for(p.base, p.len, false, tmp)?;
            v.push(sys::ibv_sge { addr: p.base as u64, length: p.len as u32, lkey })?;
        }
        Ok(v)
    }
}

//! The direct data path of MSG endpoints (`FI_VERBS_MSG_DIRECT`), as
//! libfabric's verbs MSG endpoints run: a send is one SEND of the
//! application's buffer (inline below the QP's inline limit), a receive is the
//! application's buffer posted to the QP, one work completion is one
//! completion. No wire header, no software matching, no copies.
//!
//! Which endpoints take it ([`VerbsEp::direct_eligible`]): MSG, over a
//! transport with receiver-not-ready retry (InfiniBand, RoCE: a SEND finding no
//! receive waits in the hardware until one is posted; iWARP has no such retry),
//! asking for none of tagged messages, atomics (some are emulated by the
//! engine's requests), multi-receive buffers, directed receives. Both sides
//! must take it, as the two paths put different bytes on the wire: the active
//! side offers it in its connect's private data ([`PD_MSG_DIRECT`]), the passive
//! side takes it when it can too and says so in its accept's; else both run the
//! engine. Receives posted before that ([`Path::Offered`]) wait in the endpoint
//! and go to the QP (or to the engine) once the path is chosen.
//!
//! Truncation: each receive has one more scatter entry, the endpoint's scratch
//! region ([`SCRATCH_BUFS`] × [`BUF`] bytes, contents discarded), so a message
//! longer than the receive fills it and spills into the scratch; the receive
//! completes with `FI_ETRUNC`, its length, and the excess as `olen`, and the
//! connection stays up. A message longer than the receive and the scratch
//! breaks the QP (a local length error): the receive fails and the endpoint
//! reports `FI_SHUTDOWN`, as libfabric's does.
//!
//! Buffers without a descriptor: their memory region is looked up by address
//! (the regions the application registered, [`VerbsEp::lkey_for`]); a send
//! with none is copied into a bounce buffer up to [`BUF`] bytes; otherwise the
//! buffer is registered for the operation.
//!
//! What it cannot do: cancel a receive once it is on the QP (verbs has no way
//! to take a posted receive back), so `fi_cancel` finds none (as libfabric's
//! verbs MSG endpoints, which do not cancel). A write with immediate data takes
//! a posted receive (the device's rule): its data is reported as the engine
//! reports it, and the receive goes back to the QP (behind those posted since).

use super::conn::{Post, Sges, WrKind};
use super::*;
use fabric_core::{Caps, CqEntry};
use fabric_util::rx::IOV_LIMIT;

/// Private-data kind of a MSG connect offering the direct path, and of an
/// accept taking it (plain [`PD_MSG`] otherwise).
pub(crate) const PD_MSG_DIRECT: u8 = 3;
const _: () = assert!(PD_MSG_DIRECT != PD_MSG && PD_MSG_DIRECT != fabric_util::verbs_wire::PD_RDM);

/// The work request id of an inject posted with no record
/// ([`VerbsEp::direct_inject_now`]). Slab ids are never below 2^32 (their
/// generation, in the high half, is never 0), so no record's id is this.
pub(super) const DIRECT_INJECT: u64 = 1;

/// [`BUF`]-sized buffers of the scratch region a truncated message spills into
/// (1 MiB).
pub(super) const SCRATCH_BUFS: usize = 64;

/// The data path of a MSG endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// The RDM engine (every RDM endpoint; MSG endpoints that cannot or whose
    /// peer does not take the direct path).
    Engine,
    /// Eligible and offered, not yet chosen (the connection is being made).
    Offered,
    /// The direct path.
    Direct,
}

/// A receive posted before the path was chosen: its pieces and how to complete it.
#[derive(Clone, Copy)]
pub(super) struct PreRecv {
    iov: [IoVec; IOV_LIMIT],
    n: usize,
    context: u64,
    user_context: u64,
    flags: OpFlags,
}

// SAFETY: the pieces point into the application's buffers, handed over under
// the post methods' contract (valid until the completion); only used under the
// endpoint's lock.
unsafe impl Send for PreRecv {}

/// Bounce slots (of the endpoint's [`BUF`]-byte pool) holding one operation's
/// bytes, in order: at most [`IOV_LIMIT`], each below [`NTX`] (18 bytes, so
/// that a receive's record stays small enough to move without a `memcpy`).
#[derive(Clone, Copy)]
pub(super) struct Slots {
    s: [u16; IOV_LIMIT],
    n: u8,
}
const _: () = assert!(NTX <= u16::MAX as usize + 1 && IOV_LIMIT <= u8::MAX as usize);

impl Slots {
    const NONE: Slots = Slots { s: [0; IOV_LIMIT], n: 0 };

    /// Add slot `s`; the caller takes at most [`IOV_LIMIT`].
    fn push(&mut self, s: usize) {
        self.s[self.n as usize] = s as u16;
        self.n += 1;
    }

    fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.s[..self.n as usize].iter().map(|&s| usize::from(s))
    }
}

/// Bounce slots a receive may take while more than this many are free (the
/// rest are the sends').
const RX_BOUNCE_KEEP: usize = NTX / 2;

// A receive's bounce slots plus its scratch entry fit a work request's SGEs;
// the scratch's length fits an SGE's; receives leave slots to the sends.
const _: () = assert!(IOV_LIMIT < super::conn::SGE_MAX);
const _: () = assert!(SCRATCH_BUFS * BUF <= u32::MAX as usize);
const _: () = assert!(RX_BOUNCE_KEEP + IOV_LIMIT + TX_RESERVE < NTX);

/// The bit that tags a direct receive's work request id: the rest is its id
/// in `Inner::drecvs`. Slab ids are `generation << 32 | index`, and no slab
/// here holds 2^31 values, so the bit is clear in every other request's id
/// (and in [`DIRECT_INJECT`]).
pub(super) const DRECV_TAG: u64 = 1 << 31;

/// A receive on the QP, kept in `Inner::drecvs` (112 bytes: moved in and out
/// without a `memcpy`, which the work requests' larger records need).
pub(super) struct DRecv {
    /// Its connection.
    pub(super) conn: u64,
    context: u64,
    /// Bytes of the application's pieces.
    cap: usize,
    /// The application's piece, when there is one (the usual case).
    one: IoVec,
    /// The application's pieces, when there are several (a list from
    /// `Inner::iov_spare`, given back when the receive ends); else empty.
    many: Vec<IoVec>,
    /// The bounce slots it lands in, copied to the pieces at its completion;
    /// none when it lands in the pieces.
    bounce: Slots,
    /// Posted with `FI_COMPLETION`.
    comp: bool,
    /// Registrations made for the pieces.
    tmp: Vec<ibv::Mr>,
}

// SAFETY: the pieces point into the application's buffers, handed over under
// the post methods' contract (valid until the completion); only used under the
// endpoint's lock.
unsafe impl Send for DRecv {}

impl DRecv {
    /// The application's pieces, from a receive's `one` and `many` (fields
    /// apart, so that the caller may borrow the others meanwhile).
    fn pieces<'a>(one: &'a IoVec, many: &'a [IoVec]) -> &'a [IoVec] {
        if many.is_empty() {
            std::slice::from_ref(one)
        } else {
            many
        }
    }
}

/// A SEND on the QP.
pub(super) struct DSend {
    context: u64,
    len: usize,
    comp: bool,
    /// An inject: no completion, counted only.
    silent: bool,
    /// The bounce slots the bytes were copied to.
    slots: Slots,
    /// Registrations made for the pieces.
    tmp: Vec<ibv::Mr>,
}

impl VerbsEp {
    /// Whether this endpoint may take the direct path (see the module doc).
    pub(super) fn direct_eligible(&self) -> bool {
        let engine_only = Caps::TAGGED | Caps::ATOMIC | Caps::MULTI_RECV | Caps::DIRECTED_RECV;
        !self.rdm()
            && !self.domain.port.iwarp
            && crate::config().msg_direct
            && !self.info.caps.intersects(engine_only)
            && !self.info.rx_attr.caps.intersects(engine_only)
            // Remote CQ data of writes would take the application's receives,
            // and a write finding none would wait for one: the engine reports
            // it without (`FI_RX_CQ_DATA` not asked).
            && !self.info.caps.contains(Caps::RMA | Caps::REMOTE_CQ_DATA)
    }

    /// Receives the QP of a direct endpoint holds: the endpoint's receive
    /// queue size, at least [`NRX`], at most the device's.
    pub(super) fn rx_depth(&self) -> u32 {
        let want = self.info.rx_attr.size.max(NRX).min(u32::MAX as usize) as u32;
        want.min(self.domain.port.max_qp_wr.max(1))
    }

    /// A receive of a direct (or offered) endpoint.
    pub(super) fn direct_recv(&self, g: &mut Inner, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if g.rx_out >= self.rx_depth() {
            return Err(Error::Again);
        }
        let pieces = &op.iov[..op.iov.len().min(IOV_LIMIT)];
        if g.path == Path::Offered {
            Self::wait_for_path(g, pieces, op, flags);
            return Ok(());
        }
        let cid = g.msg_conn.filter(|c| g.conns.get(*c).is_some_and(|c| c.qpn != 0)).ok_or(Error::NotConn)?;
        let mut sges = Sges::none();
        let r = self.direct_recv_wr(g, cid, pieces, op.context, flags.contains(OpFlags::COMPLETION), &mut sges)?;
        self.post_direct_recv(g, r, &mut sges)?;
        g.rx_out += 1;
        Ok(())
    }

    /// A receive posted before the path is chosen: it waits in the endpoint.
    #[cold]
    #[inline(never)]
    fn wait_for_path(g: &mut Inner, pieces: &[IoVec], op: &Op<'_>, flags: OpFlags) {
        let mut pr = PreRecv {
            iov: [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT],
            n: pieces.len(),
            context: op.context,
            user_context: op.user_context,
            flags,
        };
        pr.iov[..pr.n].copy_from_slice(pieces);
        g.pre_rx.push_back(pr);
        g.rx_out += 1;
    }

    /// Receive `pieces` on connection `cid`: its record, and its scatter
    /// entries in `sges` (empty on entry): the pieces with their keys, or
    /// bounce slots, then the scratch region where the QP takes one more entry.
    fn direct_recv_wr(
        &self,
        g: &mut Inner,
        cid: u64,
        pieces: &[IoVec],
        context: u64,
        comp: bool,
        sges: &mut Sges,
    ) -> Result<DRecv> {
        let mut r = DRecv {
            conn: cid,
            context,
            cap: IoVec::total(pieces),
            one: IoVec { base: std::ptr::null_mut(), len: 0 },
            many: Vec::new(),
            bounce: Slots::NONE,
            comp,
            tmp: Vec::new(),
        };
        match pieces {
            [p] => r.one = *p,
            [] => {}
            _ => {
                let mut v = g.iov_spare.pop().unwrap_or_default();
                v.extend_from_slice(pieces);
                r.many = v;
            }
        }
        match self.recv_wr_sges(g, &mut r, pieces, sges) {
            Ok(()) => Ok(r),
            Err(e) => {
                Self::drecv_release(g, r);
                Err(e)
            }
        }
    }

    /// [`VerbsEp::direct_recv_wr`]'s scatter entries for `r`, which takes the
    /// bounce slots or registrations they need.
    #[inline(always)]
    fn recv_wr_sges(&self, g: &mut Inner, r: &mut DRecv, pieces: &[IoVec], sges: &mut Sges) -> Result<()> {
        let room = Self::recv_room(g);
        // The application's regions covering the pieces, if every piece has one.
        let mut all = true;
        for p in pieces.iter().filter(|p| p.len > 0) {
            match self.domain.find_region(p.base, p.len, false) {
                Some(reg) => sges.push(sys::ibv_sge { addr: p.base as u64, length: p.len as u32, lkey: reg.lkey() })?,
                None => {
                    all = false;
                    break;
                }
            }
        }
        // Else bounce slots (copied out at the completion), leaving an entry
        // for the scratch region; else a registration for the receive.
        if !all {
            sges.n = 0;
            let nslots = r.cap.div_ceil(BUF).max(1);
            if nslots < room.min(IOV_LIMIT + 1) && g.tx_free.len() > RX_BOUNCE_KEEP + nslots {
                for _ in 0..nslots {
                    let s = g.tx_free.pop().expect("free slots counted");
                    r.bounce.push(s);
                    sges.push(self.bounce_sge(s))?;
                }
            } else {
                *sges = self.sges_for(pieces, &mut r.tmp)?;
            }
        }
        self.push_scratch(g, sges, room)
    }

    /// What receive `r` holds goes back (it will not be posted, or has ended):
    /// its bounce slots, its list of pieces, its registrations.
    fn drecv_release(g: &mut Inner, r: DRecv) {
        g.tx_free.extend(r.bounce.iter());
        let mut many = r.many;
        if many.capacity() > 0 {
            many.clear();
            g.iov_spare.push(many);
        }
        drop(r.tmp);
    }

    /// Scatter entries a receive may have on the connection's QP (0 before it
    /// exists).
    fn recv_room(g: &Inner) -> usize {
        g.msg_conn.and_then(|c| g.conns.get(c)).map_or(0, |c| c.caps.recv_sge as usize)
    }

    /// The scatter entry of a whole bounce slot `s`, which a receive lands in.
    fn bounce_sge(&self, s: usize) -> sys::ibv_sge {
        sys::ibv_sge { addr: self.tx.slot(s) as u64, length: BUF as u32, lkey: self.tx.mr.lkey() }
    }

    /// The scratch region's entry, where the QP (`room` entries) takes one more.
    fn push_scratch(&self, g: &Inner, sges: &mut Sges, room: usize) -> Result<()> {
        if let Some(s) = g.scratch.as_ref().filter(|_| sges.n < room) {
            sges.push(sys::ibv_sge { addr: s.slot(0) as u64, length: (SCRATCH_BUFS * BUF) as u32, lkey: s.mr.lkey() })?;
        }
        Ok(())
    }

    /// The scatter entries of receive `r` again, to post it once more (a
    /// write's immediate data took it): its bounce slots, or its pieces with
    /// their keys (a region, or a registration kept with it), then the scratch.
    fn recv_sges_again(&self, g: &Inner, r: &mut DRecv, sges: &mut Sges) -> Result<()> {
        if r.bounce.is_empty() {
            *sges = self.sges_for(DRecv::pieces(&r.one, &r.many), &mut r.tmp)?;
        } else {
            sges.n = 0;
            for s in r.bounce.iter() {
                sges.push(self.bounce_sge(s))?;
            }
        }
        self.push_scratch(g, sges, Self::recv_room(g))
    }

    /// Post receive `r` on its connection (on failure, what it holds goes back
    /// and nothing is reported: the caller's to do).
    fn post_direct_recv(&self, g: &mut Inner, r: DRecv, sges: &mut Sges) -> Result<()> {
        let cid = r.conn;
        let id = g.drecvs.insert(r);
        debug_assert_eq!(id & DRECV_TAG, 0, "no slab holds 2^31 values");
        let res = match g.conns.get(cid) {
            Some(c) => {
                let mut wr = sys::ibv_recv_wr {
                    wr_id: id | DRECV_TAG,
                    next: std::ptr::null_mut(),
                    sg_list: sges.v.as_mut_ptr(),
                    num_sge: sges.n as i32,
                };
                // SAFETY: the pieces are the application's buffers, valid until
                // the receive completes (post contract), which is reported only
                // once the device is done with them (a completion, or the QP
                // destroyed: `drop_conn`); the scratch region lives as long as
                // the endpoint, whose QPs go first.
                unsafe { c.id.post_recv(&mut wr) }.map_err(|e| {
                    fi_log!(Level::Warn, NAME, "ep_data", "ibv_post_recv failed: {e}");
                    Error::from(e)
                })
            }
            None => Err(Error::NotConn),
        };
        if res.is_err() {
            if let Some(r) = g.drecvs.remove(id) {
                Self::drecv_release(g, r);
            }
        }
        res
    }

    /// The path is chosen on connection `cid` (the active side at the
    /// connection's response, the passive side at its accept, before the QP
    /// moves on): direct when we offered it and the peer takes it
    /// (`peer_direct`), else the engine. What waited goes where it belongs.
    pub(super) fn choose_path(&self, g: &mut Inner, cid: u64, peer_direct: bool) {
        if g.path != Path::Offered {
            return;
        }
        if peer_direct {
            g.path = Path::Direct;
            // The engine's buffers, kept in case the peer declined: unused.
            if let Some(c) = g.conns.get_mut(cid) {
                c.rx = None;
            }
            fi_log!(Level::Info, NAME, "ep_ctrl", "MSG connection {cid}: direct data path");
            self.post_pre_rx(g, cid);
            return;
        }
        g.path = Path::Engine;
        g.scratch = None;
        fi_log!(Level::Info, NAME, "ep_ctrl", "MSG connection {cid}: the peer runs the engine's data path");
        if g.conns.get(cid).is_some_and(|c| c.rx.is_some() && c.qpn != 0) {
            for slot in 0..NRX {
                if self.post_recv_slot(g, cid, slot).is_err() {
                    break;
                }
            }
        }
        // The receives that waited go to the engine, in order.
        g.rx_out = 0;
        while let Some(pr) = g.pre_rx.pop_front() {
            let op = Op {
                iov: &pr.iov[..pr.n],
                addr: FiAddr::UNSPEC,
                context: pr.context,
                user_context: pr.user_context,
                data: 0,
                tag: 0,
                ignore: 0,
            };
            if let Err(e) = g.eng.post_recv(&g.b, &op, pr.flags, FiAddr::UNSPEC) {
                g.b.rx_err(CqEntry::new(pr.context, Caps::MSG | Caps::RECV), 0, e);
            }
        }
    }

    /// Post the receives that waited for the QP (the direct path chosen).
    fn post_pre_rx(&self, g: &mut Inner, cid: u64) {
        while let Some(pr) = g.pre_rx.pop_front() {
            let mut sges = Sges::none();
            let comp = pr.flags.contains(OpFlags::COMPLETION);
            let res = self
                .direct_recv_wr(g, cid, &pr.iov[..pr.n], pr.context, comp, &mut sges)
                .and_then(|r| self.post_direct_recv(g, r, &mut sges));
            if let Err(e) = res {
                g.rx_out -= 1;
                g.b.rx_err(CqEntry::new(pr.context, Caps::MSG | Caps::RECV), 0, e);
            }
        }
    }

    /// A send (or inject: `inject`) of a direct endpoint on connection `cid`.
    pub(super) fn direct_send(
        &self,
        g: &mut Inner,
        cid: u64,
        op: &Op<'_>,
        flags: OpFlags,
        inject: Option<&[u8]>,
    ) -> Result<()> {
        if g.path != Path::Direct {
            // Offered: the connection is not made yet.
            return Err(Error::Again);
        }
        let now = Self::can_post_now(g, cid, true);
        if !now && g.conns.get(cid).is_some_and(|c| c.backlog.len() >= SQ_DEPTH as usize) {
            return Err(Error::Again);
        }
        // The bytes must be copied before the call returns.
        let copy = inject.is_some() || flags.contains(OpFlags::INJECT);
        let one;
        let (iov, len) = match inject {
            Some(d) => {
                if d.len() > self.info.tx_attr.inject_size {
                    return Err(Error::MsgSize);
                }
                if now && g.b.tx_cntr.is_none() && d.len() <= self.inline_limit(g, cid) {
                    let imm = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(op.data as u32);
                    return self.direct_inject_now(g, cid, d, imm);
                }
                one = [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }];
                (&one[..], d.len())
            }
            None => (op.iov, IoVec::total(op.iov)),
        };
        if copy && len > self.info.tx_attr.inject_size {
            return Err(Error::MsgSize);
        }
        let mut d = DSend {
            context: op.context,
            len,
            comp: flags.contains(OpFlags::COMPLETION),
            silent: inject.is_some(),
            slots: Slots::NONE,
            tmp: Vec::new(),
        };
        let pieces = || iov.iter().filter(|p| p.len > 0);
        let qp_sge = g.conns.get(cid).map_or(1, |c| c.caps.sge.max(1)) as usize;
        let mut owned = Vec::new();
        let mut inline = false;
        let mut sges = Sges::none();
        if len <= self.inline_limit(g, cid) && pieces().count() <= qp_sge {
            // Inline: the post copies the bytes. Posted now, or the
            // application's buffers that stay valid until the completion,
            // they are used where they are; else (an inject that waits) a copy.
            inline = true;
            if copy && !now {
                owned.resize(len, 0);
                // SAFETY: the pieces are valid for reads (the inject's data, or
                // the post contract); `owned` holds `len` bytes.
                unsafe { fabric_util::iov::gather(iov, 0, owned.as_mut_ptr(), len) };
                sges.push(sys::ibv_sge { addr: owned.as_ptr() as u64, length: len as u32, lkey: 0 })?;
            } else {
                for p in pieces() {
                    sges.push(sys::ibv_sge { addr: p.base as u64, length: p.len as u32, lkey: 0 })?;
                }
            }
        } else {
            let regions: Option<Sges> = (!copy)
                .then(|| {
                    let mut v = Sges::none();
                    for p in pieces() {
                        let r = self.domain.find_region(p.base, p.len, false)?;
                        v.push(sys::ibv_sge { addr: p.base as u64, length: p.len as u32, lkey: r.lkey() }).ok()?;
                    }
                    Some(v)
                })
                .flatten();
            let nslots = len.div_ceil(BUF).max(1);
            if let Some(v) = regions {
                sges = v;
            } else if nslots <= qp_sge.min(IOV_LIMIT) && g.tx_free.len() > TX_RESERVE + nslots {
                // Copied into bounce slots, one entry each.
                for k in 0..nslots {
                    let s = g.tx_free.pop().expect("free slots counted");
                    let (off, n) = (k * BUF, (len - k * BUF).min(BUF));
                    // SAFETY: the pieces are valid for reads; the slot holds BUF >= n bytes.
                    unsafe { fabric_util::iov::gather(iov, off, self.tx.slot(s), n) };
                    d.slots.push(s);
                    sges.push(sys::ibv_sge {
                        addr: self.tx.slot(s) as u64,
                        length: n as u32,
                        lkey: self.tx.mr.lkey(),
                    })?;
                }
            } else if copy {
                return Err(Error::Again);
            } else {
                sges = self.sges_for(iov, &mut d.tmp)?;
            }
        }
        let (opcode, imm) = if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            (sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, Some(op.data as u32))
        } else {
            (sys::ibv_wr_opcode::IBV_WR_SEND, None)
        };
        let mut post = Post { opcode, sges, inline, raddr: 0, rkey: 0, imm, compare_add: 0, swap: 0, _owned: owned };
        if now {
            // The pieces (or the inject's data) live through the post, which
            // copies inline bytes.
            self.post_now(g, cid, WrKind::DirectSend(d), &mut post);
        } else {
            self.submit(g, cid, WrKind::DirectSend(d), post);
        }
        Ok(())
    }

    /// An inject posted at once, inline, with no counter to count it: a SEND
    /// with no record at all. Its work request id is [`DIRECT_INJECT`], and its
    /// completion ([`VerbsEp::direct_inject_done`]) only gives its send-queue
    /// entry back. (A record, built, stored and taken back per inject, was
    /// about a tenth of a small-message round trip's instructions.)
    fn direct_inject_now(&self, g: &mut Inner, cid: u64, d: &[u8], imm: Option<u32>) -> Result<()> {
        let Some(c) = g.conns.get_mut(cid) else { return Err(Error::NotConn) };
        let mut sge = sys::ibv_sge { addr: d.as_ptr() as u64, length: d.len() as u32, lkey: 0 };
        // SAFETY: ibv_send_wr is plain data; zeroed is valid.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = DIRECT_INJECT;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(!d.is_empty());
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0 | sys::ibv_send_flags::IBV_SEND_INLINE.0;
        wr.opcode = match imm {
            Some(imm) => {
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM
            }
            None => sys::ibv_wr_opcode::IBV_WR_SEND,
        };
        c.sq_used += 1;
        // SAFETY: the one entry is inline data (copied by the post) that lives
        // through the call; the request lives on this stack through it.
        if let Err(e) = unsafe { c.id.post_send(&mut wr) } {
            c.sq_used -= 1;
            fi_log!(Level::Warn, NAME, "ep_data", "ibv_post_send of an inject failed: {e}");
            return Err(Error::from(e));
        }
        Ok(())
    }

    /// The completion of a [`VerbsEp::direct_inject_now`] SEND (`wc`): its
    /// send-queue entry back; an error breaks the connection, as any other
    /// request's does.
    pub(super) fn direct_inject_done(&self, g: &mut Inner, wc: &sys::ibv_wc) {
        let Some(cid) = g.msg_conn else { return };
        // A completion of a QP dropped since is not this connection's.
        let Some(c) = g.conns.get_mut(cid).filter(|c| c.qpn == wc.qp_num) else { return };
        c.sq_used = c.sq_used.saturating_sub(1);
        if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            if !c.backlog.is_empty() {
                self.drain_backlog(g, cid);
            }
            return;
        }
        self.direct_inject_failed(g, cid, wc);
    }

    #[cold]
    #[inline(never)]
    fn direct_inject_failed(&self, g: &mut Inner, cid: u64, wc: &sys::ibv_wc) {
        if wc.status == sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            return;
        }
        fi_log!(Level::Info, NAME, "ep_data", "an inject failed: {}", ibv::wc_status_str(wc.status));
        self.qp_failed(g, cid, wc.status);
    }

    /// Send `d` completed (with `err`): its completion, or its count (inject).
    pub(super) fn direct_send_done(g: &mut Inner, d: DSend, err: Option<(Error, i32)>) {
        g.tx_free.extend(d.slots.iter());
        drop(d.tmp);
        if d.silent {
            if let Some((e, _)) = err {
                fi_log!(Level::Info, NAME, "ep_data", "an inject failed: {e}");
            }
            g.b.tx_count(err.is_some());
            return;
        }
        let mut c = CqEntry::new(d.context, Caps::MSG | Caps::SEND);
        c.len = d.len;
        match err {
            None => g.b.tx_done(c, d.comp),
            Some((e, prov_errno)) => g.b.tx_err_prov(c, e, prov_errno),
        }
    }

    /// A receive on the QP completed (work completion `wc`, request `wid`).
    pub(super) fn direct_recv_done(&self, g: &mut Inner, wid: u64, wc: &sys::ibv_wc) {
        let Some(cid) = g.drecvs.get(wid).map(|r| r.conn) else { return };
        if g.conns.get(cid).is_some_and(|c| c.qpn != wc.qp_num) {
            // A completion of a QP dropped since, whose id a receive of the
            // connection made since took again: not that receive's.
            return;
        }
        let Some(r) = g.drecvs.remove(wid) else { return };
        if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS && wc.opcode == sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM
        {
            // A write's immediate data took the receive: the data as the engine
            // reports it, the receive back on the QP.
            // SAFETY: the union holds the immediate data for this opcode.
            let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
            let src = Self::src_of(g, cid);
            g.eng.rx.rma_data(&g.b, src, imm as u64);
            let context = r.context;
            let mut r = r;
            let mut sges = Sges::none();
            let res = match self.recv_sges_again(g, &mut r, &mut sges) {
                Ok(()) => self.post_direct_recv(g, r, &mut sges),
                Err(e) => {
                    Self::drecv_release(g, r);
                    Err(e)
                }
            };
            if let Err(e) = res {
                g.rx_out = g.rx_out.saturating_sub(1);
                g.b.rx_err(CqEntry::new(context, Caps::MSG | Caps::RECV), 0, e);
            }
            return;
        }
        g.rx_out = g.rx_out.saturating_sub(1);
        // The device is done with the buffers: the bytes landed in bounce
        // slots go to the application's pieces, the registrations go.
        let (context, cap, comp) = (r.context, r.cap, r.comp);
        if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            let mut left = (wc.byte_len as usize).min(cap);
            let pieces = DRecv::pieces(&r.one, &r.many);
            for (k, s) in r.bounce.iter().enumerate() {
                let n = left.min(BUF);
                if n == 0 {
                    break;
                }
                // SAFETY: the device wrote the message into the slots in order
                // (BUF bytes each before the next); `n` bytes of slot `s` are
                // the message's; the pool lives as long as the endpoint.
                let bytes = unsafe { std::slice::from_raw_parts(self.tx.slot(s), n) };
                fabric_util::iov::copy_into(pieces, cap, (k * BUF) as u64, bytes);
                left -= n;
            }
        }
        Self::drecv_release(g, r);
        let mut c = CqEntry::new(context, Caps::MSG | Caps::RECV);
        if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
            if wc.status == sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                g.b.rx_err(c, 0, Error::Canceled);
                return;
            }
            let e = super::progress::wc_error(wc.status);
            fi_log!(
                Level::Warn,
                NAME,
                "ep_data",
                "receive failed: {}{}; the connection is lost",
                ibv::wc_status_str(wc.status),
                if wc.status == sys::ibv_wc_status::IBV_WC_LOC_LEN_ERR {
                    format!(
                        " (a message longer than the receive's {cap} bytes and the {}-byte scratch region)",
                        SCRATCH_BUFS * BUF
                    )
                } else {
                    String::new()
                }
            );
            let e = if e == Error::MsgSize { Error::Trunc } else { e };
            c.len = cap;
            g.b.rx_err(c, 0, e);
            self.conn_failed(g, cid, Error::ConnReset, wc.status as i32);
            return;
        }
        c.src = Self::src_of(g, cid);
        if wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            c.flags |= Caps::REMOTE_CQ_DATA;
            // SAFETY: the union holds the immediate data when the flag is set.
            c.data = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }) as u64;
        }
        let n = wc.byte_len as usize;
        if n > cap {
            c.len = cap;
            g.b.rx_err(c, n - cap, Error::Trunc);
        } else {
            c.len = n;
            g.b.rx_done(c, comp);
        }
    }

    /// The direct operations of a connection just destroyed (`sends` and
    /// `recvs`, taken from their tables before): sends fail with `err`,
    /// receives are canceled. Called once the QP is gone, so the device no
    /// longer touches the buffers.
    pub(super) fn direct_dropped(g: &mut Inner, sends: Vec<WrRec>, recvs: Vec<DRecv>, err: Error, prov_errno: i32) {
        for rec in sends {
            if let WrKind::DirectSend(d) = rec.kind {
                Self::direct_send_done(g, d, Some((err, prov_errno)));
            }
        }
        for r in recvs {
            g.rx_out = g.rx_out.saturating_sub(1);
            let context = r.context;
            Self::drecv_release(g, r);
            g.b.rx_err(CqEntry::new(context, Caps::MSG | Caps::RECV), 0, Error::Canceled);
        }
    }

    /// Cancel the waiting receive of context `user_context`, if there is one.
    pub(super) fn cancel_waiting(g: &mut Inner, user_context: u64) -> bool {
        let Some(i) = g.pre_rx.iter().position(|r| r.user_context == user_context) else { return false };
        let pr = g.pre_rx.remove(i).expect("index in range");
        g.rx_out = g.rx_out.saturating_sub(1);
        g.b.rx_err(CqEntry::new(pr.context, Caps::MSG | Caps::RECV), 0, Error::Canceled);
        true
    }

    /// Cancel the receives that waited for a connection (the endpoint closes).
    pub(super) fn cancel_pre_rx(g: &mut Inner) {
        while let Some(pr) = g.pre_rx.pop_front() {
            g.rx_out = g.rx_out.saturating_sub(1);
            g.b.rx_err(CqEntry::new(pr.context, Caps::MSG | Caps::RECV), 0, Error::Canceled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive's record and its slab entry are moved without a `memcpy`
    /// call (the compiler inlines copies up to 128 bytes).
    #[test]
    fn a_receive_record_is_small() {
        assert!(std::mem::size_of::<DRecv>() <= 112, "{}", std::mem::size_of::<DRecv>());
        assert!(std::mem::size_of::<(u32, Option<DRecv>)>() <= 128);
    }

    #[test]
    fn direct_offer_is_its_own_private_data_kind() {
        let pd = private_data(PD_MSG_DIRECT, b"app data");
        assert!(pd.len() <= 56, "fits an RC connect's private data");
        assert_eq!(strip_private(&pd), Some((PD_MSG_DIRECT, &b"app data"[..])));
        // Padded as the connection manager reports it.
        let mut padded = private_data(PD_MSG, b"");
        padded.resize(56, 0);
        assert_eq!(strip_private(&padded).map(|(k, _)| k), Some(PD_MSG));
    }
}

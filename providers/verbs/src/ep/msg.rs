//! Messages of the verbs provider, on the RDM engine in fetch mode: sends and
//! receives posted to the engine, its frames put on the wire as SENDs
//! ([`VerbsEp::pump`]), and the rendezvous run natively: the sender announces its
//! pieces (address, length, remote key) in the `Rts`, the receiver RDMA READs
//! them into the matched receive ([`VerbsEp::start_fetch`]) and tells the engine
//! ([`fabric_util::rdm::Engine::fetched`]), which answers `Cts`.

use super::conn::{Post, Sges, WrKind};
use super::*;
use fabric_util::rdm::{Fetch, RtsPayload};
use fabric_util::rx::IOV_LIMIT;
use fabric_util::verbs_wire::{decode_rts, encode_rts, RtsPiece, RTS_PIECE_LEN};

/// A rendezvous message being fetched: its connection, the sender's id, the
/// READs still out, the first error, the registrations of the receive.
pub(super) struct FetchIn {
    pub(super) conn: u64,
    id: u64,
    pending: u32,
    err: Option<Error>,
    tmp: Vec<ibv::Mr>,
}

impl VerbsEp {
    /// The most pieces an operation may have: the endpoint's `iov_limit`
    /// (receive side when `rx`), never above what the engine takes; an entry
    /// that leaves it 0 takes the engine's.
    pub(super) fn iov_limit(&self, rx: bool) -> usize {
        let l = if rx { self.info.rx_attr.iov_limit } else { self.info.tx_attr.iov_limit };
        if l == 0 {
            IOV_LIMIT
        } else {
            l.min(IOV_LIMIT)
        }
    }

    pub(super) fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        if op.iov.len() > self.iov_limit(false) {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        let max = if self.rdm() { MAX_MSG } else { self.info.ep_attr.max_msg_size };
        if len > max {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        let cid = self.post_conn(g, op.addr, inject.is_none())?;
        if g.path != Path::Engine {
            return self.direct_send(g, cid, op, flags, inject);
        }
        // The frame the engine will send: the message (eager), or its
        // announcement (rendezvous; FI_DELIVERY_COMPLETE goes so whatever the
        // size: its `Cts` comes once the data is in the receive).
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        let total = match inject.is_some() || (len <= EAGER_MAX && !dc) {
            true => HDR_LEN + len,
            false => HDR_LEN + 1 + RTS_PIECE_LEN * op.iov.iter().filter(|p| p.len > 0).count(),
        };
        self.room(g, cid, total)?;
        g.eng.post_send_with(&g.b, cid, op, flags, inject, false, |iov| self.announce(iov))?;
        self.pump(g);
        Ok(())
    }

    /// A rendezvous send's announcement: its pieces, registered for the
    /// receiver's READs (the registrations kept until the send completes).
    fn announce(&self, iov: &[IoVec]) -> Result<RtsPayload> {
        let mut tmp = Vec::new();
        let mut pieces = Vec::with_capacity(iov.len());
        for p in iov.iter().filter(|p| p.len > 0) {
            let (_, rkey) = self.lkey_for(p.base, p.len, true, &mut tmp)?;
            pieces.push(RtsPiece { addr: p.base as u64, len: p.len as u64, rkey });
        }
        Ok(RtsPayload { bytes: encode_rts(&pieces), keep: Some(Box::new(tmp)) })
    }

    pub(super) fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if op.iov.len() > self.iov_limit(true) {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        g.b.check_recv(g.enabled && !g.closed)?;
        if g.path != Path::Engine {
            return self.direct_recv(g, op, flags);
        }
        let src = if self.rdm() { op.addr } else { FiAddr::UNSPEC };
        g.eng.post_recv(&g.b, op, flags, src)?;
        self.pump(g);
        Ok(())
    }

    /// Start the engine's fetches, and put its frames on the wire as SENDs, in
    /// order: those waiting for a bounce slot first.
    pub(super) fn pump(&self, g: &mut Inner) {
        loop {
            if let Some(f) = g.eng.poll_fetch() {
                self.start_fetch(g, f);
                continue;
            }
            while let Some((cid, f)) = g.deferred.pop_front() {
                if let Some(f) = self.send_frame(g, cid, f) {
                    g.deferred.push_front((cid, f));
                    break;
                }
            }
            let Some((cid, f)) = g.eng.poll_transmit() else { break };
            if !g.deferred.is_empty() {
                g.deferred.push_back((cid, f));
            } else if let Some(f) = self.send_frame(g, cid, f) {
                g.deferred.push_back((cid, f));
            }
        }
    }

    /// Fetch a matched rendezvous message: one RDMA READ per overlap of the
    /// sender's pieces and the receive's.
    fn start_fetch(&self, g: &mut Inner, f: Fetch<u64>) {
        let cid = f.peer;
        if g.conns.get(cid).is_none() {
            g.eng.fetched(&g.b, cid, f.id, Some(Error::ConnReset));
            return;
        }
        let remote = match decode_rts(&f.payload, f.hdr.len, IOV_LIMIT) {
            Ok(r) => r,
            // (Checked as it arrived.)
            Err(_) => {
                g.eng.fetched(&g.b, cid, f.id, Some(Error::Io));
                return;
            }
        };
        let want = IoVec::total(f.pieces()) as u64;
        let mut r = FetchIn { conn: cid, id: f.id, pending: 0, err: None, tmp: Vec::new() };
        // Local pieces with keys.
        let mut lsges = Vec::new();
        for p in f.pieces().iter().filter(|p| p.len > 0) {
            match self.lkey_for(p.base, p.len, false, &mut r.tmp) {
                Ok((lkey, _)) => lsges.push((p.base as u64, p.len as u64, lkey)),
                Err(e) => {
                    r.err = Some(e);
                    break;
                }
            }
        }
        // One READ per (remote piece, local piece) overlap: walk both lists.
        let mut posts = Vec::new();
        if r.err.is_none() {
            let (mut li, mut loff) = (0usize, 0u64);
            let mut left = want;
            for p in &remote {
                let mut roff = 0u64;
                while roff < p.len && left > 0 && li < lsges.len() {
                    let (laddr, llen, lkey) = lsges[li];
                    let n = (p.len - roff).min(llen - loff).min(left);
                    posts.push(Post {
                        opcode: sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                        sges: Sges::one(sys::ibv_sge { addr: laddr + loff, length: n as u32, lkey }),
                        inline: false,
                        raddr: p.addr + roff,
                        rkey: p.rkey,
                        imm: None,
                        compare_add: 0,
                        swap: 0,
                        _owned: Vec::new(),
                    });
                    roff += n;
                    loff += n;
                    left -= n;
                    if loff == llen {
                        li += 1;
                        loff = 0;
                    }
                }
            }
        }
        if posts.is_empty() {
            // Nothing to read (an empty or fully truncated message, or an error).
            drop(r.tmp);
            g.eng.fetched(&g.b, cid, f.id, r.err);
            return;
        }
        r.pending = posts.len() as u32;
        let fetch = g.fetching.insert(r);
        for p in posts {
            self.submit(g, cid, WrKind::RndvRead { fetch }, p);
        }
    }

    /// A READ of fetch `fetch` completed (with `err`); the last one tells the
    /// engine, which completes the receive and answers `Cts`.
    pub(super) fn fetch_step(&self, g: &mut Inner, fetch: u64, err: Option<(Error, i32)>) {
        let Some(r) = g.fetching.get_mut(fetch) else { return };
        if r.err.is_none() {
            r.err = err.map(|(e, _)| e);
        }
        r.pending = r.pending.saturating_sub(1);
        if r.pending > 0 {
            return;
        }
        let r = g.fetching.remove(fetch).expect("present");
        drop(r.tmp);
        g.eng.fetched(&g.b, r.conn, r.id, r.err);
    }
}

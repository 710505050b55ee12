//! The paths to a peer: finding it (by AV handle or by the slot it sends through),
//! attaching to its segment and claiming our slot there, putting entries on its ring
//! (or queueing them while the ring is full), waking it, and noticing that it died or
//! closed.

use super::{InStream, Inner, LastTx, Peer, PeerId, Pending, ShmEp, Then, TxPath};
use crate::attr::SCHEME;
use crate::proto::{Entry, Mode};
use crate::ring::{Producer, ENTRY_PAYLOAD};
use crate::segment::{self, Segment, BOUNCE_SIZE};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::IoVec;
use fabric_core::{fi_log, Address, Error, FiAddr, Result};
use fabric_util::iov::gather;
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

impl ShmEp {
    pub(super) fn peer(g: &mut Inner, id: PeerId) -> Option<&mut Peer> {
        g.peers.get_mut(id.idx as usize)?.as_mut().filter(|p| p.gen == id.gen)
    }

    pub(super) fn peer_by_name(g: &mut Inner, name: &str, pid: i32, start: u64) -> PeerId {
        if let Some(&id) = g.by_name.get(name) {
            return id;
        }
        let idx = match g.peers.iter().position(|p| p.is_none()) {
            Some(i) => i,
            None => {
                g.peers.push(None);
                g.peers.len() - 1
            }
        };
        static GEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let gen = GEN.fetch_add(1, Ordering::Relaxed);
        g.peers[idx] = Some(Peer {
            name: name.to_string(),
            uri: Self::uri(name),
            pid,
            start,
            tx: None,
            rx: None,
            cma: None,
            queue: VecDeque::new(),
            fi_addr: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            gen,
        });
        let id = PeerId { idx: idx as u32, gen };
        g.by_name.insert(name.to_string(), id);
        id
    }

    /// The peer behind an AV handle, with a path to send to it.
    #[inline]
    pub(super) fn peer_for(&self, g: &mut Inner, dest: FiAddr) -> Result<PeerId> {
        let v = g.b.av.as_ref().ok_or(Error::NoAv)?.version();
        if g.cache_version == v {
            if let Some(Some((a, id))) = g.by_addr.get(dest.0 as u32 as usize) {
                let (a, id) = (*a, *id);
                if a == dest {
                    if let Some(Peer { tx: Some(_), .. }) = Self::peer(g, id) {
                        return Ok(id);
                    }
                }
            }
        }
        self.peer_for_slow(g, dest)
    }

    /// [`peer_for`](Self::peer_for) when the handle is not cached (or has no path yet).
    #[cold]
    fn peer_for_slow(&self, g: &mut Inner, dest: FiAddr) -> Result<PeerId> {
        let av = g.b.av.clone().ok_or(Error::NoAv)?;
        let v = av.version();
        if g.cache_version != v {
            g.by_addr.iter_mut().for_each(|x| *x = None);
            g.cache_version = v;
        }
        let at = dest.0 as u32 as usize;
        let cached = match g.by_addr.get(at) {
            Some(Some((a, id))) if *a == dest => Some(*id),
            _ => None,
        };
        let id = match cached {
            Some(id) if Self::peer(g, id).is_some() => id,
            _ => {
                let addr = av.get(dest).ok_or(Error::Inval)?;
                let Address::Str(s) = &addr else { return Err(Error::Inval) };
                let name = s.strip_prefix(SCHEME).ok_or(Error::Inval)?;
                let id = Self::peer_by_name(g, name, 0, 0);
                // The AV resolved the handle: its slot index is below the AV's size.
                if g.by_addr.len() <= at {
                    g.by_addr.resize(at + 1, None);
                }
                g.by_addr[at] = Some((dest, id));
                id
            }
        };
        self.ensure_tx(g, id)?;
        Ok(id)
    }

    /// Attach to a peer's segment and claim our slot there, once.
    pub(super) fn ensure_tx(&self, g: &mut Inner, id: PeerId) -> Result<()> {
        let (me, pid, start) = (&self.name, self.pid, self.start);
        let p = Self::peer(g, id).ok_or(Error::ConnReset)?;
        if p.tx.is_some() {
            return Ok(());
        }
        let seg = Segment::attach(&p.name).map_err(|e| {
            fi_log!(Level::Info, NAME, "ep_data", "cannot reach {}: {e}", p.name);
            Error::ConnRefused
        })?;
        let (opid, ostart) = seg.owner();
        if p.pid == 0 {
            p.pid = opid;
            p.start = ostart;
        }
        let slot = seg.claim_slot(me, pid, start)?;
        // SAFETY: the ring lies in the slot we just claimed in a mapping `seg`
        // keeps alive as long as the producer (both live in this TxPath); we are
        // its only producer.
        let prod = unsafe { Producer::new(seg.slot(slot).ring_ptr()) };
        p.tx = Some(TxPath { seg, slot, prod, next_bounce: 0 });
        Ok(())
    }

    /// Whether we may copy to and from the peer's memory.
    pub(super) fn cma_ok(&self, g: &mut Inner, id: PeerId) -> bool {
        if !self.cma_allowed {
            return false;
        }
        let Some(p) = Self::peer(g, id) else { return false };
        if let Some(c) = p.cma {
            return c;
        }
        let ok = match &p.tx {
            Some(t) => t.seg.probe_cma(),
            None => false,
        };
        if !ok {
            fi_log!(
                Level::Info,
                NAME,
                "ep_data",
                "no cross-memory attach to {}: using copies through the segment",
                p.name
            );
        }
        p.cma = Some(ok);
        ok
    }

    /// The AV handle of a peer (resolved lazily, cached per AV version).
    #[inline]
    pub(super) fn src_of(g: &mut Inner, id: PeerId) -> FiAddr {
        let Some(av) = g.b.av.as_ref() else { return FiAddr::NOTAVAIL };
        let v = av.version();
        let Some(p) = g.peers.get_mut(id.idx as usize).and_then(|p| p.as_mut()).filter(|p| p.gen == id.gen) else {
            return FiAddr::NOTAVAIL;
        };
        if p.av_version != v {
            p.fi_addr = av.find(&p.uri).unwrap_or(FiAddr::NOTAVAIL);
            p.av_version = v;
        }
        p.fi_addr
    }

    /// Put an entry on a peer's ring, or queue it behind what waits already.
    pub(super) fn send_entry(&self, g: &mut Inner, id: PeerId, e: &Entry, fill: impl FnOnce(&mut [u8; ENTRY_PAYLOAD])) {
        if let Err(err) = self.ensure_tx(g, id) {
            fi_log!(Level::Info, NAME, "ep_data", "cannot answer a peer ({err}): it is gone");
            return;
        }
        self.push_entry(g, id, |b| {
            e.encode(b);
            fill(b);
        });
    }

    /// The common case of [`peer_for`](Self::peer_for) then
    /// [`push_entry`](Self::push_entry), with one lookup: our path to the peer
    /// behind `dest`, when the peer is cached with a path to it and nothing is
    /// queued to it (else `None`: the caller goes the general way). Push with
    /// [`Producer::reserve`](crate::ring::Producer::reserve), then
    /// [`wake_tx`](Self::wake_tx). Called once the endpoint is found ready; the
    /// last destination ([`tx_last`](Self::tx_last)) is looked at first, and the
    /// destination becomes the last one when a transmit queue is bound.
    #[inline(always)]
    pub(super) fn tx_cached(g: &mut Inner, dest: FiAddr) -> Option<&mut TxPath> {
        if Self::is_last(g, dest) {
            return Self::last_path(g);
        }
        let version = g.b.av.as_ref()?.version();
        if g.cache_version != version {
            return None;
        }
        let (a, id) = g.by_addr.get(dest.0 as u32 as usize)?.as_ref()?;
        if *a != dest {
            return None;
        }
        let id = *id;
        let p = g.peers.get_mut(id.idx as usize)?.as_mut()?;
        if p.gen != id.gen || !p.queue.is_empty() || p.tx.is_none() {
            return None;
        }
        if g.b.tx_cq.is_some() {
            g.last = LastTx { addr: dest, version, idx: id.idx };
        }
        g.peers[id.idx as usize].as_mut()?.tx.as_mut()
    }

    /// Our path to `dest` when it is the last destination ([`LastTx`]) and the AV
    /// has not changed since: then the endpoint is ready with a transmit queue, and
    /// nothing is queued to the peer. Else `None` (see
    /// [`tx_cached`](Self::tx_cached)).
    #[inline(always)]
    pub(super) fn tx_last(g: &mut Inner, dest: FiAddr) -> Option<&mut TxPath> {
        if !Self::is_last(g, dest) {
            return None;
        }
        Self::last_path(g)
    }

    /// Our path to the peer of the last destination (once [`is_last`](Self::is_last)
    /// said it is still that).
    #[inline(always)]
    fn last_path(g: &mut Inner) -> Option<&mut TxPath> {
        g.peers.get_mut(g.last.idx as usize)?.as_mut()?.tx.as_mut()
    }

    /// Whether `dest` is the last destination ([`LastTx`]), for the bound AV's version.
    #[inline(always)]
    fn is_last(g: &Inner, dest: FiAddr) -> bool {
        g.last.addr == dest && g.b.av.as_ref().is_some_and(|av| av.version() == g.last.version)
    }

    /// Put an entry, which `fill` writes whole (header and payload), on the ring of
    /// a peer we have a path to already, or queue it behind what waits already.
    #[inline]
    pub(super) fn push_entry(&self, g: &mut Inner, id: PeerId, fill: impl FnOnce(&mut [u8; ENTRY_PAYLOAD])) {
        let Some(p) = Self::peer(g, id) else { return };
        let mut fill = Some(fill);
        if p.queue.is_empty() {
            if let Some(t) = p.tx.as_mut() {
                // Written in place, straight into the ring's entry.
                let pushed = t.prod.try_push(|slot| {
                    if let Some(f) = fill.take() {
                        f(slot);
                    }
                });
                if pushed {
                    Self::wake_tx(t);
                    return;
                }
            }
        }
        let mut b = [0u8; ENTRY_PAYLOAD];
        if let Some(f) = fill.take() {
            f(&mut b);
        }
        p.queue.push_back(Pending::Entry { entry: b, then: Then::Nothing });
        g.backlog.push_back(id);
        g.last = LastTx::NONE;
        self.note_work();
    }

    /// Put a whole entry on the ring of a peer we have a path to, if that can be done
    /// now: nothing queued to it, and room. Whether it was.
    #[inline(never)]
    pub(super) fn push_now(g: &mut Inner, id: PeerId, entry: &[u8; ENTRY_PAYLOAD]) -> bool {
        let Some(p) = Self::peer(g, id) else { return false };
        if !p.queue.is_empty() {
            return false;
        }
        let Some(t) = p.tx.as_mut() else { return false };
        if !t.prod.try_push(|slot| *slot = *entry) {
            return false;
        }
        Self::wake_tx(t);
        true
    }

    /// Queue an entry to a peer, behind what waits already, for
    /// [`flush_backlog`](Self::flush_backlog). Its operation fails when the peer is
    /// gone.
    pub(super) fn queue(&self, g: &mut Inner, id: PeerId, item: Pending) {
        let Some(p) = Self::peer(g, id) else {
            if let Some(op) = item.done() {
                self.fail_op(g, op, Error::ConnReset);
            }
            return;
        };
        p.queue.push_back(item);
        g.backlog.push_back(id);
        g.last = LastTx::NONE;
        self.note_work();
    }

    /// Tell a sleeping peer to look at its rings.
    pub(super) fn wake(p: &Peer) {
        if let Some(t) = &p.tx {
            Self::wake_tx(t);
        }
    }

    /// [`wake`](Self::wake) through our path to the peer, whose segment has the
    /// peer's name.
    #[inline(always)]
    pub(super) fn wake_tx(t: &TxPath) {
        // Pairs with the fence in the receiver's prepare_sleep: either it sees our
        // entry in its last poll before sleeping, or we see it sleeping.
        fence(Ordering::SeqCst);
        if t.seg.sleepers().load(Ordering::Relaxed) != 0 {
            Self::wake_seg(&t.seg);
        }
    }

    /// Wake the owner of `seg` (named as the segment).
    #[cold]
    #[inline(never)]
    fn wake_seg(seg: &Segment) {
        segment::wake(seg.name());
    }

    /// Send a payload that fits a bounce buffer: now if a buffer and an entry are
    /// free, else queued with a copy (for operations that complete on the peer's
    /// answer: RMA writes, atomics and their answers).
    pub(super) fn send_bounce(&self, g: &mut Inner, id: PeerId, e: Entry, src: &[IoVec], len: usize) {
        if self.ensure_tx(g, id).is_err() {
            return;
        }
        if !Self::bounce_now(g, id, e, src, len) {
            let payload = Self::copy_payload(g, src, len);
            self.queue(g, id, Pending::Bounce { entry: e, payload, then: Then::Nothing });
        }
    }

    /// Send a payload that fits a bounce buffer to a peer we have a path to, if that
    /// can be done now: nothing queued to it, a free ring entry and a free bounce
    /// buffer. Whether it was.
    pub(super) fn bounce_now(g: &mut Inner, id: PeerId, e: Entry, src: &[IoVec], len: usize) -> bool {
        let Some(p) = Self::peer(g, id) else { return false };
        if !p.queue.is_empty() {
            return false;
        }
        let Some(t) = p.tx.as_mut() else { return false };
        Self::bounce_on(t, e, src, len)
    }

    /// The payload of `src` (`len <= BOUNCE_SIZE` bytes) into one of our bounce
    /// buffers on path `t`, and entry `e`, pointing at it, onto the ring, if the ring
    /// has room and a buffer is free; the peer woken. Whether it was done (else
    /// nothing was).
    #[inline(always)]
    pub(super) fn bounce_on(t: &mut TxPath, mut e: Entry, src: &[IoVec], len: usize) -> bool {
        debug_assert!(len <= BOUNCE_SIZE);
        // Room first: a bounce buffer, once taken, goes out with the entry.
        if !t.prod.has_room() {
            return false;
        }
        let Some(bi) = t.alloc_bounce() else { return false };
        let dst = t.bounce_ptr(bi);
        match src {
            // SAFETY: the bounce buffer holds BOUNCE_SIZE >= len bytes and is ours
            // until the receiver frees it; the piece (`len` bytes) is valid for reads
            // under the post contract.
            [v] => unsafe { std::ptr::copy_nonoverlapping(v.base, dst, len) },
            // SAFETY: as above, for the pieces, `len` bytes in all.
            _ => unsafe { gather(src, 0, dst, len) },
        }
        e.mode = Mode::Bounce;
        e.aux = bi as u32;
        e.len = len as u64;
        // We are the ring's only producer, and it had room.
        let pushed = t.prod.try_push(|b| e.encode(b));
        debug_assert!(pushed, "room was checked under the lock");
        Self::wake_tx(t);
        true
    }

    /// A copy of `len` bytes of `src`, for a queue (in a recycled buffer when one is
    /// left).
    pub(super) fn copy_payload(g: &mut Inner, src: &[IoVec], len: usize) -> Vec<u8> {
        let mut v = g.pool.pop().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        // SAFETY: `v` holds `len` bytes; the pieces are valid for reads.
        unsafe { gather(src, 0, v.as_mut_ptr(), len) };
        v
    }

    /// Move queued entries of peers onto their rings, as room allows.
    pub(super) fn flush_backlog(&self, g: &mut Inner) {
        let mut n = g.backlog.len();
        while n > 0 {
            n -= 1;
            let Some(id) = g.backlog.pop_front() else { break };
            let mut freed = Vec::new();
            // Operations whose entries went out (or, without a path, failed).
            let mut out = Vec::new();
            let Some(p) = Self::peer(g, id) else { continue };
            let Some(t) = p.tx.as_mut() else {
                out.extend(p.queue.drain(..).filter_map(|q| q.done()));
                for op in out {
                    self.fail_op(g, op, Error::ConnReset);
                }
                continue;
            };
            let mut moved = false;
            while let Some(item) = p.queue.front_mut() {
                let ok = match item {
                    Pending::Entry { entry, .. } => t.prod.try_push(|slot| *slot = *entry),
                    Pending::Bounce { entry: e, payload: v, .. } => {
                        if !t.prod.has_room() {
                            false
                        } else if let Some(bi) = t.alloc_bounce() {
                            // SAFETY: the buffer holds BOUNCE_SIZE >= v.len() bytes
                            // and is ours until the receiver frees it.
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), t.bounce_ptr(bi), v.len()) };
                            e.mode = Mode::Bounce;
                            e.aux = bi as u32;
                            e.len = v.len() as u64;
                            let e = *e;
                            t.prod.try_push(|b| e.encode(b))
                        } else {
                            false
                        }
                    }
                };
                if !ok {
                    break;
                }
                moved = true;
                let item = p.queue.pop_front();
                out.extend(item.as_ref().and_then(Pending::done));
                if let Some(Pending::Bounce { payload, .. }) = item {
                    freed.push(payload);
                }
            }
            if moved {
                Self::wake(p);
            }
            let again = !p.queue.is_empty();
            for v in freed {
                if g.pool.len() < 16 {
                    g.pool.push(v);
                }
            }
            if again {
                g.backlog.push_back(id);
                self.note_work();
            }
            // Their data is in the peer's segment now: they complete.
            for op in out {
                self.finish_op(g, op, 0);
            }
        }
    }

    /// Notice peers that died or closed.
    pub(super) fn check_peers(&self, g: &mut Inner) {
        for idx in 0..g.peers.len() {
            let Some(p) = g.peers[idx].as_ref() else { continue };
            let id = PeerId { idx: idx as u32, gen: p.gen };
            let closed = p.tx.as_ref().is_some_and(|t| t.seg.is_closed());
            let dead = match (&p.tx, &p.rx) {
                (Some(t), _) => !t.seg.owner_alive(),
                (None, Some(r)) => !self.seg.slot(r.slot).peer_alive(),
                (None, None) => false,
            };
            if dead {
                // Deliver what it finished sending, then forget it.
                if let Some(slot) = p.rx.as_ref().map(|r| r.slot) {
                    self.poll_slot(g, slot);
                    if let Some(p) = Self::peer(g, id) {
                        if p.rx.is_some() {
                            self.release_rx(g, id, slot);
                        }
                    }
                }
                self.peer_down(g, id, Error::ConnReset);
                let removed = segment::cleanup_stale();
                if removed > 0 {
                    fi_log!(Level::Info, NAME, "ep_data", "removed {removed} segment(s) of dead processes");
                }
            } else if closed {
                // Deliver what it sent before closing first.
                if let Some(slot) = p.rx.as_ref().map(|r| r.slot) {
                    self.poll_slot(g, slot);
                }
                self.peer_down(g, id, Error::ConnReset);
            }
        }
    }

    /// A peer went away (or misbehaved): fail what is in flight with it and forget
    /// our path to it. Messages it already delivered stay.
    pub(super) fn peer_down(&self, g: &mut Inner, id: PeerId, err: Error) {
        g.last = LastTx::NONE;
        let Some(p) = Self::peer(g, id) else { return };
        let name = p.name.clone();
        fi_log!(Level::Info, NAME, "ep_data", "peer {name} is gone: failing what is in flight with it");
        let had_tx = p.tx.take();
        p.queue.clear();
        p.cma = None;
        if let Some(t) = had_tx {
            t.seg.slot(t.slot).set_state(segment::SLOT_CLOSED);
        }
        for opid in g.ops.ids(|o| o.peer == id) {
            self.fail_op(g, opid, err);
        }
        let keys: Vec<(PeerId, u64)> = g.in_streams.keys().filter(|k| k.0 == id).copied().collect();
        for k in keys {
            if let Some(InStream::Msg { target, hdr, src, .. }) = g.in_streams.remove(&k) {
                g.rx.fail(&g.b, target, &hdr, src, err);
            }
        }
        g.rd_streams.retain(|r| r.peer != id);
        let mut i = 0;
        while i < g.cocopies.len() {
            if g.cocopies[i].peer == id {
                let c = g.cocopies.remove(i);
                self.abandon_cocopy(g, c, err);
            } else {
                i += 1;
            }
        }
        // Every slot it sends through (one, unless it claimed another before we
        // drained the first).
        for slot in 0..g.by_slot.len() {
            if g.by_slot[slot].as_ref().is_some_and(|r| r.peer == id) {
                self.release_rx(g, id, slot);
            }
        }
        // Forget it: a later send attaches afresh (a restarted peer has a new
        // segment under a new name anyway).
        g.by_name.remove(&name);
        for x in g.by_addr.iter_mut().filter(|x| x.is_some_and(|(_, v)| v == id)) {
            *x = None;
        }
        g.peers[id.idx as usize] = None;
    }
}

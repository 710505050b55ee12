//! Progress: polling the rings of the claimed slots of our segment, handling the
//! entries found there, pushing what waits for room, and the [`Progress`]
//! implementation (sleeping and waking).

use super::{Inner, OpKind, PeerId, Rts, RxPath, RxSlot, ShmEp, Violation, LIVENESS_POLLS, NO_RX, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{flags, Entry, Kind, Mode};
use crate::ring::{Consumer, ENTRY_PAYLOAD};
use crate::segment::{self, JOBS, SLOTS};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::{fi_log, Error, FiAddr};
use fabric_util::bind::Bindings;
use fabric_util::matcher::MsgSpec;
use fabric_util::progress::Progress;
use fabric_util::rx::RxEngine;
use fabric_util::rx::{Unexp, UnexpBody};
use fabric_util::wire::{HdrFlags, Header, OpCode};
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

/// The AV version [`RxSlot`](super::RxSlot)'s cached source is valid for when no AV
/// is bound (AV versions count up from 0, far from it).
const NO_AV: u64 = u64::MAX - 1;

/// How often progress checks that its peers are alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(50);

/// Copy `len` bytes out of a bounce buffer into `out`.
///
/// # Safety
/// `p` is a bounce buffer of a mapped slot ([`BOUNCE_SIZE`](segment::BOUNCE_SIZE)
/// bytes) and `len <= BOUNCE_SIZE`.
unsafe fn from_bounce(p: *const u8, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(len);
    // SAFETY: per the contract, `p..p+len` is mapped; `out` has room for `len`
    // bytes and is our own memory. A misbehaving peer may write the bounce buffer
    // meanwhile: the bytes are then garbage, never out of bounds.
    unsafe {
        std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len);
        out.set_len(len);
    }
}

impl ShmEp {
    /// Whether slot `i` of our segment (claimed) would give progress nothing to do,
    /// decided without the lock: it has a consumer, is not closed, and its ring holds
    /// nothing at the consumer's position ([`ShmEp::rx_pos`]).
    ///
    /// Ordering (no wake-up is lost): a waiter calls progress once more after
    /// announcing its sleep and a SeqCst fence (`prepare_sleep`); a sender publishes
    /// its entry, then fences (SeqCst) and wakes us if it sees a sleeper
    /// ([`ShmEp::wake`]). When the sender's fence comes first, the loads here (after
    /// ours) see its entry, and everything that happened before it:
    /// - the position read is the consumer's, or a stale one (another thread
    ///   consumed meanwhile and its Relaxed store is not visible yet). At a stale
    ///   position `q` the sender's entry of `q` (published before ours) or a later
    ///   state of that ring entry shows, never "free at `q`", so the answer is "not
    ///   quiet" and the locked path looks;
    /// - a slot the sender claimed afresh was released before: the [`NO_RX`] stored
    ///   (SeqCst) by `release_rx` before the release happens before the claim, so
    ///   it is visible (or the position of the consumer attached after), never the
    ///   position of the old ring.
    ///
    /// When our fence comes first, the sender sees the sleeper and wakes us.
    /// Progress with no work besides the rings ([`ShmEp::work`]) takes the lock only
    /// for the first slot that is not quiet. (`tests/loom_ring.rs` models this;
    /// `tests/idle_wake.rs` stresses it.)
    #[inline(always)]
    fn slot_quiet(&self, i: usize) -> bool {
        let pos = self.rx_pos[i].load(Ordering::Relaxed);
        let s = self.seg.slot(i);
        pos != NO_RX && s.ring().free_at(pos) && s.state() != segment::SLOT_CLOSED
    }

    /// Progress from slot `i` of our segment on, the first one the lockless walk
    /// found not quiet: it and the claimed slots after it that are not quiet
    /// (`rest`: the bits of its word of the claim bitmap after `i`), under the lock.
    #[inline(never)]
    fn progress_from(&self, rest: u64, i: usize) {
        let mut g = self.lock();
        let g = &mut *g;
        if !g.ready {
            return;
        }
        self.poll_slot(g, i);
        // Usually no other slot is claimed: one test for all the words left (and
        // those before `i`'s, all 0 in the common case of `i < 64`; else `poll_rest`
        // has a look for nothing).
        if rest != 0 || self.seg.claimed_after_first_word() {
            self.poll_rest(g, i / 64, rest);
        }
        // An entry may have queued work (an answer to a full ring, say):
        // `note_work` closed the gate, so the next progress call does it.
    }

    /// The rest of [`progress_from`](Self::progress_from): the claimed slots after
    /// those it polled (`rest` in word `w`, then the words after it) that are not
    /// quiet.
    #[inline(never)]
    fn poll_rest(&self, g: &mut Inner, w: usize, rest: u64) {
        let mut word = rest;
        for k in w..SLOTS / 64 {
            if k > w {
                word = self.seg.claim_word(k);
            }
            while word != 0 {
                let i = k * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                if !self.slot_quiet(i) {
                    self.poll_slot(g, i);
                }
            }
        }
    }

    fn progress_locked(&self, g: &mut Inner, liveness: bool) {
        if !g.ready {
            return;
        }
        let mut bits = [0u64; SLOTS / 64];
        self.seg.claimed_slots(&mut bits);
        for (w, word) in bits.iter().enumerate() {
            let mut word = *word;
            while word != 0 {
                let i = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                if !self.slot_idle(g, i) {
                    self.poll_slot(g, i);
                }
            }
        }
        if liveness {
            let now = Instant::now();
            if now.duration_since(g.last_check) >= LIVENESS_EVERY {
                g.last_check = now;
                self.check_peers(g);
            }
        }
        // Only what is pushed with `note_work` sets the flag: without it, nothing
        // waits besides the rings.
        if self.work.load(Ordering::Relaxed) {
            self.progress_work(g);
        }
    }

    /// The work besides the rings: queued entries, streams, shared copies; clears
    /// [`ShmEp::work`] when none is left.
    #[inline(never)]
    fn progress_work(&self, g: &mut Inner) {
        if !g.backlog.is_empty() {
            self.flush_backlog(g);
        }
        if !g.streams.is_empty() {
            self.push_streams(g);
        }
        if !g.rd_streams.is_empty() {
            self.push_read_streams(g);
        }
        if !g.cocopies.is_empty() {
            self.check_cocopies(g);
        }
        let work = !(g.backlog.is_empty() && g.streams.is_empty() && g.rd_streams.is_empty() && g.cocopies.is_empty());
        self.work.store(work, Ordering::Relaxed);
    }

    /// Progress through the lock, every slot, when [`ShmEp::gate`] says so: for the
    /// liveness check, or with work besides the rings (then the liveness check only
    /// every [`LIVENESS_POLLS`]th call). Sets the gate for the calls after it.
    #[inline(never)]
    fn progress_slow(&self) {
        let mut g = self.lock();
        g.slow_polls = g.slow_polls.wrapping_add(1);
        let liveness = !self.work.load(Ordering::Relaxed) || g.slow_polls % LIVENESS_POLLS == 0;
        self.progress_locked(&mut g, liveness);
        // Under the lock, as every `note_work`: none is lost in between.
        let gate = if self.work.load(Ordering::Relaxed) { 0 } else { LIVENESS_POLLS };
        self.gate.store(gate, Ordering::Relaxed);
    }

    /// Whether polling slot `i` of our segment would do nothing: its sender is
    /// known, its ring empty and the slot not closed.
    #[inline]
    fn slot_idle(&self, g: &Inner, i: usize) -> bool {
        g.by_slot[i].as_ref().is_some_and(|r| r.cons.is_empty()) && self.seg.slot(i).state() != segment::SLOT_CLOSED
    }

    /// Drain the ring of slot `i` of our segment. The inline messages at its head
    /// that a posted receive takes go from the ring entry straight into the receive,
    /// in this one loop; the first other entry, and everything after it, through
    /// [`poll_entries`](Self::poll_entries).
    #[inline(always)]
    pub(super) fn poll_slot(&self, g: &mut Inner, i: usize) {
        let version = match &g.b.av {
            Some(av) => av.version(),
            None => NO_AV,
        };
        let Inner { by_slot, rx, b, .. } = &mut *g;
        let Some(r) = &mut by_slot[i] else { return self.poll_entries(g, i, false) };
        // The cached source is valid for the AV's version (else the general path
        // looks it up, and caches it).
        if r.src_version != version {
            return self.poll_entries(g, i, false);
        }
        let mut next = r.cons.front();
        let more = loop {
            let Some(front) = next else { break false };
            // SAFETY: as in `poll_entries`: the entry is published and ours to read
            // until `consume_next` below; the ring lies in our own segment, mapped while
            // `self` lives; garbage bytes from a broken peer are checked by `decode`.
            let raw: &[u8; ENTRY_PAYLOAD] = unsafe { front.ptr().as_ref() };
            let Some(e) = Entry::decode_inline_msg(raw) else {
                // A message in a bounce buffer: as an inline one, out of line.
                if self.take_bounce_msg(rx, b, r.src, i, raw) {
                    next = front.consume_next();
                    continue;
                }
                break true;
            };
            let tagged = e.flags & flags::TAGGED != 0;
            let m = MsgSpec { tagged, src: r.src, tag: e.tag };
            let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
            // Unexpected: held with a copy of its payload (no memory: the general
            // path reports it).
            if !rx.deliver_eager(b, &m, e.len, data, e.inline(raw))
                && rx.hold_eager(m, e.len, data, e.inline(raw)).is_err()
            {
                break true;
            }
            next = front.consume_next();
        };
        // Whether the loop consumed entries, without a count kept across it: under the
        // lock, `rx_pos[i]` is the consumer's position as of the last poll (every
        // poll that consumes stores it, as does attaching the consumer).
        let pos = r.cons.pos();
        let consumed = pos != self.rx_pos[i].load(Ordering::Relaxed);
        if consumed {
            // Once per poll, not per entry: `slot_quiet` reads it only as a hint.
            self.rx_pos[i].store(pos, Ordering::Relaxed);
        }
        if more {
            return self.poll_entries(g, i, consumed);
        }
        // Found after the loop (not kept across it in a register or on the stack).
        let s = self.seg.slot(i);
        if consumed {
            // Ring entries were freed: wake the sender if it sleeps waiting for them.
            if s.take_sender_waits() {
                self.wake_slot_sender(g, i);
            }
            // A sender that closed meanwhile waits for the next poll: its ring is
            // empty now, and the empty ring of a closed slot is never quiet
            // (`slot_quiet`, `slot_idle`).
            return;
        }
        // A sender that closed: it may have published entries after our last look at
        // its ring, so `poll_entries` drains it once more, then releases the slot.
        if s.state() == segment::SLOT_CLOSED {
            self.poll_entries(g, i, false);
        }
    }

    /// [`poll_slot`](Self::poll_slot) for an entry (`raw`, of slot `i`, whose sender
    /// is `src`) that is not an inline message: when it is a message in a bounce
    /// buffer, straight from the buffer into its receive, or held as unexpected with
    /// a copy, the buffer then handed back to the sender; true when it was one (and
    /// is done with). Anything else is left to [`poll_entries`](Self::poll_entries).
    #[inline(never)]
    fn take_bounce_msg(
        &self,
        rx: &mut RxEngine<Rts>,
        b: &Bindings,
        src: FiAddr,
        i: usize,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> bool {
        let Some(e) = Entry::decode_bounce_msg(raw) else { return false };
        let s = self.seg.slot(i);
        let k = e.aux as usize;
        // SAFETY: `decode_bounce_msg` checked the index and that len <= BOUNCE_SIZE,
        // so the bytes lie in bounce buffer `k` of slot `i` of our own segment, mapped
        // while `self` lives; the buffer is ours (the entry hands it over, with the
        // ring's Acquire) until the store below. A peer breaking the protocol can only
        // make the bytes garbage.
        let body = unsafe { std::slice::from_raw_parts(s.bounce_ptr(k), e.len as usize) };
        let m = MsgSpec { tagged: e.flags & flags::TAGGED != 0, src, tag: e.tag };
        let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
        // Unexpected: held with a copy of its payload (no memory: the general path
        // reports it, and the buffer stays the receiver's until then).
        if !rx.deliver_eager(b, &m, e.len, data, body) && rx.hold_eager(m, e.len, data, body).is_err() {
            return false;
        }
        // Release: our reads of the buffer happen before the sender reuses it.
        s.bounce_busy[k].store(0, Ordering::Release);
        true
    }

    /// [`wake_sender`](Self::wake_sender) for the sender of slot `i` of our segment.
    #[cold]
    #[inline(never)]
    fn wake_slot_sender(&self, g: &mut Inner, i: usize) {
        if let Some(pid) = g.by_slot[i].as_ref().map(|r| r.peer) {
            self.wake_sender(g, pid);
        }
    }

    /// [`poll_slot`](Self::poll_slot) for every entry (`consumed`: it consumed some
    /// already), and for a slot without a consumer yet.
    #[inline(never)]
    fn poll_entries(&self, g: &mut Inner, i: usize, consumed: bool) {
        let pid = match &g.by_slot[i] {
            Some(r) => r.peer,
            None => match self.attach_rx(g, i) {
                Some(id) => id,
                None => return,
            },
        };
        let s = self.seg.slot(i);
        // Read before draining: a sender stores SLOT_CLOSED (Release) after publishing
        // its last entry, so once we see it (Acquire) the drain below sees every entry,
        // and the slot can go after it. (Seen after the drain, it may follow an entry
        // published after our last look: the next poll drains and releases.)
        let closed = s.state() == segment::SLOT_CLOSED;
        let mut consumed = consumed;
        loop {
            let at = match &g.by_slot[i] {
                Some(r) => r.cons.peek_ptr(),
                None => return,
            };
            let Some(at) = at else { break };
            // SAFETY: the entry is published and ours to read until the consumer
            // advances past it, which only the lines below do, after the entry is
            // handled (nothing handling it reaches polls, advances or releases this
            // slot); the ring lies in our own segment, mapped while `self` lives. A
            // peer breaking the protocol can only make the bytes garbage, which
            // `decode` checks.
            let raw: &[u8; ENTRY_PAYLOAD] = unsafe { at.as_ref() };
            let res = self.on_entry(g, pid, i, raw);
            consumed = true;
            if let Some(r) = &mut g.by_slot[i] {
                r.cons.advance();
                self.rx_pos[i].store(r.cons.pos(), Ordering::Relaxed);
            }
            if let Err(why) = res {
                self.bad_entry(g, pid, why);
                return;
            }
        }
        // Ring entries (and bounce buffers) were freed: wake the sender if it sleeps
        // waiting for them.
        if consumed && s.take_sender_waits() {
            self.wake_sender(g, pid);
        }
        // A sender that closed: its ring is drained, the slot can go.
        if closed {
            self.release_rx(g, pid, i);
        }
    }

    /// The sender of one of our slots waits for room: wake it.
    #[cold]
    #[inline(never)]
    fn wake_sender(&self, g: &mut Inner, pid: PeerId) {
        if let Some(p) = Self::peer(g, pid) {
            segment::wake(&p.name);
        }
    }

    /// The AV handle of the sender of slot `i` (`pid`), cached in the slot for the
    /// AV's version.
    #[inline(always)]
    fn slot_src(g: &mut Inner, i: usize, pid: PeerId) -> FiAddr {
        let v = match &g.b.av {
            Some(av) => av.version(),
            None => NO_AV,
        };
        match &g.by_slot[i] {
            Some(r) if r.src_version == v => r.src,
            _ => Self::slot_src_slow(g, i, pid, v),
        }
    }

    /// [`slot_src`](Self::slot_src) for a version not cached yet.
    #[cold]
    #[inline(never)]
    fn slot_src_slow(g: &mut Inner, i: usize, pid: PeerId, v: u64) -> FiAddr {
        let src = Self::src_of(g, pid);
        if let Some(r) = &mut g.by_slot[i] {
            r.src = src;
            r.src_version = v;
        }
        src
    }

    /// A new sender in slot `i` of our segment: who is it? Its peer, with the
    /// receiving end of the slot's ring, or `None` while its claimer still sets the
    /// slot up.
    ///
    /// A slot already closed is taken too: its sender may have sent, seen its sends
    /// complete and closed (or exited) before we first looked; its ring and identity
    /// were set up before it became active, and what it sent is ours to deliver. (The
    /// caller then drains the ring and releases the slot.)
    #[cold]
    #[inline(never)]
    fn attach_rx(&self, g: &mut Inner, i: usize) -> Option<PeerId> {
        let s = self.seg.slot(i);
        if !matches!(s.state(), segment::SLOT_ACTIVE | segment::SLOT_CLOSED) {
            return None;
        }
        let name = s.peer_name()?;
        let (ppid, pstart) = s.peer_id();
        let id = Self::peer_by_name(g, &name, ppid, pstart);
        let p = Self::peer(g, id).expect("just found");
        if p.pid == 0 || p.pid != ppid || p.start != pstart {
            p.pid = ppid;
            p.start = pstart;
        }
        // SAFETY: the ring lies in slot `i` of our own segment, mapped while the
        // endpoint lives; the slot's sender is its only producer and we its only
        // consumer.
        let cons = unsafe { Consumer::new(s.ring_ptr()) };
        self.rx_pos[i].store(cons.pos(), Ordering::Relaxed);
        p.rx = Some(RxPath { slot: i, jobs_busy: [false; JOBS] });
        g.by_slot[i] = Some(RxSlot { peer: id, cons, src: FiAddr::NOTAVAIL, src_version: u64::MAX });
        Some(id)
    }

    /// A peer sent an entry that breaks the protocol: forget it.
    #[cold]
    #[inline(never)]
    fn bad_entry(&self, g: &mut Inner, pid: PeerId, why: Violation) {
        fi_log!(Level::Warn, NAME, "ep_data", "peer sent a bad entry ({why}): dropping it");
        self.peer_down(g, pid, Error::Io);
    }

    pub(super) fn release_rx(&self, g: &mut Inner, pid: PeerId, i: usize) {
        if let Some(p) = Self::peer(g, pid) {
            if p.rx.as_ref().is_some_and(|r| r.slot == i) {
                p.rx = None;
            }
        }
        g.by_slot[i] = None;
        // SeqCst, before the release: see `slot_quiet`.
        self.rx_pos[i].store(NO_RX, Ordering::SeqCst);
        self.seg.release_slot(i);
    }

    /// Copy a payload out of an entry (inline or bounce) into `out`, freeing the
    /// bounce buffer.
    pub(super) fn take_payload(&self, slot: usize, e: &Entry, raw: &[u8; ENTRY_PAYLOAD], out: &mut Vec<u8>) {
        match e.mode {
            Mode::Inline => {
                out.clear();
                out.extend_from_slice(e.inline(raw));
            }
            Mode::Bounce => {
                let s = self.seg.slot(slot);
                // SAFETY: `decode` checked the index and that len <= BOUNCE_SIZE.
                unsafe { from_bounce(s.bounce_ptr(e.aux as usize), e.len as usize, out) };
                s.bounce_busy[e.aux as usize].store(0, Ordering::Release);
            }
            _ => out.clear(),
        }
    }

    /// Handle one entry of a peer's ring (`raw`, in the ring, checked here).
    #[inline]
    fn on_entry(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        if let Some(e) = Entry::decode_inline_msg(raw) {
            return self.on_msg_inline(g, peer, slot, &e, raw);
        }
        let e = Entry::decode(raw).map_err(|d| d.to_string())?;
        self.on_other_entry(g, peer, slot, &e, raw)
    }

    /// A message carried in its entry: straight into its receive, or held as
    /// unexpected.
    #[inline(always)]
    fn on_msg_inline(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let src = Self::slot_src(g, slot, peer);
        let tagged = e.flags & flags::TAGGED != 0;
        let m = MsgSpec { tagged, src, tag: e.tag };
        let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
        // Completing a receive, or holding the message, queues no action for the
        // wire.
        if g.rx.deliver_eager(&g.b, &m, e.len, data, e.inline(raw)) {
            return Ok(());
        }
        g.rx.hold_eager(m, e.len, data, e.inline(raw)).map_err(|_| "no memory".to_string())
    }

    /// Every entry but an inline message.
    #[inline(never)]
    fn on_other_entry(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let e = *e;
        match e.kind {
            Kind::Msg => {
                // Through the slot's cache, which it fills for `poll_slot`'s fast path.
                let src = Self::slot_src(g, slot, peer);
                let m = MsgSpec { tagged: e.flags & flags::TAGGED != 0, src, tag: e.tag };
                let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
                match e.mode {
                    Mode::Inline | Mode::Bounce => match g.rx.match_arrival(&m, e.len) {
                        Some(target) => {
                            // Straight into the receive.
                            if e.mode == Mode::Inline {
                                g.rx.write(&target, 0, e.inline(raw));
                            } else {
                                let s = self.seg.slot(slot);
                                let bp = s.bounce_ptr(e.aux as usize);
                                let mut local = [NULL_IOV; IOV_LIMIT];
                                let n = g.rx.pieces(&target, 0, e.len, &mut local);
                                let mut done = 0;
                                for v in &local[..n] {
                                    // SAFETY: the piece lies in the receive (valid for
                                    // writes); `decode` checked len <= BOUNCE_SIZE.
                                    unsafe { std::ptr::copy_nonoverlapping(bp.add(done), v.base, v.len) };
                                    done += v.len;
                                }
                                s.bounce_busy[e.aux as usize].store(0, Ordering::Release);
                            }
                            let mut hf = if m.tagged { HdrFlags::TAGGED } else { 0 };
                            if data.is_some() {
                                hf |= HdrFlags::CQ_DATA;
                            }
                            let hdr = Header {
                                flags: HdrFlags(hf),
                                len: e.len,
                                tag: e.tag,
                                data: e.data,
                                id: 0,
                                op: OpCode::Msg,
                            };
                            g.rx.complete(&g.b, target, &hdr, src, false);
                        }
                        None => {
                            let mut buf = g.rx.unexp_buf(0).map_err(|_| "no memory".to_string())?;
                            self.take_payload(slot, &e, raw, &mut buf);
                            let u = Unexp { body: UnexpBody::Eager(buf), len: e.len, data, tag: e.tag, rma: false };
                            g.rx.arrive(&g.b, m, u);
                        }
                    },
                    Mode::Iov | Mode::Stream => {
                        let mut pieces = [(0u64, 0u64); IOV_LIMIT];
                        let n = if e.mode == Mode::Iov { e.pieces(raw, &mut pieces) } else { 0 };
                        let r = Rts { peer, id: e.id, mode: e.mode, pieces, n };
                        let u = Unexp { body: UnexpBody::Rts(r), len: e.len, data, tag: e.tag, rma: false };
                        g.rx.arrive(&g.b, m, u);
                    }
                    Mode::None => return Err("message without a payload mode".into()),
                }
                self.run_rx_actions(g);
            }
            Kind::Cts => {
                let op = g
                    .ops
                    .get_mut(e.id)
                    .filter(|o| o.peer == peer && o.kind != OpKind::Eager)
                    .ok_or("clear to send for no operation")?;
                if op.sent.is_none() {
                    op.sent = Some(0);
                    g.streams.push_back(e.id);
                    self.note_work();
                }
            }
            Kind::Ack => {
                if g.ops.get_mut(e.id).is_some_and(|o| o.peer == peer && o.kind != OpKind::Eager) {
                    self.finish_op(g, e.id, e.aux);
                }
            }
            Kind::Data => self.on_data(g, peer, slot, &e)?,
            Kind::Help => self.on_help(g, peer, &e, raw)?,
            Kind::Write => self.on_write(g, peer, slot, &e, raw)?,
            Kind::Read => self.on_read(g, peer, &e, raw)?,
            Kind::Atomic => self.on_atomic(g, peer, slot, &e, raw)?,
            Kind::AtomicResp => {
                let mut buf = std::mem::take(&mut g.scratch);
                self.take_payload(slot, &e, raw, &mut buf);
                // The status is in `data`: `aux` is the bounce index of a large answer.
                let err = u32::try_from(e.data).map_err(|_| "atomic answer with an unknown status")?;
                if let Some(op) = g.ops.get_mut(e.id).filter(|o| o.peer == peer && o.kind == OpKind::Atomic) {
                    if err == 0 && op.niov > 0 {
                        let n = buf.len().min(op.iov[0].len);
                        // SAFETY: the result buffer is valid for writes under
                        // post_atomic's contract; n is within it.
                        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), op.iov[0].base, n) };
                    }
                    self.finish_op(g, e.id, err);
                }
                g.scratch = buf;
            }
        }
        Ok(())
    }
}

impl Progress for ShmEp {
    fn progress(&self) {
        // One test for the liveness check and for work besides the rings.
        let n = self.gate.load(Ordering::Relaxed);
        if n == 0 {
            return self.progress_slow();
        }
        // Racing progress calls of several threads may store over a `note_work` of
        // another thread: the work then waits for the gate's next 0, at most
        // LIVENESS_POLLS calls, and never across a sleep (`prepare_sleep` and
        // `trywait` open the gate for the progress call that precedes it).
        self.gate.store(n - 1, Ordering::Relaxed);
        // One walk of the claim bitmap, without the lock until a slot has something
        // (see `slot_quiet`).
        for w in 0..SLOTS / 64 {
            let mut word = self.seg.claim_word(w);
            while word != 0 {
                let i = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                if !self.slot_quiet(i) {
                    return self.progress_from(word, i);
                }
            }
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.waker.fd())
    }

    fn prepare_sleep(&self) {
        // Waiting for room at peers (queued entries, streams to push): ask them to
        // wake us when they free some. The Waiter polls once more after this,
        // through the lock for everything.
        let mut g = self.lock();
        self.gate.store(0, Ordering::Relaxed);
        if !(g.backlog.is_empty() && g.streams.is_empty() && g.rd_streams.is_empty()) {
            for t in g.peers.iter().flatten().filter_map(|p| p.tx.as_ref()) {
                t.seg.slot(t.slot).set_sender_waits(true);
            }
            g.waits_marked = true;
        }
        drop(g);
        self.seg.sleepers().fetch_add(1, Ordering::SeqCst);
        // Pairs with the sender's fence: our next poll sees its entry, or it sees
        // us sleeping and wakes us.
        fence(Ordering::SeqCst);
    }

    fn trywait(&self) {
        // The application blocks on the descriptor next: the progress call that
        // precedes it does everything (see `progress`).
        self.gate.store(0, Ordering::Relaxed);
    }

    fn end_sleep(&self) {
        let mut g = self.lock();
        if std::mem::take(&mut g.waits_marked) {
            for t in g.peers.iter().flatten().filter_map(|p| p.tx.as_ref()) {
                t.seg.slot(t.slot).set_sender_waits(false);
            }
        }
        drop(g);
        self.seg.sleepers().fetch_sub(1, Ordering::SeqCst);
        self.waker.drain();
    }
}

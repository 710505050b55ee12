//! Progress of a tcp endpoint: which connections have work, reading frames
//! (header, then payload straight into its destination where it is large),
//! handing them to the RDM engine, and writing the frames it queues.

use super::*;
use fabric_util::wire::{HdrFlags, HDR_LEN, MAGIC, WIRE_VERSION};
use std::mem::MaybeUninit;

/// Ready descriptors taken from one `epoll_wait`.
const READY_MAX: usize = 32;

/// The events of an epoll set ready now, as `epoll_wait` left them.
struct Ready {
    /// The first `n` were written by the kernel; the rest stay uninitialized.
    evs: [MaybeUninit<libc::epoll_event>; READY_MAX],
    n: usize,
}

impl Ready {
    /// The descriptors of epoll set `epfd` ready now (no wait).
    #[inline]
    fn now(epfd: RawFd) -> Ready {
        let mut evs = [MaybeUninit::<libc::epoll_event>::uninit(); READY_MAX];
        // SAFETY: `evs` has room for READY_MAX events, which the kernel writes.
        let n = unsafe { libc::epoll_wait(epfd, evs.as_mut_ptr() as *mut libc::epoll_event, READY_MAX as i32, 0) };
        Ready { evs, n: (n.max(0) as usize).min(READY_MAX) }
    }

    /// Whether the answer was full (more may be ready than it holds).
    #[inline]
    fn full(&self) -> bool {
        self.n == READY_MAX
    }

    /// Whether `fd` is among the ready descriptors.
    #[inline]
    fn has(&self, fd: RawFd) -> bool {
        // SAFETY: the first n events were written by epoll_wait.
        self.evs[..self.n].iter().any(|e| unsafe { e.assume_init_ref() }.u64 as RawFd == fd)
    }
}

/// The eager message at the front of `staged` (header and payload staged
/// whole), its header decoded inline: the frame a small-message conversation is
/// made of. `None` for anything else (fewer than a header's bytes, another
/// frame, other flags, a payload not all staged, a header `Header::decode` would
/// refuse), which the caller leaves to the general decode.
#[inline(always)]
fn staged_msg(staged: &[u8]) -> Option<(Header, &[u8])> {
    // Magic, version and op in the low three bytes, the reserved byte zero, and
    // no flag but TAGGED and CQ_DATA: one compare of the first eight bytes under
    // a mask (as `Header::decode`'s own fast path).
    const MASK: u64 = !(((HdrFlags::TAGGED | HdrFlags::CQ_DATA) as u64) << 32);
    const WORD: u64 = MAGIC as u64 | (WIRE_VERSION as u64) << 8 | (OpCode::Msg as u64) << 16;
    let (hb, rest) = staged.split_first_chunk::<HDR_LEN>()?;
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&hb[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let first = word(0);
    if first & MASK != WORD {
        return None;
    }
    let len = word(8);
    let payload = usize::try_from(len).ok().and_then(|n| rest.get(..n))?;
    let hdr = Header {
        op: OpCode::Msg,
        flags: HdrFlags((first >> 32) as u32),
        len,
        tag: word(16),
        data: word(24),
        id: word(32),
    };
    Some((hdr, payload))
}

/// What [`TcpEp::progress_solo`] did.
#[derive(Debug, PartialEq, Eq)]
enum Solo {
    /// All there was: nothing came, or every byte read went to the engine.
    Done,
    /// Not for it (or it stopped at something else): the full pass runs.
    Full,
    /// It stopped at bytes of its one connection it does not take whole (a
    /// large message's header, staged alone), or at a stage read full: that
    /// connection's receive state machine goes on at once ([`TcpEp::progress_conn`]),
    /// without the full pass's `epoll_wait`, which could only say what is
    /// known (the listener is looked at every [`SOLO_FULL_EVERY`] calls anyway).
    Conn,
    /// The connection failed, with this error, because of this (carried in
    /// the answer, so that the usual answers leave nothing to drop).
    Fail(Error, String),
}

impl TcpEp {
    /// The engine's frames that will not be written (their connection is gone)
    /// fail; control frames are dropped.
    pub(super) fn fail_frames(g: &mut Inner, ops: impl IntoIterator<Item = TxOp>, conn: ConnId, err: Error) {
        for op in ops.into_iter().filter(|op| !op.control) {
            g.eng.frame_failed(&g.b, conn, op.f, err);
        }
    }

    /// Put the engine's frames on their connections, and write.
    pub(super) fn pump(&self, g: &mut Inner) {
        while let Some((id, f)) = g.eng.poll_transmit() {
            match Self::conn_mut(g, id) {
                Some(c) => c.txq.push_back(TxOp::data(f)),
                None => {
                    g.eng.frame_failed(&g.b, id, f, Error::ConnReset);
                    continue;
                }
            }
            self.flush_conn(g, id);
        }
    }

    /// Write what a connection can; a failure fails the connection.
    #[inline]
    pub(super) fn flush_conn(&self, g: &mut Inner, id: ConnId) {
        // Most calls find nothing to write: that is decided here, inline.
        let Some(slot) = g.slots.get(id.idx as usize) else { return };
        match &slot.conn {
            Some(c) if slot.gen == id.gen && (c.want_write || !c.txq.is_empty()) => self.flush_queued(g, id),
            _ => {}
        }
    }

    /// [`TcpEp::flush_conn`] of a connection with frames queued or blocked writes.
    fn flush_queued(&self, g: &mut Inner, id: ConnId) {
        let r = {
            // Borrowed field by field: the connection stays in its slot (it is
            // large) while frames written complete in the engine.
            let Inner { slots, eng, b, .. } = g;
            let Some(slot) = slots.get_mut(id.idx as usize) else { return };
            if slot.gen != id.gen {
                return;
            }
            let Some(conn) = slot.conn.as_mut() else { return };
            if conn.state == ConnState::Connecting || conn.txq.is_empty() && !conn.want_write {
                return;
            }
            let cx = Ctx { b, objs: &self.domain.objs };
            let r = conn.flush(|c, op| {
                if !op.control {
                    eng.frame_done(cx, id, Some(&mut c.pr), op.f);
                }
            });
            let pending = conn.txq.front().is_some_and(|op| conn.state == ConnState::Ready || op.control);
            if pending != conn.want_write {
                conn.want_write = pending;
                let _ = self.poll.set_interest(conn.fd(), !conn.paused, pending);
            }
            r
        };
        if let Err(e) = r {
            self.fail_conn(g, id, e, "write failed");
        }
    }

    pub(super) fn progress_locked(&self, g: &mut Inner) {
        // A closed endpoint has no connection left (closing failed them all),
        // so the one-connection pass finds nothing and says `Full`: whether it
        // is closed is asked there alone.
        match self.progress_solo(g) {
            Solo::Done => {
                if g.eng.wants_transmit() {
                    self.pump(g);
                }
            }
            Solo::Full if g.life == Life::Closed => {}
            Solo::Full => self.progress_all(g),
            Solo::Conn => self.progress_solo_conn(g),
            Solo::Fail(e, why) => self.fail_solo(g, ConnId { idx: 0, gen: g.slots[0].gen }, e, why),
        }
    }

    /// [`TcpEp::progress_locked`]'s full pass: which sockets are ready, the
    /// listener, handshakes, parked operations, every connection with work.
    #[inline(never)]
    fn progress_all(&self, g: &mut Inner) {
        // Which sockets have something (one epoll_wait for all of them); a full
        // answer may hide more, so then every connection is looked at.
        let ready = Ready::now(self.poll.fd());
        let all = ready.full();
        let listener_ready = g.listener.as_ref().is_some_and(|l| all || ready.has(l.as_raw_fd()));
        if listener_ready || g.acceptor.paused() || !g.handshakes.is_empty() {
            self.accept_and_reap(g, listener_ready, Instant::now());
        }
        if !g.parked.is_empty() {
            self.expire_parked(g, Some(Instant::now()), Error::ConnReset);
        }
        for i in 0..g.slots.len() {
            let Some(c) = g.slots[i].conn.as_ref() else { continue };
            // A connection needs work when its socket is ready (readable, writable
            // while blocked, connected, or in error), bytes wait in its stage, or
            // requests wait for its answers to be taken.
            if !(all || c.staged() > 0 || c.paused || c.pr.answers.waiting() > 0 || ready.has(c.fd())) {
                continue;
            }
            let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
            self.progress_conn(g, id);
        }
        if g.eng.wants_transmit() {
            self.pump(g);
        }
        if Self::full_has_work(g) {
            // Handshakes, parked operations or a backed-off listener have
            // deadlines: the next call takes the full pass again.
            g.solo_left = 1;
        }
    }

    /// Whether the full pass has work of its own, whatever the connections do:
    /// accepted connections waiting for their hello, operations parked for a
    /// peer, a listener backing off. Each begins only within the full pass
    /// (accepting, a connection's control frames), which ends by asking this.
    fn full_has_work(g: &Inner) -> bool {
        !g.handshakes.is_empty() || !g.parked.is_empty() || g.acceptor.paused()
    }

    /// The progress of an endpoint whose only connection is up and quiet (nothing
    /// queued or blocked to write, no frame half read, no request held, no answer
    /// owed): its socket is read at once, without `epoll_wait` (when nothing came,
    /// that `recv` is the call's one system call, as `epoll_wait` would be), and
    /// each whole message staged goes from the stage to the engine (matched to a
    /// posted receive and completed) in one straight line. Anything else (another
    /// frame kind, a message not staged whole, a full stage, the periodic look at
    /// the listener) is left, where it stands, to the full pass.
    #[inline]
    fn progress_solo(&self, g: &mut Inner) -> Solo {
        // One decrement and test of the count down to the periodic look.
        g.solo_left = g.solo_left.wrapping_sub(1);
        if g.solo_left == 0 && self.full_wanted(g) {
            return Solo::Full;
        }
        let Inner { slots, eng, b, .. } = g;
        let [slot] = &mut slots[..] else { return Solo::Full };
        let Some(conn) = slot.conn.as_ref() else { return Solo::Full };
        // Blocked writes have frames queued (`flush_queued` keeps `want_write`
        // to whether the queue's head waits): the queue alone is looked at.
        debug_assert!(!conn.want_write || !conn.txq.is_empty());
        // Nothing queued and no answer owed: one test of the two counts.
        if conn.txq.len() | conn.pr.answers.waiting() != 0 {
            return Solo::Full;
        }
        self.read_whole(slots, eng, b, 0)
    }

    /// The whole messages connection `idx` has staged, or receives now into an
    /// empty stage, each straight from the stage to the engine (matched to a
    /// posted receive and completed), while its receive side is between frames.
    /// `Done` when every byte read went to the engine and the socket was drained;
    /// `Full` when it stopped at anything else (another frame kind, a message not
    /// staged whole, a full stage read, a connection not up), which it leaves
    /// where it stands for [`TcpEp::read_step`]; `Fail` with the error and why
    /// when the connection failed.
    #[inline(always)]
    fn read_whole(&self, slots: &mut [Slot], eng: &mut Engine<ConnId>, b: &Bindings, idx: usize) -> Solo {
        let Some(slot) = slots.get_mut(idx) else { return Solo::Full };
        let Some(conn) = slot.conn.as_mut() else { return Solo::Full };
        // A paused connection's receive side holds its request (`RxState::Parked`):
        // the receive state alone is looked at.
        debug_assert!(!conn.paused || !matches!(slot.rx, RxState::Header));
        if !matches!(slot.rx, RxState::Header) || conn.state != ConnState::Ready || conn.hdr_got != 0 {
            return Solo::Full;
        }
        if conn.stage_lo == conn.stage_hi {
            match conn.fill() {
                Ok(_) => {}
                Err(Error::Again) => return Solo::Done,
                Err(e) => return Self::solo_failed(e, "peer closed the connection".into()),
            }
        }
        let src = self.conn_src(b, conn);
        loop {
            let lo = conn.stage_lo;
            let Some((hdr, payload)) = conn.stage.get(lo..conn.stage_hi).and_then(staged_msg) else {
                // Another frame, or a message not staged whole: left staged,
                // header and all, for `read_step` (which decodes it in full).
                return Solo::Conn;
            };
            let end = lo + HDR_LEN + payload.len();
            // A message matching a posted receive (the common case) lands there
            // at once; anything else goes out of line, with the connection's id
            // and the domain, which only it needs.
            if !eng.frame_eager(b, &conn.pr, src, &hdr, payload) {
                if let Some((e, why)) = self.solo_frame_other(conn, eng, b, idx, src, hdr, lo + HDR_LEN) {
                    return Self::solo_failed(e, why);
                }
            }
            conn.stage_lo = end;
            if end == conn.stage_hi {
                // The stage used up: done when the socket was drained too (epoll
                // would not report it), else `read_step` reads on.
                if conn.drained {
                    conn.drained = false;
                    return Solo::Done;
                }
                return Solo::Conn;
            }
        }
    }

    /// A message of [`TcpEp::read_whole`] that no posted receive took at once
    /// (`hdr` and its payload staged whole from `at` on): the engine's general
    /// path (buffered as unexpected, matched further down the queue). The
    /// error and why when the connection failed.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn solo_frame_other(
        &self,
        conn: &mut Conn,
        eng: &mut Engine<ConnId>,
        b: &Bindings,
        idx: usize,
        src: FiAddr,
        hdr: Header,
        at: usize,
    ) -> Option<(Error, String)> {
        let id = ConnId { idx: idx as u32, gen: conn.gen };
        let cx = Ctx { b, objs: &self.domain.objs };
        let payload = &conn.stage[at..at + hdr.len as usize];
        match eng.frame_other(cx, &mut conn.pr, id, src, hdr, payload) {
            Ok(Begin::Done) => None,
            // A stream's peer is never held: past the limits is its error.
            Ok(b) => Some((Error::Io, format!("protocol error: message not taken ({b})"))),
            Err(v) => Some((v.err, v.why)),
        }
    }

    /// The periodic look of [`TcpEp::progress_solo`]: whether the full pass has
    /// work of its own, or the listener has a connection to accept (or an
    /// `epoll_wait` could not say: its answer was full).
    #[cold]
    #[inline(never)]
    fn full_wanted(&self, g: &mut Inner) -> bool {
        g.solo_left = SOLO_FULL_EVERY;
        if Self::full_has_work(g) {
            return true;
        }
        let ready = Ready::now(self.poll.fd());
        ready.full() || g.listener.as_ref().is_some_and(|l| ready.has(l.as_raw_fd()))
    }

    /// [`Solo::Conn`]: the one connection's receive goes on (a large payload
    /// straight into its receive), then what the engine wants sent goes out.
    #[inline(never)]
    fn progress_solo_conn(&self, g: &mut Inner) {
        let id = ConnId { idx: 0, gen: g.slots[0].gen };
        self.progress_conn(g, id);
        if g.eng.wants_transmit() {
            self.pump(g);
        }
    }

    /// [`TcpEp::progress_solo`]'s connection failed with `e` because `why`.
    #[cold]
    fn solo_failed(e: Error, why: String) -> Solo {
        Solo::Fail(e, why)
    }

    /// Connection `id` failed in [`TcpEp::read_whole`] with `e` because `why`.
    #[cold]
    #[inline(never)]
    fn fail_solo(&self, g: &mut Inner, id: ConnId, e: Error, why: String) {
        self.fail_conn(g, id, e, &why);
    }

    pub(super) fn progress_conn(&self, g: &mut Inner, id: ConnId) {
        // Connect completion.
        if let Some(c) = Self::conn_mut(g, id) {
            if c.state == ConnState::Connecting {
                match c.sock.take_error() {
                    Ok(Some(e)) => {
                        self.fail_conn(g, id, e.into(), "connect failed");
                        return;
                    }
                    Err(e) => {
                        self.fail_conn(g, id, e.into(), "connect failed");
                        return;
                    }
                    Ok(None) => {}
                }
                match c.sock.peer_addr() {
                    Ok(_) => c.state = ConnState::HelloSent,
                    Err(e) if e.kind() == std::io::ErrorKind::NotConnected => return,
                    Err(e) => {
                        self.fail_conn(g, id, e.into(), "connect failed");
                        return;
                    }
                }
            }
        } else {
            return;
        }
        self.flush_conn(g, id);
        // Whole messages straight to the engine (unless the last read drained
        // the socket and nothing is staged: then nothing is read until epoll
        // reports more, see `read_step`).
        let Inner { slots, eng, b, .. } = g;
        let drained =
            slots.get(id.idx as usize).and_then(|s| s.conn.as_ref()).map_or(true, |c| c.staged() == 0 && c.drained);
        if !drained {
            match self.read_whole(slots, eng, b, id.idx as usize) {
                Solo::Done => return self.flush_conn(g, id),
                Solo::Full | Solo::Conn => {}
                Solo::Fail(e, why) => return self.fail_solo(g, id, e, why),
            }
        }
        // Read frames, with a budget so one busy peer cannot starve the others.
        for _ in 0..64 {
            match self.read_step(g, id) {
                Ok(true) => continue,
                Ok(false) => break,
                Err((e, why)) => {
                    self.fail_conn(g, id, e, &why);
                    return;
                }
            }
        }
        self.flush_conn(g, id);
    }

    /// One step of the receive state machine; `Ok(false)` when it would block.
    pub(super) fn read_step(&self, g: &mut Inner, id: ConnId) -> std::result::Result<bool, (Error, String)> {
        let idx = id.idx as usize;
        let slot = &mut g.slots[idx];
        let Some(conn) = slot.conn.as_mut() else { return Ok(false) };
        if conn.state == ConnState::AwaitAccept || conn.state == ConnState::Connecting {
            return Ok(false);
        }
        match &mut slot.rx {
            RxState::Header => {
                if conn.staged() == 0 {
                    if conn.drained {
                        // The last read drained the socket: it is read again when
                        // epoll says it is ready (see `progress_locked`), not now.
                        conn.drained = false;
                        return Ok(false);
                    }
                    match conn.fill() {
                        Ok(_) => {}
                        Err(Error::Again) => return Ok(false),
                        Err(e) => return Err((e, "peer closed the connection".into())),
                    }
                }
                if conn.hdr_got == 0 && conn.staged() >= HDR_LEN {
                    // The whole header is staged: decoded where it lies.
                    let lo = conn.stage_lo;
                    let hb: &[u8; HDR_LEN] = conn.stage[lo..lo + HDR_LEN].try_into().expect("HDR_LEN bytes");
                    let hdr = Header::decode(hb, i64::MAX as u64)
                        .map_err(|e| (Error::Io, format!("protocol error from peer: {e}")))?;
                    conn.stage_lo += HDR_LEN;
                    conn.expect_next(hdr.len);
                    if hdr.op == OpCode::Msg && conn.state == ConnState::Ready && hdr.len <= conn.staged() as u64 {
                        // And its payload: the engine takes the frame whole.
                        self.on_frame(g, id, hdr)?;
                        // The stage used up and the socket drained: done until
                        // epoll reports more (the next step would say so too).
                        if let Some(c) = Self::conn_mut(g, id).filter(|c| c.staged() == 0 && c.drained) {
                            c.drained = false;
                            return Ok(false);
                        }
                    } else {
                        self.on_header(g, id, hdr)?;
                    }
                    return Ok(true);
                }
                if !conn.gather_header() {
                    return Ok(true);
                }
                conn.hdr_got = 0;
                let hb = conn.hdr_buf;
                let hdr = Header::decode(&hb, i64::MAX as u64)
                    .map_err(|e| (Error::Io, format!("protocol error from peer: {e}")))?;
                conn.expect_next(hdr.len);
                self.on_header(g, id, hdr)?;
                Ok(true)
            }
            RxState::Engine | RxState::Control { .. } => self.payload_step(g, id),
            &mut RxState::Parked(hdr) => {
                if conn.pr.answers.full() {
                    return Ok(false);
                }
                conn.paused = false;
                let _ = self.poll.set_interest(conn.fd(), true, conn.want_write);
                slot.rx = RxState::Header;
                self.on_header(g, id, hdr)?;
                Ok(true)
            }
        }
    }

    /// Decide where a frame goes once its header is in.
    pub(super) fn on_header(&self, g: &mut Inner, id: ConnId, hdr: Header) -> std::result::Result<(), (Error, String)> {
        let state = Self::conn_mut(g, id).map(|c| c.state).unwrap_or(ConnState::Closed);
        let control = matches!(hdr.op, OpCode::Hello | OpCode::HelloAck | OpCode::Reject);
        if !control && state != ConnState::Ready {
            return Err((Error::Io, format!("protocol error: {} frame before the connection was accepted", hdr.op)));
        }
        if state == ConnState::Ready && matches!(hdr.op, OpCode::Hello | OpCode::HelloAck) {
            return Err((Error::Io, "protocol error: second hello".into()));
        }
        let src = self.src_of(g, id);
        let Inner { eng, b, slots, .. } = g;
        let slot = &mut slots[id.idx as usize];
        let Some(conn) = slot.conn.as_mut() else { return Ok(()) };
        let cx = Ctx { b, objs: &self.domain.objs };
        match eng.begin(cx, &mut conn.pr, id, src, hdr) {
            Ok(Begin::Payload) => slot.rx = RxState::Engine,
            Ok(Begin::Done) => {}
            Ok(Begin::Hold) => {
                // Back-pressure: the peer does not take its answers. Its requests
                // wait, unread, until it does.
                conn.paused = true;
                let _ = self.poll.set_interest(conn.fd(), false, conn.want_write);
                slot.rx = RxState::Parked(hdr);
            }
            Ok(Begin::Control) if hdr.op == OpCode::Shutdown => {
                return Err((Error::Shutdown, "peer shut the connection down".into()));
            }
            Ok(Begin::Control) => slot.rx = RxState::Control { hdr, buf: Vec::with_capacity(hdr.len as usize) },
            Err(v) => return Err((v.err, v.why)),
        }
        if g.eng.wants_transmit() {
            self.pump(g);
        }
        Ok(())
    }

    /// A message whose header and payload are both staged: the engine takes it
    /// whole, from the stage.
    fn on_frame(&self, g: &mut Inner, id: ConnId, hdr: Header) -> std::result::Result<(), (Error, String)> {
        let src = self.src_of(g, id);
        let Inner { eng, b, slots, .. } = g;
        let Some(conn) = slots[id.idx as usize].conn.as_mut() else { return Ok(()) };
        let cx = Ctx { b, objs: &self.domain.objs };
        let (lo, n) = (conn.stage_lo, hdr.len as usize);
        match eng.frame(cx, &mut conn.pr, id, src, hdr, &conn.stage[lo..lo + n]) {
            Ok(Begin::Done) => conn.stage_lo += n,
            // A stream's peer is never held: past the limits is its error.
            Ok(b) => return Err((Error::Io, format!("protocol error: message not taken ({b})"))),
            Err(v) => return Err((v.err, v.why)),
        }
        if g.eng.wants_transmit() {
            self.pump(g);
        }
        Ok(())
    }

    /// The AV handle of a connection's peer (resolved lazily, cached per AV version).
    pub(super) fn src_of(&self, g: &mut Inner, id: ConnId) -> FiAddr {
        if self.ep_type != EpType::Rdm {
            return FiAddr::NOTAVAIL;
        }
        let Inner { b, slots, .. } = g;
        let Some(c) = slots.get_mut(id.idx as usize).filter(|s| s.gen == id.gen).and_then(|s| s.conn.as_mut()) else {
            return FiAddr::NOTAVAIL;
        };
        self.conn_src(b, c)
    }

    /// The AV handle of connection `c`'s peer, as [`TcpEp::src_of`].
    #[inline(always)]
    fn conn_src(&self, b: &Bindings, c: &mut Conn) -> FiAddr {
        // Only an RDM endpoint has an AV (`bind_av` refuses MSG).
        let Some(av) = b.av.as_ref() else { return FiAddr::NOTAVAIL };
        let v = av.version();
        if c.av_version != v {
            Self::resolve_src(av, c, v);
        }
        c.fi_addr
    }

    /// [`TcpEp::conn_src`] when the AV changed since the last look.
    #[cold]
    #[inline(never)]
    fn resolve_src(av: &fabric_util::av::UtilAv, c: &mut Conn, v: u64) {
        c.fi_addr = c.peer.and_then(|p| av.find(&Address::Sockaddr(p))).unwrap_or(FiAddr::NOTAVAIL);
        c.av_version = v;
    }

    /// Move payload bytes; `Ok(false)` when it would block.
    pub(super) fn payload_step(&self, g: &mut Inner, id: ConnId) -> std::result::Result<bool, (Error, String)> {
        let idx = id.idx as usize;
        let closed = |e: Error| (e, "peer closed the connection".to_string());
        let Inner { eng, b, slots, .. } = g;
        let cx = Ctx { b, objs: &self.domain.objs };
        let slot = &mut slots[idx];
        let conn = slot.conn.as_mut().expect("payload on a live connection");
        if let RxState::Control { hdr, buf } = &mut slot.rx {
            while (buf.len() as u64) < hdr.len {
                if conn.staged() == 0 {
                    match conn.fill_upto(STAGE) {
                        Ok(_) => continue,
                        Err(Error::Again) => return Ok(false),
                        Err(e) => return Err(closed(e)),
                    }
                }
                let n = (conn.staged() as u64).min(hdr.len - buf.len() as u64) as usize;
                buf.extend_from_slice(&conn.stage[conn.stage_lo..conn.stage_lo + n]);
                conn.stage_lo += n;
            }
            let RxState::Control { hdr, buf } = std::mem::replace(&mut slot.rx, RxState::Header) else {
                unreachable!("matched above")
            };
            self.on_control(g, id, hdr, buf)?;
            return Ok(true);
        }
        loop {
            let remaining = conn.pr.remaining();
            if remaining == 0 {
                break;
            }
            if conn.staged() > 0 {
                let n = (conn.staged() as u64).min(remaining) as usize;
                let lo = conn.stage_lo;
                eng.write(cx, &mut conn.pr, &conn.stage[lo..lo + n]).map_err(|v| (v.err, v.why))?;
                conn.stage_lo += n;
                continue;
            }
            // A large remainder, or any of a big message's: read straight into
            // its memory.
            if remaining as usize >= STAGE / 2 || conn.big() {
                let mut pieces = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
                let k = eng.pieces(&mut conn.pr, &mut pieces);
                if k > 0 {
                    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; IOV_LIMIT + 1];
                    let mut total = 0usize;
                    for (o, p) in iov.iter_mut().zip(&pieces[..k]) {
                        *o = libc::iovec { iov_base: p.base as *mut libc::c_void, iov_len: p.len };
                        total += p.len;
                    }
                    // When these pieces take the whole rest of the payload, the same
                    // call also reads what follows into the (empty) stage, as a fill
                    // would: then a short read says the socket is drained, and the
                    // next step stops without a `read` that finds nothing (in a
                    // ping-pong, one system call less between the payload and the
                    // answer); else the next header is usually staged already.
                    let tail = if total as u64 == remaining { conn.fill_want() } else { 0 };
                    let mut m = k;
                    if tail > 0 {
                        iov[k] = libc::iovec { iov_base: conn.stage.as_mut_ptr() as *mut libc::c_void, iov_len: tail };
                        m += 1;
                    }
                    // SAFETY: the engine's pieces lie inside a posted receive's or a
                    // read's buffer (valid for writes under the post contract) or a
                    // buffer's reserved spare capacity, and cover at most the
                    // payload's remaining bytes; the last piece, if any, is the
                    // stage (empty: its bytes were all taken above, and `tail` is
                    // at most its length), which nothing else references meanwhile.
                    match unsafe { recvv(conn.fd(), &iov[..m]) } {
                        Ok(n) => {
                            let into_payload = n.min(total);
                            // SAFETY: recvv wrote these bytes from the first piece on.
                            unsafe { eng.advance(&mut conn.pr, into_payload) };
                            if tail > 0 {
                                // What went past the payload is staged.
                                conn.stage_lo = 0;
                                conn.stage_hi = n - into_payload;
                                conn.drained = n >= total && n < total + tail;
                            }
                            continue;
                        }
                        Err(Error::Again) => return Ok(false),
                        Err(e) => return Err(closed(e)),
                    }
                }
            }
            // Through the stage, a whole stage at a time (a big message's payload
            // gets here only when it goes nowhere, as a truncated receive's tail).
            match conn.fill_upto(STAGE) {
                Ok(_) => continue,
                Err(Error::Again) => return Ok(false),
                Err(e) => return Err(closed(e)),
            }
        }
        // The payload is complete.
        slot.rx = RxState::Header;
        eng.end(cx, &mut conn.pr, id).map_err(|v| (v.err, v.why))?;
        if g.eng.wants_transmit() {
            self.pump(g);
        }
        Ok(true)
    }
}

impl Progress for TcpEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.poll.fd())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let g = self.lock();
        let hello = g.handshakes.front().map(|&(_, t)| t);
        let parked = g.parked.iter().map(|p| p.deadline).min();
        [hello, g.acceptor.deadline(), parked].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hdr` encoded, followed by `payload`.
    fn frame(hdr: &Header, payload: &[u8]) -> Vec<u8> {
        let mut v = hdr.encode().to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn a_staged_message_decodes_as_header_decode_does() {
        let payload: Vec<u8> = (0..64u8).collect();
        for flags in [0, HdrFlags::TAGGED, HdrFlags::CQ_DATA, HdrFlags::TAGGED | HdrFlags::CQ_DATA] {
            let hdr = Header {
                flags: HdrFlags(flags),
                len: payload.len() as u64,
                tag: 0x1122_3344_5566_7788,
                data: 0x99aa_bbcc_ddee_ff00,
                id: 7,
                ..Header::new(OpCode::Msg)
            };
            let mut staged = frame(&hdr, &payload);
            // With more bytes behind it (the next frame), it takes its own alone.
            staged.extend_from_slice(&[0xFB; 10]);
            let (got, body) = staged_msg(&staged).expect("an eager message staged whole");
            let full = Header::decode(staged[..HDR_LEN].try_into().unwrap(), u64::MAX).unwrap();
            assert_eq!(got, full);
            assert_eq!(got, hdr);
            assert_eq!(body, &payload[..]);
        }
        // An empty message.
        let hdr = Header::new(OpCode::Msg);
        let empty = frame(&hdr, &[]);
        let (got, body) = staged_msg(&empty).unwrap();
        assert_eq!((got, body.len()), (hdr, 0));
    }

    #[test]
    fn anything_but_a_whole_plain_message_is_left_to_the_full_decode() {
        let msg = Header { len: 8, ..Header::new(OpCode::Msg) };
        let whole = frame(&msg, &[1; 8]);
        // Its payload not all staged, or not even its header.
        assert!(staged_msg(&whole[..whole.len() - 1]).is_none());
        assert!(staged_msg(&whole[..HDR_LEN - 1]).is_none());
        assert!(staged_msg(&[]).is_none());
        // Other frames, other flags, a bad magic, version or reserved byte.
        for op in [OpCode::Rts, OpCode::Data, OpCode::Hello, OpCode::Shutdown] {
            assert!(staged_msg(&frame(&Header { len: 0, ..Header::new(op) }, &[])).is_none(), "{op}");
        }
        for flags in [HdrFlags::LAST, HdrFlags::DC, 1 << 20] {
            assert!(staged_msg(&frame(&Header { flags: HdrFlags(flags), ..msg }, &[1; 8])).is_none(), "{flags:#x}");
        }
        for (i, b) in [(0, 0xFA), (1, 2), (3, 1)] {
            let mut bad = whole.clone();
            bad[i] = b;
            assert!(staged_msg(&bad).is_none(), "byte {i} = {b:#x}");
        }
        // A length past what is staged (or past any usize) is not taken.
        let huge = Header { len: u64::MAX, ..Header::new(OpCode::Msg) };
        assert!(staged_msg(&frame(&huge, &[0; 16])).is_none());
    }
}

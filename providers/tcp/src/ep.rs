//! Active endpoints (MSG and RDM) and their progress.
//!
//! One mutex guards an endpoint's state; progress (driven by reads and waits on a
//! bound queue) takes it, accepts and completes connections, reads frames, matches
//! them against posted receives (`fabric_util::matcher`) and writes queued frames.
//!
//! Protocol (frames of `fabric_util::wire`): a message up to `eager_max` bytes goes
//! as one `Msg` frame; a larger one as `Rts` (size only), answered by the receiver
//! with `Cts` once a receive is matched, then `Data`. Unexpected large messages thus
//! cost only their header. RDM connections are made on demand: the initiator sends
//! `Hello` (its listening name and a random epoch) and queues data until `HelloAck`.
//! When both sides connect at once, the connection initiated by the endpoint with
//! the smaller name wins and the other is refused with `Reject`; a hello with a new
//! epoch from a known name is a restarted peer, whose old connection fails.

use crate::accept::{out_of_descriptors, Acceptor};
use crate::attr::IOV_LIMIT;
use crate::conn::{recvv, Conn, ConnState, TxOp, STAGE};
use crate::domain::TcpDomain;
use crate::{config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op};
use fabric_core::{
    fi_log, Address, BindFlags, Caps, CqEntry, EpType, EqErrEntry, EqEvent, Error, FiAddr, Info, OpFlags, Result,
};
use fabric_util::bind::Bindings;
use fabric_util::progress::{Progress, Waiter};
use fabric_util::rdm::{Begin, Ctx, Engine, PeerRx};
use fabric_util::rx::msg_flags;
use fabric_util::wire::{Header, OpCode};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

mod rma;

/// The largest eager message buffered while unexpected, whatever the local eager
/// limit (a peer may be configured with a larger one).
const UNEXP_EAGER_LIMIT: usize = 64 << 20;

/// The operations of a connection that lost a simultaneous connect (the peer
/// refused it: its own connection to us wins) while the winner had not arrived
/// yet. The loser is closed at once (the peer closes it too); its operations wait
/// here, in order, for the peer's connection, and fail if it does not come
/// within `FI_TCP_HANDSHAKE_TIMEOUT`.
struct Parked {
    /// The peer's name.
    peer: SocketAddr,
    /// The connection they were posted on (rendezvous sends and one-sided
    /// operations still name it).
    from: ConnId,
    /// Frames nothing of which was sent.
    ops: Vec<TxOp>,
    /// When they fail if the peer has not connected.
    deadline: Instant,
}

/// A reference to a connection slot, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnId {
    idx: u32,
    gen: u32,
}

/// The receive side of a connection.
enum RxState {
    /// Gathering a header.
    Header,
    /// Reading a payload into where the RDM engine put it (`Conn::pr`).
    Engine,
    /// Reading a connection-control frame's payload.
    Control { hdr: Header, buf: Vec<u8> },
    /// A request whose header is in, held by the engine until the peer is owed
    /// fewer answers (`Conn::paused`).
    Parked(Header),
}

struct Slot {
    conn: Option<Conn>,
    rx: RxState,
    gen: u32,
}

struct Inner {
    enabled: bool,
    closed: bool,
    b: Bindings,
    /// Connection slots (one for MSG).
    slots: Vec<Slot>,
    /// RDM: connection to a peer by its listening name.
    by_name: HashMap<SocketAddr, ConnId>,
    /// RDM: cache of AV handle to connection, valid for `cache_version`.
    by_addr: HashMap<FiAddr, ConnId>,
    cache_version: u64,
    /// RDM: our listening socket and name.
    listener: Option<TcpListener>,
    name: Option<SocketAddr>,
    /// RDM: how the listener accepts (back-off, descriptor starvation, reports).
    acceptor: Acceptor,
    /// RDM: accepted connections waiting for their hello, oldest first, with the
    /// time each is dropped (entries of connections that moved on are skipped).
    handshakes: VecDeque<(ConnId, Instant)>,
    /// The protocol: operations in flight, receives, unexpected messages, the
    /// RMA target; each connection carries its peer's part (`Conn::pr`).
    eng: Engine<ConnId>,
    /// RDM: operations of connections that lost a simultaneous connect before
    /// the winner (the peer's connection to us) arrived, waiting for it.
    parked: Vec<Parked>,
    /// MSG: the connection data to send with the hello (active side).
    connect_param: Vec<u8>,
}

/// An active endpoint of the tcp provider.
pub(crate) struct TcpEp {
    fid: u64,
    ep_type: EpType,
    domain: Arc<TcpDomain>,
    epoch: u64,
    poll: Waiter,
    inner: Mutex<Inner>,
    me: Weak<TcpEp>,
}

impl TcpEp {
    pub(crate) fn new(domain: Arc<TcpDomain>, info: &Info) -> Result<Arc<TcpEp>> {
        let ep_type = info.ep_attr.ep_type;
        if !matches!(ep_type, EpType::Msg | EpType::Rdm) {
            return Err(Error::Inval);
        }
        let poll = Waiter::new()?;
        let mut inner = Inner {
            enabled: false,
            closed: false,
            b: Bindings::default(),
            slots: Vec::new(),
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            cache_version: u64::MAX,
            listener: None,
            name: info.src_addr.as_ref().and_then(|a| a.sockaddr()),
            acceptor: Acceptor::default(),
            handshakes: VecDeque::new(),
            eng: Engine::new(fabric_util::rdm::Config {
                name: NAME,
                eager_max: config().eager_max,
                unexp_max_one: config().eager_max.max(UNEXP_EAGER_LIMIT) as u64,
                unexp_max_count: usize::MAX,
                hold_unexpected: false,
            }),
            parked: Vec::new(),
            connect_param: Vec::new(),
        };
        // A passive side's endpoint adopts the pending connection from its handle.
        if let Some(h) = &info.handle {
            let pending = h.0.clone().downcast::<crate::pep::Pending>().map_err(|_| Error::Inval)?;
            let (sock, peer) = pending.take().ok_or(Error::Inval)?;
            let mut c = Conn::new(sock, ConnState::AwaitAccept, false, 0);
            c.peer = Some(peer);
            poll.add_fd(c.fd())?;
            inner.slots.push(Slot { conn: Some(c), rx: RxState::Header, gen: 0 });
        }
        Ok(Arc::new_cyclic(|me| TcpEp {
            fid: fabric_core::prov::next_fid(),
            ep_type,
            domain,
            epoch: fabric_util::random::u64_or_fallback(),
            poll,
            inner: Mutex::new(inner),
            me: me.clone(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn weak_progress(&self) -> Weak<dyn Progress> {
        let w: Weak<dyn Progress> = self.me.clone();
        w
    }

    /// Open a new connection slot for a socket.
    fn add_conn(&self, g: &mut Inner, mut conn: Conn) -> Result<ConnId> {
        self.poll.add_fd(conn.fd())?;
        let idx = match g.slots.iter().position(|s| s.conn.is_none()) {
            Some(i) => i,
            None => {
                g.slots.push(Slot { conn: None, rx: RxState::Header, gen: 0 });
                g.slots.len() - 1
            }
        };
        let slot = &mut g.slots[idx];
        slot.gen = slot.gen.wrapping_add(1);
        conn.gen = slot.gen;
        slot.conn = Some(conn);
        slot.rx = RxState::Header;
        Ok(ConnId { idx: idx as u32, gen: slot.gen })
    }

    fn conn_mut(g: &mut Inner, id: ConnId) -> Option<&mut Conn> {
        let s = g.slots.get_mut(id.idx as usize)?;
        if s.gen != id.gen {
            return None;
        }
        s.conn.as_mut()
    }

    // ----- frames -----

    /// The engine's frames that will not be written (their connection is gone)
    /// fail; control frames are dropped.
    fn fail_frames(g: &mut Inner, ops: impl IntoIterator<Item = TxOp>, conn: ConnId, err: Error) {
        for op in ops.into_iter().filter(|op| !op.control) {
            g.eng.frame_failed(&g.b, conn, op.f, err);
        }
    }

    /// Put the engine's frames on their connections, and write.
    fn pump(&self, g: &mut Inner) {
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

    /// Fail every operation that depends on a connection, then forget it.
    fn fail_conn(&self, g: &mut Inner, id: ConnId, err: Error, why: &str) {
        let Some(slot) = g.slots.get_mut(id.idx as usize) else { return };
        if slot.gen != id.gen {
            return;
        }
        let Some(mut conn) = slot.conn.take() else { return };
        let rx = std::mem::replace(&mut slot.rx, RxState::Header);
        let dir = if conn.outgoing { "to" } else { "from" };
        fi_log!(Level::Info, NAME, "ep_data", "connection {dir} {:?} closed: {why}", conn.peer);
        self.poll.del_fd(conn.fd());
        let _ = conn.sock.shutdown(std::net::Shutdown::Both);
        // A descriptor is free again: a listener that ran out of them may accept.
        if let Some(l) = g.listener.as_ref().filter(|_| g.acceptor.paused()) {
            g.acceptor.resume(l, &self.poll);
        }
        let _ = rx;
        Self::fail_frames(g, conn.txq.drain(..), id, err);
        // What the engine had in flight with this peer fails (a receive being
        // read into, operations waiting for answers, cleared messages).
        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
        g.eng.peer_lost(cx, &mut conn.pr, id, err);
        if let Some(peer) = conn.peer {
            if g.by_name.get(&peer) == Some(&id) {
                g.by_name.remove(&peer);
            }
        }
        g.by_addr.retain(|_, c| *c != id);
        if self.ep_type == EpType::Msg {
            // A MSG endpoint has only this connection: its receives fail too, and
            // the application hears of it on the EQ.
            g.eng.rx.fail_all_posted(&g.b, err);
            if let Some(eq) = &g.b.eq {
                // A connection that was up ends with FI_SHUTDOWN; one that never came
                // up (refused, reset during set-up) with an error event.
                if err == Error::Shutdown || err == Error::Canceled || conn.state == ConnState::Ready {
                    eq.push(EqEvent::Shutdown { fid: self.fid });
                } else {
                    eq.push_err(EqErrEntry { fid: self.fid, err, prov_errno: 0, data: Vec::new() });
                }
            }
        }
    }

    // ----- posting -----

    fn check_iov(iov: &[IoVec]) -> Result<()> {
        if iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        Ok(())
    }

    /// Find (or start) the connection for a send to `dest`.
    fn conn_for(&self, g: &mut Inner, dest: FiAddr) -> Result<ConnId> {
        if self.ep_type == EpType::Msg {
            let i = g.slots.iter().position(|s| s.conn.is_some()).ok_or(Error::NotConn)?;
            let s = &g.slots[i];
            let c = s.conn.as_ref().expect("slot has a connection");
            if !matches!(c.state, ConnState::Ready | ConnState::HelloSent | ConnState::Connecting) {
                return Err(Error::NotConn);
            }
            return Ok(ConnId { idx: i as u32, gen: s.gen });
        }
        let av = g.b.av.clone().ok_or(Error::NoAv)?;
        if av.version() != g.cache_version {
            g.by_addr.clear();
            g.cache_version = av.version();
        }
        if let Some(id) = g.by_addr.get(&dest).copied() {
            if Self::conn_mut(g, id).is_some() {
                return Ok(id);
            }
        }
        let addr = av.get(dest).ok_or(Error::Inval)?;
        let sa = addr.sockaddr().ok_or(Error::Inval)?;
        let id = match g.by_name.get(&sa).copied() {
            Some(id) if Self::conn_mut(g, id).is_some() => id,
            _ => self.start_connect(g, sa, None)?,
        };
        g.by_addr.insert(dest, id);
        Ok(id)
    }

    /// Start a non-blocking connect and queue the hello.
    fn start_connect(&self, g: &mut Inner, peer: SocketAddr, param: Option<&[u8]>) -> Result<ConnId> {
        let sock = match socket2::Socket::new(socket2::Domain::for_address(peer), socket2::Type::STREAM, None) {
            Ok(s) => {
                g.acceptor.starved.ok();
                s
            }
            Err(e) if out_of_descriptors(e.raw_os_error()) => {
                // Logged once per episode; the operation fails (an RDM send with an
                // error completion, see `unreachable`).
                g.acceptor.starved.fail("connect", &e);
                return Err(if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    Error::MFile
                } else {
                    e.into()
                });
            }
            Err(e) => return Err(e.into()),
        };
        sock.set_nonblocking(true)?;
        if config().nodelay {
            sock.set_nodelay(true)?;
        }
        match sock.connect(&peer.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e.into()),
        }
        let stream: TcpStream = sock.into();
        let mut conn = Conn::new(stream, ConnState::Connecting, true, 0);
        conn.peer = Some(peer);
        conn.want_write = true;
        // Hello: our name (RDM) then the connection data (MSG).
        let name = match g.name {
            Some(n) if self.ep_type == EpType::Rdm => n.to_string().into_bytes(),
            _ => Vec::new(),
        };
        let data = param.unwrap_or(&[]);
        let mut payload = name.clone();
        payload.extend_from_slice(data);
        let hdr = Header {
            len: payload.len() as u64,
            tag: name.len() as u64,
            data: data.len() as u64,
            id: self.epoch,
            ..Header::new(OpCode::Hello)
        };
        conn.txq.push_back(TxOp::control(&hdr, payload));
        let fd = conn.fd();
        let id = self.add_conn(g, conn)?;
        self.poll.set_write_interest(fd, true)?;
        if self.ep_type == EpType::Rdm {
            g.by_name.insert(peer, id);
        }
        Ok(id)
    }

    /// Write what a connection can; a failure fails the connection.
    fn flush_conn(&self, g: &mut Inner, id: ConnId) {
        let Some(slot) = g.slots.get_mut(id.idx as usize) else { return };
        if slot.gen != id.gen {
            return;
        }
        let Some(mut conn) = slot.conn.take() else { return };
        if conn.state == ConnState::Connecting {
            slot.conn = Some(conn);
            return;
        }
        // The connection is out of its slot, so completions can go straight to `g`.
        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
        let eng = &mut g.eng;
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
        let slot = &mut g.slots[id.idx as usize];
        slot.conn = Some(conn);
        if let Err(e) = r {
            self.fail_conn(g, id, e, "write failed");
        }
    }

    fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Self::check_iov(op.iov)?;
        let id = self.conn_for(&mut g, op.addr)?;
        let g = &mut *g;
        g.eng.post_send(&g.b, id, op, flags, inject, false)?;
        self.pump(g);
        Ok(())
    }

    fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if g.b.rx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Self::check_iov(op.iov)?;
        let src = if op.addr.is_unspec() {
            FiAddr::UNSPEC
        } else if self.ep_type == EpType::Rdm {
            // Directed receive: the AV handle as given.
            op.addr
        } else {
            FiAddr::UNSPEC
        };
        let g = &mut *g;
        g.eng.post_recv(&g.b, op, flags, src)?;
        self.pump(g);
        Ok(())
    }

    // ----- progress -----

    fn progress_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // Which sockets have something (one epoll_wait for all of them); a full
        // answer may hide more, so then every connection is looked at.
        let mut ready = [0 as RawFd; 32];
        let n = self.poll.ready_now(&mut ready);
        let all = n == ready.len();
        let ready = &ready[..n];
        let listener_ready = g.listener.as_ref().is_some_and(|l| all || ready.contains(&l.as_raw_fd()));
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
            if !(all || c.staged() > 0 || c.paused || c.pr.answers.waiting() > 0 || ready.contains(&c.fd())) {
                continue;
            }
            let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
            self.progress_conn(g, id);
        }
        if g.eng.wants_transmit() {
            self.pump(g);
        }
    }

    /// Take in the connections waiting on the listener (when it is ready or its
    /// back-off ended), and drop those that did not identify themselves in time or
    /// are the oldest beyond `FI_TCP_HANDSHAKE_MAX`.
    fn accept_and_reap(&self, g: &mut Inner, listener_ready: bool, now: Instant) {
        let mut accepted: Vec<(TcpStream, SocketAddr)> = Vec::new();
        if let Some(l) = g.listener.as_ref().filter(|_| listener_ready || g.acceptor.paused()) {
            g.acceptor.accept(l, &self.poll, now, |s, peer| accepted.push((s, peer)));
        }
        let cfg = config();
        for (s, peer) in accepted {
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            if cfg.nodelay {
                let _ = s.set_nodelay(true);
            }
            let mut c = Conn::new(s, ConnState::AwaitHello, false, 0);
            c.peer = Some(peer);
            if g.handshakes.len() >= cfg.handshake_max {
                // Forget the entries of connections that identified themselves or
                // closed; if that is not enough, the oldest makes room.
                let mut hs = std::mem::take(&mut g.handshakes);
                hs.retain(|&(id, _)| Self::handshaking(g, id));
                g.handshakes = hs;
                while g.handshakes.len() >= cfg.handshake_max {
                    let Some((old, _)) = g.handshakes.pop_front() else { break };
                    if !self.read_before_dropping(g, old) {
                        g.acceptor.drops.evicted();
                    }
                }
            }
            if let Ok(id) = self.add_conn(g, c) {
                g.handshakes.push_back((id, now + cfg.handshake_timeout));
            }
        }
        while let Some(&(id, deadline)) = g.handshakes.front() {
            if !Self::handshaking(g, id) {
                g.handshakes.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            g.handshakes.pop_front();
            if !self.read_before_dropping(g, id) {
                g.acceptor.drops.timed_out();
            }
        }
        g.acceptor.drops.report(now, "rdm listener", false);
    }

    /// An unidentified connection is about to be dropped (its time is up, or it is
    /// the oldest at the cap): read what it sent first. Its hello may have been
    /// waiting in the socket all along, unread because this endpoint made no
    /// progress meanwhile (an application computing for longer than the
    /// handshake time-out); such a connection is kept. Returns whether it was
    /// kept (it identified itself), else it is dropped.
    fn read_before_dropping(&self, g: &mut Inner, id: ConnId) -> bool {
        if Self::handshaking(g, id) {
            self.progress_conn(g, id);
        }
        if Self::handshaking(g, id) {
            self.drop_unidentified(g, id);
            false
        } else {
            true
        }
    }

    /// Whether `id` is an accepted connection still waiting for its hello.
    fn handshaking(g: &mut Inner, id: ConnId) -> bool {
        Self::conn_mut(g, id).is_some_and(|c| c.state == ConnState::AwaitHello)
    }

    /// Close an accepted connection that never identified itself (it carries no
    /// operations and no name yet); counted by the caller, logged in summary.
    fn drop_unidentified(&self, g: &mut Inner, id: ConnId) {
        if !Self::handshaking(g, id) {
            return;
        }
        let slot = &mut g.slots[id.idx as usize];
        if let Some(c) = slot.conn.take() {
            self.poll.del_fd(c.fd());
        }
        slot.rx = RxState::Header;
        g.by_addr.retain(|_, c| *c != id);
        if let Some(l) = g.listener.as_ref().filter(|_| g.acceptor.paused()) {
            g.acceptor.resume(l, &self.poll);
        }
    }

    fn progress_conn(&self, g: &mut Inner, id: ConnId) {
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
    fn read_step(&self, g: &mut Inner, id: ConnId) -> std::result::Result<bool, (Error, String)> {
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
                if !conn.gather_header() {
                    return Ok(true);
                }
                conn.hdr_got = 0;
                let hb = conn.hdr_buf;
                let hdr = Header::decode(&hb, i64::MAX as u64)
                    .map_err(|e| (Error::Io, format!("protocol error from peer: {e}")))?;
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
    fn on_header(&self, g: &mut Inner, id: ConnId, hdr: Header) -> std::result::Result<(), (Error, String)> {
        let state = Self::conn_mut(g, id).map(|c| c.state).unwrap_or(ConnState::Closed);
        let control = matches!(hdr.op, OpCode::Hello | OpCode::HelloAck | OpCode::Reject);
        if !control && state != ConnState::Ready {
            return Err((Error::Io, format!("protocol error: {:?} before the connection was accepted", hdr.op)));
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
        self.pump(g);
        Ok(())
    }

    /// The AV handle of a connection's peer (resolved lazily, cached per AV version).
    fn src_of(&self, g: &mut Inner, id: ConnId) -> FiAddr {
        if self.ep_type != EpType::Rdm {
            return FiAddr::NOTAVAIL;
        }
        let Some(av) = g.b.av.clone() else { return FiAddr::NOTAVAIL };
        let v = av.version();
        let Some(c) = Self::conn_mut(g, id) else { return FiAddr::NOTAVAIL };
        if c.av_version != v {
            c.fi_addr = c.peer.and_then(|p| av.find(&Address::Sockaddr(p))).unwrap_or(FiAddr::NOTAVAIL);
            c.av_version = v;
        }
        c.fi_addr
    }

    /// Move payload bytes; `Ok(false)` when it would block.
    fn payload_step(&self, g: &mut Inner, id: ConnId) -> std::result::Result<bool, (Error, String)> {
        let idx = id.idx as usize;
        let closed = |e: Error| (e, "peer closed the connection".to_string());
        let Inner { eng, b, slots, .. } = g;
        let cx = Ctx { b, objs: &self.domain.objs };
        let slot = &mut slots[idx];
        let conn = slot.conn.as_mut().expect("payload on a live connection");
        if let RxState::Control { hdr, buf } = &mut slot.rx {
            while (buf.len() as u64) < hdr.len {
                if conn.staged() == 0 {
                    match conn.fill() {
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
            // Large remainder into memory: read straight into it.
            if remaining as usize >= STAGE / 2 {
                let mut pieces = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
                let k = eng.pieces(&mut conn.pr, &mut pieces);
                if k > 0 {
                    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; IOV_LIMIT];
                    for (o, p) in iov.iter_mut().zip(&pieces[..k]) {
                        *o = libc::iovec { iov_base: p.base as *mut libc::c_void, iov_len: p.len };
                    }
                    // SAFETY: the engine's pieces lie inside a posted receive's or a
                    // read's buffer (valid for writes under the post contract) or a
                    // buffer's reserved spare capacity, and cover at most the
                    // payload's remaining bytes.
                    match unsafe { recvv(conn.fd(), &iov[..k]) } {
                        Ok(n) => {
                            // SAFETY: recvv wrote these n bytes from the first piece on.
                            unsafe { eng.advance(&mut conn.pr, n) };
                            continue;
                        }
                        Err(Error::Again) => return Ok(false),
                        Err(e) => return Err(closed(e)),
                    }
                }
            }
            match conn.fill() {
                Ok(_) => continue,
                Err(Error::Again) => return Ok(false),
                Err(e) => return Err(closed(e)),
            }
        }
        // The payload is complete.
        slot.rx = RxState::Header;
        eng.end(cx, &mut conn.pr, id).map_err(|v| (v.err, v.why))?;
        self.pump(g);
        Ok(true)
    }

    /// Connection set-up frames.
    fn on_control(
        &self,
        g: &mut Inner,
        id: ConnId,
        hdr: Header,
        buf: Vec<u8>,
    ) -> std::result::Result<(), (Error, String)> {
        let state = Self::conn_mut(g, id).map(|c| c.state).unwrap_or(ConnState::Closed);
        match (hdr.op, state) {
            (OpCode::Hello, ConnState::AwaitHello) if self.ep_type == EpType::Rdm => {
                let name = fabric_util::wire::Hello::decode(&hdr, &buf)
                    .ok()
                    .and_then(|h| h.name_addr())
                    .ok_or((Error::Io, "protocol error: hello without a valid name".to_string()))?;
                self.on_rdm_hello(g, id, name, hdr.id)
            }
            (OpCode::HelloAck, ConnState::HelloSent) => {
                let c = Self::conn_mut(g, id).expect("exists");
                c.state = ConnState::Ready;
                c.peer_epoch = hdr.id;
                if self.ep_type == EpType::Msg {
                    if let Some(eq) = &g.b.eq {
                        eq.push(EqEvent::Connected { fid: self.fid, data: buf });
                    }
                }
                self.flush_conn(g, id);
                Ok(())
            }
            (OpCode::Reject, ConnState::HelloSent) => {
                if self.ep_type == EpType::Msg {
                    if let Some(eq) = &g.b.eq {
                        eq.push_err(EqErrEntry { fid: self.fid, err: Error::ConnRefused, prov_errno: 0, data: buf });
                    }
                    let c = Self::conn_mut(g, id).expect("exists");
                    c.state = ConnState::Closed;
                    let ops: Vec<TxOp> = c.txq.drain(..).collect();
                    self.poll.del_fd(c.fd());
                    let mut conn = g.slots[id.idx as usize].conn.take().expect("exists");
                    Self::fail_frames(g, ops, id, Error::ConnRefused);
                    let cx = Ctx { b: &g.b, objs: &self.domain.objs };
                    g.eng.peer_lost(cx, &mut conn.pr, id, Error::ConnRefused);
                    return Ok(());
                }
                // RDM: we lost a simultaneous connect. Our queued operations move to
                // the peer's connection, now or when its hello arrives.
                let c = Self::conn_mut(g, id).expect("exists");
                c.state = ConnState::Lost;
                let peer = c.peer;
                let winner = peer.and_then(|p| g.by_name.get(&p).copied()).filter(|w| *w != id);
                fi_log!(
                    Level::Debug,
                    NAME,
                    "ep_ctrl",
                    "{id:?} to {peer:?} lost a simultaneous connect; the winner: {winner:?}"
                );
                match (winner, peer) {
                    (Some(w), _) => self.adopt_ops(g, id, w),
                    // The peer's connection has not arrived yet: the operations wait
                    // for it (the peer closes this one; its close must not fail them).
                    (None, Some(p)) => self.park(g, id, p),
                    (None, None) => self.fail_conn(g, id, Error::ConnRefused, "refused"),
                }
                Ok(())
            }
            (op, st) => Err((Error::Io, format!("protocol error: {op:?} in state {st:?}"))),
        }
    }

    fn on_rdm_hello(
        &self,
        g: &mut Inner,
        id: ConnId,
        name: SocketAddr,
        epoch: u64,
    ) -> std::result::Result<(), (Error, String)> {
        let ours = g.name.ok_or((Error::OpBadState, "endpoint has no name".to_string()))?;
        if name == ours {
            // Our own connection to ourselves: the outgoing side carries the sends
            // (and stays the one `by_name` knows); this incoming side the receives.
            let c = Self::conn_mut(g, id).expect("exists");
            c.peer = Some(name);
            c.peer_epoch = epoch;
            c.state = ConnState::Ready;
            c.av_version = u64::MAX;
            let ack = Header { id: self.epoch, ..Header::new(OpCode::HelloAck) };
            c.txq.push_front(TxOp::control(&ack, Vec::new()));
            self.flush_conn(g, id);
            return Ok(());
        }
        let existing = g.by_name.get(&name).copied().filter(|e| *e != id && Self::conn_mut(g, *e).is_some());
        let accept = match existing {
            None => true,
            Some(old) => {
                let c = Self::conn_mut(g, old).expect("checked");
                match c.state {
                    ConnState::Ready | ConnState::AwaitHello if c.peer_epoch != 0 && c.peer_epoch != epoch => {
                        // A restarted peer: its old connection is gone.
                        self.fail_conn(g, old, Error::ConnReset, "peer restarted");
                        true
                    }
                    ConnState::Ready => false,
                    ConnState::Connecting | ConnState::HelloSent | ConnState::Lost => {
                        // Simultaneous connect: the smaller name's connection wins.
                        ours > name
                    }
                    _ => true,
                }
            }
        };
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "hello from {name} (epoch {epoch:#x}) on {id:?}: existing {existing:?} {:?}: {}",
            existing.and_then(|e| Self::conn_mut(g, e).map(|c| c.state)),
            if accept { "accepted" } else { "rejected" }
        );
        if !accept {
            let rej = Header::new(OpCode::Reject);
            let c = Self::conn_mut(g, id).expect("exists");
            c.state = ConnState::Ready; // only to let the reject out; closed below
            c.txq.push_back(TxOp::control(&rej, Vec::new()));
            self.flush_conn(g, id);
            // The peer closes it on the reject; we drop it now.
            if let Some(c) = Self::conn_mut(g, id) {
                self.poll.del_fd(c.fd());
            }
            g.slots[id.idx as usize].conn = None;
            return Ok(());
        }
        {
            let c = Self::conn_mut(g, id).expect("exists");
            c.peer = Some(name);
            c.peer_epoch = epoch;
            c.state = ConnState::Ready;
            c.av_version = u64::MAX;
            let ack = Header { id: self.epoch, ..Header::new(OpCode::HelloAck) };
            c.txq.push_front(TxOp::control(&ack, Vec::new()));
        }
        g.by_name.insert(name, id);
        g.by_addr.retain(|_, c| Some(*c) != existing);
        self.unpark(g, name, id);
        if let Some(old) = existing {
            self.adopt_ops(g, old, id);
        }
        self.flush_conn(g, id);
        Ok(())
    }

    /// Close a connection that lost a simultaneous connect before the winner
    /// arrived, keeping its operations ([`Parked`]) for the winner.
    fn park(&self, g: &mut Inner, id: ConnId, peer: SocketAddr) {
        let Some(c) = Self::conn_mut(g, id) else { return };
        let ops: Vec<TxOp> = c
            .txq
            .drain(..)
            .filter(|op| op.movable())
            .map(|mut op| {
                // The loser never got past its hello: nothing of these was sent.
                op.sent = 0;
                op
            })
            .collect();
        self.poll.del_fd(c.fd());
        g.slots[id.idx as usize].conn = None;
        g.slots[id.idx as usize].rx = RxState::Header;
        if g.by_name.get(&peer) == Some(&id) {
            g.by_name.remove(&peer);
        }
        g.by_addr.retain(|_, c| *c != id);
        let deadline = Instant::now() + config().handshake_timeout;
        g.parked.push(Parked { peer, from: id, ops, deadline });
    }

    /// The peer's connection `to` is accepted: the operations parked for it
    /// (oldest first) move to it, and what named their old connections follows.
    fn unpark(&self, g: &mut Inner, peer: SocketAddr, to: ConnId) {
        let mut i = 0;
        while i < g.parked.len() {
            if g.parked[i].peer != peer {
                i += 1;
                continue;
            }
            let p = g.parked.remove(i);
            g.eng.rekey(p.from, to);
            match Self::conn_mut(g, to) {
                Some(w) => w.txq.extend(p.ops),
                None => Self::fail_frames(g, p.ops, to, Error::ConnReset),
            }
        }
    }

    /// Parked operations whose peer never connected fail (all of them when the
    /// endpoint closes: `now` None).
    fn expire_parked(&self, g: &mut Inner, now: Option<Instant>, err: Error) {
        let mut i = 0;
        while i < g.parked.len() {
            if now.is_some_and(|t| g.parked[i].deadline > t) {
                i += 1;
                continue;
            }
            let p = g.parked.remove(i);
            fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "{} operations for {} failed: the peer did not connect after refusing our connection",
                p.ops.len(),
                p.peer
            );
            Self::fail_frames(g, p.ops, p.from, err);
            // Its operations waiting for answers on the closed connection fail.
            let cx = Ctx { b: &g.b, objs: &self.domain.objs };
            g.eng.peer_lost(cx, &mut PeerRx::new(), p.from, err);
        }
    }

    /// Move the user frames queued on a losing connection to the winner, in order,
    /// and drop the loser.
    fn adopt_ops(&self, g: &mut Inner, from: ConnId, to: ConnId) {
        let Some(c) = Self::conn_mut(g, from) else { return };
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "{from:?} ({:?}, {:?}) gives its operations to {to:?} and closes",
            c.state,
            c.peer
        );
        let ops: Vec<TxOp> = c.txq.drain(..).filter(|op| op.movable()).collect();
        let fd = c.fd();
        self.poll.del_fd(fd);
        g.slots[from.idx as usize].conn = None;
        g.slots[from.idx as usize].rx = RxState::Header;
        g.eng.rekey(from, to);
        match Self::conn_mut(g, to) {
            Some(w) => {
                for mut op in ops {
                    // The loser never got past its hello: nothing of these was sent.
                    op.sent = 0;
                    w.txq.push_back(op);
                }
            }
            None => Self::fail_frames(g, ops, to, Error::ConnReset),
        }
    }

    /// A posted operation (not an inject) whose peer cannot be reached because no
    /// socket can be made (out of descriptors) completes with an error, so that it
    /// neither hangs nor leaves the application retrying blindly; the next
    /// operation to that peer tries again.
    fn unreachable(&self, r: Result<()>, context: u64, flags: Caps, len: usize) -> Result<()> {
        match r {
            Err(Error::MFile) => {
                let mut e = CqEntry::new(context, flags);
                e.len = len;
                self.lock().b.tx_err(e, Error::MFile);
                Ok(())
            }
            r => r,
        }
    }

    /// `atomic_common`, a peer out of reach reported as [`TcpEp::unreachable`]
    /// does unless `flags` are [`OpFlags::silent`] (then it is the call's error).
    fn atomic_reported(&self, op: &fabric_core::prov::AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        let r = self.atomic_common(op, inject, flags);
        if flags.silent() {
            return r;
        }
        let dir = if op.kind == fabric_core::AtomicKind::Plain { Caps::WRITE } else { Caps::READ };
        self.unreachable(r, op.context, Caps::ATOMIC | dir, op.rma.len)
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // Flush what is queued: an orderly shutdown frame lets a MSG peer know.
        for i in 0..g.slots.len() {
            let gen = g.slots[i].gen;
            let id = ConnId { idx: i as u32, gen };
            if let Some(c) = Self::conn_mut(g, id) {
                if self.ep_type == EpType::Msg && c.state == ConnState::Ready {
                    let sh = Header::new(OpCode::Shutdown);
                    c.txq.push_back(TxOp::control(&sh, Vec::new()));
                    let _ = c.flush(|_, _| {});
                }
            }
        }
        let eq = g.b.eq.take();
        for i in 0..g.slots.len() {
            let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
            self.fail_conn(g, id, Error::Canceled, "endpoint closed");
        }
        g.b.eq = eq;
        self.expire_parked(g, None, Error::Canceled);
        g.eng.close(&g.b, Error::Canceled);
        g.acceptor.drops.report(Instant::now(), "rdm listener", true);
        g.handshakes.clear();
        g.listener = None;
        g.closed = true;
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

impl EndpointOps for TcpEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = self.domain.objs.find_cq(cq.fid()).ok_or(Error::Domain)?;
        let mut g = self.lock();
        g.b.set_cq(&ucq, flags)?;
        drop(g);
        ucq.bind(self.weak_progress())
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        let c = self.domain.objs.find_cntr(cntr.fid()).ok_or(Error::Domain)?;
        self.lock().b.set_cntr(&c, flags);
        c.bind(self.weak_progress())
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        let e = self.domain.fabric().find_eq(eq.fid()).ok_or(Error::Domain)?;
        self.lock().b.eq = Some(e.clone());
        e.bind(self.weak_progress())
    }

    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        if self.ep_type != EpType::Rdm {
            return Err(Error::Inval);
        }
        let a = self.domain.objs.find_av(av.fid()).ok_or(Error::Domain)?;
        self.lock().b.av = Some(a);
        Ok(())
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Ok(());
        }
        g.b.check_enable(self.ep_type == EpType::Rdm)?;
        match self.ep_type {
            EpType::Rdm => {
                let want = g.name.unwrap_or_else(|| "127.0.0.1:0".parse().expect("literal"));
                let l = crate::pep::bind_listener(want)?;
                g.name = Some(l.local_addr()?);
                self.poll.add_fd(l.as_raw_fd())?;
                g.listener = Some(l);
            }
            _ => {
                if g.b.eq.is_none() {
                    return Err(Error::NoEq);
                }
            }
        }
        g.enabled = true;
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        let g = self.lock();
        if self.ep_type == EpType::Msg {
            if let Some(c) = g.slots.iter().find_map(|s| s.conn.as_ref()) {
                return Ok(Address::Sockaddr(c.sock.local_addr()?));
            }
        }
        g.name.map(Address::Sockaddr).ok_or(Error::OpBadState)
    }

    fn setname(&self, addr: &Address) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Err(Error::OpBadState);
        }
        g.name = Some(addr.sockaddr().ok_or(Error::Inval)?);
        Ok(())
    }

    fn getpeer(&self) -> Result<Address> {
        let g = self.lock();
        g.slots.iter().find_map(|s| s.conn.as_ref()).and_then(|c| c.peer).map(Address::Sockaddr).ok_or(Error::NotConn)
    }

    fn connect(&self, addr: &Address, param: &[u8]) -> Result<()> {
        if self.ep_type != EpType::Msg {
            return Err(Error::OpNotSupp);
        }
        if param.len() > crate::pep::CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let peer = addr.sockaddr().ok_or(Error::Inval)?;
        let mut g = self.lock();
        if !g.enabled {
            return Err(Error::OpBadState);
        }
        if g.slots.iter().any(|s| s.conn.is_some()) {
            return Err(Error::IsConn);
        }
        g.connect_param = param.to_vec();
        let id = self.start_connect(&mut g, peer, Some(param))?;
        let _ = id;
        Ok(())
    }

    fn accept(&self, param: &[u8]) -> Result<()> {
        if param.len() > crate::pep::CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        if !g.enabled {
            return Err(Error::OpBadState);
        }
        let i = g
            .slots
            .iter()
            .position(|s| s.conn.as_ref().is_some_and(|c| c.state == ConnState::AwaitAccept))
            .ok_or(Error::OpBadState)?;
        let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
        {
            let c = Self::conn_mut(&mut g, id).expect("found");
            c.state = ConnState::Ready;
            let ack = Header { len: param.len() as u64, id: self.epoch, ..Header::new(OpCode::HelloAck) };
            c.txq.push_front(TxOp::control(&ack, param.to_vec()));
        }
        self.flush_conn(&mut g, id);
        if let Some(eq) = &g.b.eq {
            eq.push(EqEvent::Connected { fid: self.fid, data: Vec::new() });
        }
        Ok(())
    }

    fn shutdown(&self) -> Result<()> {
        let mut g = self.lock();
        let Some(i) = g.slots.iter().position(|s| s.conn.is_some()) else { return Err(Error::NotConn) };
        let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
        if let Some(c) = Self::conn_mut(&mut g, id) {
            let sh = Header::new(OpCode::Shutdown);
            c.txq.push_back(TxOp::control(&sh, Vec::new()));
        }
        self.flush_conn(&mut g, id);
        self.fail_conn(&mut g, id, Error::Shutdown, "local shutdown");
        Ok(())
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let r = self.send_common(op, flags, None);
        let cq_flags = Caps::SEND | msg_flags(flags.contains(OpFlags::TAGGED));
        self.unreachable(r, op.context, cq_flags, IoVec::total(op.iov))
    }

    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.recv_common(op, flags)
    }

    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > config().inject_size {
            return Err(Error::MsgSize);
        }
        self.send_common(op, flags, Some(data))
    }

    unsafe fn post_write(&self, op: &fabric_core::prov::RmaOp<'_>, flags: OpFlags) -> Result<()> {
        let r = self.rma_common(op, flags, false, None);
        self.unreachable(r, op.context, Caps::RMA | Caps::WRITE, IoVec::total(op.iov))
    }

    unsafe fn post_read(&self, op: &fabric_core::prov::RmaOp<'_>, flags: OpFlags) -> Result<()> {
        let r = self.rma_common(op, flags, true, None);
        self.unreachable(r, op.context, Caps::RMA | Caps::READ, IoVec::total(op.iov))
    }

    fn inject_write(&self, data: &[u8], op: &fabric_core::prov::RmaOp<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > config().inject_size {
            return Err(Error::MsgSize);
        }
        self.rma_common(op, flags, false, Some(data))
    }

    unsafe fn post_atomic(&self, op: &fabric_core::prov::AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_reported(op, false, flags)
    }

    unsafe fn inject_atomic(&self, op: &fabric_core::prov::AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_reported(op, true, flags)
    }

    fn cancel(&self, user_context: u64) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        if g.eng.cancel(&g.b, user_context) {
            Ok(())
        } else {
            Err(Error::NoEnt)
        }
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.lock().eng.rx.set_min_multi_recv(bytes);
        Ok(())
    }

    fn set_rx_cq_data(&self, takes_recv: bool) -> Result<()> {
        self.lock().eng.rx.set_rma_data_takes_recv(takes_recv);
        Ok(())
    }

    fn close(&self) -> Result<()> {
        let mut g = self.lock();
        self.close_locked(&mut g);
        Ok(())
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        let mut g = self.lock();
        self.close_locked(&mut g);
    }
}

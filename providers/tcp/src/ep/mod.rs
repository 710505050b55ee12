//! Active endpoints (MSG and RDM) of the tcp provider.
//!
//! One spin lock guards an endpoint's state (nothing under it blocks: sockets are
//! non-blocking, and no caller code runs under it); progress (driven by reads
//! and waits on a bound queue) takes it, accepts and completes connections, reads frames and
//! hands them to the RDM engine (`fabric_util::rdm`: matching, rendezvous, the
//! RMA and atomic target, operations in flight), and writes the frames the engine
//! queues. The endpoint's files follow libfabric's providers, one per operation
//! class: this one (state, construction, the `EndpointOps` tail), `msg.rs`,
//! `rma.rs`, `atomic.rs`, `progress.rs`, and `cm.rs` (connections).
//!
//! RDM connections are made on demand: the initiator sends `Hello` (its listening
//! name and a random epoch) and queues data until `HelloAck`. When both sides
//! connect at once, the connection initiated by the endpoint with the smaller name
//! wins and the other is refused with `Reject`; a hello with a new epoch from a
//! known name is a restarted peer, whose old connection fails.

use crate::accept::{out_of_descriptors, Acceptor};
use crate::attr::IOV_LIMIT;
use crate::conn::{recvv, Conn, ConnState, TxOp, STAGE};
use crate::domain::TcpDomain;
use crate::{config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op};
use fabric_core::sync::{SpinGuard, SpinLock};
use fabric_core::{
    fi_log, Address, BindFlags, Caps, CqEntry, EpType, EqErrEntry, EqEvent, Error, FiAddr, Info, OpFlags, Result,
};
use fabric_util::bind::Bindings;
use fabric_util::progress::{Progress, Waiter};
use fabric_util::rdm::{Begin, Ctx, Engine, PeerRx};
use fabric_util::rx::msg_flags;
use fabric_util::scaffold;
use fabric_util::wire::{Header, OpCode};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Weak};
use std::time::Instant;

mod atomic;
mod cm;
mod msg;
mod progress;
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

impl std::fmt::Display for ConnId {
    /// `connection #3.1`: slot 3, its generation 1.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection #{}.{}", self.idx, self.gen)
    }
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

/// Where an endpoint is in its life: one compare on every call tells whether
/// it takes operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    /// Opened, not enabled yet.
    Idle,
    /// Enabled: it takes operations.
    Enabled,
    /// Closed (whether or not it was enabled).
    Closed,
}

/// The last destination a send resolved: a hit is one compare of the handle
/// (then the AV's version and the connection's generation).
#[derive(Debug, Clone, Copy)]
struct LastDest {
    /// The AV handle ([`LastDest::NONE`]'s is never looked up: it is
    /// `FI_ADDR_UNSPEC`, which no send resolves).
    addr: FiAddr,
    /// Its connection.
    id: ConnId,
}

impl LastDest {
    /// No destination: its connection names no slot.
    const NONE: LastDest = LastDest { addr: FiAddr::UNSPEC, id: ConnId { idx: u32::MAX, gen: 0 } };
}

struct Inner {
    life: Life,
    b: Bindings,
    /// Connection slots (one for MSG).
    slots: Vec<Slot>,
    /// RDM: connection to a peer by its listening name.
    by_name: HashMap<SocketAddr, ConnId>,
    /// RDM: cache of AV handle to connection, valid for `cache_version`.
    by_addr: HashMap<FiAddr, ConnId>,
    /// RDM: the last lookup of `by_addr`, valid for `cache_version` while its
    /// connection lives.
    last_addr: LastDest,
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
    /// Progress calls until the one-connection pass looks whether the full pass
    /// has work (the listener ready, handshakes waiting, operations parked,
    /// accepting backed off): the call that brings it to 0 looks. Reset to
    /// [`SOLO_FULL_EVERY`] by that look, and to 1 by a full pass that leaves
    /// work of its own, so that the next call looks (one decrement and test on
    /// the hot path either way).
    solo_left: u32,
}

/// How often (in progress calls) an endpoint with one quiet connection takes the
/// full pass (`epoll_wait`, the listener) instead of reading that connection
/// alone: a connection from a new peer waits at most this many calls (a few tens
/// of microseconds of polling; the look costs an `epoll_wait`, about 60
/// instructions of ours, so every 64th call adds one to a round trip's ~2000).
const SOLO_FULL_EVERY: u32 = 64;

/// An active endpoint of the tcp provider.
pub(crate) struct TcpEp {
    fid: u64,
    ep_type: EpType,
    domain: Arc<TcpDomain>,
    epoch: u64,
    poll: Waiter,
    inner: SpinLock<Inner>,
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
            life: Life::Idle,
            b: Bindings::default(),
            slots: Vec::new(),
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            last_addr: LastDest::NONE,
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
            }),
            parked: Vec::new(),
            connect_param: Vec::new(),
            solo_left: 1,
        };
        // A passive side's endpoint adopts the pending connection from its handle.
        if let Some(h) = &info.handle {
            let pending = h.0.clone().downcast::<crate::pep::Pending>().map_err(|_| Error::Inval)?;
            let (sock, peer) = pending.take().ok_or(Error::Inval)?;
            let mut c = Conn::new(sock, ConnState::AwaitAccept, false, 0)?;
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
            inner: SpinLock::new(inner),
            me: me.clone(),
        }))
    }

    #[inline(always)]
    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
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
        Self::slot_conn(&mut g.slots, id)
    }

    /// [`conn_mut`](Self::conn_mut) over the slots alone (for a caller that
    /// borrows other fields of the endpoint's state beside them).
    #[inline(always)]
    fn slot_conn(slots: &mut [Slot], id: ConnId) -> Option<&mut Conn> {
        let s = slots.get_mut(id.idx as usize)?;
        if s.gen != id.gen {
            return None;
        }
        s.conn.as_mut()
    }

    fn check_iov(iov: &[IoVec]) -> Result<()> {
        if iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        Ok(())
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

    fn close_locked(&self, g: &mut Inner) {
        if g.life == Life::Closed {
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
        g.life = Life::Closed;
    }
}

fabric_util::bound!(TcpEp);

impl EndpointOps for TcpEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        scaffold::bind_cq(self, cq, flags).map(drop)
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        scaffold::bind_cntr(self, cntr, flags).map(drop)
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        scaffold::bind_eq(self, eq)
    }

    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        if self.ep_type != EpType::Rdm {
            return Err(Error::Inval);
        }
        scaffold::bind_av(self, av)
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        match g.life {
            Life::Idle => {}
            Life::Enabled => return Ok(()),
            Life::Closed => return Err(Error::OpBadState),
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
        g.life = Life::Enabled;
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
        if g.life != Life::Idle {
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
        if g.life != Life::Enabled {
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
        if g.life != Life::Enabled {
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
        if r.is_ok() {
            return r;
        }
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

    fabric_util::endpoint_tail!(eng.rx);
}

fabric_util::close_on_drop!(TcpEp);

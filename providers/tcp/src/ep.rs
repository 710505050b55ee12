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

use crate::attr::IOV_LIMIT;
use crate::conn::{recvv, Conn, ConnState, TxKind, TxOp, STAGE};
use crate::domain::TcpDomain;
use crate::{config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op};
use fabric_core::{
    fi_log, Address, BindFlags, Caps, CqEntry, CqErrEntry, EpType, EqErrEntry, EqEvent, Error, FiAddr, Info, OpFlags,
    Result,
};
use fabric_util::av::UtilAv;
use fabric_util::cntr::UtilCntr;
use fabric_util::cq::UtilCq;
use fabric_util::eq::UtilEq;
use fabric_util::matcher::{Matcher, MsgSpec, PostedId, RecvSpec};
use fabric_util::progress::{Progress, Waiter};
use fabric_util::rndv::{RndvRecv, RndvSend};
use fabric_util::wire::{HdrFlags, Header, OpCode};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

mod rma;
use rma::RmaPending;

/// Buffers of unexpected eager messages kept for reuse.
const UNEXP_POOL: usize = 32;
/// The largest eager message buffered while unexpected, whatever the local eager
/// limit (a peer may be configured with a larger one).
const UNEXP_EAGER_LIMIT: usize = 64 << 20;

/// A reference to a connection slot, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnId {
    idx: u32,
    gen: u32,
}

/// A posted receive.
#[derive(Debug)]
pub(crate) struct PostedRecv {
    context: u64,
    iov: [IoVec; IOV_LIMIT],
    niov: usize,
    cap: usize,
    tagged: bool,
    /// Index into `Inner::multis` for a multi-receive buffer.
    multi: Option<usize>,
}

/// State of a multi-receive buffer while it is posted.
#[derive(Debug)]
struct Multi {
    context: u64,
    base: *mut u8,
    cap: usize,
    /// Bytes handed out to messages so far.
    off: usize,
    /// Messages placed in it whose data is still arriving.
    inflight: usize,
    /// No longer matched: released once `inflight` drops to zero.
    released: bool,
    /// Its entry on the posted queue, while it is there.
    pid: Option<PostedId>,
}

// SAFETY: `base` points into a buffer the application handed over under
// post_recv's contract; it is only dereferenced under the endpoint's lock.
unsafe impl Send for Multi {}

/// An unexpected message.
#[derive(Debug)]
pub(crate) struct Unexp {
    body: UnexpBody,
    len: u64,
    data: Option<u64>,
    tag: u64,
    /// The remote CQ data of an RMA write, not a message.
    rma: bool,
}

#[derive(Debug)]
enum UnexpBody {
    Eager(Vec<u8>),
    Rts { conn: ConnId, id: u64 },
}

/// Where a message's payload goes.
enum Target {
    /// A posted receive taken off the queue.
    Single(PostedRecv),
    /// A slice of a multi-receive buffer.
    Multi { idx: usize, off: usize, cap: usize },
}

/// The receive side of a connection. (One per connection and long-lived, so the
/// size of the payload variant does not matter.)
#[allow(clippy::large_enum_variant)]
enum RxState {
    /// Gathering a header.
    Header,
    /// Reading a payload.
    Payload { hdr: Header, dest: RxDest, off: u64 },
}

enum RxDest {
    /// Into a receive, then complete it.
    Recv { target: Target, src: FiAddr },
    /// Into a new unexpected buffer.
    Unexpected { buf: Vec<u8>, src: FiAddr },
    /// Connection control payload.
    Control { buf: Vec<u8> },
    /// A write or atomic request's payload, staged before it reaches the region.
    RmaReq { buf: Vec<u8> },
    /// An answer's payload, into the local memory of the read (or fetch) `id`.
    RmaData { id: u64, rec: PostedRecv },
}

/// A large message announced to a peer, waiting for its answer (in `RndvSend`).
struct RndvMsg {
    context: u64,
    flags: Caps,
    len: usize,
    /// The header of the request, reused for the data frame.
    hdr: Header,
    iov: [IoVec; IOV_LIMIT],
    niov: usize,
}

/// A large message cleared to send, waiting for its data (in `RndvRecv`).
struct RxWait {
    hdr: Header,
    target: Target,
    src: FiAddr,
}

struct Slot {
    conn: Option<Conn>,
    rx: RxState,
    gen: u32,
}

/// What the endpoint is bound to.
#[derive(Default)]
struct Bindings {
    tx_cq: Option<Arc<UtilCq>>,
    rx_cq: Option<Arc<UtilCq>>,
    tx_cntr: Option<Arc<UtilCntr>>,
    rx_cntr: Option<Arc<UtilCntr>>,
    eq: Option<Arc<UtilEq>>,
    av: Option<Arc<UtilAv>>,
    /// Counts remote writes (and atomics) into our regions (`FI_RMA_EVENT`).
    rma_write_cntr: Option<Arc<UtilCntr>>,
    /// Counts remote reads of our regions.
    rma_read_cntr: Option<Arc<UtilCntr>>,
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
    matcher: Matcher<PostedRecv, Unexp>,
    multis: Vec<Option<Multi>>,
    /// Large messages we announced, waiting for the receiver's answer.
    rndv_tx: RndvSend<ConnId, RndvMsg>,
    /// Large messages we cleared, waiting for their data.
    rndv_rx: RndvRecv<ConnId, RxWait>,
    /// One-sided operations we started, waiting for their answers.
    rma_pending: Vec<RmaPending>,
    /// Next request id of a one-sided operation.
    next_rma: u64,
    /// Operations sent to us as several requests, in progress: (connection,
    /// request id, refused so far).
    rma_ops: Vec<(ConnId, u64, bool)>,
    min_multi_recv: usize,
    /// Recycled inject buffers.
    inject_pool: Vec<Vec<u8>>,
    /// Recycled buffers of unexpected eager messages (at most `UNEXP_POOL`, each no
    /// larger than the eager limit), so buffering them allocates nothing once warm.
    unexp_pool: Vec<Vec<u8>>,
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

fn rand_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let r = unsafe { libc::getrandom(v.as_mut_ptr() as *mut libc::c_void, 8, 0) };
    if r != 8 {
        // Fall back to time and address entropy; epochs only need to differ.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        return (t as u64) ^ ((&v as *const _ as u64) << 16) ^ std::process::id() as u64;
    }
    u64::from_le_bytes(v)
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
            matcher: Matcher::with_capacity(256, 256),
            multis: Vec::new(),
            rndv_tx: RndvSend::new(),
            rndv_rx: RndvRecv::new(),
            rma_pending: Vec::new(),
            next_rma: 1,
            rma_ops: Vec::new(),
            min_multi_recv: 0,
            inject_pool: Vec::new(),
            unexp_pool: Vec::new(),
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
            epoch: rand_u64(),
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

    // ----- completions -----

    fn tx_done(g: &Inner, e: CqEntry) {
        if let Some(cq) = &g.b.tx_cq {
            cq.push(e);
        }
        if let Some(c) = &g.b.tx_cntr {
            c.inc();
        }
    }

    fn tx_err(g: &Inner, e: CqEntry, err: Error) {
        if let Some(cq) = &g.b.tx_cq {
            cq.push_err(CqErrEntry { entry: e, olen: 0, err, prov_errno: 0 });
        }
        if let Some(c) = &g.b.tx_cntr {
            c.inc_err();
        }
    }

    fn rx_done(g: &Inner, e: CqEntry) {
        if let Some(cq) = &g.b.rx_cq {
            cq.push(e);
        }
        if let Some(c) = &g.b.rx_cntr {
            c.inc();
        }
    }

    fn rx_err(g: &Inner, e: CqEntry, olen: usize, err: Error) {
        if let Some(cq) = &g.b.rx_cq {
            cq.push_err(CqErrEntry { entry: e, olen, err, prov_errno: 0 });
        }
        if let Some(c) = &g.b.rx_cntr {
            c.inc_err();
        }
    }

    fn msg_flags(tagged: bool) -> Caps {
        if tagged {
            Caps::TAGGED
        } else {
            Caps::MSG
        }
    }

    /// A frame was fully written.
    fn frame_written(g: &mut Inner, op: TxOp) {
        match op.kind {
            TxKind::Send { context, flags, len } | TxKind::Data { context, flags, len } => {
                let mut e = CqEntry::new(context, flags);
                e.len = len;
                Self::tx_done(g, e);
            }
            TxKind::Request => {}
            TxKind::Inject(mut v) => {
                if g.inject_pool.len() < 64 {
                    v.clear();
                    g.inject_pool.push(v);
                }
            }
            TxKind::Control(_) => {}
        }
    }

    /// Fail user frames that will never be sent, and the large messages announced
    /// on connection `conn` (their request frames are among `ops` or were sent).
    fn fail_sends(g: &mut Inner, ops: impl IntoIterator<Item = TxOp>, conn: ConnId, err: Error) {
        for op in ops {
            if let TxKind::Send { context, flags, len } | TxKind::Data { context, flags, len } = op.kind {
                let mut e = CqEntry::new(context, flags);
                e.len = len;
                Self::tx_err(g, e, err);
            }
        }
        for m in g.rndv_tx.drain_peer(conn) {
            let mut e = CqEntry::new(m.context, m.flags);
            e.len = m.len;
            Self::tx_err(g, e, err);
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
        Self::fail_sends(g, conn.txq.drain(..), id, err);
        // A payload being read into a receive: that receive fails.
        if let RxState::Payload { dest: RxDest::Recv { target, src }, hdr, .. } = rx {
            self.fail_target(g, target, &hdr, src, err);
        }
        self.fail_rma(g, id, err);
        g.rma_ops.retain(|t| t.0 != id);
        // Rendezvous receives waiting on this connection fail.
        for w in g.rndv_rx.drain_peer(id) {
            self.fail_target(g, w.target, &w.hdr, w.src, err);
        }
        if let Some(peer) = conn.peer {
            if g.by_name.get(&peer) == Some(&id) {
                g.by_name.remove(&peer);
            }
        }
        g.by_addr.retain(|_, c| *c != id);
        if self.ep_type == EpType::Msg {
            // A MSG endpoint has only this connection: its receives fail too, and
            // the application hears of it on the EQ.
            for (_, rec) in g.matcher.drain_posted() {
                if let Some(mi) = rec.multi {
                    self.release_multi(g, mi, err);
                    continue;
                }
                let e = CqEntry::new(rec.context, Caps::RECV | Self::msg_flags(rec.tagged));
                Self::rx_err(g, e, 0, err);
            }
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

    fn fail_target(&self, g: &mut Inner, target: Target, hdr: &Header, src: FiAddr, err: Error) {
        let tagged = hdr.flags.has(HdrFlags::TAGGED);
        match target {
            Target::Single(rec) => {
                let mut e = CqEntry::new(rec.context, Caps::RECV | Self::msg_flags(tagged));
                e.tag = hdr.tag;
                e.src = src;
                Self::rx_err(g, e, 0, err);
            }
            Target::Multi { idx, .. } => {
                self.multi_finish(g, idx, None, err);
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
        let sock = socket2::Socket::new(socket2::Domain::for_address(peer), socket2::Type::STREAM, None)?;
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
        conn.txq.push_back(TxOp::owned(hdr.encode(), payload, false));
        let fd = conn.fd();
        let id = self.add_conn(g, conn)?;
        self.poll.set_write_interest(fd, true)?;
        if self.ep_type == EpType::Rdm {
            g.by_name.insert(peer, id);
        }
        Ok(id)
    }

    fn queue(&self, g: &mut Inner, id: ConnId, op: TxOp) -> Result<()> {
        let conn = Self::conn_mut(g, id).ok_or(Error::NotConn)?;
        conn.txq.push_back(op);
        self.flush_conn(g, id);
        Ok(())
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
        let r = conn.flush(|_, op| Self::frame_written(g, op));
        let pending =
            conn.txq.front().is_some_and(|op| conn.state == ConnState::Ready || matches!(op.kind, TxKind::Control(_)));
        if pending != conn.want_write {
            conn.want_write = pending;
            let _ = self.poll.set_write_interest(conn.fd(), pending);
        }
        let slot = &mut g.slots[id.idx as usize];
        slot.conn = Some(conn);
        if let Err(e) = r {
            self.fail_conn(g, id, e, "write failed");
        }
    }

    fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        if g.closed {
            return Err(Error::OpBadState);
        }
        if !g.enabled {
            return Err(Error::OpBadState);
        }
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Self::check_iov(op.iov)?;
        let tagged = flags.contains(OpFlags::TAGGED);
        let len = match inject {
            Some(d) => d.len(),
            None => IoVec::total(op.iov),
        };
        let id = self.conn_for(&mut g, op.addr)?;
        let mut hflags = 0;
        if tagged {
            hflags |= HdrFlags::TAGGED;
        }
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            hflags |= HdrFlags::CQ_DATA;
        }
        let cq_flags = Caps::SEND | Self::msg_flags(tagged);
        let mut hdr =
            Header { flags: HdrFlags(hflags), len: len as u64, tag: op.tag, data: op.data, id: 0, op: OpCode::Msg };
        let txop = if let Some(d) = inject {
            let mut v = g.inject_pool.pop().unwrap_or_default();
            v.extend_from_slice(d);
            TxOp::owned(hdr.encode(), v, true)
        } else if len <= config().eager_max {
            TxOp::user(hdr.encode(), op.iov, true, TxKind::Send { context: op.context, flags: cq_flags, len })
        } else {
            // Rendezvous: announce it; the data goes once the receiver clears it.
            let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
            iov[..op.iov.len()].copy_from_slice(op.iov);
            hdr.op = OpCode::Rts;
            let m = RndvMsg { context: op.context, flags: cq_flags, len, hdr, iov, niov: op.iov.len() };
            hdr.id = g.rndv_tx.announce(id, m);
            TxOp::user(hdr.encode(), &[], false, TxKind::Request)
        };
        self.queue(&mut g, id, txop)
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
        let tagged = flags.contains(OpFlags::TAGGED);
        let src = if op.addr.is_unspec() {
            FiAddr::UNSPEC
        } else if self.ep_type == EpType::Rdm {
            // Directed receive: the AV handle as given.
            op.addr
        } else {
            FiAddr::UNSPEC
        };
        let spec = RecvSpec { tagged, src, tag: op.tag, ignore: op.ignore, user_context: op.user_context };
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
        iov[..op.iov.len()].copy_from_slice(op.iov);
        let cap = IoVec::total(op.iov);

        if flags.contains(OpFlags::PEEK) || flags.contains(OpFlags::CLAIM) || flags.contains(OpFlags::DISCARD) {
            if !tagged {
                return Err(Error::BadFlags);
            }
            return self.peek_claim(&mut g, op, flags, spec, iov, cap);
        }
        if flags.contains(OpFlags::MULTI_RECV) {
            if tagged || op.iov.len() != 1 {
                return Err(Error::Inval);
            }
            let idx = match g.multis.iter().position(|m| m.is_none()) {
                Some(i) => i,
                None => {
                    g.multis.push(None);
                    g.multis.len() - 1
                }
            };
            g.multis[idx] = Some(Multi {
                context: op.context,
                base: op.iov[0].base,
                cap,
                off: 0,
                inflight: 0,
                released: false,
                pid: None,
            });
            let rec = PostedRecv { context: op.context, iov, niov: 1, cap, tagged: false, multi: Some(idx) };
            // Unexpected messages first, in order, while room remains.
            let pid = g.matcher.push_posted(spec, rec);
            g.multis[idx].as_mut().expect("just set").pid = Some(pid);
            self.drain_unexpected_into_multi(&mut g, idx, spec);
            return Ok(());
        }
        let rec = PostedRecv { context: op.context, iov, niov: op.iov.len(), cap, tagged, multi: None };
        match g.matcher.match_unexpected(&spec) {
            Some(uid) => {
                let (m, u) = g.matcher.remove_unexpected(uid).expect("matched id exists");
                self.deliver_unexpected(&mut g, Target::Single(rec), m, u);
            }
            None => {
                g.matcher.push_posted(spec, rec);
            }
        }
        Ok(())
    }

    fn drain_unexpected_into_multi(&self, g: &mut Inner, idx: usize, spec: RecvSpec) {
        loop {
            let Some(m) = g.multis[idx].as_ref() else { return };
            if m.released {
                return;
            }
            let Some(uid) = g.matcher.match_unexpected(&spec) else { return };
            let (ms, u) = g.matcher.remove_unexpected(uid).expect("matched id exists");
            let target = self.reserve_multi(g, idx, u.len);
            self.deliver_unexpected(g, target, ms, u);
        }
    }

    /// Reserve room for a message of `len` in a multi-receive buffer; releases the
    /// buffer from matching when what is left falls below the minimum.
    fn reserve_multi(&self, g: &mut Inner, idx: usize, len: u64) -> Target {
        let min = g.min_multi_recv;
        let m = g.multis[idx].as_mut().expect("multi exists while posted");
        let off = m.off;
        let room = m.cap - m.off;
        let take = (len.min(room as u64)) as usize;
        m.off += take;
        m.inflight += 1;
        if m.cap - m.off < min.max(1) || take < len as usize {
            m.released = true;
        }
        if m.released {
            if let Some(pid) = m.pid.take() {
                g.matcher.remove_posted(pid);
            }
        }
        Target::Multi { idx, off, cap: take }
    }

    /// A message placed in a multi-receive buffer finished (ok or with `err`).
    fn multi_finish(&self, g: &mut Inner, idx: usize, done: Option<(CqEntry, usize)>, err: Error) {
        let Some(m) = g.multis[idx].as_mut() else { return };
        m.inflight = m.inflight.saturating_sub(1);
        let last = m.released && m.inflight == 0;
        let context = m.context;
        if last {
            g.multis[idx] = None;
        }
        match done {
            Some((mut e, olen)) => {
                if last {
                    e.flags |= Caps::MULTI_RECV;
                }
                if olen > 0 {
                    Self::rx_err(g, e, olen, Error::Trunc);
                } else {
                    Self::rx_done(g, e);
                }
            }
            None => {
                let mut e = CqEntry::new(context, Caps::RECV | Caps::MSG);
                if last {
                    e.flags |= Caps::MULTI_RECV;
                }
                Self::rx_err(g, e, 0, err);
            }
        }
    }

    /// Take a multi-receive buffer out of service: it completes (with `err`) once
    /// the messages already placed in it have.
    fn release_multi(&self, g: &mut Inner, mi: usize, err: Error) {
        if let Some(m) = g.multis.get_mut(mi).and_then(|m| m.as_mut()) {
            m.released = true;
            m.inflight += 1;
            self.multi_finish(g, mi, None, err);
        }
    }

    fn peek_claim(
        &self,
        g: &mut Inner,
        op: &Op<'_>,
        flags: OpFlags,
        spec: RecvSpec,
        iov: [IoVec; IOV_LIMIT],
        cap: usize,
    ) -> Result<()> {
        let peek = flags.contains(OpFlags::PEEK);
        let claim = flags.contains(OpFlags::CLAIM);
        let discard = flags.contains(OpFlags::DISCARD);
        if peek {
            let Some(uid) = g.matcher.match_unexpected(&spec) else {
                let e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
                Self::rx_err(g, e, 0, Error::NoMsg);
                return Ok(());
            };
            let (m, u) = g.matcher.unexpected(uid).expect("matched id exists");
            let mut e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
            e.len = u.len as usize;
            e.tag = m.tag;
            e.src = m.src;
            if let Some(d) = u.data {
                e.data = d;
                e.flags |= Caps::REMOTE_CQ_DATA;
            }
            if discard {
                let (_, u) = g.matcher.remove_unexpected(uid).expect("exists");
                self.discard_unexpected(g, u);
            } else if claim {
                g.matcher.claim(uid, op.user_context);
            }
            Self::rx_done(g, e);
            return Ok(());
        }
        if claim {
            let uid = g.matcher.find_claimed(op.user_context).ok_or(Error::NoMsg)?;
            let (m, u) = g.matcher.remove_unexpected(uid).expect("claimed id exists");
            if discard {
                let mut e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
                e.tag = m.tag;
                e.src = m.src;
                self.discard_unexpected(g, u);
                Self::rx_done(g, e);
                return Ok(());
            }
            let rec = PostedRecv { context: op.context, iov, niov: op.iov.len(), cap, tagged: true, multi: None };
            self.deliver_unexpected(g, Target::Single(rec), m, u);
            return Ok(());
        }
        Err(Error::BadFlags)
    }

    fn discard_unexpected(&self, g: &mut Inner, u: Unexp) {
        match u.body {
            UnexpBody::Rts { conn, id } => {
                let nack = Header { id, ..Header::new(OpCode::Nack) };
                let _ = self.queue(g, conn, TxOp::owned(nack.encode(), Vec::new(), false));
            }
            UnexpBody::Eager(buf) => Self::recycle_unexp(g, buf),
        }
    }

    /// Keep an unexpected message's buffer for the next one.
    fn recycle_unexp(g: &mut Inner, buf: Vec<u8>) {
        if g.unexp_pool.len() < UNEXP_POOL && buf.capacity() <= config().eager_max {
            g.unexp_pool.push(buf);
        }
    }

    /// The target a matched posted receive gives a message of `len` bytes: the
    /// receive itself (taken off the queue), or a slice of a multi-receive buffer.
    fn take_posted(&self, g: &mut Inner, pid: PostedId, len: u64) -> Target {
        match g.matcher.posted(pid).and_then(|(_, r)| r.multi) {
            Some(mi) => self.reserve_multi(g, mi, len),
            None => Target::Single(g.matcher.remove_posted(pid).expect("matched id exists").1),
        }
    }

    /// A complete message (eager payload in, or a rendezvous request) with no
    /// receive chosen yet: deliver it to the first matching posted receive, or queue
    /// it as unexpected.
    fn arrive(&self, g: &mut Inner, m: MsgSpec, u: Unexp) {
        match g.matcher.match_posted(&m) {
            Some(pid) => {
                let target = self.take_posted(g, pid, u.len);
                self.deliver_unexpected(g, target, m, u);
            }
            None => {
                g.matcher.push_unexpected(m, u);
            }
        }
    }

    /// Deliver a complete unexpected message (or start its rendezvous).
    fn deliver_unexpected(&self, g: &mut Inner, target: Target, m: MsgSpec, u: Unexp) {
        let hdr = Header {
            flags: HdrFlags(
                if m.tagged { HdrFlags::TAGGED } else { 0 } | if u.data.is_some() { HdrFlags::CQ_DATA } else { 0 },
            ),
            len: u.len,
            tag: u.tag,
            data: u.data.unwrap_or(0),
            id: 0,
            op: OpCode::Msg,
        };
        match u.body {
            UnexpBody::Eager(buf) => {
                write_target(&g.multis, &target, 0, &buf);
                Self::recycle_unexp(g, buf);
                self.complete_target(g, target, &hdr, m.src, u.rma);
            }
            UnexpBody::Rts { conn, id } => {
                if Self::conn_mut(g, conn).is_none() {
                    self.fail_target(g, target, &hdr, m.src, Error::ConnReset);
                    return;
                }
                let cts = Header { id, ..Header::new(OpCode::Cts) };
                g.rndv_rx.clear(conn, id, u.len, RxWait { hdr, target, src: m.src });
                let _ = self.queue(g, conn, TxOp::owned(cts.encode(), Vec::new(), false));
            }
        }
    }

    /// Complete a receive whose payload has been written (all of `hdr.len` seen).
    fn complete_target(&self, g: &mut Inner, target: Target, hdr: &Header, src: FiAddr, rma: bool) {
        let tagged = hdr.flags.has(HdrFlags::TAGGED);
        // The remote CQ data of an RMA write reports the write, not a message.
        let mut flags = if rma { Caps::RMA | Caps::REMOTE_WRITE } else { Caps::RECV | Self::msg_flags(tagged) };
        let data = if hdr.flags.has(HdrFlags::CQ_DATA) {
            flags |= Caps::REMOTE_CQ_DATA;
            hdr.data
        } else {
            0
        };
        match target {
            Target::Single(rec) => {
                let got = (hdr.len as usize).min(rec.cap);
                let mut e = CqEntry::new(rec.context, flags);
                e.len = got;
                e.data = data;
                e.tag = hdr.tag;
                e.src = src;
                if (hdr.len as usize) > rec.cap || hdr.len > usize::MAX as u64 {
                    Self::rx_err(g, e, hdr.len as usize - got, Error::Trunc);
                } else {
                    Self::rx_done(g, e);
                }
            }
            Target::Multi { idx, off, cap } => {
                let Some(m) = g.multis[idx].as_ref() else { return };
                let mut e = CqEntry::new(m.context, flags);
                e.len = cap;
                e.data = data;
                e.tag = hdr.tag;
                e.src = src;
                e.buf = m.base as usize + off;
                let olen = (hdr.len as usize).saturating_sub(cap);
                self.multi_finish(g, idx, Some((e, olen)), Error::Trunc);
            }
        }
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
        if let Some(l) = g.listener.as_ref().filter(|_| listener_ready) {
            let mut accepted = Vec::new();
            loop {
                match l.accept() {
                    Ok((s, peer)) => accepted.push((s, peer)),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        fi_log!(Level::Warn, NAME, "ep_ctrl", "accept failed: {e}");
                        break;
                    }
                }
            }
            for (s, peer) in accepted {
                if s.set_nonblocking(true).is_err() {
                    continue;
                }
                if config().nodelay {
                    let _ = s.set_nodelay(true);
                }
                let mut c = Conn::new(s, ConnState::AwaitHello, false, 0);
                c.peer = Some(peer);
                let _ = self.add_conn(g, c);
            }
        }
        for i in 0..g.slots.len() {
            let Some(c) = g.slots[i].conn.as_ref() else { continue };
            // A connection needs work when its socket is ready (readable, writable
            // while blocked, connected, or in error) or bytes wait in its stage.
            if !(all || c.staged() > 0 || ready.contains(&c.fd())) {
                continue;
            }
            let id = ConnId { idx: i as u32, gen: g.slots[i].gen };
            self.progress_conn(g, id);
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
            RxState::Payload { .. } => self.payload_step(g, id),
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
        let dest = match hdr.op {
            OpCode::Hello | OpCode::HelloAck | OpCode::Reject => {
                RxDest::Control { buf: Vec::with_capacity(hdr.len as usize) }
            }
            OpCode::Msg => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                match g.matcher.match_posted(&m) {
                    Some(pid) => RxDest::Recv { target: self.take_posted(g, pid, hdr.len), src },
                    None => {
                        // Buffered until a receive matches. A well-behaved peer sends
                        // larger messages by rendezvous; one that does not is refused
                        // before it can make us buffer without bound.
                        let limit = config().eager_max.max(UNEXP_EAGER_LIMIT);
                        if hdr.len > limit as u64 {
                            return Err((
                                Error::MsgSize,
                                format!(
                                    "protocol error: unexpected eager message of {} bytes (limit {limit})",
                                    hdr.len
                                ),
                            ));
                        }
                        let n = hdr.len as usize;
                        let mut buf = g.unexp_pool.pop().unwrap_or_default();
                        buf.clear();
                        buf.try_reserve(n)
                            .map_err(|_| (Error::NoMem, "no memory for an unexpected message".to_string()))?;
                        RxDest::Unexpected { buf, src }
                    }
                }
            }
            OpCode::Rts => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let u = Unexp {
                    body: UnexpBody::Rts { conn: id, id: hdr.id },
                    len: hdr.len,
                    data,
                    tag: hdr.tag,
                    rma: false,
                };
                self.arrive(g, m, u);
                return Ok(());
            }
            OpCode::Cts => {
                let m = g.rndv_tx.handle_cts(id, hdr.id).map_err(|e| (Error::Io, format!("protocol error: {e}")))?;
                let h = Header { op: OpCode::Data, id: hdr.id, ..m.hdr };
                let data = TxOp::user(
                    h.encode(),
                    &m.iov[..m.niov],
                    true,
                    TxKind::Data { context: m.context, flags: m.flags, len: m.len },
                );
                Self::conn_mut(g, id).expect("connection exists").txq.push_back(data);
                return Ok(());
            }
            OpCode::Nack => {
                // The receiver discarded the message: the send is complete.
                let m = g.rndv_tx.handle_nack(id, hdr.id).map_err(|e| (Error::Io, format!("protocol error: {e}")))?;
                let mut e = CqEntry::new(m.context, m.flags);
                e.len = m.len;
                Self::tx_done(g, e);
                return Ok(());
            }
            OpCode::Data => {
                let (w, len) = g
                    .rndv_rx
                    .handle_data(id, hdr.id, hdr.len)
                    .map_err(|e| (Error::Io, format!("protocol error: {e}")))?;
                let h = Header { len, ..w.hdr };
                g.slots[id.idx as usize].rx =
                    RxState::Payload { hdr: h, dest: RxDest::Recv { target: w.target, src: w.src }, off: 0 };
                return Ok(());
            }
            OpCode::WriteReq | OpCode::AtomicReq => {
                let mut buf = g.unexp_pool.pop().unwrap_or_default();
                buf.clear();
                buf.try_reserve(hdr.len as usize)
                    .map_err(|_| (Error::NoMem, "no memory for an RMA request".to_string()))?;
                RxDest::RmaReq { buf }
            }
            OpCode::ReadReq => {
                self.on_read_req(g, id, hdr)?;
                return Ok(());
            }
            OpCode::RmaResp => match self.on_rma_resp(g, id, hdr)? {
                Some(dest) => dest,
                None => return Ok(()),
            },
            OpCode::Shutdown => {
                return Err((Error::Shutdown, "peer shut the connection down".into()));
            }
        };
        g.slots[id.idx as usize].rx = RxState::Payload { hdr, dest, off: 0 };
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
        loop {
            let slot = &mut g.slots[idx];
            let conn = slot.conn.as_mut().expect("payload on a live connection");
            let RxState::Payload { hdr, dest, off } = &mut slot.rx else { return Ok(true) };
            let remaining = hdr.len - *off;
            if remaining == 0 {
                break;
            }
            if conn.staged() > 0 {
                let n = (conn.staged() as u64).min(remaining) as usize;
                let lo = conn.stage_lo;
                let bytes = &conn.stage[lo..lo + n];
                write_dest(dest, &g.multis, *off, bytes);
                conn.stage_lo += n;
                *off += n as u64;
                continue;
            }
            // Large remainder into a receive: read straight into the user's memory.
            if remaining as usize >= STAGE / 2 {
                if let Some(pieces) = direct_pieces(dest, &g.multis, *off, remaining) {
                    // SAFETY: the pieces lie inside a posted receive's buffer (valid for
                    // writes under post_recv's contract) or an unexpected Vec's spare
                    // capacity that `direct_pieces` bounds by its reserved length.
                    let r = unsafe { recvv(conn.fd(), &pieces.0[..pieces.1]) };
                    match r {
                        Ok(n) => {
                            if let RxDest::Unexpected { buf, .. } | RxDest::RmaReq { buf } = dest {
                                // SAFETY: recvv initialised these n bytes, which lie
                                // within the reserved capacity.
                                unsafe { buf.set_len(buf.len() + n) };
                            }
                            *off += n as u64;
                            continue;
                        }
                        Err(Error::Again) => return Ok(false),
                        Err(e) => return Err((e, "peer closed the connection".into())),
                    }
                }
            }
            match conn.fill() {
                Ok(_) => continue,
                Err(Error::Again) => return Ok(false),
                Err(e) => return Err((e, "peer closed the connection".into())),
            }
        }
        // The payload is complete.
        let rx = std::mem::replace(&mut g.slots[idx].rx, RxState::Header);
        let RxState::Payload { hdr, dest, .. } = rx else { return Ok(true) };
        match dest {
            RxDest::Recv { target, src } => self.complete_target(g, target, &hdr, src, false),
            RxDest::Unexpected { buf, src } => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let u = Unexp { body: UnexpBody::Eager(buf), len: hdr.len, data, tag: hdr.tag, rma: false };
                // A receive may have been posted while the payload arrived.
                self.arrive(g, m, u);
            }
            RxDest::Control { buf } => self.on_control(g, id, hdr, buf)?,
            RxDest::RmaReq { buf } => self.on_rma_req(g, id, hdr, buf)?,
            RxDest::RmaData { id: rid, .. } => self.on_rma_data(g, id, rid, hdr.len as usize),
        }
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
                let nlen = hdr.tag as usize;
                let name = std::str::from_utf8(&buf[..nlen])
                    .ok()
                    .and_then(|s| s.parse::<SocketAddr>().ok())
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
                    g.slots[id.idx as usize].conn = None;
                    Self::fail_sends(g, ops, id, Error::ConnRefused);
                    return Ok(());
                }
                // RDM: we lost a simultaneous connect. Our queued operations move to
                // the peer's connection, now or when its hello arrives.
                let c = Self::conn_mut(g, id).expect("exists");
                c.state = ConnState::Lost;
                let peer = c.peer;
                if let Some(p) = peer {
                    if let Some(&winner) = g.by_name.get(&p) {
                        if winner != id {
                            self.adopt_ops(g, id, winner);
                        }
                    }
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
            c.txq.push_front(TxOp::owned(ack.encode(), Vec::new(), false));
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
        if !accept {
            let rej = Header::new(OpCode::Reject);
            let c = Self::conn_mut(g, id).expect("exists");
            c.state = ConnState::Ready; // only to let the reject out; closed below
            c.txq.push_back(TxOp::owned(rej.encode(), Vec::new(), false));
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
            c.txq.push_front(TxOp::owned(ack.encode(), Vec::new(), false));
        }
        g.by_name.insert(name, id);
        g.by_addr.retain(|_, c| Some(*c) != existing);
        if let Some(old) = existing {
            self.adopt_ops(g, old, id);
        }
        self.flush_conn(g, id);
        Ok(())
    }

    /// Move the user frames queued on a losing connection to the winner, in order,
    /// and drop the loser.
    fn adopt_ops(&self, g: &mut Inner, from: ConnId, to: ConnId) {
        let Some(c) = Self::conn_mut(g, from) else { return };
        let ops: Vec<TxOp> = c.txq.drain(..).filter(|op| !matches!(op.kind, TxKind::Control(_))).collect();
        let fd = c.fd();
        self.poll.del_fd(fd);
        g.slots[from.idx as usize].conn = None;
        g.slots[from.idx as usize].rx = RxState::Header;
        g.rndv_tx.rekey(from, to);
        match Self::conn_mut(g, to) {
            Some(w) => {
                for mut op in ops {
                    // The loser never got past its hello: nothing of these was sent.
                    op.sent = 0;
                    w.txq.push_back(op);
                }
            }
            None => Self::fail_sends(g, ops, to, Error::ConnReset),
        }
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
                    c.txq.push_back(TxOp::owned(sh.encode(), Vec::new(), false));
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
        for (_, rec) in g.matcher.drain_posted() {
            if let Some(mi) = rec.multi {
                self.release_multi(g, mi, Error::Canceled);
                continue;
            }
            let e = CqEntry::new(rec.context, Caps::RECV | Self::msg_flags(rec.tagged));
            Self::rx_err(g, e, 0, Error::Canceled);
        }
        let waits: Vec<RxWait> = g.rndv_rx.drain().collect();
        for w in waits {
            self.fail_target(g, w.target, &w.hdr, w.src, Error::Canceled);
        }
        g.matcher.drain_unexpected();
        g.listener = None;
        g.closed = true;
    }
}

/// Write bytes of a message at offset `off` into its target (never past the
/// receive's capacity, or the slice of a multi-receive buffer it was given).
fn write_target(multis: &[Option<Multi>], target: &Target, off: u64, bytes: &[u8]) {
    match target {
        Target::Single(rec) => {
            copy_into(&rec.iov[..rec.niov], rec.cap, off, bytes);
        }
        Target::Multi { idx, off: base, cap } => {
            if let Some(m) = multis[*idx].as_ref() {
                let iov = [IoVec { base: m.base, len: m.cap }];
                let room = (*cap as u64).saturating_sub(off) as usize;
                let n = bytes.len().min(room);
                copy_into(&iov, *base + *cap, *base as u64 + off, &bytes[..n]);
            }
        }
    }
}

fn write_dest(dest: &mut RxDest, multis: &[Option<Multi>], off: u64, bytes: &[u8]) {
    match dest {
        RxDest::Recv { target, .. } => write_target(multis, target, off, bytes),
        RxDest::Unexpected { buf, .. } | RxDest::Control { buf } | RxDest::RmaReq { buf } => {
            buf.extend_from_slice(bytes)
        }
        RxDest::RmaData { rec, .. } => {
            copy_into(&rec.iov[..rec.niov], rec.cap, off, bytes);
        }
    }
}

/// Copy `bytes` into the pieces at logical offset `off`, never past `cap`.
fn copy_into(iov: &[IoVec], cap: usize, off: u64, bytes: &[u8]) {
    if off >= cap as u64 {
        return;
    }
    let mut pos = off as usize;
    let mut src = &bytes[..bytes.len().min(cap - pos)];
    let mut start = 0usize;
    for v in iov {
        if src.is_empty() {
            break;
        }
        let end = start + v.len;
        if pos < end {
            let in_off = pos - start;
            let n = src.len().min(v.len - in_off);
            // SAFETY: `v` is a piece of a posted receive (valid for writes under
            // post_recv's contract); `in_off + n <= v.len` keeps the copy inside it,
            // and the source is a distinct buffer of ours.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), v.base.add(in_off), n) };
            src = &src[n..];
            pos += n;
        }
        start = end;
    }
}

/// The pieces of memory where the next `remaining` bytes at `off` go, for a direct
/// read; `None` when the destination is not plain memory or is truncated there.
fn direct_pieces(
    dest: &mut RxDest,
    multis: &[Option<Multi>],
    off: u64,
    remaining: u64,
) -> Option<([libc::iovec; IOV_LIMIT], usize)> {
    let mut out = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; IOV_LIMIT];
    match dest {
        RxDest::Recv { target: Target::Single(rec), .. } | RxDest::RmaData { rec, .. } => {
            let cap = rec.cap as u64;
            if off >= cap {
                return None;
            }
            let mut want = remaining.min(cap - off) as usize;
            let mut pos = off as usize;
            let mut start = 0usize;
            let mut n = 0;
            for v in &rec.iov[..rec.niov] {
                let end = start + v.len;
                if want > 0 && pos < end {
                    let in_off = pos - start;
                    let k = want.min(v.len - in_off);
                    // SAFETY: in_off < v.len, so the pointer stays in the piece.
                    out[n] = libc::iovec { iov_base: unsafe { v.base.add(in_off) } as *mut libc::c_void, iov_len: k };
                    n += 1;
                    want -= k;
                    pos += k;
                }
                start = end;
            }
            (n > 0).then_some((out, n))
        }
        RxDest::Recv { target: Target::Multi { idx, off: base, cap }, .. } => {
            let m = multis[*idx].as_ref()?;
            if off >= *cap as u64 {
                return None;
            }
            let k = remaining.min(*cap as u64 - off) as usize;
            // SAFETY: base + off + k <= base + cap <= m.cap, inside the buffer.
            let p = unsafe { m.base.add(*base + off as usize) };
            out[0] = libc::iovec { iov_base: p as *mut libc::c_void, iov_len: k };
            Some((out, 1))
        }
        RxDest::Unexpected { buf, .. } | RxDest::RmaReq { buf } => {
            let spare = buf.capacity() - buf.len();
            let k = (remaining as usize).min(spare);
            if k == 0 {
                return None;
            }
            // SAFETY: the spare capacity is allocated and `k` bytes of it fit.
            let p = unsafe { buf.as_mut_ptr().add(buf.len()) };
            out[0] = libc::iovec { iov_base: p as *mut libc::c_void, iov_len: k };
            Some((out, 1))
        }
        _ => None,
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
}

impl EndpointOps for TcpEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = self.domain.find_cq(cq.fid()).ok_or(Error::Domain)?;
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        let mut g = self.lock();
        if flags.contains(BindFlags::TRANSMIT) {
            g.b.tx_cq = Some(ucq.clone());
        }
        if flags.contains(BindFlags::RECV) {
            g.b.rx_cq = Some(ucq.clone());
        }
        drop(g);
        ucq.bind(self.weak_progress())
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        let c = self.domain.find_cntr(cntr.fid()).ok_or(Error::Domain)?;
        let mut g = self.lock();
        if flags.contains(BindFlags::TRANSMIT) {
            g.b.tx_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::RECV) {
            g.b.rx_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::REMOTE_WRITE) {
            g.b.rma_write_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::REMOTE_READ) {
            g.b.rma_read_cntr = Some(c.clone());
        }
        drop(g);
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
        let a = self.domain.find_av(av.fid()).ok_or(Error::Domain)?;
        self.lock().b.av = Some(a);
        Ok(())
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Ok(());
        }
        if g.b.tx_cq.is_none() && g.b.rx_cq.is_none() {
            return Err(Error::NoCq);
        }
        match self.ep_type {
            EpType::Rdm => {
                if g.b.av.is_none() {
                    return Err(Error::NoAv);
                }
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
            c.txq.push_front(TxOp::owned(ack.encode(), param.to_vec(), false));
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
            c.txq.push_back(TxOp::owned(sh.encode(), Vec::new(), false));
        }
        self.flush_conn(&mut g, id);
        self.fail_conn(&mut g, id, Error::Shutdown, "local shutdown");
        Ok(())
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.send_common(op, flags, None)
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
        self.rma_common(op, flags, false, None)
    }

    unsafe fn post_read(&self, op: &fabric_core::prov::RmaOp<'_>, flags: OpFlags) -> Result<()> {
        self.rma_common(op, flags, true, None)
    }

    fn inject_write(&self, data: &[u8], op: &fabric_core::prov::RmaOp<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > config().inject_size {
            return Err(Error::MsgSize);
        }
        self.rma_common(op, flags, false, Some(data))
    }

    unsafe fn post_atomic(&self, op: &fabric_core::prov::AtomicDesc, _flags: OpFlags) -> Result<()> {
        self.atomic_common(op)
    }

    fn cancel(&self, user_context: u64) -> Result<()> {
        let mut g = self.lock();
        let mut found = false;
        while let Some((_, rec)) = g.matcher.cancel_posted(user_context) {
            found = true;
            if let Some(mi) = rec.multi {
                self.release_multi(&mut g, mi, Error::Canceled);
                continue;
            }
            let e = CqEntry::new(rec.context, Caps::RECV | Self::msg_flags(rec.tagged));
            Self::rx_err(&g, e, 0, Error::Canceled);
        }
        if found {
            Ok(())
        } else {
            Err(Error::NoEnt)
        }
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.lock().min_multi_recv = bytes;
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

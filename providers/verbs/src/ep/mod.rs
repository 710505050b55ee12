//! verbs endpoints: MSG (one RC connection, made by the application through the
//! event queue) and RDM (RC connections made on demand, one per peer we send to,
//! as libfabric's rxm does over verbs). Both run the same data path over their
//! connections ([`conn::Conn`]): the RDM protocol engine of `fabric_util::rdm`
//! (an `Engine<u64>` keyed by connection id, in fetch mode), whose frames go out
//! as SENDs, with verbs' native operations where it has them:
//!
//! | what | on the wire | completes |
//! |---|---|---|
//! | message <= [`EAGER_MAX`] | one SEND of a `wire` header and the payload (inline below the QP's inline limit, else from a registered bounce buffer) into one of the receiver's posted buffers | at its send completion |
//! | larger message | a SEND of `Rts` (header and the sender's pieces: address, length, remote key); the receiver, once matched, RDMA READs the pieces into the receive (the engine's fetch) and SENDs `Cts` (done; `data`: the errno) or `Nack` (discarded) | at `Cts`/`Nack` |
//! | RMA write / read | one RDMA WRITE / READ (WRITE_WITH_IMM carries remote CQ data: a receive completion at the target) | at its completion |
//! | atomic: fetch-add, compare-swap of one 64-bit integer | native, when the device reports atomics | at its completion |
//! | other atomics | `AtomicReq` SEND (the engine's); the target's engine applies it and answers `RmaResp` | at the answer |
//!
//! MSG endpoints (unless `FI_VERBS_MSG_DIRECT=0`) that need none of the engine's
//! features take the direct path instead where both sides can (`direct.rs`):
//!
//! | what (direct path) | on the wire | completes |
//! |---|---|---|
//! | message | one SEND (SEND_WITH_IMM: remote CQ data) of the application's buffer: inline below the QP's inline limit, else a registered region's key, a bounce copy up to [`BUF`], or a registration for the operation | at its send completion |
//! | receive | the application's buffer posted to the QP, plus a scratch entry: a longer message spills there and completes `FI_ETRUNC`; one longer than both breaks the QP (`FI_SHUTDOWN`) | at its receive completion |
//! | RMA, native atomics | as above | as above |
//!
//! It falls back to the engine for RDM, iWARP, tagged, atomic, multi-receive and
//! directed-receive endpoints, and when the peer does not take it.
//!
//! The engine matches receives in software (tags, directed receives,
//! multi-receive, peek/claim), so both endpoint types have the full receive
//! semantics, and a message larger than its receive is truncated (`FI_ETRUNC`)
//! instead of breaking the QP. Every QP retries RNR for ever: a sender waits, in
//! the hardware, for the receiver to re-post its buffers. iWARP has no such
//! retry (a SEND finding no buffer ends the connection): there each connection
//! counts receive credits (`credits.rs`), and a SEND without one waits in its
//! connection's backlog until the peer returns some.
//!
//! Receive buffers ([`BUF`] bytes each): an RDM endpoint posts [`NSRQ`] of them
//! to one shared receive queue that all its connections receive through (memory
//! per endpoint, none per peer), where the device has shared receive queues;
//! otherwise, and for a MSG endpoint, each connection posts [`NRX`] of its own.
//!
//! RDM connections (`cm.rs`): an endpoint listens on its address (IP and port:
//! its name); the first operation to a peer creates an identifier, resolves the
//! address and route, creates the QP and connects, sending our name in the
//! private data so the peer can report us as the source. Operations wait in the
//! connection until it is established. Each side sends its own operations over
//! the connection it made (so no connect race needs resolving); answers (`Cts`,
//! `RmaResp`, reads of a rendezvous) go back over the QP the request came on.
//!
//! Progress is manual (`progress.rs`): reading or waiting on a bound queue polls
//! the endpoint's `ibv_cq`, and its connection-manager and completion channels at
//! most every [`CTL_INTERVAL`]. A blocking wait (or a `trywait`) arms the CQ
//! (`ibv_req_notify_cq`) for one notification and sleeps on its completion
//! channel and the CM channel.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the endpoint's types, its creation, the `EndpointOps` tail |
//! | `direct.rs` | MSG endpoints' direct data path: the application's buffers on the QP |
//! | `msg.rs` | sends and receives (`send_common`, `recv_common`); engine frames to SENDs; rendezvous fetches |
//! | `rma.rs` | RDMA WRITE and READ (`rma_common`); native operations' table |
//! | `atomic.rs` | atomics, native or by the engine (`atomic_common`) |
//! | `progress.rs` | CQ polling, work completions, frames arriving |
//! | `cm.rs` | the connection manager: connect, accept, established |
//! | `conn.rs` | a connection, its QP and its work requests |
//! | `credits.rs` | iWARP flow control: a connection's receive credits |

mod atomic;
mod cm;
mod conn;
mod credits;
mod direct;
mod msg;
mod progress;
mod rma;

use crate::domain::VerbsDomain;
use crate::ibv::{self, CmId, Cq, EventChannel, Srq};
use crate::NAME;
use conn::{Conn, ConnState, WrRec};
pub(crate) use direct::PD_MSG_DIRECT;
use direct::{Path, PreRecv};
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op, RmaOp};
use fabric_core::{fi_log, Address, BindFlags, EpType, Error, FiAddr, Info, OpFlags, Result};
use fabric_util::bind::Bindings;
use fabric_util::progress::{Progress, Waiter};
use fabric_util::rdm::{Engine, Frame};
use fabric_util::scaffold;
use fabric_util::slab::Slab;
use fabric_util::wire::{AtomicHdr, RmaDesc, HDR_LEN};
use msg::FetchIn;
use rdma_sys as sys;
use rma::TxOp;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Bytes of one receive (and bounce) buffer.
const BUF: usize = 16 << 10;
/// A frame's header plus its inline prefix (an RMA target and atomic header).
const HEAD_MAX: usize = HDR_LEN + RmaDesc::LEN + AtomicHdr::LEN;
/// The largest message sent in one SEND; larger ones are read by the receiver.
pub(crate) const EAGER_MAX: usize = BUF - HEAD_MAX;
/// Receive buffers posted per connection.
const NRX: usize = 64;
/// Receive buffers of an RDM endpoint's shared receive queue (all its
/// connections), where the device has shared receive queues.
const NSRQ: usize = 256;
/// Bounce buffers per endpoint.
const NTX: usize = 256;
/// Bounce buffers user operations leave for the endpoint's own answers.
const TX_RESERVE: usize = 32;
/// Send queue depth asked per connection.
const SQ_DEPTH: u32 = 256;
/// Completion queue depth of an endpoint.
const CQ_DEPTH: u32 = 8192;
/// The largest message (and RMA operation) of an RDM endpoint.
pub(crate) const MAX_MSG: usize = 1 << 30;
/// How often a polling endpoint reads its control channels (connection manager
/// events, completion channel events) at most; every progress call polls the CQ.
/// (libfabric's rxm reads its connection events every 10 ms while polling.)
const CTL_INTERVAL: Duration = Duration::from_micros(500);
/// The same over iWARP, which reads them as often as before (every 50 us, the
/// clock on every call) until the failure noted at [`VerbsEp::post_conn`] is
/// understood.
const CTL_INTERVAL_IWARP: Duration = Duration::from_micros(50);
/// Progress calls between two readings of the clock (for [`CTL_INTERVAL`]);
/// a sleep's end reads the channels whatever the count.
const CLOCK_POLLS: u32 = 32;
/// How long a close waits for the work requests its connections have posted
/// (answers peers are owed, such as a rendezvous's `Cts`) to complete.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);
/// Address and route resolution time-out.
const RESOLVE_MS: i32 = 2000;
/// The most connection data a connect, accept or reject carries
/// (`FI_OPT_CM_DATA_SIZE`): the private data of an RC connect request (56 bytes,
/// the smallest of the three) less our 5-byte header.
pub(crate) const CM_DATA_MAX: usize = 51;
// The private data of connections and the names in it (pure, in fabric-util so
// that they build and are fuzzed without libibverbs).
use fabric_util::verbs_wire::PD_MSG;
pub(crate) use fabric_util::verbs_wire::{private_data, strip_private};

/// Whether an address is one verbs endpoints use (a socket address).
pub(crate) fn is_verbs_addr(a: &Address) -> bool {
    a.sockaddr().is_some()
}

/// A registered pool of `n` buffers of [`BUF`] bytes, page-aligned (a frame
/// then spans as few pages as it can, for the device's page walks).
struct Pool {
    // Declared first: deregistered before the memory is freed.
    mr: ibv::Mr,
    /// The allocation: a page more than the buffers, which start at `off`.
    mem: Box<[u8]>,
    /// Where the first buffer starts in `mem` (page-aligned).
    off: usize,
}

/// The page size the buffers are aligned to.
const PAGE: usize = 4096;

impl Pool {
    fn new(d: &VerbsDomain, n: usize) -> Result<Pool> {
        let mut mem = vec![0u8; n * BUF + PAGE].into_boxed_slice();
        let off = mem.as_ptr().align_offset(PAGE);
        // SAFETY: `off + n * BUF <= mem.len()` (align_offset < PAGE); `mem` is
        // owned by the pool and freed only after `mr` (field order); the device
        // writes it only through receives and reads we post.
        let mr = unsafe {
            ibv::Mr::new(&d.pd, mem.as_mut_ptr().add(off), n * BUF, crate::domain::ibv_access(Default::default()))
        }
        .map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "cannot register {} bytes of buffers: {e}", n * BUF);
            Error::from(e)
        })?;
        Ok(Pool { mr, mem, off })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: callers pass i < n: the slot is inside `mem`, past `off`.
        unsafe { self.mem.as_ptr().add(self.off + i * BUF) as *mut u8 }
    }
}

struct Inner {
    enabled: bool,
    closed: bool,
    b: Bindings,
    conns: Slab<Conn>,
    /// Connections by identifier.
    by_id: HashMap<usize, u64>,
    /// Connections by QP number.
    by_qpn: HashMap<u32, u64>,
    /// RDM: our outgoing connection to each peer name.
    by_peer: HashMap<SocketAddr, u64>,
    /// MSG: the connection.
    msg_conn: Option<u64>,
    /// MSG: an accepted request's identifier, until `accept`.
    pending_accept: Option<CmId>,
    /// The RDM protocol engine (messages, rendezvous, emulated atomics), its
    /// peers our connections.
    eng: Engine<u64>,
    /// Native RMA and atomics in flight.
    ops: Slab<TxOp>,
    /// Rendezvous messages being fetched (their READs in flight).
    fetching: Slab<FetchIn>,
    wrs: Slab<WrRec>,
    /// The direct path's receives on the QP (their work request ids carry
    /// [`direct::DRECV_TAG`]).
    drecvs: Slab<direct::DRecv>,
    /// Lists of pieces the direct path's vectored receives take and give back.
    iov_spare: Vec<Vec<IoVec>>,
    /// Free bounce slots.
    tx_free: Vec<usize>,
    /// The engine's frames waiting for a bounce slot, in order.
    deferred: VecDeque<(u64, Frame)>,
    /// MSG: connected once (for shutdown reporting).
    connected: bool,
    /// MSG: `FI_SHUTDOWN` reported.
    shut: bool,
    /// Polls since the device's asynchronous events were last read.
    async_tick: u32,
    /// When the control channels (connection manager, completion channel) were
    /// last read; they are read at most every [`CTL_INTERVAL`] while polling.
    last_ctl: Instant,
    /// Read the control channels on the next progress whatever the time (set
    /// when a sleep ends: a channel may be what woke the waiter).
    force_ctl: bool,
    /// Progress calls since the clock was last read (up to [`CLOCK_POLLS`]).
    ctl_tick: u32,
    /// Some connection has frames the engine held ([`Conn`]'s `held`).
    any_held: bool,
    /// MSG: the data path (`direct.rs`); the engine's until enabled.
    path: Path,
    /// MSG, passive side: the connection request offered the direct path.
    peer_offered: bool,
    /// Direct path: receives waiting for the path to be chosen, in order.
    pre_rx: VecDeque<PreRecv>,
    /// Direct path: receives posted (on the QP or waiting).
    rx_out: u32,
    /// Direct path: the scratch region truncated messages spill into.
    scratch: Option<Pool>,
}

/// A verbs endpoint (MSG or RDM).
pub(crate) struct VerbsEp {
    fid: u64,
    ep_type: EpType,
    info: Info,
    /// RDM: the listening identifier (declared before the channel it is on,
    /// so it is destroyed first), and our name.
    _listener: Option<CmId>,
    name: Option<SocketAddr>,
    /// The endpoint's completion queue (both directions of every connection).
    cq: Mutex<Cq>,
    /// The connection manager's events of the endpoint's identifiers.
    cm: EventChannel,
    /// The wait descriptor: an epoll set of the CQ channel and the CM channel.
    wait: Waiter,
    /// Bounce buffers.
    tx: Pool,
    inline_max: usize,
    inner: Mutex<Inner>,
    /// RDM: the shared receive queue of every connection and its buffers, where
    /// the device has one. After `inner`: the QPs using it go first.
    srx: Option<SharedRx>,
    /// Last: the domain's PD outlives the endpoint's registrations.
    domain: Arc<VerbsDomain>,
    me: Weak<VerbsEp>,
}

/// An RDM endpoint's shared receive queue and the buffers posted to it.
struct SharedRx {
    srq: Srq,
    /// `n` buffers of [`BUF`] bytes, each posted to `srq` but while its frame
    /// is handled.
    pool: Pool,
    n: usize,
}

impl VerbsEp {
    fn new(domain: Arc<VerbsDomain>, info: &Info) -> Result<Arc<VerbsEp>> {
        let ep_type = info.ep_attr.ep_type;
        let cq = Cq::new(&domain.ctx, CQ_DEPTH.min(domain.port.max_cqe)).map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "ibv_create_cq failed: {e}");
            Error::from(e)
        })?;
        let cm = EventChannel::new().map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "rdma_create_event_channel failed: {e}");
            Error::from(e)
        })?;
        let mut pending_accept = None;
        let mut peer_offered = false;
        let (listener, name) = if ep_type == EpType::Rdm {
            let want = info
                .src_addr
                .as_ref()
                .and_then(|a| a.sockaddr())
                .unwrap_or_else(|| SocketAddr::new(domain.port.iface.addr, 0));
            let id = crate::pep::listening(&cm, want)?;
            let name = id.local_addr().ok_or(Error::AddrNotAvail)?;
            (Some(id), Some(name))
        } else {
            if let Some(h) = &info.handle {
                let req = h.0.downcast_ref::<crate::pep::ConnReq>().ok_or(Error::Inval)?;
                let id = req.take().ok_or(Error::Inval)?;
                id.migrate(&cm)?;
                pending_accept = Some(id);
                peer_offered = req.direct;
            }
            (None, None)
        };
        let tx = Pool::new(&domain, NTX)?;
        let srx = if ep_type == EpType::Rdm { Self::shared_rx(&domain) } else { None };
        let wait = Waiter::new()?;
        wait.add_fd(cq.fd())?;
        wait.add_fd(cm.fd())?;
        let inline_max = domain.port.max_inline;
        let info = info.clone();
        Ok(Arc::new_cyclic(|me| VerbsEp {
            fid: fabric_core::prov::next_fid(),
            ep_type,
            domain,
            info,
            cq: Mutex::new(cq),
            cm,
            _listener: listener,
            name,
            wait,
            tx,
            inline_max,
            inner: Mutex::new(Inner {
                enabled: false,
                closed: false,
                b: Bindings::default(),
                conns: Slab::new(),
                by_id: HashMap::new(),
                by_qpn: HashMap::new(),
                by_peer: HashMap::new(),
                msg_conn: None,
                pending_accept,
                eng: Engine::new(fabric_util::rdm::Config {
                    name: NAME,
                    eager_max: EAGER_MAX,
                    unexp_max_one: EAGER_MAX as u64,
                    unexp_max_count: usize::MAX,
                })
                .with_fetch(),
                ops: Slab::new(),
                fetching: Slab::new(),
                wrs: Slab::new(),
                drecvs: Slab::new(),
                iov_spare: Vec::new(),
                tx_free: (0..NTX).rev().collect(),
                deferred: VecDeque::new(),
                connected: false,
                shut: false,
                async_tick: 0,
                last_ctl: Instant::now(),
                force_ctl: true,
                ctl_tick: 0,
                any_held: false,
                path: Path::Engine,
                peer_offered,
                pre_rx: VecDeque::new(),
                rx_out: 0,
                scratch: None,
            }),
            srx,
            me: me.clone(),
        }))
        .and_then(|ep| {
            if let Some(srx) = &ep.srx {
                let mut g = ep.lock();
                for slot in 0..srx.n {
                    ep.post_shared_slot(&mut g, slot)?;
                }
            }
            Ok(ep)
        })
    }

    /// A shared receive queue with its buffers, if the device has shared
    /// receive queues (else each connection gets its own buffers).
    fn shared_rx(domain: &VerbsDomain) -> Option<SharedRx> {
        if !crate::config().use_srq {
            fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "no shared receive queue (FI_VERBS_USE_SRQ=0): buffers per connection"
            );
            return None;
        }
        if domain.port.iwarp {
            // Over siw, the QP of a second RDM endpoint's connection on its own
            // shared receive queue fails to be created (libsiw gives no
            // errno), and no receiver-not-ready retry covers a shared pool
            // running dry: per-connection buffers.
            fi_log!(Level::Info, NAME, "ep_ctrl", "no shared receive queue on iWARP: buffers per connection");
            return None;
        }
        let n = NSRQ.min(domain.port.max_srq_wr as usize);
        if n < NRX {
            fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "no shared receive queue (the device holds {n}): buffers per connection"
            );
            return None;
        }
        let srq = match Srq::new(&domain.pd, n as u32) {
            Ok(s) => s,
            Err(e) => {
                fi_log!(Level::Info, NAME, "ep_ctrl", "ibv_create_srq failed ({e}): buffers per connection");
                return None;
            }
        };
        let pool = Pool::new(domain, n).ok()?;
        fi_log!(Level::Info, NAME, "ep_ctrl", "shared receive queue: {n} buffers of {BUF} bytes for every connection");
        Some(SharedRx { srq, pool, n })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn weak_progress(&self) -> Weak<dyn Progress> {
        self.me.clone() as Weak<dyn Progress>
    }

    fn rdm(&self) -> bool {
        self.ep_type == EpType::Rdm
    }

    /// The connection a user operation to `addr` goes over, once the endpoint
    /// is enabled (and connected: MSG) and has a transmit queue when the
    /// operation `completes`; progress is made first when the operation could
    /// not go out at once.
    fn post_conn(&self, g: &mut Inner, addr: FiAddr, completes: bool) -> Result<u64> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if !self.rdm() && g.msg_conn.is_none() {
            return Err(Error::NotConn);
        }
        if completes && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        // Progress first only where it can make room: the connection is not
        // up or its send queue is full or backed up, frames wait for bounce
        // slots, or few are free. An application that gets FI_EAGAIN reads
        // its queues (manual progress); libfabric's verbs posts without
        // progress too.
        // iWARP (receive credits, the active side's first message) keeps
        // progress on every post: the guest's Soft-iWARP run saw one
        // fi_pingpong end with a failed completion the first time posts went
        // without it, so iWARP stays as it was until that is understood.
        let cid = self.conn_for(g, addr)?;
        if !self.domain.port.iwarp
            && Self::can_post_now(g, cid, true)
            && g.deferred.is_empty()
            && g.tx_free.len() > 2 * TX_RESERVE
        {
            return Ok(cid);
        }
        self.progress_locked(g);
        self.conn_for(g, addr)
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // What the connections have posted, answers peers are owed among it (a
        // receiver that closes right after its receive completes still owes
        // the sender its `Cts`): let it complete first, for a bounded time,
        // as a peer that is gone fails it anyway.
        let deadline = Instant::now() + CLOSE_DRAIN;
        let busy = |g: &Inner| {
            !g.deferred.is_empty()
                || !g.conns.ids(|c| c.state == ConnState::Up && (c.sq_used > 0 || !c.backlog.is_empty())).is_empty()
        };
        while busy(g) && Instant::now() < deadline {
            self.progress_locked(g);
            std::thread::yield_now();
        }
        g.closed = true;
        let cids = g.conns.ids(|_| true);
        for cid in cids {
            self.drop_conn(g, cid, Error::Canceled, 0);
        }
        g.msg_conn = None;
        while let Some((cid, f)) = g.deferred.pop_front() {
            g.eng.frame_failed(&g.b, cid, f, Error::Canceled);
        }
        // What no connection held: posted receives, unexpected messages.
        g.eng.close(&g.b, Error::Canceled);
        Self::cancel_pre_rx(g);
        g.fetching = Slab::new();
        g.pending_accept = None;
    }
}

fabric_util::bound!(VerbsEp);

impl EndpointOps for VerbsEp {
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
        if !self.rdm() {
            return Err(Error::Inval);
        }
        scaffold::bind_av(self, av)
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Ok(());
        }
        g.b.check_enable(self.rdm())?;
        if !self.rdm() && g.b.eq.is_none() {
            return Err(Error::NoEq);
        }
        if self.direct_eligible() {
            match Pool::new(&self.domain, direct::SCRATCH_BUFS) {
                Ok(p) => {
                    g.scratch = Some(p);
                    g.path = Path::Offered;
                }
                Err(e) => fi_log!(Level::Info, NAME, "ep_ctrl", "no scratch region ({e}): the engine's data path"),
            }
        }
        g.enabled = true;
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        if let Some(n) = self.name {
            return Ok(Address::from(n));
        }
        let g = self.lock();
        let c = g.msg_conn.and_then(|c| g.conns.get(c));
        match c.and_then(|c| c.id.local_addr()).or_else(|| g.pending_accept.as_ref().and_then(|i| i.local_addr())) {
            Some(a) => Ok(Address::from(a)),
            None => Err(Error::NotConn),
        }
    }

    fn setname(&self, _addr: &Address) -> Result<()> {
        Err(Error::OpNotSupp)
    }

    fn getpeer(&self) -> Result<Address> {
        if self.rdm() {
            return Err(Error::OpNotSupp);
        }
        let g = self.lock();
        let c = g.msg_conn.and_then(|c| g.conns.get(c));
        match c.and_then(|c| c.id.peer_addr()).or_else(|| g.pending_accept.as_ref().and_then(|i| i.peer_addr())) {
            Some(a) => Ok(Address::from(a)),
            None => Err(Error::NotConn),
        }
    }

    fn connect(&self, addr: &Address, param: &[u8]) -> Result<()> {
        if self.rdm() {
            return Err(Error::OpNotSupp);
        }
        if param.len() > CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let peer = addr.sockaddr().ok_or(Error::Inval)?;
        let mut g = self.lock();
        let g = &mut *g;
        if !g.enabled || g.closed {
            return Err(Error::OpBadState);
        }
        if g.msg_conn.is_some() || g.pending_accept.is_some() {
            return Err(Error::IsConn);
        }
        let kind = if g.path == Path::Offered { PD_MSG_DIRECT } else { PD_MSG };
        let cid = self.start_connect(g, peer, private_data(kind, param))?;
        g.msg_conn = Some(cid);
        Ok(())
    }

    fn accept(&self, param: &[u8]) -> Result<()> {
        if self.rdm() {
            return Err(Error::OpNotSupp);
        }
        if param.len() > CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        if !g.enabled || g.closed {
            return Err(Error::OpBadState);
        }
        let id = g.pending_accept.take().ok_or(Error::OpBadState)?;
        let peer = id.peer_addr();
        let cid = Self::add_conn(g, id, ConnState::Connecting, peer);
        g.msg_conn = Some(cid);
        // The data path: direct when both sides can (the request offered
        // it); set before the QP, whose receives depend on it.
        if g.path == Path::Offered && !g.peer_offered {
            self.choose_path(g, cid, false);
        }
        self.setup_qp(g, cid)?;
        let peer_direct = g.peer_offered;
        self.choose_path(g, cid, peer_direct);
        let kind = if g.path == Path::Direct { PD_MSG_DIRECT } else { PD_MSG };
        self.accept_conn(g, cid, &private_data(kind, param))
    }

    fn cm_data_size(&self) -> usize {
        CM_DATA_MAX
    }

    fn shutdown(&self) -> Result<()> {
        if self.rdm() {
            return Err(Error::OpNotSupp);
        }
        let mut g = self.lock();
        let g = &mut *g;
        match g.msg_conn.and_then(|c| g.conns.get(c)) {
            Some(c) => {
                c.id.disconnect();
                // Our side reports the shutdown too (the DISCONNECTED event).
                Ok(())
            }
            None => Err(Error::NotConn),
        }
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.send_common(op, flags, None)
    }

    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.recv_common(op, flags)
    }

    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > self.info.tx_attr.inject_size {
            return Err(Error::MsgSize);
        }
        self.send_common(op, flags, Some(data))
    }

    unsafe fn post_write(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        self.rma_common(op, flags, None, false)
    }

    unsafe fn post_read(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        self.rma_common(op, flags, None, true)
    }

    fn inject_write(&self, data: &[u8], op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > self.info.tx_attr.inject_size {
            return Err(Error::MsgSize);
        }
        self.rma_common(op, flags, Some(data), false)
    }

    unsafe fn post_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_common(op, flags)
    }

    fn cancel(&self, user_context: u64) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        // A receive of the direct path waiting for its connection; one on the
        // QP cannot be taken back (`direct.rs`).
        if Self::cancel_waiting(g, user_context) || g.eng.rx.cancel(&g.b, user_context) {
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
        let cqs = {
            let mut g = self.lock();
            self.close_locked(&mut g);
            [g.b.tx_cq.clone(), g.b.rx_cq.clone()]
        };
        // Outside the lock: the queues let go of the endpoint they hold since
        // `scaffold::bind_cq`.
        scaffold::unbind_cqs(self, &cqs);
        Ok(())
    }
}

// Every QP is gone once closed; the CQ and channel go with the fields.
fabric_util::close_on_drop!(VerbsEp);

/// An endpoint for the domain (what `domain.rs` calls).
pub(crate) fn new_ep(domain: Arc<VerbsDomain>, info: &Info) -> Result<Arc<dyn EndpointOps>> {
    let ep = VerbsEp::new(domain.clone(), info)?;
    domain.bind_auto_progress(ep.weak_progress())?;
    let ep: Arc<dyn EndpointOps> = ep;
    Ok(ep)
}

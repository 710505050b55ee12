//! verbs endpoints: MSG (one RC connection, made by the application through the
//! event queue) and RDM (RC connections made on demand, one per peer we send to,
//! as libfabric's rxm does over verbs). Both run the same data path over their
//! connections ([`Conn`]):
//!
//! | what | on the wire | completes |
//! |---|---|---|
//! | message <= [`EAGER_MAX`] | one SEND of a `wire` header and the payload (inline below the QP's inline limit, else from a registered bounce buffer) into one of the receiver's posted buffers | at its send completion |
//! | larger message | a SEND of `Rts` (header and the sender's pieces: address, length, remote key); the receiver, once matched, RDMA READs the pieces into the receive and SENDs `Cts` (done) or `Nack` (discarded) | at `Cts`/`Nack` |
//! | RMA write / read | one RDMA WRITE / READ (WRITE_WITH_IMM carries remote CQ data: a receive completion at the target) | at its completion |
//! | atomic: fetch-add, compare-swap of one 64-bit integer | native, when the device reports atomics | at its completion |
//! | other atomics | `AtomicReq` SEND; the target applies it (`fabric_util::atomic::serve`) and answers `RmaResp` | at the answer |
//!
//! Receives are matched in software (`fabric_util::rx::RxEngine`: tags, directed
//! receives, multi-receive, peek/claim), so both endpoint types have the full
//! receive semantics, and a message larger than its receive is truncated
//! (`FI_ETRUNC`) instead of breaking the QP. Every QP retries RNR for ever: a
//! sender waits, in the hardware, for the receiver to re-post its buffers.
//!
//! Receive buffers ([`BUF`] bytes each): an RDM endpoint posts [`NSRQ`] of them
//! to one shared receive queue that all its connections receive through (memory
//! per endpoint, none per peer), where the device has shared receive queues;
//! otherwise, and for a MSG endpoint, each connection posts [`NRX`] of its own.
//!
//! RDM connections: an endpoint listens on its address (IP and port: its name);
//! the first operation to a peer creates an identifier, resolves the address and
//! route, creates the QP and connects, sending our name in the private data so the
//! peer can report us as the source. Operations wait in the connection until it is
//! established. Each side sends its own operations over the connection it made
//! (so no connect race needs resolving); answers (`Cts`, `RmaResp`, reads of a
//! rendezvous) go back over the QP the request came on.
//!
//! Progress is manual: reading or waiting on a bound queue polls the endpoint's
//! `ibv_cq`, and its connection-manager and completion channels at most every
//! [`CTL_INTERVAL`]. A blocking wait (or a `trywait`) arms the CQ
//! (`ibv_req_notify_cq`) for one notification and sleeps on its completion
//! channel and the CM channel.

use crate::domain::VerbsDomain;
use crate::ibv::{self, CmEvent, CmId, Cq, EventChannel, QpCaps, QpPath, Srq};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op, RmaOp};
use fabric_core::{
    fi_log, Address, AtomicKind, AtomicOp, BindFlags, Caps, CqEntry, Datatype, EpType, EqErrEntry, EqEvent, Error,
    FiAddr, Info, OpFlags, Result,
};
use fabric_util::bind::Bindings;
use fabric_util::eq::UtilEq;
use fabric_util::matcher::MsgSpec;
use fabric_util::progress::{Progress, Waiter};
use fabric_util::rx::msg_flags;
use fabric_util::rx::{RxAction, RxEngine, Target, Unexp, UnexpBody, IOV_LIMIT};
use fabric_util::slab::Slab;
use fabric_util::wire::{AtomicHdr, HdrFlags, Header, OpCode, RmaDesc, HDR_LEN};
use rdma_sys as sys;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::RawFd;
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
const CTL_INTERVAL: Duration = Duration::from_micros(50);
/// Address and route resolution time-out.
const RESOLVE_MS: i32 = 2000;
/// The most connection data a connect, accept or reject carries
/// (`FI_OPT_CM_DATA_SIZE`): the private data of an RC connect request (56 bytes,
/// the smallest of the three) less our 5-byte header.
pub(crate) const CM_DATA_MAX: usize = 51;
// The private data of connections and the names in it (pure, in fabric-util so
// that they build and are fuzzed without libibverbs).
use fabric_util::verbs_wire::{decode_name, encode_name, PD_MSG, PD_RDM};
pub(crate) use fabric_util::verbs_wire::{private_data, strip_private};

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// Whether an address is one verbs endpoints use (a socket address).
pub(crate) fn is_verbs_addr(a: &Address) -> bool {
    a.sockaddr().is_some()
}

/// libfabric's error for a work completion status.
fn wc_error(status: u32) -> Error {
    use sys::ibv_wc_status::*;
    match status {
        IBV_WC_LOC_LEN_ERR | IBV_WC_REM_INV_REQ_ERR => Error::MsgSize,
        IBV_WC_LOC_PROT_ERR | IBV_WC_REM_ACCESS_ERR | IBV_WC_MW_BIND_ERR => Error::Access,
        IBV_WC_WR_FLUSH_ERR => Error::Canceled,
        IBV_WC_RETRY_EXC_ERR => Error::TimedOut,
        IBV_WC_RNR_RETRY_EXC_ERR => Error::ConnReset,
        IBV_WC_REM_OP_ERR | IBV_WC_REM_ABORT_ERR => Error::RemoteIo,
        _ => Error::Io,
    }
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

/// What a posted work request is, found again by its `wr_id` (a slab id).
enum WrKind {
    /// Receive buffer `slot` of its connection.
    Recv { slot: usize },
    /// Receive buffer `slot` of the endpoint's shared receive queue (the
    /// connection is the completion's QP).
    SharedRecv { slot: usize },
    /// A SEND of a frame: its bounce slot (none if inline), and the user
    /// operation it completes (0: none).
    Frame { slot: Option<usize>, op: u64 },
    /// An RDMA write or read, or a native atomic, of user operation `op`.
    Rma { op: u64 },
    /// A read of an incoming rendezvous message.
    RndvRead { rin: u64 },
}

/// A work request not yet posted (its connection is not up, or its send queue
/// is full), or being posted.
struct Post {
    opcode: u32,
    sges: Sges,
    inline: bool,
    raddr: u64,
    rkey: u32,
    imm: Option<u32>,
    compare_add: u64,
    swap: u64,
    /// Bytes an inline SEND carries: the SGE points at them, so they live here
    /// until the post copies them.
    _owned: Vec<u8>,
}

/// The scatter-gather entries of one work request, held inline (no allocation):
/// at most [`SGE_MAX`].
#[derive(Clone, Copy)]
struct Sges {
    v: [sys::ibv_sge; SGE_MAX],
    /// Entries used, `<= SGE_MAX`.
    n: usize,
}

/// The largest inline frame assembled on the stack when posted at once.
const STACK_INLINE: usize = 1024;

/// The most scatter-gather entries of a work request: an operation's pieces
/// plus one (a frame's header).
const SGE_MAX: usize = IOV_LIMIT + 1;

impl Sges {
    fn one(s: sys::ibv_sge) -> Sges {
        let mut v = Sges::none();
        v.v[0] = s;
        v.n = 1;
        v
    }

    fn none() -> Sges {
        Sges { v: [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; SGE_MAX], n: 0 }
    }

    /// Add one entry; `Err(Inval)` past [`SGE_MAX`].
    fn push(&mut self, s: sys::ibv_sge) -> Result<()> {
        let slot = self.v.get_mut(self.n).ok_or(Error::Inval)?;
        *slot = s;
        self.n += 1;
        Ok(())
    }
}

struct WrRec {
    /// The connection (0, which no slab id is, for a shared receive: its
    /// connection is the completion's QP).
    conn: u64,
    kind: WrKind,
    /// The request, until it is posted.
    post: Option<Post>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    /// Resolving the address and route (active side).
    Resolving,
    /// Connect or accept sent, not yet established.
    Connecting,
    Up,
}

/// One RC connection.
struct Conn {
    id: CmId,
    state: ConnState,
    /// The peer's endpoint name (RDM), or the peer's address (MSG).
    peer: Option<SocketAddr>,
    /// The peer's AV handle (RDM), valid for `av_version`.
    src: FiAddr,
    av_version: u64,
    /// Its receive buffers (once the QP exists), unless it receives through
    /// the endpoint's shared receive queue.
    rx: Option<Pool>,
    caps: QpCaps,
    qpn: u32,
    /// Send-queue entries in use.
    sq_used: u32,
    /// Work requests waiting for the connection or for room, in order.
    backlog: VecDeque<u64>,
    /// Private data to connect with, once the route is resolved.
    connect_data: Vec<u8>,
}

/// What a user operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Send,
    Write,
    Read,
    Atomic,
}

/// A user operation in flight.
struct TxOp {
    conn: u64,
    kind: OpKind,
    context: u64,
    flags: Caps,
    len: usize,
    /// No completion (inject): errors are only logged.
    silent: bool,
    /// Posted with `FI_COMPLETION` ([`Bindings::tx_done`]).
    comp: bool,
    /// Work requests (or answers) still to come.
    pending: u32,
    err: Option<(Error, i32)>,
    /// Where an atomic's prior values go.
    result: [IoVec; 1],
    /// A native atomic's result lands in this bounce slot first.
    result_slot: Option<usize>,
    /// Registrations made for this operation's buffers.
    tmp: Vec<ibv::Mr>,
}

// SAFETY: the pieces point into buffers the application handed over under the
// post methods' contracts (valid until the completion); they are only
// dereferenced under the endpoint's lock.
unsafe impl Send for TxOp {}

/// A rendezvous message announced to us: its connection, the sender's id and
/// its pieces (address, length, remote key).
#[derive(Debug)]
pub(crate) struct RtsRef {
    conn: u64,
    id: u64,
    pieces: Vec<(u64, u64, u32)>,
}

/// A rendezvous message being read.
struct RndvIn {
    conn: u64,
    id: u64,
    target: Target,
    hdr: Header,
    src: FiAddr,
    pending: u32,
    err: Option<(Error, i32)>,
    tmp: Vec<ibv::Mr>,
}

// SAFETY: as TxOp: the target's pieces are the application's posted receive.
unsafe impl Send for RndvIn {}

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
    rx: RxEngine<RtsRef>,
    rndv_in: Slab<RndvIn>,
    ops: Slab<TxOp>,
    wrs: Slab<WrRec>,
    /// Free bounce slots.
    tx_free: Vec<usize>,
    /// Answers waiting for a bounce slot: (connection, header, payload).
    deferred: VecDeque<(u64, Header, Vec<u8>)>,
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

/// The error a peer's answer (`Cts`, `Nack`, `RmaResp`) reports in `data`.
fn answer_err(hdr: &Header) -> Option<(Error, i32)> {
    (hdr.data != 0).then(|| (Error::from_errno(hdr.data.min(i32::MAX as u64) as i32), 0))
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
        let (listener, name) = if ep_type == EpType::Rdm {
            let want = info
                .src_addr
                .as_ref()
                .and_then(|a| a.sockaddr())
                .unwrap_or_else(|| SocketAddr::new(domain.port.iface.addr, 0));
            let id = CmId::new(&cm)?;
            id.bind(want).map_err(|e| {
                fi_log!(Level::Warn, NAME, "ep_ctrl", "rdma_bind_addr({want}) failed: {e}");
                Error::from(e)
            })?;
            id.listen(1024)?;
            let name = id.local_addr().ok_or(Error::AddrNotAvail)?;
            (Some(id), Some(name))
        } else {
            if let Some(h) = &info.handle {
                let req = h.0.downcast_ref::<crate::pep::ConnReq>().ok_or(Error::Inval)?;
                let id = req.take().ok_or(Error::Inval)?;
                id.migrate(&cm)?;
                pending_accept = Some(id);
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
                rx: RxEngine::new(BUF),
                rndv_in: Slab::new(),
                ops: Slab::new(),
                wrs: Slab::new(),
                tx_free: (0..NTX).rev().collect(),
                deferred: VecDeque::new(),
                connected: false,
                shut: false,
                async_tick: 0,
                last_ctl: Instant::now(),
                force_ctl: true,
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

    // ---- connections ------------------------------------------------------

    /// Register a new connection for identifier `id`.
    fn add_conn(g: &mut Inner, id: CmId, state: ConnState, peer: Option<SocketAddr>) -> u64 {
        let key = id.raw() as usize;
        let c = Conn {
            id,
            state,
            peer,
            src: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            rx: None,
            caps: QpCaps { send_wr: 0, recv_wr: 0, sge: 0, inline: 0 },
            qpn: 0,
            sq_used: 0,
            backlog: VecDeque::new(),
            connect_data: Vec::new(),
        };
        let cid = g.conns.insert(c);
        g.by_id.insert(key, cid);
        cid
    }

    /// Create connection `cid`'s QP and post its receive buffers.
    fn setup_qp(&self, g: &mut Inner, cid: u64) -> Result<()> {
        let want = QpCaps {
            send_wr: SQ_DEPTH,
            recv_wr: NRX as u32,
            sge: (IOV_LIMIT + 1).min(self.domain.port.max_sge.max(1) as usize) as u32,
            inline: self.inline_max as u32,
        };
        let srq = self.srx.as_ref().map(|x| &x.srq);
        let pool = if srq.is_some() { None } else { Some(Pool::new(&self.domain, NRX)?) };
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
        let qpn = c.qpn;
        g.by_qpn.insert(qpn, cid);
        if own {
            for slot in 0..NRX {
                self.post_recv_slot(g, cid, slot)?;
            }
        }
        Ok(())
    }

    /// Post buffer `slot` of the shared receive queue.
    fn post_shared_slot(&self, g: &mut Inner, slot: usize) -> Result<()> {
        let srx = self.srx.as_ref().ok_or(Error::NotConn)?;
        let wid = g.wrs.insert(WrRec { conn: 0, kind: WrKind::SharedRecv { slot }, post: None });
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
    fn post_recv_slot(&self, g: &mut Inner, cid: u64, slot: usize) -> Result<()> {
        let wid = g.wrs.insert(WrRec { conn: cid, kind: WrKind::Recv { slot }, post: None });
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

    /// RDM: our outgoing connection to `peer`, made if needed.
    fn conn_to(&self, g: &mut Inner, peer: SocketAddr) -> Result<u64> {
        if let Some(&cid) = g.by_peer.get(&peer) {
            if g.conns.get(cid).is_some() {
                return Ok(cid);
            }
        }
        let name = self.name.expect("an RDM endpoint has a name");
        let cid = self.start_connect(g, peer, private_data(PD_RDM, &encode_name(name)))?;
        g.by_peer.insert(peer, cid);
        Ok(cid)
    }

    /// Start a connection to `peer` (address resolution; the route, the QP and
    /// the connect with `connect_data` follow as the connection manager answers).
    fn start_connect(&self, g: &mut Inner, peer: SocketAddr, connect_data: Vec<u8>) -> Result<u64> {
        let id = CmId::new(&self.cm)?;
        let src = SocketAddr::new(self.domain.port.iface.addr, 0);
        let src = (src.is_ipv4() == peer.is_ipv4()).then_some(src);
        id.resolve_addr(src, peer, RESOLVE_MS).map_err(|e| {
            fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_resolve_addr({peer}) failed: {e}");
            Error::from(e)
        })?;
        let cid = Self::add_conn(g, id, ConnState::Resolving, Some(peer));
        if let Some(c) = g.conns.get_mut(cid) {
            c.connect_data = connect_data;
        }
        Ok(cid)
    }

    /// The connection a user operation to `addr` goes over.
    fn conn_for(&self, g: &mut Inner, addr: FiAddr) -> Result<u64> {
        if !self.rdm() {
            return match g.msg_conn {
                Some(c) if g.conns.get(c).is_some() => Ok(c),
                _ => Err(Error::NotConn),
            };
        }
        let av = g.b.av.as_ref().ok_or(Error::NoAv)?;
        let peer = av.with_addr(addr, |a| a.sockaddr()).flatten().ok_or_else(|| {
            fi_log!(Level::Info, NAME, "ep_data", "no address for fi_addr {addr:?}");
            Error::AddrNotAvail
        })?;
        self.conn_to(g, peer)
    }

    /// Forget connection `cid`: fail what waits on it with `err`, destroy its
    /// identifier and QP.
    fn drop_conn(&self, g: &mut Inner, cid: u64, err: Error, prov_errno: i32) {
        let Some(c) = g.conns.remove(cid) else { return };
        g.by_id.remove(&(c.id.raw() as usize));
        g.by_qpn.remove(&c.qpn);
        if let Some(p) = c.peer {
            if g.by_peer.get(&p) == Some(&cid) {
                g.by_peer.remove(&p);
            }
        }
        // Work requests of the connection: gone with its QP.
        for wid in g.wrs.ids(|w| w.conn == cid) {
            if let Some(w) = g.wrs.remove(wid) {
                if let WrKind::Frame { slot: Some(s), .. } = w.kind {
                    g.tx_free.push(s);
                }
            }
        }
        for opid in g.ops.ids(|o| o.conn == cid) {
            Self::finish_op(g, opid, Some((err, prov_errno)), true);
        }
        for rid in g.rndv_in.ids(|r| r.conn == cid) {
            if let Some(r) = g.rndv_in.remove(rid) {
                g.rx.fail(&g.b, r.target, &r.hdr, r.src, err);
            }
        }
        g.deferred.retain(|(c, _, _)| *c != cid);
        c.id.disconnect();
        drop(c);
    }

    // ---- posting -----------------------------------------------------------

    /// Queue or post work request `post` of kind `kind` on connection `cid`
    /// (at once when the connection can take it: nothing queued, room).
    fn submit(&self, g: &mut Inner, cid: u64, kind: WrKind, mut post: Post) {
        if Self::can_post_now(g, cid) {
            self.post_now(g, cid, kind, &mut post);
            return;
        }
        let wid = g.wrs.insert(WrRec { conn: cid, kind, post: Some(post) });
        if let Some(c) = g.conns.get_mut(cid) {
            c.backlog.push_back(wid);
        }
        self.drain_backlog(g, cid);
    }

    /// Whether connection `cid` takes a work request now: up, nothing waiting
    /// before it, room in its send queue.
    fn can_post_now(g: &Inner, cid: u64) -> bool {
        g.conns.get(cid).is_some_and(|c| c.state == ConnState::Up && c.backlog.is_empty() && c.sq_used < c.caps.send_wr)
    }

    /// Post `p` of kind `kind` on connection `cid` now; the caller checked
    /// [`VerbsEp::can_post_now`]. `p`'s memory need only live through the call.
    fn post_now(&self, g: &mut Inner, cid: u64, kind: WrKind, p: &mut Post) {
        let wid = g.wrs.insert(WrRec { conn: cid, kind, post: None });
        if let Some(c) = g.conns.get_mut(cid) {
            c.sq_used += 1;
        }
        self.post_wr(g, cid, wid, p);
    }

    /// Post work request `wid` (`p`) on connection `cid`, whose send-queue
    /// entry the caller counted; a failure completes it with the error.
    fn post_wr(&self, g: &mut Inner, cid: u64, wid: u64, p: &mut Post) {
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
            fi_log!(Level::Warn, NAME, "ep_data", "ibv_post_send failed: {e}");
            if let Some(c) = g.conns.get_mut(cid) {
                c.sq_used -= 1;
            }
            let errno = e.raw_os_error().unwrap_or(0);
            self.wr_done(g, wid, Some((Error::from(e), errno)));
        }
    }

    /// Post what waits on connection `cid`, while it is up and has room.
    fn drain_backlog(&self, g: &mut Inner, cid: u64) {
        loop {
            let Some(c) = g.conns.get_mut(cid) else { return };
            if c.state != ConnState::Up || c.sq_used >= c.caps.send_wr {
                return;
            }
            let Some(wid) = c.backlog.pop_front() else { return };
            c.sq_used += 1;
            let Some(rec) = g.wrs.get_mut(wid) else {
                if let Some(c) = g.conns.get_mut(cid) {
                    c.sq_used -= 1;
                }
                continue;
            };
            let Some(mut p) = rec.post.take() else { continue };
            self.post_wr(g, cid, wid, &mut p);
        }
    }

    /// The most bytes a work request on connection `cid` carries inline: what
    /// the endpoint allows and the connection's QP was granted (0 before the QP
    /// exists).
    fn inline_limit(&self, g: &Inner, cid: u64) -> usize {
        g.conns.get(cid).map_or(0, |c| self.inline_max.min(c.caps.inline as usize))
    }

    /// A bounce slot, if one is free (user operations leave [`TX_RESERVE`]).
    fn take_slot(g: &mut Inner, user: bool) -> Option<usize> {
        if user && g.tx_free.len() <= TX_RESERVE {
            return None;
        }
        g.tx_free.pop()
    }

    /// Send a frame (header, prefix bytes, payload gathered from `iov`) on
    /// connection `cid` for operation `op` (0: an answer of ours, which may use
    /// the bounce slots user operations leave). Inline when it fits, else through
    /// a bounce slot. `Err(Again)` when no slot is free.
    fn send_frame(&self, g: &mut Inner, cid: u64, hdr: &Header, prefix: &[u8], iov: &[IoVec], op: u64) -> Result<()> {
        let user = op != 0;
        let plen = IoVec::total(iov);
        let total = HDR_LEN + prefix.len() + plen;
        debug_assert!(total <= BUF);
        let inline = total <= self.inline_limit(g, cid);
        let slot = if inline { None } else { Some(Self::take_slot(g, user).ok_or(Error::Again)?) };
        // An inline frame posted at once is assembled on the stack (the post
        // copies it); one that must wait in the backlog, in `owned`.
        let now = Self::can_post_now(g, cid);
        let mut stack = [0u8; STACK_INLINE];
        let mut owned = Vec::new();
        let dst: *mut u8 = match slot {
            Some(s) => self.tx.slot(s),
            None if now && total <= STACK_INLINE => stack.as_mut_ptr(),
            None => {
                owned.resize(total, 0);
                owned.as_mut_ptr()
            }
        };
        // SAFETY: `dst` has room for `total` bytes (a bounce slot of BUF,
        // `stack` or `owned`); the iov pieces are valid for reads (post contract).
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.encode().as_ptr(), dst, HDR_LEN);
            std::ptr::copy_nonoverlapping(prefix.as_ptr(), dst.add(HDR_LEN), prefix.len());
            fabric_util::iov::gather(iov, 0, dst.add(HDR_LEN + prefix.len()), plen);
        }
        let lkey = self.tx.mr.lkey();
        let sge = sys::ibv_sge { addr: dst as u64, length: total as u32, lkey };
        let mut post = Post {
            opcode: sys::ibv_wr_opcode::IBV_WR_SEND,
            sges: Sges::one(sge),
            inline,
            raddr: 0,
            rkey: 0,
            imm: None,
            compare_add: 0,
            swap: 0,
            _owned: owned,
        };
        if now {
            // `stack` (if used) lives through the post, which copies it.
            self.post_now(g, cid, WrKind::Frame { slot, op }, &mut post);
        } else {
            self.submit(g, cid, WrKind::Frame { slot, op }, post);
        }
        Ok(())
    }

    /// Send an answer (`Cts`, `Nack`, `RmaResp`); deferred when no slot is free.
    fn answer(&self, g: &mut Inner, cid: u64, hdr: Header, payload: Vec<u8>) {
        let iov = [IoVec { base: payload.as_ptr() as *mut u8, len: payload.len() }];
        if self.send_frame(g, cid, &hdr, &[], &iov, 0).is_err() {
            g.deferred.push_back((cid, hdr, payload));
        }
    }

    /// The local key of `len` bytes at `base`: a region of the application's,
    /// or a registration made now and kept in `tmp` until the operation ends.
    fn lkey_for(&self, base: *mut u8, len: usize, remote_read: bool, tmp: &mut Vec<ibv::Mr>) -> Result<(u32, u32)> {
        if !remote_read {
            if let Some(r) = self.domain.find_region(base, len) {
                return Ok((r.lkey(), 0));
            }
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
    fn sges_for(&self, iov: &[IoVec], tmp: &mut Vec<ibv::Mr>) -> Result<Sges> {
        let mut v = Sges::none();
        for p in iov.iter().filter(|p| p.len > 0) {
            let (lkey, _) = self.lkey_for(p.base, p.len, false, tmp)?;
            v.push(sys::ibv_sge { addr: p.base as u64, length: p.len as u32, lkey })?;
        }
        Ok(v)
    }

    // ---- completions -------------------------------------------------------

    /// Operation `opid` has one answer or request less to wait for (with `err`);
    /// it completes when none is left (or at once with `now`).
    fn finish_op(g: &mut Inner, opid: u64, err: Option<(Error, i32)>, now: bool) {
        let Some(op) = g.ops.get_mut(opid) else { return };
        if op.err.is_none() {
            op.err = err;
        }
        op.pending = op.pending.saturating_sub(1);
        if op.pending > 0 && !now {
            return;
        }
        let Some(op) = g.ops.remove(opid) else { return };
        drop(op.tmp);
        if let Some(s) = op.result_slot {
            g.tx_free.push(s);
        }
        if op.silent {
            if let Some((e, _)) = op.err {
                fi_log!(Level::Info, NAME, "ep_data", "an inject failed: {e}");
            }
            g.b.tx_count(op.err.is_some());
            return;
        }
        let mut c = CqEntry::new(op.context, op.flags);
        c.len = op.len;
        match op.err {
            None => g.b.tx_done(c, op.comp),
            Some((err, prov_errno)) => g.b.tx_err_prov(c, err, prov_errno),
        }
    }

    /// Work request `wid` completed (with `err`).
    fn wr_done(&self, g: &mut Inner, wid: u64, err: Option<(Error, i32)>) {
        let Some(rec) = g.wrs.remove(wid) else { return };
        match rec.kind {
            WrKind::Recv { .. } | WrKind::SharedRecv { .. } => {}
            WrKind::Frame { slot, op } => {
                if let Some(s) = slot {
                    g.tx_free.push(s);
                }
                if op != 0 {
                    // An eager send completes here; a rendezvous announcement
                    // only when it failed (else at Cts/Nack).
                    let rndv = g.ops.get(op).is_some_and(|o| o.kind == OpKind::Send && o.pending > 1);
                    if err.is_some() || !rndv {
                        Self::finish_op(g, op, err, err.is_some());
                    } else if let Some(o) = g.ops.get_mut(op) {
                        o.pending -= 1;
                    }
                }
            }
            WrKind::Rma { op } => {
                if err.is_none() {
                    self.native_atomic_result(g, op);
                }
                Self::finish_op(g, op, err, false);
            }
            WrKind::RndvRead { rin } => {
                let Some(r) = g.rndv_in.get_mut(rin) else { return };
                if r.err.is_none() {
                    r.err = err;
                }
                r.pending = r.pending.saturating_sub(1);
                if r.pending == 0 {
                    let r = g.rndv_in.remove(rin).expect("present");
                    drop(r.tmp);
                    let mut h = Header::new(OpCode::Cts);
                    h.id = r.id;
                    h.data = r.err.map_or(0, |(e, _)| e.errno() as u64);
                    self.answer(g, r.conn, h, Vec::new());
                    match r.err {
                        None => g.rx.complete(&g.b, r.target, &r.hdr, r.src, false),
                        Some((e, _)) => g.rx.fail(&g.b, r.target, &r.hdr, r.src, e),
                    }
                }
            }
        }
        if let Some(c) = g.conns.get_mut(rec.conn) {
            c.sq_used = c.sq_used.saturating_sub(1);
        }
        self.drain_backlog(g, rec.conn);
    }

    /// Copy a native atomic's prior value from its bounce slot to the result.
    fn native_atomic_result(&self, g: &mut Inner, opid: u64) {
        let Some(op) = g.ops.get(opid) else { return };
        let (Some(s), r) = (op.result_slot, op.result[0]) else { return };
        if r.len == 0 {
            return;
        }
        // SAFETY: the slot holds the 8 bytes the device wrote; the result buffer
        // is valid for writes until the completion (post contract).
        unsafe { std::ptr::copy_nonoverlapping(self.tx.slot(s), r.base, r.len.min(8)) };
    }

    /// Handle one work completion.
    fn handle_wc(&self, g: &mut Inner, wc: &sys::ibv_wc) {
        let wid = wc.wr_id;
        let ok = wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS;
        let Some(rec) = g.wrs.get(wid) else { return };
        let cid = rec.conn;
        if let WrKind::SharedRecv { slot } = rec.kind {
            g.wrs.remove(wid);
            if wc.status == sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                return;
            }
            if !ok {
                fi_log!(Level::Info, NAME, "ep_data", "receive failed: {}", ibv::wc_status_str(wc.status));
            } else if let Some(&cid) = g.by_qpn.get(&wc.qp_num) {
                self.handle_recv(g, cid, slot, true, wc);
            }
            // A frame of a connection gone meanwhile is dropped; the buffer goes
            // back either way.
            if !g.closed {
                let _ = self.post_shared_slot(g, slot);
            }
            return;
        }
        if let WrKind::Recv { slot } = rec.kind {
            g.wrs.remove(wid);
            if !ok {
                if wc.status != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    fi_log!(Level::Info, NAME, "ep_data", "receive failed: {}", ibv::wc_status_str(wc.status));
                }
                return;
            }
            self.handle_recv(g, cid, slot, false, wc);
            if g.conns.get(cid).is_some() {
                let _ = self.post_recv_slot(g, cid, slot);
            }
            return;
        }
        let err = (!ok).then(|| {
            let st = wc.status;
            if st != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                fi_log!(
                    Level::Info,
                    NAME,
                    "ep_data",
                    "work request failed: {} (vendor error {:#x})",
                    ibv::wc_status_str(st),
                    wc.vendor_err
                );
            }
            (wc_error(st), st as i32)
        });
        self.wr_done(g, wid, err);
        if !ok && wc.status != sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
            // The QP is in the error state: the connection is unusable.
            let e = wc_error(wc.status);
            self.conn_failed(g, cid, if e == Error::Access { Error::Canceled } else { e }, wc.status as i32);
        }
    }

    /// Connection `cid` broke: RDM forgets it (the next operation reconnects); MSG
    /// reports a shutdown.
    fn conn_failed(&self, g: &mut Inner, cid: u64, err: Error, prov_errno: i32) {
        if self.rdm() {
            self.drop_conn(g, cid, err, prov_errno);
        } else {
            self.msg_down(g, err, prov_errno);
        }
    }

    /// The MSG connection is gone: report `FI_SHUTDOWN` once and fail what is in flight.
    fn msg_down(&self, g: &mut Inner, err: Error, prov_errno: i32) {
        if let Some(cid) = g.msg_conn.take() {
            self.drop_conn(g, cid, err, prov_errno);
        }
        if g.connected && !g.shut {
            g.shut = true;
            if let Some(eq) = &g.b.eq {
                eq.push(EqEvent::Shutdown { fid: self.fid });
            }
        }
    }

    /// The source of messages arriving on connection `cid`.
    fn src_of(g: &mut Inner, cid: u64) -> FiAddr {
        let Some(av) = g.b.av.clone() else { return FiAddr::NOTAVAIL };
        let Some(c) = g.conns.get_mut(cid) else { return FiAddr::NOTAVAIL };
        let v = av.version();
        if c.av_version != v {
            c.src = c.peer.and_then(|p| av.find(&Address::from(p))).unwrap_or(FiAddr::NOTAVAIL);
            c.av_version = v;
        }
        c.src
    }

    /// A frame arrived on connection `cid` in receive buffer `slot` of its own
    /// pool, or of the endpoint's shared pool when `shared`.
    fn handle_recv(&self, g: &mut Inner, cid: u64, slot: usize, shared: bool, wc: &sys::ibv_wc) {
        if wc.opcode == sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
            // SAFETY: the union holds the immediate data for this opcode.
            let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
            let src = Self::src_of(g, cid);
            g.rx.rma_data(&g.b, src, imm as u64);
            return;
        }
        let n = (wc.byte_len as usize).min(BUF);
        let r = if let Some(srx) = self.srx.as_ref().filter(|_| shared) {
            // SAFETY: the device wrote `n` bytes into this slot of the shared
            // pool, which lives as long as the endpoint; the slot is not
            // re-posted (and so not written) until this frame is handled.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(srx.pool.slot(slot), n) };
            self.handle_frame(g, cid, bytes)
        } else {
            // Held here while the frame is handled, so that its bytes stay valid
            // whatever handling does to the connection; put back after.
            let Some(pool) = g.conns.get_mut(cid).and_then(|c| c.rx.take()) else { return };
            // SAFETY: the device wrote `n` bytes into this slot of the pool, which
            // lives until the end of this block; the slot is not re-posted (and
            // so not written) until this frame is handled.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(pool.slot(slot), n) };
            let r = self.handle_frame(g, cid, bytes);
            if let Some(c) = g.conns.get_mut(cid) {
                c.rx = Some(pool);
            }
            r
        };
        if let Err(why) = r {
            fi_log!(Level::Warn, NAME, "ep_data", "protocol error from a peer ({why}): dropping the connection");
            self.conn_failed(g, cid, Error::Io, 0);
        }
    }

    fn handle_frame(&self, g: &mut Inner, cid: u64, bytes: &[u8]) -> std::result::Result<(), String> {
        let head: &[u8; HDR_LEN] = bytes.get(..HDR_LEN).and_then(|h| h.try_into().ok()).ok_or("short frame")?;
        let hdr = Header::decode(head, MAX_MSG as u64).map_err(|e| e.to_string())?;
        let body = &bytes[HDR_LEN..];
        match hdr.op {
            OpCode::Msg => {
                if body.len() as u64 != hdr.len {
                    return Err(format!("message of {} bytes carries {}", hdr.len, body.len()));
                }
                let src = Self::src_of(g, cid);
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                if let Some(target) = g.rx.match_arrival(&m, hdr.len) {
                    g.rx.write(&target, 0, body);
                    g.rx.complete(&g.b, target, &hdr, src, false);
                } else {
                    let mut buf = g.rx.unexp_buf(body.len()).map_err(|_| "no memory")?;
                    buf.clear();
                    buf.extend_from_slice(body);
                    let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                    let u = Unexp { body: UnexpBody::Eager(buf), len: hdr.len, data, tag: hdr.tag, rma: false };
                    g.rx.arrive(&g.b, m, u);
                }
            }
            OpCode::Rts => {
                let pieces: Vec<(u64, u64, u32)> = fabric_util::verbs_wire::decode_rts(body, hdr.len, IOV_LIMIT)?
                    .into_iter()
                    .map(|p| (p.addr, p.len, p.rkey))
                    .collect();
                let src = Self::src_of(g, cid);
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src, tag: hdr.tag };
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let r = RtsRef { conn: cid, id: hdr.id, pieces };
                let u = Unexp { body: UnexpBody::Rts(r), len: hdr.len, data, tag: hdr.tag, rma: false };
                g.rx.arrive(&g.b, m, u);
            }
            OpCode::Cts | OpCode::Nack => {
                if !g.ops.get(hdr.id).is_some_and(|o| o.conn == cid && o.kind == OpKind::Send) {
                    return Err(format!("completion of no message of ours ({:#x})", hdr.id));
                }
                Self::finish_op(g, hdr.id, answer_err(&hdr), true);
            }
            OpCode::AtomicReq => {
                let desc = RmaDesc::decode(body).ok_or("atomic without its target")?;
                let ah = AtomicHdr::decode(body.get(RmaDesc::LEN..).unwrap_or(&[])).ok_or("atomic without its op")?;
                let args = body.get(RmaDesc::LEN + AtomicHdr::LEN..).ok_or("short atomic")?;
                let mut result = Vec::new();
                let objs = &self.domain.objs;
                let r = fabric_util::atomic::serve(objs.mrs(), objs.atomic_lock(), desc, ah, args, &mut result)
                    .map_err(|w| w.to_string())?;
                let mut h = Header::new(OpCode::RmaResp);
                h.id = hdr.id;
                match r {
                    Ok(()) => h.len = result.len() as u64,
                    Err(e) => {
                        fi_log!(Level::Info, NAME, "ep_data", "refused a remote atomic: {e}");
                        h.data = e.errno() as u64;
                        result.clear();
                    }
                }
                self.answer(g, cid, h, result);
            }
            OpCode::RmaResp => {
                let Some(o) = g.ops.get(hdr.id).filter(|o| o.conn == cid && o.kind == OpKind::Atomic) else {
                    return Err(format!("an answer to no request of ours ({:#x})", hdr.id));
                };
                if hdr.data == 0 && o.result[0].len > 0 {
                    fabric_util::iov::copy_into(&o.result, o.result[0].len, 0, body);
                }
                Self::finish_op(g, hdr.id, answer_err(&hdr), false);
            }
            op => return Err(format!("frame {op:?} is not used over verbs")),
        }
        Ok(())
    }

    /// Start reading a matched rendezvous message.
    fn start_read(&self, g: &mut Inner, m: fabric_util::rx::RtsMatch<RtsRef>) {
        let cid = m.rts.conn;
        if g.conns.get(cid).is_none() {
            g.rx.fail(&g.b, m.target, &m.hdr, m.src, Error::ConnReset);
            return;
        }
        let mut local = [NULL_IOV; IOV_LIMIT];
        let nl = g.rx.pieces(&m.target, 0, m.hdr.len, &mut local);
        let want: u64 = local[..nl].iter().map(|p| p.len as u64).sum();
        let mut r = RndvIn {
            conn: cid,
            id: m.rts.id,
            target: m.target,
            hdr: m.hdr,
            src: m.src,
            pending: 0,
            err: None,
            tmp: Vec::new(),
        };
        // Local pieces with keys.
        let mut lsges = Vec::new();
        for p in local[..nl].iter().filter(|p| p.len > 0) {
            match self.lkey_for(p.base, p.len, false, &mut r.tmp) {
                Ok((lkey, _)) => lsges.push((p.base as u64, p.len as u64, lkey)),
                Err(e) => {
                    r.err = Some((e, 0));
                    break;
                }
            }
        }
        // One READ per (remote piece, local piece) overlap: walk both lists.
        let mut posts = Vec::new();
        if r.err.is_none() {
            let (mut li, mut loff) = (0usize, 0u64);
            let mut left = want;
            for &(raddr, rlen, rkey) in &m.rts.pieces {
                let mut roff = 0u64;
                while roff < rlen && left > 0 && li < lsges.len() {
                    let (laddr, llen, lkey) = lsges[li];
                    let n = (rlen - roff).min(llen - loff).min(left);
                    posts.push(Post {
                        opcode: sys::ibv_wr_opcode::IBV_WR_RDMA_READ,
                        sges: Sges::one(sys::ibv_sge { addr: laddr + loff, length: n as u32, lkey }),
                        inline: false,
                        raddr: raddr + roff,
                        rkey,
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
        r.pending = posts.len() as u32;
        let rin = g.rndv_in.insert(r);
        if posts.is_empty() {
            // Nothing to read (an empty or fully truncated message, or an error).
            let r = g.rndv_in.get_mut(rin).expect("inserted");
            r.pending = 1;
            let wid = g.wrs.insert(WrRec { conn: cid, kind: WrKind::RndvRead { rin }, post: None });
            if let Some(c) = g.conns.get_mut(cid) {
                c.sq_used += 1;
            }
            self.wr_done(g, wid, None);
            return;
        }
        for p in posts {
            self.submit(g, cid, WrKind::RndvRead { rin }, p);
        }
    }

    /// Put the receive engine's actions on the wire, and deferred answers.
    fn run_actions(&self, g: &mut Inner) {
        while let Some(a) = g.rx.take_action() {
            match a {
                RxAction::Start(m) => self.start_read(g, m),
                RxAction::Discard(r) => {
                    let mut h = Header::new(OpCode::Nack);
                    h.id = r.id;
                    self.answer(g, r.conn, h, Vec::new());
                }
            }
        }
        while let Some((cid, h, p)) = g.deferred.pop_front() {
            let iov = [IoVec { base: p.as_ptr() as *mut u8, len: p.len() }];
            if self.send_frame(g, cid, &h, &[], &iov, 0).is_err() {
                g.deferred.push_front((cid, h, p));
                break;
            }
        }
    }

    // ---- connection manager -------------------------------------------------

    fn handle_cm(&self, g: &mut Inner, ev: CmEvent) {
        use sys::rdma_cm_event_type::*;
        if ev.kind == RDMA_CM_EVENT_CONNECT_REQUEST {
            // SAFETY: the identifier a connection request created is ours to own.
            let id = unsafe { CmId::from_request(&ev) };
            self.incoming(g, id, &ev.data);
            return;
        }
        let Some(&cid) = g.by_id.get(&(ev.id as usize)) else {
            if ev.kind != RDMA_CM_EVENT_TIMEWAIT_EXIT {
                fi_log!(Level::Debug, NAME, "ep_ctrl", "{} for no connection", ibv::cm_event_str(ev.kind));
            }
            return;
        };
        match ev.kind {
            RDMA_CM_EVENT_ADDR_RESOLVED => {
                let r = g.conns.get(cid).map(|c| c.id.resolve_route(RESOLVE_MS));
                if let Some(Err(e)) = r {
                    self.connect_failed(g, cid, Error::from(e), 0, Vec::new());
                }
            }
            RDMA_CM_EVENT_ROUTE_RESOLVED => {
                if let Err(e) = self.setup_qp(g, cid) {
                    self.connect_failed(g, cid, e, 0, Vec::new());
                    return;
                }
                let c = g.conns.get_mut(cid).expect("present");
                c.state = ConnState::Connecting;
                let port = &self.domain.port;
                if let Err(e) = c.id.connect(&c.connect_data, port.max_rd_atomic, port.max_init_rd_atomic) {
                    fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_connect failed: {e}");
                    self.connect_failed(g, cid, Error::from(e), 0, Vec::new());
                }
            }
            RDMA_CM_EVENT_CONNECT_RESPONSE => {
                // Active side: our QP goes to RTS, then the passive side hears
                // we are ready (librdmacm reports no ESTABLISHED after this).
                let offered = (ev.responder_resources, ev.initiator_depth);
                let r = self.ready_qp(g, cid, offered).and_then(|_| {
                    let c = g.conns.get(cid).ok_or(Error::NotConn)?;
                    c.id.establish().map_err(|e| {
                        fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_establish failed: {e}");
                        Error::from(e)
                    })
                });
                match r {
                    Ok(()) => self.established(g, cid, &ev.data),
                    Err(e) => self.connect_failed(g, cid, e, 0, Vec::new()),
                }
            }
            RDMA_CM_EVENT_ESTABLISHED => self.established(g, cid, &ev.data),
            RDMA_CM_EVENT_REJECTED => {
                let data = strip_private(&ev.data).map(|(_, d)| d.to_vec()).unwrap_or_default();
                self.connect_failed(g, cid, Error::ConnRefused, ev.status, data);
            }
            RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                fi_log!(Level::Info, NAME, "ep_ctrl", "{} (status {})", ibv::cm_event_str(ev.kind), ev.status);
                let e = if ev.kind == RDMA_CM_EVENT_CONNECT_ERROR { Error::ConnRefused } else { Error::HostUnreach };
                self.connect_failed(g, cid, e, ev.status, Vec::new());
            }
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                if self.rdm() {
                    self.drop_conn(g, cid, Error::ConnReset, 0);
                } else {
                    self.msg_down(g, Error::ConnReset, 0);
                }
            }
            _ => {}
        }
    }

    /// Connection `cid` is up (`data`: the private data that came with it).
    fn established(&self, g: &mut Inner, cid: u64, data: &[u8]) {
        if let Some(c) = g.conns.get_mut(cid) {
            c.state = ConnState::Up;
        }
        if !self.rdm() && g.msg_conn == Some(cid) && !g.connected {
            g.connected = true;
            let data = strip_private(data).map(|(_, d)| d.to_vec()).unwrap_or_default();
            if let Some(eq) = &g.b.eq {
                eq.push(EqEvent::Connected { fid: self.fid, data });
            }
        }
        self.drain_backlog(g, cid);
    }

    /// Move connection `cid`'s QP to RTS with the domain's GID index and the
    /// read/atomic depths both sides allow (`offered`: the peer's, from our side:
    /// responder resources, initiator depth); the depths used.
    fn ready_qp(&self, g: &mut Inner, cid: u64, offered: (u8, u8)) -> Result<QpPath> {
        let port = &self.domain.port;
        let want = QpPath {
            sgid_index: port.gid_index.min(u8::MAX as u32) as u8,
            cm_sgid_index: 0,
            responder_resources: port.max_rd_atomic.min(offered.0),
            initiator_depth: port.max_init_rd_atomic.min(offered.1),
        };
        let c = g.conns.get(cid).ok_or(Error::NotConn)?;
        c.id.ready(&want, port.infiniband).map_err(|e| {
            fi_log!(
                Level::Warn,
                NAME,
                "ep_ctrl",
                "QP {:#x}: cannot move it to RTS (GID index {}, reads/atomics {} in, {} out): {e}",
                c.qpn,
                want.sgid_index,
                want.responder_resources,
                want.initiator_depth
            );
            Error::from(e)
        })?;
        match c.id.path() {
            Ok(p) => fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "QP {:#x} to {}: GID index {} (the connection manager's: {}), reads/atomics {} in, {} out, inline {}",
                c.qpn,
                c.peer.map_or_else(|| "?".to_string(), |p| p.to_string()),
                p.sgid_index,
                p.cm_sgid_index,
                p.responder_resources,
                p.initiator_depth,
                c.caps.inline
            ),
            Err(e) => fi_log!(Level::Debug, NAME, "ep_ctrl", "ibv_query_qp failed: {e}"),
        }
        Ok(want)
    }

    /// A connection attempt failed: fail what waits on it; MSG reports an EQ error.
    fn connect_failed(&self, g: &mut Inner, cid: u64, err: Error, status: i32, data: Vec<u8>) {
        let established_before = g.conns.get(cid).is_some_and(|c| c.state == ConnState::Up);
        if self.rdm() {
            self.drop_conn(g, cid, err, status);
            return;
        }
        if established_before {
            self.msg_down(g, err, status);
            return;
        }
        if let Some(c) = g.msg_conn.take() {
            self.drop_conn(g, c, err, status);
        }
        if let Some(eq) = &g.b.eq {
            eq.push_err(EqErrEntry { fid: self.fid, err, prov_errno: status, data });
        }
    }

    /// Passive side: ready connection `cid`'s QP (set up) and accept with `data`.
    fn accept_conn(&self, g: &mut Inner, cid: u64, data: &[u8]) -> Result<()> {
        let offered = g.conns.get(cid).ok_or(Error::NotConn)?.id.offered();
        let path = self.ready_qp(g, cid, offered)?;
        let c = g.conns.get(cid).ok_or(Error::NotConn)?;
        c.id.accept(data, path.responder_resources, path.initiator_depth).map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "rdma_accept failed: {e}");
            Error::from(e)
        })
    }

    /// RDM: a peer connects to us.
    fn incoming(&self, g: &mut Inner, id: CmId, data: &[u8]) {
        let peer = match strip_private(data) {
            Some((PD_RDM, rest)) => decode_name(rest),
            _ => None,
        };
        if !self.rdm() || peer.is_none() || g.closed {
            let _ = id.reject(&[]);
            return;
        }
        let cid = Self::add_conn(g, id, ConnState::Connecting, peer);
        if let Err(e) = self.setup_qp(g, cid) {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "cannot accept a connection: {e}");
            if let Some(c) = g.conns.get(cid) {
                let _ = c.id.reject(&[]);
            }
            self.drop_conn(g, cid, e, 0);
            return;
        }
        let r = self.accept_conn(g, cid, &private_data(PD_RDM, &[]));
        if let Err(e) = r {
            self.drop_conn(g, cid, e, 0);
        }
    }

    // ---- progress ----------------------------------------------------------

    fn progress_locked(&self, g: &mut Inner) {
        // The control channels cost a system call each to read, even empty;
        // a polling loop reads them every CTL_INTERVAL, not on every poll.
        let now = Instant::now();
        let ctl = g.force_ctl || now.duration_since(g.last_ctl) >= CTL_INTERVAL;
        if ctl {
            g.force_ctl = false;
            g.last_ctl = now;
            while let Some(ev) = self.cm.next() {
                self.handle_cm(g, ev);
            }
            // Notifications of an armed CQ (armed only before a sleep or a
            // trywait: an armed CQ costs an event per completion) are consumed
            // and not asked for again; the polling below finds the completions.
            let mut cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
            cq.drain_events();
        }
        let mut wcs: [sys::ibv_wc; 32] = std::array::from_fn(|_| ibv::empty_wc());
        loop {
            let n = {
                let cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
                cq.poll(&mut wcs).unwrap_or(0)
            };
            for wc in &wcs[..n] {
                self.handle_wc(g, wc);
            }
            if n < wcs.len() {
                if n == 0 {
                    g.async_tick += 1;
                }
                break;
            }
        }
        self.run_actions(g);
        if g.async_tick >= 1024 {
            g.async_tick = 0;
            self.async_events(g);
        }
    }

    /// The device's asynchronous events about our QPs: errors break their
    /// connections, with the event type as the provider error.
    fn async_events(&self, g: &mut Inner) {
        let mine = self.domain.take_async(&|q| g.by_qpn.contains_key(&q));
        for (t, qpn) in mine {
            use sys::ibv_event_type as E;
            let fatal = [E::IBV_EVENT_QP_FATAL, E::IBV_EVENT_QP_REQ_ERR, E::IBV_EVENT_QP_ACCESS_ERR];
            if t == E::IBV_EVENT_COMM_EST as u32 {
                if let Some(c) = g.by_qpn.get(&qpn).and_then(|&cid| g.conns.get(cid)) {
                    c.id.notify_established();
                }
            } else if fatal.iter().any(|e| *e as u32 == t) {
                let (name, _) = ibv::async_event_str(t);
                fi_log!(Level::Warn, NAME, "ep_ctrl", "QP {qpn:#x}: {name} ({t})");
                if let Some(&cid) = g.by_qpn.get(&qpn) {
                    if let Some(eq) = &g.b.eq {
                        eq.push_err(EqErrEntry {
                            fid: self.fid,
                            err: Error::Io,
                            prov_errno: t as i32,
                            data: Vec::new(),
                        });
                    }
                    self.conn_failed(g, cid, Error::Io, t as i32);
                }
            }
        }
    }

    fn check_ready(&self, g: &Inner) -> Result<()> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if !self.rdm() && g.msg_conn.is_none() {
            return Err(Error::NotConn);
        }
        Ok(())
    }

    // ---- operations ----------------------------------------------------------

    fn new_op(conn: u64, kind: OpKind, context: u64, flags: Caps, len: usize, silent: bool, comp: bool) -> TxOp {
        TxOp {
            conn,
            kind,
            context,
            flags,
            len,
            silent,
            comp,
            pending: 1,
            err: None,
            result: [NULL_IOV],
            result_slot: None,
            tmp: Vec::new(),
        }
    }

    fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        let max = if self.rdm() { MAX_MSG } else { self.info.ep_attr.max_msg_size };
        if len > max {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g)?;
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        self.progress_locked(g);
        let cid = self.conn_for(g, op.addr)?;
        let tagged = flags.contains(OpFlags::TAGGED);
        let mut hdr = Header::new(OpCode::Msg);
        hdr.len = len as u64;
        hdr.tag = op.tag;
        let mut hf = if tagged { HdrFlags::TAGGED } else { 0 };
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            hf |= HdrFlags::CQ_DATA;
            hdr.data = op.data;
        }
        hdr.flags = HdrFlags(hf);
        let (silent, comp) = (inject.is_some(), flags.contains(OpFlags::COMPLETION));
        let txop = Self::new_op(cid, OpKind::Send, op.context, msg_flags(tagged) | Caps::SEND, len, silent, comp);
        let iov_inj;
        let iov: &[IoVec] = match inject {
            Some(d) => {
                iov_inj = [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }];
                &iov_inj
            }
            None => op.iov,
        };
        // FI_DELIVERY_COMPLETE: by rendezvous whatever the size. Its sender
        // completes on the receiver's `Cts`, which the receiver sends once its
        // reads of the data are done, so the data is in the receive by then.
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        if len <= EAGER_MAX && !dc {
            let opid = g.ops.insert(txop);
            if let Err(e) = self.send_frame(g, cid, &hdr, &[], iov, opid) {
                g.ops.remove(opid);
                return Err(e);
            }
            return Ok(());
        }
        // Rendezvous: announce the pieces; the receiver reads them.
        let mut txop = txop;
        txop.pending = 2; // the announcement's send completion, then Cts/Nack
        let mut prefix = vec![0u8];
        for p in op.iov.iter().filter(|p| p.len > 0) {
            let (_, rkey) = self.lkey_for(p.base, p.len, true, &mut txop.tmp)?;
            prefix[0] += 1;
            prefix.extend_from_slice(&(p.base as u64).to_le_bytes());
            prefix.extend_from_slice(&(p.len as u64).to_le_bytes());
            prefix.extend_from_slice(&rkey.to_le_bytes());
        }
        hdr.op = OpCode::Rts;
        let opid = g.ops.insert(txop);
        hdr.id = opid;
        if let Err(e) = self.send_frame(g, cid, &hdr, &prefix, &[], opid) {
            g.ops.remove(opid);
            return Err(e);
        }
        Ok(())
    }

    fn recv_common(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if g.b.rx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let src = if self.rdm() { op.addr } else { FiAddr::UNSPEC };
        g.rx.post(&g.b, op, flags, src)?;
        self.run_actions(g);
        Ok(())
    }

    fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, read: bool) -> Result<()> {
        if op.iov.len() > IOV_LIMIT || op.rma.len() != 1 {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if len > self.info.ep_attr.max_msg_size || (op.rma[0].len as u64) < len as u64 && op.rma[0].len != 0 {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g)?;
        if inject.is_none() && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        self.progress_locked(g);
        let cid = self.conn_for(g, op.addr)?;
        let (silent, comp) = (inject.is_some(), flags.contains(OpFlags::COMPLETION));
        let (kind, caps) =
            if read { (OpKind::Read, Caps::RMA | Caps::READ) } else { (OpKind::Write, Caps::RMA | Caps::WRITE) };
        let mut txop = Self::new_op(cid, kind, op.context, caps, len, silent, comp);
        let mut owned = Vec::new();
        let mut inline = false;
        let inline_max = self.inline_limit(g, cid);
        let sges = match inject {
            Some(d) if !read && d.len() <= inline_max => {
                inline = true;
                owned.extend_from_slice(d);
                Sges::one(sys::ibv_sge { addr: owned.as_ptr() as u64, length: d.len() as u32, lkey: 0 })
            }
            Some(d) => {
                let s = Self::take_slot(g, true).ok_or(Error::Again)?;
                // SAFETY: the slot holds BUF bytes; injects are at most the inject size.
                unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), self.tx.slot(s), d.len().min(BUF)) };
                txop.result_slot = Some(s);
                Sges::one(sys::ibv_sge {
                    addr: self.tx.slot(s) as u64,
                    length: d.len().min(BUF) as u32,
                    lkey: self.tx.mr.lkey(),
                })
            }
            None if !read && len <= inline_max && len > 0 => {
                inline = true;
                owned.resize(len, 0);
                // SAFETY: the pieces are valid for reads (post contract); `owned` has room.
                unsafe { fabric_util::iov::gather(op.iov, 0, owned.as_mut_ptr(), len) };
                Sges::one(sys::ibv_sge { addr: owned.as_ptr() as u64, length: len as u32, lkey: 0 })
            }
            None => self.sges_for(op.iov, &mut txop.tmp)?,
        };
        let (opcode, imm) = if read {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_READ, None)
        } else if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM, Some(op.data as u32))
        } else {
            (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, None)
        };
        let post = Post {
            opcode,
            sges,
            inline,
            raddr: op.rma[0].addr,
            rkey: op.rma[0].key as u32,
            imm,
            compare_add: 0,
            swap: 0,
            _owned: owned,
        };
        let opid = g.ops.insert(txop);
        self.submit(g, cid, WrKind::Rma { op: opid }, post);
        Ok(())
    }

    fn atomic_common(&self, a: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let comp = flags.contains(OpFlags::COMPLETION);
        let l = fabric_util::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g)?;
        if g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        self.progress_locked(g);
        let cid = self.conn_for(g, a.addr)?;
        let mut txop = Self::new_op(cid, OpKind::Atomic, a.context, Caps::ATOMIC | Caps::WRITE, 0, false, comp);
        if a.kind != AtomicKind::Plain {
            txop.flags = Caps::ATOMIC | Caps::READ;
            txop.result = [a.result];
        }
        let int64 = matches!(a.datatype, Datatype::Uint64 | Datatype::Int64);
        let native = self.domain.port.atomics
            && int64
            && a.count == 1
            && a.rma.addr % 8 == 0
            && matches!((a.op, a.kind), (AtomicOp::Sum, AtomicKind::Fetch) | (AtomicOp::Cswap, AtomicKind::Compare));
        if native {
            let s = Self::take_slot(g, true).ok_or(Error::Again)?;
            txop.result_slot = Some(s);
            // SAFETY: operand and compare hold one 8-byte element (lens checked
            // the count), valid for reads (post contract).
            let operand = unsafe { std::ptr::read_unaligned(a.operand.base as *const u64) };
            let (opcode, compare_add, swap) = if a.op == AtomicOp::Sum {
                (sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD, operand, 0)
            } else {
                // SAFETY: as above for the compare operand.
                let cmp = unsafe { std::ptr::read_unaligned(a.compare.base as *const u64) };
                (sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP, cmp, operand)
            };
            let post = Post {
                opcode,
                sges: Sges::one(sys::ibv_sge { addr: self.tx.slot(s) as u64, length: 8, lkey: self.tx.mr.lkey() }),
                inline: false,
                raddr: a.rma.addr,
                rkey: a.rma.key as u32,
                imm: None,
                compare_add,
                swap,
                _owned: Vec::new(),
            };
            let opid = g.ops.insert(txop);
            self.submit(g, cid, WrKind::Rma { op: opid }, post);
            return Ok(());
        }
        // Emulated: the target applies it.
        if l.operand > fabric_util::wire::ATOMIC_MAX || HEAD_MAX + l.operand + l.compare > BUF {
            return Err(Error::MsgSize);
        }
        let mut prefix = Vec::with_capacity(RmaDesc::LEN + AtomicHdr::LEN);
        prefix.extend_from_slice(&RmaDesc { addr: a.rma.addr, key: a.rma.key }.encode());
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        prefix.extend_from_slice(
            &AtomicHdr { op: a.op as u8, datatype: a.datatype as u8, kind, count: a.count as u32 }.encode(),
        );
        let mut iov = Vec::new();
        if l.operand > 0 {
            iov.push(IoVec { base: a.operand.base, len: l.operand });
        }
        if l.compare > 0 {
            iov.push(IoVec { base: a.compare.base, len: l.compare });
        }
        txop.pending = 2; // the request's send completion, then the answer
        let opid = g.ops.insert(txop);
        let mut hdr = Header::new(OpCode::AtomicReq);
        hdr.id = opid;
        hdr.len = (prefix.len() + l.operand + l.compare) as u64;
        if let Err(e) = self.send_frame(g, cid, &hdr, &prefix, &iov, opid) {
            g.ops.remove(opid);
            return Err(e);
        }
        Ok(())
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        g.closed = true;
        let cids = g.conns.ids(|_| true);
        for cid in cids {
            self.drop_conn(g, cid, Error::Canceled, 0);
        }
        g.msg_conn = None;
        g.rx.fail_all_posted(&g.b, Error::Canceled);
        g.rx.drain_unexpected().for_each(drop);
        g.pending_accept = None;
    }
}

impl Progress for VerbsEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.wait.fd())
    }

    fn prepare_sleep(&self) {
        // Armed as for a trywait; the progress before the sleep reads every
        // channel.
        self.trywait();
    }

    fn end_sleep(&self) {
        self.lock().force_ctl = true;
    }

    fn trywait(&self) {
        // One notification at the next completion, and the next progress reads
        // the channels whatever the time.
        let cq = self.cq.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cq.arm();
        drop(cq);
        self.lock().force_ctl = true;
    }
}

impl EndpointOps for VerbsEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = self.domain.objs.find_cq(cq.fid()).ok_or(Error::Domain)?;
        self.lock().b.set_cq(&ucq, flags)?;
        ucq.bind(self.weak_progress())
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        let c = self.domain.objs.find_cntr(cntr.fid()).ok_or(Error::Domain)?;
        self.lock().b.set_cntr(&c, flags);
        c.bind(self.weak_progress())
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        let e: Arc<UtilEq> = self.domain.fabric().find_eq(eq.fid()).ok_or(Error::Domain)?;
        self.lock().b.eq = Some(e.clone());
        e.bind(self.weak_progress())
    }

    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        if !self.rdm() {
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
        g.b.check_enable(self.rdm())?;
        if !self.rdm() && g.b.eq.is_none() {
            return Err(Error::NoEq);
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
        let cid = self.start_connect(g, peer, private_data(PD_MSG, param))?;
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
        self.setup_qp(g, cid)?;
        self.accept_conn(g, cid, &private_data(PD_MSG, param))
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
        if g.rx.cancel(&g.b, user_context) {
            Ok(())
        } else {
            Err(Error::NoEnt)
        }
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.lock().rx.set_min_multi_recv(bytes);
        Ok(())
    }

    fn set_rx_cq_data(&self, takes_recv: bool) -> Result<()> {
        self.lock().rx.set_rma_data_takes_recv(takes_recv);
        Ok(())
    }

    fn close(&self) -> Result<()> {
        let mut g = self.lock();
        self.close_locked(&mut g);
        Ok(())
    }
}

impl Drop for VerbsEp {
    fn drop(&mut self) {
        let mut g = self.lock();
        self.close_locked(&mut g);
        // Every QP is gone; the CQ and channel go with the fields.
    }
}

/// An endpoint for the domain (what `domain.rs` calls).
pub(crate) fn new_ep(domain: Arc<VerbsDomain>, info: &Info) -> Result<Arc<dyn EndpointOps>> {
    let ep = VerbsEp::new(domain.clone(), info)?;
    domain.bind_auto_progress(ep.weak_progress())?;
    let ep: Arc<dyn EndpointOps> = ep;
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_statuses_map_to_libfabric_errors() {
        use sys::ibv_wc_status::*;
        assert_eq!(wc_error(IBV_WC_REM_ACCESS_ERR), Error::Access);
        assert_eq!(wc_error(IBV_WC_WR_FLUSH_ERR), Error::Canceled);
        assert_eq!(wc_error(IBV_WC_RETRY_EXC_ERR), Error::TimedOut);
        assert_eq!(wc_error(IBV_WC_LOC_LEN_ERR), Error::MsgSize);
        assert_eq!(wc_error(IBV_WC_GENERAL_ERR), Error::Io);
    }
}

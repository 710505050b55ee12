//! shm RDM endpoints: the endpoint, its state, and the entry points of its operations.
//!
//! Each endpoint owns a segment (its name is its address). To send to a peer, it
//! attaches to the peer's segment and claims a slot there ([`TxPath`]); what a peer
//! sends arrives in the slot it claimed in ours ([`RxPath`]). Progress polls the
//! rings of the claimed slots of our segment, so a poll costs one cache-line read
//! per active peer and no system call.
//!
//! Payloads: up to [`INLINE_MAX`] bytes inline in the entry; up to
//! [`BOUNCE_SIZE`] in one of the sender's bounce buffers. These sends complete
//! once the entry is in the peer's ring: at once, or, when the ring is full or no
//! bounce buffer is free, when progress moves them there from the queue that
//! holds a copy meanwhile ([`Pending`]; an inject, which has no completion, is
//! counted at once, and closing waits for it to go out), so that a completed send
//! reaches the peer even if we close or exit right after. Larger, the sender lists its pieces and the receiver
//! copies them across address spaces once matched (`process_vm_readv`), then
//! acknowledges, which completes the send. Without cross-memory attach the
//! receiver answers `Cts` and the sender streams bounce-buffer chunks. RMA works
//! the same way with the target doing the copy after checking the key, bounds and
//! access; atomics carry their operands and results inline or in a bounce buffer.
//!
//! Files, by operation class as in libfabric's `prov/shm/src`: this one holds the
//! endpoint ([`ShmEp`]), its state and what it keeps per peer and per operation,
//! its construction, the completion of operations, closing, and the
//! [`EndpointOps`] implementation, which hands each operation to `msg` (sends,
//! receives and the receive side of messages), `rma` (writes and reads, initiator
//! and target) or `atomic`. `progress` polls the rings and dispatches what arrives;
//! `conn` holds the paths to a peer (attaching, queueing entries, wake-ups,
//! noticing it died); `cocopy` the large copies shared with the sender and `stream`
//! the transfers as bounce-buffer chunks when cross-memory attach is not allowed.

mod atomic;
mod cocopy;
mod conn;
mod msg;
mod progress;
mod rma;
mod stream;

use crate::attr::{IOV_LIMIT, SCHEME};
use crate::config;
use crate::domain::ShmDomain;
use crate::proto::{Entry, Mode, INLINE_MAX};
use crate::ring::{Consumer, Producer, ENTRY_PAYLOAD};
use crate::segment::{self, Segment, Waker, BOUNCE_COUNT, BOUNCE_SIZE, JOBS, SLOTS};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op, RmaOp};
use fabric_core::sync::{SpinGuard, SpinLock};
use fabric_core::{fi_log, Address, BindFlags, Caps, CqEntry, EpType, Error, FiAddr, Info, OpFlags, Result, WaitObj};
use fabric_util::bind::Bindings;
use fabric_util::progress::Progress;
use fabric_util::rx::{RxEngine, Target};
use fabric_util::scaffold;
use fabric_util::slab::Slab;
use fabric_util::wire::Header;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// [`ShmEp::rx_pos`] of a slot without a consumer.
const NO_RX: u64 = u64::MAX;

/// Progress goes through the lock for everything ([`ShmEp::gate`]) every this many
/// calls, and checks that its peers live then (at most every `LIVENESS_EVERY`).
const LIVENESS_POLLS: u32 = 64;

/// Closing waits for queued injects to go out while a peer takes one at least this
/// often ([`ShmEp::linger`])...
const LINGER_IDLE: Duration = Duration::from_millis(100);
/// ...and this long at most.
const LINGER_MAX: Duration = Duration::from_secs(2);

/// A reference to a peer, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PeerId {
    idx: u32,
    gen: u32,
}

/// The destination of the last send that found its peer through the AV cache
/// ([`ShmEp::tx_cached`]), for the next send to it ([`ShmEp::tx_last`]).
///
/// While `version` is the bound AV's version, `peers[idx]` is the peer behind
/// `addr`, with a path to it and nothing queued to it, and the endpoint is ready
/// with a transmit queue bound: whatever breaks that (the peer gone, an entry
/// queued to any peer, closing) sets [`LastTx::NONE`].
#[derive(Debug, Clone, Copy)]
struct LastTx {
    addr: FiAddr,
    version: u64,
    idx: u32,
}

impl LastTx {
    /// No destination: its version is no AV's (they count up from 0).
    const NONE: LastTx = LastTx { addr: FiAddr::UNSPEC, version: u64::MAX, idx: u32::MAX };
}

/// Our slot in a peer's segment: how we send to it.
struct TxPath {
    seg: Segment,
    slot: usize,
    prod: Producer,
    /// Where the search for a free bounce buffer starts.
    next_bounce: usize,
}

impl TxPath {
    /// A free bounce buffer of our slot, marked busy (published with the entry).
    fn alloc_bounce(&mut self) -> Option<usize> {
        let s = self.seg.slot(self.slot);
        for k in 0..BOUNCE_COUNT {
            let i = (self.next_bounce + k) % BOUNCE_COUNT;
            if s.bounce_busy[i].load(Ordering::Acquire) == 0 {
                s.bounce_busy[i].store(1, Ordering::Relaxed);
                self.next_bounce = (i + 1) % BOUNCE_COUNT;
                return Some(i);
            }
        }
        None
    }

    fn bounce_ptr(&self, i: usize) -> *mut u8 {
        self.seg.slot(self.slot).bounce_ptr(i)
    }
}

/// The slot a peer claimed in our segment: how it sends to us.
struct RxPath {
    slot: usize,
    /// Which jobs of the slot a shared copy of ours uses.
    jobs_busy: [bool; JOBS],
}

/// A slot of our segment with a sender: the receiving end of its ring.
struct RxSlot {
    /// The sender.
    peer: PeerId,
    cons: Consumer,
    /// The sender's AV handle ([`ShmEp::src_of`]), valid for `src_version`.
    src: FiAddr,
    src_version: u64,
}

/// An outgoing entry waiting for room in a peer's ring (or for a bounce buffer).
///
/// The payload is copied here, in our own memory: a send queued so does not
/// complete until its entry (and bounce buffer) is in the peer's segment, where the
/// peer finds it even after we closed or exited (see [`Then`]).
enum Pending {
    /// A complete entry.
    Entry { entry: [u8; ENTRY_PAYLOAD], then: Then },
    /// An entry whose payload goes in a bounce buffer.
    Bounce { entry: Entry, payload: Vec<u8>, then: Then },
}

/// What a [`Pending`] entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Nothing completes when it goes out: an answer of ours, or an RMA or atomic
    /// request (whose operation completes on the peer's answer).
    Nothing,
    /// A send ([`OpKind::Eager`]), completed by [`ShmEp::flush_backlog`] once its
    /// entry is out (failed if it never gets out).
    Complete(u64),
    /// An inject, counted when posted (it has no completion to delay): closing the
    /// endpoint waits a little for it to go out ([`ShmEp::linger`]).
    Inject,
}

impl Pending {
    fn then(&self) -> Then {
        match self {
            Pending::Entry { then, .. } | Pending::Bounce { then, .. } => *then,
        }
    }

    /// The operation that completes when this entry is out.
    fn done(&self) -> Option<u64> {
        match self.then() {
            Then::Complete(op) => Some(op),
            _ => None,
        }
    }
}

struct Peer {
    /// The peer's endpoint (and segment) name.
    name: String,
    /// Its address, `fi_shm://<name>`.
    uri: Address,
    pid: i32,
    start: u64,
    tx: Option<TxPath>,
    rx: Option<RxPath>,
    /// Whether we may copy to and from its memory (probed on first use).
    cma: Option<bool>,
    queue: VecDeque<Pending>,
    /// Its handle in our AV, valid for `av_version`.
    fi_addr: FiAddr,
    av_version: u64,
    gen: u32,
}

/// What a transmit operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// A large message (completes on the receiver's `Ack`).
    Send,
    /// An inline or bounce-buffer message queued behind a full ring (or busy bounce
    /// buffers): its payload is copied in the queue ([`Pending`]); it completes once
    /// it is in the peer's ring, and no answer of the peer refers to it.
    Eager,
    Write,
    Read,
    Atomic,
}

/// A transmit operation waiting for its peer's answer.
struct TxOp {
    peer: PeerId,
    kind: OpKind,
    context: u64,
    flags: Caps,
    len: usize,
    /// Local memory: the source of a send or write, the destination of a read or
    /// of an atomic's prior values.
    iov: [IoVec; IOV_LIMIT],
    niov: usize,
    /// No completion (inject write).
    silent: bool,
    /// Posted with `FI_COMPLETION` ([`Bindings::tx_done`]).
    comp: bool,
    /// Streaming (after `Cts`): bytes sent so far.
    sent: Option<usize>,
}

// SAFETY: the pieces point into buffers the application handed over under the
// post methods' contracts; they are only dereferenced under the endpoint's lock.
unsafe impl Send for TxOp {}

/// A large message or write waiting at the sender: the pieces to copy from.
#[derive(Debug, Clone, Copy)]
struct Rts {
    peer: PeerId,
    id: u64,
    mode: Mode,
    pieces: [(u64, u64); IOV_LIMIT],
    n: usize,
}

/// A transfer arriving as chunks.
enum InStream {
    /// A message, into its receive.
    Msg { target: Target, hdr: Header, src: FiAddr, got: u64 },
    /// An RMA write, into a region.
    Write { key: u64, addr: u64, len: u64, got: u64, err: Option<Error>, data: Option<u64> },
}

/// A read we answer as chunks (no cross-memory attach).
struct ReadStream {
    peer: PeerId,
    id: u64,
    key: u64,
    addr: u64,
    len: u64,
    off: u64,
}

/// A large message we copy together with its sender ([`segment::Job`]), waiting for
/// the chunks the sender claimed.
struct CoCopy {
    peer: PeerId,
    /// The sender's pid and start time: while it lives it may still write chunks.
    pid: i32,
    start: u64,
    /// The slot (of our segment) and job the copy runs under.
    slot: usize,
    job: usize,
    gen: u32,
    chunks: u32,
    /// The sender's operation.
    id: u64,
    target: Target,
    hdr: Header,
    src: FiAddr,
}

struct Inner {
    enabled: bool,
    closed: bool,
    /// `enabled && !closed`, in one test for the data path.
    ready: bool,
    /// `ready` with a receive queue bound: a receive's post tests this alone (kept
    /// by `enable`, `bind_cq` and closing).
    recv_ok: bool,
    b: Bindings,
    peers: Vec<Option<Peer>>,
    by_name: HashMap<String, PeerId>,
    /// The peer sending through each slot of our segment, with the slot's
    /// consumer. Set and cleared together with the peer's [`RxPath`].
    by_slot: Box<[Option<RxSlot>; SLOTS]>,
    /// AV handle to peer, valid for `cache_version`: indexed by the handle's slot
    /// index (its low 32 bits), holding the whole handle it was found for. Grows
    /// only to handles the AV resolved, so to the AV's size.
    by_addr: Vec<Option<(FiAddr, PeerId)>>,
    cache_version: u64,
    /// The last destination, for a send to it without the cache's lookups.
    last: LastTx,
    rx: RxEngine<Rts>,
    ops: Slab<TxOp>,
    /// Operations streaming their data (ids), in order.
    streams: VecDeque<u64>,
    /// Transfers arriving as chunks, by (peer, its operation id).
    in_streams: HashMap<(PeerId, u64), InStream>,
    /// Reads we answer as chunks.
    rd_streams: VecDeque<ReadStream>,
    /// Shared copies waiting for their sender's chunks.
    cocopies: Vec<CoCopy>,
    /// Whether a sleep of ours asked peers to wake us when they free room.
    waits_marked: bool,
    /// Calls of `progress_slow` (every [`LIVENESS_POLLS`]th checks that peers live
    /// even while work besides the rings keeps it coming).
    slow_polls: u32,
    /// The generation of the next shared copy (never 0).
    cocopy_gen: u32,
    /// Peers with queued entries (indices into `peers`; may repeat).
    backlog: VecDeque<PeerId>,
    last_check: Instant,
    /// Scratch for atomic results.
    scratch: Vec<u8>,
    /// Recycled buffers of queued bounce payloads.
    pool: Vec<Vec<u8>>,
}

impl Inner {
    /// Set `recv_ok` from what it stands for (ready, with a receive queue bound):
    /// after `enable` and `bind_cq`.
    fn update_recv_ok(&mut self) {
        self.recv_ok = self.ready && self.b.rx_cq.is_some();
    }
}

/// An shm endpoint.
pub(crate) struct ShmEp {
    fid: u64,
    domain: Arc<ShmDomain>,
    /// Our segment: where peers send to us.
    seg: Segment,
    name: String,
    pid: i32,
    start: u64,
    /// Readable when a peer woke us.
    waker: Waker,
    /// Whether we may use cross-memory attach at all.
    cma_allowed: bool,
    /// Per slot of our segment: the position its ring's consumer reads next, or
    /// [`NO_RX`] while the slot has no consumer. Written under the lock (after
    /// each poll of the slot), read by `slot_quiet` without it.
    rx_pos: [AtomicU64; SLOTS],
    /// Set when work waits besides the rings (queued entries, streams, shared
    /// copies); progress clears it when none is left.
    work: AtomicBool,
    /// Progress calls left before one goes through the lock for everything
    /// (`progress_slow`): counts down from [`LIVENESS_POLLS`], and is 0 while work
    /// waits besides the rings ([`note_work`](ShmEp::note_work)), so that progress
    /// tests one value for both.
    gate: AtomicU32,
    inner: SpinLock<Inner>,
    me: Weak<ShmEp>,
}

/// A protocol violation by a peer: the reason, for the log.
type Violation = String;

/// `(addr, len)` pieces of local memory, as a peer sees them.
fn local_pieces(iov: &[IoVec]) -> ([(u64, u64); IOV_LIMIT], usize) {
    let mut p = [(0u64, 0u64); IOV_LIMIT];
    let n = iov.len().min(IOV_LIMIT);
    for (o, v) in p.iter_mut().zip(iov) {
        *o = (v.base as u64, v.len as u64);
    }
    (p, n)
}

impl ShmEp {
    pub(crate) fn new(domain: Arc<ShmDomain>, info: &Info) -> Result<Arc<ShmEp>> {
        if info.ep_attr.ep_type != EpType::Rdm {
            return Err(Error::Inval);
        }
        let name = match &info.src_addr {
            Some(Address::Str(s)) if s.starts_with(SCHEME) => s[SCHEME.len()..].to_string(),
            _ => segment::new_name(),
        };
        let seg = Segment::create(&name)?;
        let waker = Waker::bind(&name)?;
        let pid = std::process::id() as i32;
        let start = segment::start_time(pid).unwrap_or(0);
        let inner = Inner {
            enabled: false,
            closed: false,
            ready: false,
            recv_ok: false,
            b: Bindings::default(),
            peers: Vec::new(),
            by_name: HashMap::new(),
            by_slot: Box::new([const { None }; SLOTS]),
            by_addr: Vec::new(),
            cache_version: u64::MAX,
            last: LastTx::NONE,
            rx: RxEngine::new(BOUNCE_SIZE),
            ops: Slab::new(),
            streams: VecDeque::new(),
            in_streams: HashMap::new(),
            rd_streams: VecDeque::new(),
            cocopies: Vec::new(),
            waits_marked: false,
            slow_polls: 0,
            cocopy_gen: 0,
            backlog: VecDeque::new(),
            last_check: Instant::now(),
            scratch: Vec::new(),
            pool: Vec::new(),
        };
        Ok(Arc::new_cyclic(|me| ShmEp {
            fid: fabric_core::prov::next_fid(),
            domain,
            seg,
            name,
            pid,
            start,
            waker,
            cma_allowed: !config().disable_cma,
            rx_pos: [const { AtomicU64::new(NO_RX) }; SLOTS],
            work: AtomicBool::new(false),
            gate: AtomicU32::new(0),
            inner: SpinLock::new(inner),
            me: me.clone(),
        }))
    }

    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Note work besides the rings (queued entries, streams, shared copies), so that
    /// progress does not skip it.
    #[inline]
    fn note_work(&self) {
        self.work.store(true, Ordering::Relaxed);
        self.gate.store(0, Ordering::Relaxed);
    }

    fn weak_progress(&self) -> Weak<dyn Progress> {
        let w: Weak<dyn Progress> = self.me.clone();
        w
    }

    fn uri(name: &str) -> Address {
        Address::Str(format!("{SCHEME}{name}"))
    }

    fn check_ready(&self, g: &Inner, need_cq: bool) -> Result<()> {
        if !g.ready {
            return Err(Error::OpBadState);
        }
        if need_cq && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Ok(())
    }

    fn finish_op(&self, g: &mut Inner, opid: u64, status: u32) {
        let Some(op) = g.ops.remove(opid) else { return };
        g.streams.retain(|&s| s != opid);
        if op.silent {
            g.b.tx_count(status != 0);
            return;
        }
        let mut c = CqEntry::new(op.context, op.flags);
        c.len = op.len;
        if status == 0 {
            g.b.tx_done(c, op.comp);
        } else {
            let err = Error::from_errno(status as i32);
            g.b.tx_err(c, err);
        }
    }

    fn fail_op(&self, g: &mut Inner, opid: u64, err: Error) {
        let Some(op) = g.ops.remove(opid) else { return };
        g.streams.retain(|&s| s != opid);
        if op.silent {
            g.b.tx_count(true);
            return;
        }
        let mut c = CqEntry::new(op.context, op.flags);
        c.len = op.len;
        g.b.tx_err(c, err);
    }

    /// Closing: wait for peers to take the injects still queued to them (they were
    /// counted when posted, and after the close nothing would send them), as long as
    /// the peers keep taking entries ([`LINGER_IDLE`]) and at most [`LINGER_MAX`].
    /// What is left then is lost, and logged.
    #[cold]
    fn linger(&self, g: &mut Inner) {
        let queued = |g: &Inner| -> usize {
            g.peers.iter().flatten().map(|p| p.queue.iter().filter(|q| q.then() == Then::Inject).count()).sum()
        };
        let mut left = queued(g);
        let start = Instant::now();
        let mut moved = start;
        while left > 0 {
            let now = Instant::now();
            if now.duration_since(moved) > LINGER_IDLE || now.duration_since(start) > LINGER_MAX {
                fi_log!(Level::Warn, NAME, "ep_ctrl", "closing with {left} injected message(s) the peers did not take");
                return;
            }
            std::thread::sleep(Duration::from_micros(20));
            self.flush_backlog(g);
            let l = queued(g);
            if l < left {
                moved = Instant::now();
                left = l;
            }
        }
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // Queued messages that fit now go out (and complete); the rest fail below.
        if !g.backlog.is_empty() {
            self.flush_backlog(g);
            self.linger(g);
        }
        for opid in g.ops.ids(|_| true) {
            self.fail_op(g, opid, Error::Canceled);
        }
        let keys: Vec<(PeerId, u64)> = g.in_streams.keys().copied().collect();
        for k in keys {
            if let Some(InStream::Msg { target, hdr, src, .. }) = g.in_streams.remove(&k) {
                g.rx.fail(&g.b, target, &hdr, src, Error::Canceled);
            }
        }
        for c in std::mem::take(&mut g.cocopies) {
            self.abandon_cocopy(g, c, Error::Canceled);
        }
        g.rx.fail_all_posted(&g.b, Error::Canceled);
        g.rx.drain_unexpected().for_each(drop);
        for p in g.peers.iter_mut().flatten() {
            if let Some(t) = p.tx.take() {
                t.seg.slot(t.slot).set_state(segment::SLOT_CLOSED);
                // Wake it so it notices soon.
                segment::wake(&p.name);
            }
        }
        g.peers.clear();
        g.by_name.clear();
        g.by_addr.clear();
        g.last = LastTx::NONE;
        self.seg.mark_closed();
        g.closed = true;
        g.ready = false;
        g.recv_ok = false;
    }
}

fabric_util::bound!(ShmEp);

impl EndpointOps for ShmEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = scaffold::bind_cq(self, cq, flags)?;
        if ucq.wait_obj() == WaitObj::Fd {
            // The application may poll the CQ's descriptor itself, without a
            // waiter announcing its sleep: have peers wake us always.
            self.seg.sleepers().fetch_add(1, Ordering::SeqCst);
        }
        self.lock().update_recv_ok();
        Ok(())
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        scaffold::bind_cntr(self, cntr, flags).map(drop)
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        scaffold::bind_eq(self, eq)
    }

    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        scaffold::bind_av(self, av)
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Ok(());
        }
        g.b.check_enable(true)?;
        g.enabled = true;
        g.ready = !g.closed;
        g.update_recv_ok();
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        Ok(Self::uri(&self.name))
    }

    fn setname(&self, _addr: &Address) -> Result<()> {
        // The name is the segment's: fixed when the endpoint opens (give it in
        // the info's src_addr).
        Err(Error::OpNotSupp)
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.send_common(op, flags, None)
    }

    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.recv_common(op, flags)
    }

    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > BOUNCE_SIZE.max(INLINE_MAX) {
            return Err(Error::MsgSize);
        }
        self.send_common(op, flags, Some(data))
    }

    unsafe fn post_write(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        self.rma_common(op, flags, None, OpKind::Write)
    }

    unsafe fn post_read(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        self.rma_common(op, flags, None, OpKind::Read)
    }

    fn inject_write(&self, data: &[u8], op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > BOUNCE_SIZE.max(INLINE_MAX) {
            return Err(Error::MsgSize);
        }
        self.rma_common(op, flags, Some(data), OpKind::Write)
    }

    unsafe fn post_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_common(op, flags)
    }

    /// The operands are copied by every atomic here (`atomic_common`).
    unsafe fn inject_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_common(op, flags)
    }

    fabric_util::endpoint_tail!(rx);
}

fabric_util::close_on_drop!(ShmEp);

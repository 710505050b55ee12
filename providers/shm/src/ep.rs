//! shm RDM endpoints: peers, the rings between them, and progress.
//!
//! Each endpoint owns a segment (its name is its address). To send to a peer, it
//! attaches to the peer's segment and claims a slot there ([`TxPath`]); what a peer
//! sends arrives in the slot it claimed in ours ([`RxPath`]). Progress polls the
//! rings of the claimed slots of our segment, so a poll costs one cache-line read
//! per active peer and no system call.
//!
//! Payloads: up to [`INLINE_MAX`] bytes inline in the entry; up to
//! [`BOUNCE_SIZE`] in one of the sender's bounce buffers (these sends complete at
//! once: the data is copied); larger, the sender lists its pieces and the receiver
//! copies them across address spaces once matched (`process_vm_readv`), then
//! acknowledges, which completes the send. Without cross-memory attach the
//! receiver answers `Cts` and the sender streams bounce-buffer chunks. RMA works
//! the same way with the target doing the copy after checking the key, bounds and
//! access; atomics carry their operands and results inline or in a bounce buffer.

use crate::attr::{IOV_LIMIT, SCHEME};
use crate::domain::ShmDomain;
use crate::proto::{self, flags, Entry, Kind, Mode, INLINE_MAX};
use crate::ring::{Consumer, Producer, ENTRY_PAYLOAD};
use crate::segment::{self, Segment, Waker, BOUNCE_COUNT, BOUNCE_SIZE, JOBS, SLOTS};
use crate::{config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op, RmaOp};
use fabric_core::{
    fi_log, Address, AtomicKind, BindFlags, Caps, CqEntry, EpType, Error, FiAddr, Info, MrAccess, OpFlags, Result,
    WaitObj,
};
use fabric_util::bind::Bindings;
use fabric_util::iov::{self, gather};
use fabric_util::matcher::MsgSpec;
use fabric_util::progress::Progress;
use fabric_util::rx::msg_flags;
use fabric_util::rx::{RxAction, RxEngine, Target, Unexp, UnexpBody};
use fabric_util::slab::Slab;
use fabric_util::wire::{AtomicHdr, HdrFlags, Header, OpCode, RmaDesc};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };
/// How often progress checks that its peers are alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(50);
/// Smallest message whose copy the sender is asked to share ([`segment::Job`]).
const COCOPY_MIN: u64 = 256 << 10;
/// Bytes of one chunk of a shared copy.
const COCOPY_CHUNK: u64 = 128 << 10;

/// A reference to a peer, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PeerId {
    idx: u32,
    gen: u32,
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
    cons: Consumer,
    /// Which jobs of the slot a shared copy of ours uses.
    jobs_busy: [bool; JOBS],
}

/// An outgoing entry waiting for room in a peer's ring (or for a bounce buffer).
enum Pending {
    /// A complete entry.
    Entry([u8; ENTRY_PAYLOAD]),
    /// An entry whose payload goes in a bounce buffer (already copied here: the
    /// operation completed when it was queued).
    Bounce(Entry, Vec<u8>),
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
    Send,
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
    b: Bindings,
    peers: Vec<Option<Peer>>,
    by_name: HashMap<String, PeerId>,
    /// The peer sending through each slot of our segment.
    by_slot: Vec<Option<PeerId>>,
    /// AV handle to peer, valid for `cache_version`.
    by_addr: HashMap<FiAddr, PeerId>,
    cache_version: u64,
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
    /// The generation of the next shared copy (never 0).
    cocopy_gen: u32,
    /// Peers with queued entries (indices into `peers`; may repeat).
    backlog: VecDeque<PeerId>,
    last_check: Instant,
    polls: u32,
    /// Scratch for atomic results.
    scratch: Vec<u8>,
    /// Recycled buffers of queued bounce payloads.
    pool: Vec<Vec<u8>>,
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
    inner: Mutex<Inner>,
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

/// The errno a chunk's copy leaves in its job: 0 when all `len` bytes moved.
fn chunk_status(res: std::result::Result<usize, segment::CmaError>, len: u64) -> u32 {
    match res {
        Ok(n) if n as u64 == len => 0,
        _ => Error::Io.errno() as u32,
    }
}

/// Copy `len` bytes out of a bounce buffer into `out`.
///
/// # Safety
/// `p` is a bounce buffer of a mapped slot ([`BOUNCE_SIZE`] bytes) and
/// `len <= BOUNCE_SIZE`.
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
            b: Bindings::default(),
            peers: Vec::new(),
            by_name: HashMap::new(),
            by_slot: vec![None; SLOTS],
            by_addr: HashMap::new(),
            cache_version: u64::MAX,
            rx: RxEngine::new(BOUNCE_SIZE),
            ops: Slab::new(),
            streams: VecDeque::new(),
            in_streams: HashMap::new(),
            rd_streams: VecDeque::new(),
            cocopies: Vec::new(),
            waits_marked: false,
            cocopy_gen: 0,
            backlog: VecDeque::new(),
            last_check: Instant::now(),
            polls: 0,
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

    fn uri(name: &str) -> Address {
        Address::Str(format!("{SCHEME}{name}"))
    }

    // ----- peers -----

    fn peer(g: &mut Inner, id: PeerId) -> Option<&mut Peer> {
        g.peers.get_mut(id.idx as usize)?.as_mut().filter(|p| p.gen == id.gen)
    }

    fn peer_by_name(g: &mut Inner, name: &str, pid: i32, start: u64) -> PeerId {
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
    fn peer_for(&self, g: &mut Inner, dest: FiAddr) -> Result<PeerId> {
        let av = g.b.av.clone().ok_or(Error::NoAv)?;
        let v = av.version();
        if g.cache_version != v {
            g.by_addr.clear();
            g.cache_version = v;
        }
        let cached = g.by_addr.get(&dest).copied();
        let id = match cached {
            Some(id) if Self::peer(g, id).is_some() => id,
            _ => {
                let addr = av.get(dest).ok_or(Error::Inval)?;
                let Address::Str(s) = &addr else { return Err(Error::Inval) };
                let name = s.strip_prefix(SCHEME).ok_or(Error::Inval)?;
                let id = Self::peer_by_name(g, name, 0, 0);
                g.by_addr.insert(dest, id);
                id
            }
        };
        self.ensure_tx(g, id)?;
        Ok(id)
    }

    /// Attach to a peer's segment and claim our slot there, once.
    fn ensure_tx(&self, g: &mut Inner, id: PeerId) -> Result<()> {
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
    fn cma_ok(&self, g: &mut Inner, id: PeerId) -> bool {
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
    fn src_of(g: &mut Inner, id: PeerId) -> FiAddr {
        let Some(av) = g.b.av.clone() else { return FiAddr::NOTAVAIL };
        let v = av.version();
        let Some(p) = Self::peer(g, id) else { return FiAddr::NOTAVAIL };
        if p.av_version != v {
            p.fi_addr = av.find(&p.uri).unwrap_or(FiAddr::NOTAVAIL);
            p.av_version = v;
        }
        p.fi_addr
    }

    /// Put an entry on a peer's ring, or queue it behind what waits already.
    fn send_entry(&self, g: &mut Inner, id: PeerId, e: &Entry, fill: impl FnOnce(&mut [u8; ENTRY_PAYLOAD])) {
        if let Err(err) = self.ensure_tx(g, id) {
            fi_log!(Level::Info, NAME, "ep_data", "cannot answer a peer ({err}): it is gone");
            return;
        }
        let Some(p) = Self::peer(g, id) else { return };
        let mut b = [0u8; ENTRY_PAYLOAD];
        e.encode(&mut b);
        fill(&mut b);
        if p.queue.is_empty() {
            if let Some(t) = p.tx.as_mut() {
                if t.prod.try_push(|slot| *slot = b) {
                    Self::wake(p);
                    return;
                }
            }
        }
        p.queue.push_back(Pending::Entry(b));
        g.backlog.push_back(id);
    }

    /// Tell a sleeping peer to look at its rings.
    fn wake(p: &Peer) {
        if let Some(t) = &p.tx {
            // Pairs with the fence in the receiver's prepare_sleep: either it sees
            // our entry in its last poll before sleeping, or we see it sleeping.
            fence(Ordering::SeqCst);
            if t.seg.sleepers().load(Ordering::Relaxed) != 0 {
                segment::wake(&p.name);
            }
        }
    }

    /// Send a payload that fits a bounce buffer: now if a buffer and an entry are
    /// free, else queued with a copy. Either way the caller may complete at once.
    fn send_bounce(&self, g: &mut Inner, id: PeerId, mut e: Entry, src: &[IoVec], len: usize) {
        if self.ensure_tx(g, id).is_err() {
            return;
        }
        let pool = g.pool.pop();
        let Some(p) = Self::peer(g, id) else { return };
        if p.queue.is_empty() {
            if let Some(t) = p.tx.as_mut() {
                if t.prod.has_room() {
                    if let Some(bi) = t.alloc_bounce() {
                        // SAFETY: the bounce buffer holds BOUNCE_SIZE >= len bytes and
                        // is ours until the receiver frees it; the pieces are valid
                        // for reads under the post contract.
                        unsafe { gather(src, 0, t.bounce_ptr(bi), len) };
                        e.mode = Mode::Bounce;
                        e.aux = bi as u32;
                        e.len = len as u64;
                        let pushed = t.prod.try_push(|b| e.encode(b));
                        debug_assert!(pushed, "room was checked under the lock");
                        Self::wake(p);
                        if let Some(v) = pool {
                            g.pool.push(v);
                        }
                        return;
                    }
                }
            }
        }
        let mut v = pool.unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        // SAFETY: `v` holds `len` bytes; the pieces are valid for reads.
        unsafe { gather(src, 0, v.as_mut_ptr(), len) };
        p.queue.push_back(Pending::Bounce(e, v));
        g.backlog.push_back(id);
    }

    /// Move queued entries of peers onto their rings, as room allows.
    fn flush_backlog(&self, g: &mut Inner) {
        let mut n = g.backlog.len();
        while n > 0 {
            n -= 1;
            let Some(id) = g.backlog.pop_front() else { break };
            let mut freed = Vec::new();
            let Some(p) = Self::peer(g, id) else { continue };
            let Some(t) = p.tx.as_mut() else {
                p.queue.clear();
                continue;
            };
            let mut moved = false;
            while let Some(item) = p.queue.front_mut() {
                let ok = match item {
                    Pending::Entry(b) => t.prod.try_push(|slot| *slot = *b),
                    Pending::Bounce(e, v) => {
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
                if let Some(Pending::Bounce(_, v)) = p.queue.pop_front() {
                    freed.push(v);
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
            }
        }
    }

    // ----- posting -----

    fn check_ready(&self, g: &Inner, need_cq: bool) -> Result<()> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if need_cq && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        Ok(())
    }

    fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, inject.is_none())?;
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        let data_iov = inject.map(|d| [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }]);
        let iov: &[IoVec] = match &data_iov {
            Some(v) => v,
            None => op.iov,
        };
        let len = IoVec::total(iov);
        let id = self.peer_for(g, op.addr)?;
        let mut e = Entry::new(Kind::Msg);
        e.flags = if tagged { flags::TAGGED } else { 0 };
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            e.flags |= flags::CQ_DATA;
            e.data = op.data;
        }
        e.tag = op.tag;
        e.len = len as u64;
        let cq_flags = Caps::SEND | msg_flags(tagged);
        // FI_DELIVERY_COMPLETE: as a large message whatever its size, which
        // completes on the receiver's `Ack`, sent once the data is in the receive.
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        if len <= INLINE_MAX && !dc {
            e.mode = Mode::Inline;
            self.send_entry(g, id, &e, |b| {
                // SAFETY: the entry has INLINE_MAX >= len bytes after the header;
                // the pieces are valid for reads under the post contract.
                unsafe { gather(iov, 0, b[proto::HDR..].as_mut_ptr(), len) }
            });
        } else if len <= BOUNCE_SIZE && !dc {
            self.send_bounce(g, id, e, iov, len);
        } else {
            if inject.is_some() {
                return Err(Error::MsgSize);
            }
            let mut local = [NULL_IOV; IOV_LIMIT];
            local[..iov.len()].copy_from_slice(iov);
            let opid = g.ops.insert(TxOp {
                peer: id,
                kind: OpKind::Send,
                context: op.context,
                flags: cq_flags,
                len,
                iov: local,
                niov: iov.len(),
                silent: false,
                comp: flags.contains(OpFlags::COMPLETION),
                sent: None,
            });
            e.id = opid;
            self.announce(g, id, e, iov);
            return Ok(());
        }
        if inject.is_none() {
            let mut c = CqEntry::new(op.context, cq_flags);
            c.len = len;
            g.b.tx_done(c, flags.contains(OpFlags::COMPLETION));
        } else {
            g.b.tx_count(false);
        }
        Ok(())
    }

    /// Send the entry of a large transfer: our pieces for the peer to copy, or a
    /// request to be asked for chunks.
    fn announce(&self, g: &mut Inner, id: PeerId, mut e: Entry, iov: &[IoVec]) {
        if self.cma_allowed {
            let (pieces, n) = local_pieces(iov);
            e.mode = Mode::Iov;
            e.aux = n as u32;
            self.send_entry(g, id, &e, |b| proto::put_pieces(b, &pieces[..n]));
        } else {
            e.mode = Mode::Stream;
            self.send_entry(g, id, &e, |_| {});
        }
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
        g.rx.post(&g.b, op, flags, op.addr)?;
        self.run_rx_actions(g);
        Ok(())
    }

    fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, kind: OpKind) -> Result<()> {
        if op.rma.len() != 1 || op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, inject.is_none())?;
        let data_iov = inject.map(|d| [IoVec { base: d.as_ptr() as *mut u8, len: d.len() }]);
        let iov: &[IoVec] = match &data_iov {
            Some(v) => v,
            None => op.iov,
        };
        let len = IoVec::total(iov);
        if op.rma[0].len != len {
            return Err(Error::Inval);
        }
        let id = self.peer_for(g, op.addr)?;
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[..iov.len()].copy_from_slice(iov);
        let mut e = Entry::new(if kind == OpKind::Write { Kind::Write } else { Kind::Read });
        e.key = op.rma[0].key;
        e.addr = op.rma[0].addr;
        e.len = len as u64;
        if kind == OpKind::Write && flags.contains(OpFlags::REMOTE_CQ_DATA) {
            e.flags |= flags::CQ_DATA;
            e.data = op.data;
        }
        let small = kind == OpKind::Write && len <= BOUNCE_SIZE;
        let opid = g.ops.insert(TxOp {
            peer: id,
            kind,
            context: op.context,
            flags: Caps::RMA | if kind == OpKind::Write { Caps::WRITE } else { Caps::READ },
            len,
            // A small write's data travels now: nothing of the caller's is kept.
            iov: if small && inject.is_some() { [NULL_IOV; IOV_LIMIT] } else { local },
            niov: if small && inject.is_some() { 0 } else { iov.len() },
            silent: inject.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
            sent: None,
        });
        e.id = opid;
        if kind == OpKind::Write && len <= INLINE_MAX {
            e.mode = Mode::Inline;
            self.send_entry(g, id, &e, |b| {
                // SAFETY: INLINE_MAX >= len bytes after the header; the pieces are
                // valid for reads.
                unsafe { gather(iov, 0, b[proto::HDR..].as_mut_ptr(), len) }
            });
        } else if small {
            self.send_bounce(g, id, e, iov, len);
        } else {
            if inject.is_some() {
                g.ops.remove(opid);
                return Err(Error::MsgSize);
            }
            self.announce(g, id, e, iov);
        }
        Ok(())
    }

    /// Post an atomic (its operands are copied at once: inline or through a
    /// bounce buffer); with `flags` [`OpFlags::silent`] its completion is not
    /// reported, else it is when `flags` has `COMPLETION` or the queue is not
    /// selective.
    fn atomic_common(&self, a: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let silent = flags.silent();
        let max = fabric_util::atomic::valid(a.op, a.datatype, a.kind)?;
        let l = fabric_util::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
        if a.count == 0 || a.count > max || a.rma.len != l.target {
            return Err(Error::Inval);
        }
        if a.operand.len < l.operand || a.compare.len < l.compare || a.result.len < l.result {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let g = &mut *g;
        self.check_ready(g, !silent)?;
        let id = self.peer_for(g, a.addr)?;
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[0] = IoVec { base: a.result.base, len: l.result };
        let opid = g.ops.insert(TxOp {
            peer: id,
            kind: OpKind::Atomic,
            context: a.context,
            flags: Caps::ATOMIC | if a.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ },
            len: l.target,
            iov: local,
            niov: usize::from(l.result > 0),
            silent,
            comp: flags.contains(OpFlags::COMPLETION),
            sent: None,
        });
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let mut e = Entry::new(Kind::Atomic);
        e.id = opid;
        e.key = a.rma.key;
        e.addr = a.rma.addr;
        e.tag = a.count as u64;
        e.data = u64::from(proto::atomic_aux(a.op as u8, a.datatype as u8, kind));
        let src = [IoVec { base: a.operand.base, len: l.operand }, IoVec { base: a.compare.base, len: l.compare }];
        let len = l.operand + l.compare;
        e.len = len as u64;
        if len <= INLINE_MAX {
            e.mode = Mode::Inline;
            self.send_entry(g, id, &e, |b| {
                // SAFETY: INLINE_MAX >= len bytes after the header; the operands
                // are valid for reads.
                unsafe { gather(&src, 0, b[proto::HDR..].as_mut_ptr(), len) }
            });
        } else {
            self.send_bounce(g, id, e, &src, len);
        }
        Ok(())
    }

    // ----- completing operations -----

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

    /// Put on the wire what the receive engine asks for.
    fn run_rx_actions(&self, g: &mut Inner) {
        while let Some(a) = g.rx.take_action() {
            match a {
                RxAction::Start(m) => self.start_rts(g, m.target, m.hdr, m.src, m.rts),
                RxAction::Discard(r) => {
                    let mut e = Entry::new(Kind::Ack);
                    e.id = r.id;
                    self.send_entry(g, r.peer, &e, |_| {});
                }
            }
        }
    }

    /// A large message matched its receive: copy it across, or ask for chunks.
    fn start_rts(&self, g: &mut Inner, target: Target, hdr: Header, src: FiAddr, r: Rts) {
        if Self::peer(g, r.peer).is_none() {
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        }
        if self.ensure_tx(g, r.peer).is_err() {
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        }
        if r.mode == Mode::Iov && self.cma_ok(g, r.peer) {
            let mut local = [NULL_IOV; IOV_LIMIT];
            let n = g.rx.pieces(&target, 0, hdr.len, &mut local);
            let total = IoVec::total(&local[..n]) as u64;
            if total >= COCOPY_MIN {
                if let Some((slot, job)) = Self::free_job(g, r.peer) {
                    self.start_cocopy(g, (slot, job), target, hdr, src, r, &local[..n]);
                    return;
                }
            }
            let (remote, rn) = iov::slice(&r.pieces[..r.n], 0, total);
            let pid = Self::peer(g, r.peer).map_or(0, |p| p.pid);
            // SAFETY: the local pieces lie in a posted receive (valid for writes
            // under post_recv's contract), clipped to it by `pieces`.
            let res = unsafe { segment::cma_read(pid, &local[..n], &remote[..rn]) };
            let mut ack = Entry::new(Kind::Ack);
            ack.id = r.id;
            match res {
                Ok(_) => g.rx.complete(&g.b, target, &hdr, src, false),
                Err(e) => {
                    fi_log!(Level::Info, NAME, "ep_data", "copy of a {} byte message failed: {e:?}", hdr.len);
                    g.rx.fail(&g.b, target, &hdr, src, Error::Io);
                    ack.aux = Error::Io.errno() as u32;
                }
            }
            self.send_entry(g, r.peer, &ack, |_| {});
        } else {
            g.in_streams.insert((r.peer, r.id), InStream::Msg { target, hdr, src, got: 0 });
            let mut cts = Entry::new(Kind::Cts);
            cts.id = r.id;
            self.send_entry(g, r.peer, &cts, |_| {});
            if hdr.len == 0 {
                self.finish_in_stream(g, r.peer, r.id);
            }
        }
    }

    /// A job of the slot `peer` sends through that no shared copy of ours uses:
    /// `(slot, job)`.
    fn free_job(g: &mut Inner, peer: PeerId) -> Option<(usize, usize)> {
        let rx = Self::peer(g, peer)?.rx.as_ref()?;
        Some((rx.slot, rx.jobs_busy.iter().position(|b| !b)?))
    }

    /// The job of a shared copy that ended is free for the next one.
    fn free_job_of(g: &mut Inner, c: &CoCopy) {
        if let Some(rx) = Self::peer(g, c.peer).and_then(|p| p.rx.as_mut()).filter(|rx| rx.slot == c.slot) {
            rx.jobs_busy[c.job] = false;
        }
    }

    /// Copy a large message together with its sender ([`segment::Job`]): ask it to
    /// help (`Help`, with the receive's pieces), then claim chunks ourselves until
    /// none is left. The receive completes once every chunk is copied, ours and the
    /// sender's ([`ShmEp::check_cocopies`]).
    #[allow(clippy::too_many_arguments)]
    fn start_cocopy(
        &self,
        g: &mut Inner,
        (slot, job): (usize, usize),
        target: Target,
        hdr: Header,
        src: FiAddr,
        r: Rts,
        local: &[IoVec],
    ) {
        let total = IoVec::total(local) as u64;
        let chunks = total.div_ceil(COCOPY_CHUNK) as u32;
        g.cocopy_gen = g.cocopy_gen.wrapping_add(1).max(1);
        let gen = g.cocopy_gen;
        let Some(p) = Self::peer(g, r.peer) else {
            // free_job found it; never lose the receive all the same.
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        };
        let (pid, start) = (p.pid, p.start);
        if let Some(rx) = p.rx.as_mut() {
            rx.jobs_busy[job] = true;
        }
        let j = self.seg.slot(slot).job(job).expect("free_job names a job");
        j.start(gen);
        let mut help = Entry::new(Kind::Help);
        help.mode = Mode::Iov;
        help.id = r.id;
        help.key = job as u64;
        help.tag = gen as u64;
        help.addr = COCOPY_CHUNK;
        help.len = total;
        let (pieces, pn) = local_pieces(local);
        help.aux = pn as u32;
        self.send_entry(g, r.peer, &help, |b| proto::put_pieces(b, &pieces[..pn]));
        // Our share: chunks from the front, as long as there are any.
        let rx = &g.rx;
        j.work(gen, chunks, COCOPY_CHUNK, total, |off, len| {
            let mut lp = [NULL_IOV; IOV_LIMIT];
            let ln = rx.pieces(&target, off, len, &mut lp);
            let (rp, rpn) = iov::slice(&r.pieces[..r.n], off, len);
            // SAFETY: the local pieces lie in the matched receive (valid for writes
            // under post_recv's contract), which stays ours until check_cocopies or
            // abandon_cocopy completes it; the sender writes only the chunks it
            // claimed, never this one.
            chunk_status(unsafe { segment::cma_read(pid, &lp[..ln], &rp[..rpn]) }, len)
        });
        g.cocopies.push(CoCopy { peer: r.peer, pid, start, slot, job, gen, chunks, id: r.id, target, hdr, src });
        self.check_cocopies(g);
    }

    /// Complete the shared copies whose every chunk is in, and acknowledge them.
    fn check_cocopies(&self, g: &mut Inner) {
        let mut i = 0;
        while i < g.cocopies.len() {
            let c = &g.cocopies[i];
            let (done, err) = self.seg.slot(c.slot).job(c.job).map_or((u64::MAX, 0), |j| j.progress());
            if done < c.chunks as u64 {
                i += 1;
                continue;
            }
            let c = g.cocopies.remove(i);
            let err = (err != 0).then_some(Error::Io);
            self.end_cocopy(g, c, err);
        }
    }

    /// A shared copy is over: free its job, complete (or fail) the receive and tell
    /// the sender.
    fn end_cocopy(&self, g: &mut Inner, c: CoCopy, err: Option<Error>) {
        Self::free_job_of(g, &c);
        let mut ack = Entry::new(Kind::Ack);
        ack.id = c.id;
        match err {
            None => g.rx.complete(&g.b, c.target, &c.hdr, c.src, false),
            Some(e) => {
                fi_log!(Level::Info, NAME, "ep_data", "shared copy of a {} byte message failed: {e}", c.hdr.len);
                g.rx.fail(&g.b, c.target, &c.hdr, c.src, e);
                ack.aux = e.errno() as u32;
            }
        }
        self.send_entry(g, c.peer, &ack, |_| {});
    }

    /// Stop a shared copy before its end (its peer is gone or misbehaved, or we
    /// close): claim every chunk left, wait until the sender has finished the chunks
    /// it is writing (unless it is dead), so that the receive's buffer is ours alone
    /// again, then fail the receive with `err`.
    fn abandon_cocopy(&self, g: &mut Inner, c: CoCopy, err: Error) {
        if let Some(j) = self.seg.slot(c.slot).job(c.job) {
            j.finish_many(j.claim_rest(c.gen, c.chunks), 0);
            let mut spins = 0u32;
            while j.progress().0 < c.chunks as u64 {
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 {
                    if !segment::alive(c.pid, c.start) {
                        break;
                    }
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
        }
        Self::free_job_of(g, &c);
        g.rx.fail(&g.b, c.target, &c.hdr, c.src, err);
    }

    /// The receiver of a large message of ours asks us to copy chunks of it too.
    fn on_help(
        &self,
        g: &mut Inner,
        peer: PeerId,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let Some(op) = g.ops.get_mut(e.id).filter(|o| o.peer == peer && o.kind == OpKind::Send && o.sent.is_none())
        else {
            // Ended meanwhile: the receiver copies alone.
            return Ok(());
        };
        if e.len > op.len as u64 || e.tag > u32::MAX as u64 {
            return Err("help for more than the message".into());
        }
        let chunks = u32::try_from(e.len.div_ceil(e.addr)).map_err(|_| "help in too many chunks".to_string())?;
        let (iov, niov, oplen) = (op.iov, op.niov, op.len);
        if !self.cma_ok(g, peer) {
            return Ok(());
        }
        let mut remote = [(0u64, 0u64); IOV_LIMIT];
        let rn = e.pieces(raw, &mut remote);
        let Some(p) = Self::peer(g, peer) else { return Ok(()) };
        let Some(t) = p.tx.as_ref() else { return Ok(()) };
        let job = t.seg.slot(t.slot).job(e.key as usize).ok_or("help names no job")?;
        let (pid, gen) = (p.pid, e.tag as u32);
        job.work(gen, chunks, e.addr, e.len, |off, len| {
            let mut lp = [NULL_IOV; IOV_LIMIT];
            let ln = iov::slice_into(&iov[..niov], off, iov::clip(oplen as u64, off, len), &mut lp);
            let (rp, rpn) = iov::slice(&remote[..rn], off, len);
            // SAFETY: the local pieces lie in the send's source, valid for reads
            // while the operation is in flight (post_send's contract); it is until
            // the receiver's Ack, which comes after every chunk is finished.
            chunk_status(unsafe { segment::cma_write(pid, &lp[..ln], &rp[..rpn]) }, len)
        });
        Ok(())
    }

    /// Every chunk of an incoming transfer is in.
    fn finish_in_stream(&self, g: &mut Inner, peer: PeerId, id: u64) {
        let Some(s) = g.in_streams.remove(&(peer, id)) else { return };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = id;
        match s {
            InStream::Msg { target, hdr, src, .. } => g.rx.complete(&g.b, target, &hdr, src, false),
            InStream::Write { err, data, .. } => match err {
                None => {
                    if let Some(c) = &g.b.rma_write_cntr {
                        c.inc();
                    }
                    if let Some(d) = data {
                        self.remote_cq_data(g, peer, d);
                    }
                }
                Some(e) => ack.aux = e.errno() as u32,
            },
        }
        self.send_entry(g, peer, &ack, |_| {});
    }

    /// A write with remote CQ data landed: it completes one posted receive (or
    /// waits for the next one).
    fn remote_cq_data(&self, g: &mut Inner, peer: PeerId, data: u64) {
        let src = Self::src_of(g, peer);
        g.rx.rma_data(&g.b, src, data);
        self.run_rx_actions(g);
    }

    // ----- progress -----

    fn progress_locked(&self, g: &mut Inner) {
        if g.closed || !g.enabled {
            return;
        }
        let mut bits = [0u64; SLOTS / 64];
        self.seg.claimed_slots(&mut bits);
        for (w, word) in bits.iter().enumerate() {
            let mut word = *word;
            while word != 0 {
                let i = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                self.poll_slot(g, i);
            }
        }
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
        g.polls = g.polls.wrapping_add(1);
        if g.polls % 64 == 0 {
            let now = Instant::now();
            if now.duration_since(g.last_check) >= LIVENESS_EVERY {
                g.last_check = now;
                self.check_peers(g);
            }
        }
    }

    /// Drain the ring of slot `i` of our segment.
    fn poll_slot(&self, g: &mut Inner, i: usize) {
        let cached = g.by_slot[i];
        let pid = match cached {
            Some(id) if Self::peer(g, id).is_some_and(|p| p.rx.as_ref().is_some_and(|r| r.slot == i)) => id,
            _ => {
                // A new sender: who is it?
                let s = self.seg.slot(i);
                if s.state() != segment::SLOT_ACTIVE {
                    return;
                }
                let Some(name) = s.peer_name() else { return };
                let (ppid, pstart) = s.peer_id();
                let id = Self::peer_by_name(g, &name, ppid, pstart);
                let p = Self::peer(g, id).expect("just found");
                if p.pid == 0 || p.pid != ppid || p.start != pstart {
                    p.pid = ppid;
                    p.start = pstart;
                }
                // SAFETY: the ring lies in slot `i` of our own segment, mapped
                // while the endpoint lives; the slot's sender is its only producer
                // and we its only consumer.
                let cons = unsafe { Consumer::new(s.ring_ptr()) };
                p.rx = Some(RxPath { slot: i, cons, jobs_busy: [false; JOBS] });
                g.by_slot[i] = Some(id);
                id
            }
        };
        let mut consumed = false;
        loop {
            let mut raw = [0u8; ENTRY_PAYLOAD];
            let got = {
                let Some(p) = Self::peer(g, pid) else { return };
                let Some(rx) = p.rx.as_mut() else { return };
                rx.cons.peek(|b| raw = *b).is_some()
            };
            if !got {
                break;
            }
            if let Some(p) = Self::peer(g, pid) {
                if let Some(rx) = p.rx.as_mut() {
                    rx.cons.advance();
                }
            }
            consumed = true;
            if let Err(why) = self.on_entry(g, pid, i, &raw) {
                fi_log!(Level::Warn, NAME, "ep_data", "peer sent a bad entry ({why}): dropping it");
                self.peer_down(g, pid, Error::Io);
                return;
            }
        }
        // Ring entries (and bounce buffers) were freed: wake the sender if it sleeps
        // waiting for them.
        if consumed && self.seg.slot(i).take_sender_waits() {
            if let Some(p) = Self::peer(g, pid) {
                segment::wake(&p.name);
            }
        }
        // A sender that closed: its ring is drained, the slot can go.
        if self.seg.slot(i).state() == segment::SLOT_CLOSED {
            self.release_rx(g, pid, i);
        }
    }

    fn release_rx(&self, g: &mut Inner, pid: PeerId, i: usize) {
        if let Some(p) = Self::peer(g, pid) {
            if p.rx.as_ref().is_some_and(|r| r.slot == i) {
                p.rx = None;
            }
        }
        g.by_slot[i] = None;
        self.seg.release_slot(i);
    }

    /// Copy a payload out of an entry (inline or bounce) into `out`, freeing the
    /// bounce buffer.
    fn take_payload(&self, slot: usize, e: &Entry, raw: &[u8; ENTRY_PAYLOAD], out: &mut Vec<u8>) {
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

    fn on_entry(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let e = Entry::decode(raw).map_err(|d| d.to_string())?;
        match e.kind {
            Kind::Msg => {
                let src = Self::src_of(g, peer);
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
                let op = g.ops.get_mut(e.id).filter(|o| o.peer == peer).ok_or("clear to send for no operation")?;
                if op.sent.is_none() {
                    op.sent = Some(0);
                    g.streams.push_back(e.id);
                }
            }
            Kind::Ack => {
                if g.ops.get_mut(e.id).is_some_and(|o| o.peer == peer) {
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

    fn on_data(&self, g: &mut Inner, peer: PeerId, slot: usize, e: &Entry) -> std::result::Result<(), Violation> {
        let s = self.seg.slot(slot);
        let bp = s.bounce_ptr(e.aux as usize);
        let len = e.len as usize;
        let free = || s.bounce_busy[e.aux as usize].store(0, Ordering::Release);
        if e.flags & flags::RESP != 0 {
            // A chunk of a read of ours.
            let Some(op) = g.ops.get_mut(e.id).filter(|o| o.peer == peer && o.kind == OpKind::Read) else {
                free();
                return Err("read data for no read".into());
            };
            if e.addr.checked_add(e.len).map_or(true, |end| end > op.len as u64) {
                free();
                return Err("read data past the end".into());
            }
            let mut out = [NULL_IOV; IOV_LIMIT];
            let n = iov::slice_into(&op.iov[..op.niov], e.addr, iov::clip(op.len as u64, e.addr, e.len), &mut out);
            let mut done = 0;
            for v in &out[..n] {
                // SAFETY: the piece lies in the read's destination (valid for
                // writes); the bounce buffer holds len >= done + v.len bytes.
                unsafe { std::ptr::copy_nonoverlapping(bp.add(done), v.base, v.len) };
                done += v.len;
            }
            free();
            return Ok(());
        }
        let Some(st) = g.in_streams.get_mut(&(peer, e.id)) else {
            free();
            return Err("data for no transfer".into());
        };
        let finished = match st {
            InStream::Msg { target, hdr, got, .. } => {
                if *got != e.addr || e.addr + e.len > hdr.len {
                    free();
                    return Err("message data out of order".into());
                }
                let mut local = [NULL_IOV; IOV_LIMIT];
                let n = g.rx.pieces(target, e.addr, e.len, &mut local);
                let mut done = 0;
                for v in &local[..n] {
                    // SAFETY: the piece lies in the receive (valid for writes); the
                    // bounce buffer holds len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(bp.add(done), v.base, v.len) };
                    done += v.len;
                }
                *got += e.len;
                *got == hdr.len
            }
            InStream::Write { key, addr, len: total, got, err, .. } => {
                if *got != e.addr || e.addr + e.len > *total {
                    free();
                    return Err("write data out of order".into());
                }
                if err.is_none() {
                    let r = self.domain.objs.mrs().with_region(
                        *key,
                        addr.wrapping_add(e.addr),
                        len,
                        MrAccess::REMOTE_WRITE,
                        |p| {
                            // SAFETY: `p` starts `len` checked bytes of an open region
                            // (held open for this call); the bounce buffer holds len.
                            unsafe { std::ptr::copy_nonoverlapping(bp, p, len) }
                        },
                    );
                    *err = r.err();
                }
                *got += e.len;
                *got == *total
            }
        };
        free();
        if finished {
            self.finish_in_stream(g, peer, e.id);
        }
        Ok(())
    }

    fn on_write(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let data = (e.flags & flags::CQ_DATA != 0).then_some(e.data);
        let mrs = self.domain.objs.mrs();
        let status = match e.mode {
            Mode::Inline | Mode::Bounce => {
                let mut buf = std::mem::take(&mut g.scratch);
                self.take_payload(slot, e, raw, &mut buf);
                let r = mrs.copy_in(e.key, e.addr, &buf, MrAccess::REMOTE_WRITE);
                g.scratch = buf;
                r
            }
            Mode::Iov | Mode::Stream => {
                let len = usize::try_from(e.len).map_err(|_| "write too long")?;
                if let Err(err) = mrs.lookup(e.key, e.addr, len, MrAccess::REMOTE_WRITE) {
                    Err(err)
                } else if e.mode == Mode::Iov && self.ensure_tx(g, peer).is_ok() && self.cma_ok(g, peer) {
                    let mut pieces = [(0u64, 0u64); IOV_LIMIT];
                    let n = e.pieces(raw, &mut pieces);
                    let pid = Self::peer(g, peer).map_or(0, |p| p.pid);
                    let r = mrs.with_region(e.key, e.addr, len, MrAccess::REMOTE_WRITE, |p| {
                        let local = [IoVec { base: p, len }];
                        // SAFETY: `p` starts `len` checked bytes of an open region,
                        // held open for this call.
                        unsafe { segment::cma_read(pid, &local, &pieces[..n]) }
                    });
                    match r {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(_)) => Err(Error::Io),
                        Err(e) => Err(e),
                    }
                } else {
                    let st = InStream::Write { key: e.key, addr: e.addr, len: e.len, got: 0, err: None, data };
                    g.in_streams.insert((peer, e.id), st);
                    let mut cts = Entry::new(Kind::Cts);
                    cts.id = e.id;
                    self.send_entry(g, peer, &cts, |_| {});
                    if e.len == 0 {
                        self.finish_in_stream(g, peer, e.id);
                    }
                    return Ok(());
                }
            }
            Mode::None => return Err("write without a payload mode".into()),
        };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = e.id;
        match status {
            Ok(()) => {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
                if let Some(d) = data {
                    self.remote_cq_data(g, peer, d);
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote write of {} bytes: {err}", e.len);
                ack.aux = err.errno() as u32;
            }
        }
        let _ = self.ensure_tx(g, peer);
        self.send_entry(g, peer, &ack, |_| {});
        Ok(())
    }

    fn on_read(
        &self,
        g: &mut Inner,
        peer: PeerId,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        if !matches!(e.mode, Mode::Iov | Mode::Stream) {
            return Err("read without its destination".into());
        }
        let len = usize::try_from(e.len).map_err(|_| "read too long")?;
        self.ensure_tx(g, peer).map_err(|_| "cannot answer the peer".to_string())?;
        let mrs = self.domain.objs.mrs();
        let status = if let Err(err) = mrs.lookup(e.key, e.addr, len, MrAccess::REMOTE_READ) {
            Err(err)
        } else if e.mode == Mode::Iov && self.cma_ok(g, peer) {
            let mut pieces = [(0u64, 0u64); IOV_LIMIT];
            let n = e.pieces(raw, &mut pieces);
            let pid = Self::peer(g, peer).map_or(0, |p| p.pid);
            let r = mrs.with_region(e.key, e.addr, len, MrAccess::REMOTE_READ, |p| {
                let local = [IoVec { base: p, len }];
                // SAFETY: `p` starts `len` checked bytes of an open region, held
                // open for this call; cma_write only reads them.
                unsafe { segment::cma_write(pid, &local, &pieces[..n]) }
            });
            match r {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(_)) => Err(Error::Io),
                Err(e) => Err(e),
            }
        } else {
            g.rd_streams.push_back(ReadStream { peer, id: e.id, key: e.key, addr: e.addr, len: e.len, off: 0 });
            self.push_read_streams(g);
            return Ok(());
        };
        let mut ack = Entry::new(Kind::Ack);
        ack.id = e.id;
        match status {
            Ok(()) => {
                if let Some(c) = &g.b.rma_read_cntr {
                    c.inc();
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote read of {len} bytes: {err}");
                ack.aux = err.errno() as u32;
            }
        }
        self.send_entry(g, peer, &ack, |_| {});
        Ok(())
    }

    fn on_atomic(
        &self,
        g: &mut Inner,
        peer: PeerId,
        slot: usize,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        if !matches!(e.mode, Mode::Inline | Mode::Bounce) {
            return Err("atomic without its operands".into());
        }
        let mut args = g.rx.unexp_buf(0).map_err(|_| "no memory".to_string())?;
        self.take_payload(slot, e, raw, &mut args);
        let word = u32::try_from(e.data).map_err(|_| "unknown atomic operation")?;
        let (op, datatype, kind) = proto::atomic_unaux(word);
        let count = u32::try_from(e.tag).map_err(|_| "atomic count too large")?;
        let ah = AtomicHdr { op, datatype, kind, count };
        let desc = RmaDesc { addr: e.addr, key: e.key };
        let mut result = std::mem::take(&mut g.scratch);
        let r = fabric_util::atomic::serve(
            self.domain.objs.mrs(),
            self.domain.objs.atomic_lock(),
            desc,
            ah,
            &args,
            &mut result,
        );
        g.rx.recycle(args);
        let r = r.map_err(|why| why.to_string())?;
        let mut resp = Entry::new(Kind::AtomicResp);
        resp.id = e.id;
        match r {
            Ok(()) => {
                if let Some(c) = &g.b.rma_write_cntr {
                    c.inc();
                }
            }
            Err(err) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote atomic: {err}");
                resp.data = err.errno() as u64;
            }
        }
        self.ensure_tx(g, peer).map_err(|_| "cannot answer the peer".to_string())?;
        let len = result.len();
        resp.len = len as u64;
        if len <= INLINE_MAX {
            resp.mode = Mode::Inline;
            self.send_entry(g, peer, &resp, |b| b[proto::HDR..proto::HDR + len].copy_from_slice(&result));
        } else {
            let src = [IoVec { base: result.as_mut_ptr(), len }];
            self.send_bounce(g, peer, resp, &src, len);
        }
        g.scratch = result;
        Ok(())
    }

    /// Push chunks of the operations streaming their data, as bounce buffers and
    /// ring entries allow.
    fn push_streams(&self, g: &mut Inner) {
        let mut n = g.streams.len();
        while n > 0 {
            n -= 1;
            let Some(opid) = g.streams.pop_front() else { break };
            let Some(op) = g.ops.get_mut(opid) else { continue };
            let (peer, total, mut sent) = (op.peer, op.len, op.sent.unwrap_or(0));
            let (iov, niov) = (op.iov, op.niov);
            let Some(p) = Self::peer(g, peer) else { continue };
            if !p.queue.is_empty() {
                g.streams.push_back(opid);
                continue;
            }
            let Some(t) = p.tx.as_mut() else { continue };
            let mut pushed = false;
            while sent < total && t.prod.has_room() {
                let Some(bi) = t.alloc_bounce() else { break };
                let k = (total - sent).min(BOUNCE_SIZE);
                // SAFETY: the bounce buffer holds BOUNCE_SIZE >= k bytes and is
                // ours until freed; the source pieces are valid for reads.
                unsafe { gather(&iov[..niov], sent, t.bounce_ptr(bi), k) };
                let mut e = Entry::new(Kind::Data);
                e.mode = Mode::Bounce;
                e.aux = bi as u32;
                e.id = opid;
                e.addr = sent as u64;
                e.len = k as u64;
                t.prod.try_push(|b| e.encode(b));
                sent += k;
                pushed = true;
            }
            if pushed {
                Self::wake(p);
            }
            if let Some(op) = g.ops.get_mut(opid) {
                op.sent = Some(sent);
            }
            if sent < total {
                g.streams.push_back(opid);
            }
            // Complete once the receiver acknowledges the last chunk.
        }
    }

    /// Answer reads as chunks, as bounce buffers and ring entries allow.
    fn push_read_streams(&self, g: &mut Inner) {
        let mut n = g.rd_streams.len();
        while n > 0 {
            n -= 1;
            let Some(mut rs) = g.rd_streams.pop_front() else { break };
            let mrs = self.domain.objs.mrs();
            let mut err: Option<Error> = None;
            {
                let Some(p) = Self::peer(g, rs.peer) else { continue };
                let Some(t) = p.tx.as_mut() else { continue };
                if p.queue.is_empty() {
                    let mut pushed = false;
                    while rs.off < rs.len && t.prod.has_room() {
                        let Some(bi) = t.alloc_bounce() else { break };
                        let k = (rs.len - rs.off).min(BOUNCE_SIZE as u64) as usize;
                        let dst = t.bounce_ptr(bi);
                        let r =
                            mrs.with_region(rs.key, rs.addr.wrapping_add(rs.off), k, MrAccess::REMOTE_READ, |src| {
                                // SAFETY: `src` starts k checked bytes of an open region;
                                // the bounce buffer holds BOUNCE_SIZE >= k bytes.
                                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, k) }
                            });
                        if let Err(e) = r {
                            t.seg.slot(t.slot).bounce_busy[bi].store(0, Ordering::Release);
                            err = Some(e);
                            break;
                        }
                        let mut e = Entry::new(Kind::Data);
                        e.flags = flags::RESP;
                        e.mode = Mode::Bounce;
                        e.aux = bi as u32;
                        e.id = rs.id;
                        e.addr = rs.off;
                        e.len = k as u64;
                        t.prod.try_push(|b| e.encode(b));
                        rs.off += k as u64;
                        pushed = true;
                    }
                    if pushed {
                        Self::wake(p);
                    }
                }
            }
            if err.is_some() || rs.off == rs.len {
                let mut ack = Entry::new(Kind::Ack);
                ack.id = rs.id;
                match err {
                    Some(e) => ack.aux = e.errno() as u32,
                    None => {
                        if let Some(c) = &g.b.rma_read_cntr {
                            c.inc();
                        }
                    }
                }
                self.send_entry(g, rs.peer, &ack, |_| {});
            } else {
                g.rd_streams.push_back(rs);
            }
        }
    }

    /// Notice peers that died or closed.
    fn check_peers(&self, g: &mut Inner) {
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
    fn peer_down(&self, g: &mut Inner, id: PeerId, err: Error) {
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
        if let Some(slot) = Self::peer(g, id).and_then(|p| p.rx.as_ref().map(|r| r.slot)) {
            self.release_rx(g, id, slot);
        }
        // Forget it: a later send attaches afresh (a restarted peer has a new
        // segment under a new name anyway).
        g.by_name.remove(&name);
        g.by_addr.retain(|_, v| *v != id);
        g.peers[id.idx as usize] = None;
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
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
        self.seg.mark_closed();
        g.closed = true;
    }
}

impl Progress for ShmEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.waker.fd())
    }

    fn prepare_sleep(&self) {
        // Waiting for room at peers (queued entries, streams to push): ask them to
        // wake us when they free some. The Waiter polls once more after this.
        let mut g = self.lock();
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

impl EndpointOps for ShmEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = self.domain.objs.find_cq(cq.fid()).ok_or(Error::Domain)?;
        let mut g = self.lock();
        g.b.set_cq(&ucq, flags)?;
        drop(g);
        if ucq.wait_obj() == WaitObj::Fd {
            // The application may poll the CQ's descriptor itself, without a
            // waiter announcing its sleep: have peers wake us always.
            self.seg.sleepers().fetch_add(1, Ordering::SeqCst);
        }
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
        let a = self.domain.objs.find_av(av.fid()).ok_or(Error::Domain)?;
        self.lock().b.av = Some(a);
        Ok(())
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        if g.enabled {
            return Ok(());
        }
        g.b.check_enable(true)?;
        g.enabled = true;
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

impl Drop for ShmEp {
    fn drop(&mut self) {
        let mut g = self.lock();
        self.close_locked(&mut g);
    }
}

//! udp RDM endpoints: reliable datagrams over one UDP socket.
//!
//! Every peer (a socket address) has a [`Channel`] of the shared reliability
//! protocol (`fabric_util::reliable`): sequence numbers, acknowledgements,
//! retransmission, flow control and in-order delivery. What the channel carries
//! are *frames*, each a `wire` header (40 bytes) and its payload, cut into
//! segments of at most one datagram:
//!
//! | frame | header fields | payload | answered by |
//! |---|---|---|---|
//! | `Msg` | `len` message bytes, `tag`, `data` (CQ data) | the message | the channel's acknowledgement |
//! | `WriteReq` | `len` payload bytes, `id` request, `data` CQ data, `LAST` | [`RmaDesc`] + up to [`RMA_CHUNK`] bytes | `RmaResp` |
//! | `ReadReq` | `len` bytes wanted, `tag` address, `data` key, `id`, `LAST` | none | `RmaResp` with the bytes |
//! | `AtomicReq` | `len` payload bytes, `id` | [`RmaDesc`] + [`AtomicHdr`] + operands | `RmaResp` with prior values |
//! | `RmaResp` | `len`, `id` echoed, `data` 0 or the error number | data read, prior values | |
//!
//! A message is delivered as its segments arrive: the first segment (which holds
//! the whole header) picks the matching posted receive, and every segment is
//! copied straight into it; a message with no receive posted yet is gathered in
//! an unexpected buffer. An unexpected message larger than [`UNEXP_MAX_ONE`], or
//! one beyond [`UNEXP_MAX_COUNT`] waiting messages, is not taken: the channel holds
//! it, its window closes, and the sender stops until a receive is posted. So a
//! fast sender cannot overrun a slow receiver, whatever the sizes.
//!
//! Completions: a send completes when the peer acknowledged all of it (transmit
//! complete); RMA and atomic operations when their answers arrive. A peer silent
//! for the unreachable time-out while we wait for it fails everything in flight
//! with it (`FI_EHOSTUNREACH`), and is forgotten.

use crate::domain::UdpDomain;
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, Op, RmaOp};
use fabric_core::{
    fi_log, Address, AtomicKind, BindFlags, Caps, CqEntry, EpType, Error, FiAddr, Info, MrAccess, OpFlags, Result,
};
use fabric_util::bind::Bindings;
use fabric_util::iov::gather;
use fabric_util::matcher::MsgSpec;
use fabric_util::progress::Progress;
use fabric_util::reliable::{self, Channel, Event, Segment, HEADER_LEN};
use fabric_util::rma_target::{Answers, RmaTarget};
use fabric_util::rx::msg_flags;
use fabric_util::rx::{RxAction, RxEngine, Target, Unexp, UnexpBody, IOV_LIMIT};
use fabric_util::slab::Slab;
use fabric_util::wire::{self, AtomicHdr, HdrFlags, Header, OpCode, RmaDesc, HDR_LEN, RMA_CHUNK};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The largest unexpected message gathered before a receive is posted for it.
pub(crate) const UNEXP_MAX_ONE: u64 = 64 << 20;
/// The most unexpected messages kept; later ones wait at their senders.
pub(crate) const UNEXP_MAX_COUNT: usize = 16 * 1024;
/// The largest message (and RMA or atomic operation).
pub(crate) const MAX_MSG: usize = 1 << 30;
/// The most datagrams read in one progress call.
const RECV_BATCH: usize = 64;
/// The largest UDP payload.
const DGRAM_MAX: usize = 65507;
/// The most operations in flight on one endpoint (`FI_EAGAIN` beyond).
pub(crate) const TX_DEPTH: usize = 8192;
/// The most peers one endpoint talks to; datagrams from more are dropped.
const PEERS_MAX: usize = 65536;
/// Socket buffer sizes asked for (the kernel may grant less).
const SOCK_BUF: usize = 4 << 20;
/// The most bytes of eager sends copied and completed before the peer has
/// acknowledged them; beyond, eager sends complete when acknowledged.
const COPY_BUDGET: usize = 1 << 20;
/// The largest message sent eagerly; larger ones wait at the sender until the
/// receiver has matched them (`Rts`, `Cts`, then `Data`).
pub(crate) const EAGER_MAX: usize = 64 << 10;
/// How often a peer we wait for an answer from (`Cts`, an RMA answer) is asked
/// for a sign of life while nothing else is in flight to it.
const KEEPALIVE: Duration = Duration::from_millis(500);
/// The smallest retransmission time-out.
const RTO_MIN: Duration = Duration::from_millis(2);
/// A peer silent this long while we wait for it is unreachable.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest message `inject` copies.
pub(crate) const RDM_INJECT: usize = 8192;
/// A frame's header plus its inline prefix (an RMA target and atomic header).
const HEAD_MAX: usize = HDR_LEN + RmaDesc::LEN + AtomicHdr::LEN;

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// A reference to a peer, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PeerId {
    idx: u32,
    gen: u32,
}

/// A large message announced to us: its peer and the sender's operation id
/// (which alone identify it: equality and hashing ignore `dc`).
#[derive(Debug, Clone, Copy, Eq)]
struct Rts {
    peer: PeerId,
    id: u64,
    /// Announced with `HdrFlags::DC`: acknowledge once its data is in.
    dc: bool,
}

impl PartialEq for Rts {
    fn eq(&self, o: &Rts) -> bool {
        (self.peer, self.id) == (o.peer, o.id)
    }
}

impl std::hash::Hash for Rts {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.peer, self.id).hash(h);
    }
}

/// A large message matched and cleared: where its data goes.
struct RndvIn {
    target: Target,
    /// The message as announced (tag, CQ data, length).
    hdr: Header,
    src: FiAddr,
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
    peer: PeerId,
    kind: OpKind,
    context: u64,
    flags: Caps,
    len: usize,
    /// The source of a send, write or atomic (operand, compare).
    src: [IoVec; IOV_LIMIT],
    nsrc: usize,
    /// The destination of a read, or of an atomic's prior values.
    dst: [IoVec; IOV_LIMIT],
    ndst: usize,
    /// An inject's own copy of its data (then `src` is unused).
    owned: Option<Vec<u8>>,
    /// No completion (inject).
    silent: bool,
    /// Posted with `FI_COMPLETION` ([`Bindings::tx_done`]).
    comp: bool,
    /// A send with `FI_DELIVERY_COMPLETE`: announced whatever its size, it also
    /// waits (once cleared) for the receiver's `Ack`.
    dc: bool,
    /// Its `Ack` came.
    acked: bool,
    /// Requests not yet answered (RMA, atomic) or frames not yet acknowledged (send).
    pending: u32,
    /// Bytes of a read answered so far.
    got: usize,
    /// The first error an answer reported.
    err: Option<Error>,
    /// A large send announced and not yet cleared (`Rts` sent, no `Cts` yet).
    announced: bool,
    /// Bytes of its copy counted against [`COPY_BUDGET`] (an eager send that
    /// completed when posted).
    budget: usize,
}

impl TxOp {
    /// Whether it waits for an answer from its peer (beyond acknowledgements).
    fn awaits_answer(&self) -> bool {
        self.announced || self.kind != OpKind::Send || (self.dc && !self.acked)
    }
}

// SAFETY: the pieces point into buffers the application handed over under the
// post methods' contracts (valid until the completion); they are only
// dereferenced under the endpoint's lock.
unsafe impl Send for TxOp {}

/// One request or frame of operation `opid` is done (with `err`, if it failed);
/// the operation completes when none is left.
/// Returns the bytes of our own copy of its data it held, if it finished.
fn op_step(ops: &mut Slab<TxOp>, b: &Bindings, opid: u64, err: Option<Error>) -> usize {
    let Some(op) = ops.get_mut(opid) else { return 0 };
    if op.err.is_none() {
        op.err = err;
    }
    op.pending = op.pending.saturating_sub(1);
    if op.pending > 0 {
        return 0;
    }
    let Some(op) = ops.remove(opid) else { return 0 };
    let copied = op.budget;
    if op.silent {
        if let Some(err) = op.err {
            fi_log!(Level::Info, NAME, "ep_data", "a send that had completed (its data copied) failed later: {err}");
        }
        if op.kind != OpKind::Send {
            // An injected write, counted now (a send completed when posted).
            b.tx_count(op.err.is_some());
        }
        return copied;
    }
    let mut c = CqEntry::new(op.context, op.flags);
    c.len = op.len;
    match op.err {
        None => b.tx_done(c, op.comp),
        Some(err) => b.tx_err(c, err),
    }
    copied
}

/// A frame of header only (`Cts`, `Nack`, the keep-alive `Hello`, `Shutdown`).
fn control(op: OpCode, id: u64) -> Frame {
    let mut h = Header::new(op);
    h.id = id;
    Frame::new(0, &h, &[], FrameSrc::None, false)
}

/// Where a frame's payload comes from.
enum FrameSrc {
    /// No payload beyond the head.
    None,
    /// Bytes `off..off + len` of its operation's source (or inject copy).
    Op { off: usize, len: usize },
    /// Our own bytes (an answer to a peer).
    Owned(Vec<u8>),
}

/// A frame given to a channel, until acknowledged or failed.
struct Frame {
    /// The user operation it belongs to; 0 for answers to a peer.
    op: u64,
    head: [u8; HEAD_MAX],
    head_len: usize,
    src: FrameSrc,
    /// Whether the acknowledgement completes the operation (sends).
    ack_completes: bool,
    /// Whether a completion waits for the acknowledgement (the peer then
    /// acknowledges it at once: [`Channel::send_awaited`]).
    awaited: bool,
    /// An answer to the peer's request, counted in its [`Answers`] until
    /// acknowledged.
    answer: bool,
}

impl Frame {
    fn new(op: u64, h: &Header, prefix: &[u8], src: FrameSrc, ack_completes: bool) -> Frame {
        let mut head = [0u8; HEAD_MAX];
        head[..HDR_LEN].copy_from_slice(&h.encode());
        let n = prefix.len().min(HEAD_MAX - HDR_LEN);
        head[HDR_LEN..HDR_LEN + n].copy_from_slice(&prefix[..n]);
        Frame { op, head, head_len: HDR_LEN + n, src, ack_completes, awaited: false, answer: false }
    }

    fn len(&self) -> usize {
        self.head_len
            + match &self.src {
                FrameSrc::None => 0,
                FrameSrc::Op { len, .. } => *len,
                FrameSrc::Owned(v) => v.len(),
            }
    }
}

/// Fill `buf` with bytes `off..` of frame `f` of operation table `ops`.
fn fill_frame(f: &Frame, ops: &Slab<TxOp>, off: usize, buf: &mut [u8]) {
    let mut done = 0;
    if off < f.head_len {
        let k = (f.head_len - off).min(buf.len());
        buf[..k].copy_from_slice(&f.head[off..off + k]);
        done = k;
    }
    if done == buf.len() {
        return;
    }
    let poff = off + done - f.head_len;
    let rest = &mut buf[done..];
    match &f.src {
        FrameSrc::None => rest.fill(0),
        FrameSrc::Owned(v) => {
            let k = v.len().saturating_sub(poff).min(rest.len());
            rest[..k].copy_from_slice(&v[poff..poff + k]);
        }
        FrameSrc::Op { off: base, .. } => match ops.get(f.op) {
            Some(op) => match &op.owned {
                Some(v) => {
                    let s = (base + poff).min(v.len());
                    let k = (v.len() - s).min(rest.len());
                    rest[..k].copy_from_slice(&v[s..s + k]);
                }
                // SAFETY: the source pieces are valid for reads until the
                // operation completes (post contract), and it has not: it is in
                // the table. `rest` is our datagram buffer.
                None => unsafe { gather(&op.src[..op.nsrc], base + poff, rest.as_mut_ptr(), rest.len()) },
            },
            None => rest.fill(0),
        },
    }
}

/// Where the frame arriving from a peer goes.
enum Dest {
    /// Into a posted receive.
    Recv { target: Target },
    /// Into an unexpected buffer.
    Unexp { buf: Vec<u8>, m: MsgSpec },
    /// Into a region (a write request), unless refused.
    Write { desc: RmaDesc, err: Option<Error> },
    /// Gathered here (an atomic request, which needs all of it).
    Stage { buf: Vec<u8> },
    /// An answer: into operation `op`'s destination at `base`.
    Resp { op: u64, base: usize },
    /// Into the receive a large message was matched to.
    Rndv(RndvIn),
    /// Nowhere (a frame without payload, an answer to nothing).
    Skip,
}

/// A frame arriving from a peer: its header, where it goes, and bytes seen.
struct InFrame {
    hdr: Header,
    dest: Dest,
    /// Payload bytes seen (after the header).
    off: u64,
}

struct Peer {
    addr: SocketAddr,
    uri: Address,
    chan: Channel,
    /// The frame arriving, between its first and last segments.
    rx: Option<InFrame>,
    /// A protocol violation seen while taking its segments.
    broken: Option<String>,
    /// Its RMA operations arriving in several requests, in progress here (at
    /// most [`fabric_util::rma_target::OPS_MAX`]; a peer opening more is dropped).
    rma: RmaTarget,
    /// The answers it is owed: queued and not yet acknowledged, or read
    /// requests waiting for room; at `ANSWERS_MAX` its requests are left with
    /// the channel, whose window closes.
    answers: Answers,
    /// Its handle in our AV, valid for `av_version`.
    fi_addr: FiAddr,
    av_version: u64,
    gen: u32,
}

struct Inner {
    enabled: bool,
    closed: bool,
    b: Bindings,
    peers: Vec<Option<Peer>>,
    by_sock: HashMap<SocketAddr, PeerId>,
    /// AV handle to peer, valid for `cache_version`.
    by_addr: HashMap<FiAddr, PeerId>,
    cache_version: u64,
    rx: RxEngine<Rts>,
    /// Large messages we cleared to send (`Cts`), waiting for their data.
    rndv_in: HashMap<Rts, RndvIn>,
    ops: Slab<TxOp>,
    frames: Slab<Frame>,
    /// Answers produced while a channel was busy, to give it afterwards.
    outbox: Vec<(PeerId, Frame)>,
    /// Datagram buffers.
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
    /// When to look for peers that need a keep-alive.
    next_keepalive: Instant,
    /// Bytes of eager sends copied and completed, not yet acknowledged.
    copied: usize,
}

/// A udp RDM endpoint.
pub(crate) struct UdpRdmEp {
    fid: u64,
    domain: Arc<UdpDomain>,
    sock: UdpSocket,
    name: SocketAddr,
    epoch: u32,
    /// The channels' tunables.
    cfg: reliable::Config,
    inner: Mutex<Inner>,
    me: Weak<UdpRdmEp>,
}

/// The channel configuration for datagrams of at most `dgram` bytes, and a
/// socket receive buffer of `rcvbuf` bytes.
pub(crate) fn channel_config(dgram: usize, rcvbuf: usize) -> reliable::Config {
    let dgram = dgram.clamp(HEADER_LEN + HEAD_MAX, DGRAM_MAX);
    // Keep what one peer may have in flight within half the receive buffer.
    let window = (rcvbuf / 2 / (dgram + 256)).clamp(8, 1024) as u32;
    reliable::Config {
        mss: dgram - HEADER_LEN,
        window,
        ack_every: (window / 4).max(1),
        ack_delay: Duration::from_micros(200),
        rto_initial: Duration::from_millis(20),
        rto_min: RTO_MIN,
        rto_max: Duration::from_millis(500),
        unreachable_after: PEER_TIMEOUT,
        // UDP's own checksum covers the payload end to end.
        payload_checksum: false,
    }
}

impl UdpRdmEp {
    pub(crate) fn new(domain: Arc<UdpDomain>, info: &Info) -> Result<Arc<UdpRdmEp>> {
        if info.ep_attr.ep_type != EpType::Rdm {
            return Err(Error::Inval);
        }
        let (sock, name) = domain.open_socket(info.src_addr.as_ref().and_then(|a| a.sockaddr()))?;
        // Reliable traffic wants room for a window of datagrams per peer: larger
        // buffers than the system's default, unless configured.
        if domain.config().rcvbuf == 0 {
            let _ = sock.set_recv_buffer_size(SOCK_BUF);
        }
        if domain.config().sndbuf == 0 {
            let _ = sock.set_send_buffer_size(SOCK_BUF);
        }
        let rcvbuf = sock.recv_buffer_size().unwrap_or(212_992);
        let sock: UdpSocket = sock.into();
        let cfg = channel_config(domain.max_payload(name.is_ipv6()), rcvbuf);
        let inner = Inner {
            enabled: false,
            closed: false,
            b: Bindings::default(),
            peers: Vec::new(),
            by_sock: HashMap::new(),
            by_addr: HashMap::new(),
            cache_version: u64::MAX,
            rx: RxEngine::new(EAGER_MAX),
            rndv_in: HashMap::new(),
            ops: Slab::new(),
            frames: Slab::new(),
            outbox: Vec::new(),
            rbuf: vec![0u8; DGRAM_MAX + 1],
            sbuf: vec![0u8; cfg.mss + HEADER_LEN],
            next_keepalive: Instant::now(),
            copied: 0,
        };
        Ok(Arc::new_cyclic(|me| UdpRdmEp {
            fid: fabric_core::prov::next_fid(),
            domain,
            sock,
            name,
            epoch: (fabric_util::random::u64_or_fallback() as u32).max(1),
            cfg,
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

    fn peer(g: &mut Inner, id: PeerId) -> Option<&mut Peer> {
        g.peers.get_mut(id.idx as usize)?.as_mut().filter(|p| p.gen == id.gen)
    }

    /// The peer at `addr`, created if new (`None` when over the peer limit).
    fn peer_by_sock(&self, g: &mut Inner, addr: SocketAddr, now: Instant) -> Option<PeerId> {
        if let Some(&id) = g.by_sock.get(&addr) {
            return Some(id);
        }
        if g.by_sock.len() >= PEERS_MAX {
            return None;
        }
        let idx = match g.peers.iter().position(|p| p.is_none()) {
            Some(i) => i,
            None => {
                g.peers.push(None);
                g.peers.len() - 1
            }
        };
        static GEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let gen = GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        g.peers[idx] = Some(Peer {
            addr,
            uri: Address::from(addr),
            chan: Channel::new(self.cfg.clone(), self.epoch, now),
            rx: None,
            broken: None,
            rma: RmaTarget::new(),
            answers: Answers::new(),
            fi_addr: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            gen,
        });
        let id = PeerId { idx: idx as u32, gen };
        g.by_sock.insert(addr, id);
        Some(id)
    }

    /// The peer behind an AV handle.
    fn peer_for(&self, g: &mut Inner, dest: FiAddr, now: Instant) -> Result<PeerId> {
        let av = g.b.av.clone().ok_or(Error::NoAv)?;
        let v = av.version();
        if g.cache_version != v {
            g.by_addr.clear();
            g.cache_version = v;
        }
        if let Some(&id) = g.by_addr.get(&dest) {
            if Self::peer(g, id).is_some() {
                return Ok(id);
            }
        }
        let addr = av.get(dest).and_then(|a| a.sockaddr()).ok_or(Error::Inval)?;
        let id = self.peer_by_sock(g, addr, now).ok_or(Error::Again)?;
        g.by_addr.insert(dest, id);
        Ok(id)
    }

    /// The AV handle of a peer (`FI_ADDR_NOTAVAIL` when not in the AV).
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

    fn check_ready(g: &Inner, need_cq: bool) -> Result<()> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if need_cq && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if g.ops.len() >= TX_DEPTH {
            return Err(Error::Again);
        }
        Ok(())
    }

    /// Give a frame to a peer's channel.
    fn queue_frame(g: &mut Inner, peer: PeerId, f: Frame, now: Instant) -> Result<()> {
        let (len, awaited) = (f.len(), f.awaited);
        let fid = g.frames.insert(f);
        let Some(p) = Self::peer(g, peer) else {
            g.frames.remove(fid);
            return Err(Error::HostUnreach);
        };
        let sent = if awaited { p.chan.send_awaited(now, fid, len) } else { p.chan.send(now, fid, len) };
        if sent.is_err() {
            g.frames.remove(fid);
            return Err(Error::HostUnreach);
        }
        Ok(())
    }

    // ----- posting -----

    fn send_common(&self, op: &Op<'_>, flags: OpFlags, inject: Option<&[u8]>) -> Result<()> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if len > MAX_MSG {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        Self::check_ready(g, inject.is_none())?;
        let now = Instant::now();
        let peer = self.peer_for(g, op.addr, now)?;
        let tagged = flags.contains(OpFlags::TAGGED);
        let mut h = Header::new(OpCode::Msg);
        h.len = len as u64;
        h.tag = op.tag;
        let mut hf = if tagged { HdrFlags::TAGGED } else { 0 };
        if flags.contains(OpFlags::REMOTE_CQ_DATA) {
            hf |= HdrFlags::CQ_DATA;
            h.data = op.data;
        }
        h.flags = HdrFlags(hf);
        let mut src = [NULL_IOV; IOV_LIMIT];
        src[..op.iov.len()].copy_from_slice(op.iov);
        // An eager send is copied and completes now (as tcp's completes once in
        // the socket): the channel delivers it reliably from our copy, and the
        // ping-pong of small messages never waits for an acknowledgement. Within
        // a budget (as a socket's send buffer), and only to a peer that has
        // answered us: a first send to a peer that may not exist completes when
        // acknowledged, or fails.
        let heard = Self::peer(g, peer).is_some_and(|p| p.chan.peer_epoch().is_some());
        // FI_DELIVERY_COMPLETE: by rendezvous whatever the size, completing on
        // the receiver's acknowledgement that the data is in the receive.
        let dc = inject.is_none() && flags.contains(OpFlags::DELIVERY_COMPLETE);
        let copy = heard && inject.is_none() && !dc && len <= EAGER_MAX && g.copied + len <= COPY_BUDGET;
        let owned = match inject {
            Some(d) => Some(d.to_vec()),
            None if copy => {
                let mut v = vec![0u8; len];
                // SAFETY: the pieces are valid for reads under post_send's
                // contract; `v` is our own buffer of `len` bytes.
                unsafe { gather(op.iov, 0, v.as_mut_ptr(), len) };
                Some(v)
            }
            None => None,
        };
        if copy {
            g.copied += len;
        }
        let opid = g.ops.insert(TxOp {
            peer,
            kind: OpKind::Send,
            context: op.context,
            flags: Caps::SEND | msg_flags(tagged),
            len,
            src,
            nsrc: if owned.is_some() { 0 } else { op.iov.len() },
            dst: [NULL_IOV; IOV_LIMIT],
            ndst: 0,
            silent: owned.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
            dc,
            acked: false,
            owned,
            pending: 1,
            got: 0,
            err: None,
            announced: false,
            budget: 0,
        });
        let f = if (len > EAGER_MAX || dc) && inject.is_none() {
            // Announce it; the data follows the receiver's `Cts`.
            h.op = OpCode::Rts;
            h.id = opid;
            if dc {
                h.flags.0 |= HdrFlags::DC;
            }
            if let Some(o) = g.ops.get_mut(opid) {
                o.announced = true;
            }
            Frame::new(opid, &h, &[], FrameSrc::None, false)
        } else {
            let mut f = Frame::new(opid, &h, &[], FrameSrc::Op { off: 0, len }, true);
            // Unless it completed from its copy, the send waits for this frame's
            // acknowledgement.
            f.awaited = !copy && inject.is_none();
            f
        };
        if let Err(e) = Self::queue_frame(g, peer, f, now) {
            if let Some(o) = g.ops.remove(opid) {
                g.copied -= o.budget;
            }
            return Err(e);
        }
        if let Some(o) = g.ops.get_mut(opid).filter(|_| copy) {
            o.budget = len;
            let mut c = CqEntry::new(op.context, Caps::SEND | msg_flags(tagged));
            c.len = len;
            g.b.tx_done(c, flags.contains(OpFlags::COMPLETION));
        }
        if inject.is_some() {
            // An inject completes (for its counter) once its data is ours.
            g.b.tx_count(false);
        }
        self.flush_peer(g, peer, now);
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
        g.rx.post(&g.b, op, flags, op.addr)?;
        let now = Instant::now();
        self.run_rx_actions(g, now);
        Ok(())
    }

    fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, read: bool) -> Result<()> {
        if op.rma.len() != 1 || op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if op.rma[0].len != len {
            return Err(Error::Inval);
        }
        if len > MAX_MSG {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        Self::check_ready(g, inject.is_none())?;
        let now = Instant::now();
        let peer = self.peer_for(g, op.addr, now)?;
        let mut local = [NULL_IOV; IOV_LIMIT];
        local[..op.iov.len()].copy_from_slice(op.iov);
        let chunks = len.div_ceil(RMA_CHUNK).max(1);
        let opid = g.ops.insert(TxOp {
            peer,
            kind: if read { OpKind::Read } else { OpKind::Write },
            context: op.context,
            flags: Caps::RMA | if read { Caps::READ } else { Caps::WRITE },
            len,
            src: if read { [NULL_IOV; IOV_LIMIT] } else { local },
            nsrc: if read || inject.is_some() { 0 } else { op.iov.len() },
            dst: if read { local } else { [NULL_IOV; IOV_LIMIT] },
            ndst: if read { op.iov.len() } else { 0 },
            owned: inject.map(|d| d.to_vec()),
            silent: inject.is_some(),
            comp: flags.contains(OpFlags::COMPLETION),
            dc: false,
            acked: false,
            pending: chunks as u32,
            got: 0,
            err: None,
            announced: false,
            budget: 0,
        });
        let key = op.rma[0].key;
        for i in 0..chunks {
            let off = i * RMA_CHUNK;
            let n = (len - off).min(RMA_CHUNK);
            let last = i + 1 == chunks;
            let addr = op.rma[0].addr.wrapping_add(off as u64);
            let mut h = Header::new(if read { OpCode::ReadReq } else { OpCode::WriteReq });
            h.id = opid;
            let mut hf = if last { HdrFlags::LAST } else { 0 };
            let f = if read {
                h.len = n as u64;
                h.tag = addr;
                h.data = key;
                h.flags = HdrFlags(hf);
                Frame::new(opid, &h, &[], FrameSrc::None, false)
            } else {
                h.len = (RmaDesc::LEN + n) as u64;
                h.tag = len as u64;
                if last && flags.contains(OpFlags::REMOTE_CQ_DATA) {
                    hf |= HdrFlags::CQ_DATA;
                    h.data = op.data;
                }
                h.flags = HdrFlags(hf);
                let d = RmaDesc { addr, key };
                Frame::new(opid, &h, &d.encode(), FrameSrc::Op { off, len: n }, false)
            };
            if let Err(e) = Self::queue_frame(g, peer, f, now) {
                if i == 0 {
                    g.ops.remove(opid);
                    return Err(e);
                }
                // The channel failed between two requests: the events of the
                // earlier ones fail the operation.
                break;
            }
        }
        self.flush_peer(g, peer, now);
        Ok(())
    }

    /// Post an atomic; with `inject` its operands are copied now; with `flags`
    /// [`OpFlags::silent`] its completion is not reported, else it is when
    /// `flags` has `COMPLETION` or the queue is not selective.
    fn atomic_common(&self, a: &AtomicDesc, inject: bool, flags: OpFlags) -> Result<()> {
        let silent = flags.silent();
        let max = fabric_util::atomic::valid(a.op, a.datatype, a.kind)?;
        let l = fabric_util::atomic::lens(a.op, a.datatype, a.kind, a.count)?;
        if a.count == 0 || a.count > max || a.rma.len != l.target {
            return Err(Error::Inval);
        }
        if a.operand.len < l.operand || a.compare.len < l.compare || a.result.len < l.result {
            return Err(Error::Inval);
        }
        if l.operand > wire::ATOMIC_MAX || l.compare > wire::ATOMIC_MAX {
            return Err(Error::Inval);
        }
        // SAFETY: the operands are valid for reads during the call (inject contract).
        let owned = inject.then(|| unsafe { fabric_util::atomic::copy_operands(a, &l) });
        let mut g = self.lock();
        let g = &mut *g;
        Self::check_ready(g, !silent)?;
        let now = Instant::now();
        let peer = self.peer_for(g, a.addr, now)?;
        let mut src = [NULL_IOV; IOV_LIMIT];
        src[0] = IoVec { base: a.operand.base, len: l.operand };
        src[1] = IoVec { base: a.compare.base, len: l.compare };
        let mut dst = [NULL_IOV; IOV_LIMIT];
        dst[0] = IoVec { base: a.result.base, len: l.result };
        let opid = g.ops.insert(TxOp {
            peer,
            kind: OpKind::Atomic,
            context: a.context,
            flags: Caps::ATOMIC | if a.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ },
            len: l.target,
            src,
            nsrc: if owned.is_some() { 0 } else { 2 },
            dst,
            ndst: usize::from(l.result > 0),
            owned,
            silent,
            comp: flags.contains(OpFlags::COMPLETION),
            dc: false,
            acked: false,
            pending: 1,
            got: 0,
            err: None,
            announced: false,
            budget: 0,
        });
        let kind = match a.kind {
            AtomicKind::Plain => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let ah = AtomicHdr { op: a.op as u8, datatype: a.datatype as u8, kind, count: a.count as u32 };
        let mut prefix = [0u8; RmaDesc::LEN + AtomicHdr::LEN];
        prefix[..RmaDesc::LEN].copy_from_slice(&RmaDesc { addr: a.rma.addr, key: a.rma.key }.encode());
        prefix[RmaDesc::LEN..].copy_from_slice(&ah.encode());
        let n = l.operand + l.compare;
        let mut h = Header::new(OpCode::AtomicReq);
        h.id = opid;
        h.len = (prefix.len() + n) as u64;
        let f = Frame::new(opid, &h, &prefix, FrameSrc::Op { off: 0, len: n }, false);
        if let Err(e) = Self::queue_frame(g, peer, f, now) {
            g.ops.remove(opid);
            return Err(e);
        }
        self.flush_peer(g, peer, now);
        Ok(())
    }

    /// Answer the large messages the receive engine matched (`Cts`) or
    /// discarded (`Nack`), and send what that queued.
    fn run_rx_actions(&self, g: &mut Inner, now: Instant) {
        let mut touched = Vec::new();
        while let Some(a) = g.rx.take_action() {
            match a {
                RxAction::Start(m) => {
                    if Self::peer(g, m.rts.peer).is_none() {
                        g.rx.fail(&g.b, m.target, &m.hdr, m.src, Error::ConnReset);
                        continue;
                    }
                    // The data's completion acknowledges it (the flag and the id
                    // stay in our copy of the header, never on the wire again).
                    let mut hdr = m.hdr;
                    if m.rts.dc {
                        hdr.flags.0 |= HdrFlags::DC;
                        hdr.id = m.rts.id;
                    }
                    g.rndv_in.insert(m.rts, RndvIn { target: m.target, hdr, src: m.src });
                    g.outbox.push((m.rts.peer, control(OpCode::Cts, m.rts.id)));
                    touched.push(m.rts.peer);
                }
                RxAction::Discard(r) => {
                    g.outbox.push((r.peer, control(OpCode::Nack, r.id)));
                    touched.push(r.peer);
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        let mut outbox = std::mem::take(&mut g.outbox);
        for (peer, f) in outbox.drain(..) {
            let _ = Self::queue_frame(g, peer, f, now);
        }
        g.outbox = outbox;
        touched.dedup();
        for peer in touched {
            self.flush_peer(g, peer, now);
        }
    }

    /// Ask the peers we wait for answers from, and send nothing else to, for a
    /// sign of life (a keep-alive frame they acknowledge): so that a peer that
    /// died is noticed by its channel's time-out.
    fn keepalive(&self, g: &mut Inner, now: Instant) {
        if now < g.next_keepalive {
            return;
        }
        g.next_keepalive = now + KEEPALIVE;
        let mut peers: Vec<PeerId> = Vec::new();
        for id in g.ops.ids(|o| o.awaits_answer()) {
            if let Some(o) = g.ops.get(id) {
                if !peers.contains(&o.peer) {
                    peers.push(o.peer);
                }
            }
        }
        for peer in peers {
            if Self::peer(g, peer).is_some_and(|p| p.chan.is_idle()) {
                let _ = Self::queue_frame(g, peer, control(OpCode::Hello, 0), now);
            }
        }
    }

    // ----- completing operations -----

    fn op_step(g: &mut Inner, opid: u64, err: Option<Error>) {
        g.copied -= op_step(&mut g.ops, &g.b, opid, err);
    }

    /// Complete an operation now with `err` (its first error, if it had one),
    /// whatever it still waited for.
    fn fail_op(g: &mut Inner, opid: u64, err: Error) {
        if let Some(op) = g.ops.get_mut(opid) {
            op.pending = 1;
        }
        Self::op_step(g, opid, Some(err));
    }

    /// What a channel told us about one of its frames.
    fn on_event(g: &mut Inner, peer: PeerId, ev: Event) {
        let (fid, ok) = match ev {
            Event::Acked(f) => (f, true),
            Event::Failed(f) => (f, false),
        };
        let Some(f) = g.frames.remove(fid) else { return };
        if f.answer {
            if let Some(p) = Self::peer(g, peer) {
                p.answers.taken(f.len());
            }
        }
        if f.op == 0 {
            return;
        }
        if !ok {
            // The request is lost, and with it its answer.
            Self::op_step(g, f.op, Some(Error::HostUnreach));
        } else if f.ack_completes {
            Self::op_step(g, f.op, None);
        }
    }

    // ----- progress -----

    /// Transmit what a peer's channel has due.
    fn flush_peer(&self, g: &mut Inner, id: PeerId, now: Instant) {
        let Inner { peers, frames, ops, sbuf, .. } = g;
        let Some(p) = peers.get_mut(id.idx as usize).and_then(|p| p.as_mut()).filter(|p| p.gen == id.gen) else {
            return;
        };
        let mut fill = |fid: u64, off: usize, buf: &mut [u8]| match frames.get(fid) {
            Some(f) => fill_frame(f, ops, off, buf),
            None => buf.fill(0),
        };
        while let Some(n) = p.chan.poll_transmit(now, sbuf, &mut fill) {
            match self.sock.send_to(&sbuf[..n], p.addr) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // The socket buffer is full: this datagram is lost like any
                    // other, and retransmitted; stop for now.
                    break;
                }
                Err(e) => {
                    fi_log!(Level::Debug, NAME, "ep_data", "send to {} failed: {e}", p.addr);
                    break;
                }
            }
        }
    }

    fn progress_locked(&self, g: &mut Inner) {
        if g.closed || !g.enabled {
            return;
        }
        let now = Instant::now();
        self.receive(g, now);
        self.run_rx_actions(g, now);
        self.keepalive(g, now);
        for idx in 0..g.peers.len() {
            let Some(p) = g.peers[idx].as_mut() else { continue };
            let id = PeerId { idx: idx as u32, gen: p.gen };
            if p.chan.poll_timeout().is_some_and(|t| t <= now) {
                p.chan.handle_timeout(now);
            }
            if p.chan.held() > 0 {
                self.deliver_held(g, id);
            }
            self.after_channel(g, id, now);
        }
    }

    /// Drain a peer's channel events, queue its answers, transmit, and forget it
    /// if it failed.
    fn after_channel(&self, g: &mut Inner, id: PeerId, now: Instant) {
        let mut outbox = std::mem::take(&mut g.outbox);
        for (peer, f) in outbox.drain(..) {
            let _ = Self::queue_frame(g, peer, f, now);
        }
        g.outbox = outbox;
        while let Some(ev) = Self::peer(g, id).and_then(|p| p.chan.poll_event()) {
            Self::on_event(g, id, ev);
        }
        if Self::peer(g, id).is_some_and(|p| p.answers.waiting() > 0) {
            self.serve_waiting(g, id);
            let mut outbox = std::mem::take(&mut g.outbox);
            for (peer, f) in outbox.drain(..) {
                let _ = Self::queue_frame(g, peer, f, now);
            }
            g.outbox = outbox;
        }
        let Some(p) = Self::peer(g, id) else { return };
        if let Some(why) = p.broken.take() {
            if why.is_empty() {
                fi_log!(Level::Info, NAME, "ep_data", "peer {} closed its endpoint", p.addr);
                self.peer_down(g, id, Error::ConnReset);
            } else {
                fi_log!(Level::Warn, NAME, "ep_data", "protocol error from {}: {why}; dropping the peer", p.addr);
                // Tell it, so that what it waits for from us fails now rather than
                // at its time-out (best effort, as when we close).
                if Self::queue_frame(g, id, control(OpCode::Shutdown, 0), now).is_ok() {
                    self.flush_peer(g, id, now);
                }
                self.peer_down(g, id, Error::Io);
            }
            return;
        }
        if p.chan.is_failed() {
            fi_log!(Level::Info, NAME, "ep_data", "peer {} is unreachable: failing what is in flight with it", p.addr);
            self.peer_down(g, id, Error::HostUnreach);
            return;
        }
        self.flush_peer(g, id, now);
    }

    /// Read the datagrams waiting on the socket.
    fn receive(&self, g: &mut Inner, now: Instant) {
        let mut buf = std::mem::take(&mut g.rbuf);
        for _ in 0..RECV_BATCH {
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // An ICMP error of an earlier send (port unreachable): the
                    // channel's time-out decides about that peer.
                    fi_log!(Level::Debug, NAME, "ep_data", "receive: {e}");
                    continue;
                }
            };
            let (h, payload) = match reliable::Header::decode(&buf[..n]) {
                Ok(r) => r,
                Err(e) => {
                    fi_log!(Level::Debug, NAME, "ep_data", "dropped a datagram from {from}: {e}");
                    continue;
                }
            };
            let Some(mut id) = self.peer_by_sock(g, from, now) else {
                continue;
            };
            let mut r = self.handle(g, id, &h, payload, now);
            if let Err(reliable::Violation::OtherEpoch(e)) = r {
                fi_log!(Level::Info, NAME, "ep_data", "peer {from} restarted (epoch {e:#x})");
                self.peer_down(g, id, Error::ConnReset);
                let Some(nid) = self.peer_by_sock(g, from, now) else { continue };
                id = nid;
                r = self.handle(g, id, &h, payload, now);
            }
            if let Err(v) = r {
                fi_log!(Level::Debug, NAME, "ep_data", "dropped a datagram from {from}: {v}");
            }
            self.after_channel(g, id, now);
        }
        g.rbuf = buf;
    }

    /// Feed one datagram to a peer's channel, taking its segments.
    fn handle(
        &self,
        g: &mut Inner,
        id: PeerId,
        h: &reliable::Header,
        payload: &[u8],
        now: Instant,
    ) -> std::result::Result<(), reliable::Violation> {
        let src = Self::src_of(g, id);
        let Inner { peers, rx, rndv_in, b, ops, outbox, copied, .. } = g;
        let Some(p) = peers.get_mut(id.idx as usize).and_then(|p| p.as_mut()) else { return Ok(()) };
        let Peer { chan, rx: state, broken, rma, answers, .. } = p;
        let mut t = Taker { ep: self, rx, rndv_in, b, ops, outbox, copied, peer: id, src, state, broken, rma, answers };
        chan.handle(now, h, payload, &mut |seg| t.segment(seg))
    }

    /// Offer a peer's held segments again (a receive may have been posted).
    fn deliver_held(&self, g: &mut Inner, id: PeerId) {
        let src = Self::src_of(g, id);
        let Inner { peers, rx, rndv_in, b, ops, outbox, copied, .. } = g;
        let Some(p) = peers.get_mut(id.idx as usize).and_then(|p| p.as_mut()) else { return };
        let Peer { chan, rx: state, broken, rma, answers, .. } = p;
        let mut t = Taker { ep: self, rx, rndv_in, b, ops, outbox, copied, peer: id, src, state, broken, rma, answers };
        chan.poll_deliver(&mut |seg| t.segment(seg));
    }

    /// Answer a peer's read requests that waited for it to take its answers,
    /// as far as there is room now.
    fn serve_waiting(&self, g: &mut Inner, id: PeerId) {
        let src = Self::src_of(g, id);
        let Inner { peers, rx, rndv_in, b, ops, outbox, copied, .. } = g;
        let Some(p) = peers.get_mut(id.idx as usize).and_then(|p| p.as_mut()) else { return };
        let Peer { rx: state, broken, rma, answers, .. } = p;
        let mut t = Taker { ep: self, rx, rndv_in, b, ops, outbox, copied, peer: id, src, state, broken, rma, answers };
        while t.broken.is_none() {
            let Some(h) = t.answers.next_read() else { break };
            if let Err(why) = t.answer_read(h) {
                *t.broken = Some(why);
            }
        }
    }

    /// Fail everything in flight with a peer and forget it.
    fn peer_down(&self, g: &mut Inner, id: PeerId, err: Error) {
        let Some(p) = Self::peer(g, id) else { return };
        p.chan.close();
        let addr = p.addr;
        let arriving = p.rx.take();
        while let Some(ev) = Self::peer(g, id).and_then(|p| p.chan.poll_event()) {
            Self::on_event(g, id, ev);
        }
        for opid in g.ops.ids(|o| o.peer == id) {
            Self::fail_op(g, opid, err);
        }
        if let Some(f) = arriving {
            if let Dest::Recv { target } = f.dest {
                let src = Self::src_of(g, id);
                g.rx.fail(&g.b, target, &f.hdr, src, err);
            }
        }
        let cleared: Vec<Rts> = g.rndv_in.keys().filter(|r| r.peer == id).copied().collect();
        for r in cleared {
            if let Some(w) = g.rndv_in.remove(&r) {
                g.rx.fail(&g.b, w.target, &w.hdr, w.src, err);
            }
        }
        g.outbox.retain(|(p, _)| *p != id);
        g.by_sock.remove(&addr);
        g.by_addr.retain(|_, v| *v != id);
        g.peers[id.idx as usize] = None;
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // Tell peers what we received, so that their last sends complete, and
        // that we are gone, so that what they wait for from us fails now rather
        // than at their time-out (best effort: one try, no retransmission).
        let now = Instant::now();
        let mut buf = std::mem::take(&mut g.sbuf);
        for p in g.peers.iter_mut().flatten() {
            if let Some(n) = p.chan.poll_ack(&mut buf) {
                let _ = self.sock.send_to(&buf[..n], p.addr);
            }
        }
        g.sbuf = buf;
        if g.enabled {
            for idx in 0..g.peers.len() {
                let Some(p) = g.peers[idx].as_ref() else { continue };
                let id = PeerId { idx: idx as u32, gen: p.gen };
                if Self::queue_frame(g, id, control(OpCode::Shutdown, 0), now).is_ok() {
                    self.flush_peer(g, id, now);
                }
            }
        }
        for (_, w) in g.rndv_in.drain() {
            g.rx.fail(&g.b, w.target, &w.hdr, w.src, Error::Canceled);
        }
        for opid in g.ops.ids(|_| true) {
            Self::fail_op(g, opid, Error::Canceled);
        }
        for p in g.peers.iter_mut().flatten() {
            if let Some(f) = p.rx.take() {
                if let Dest::Recv { target } = f.dest {
                    g.rx.fail(&g.b, target, &f.hdr, FiAddr::NOTAVAIL, Error::Canceled);
                }
            }
        }
        g.rx.fail_all_posted(&g.b, Error::Canceled);
        g.rx.drain_unexpected().for_each(drop);
        g.peers.clear();
        g.by_sock.clear();
        g.by_addr.clear();
        g.frames = Slab::new();
        g.outbox.clear();
        g.closed = true;
    }
}

/// Takes the segments a channel delivers: one peer's view of the endpoint.
struct Taker<'a> {
    ep: &'a UdpRdmEp,
    rx: &'a mut RxEngine<Rts>,
    rndv_in: &'a mut HashMap<Rts, RndvIn>,
    b: &'a Bindings,
    ops: &'a mut Slab<TxOp>,
    outbox: &'a mut Vec<(PeerId, Frame)>,
    copied: &'a mut usize,
    peer: PeerId,
    src: FiAddr,
    state: &'a mut Option<InFrame>,
    broken: &'a mut Option<String>,
    rma: &'a mut RmaTarget,
    answers: &'a mut Answers,
}

impl Taker<'_> {
    /// Take a segment; `false` leaves it (and what follows) with the channel.
    fn segment(&mut self, seg: Segment<'_>) -> bool {
        if self.broken.is_some() {
            return true;
        }
        let mut bytes = seg.bytes;
        if seg.first {
            if self.state.is_some() {
                *self.broken = Some("a frame began inside another".into());
                return true;
            }
            let Some(head) = bytes.get(..HDR_LEN) else {
                *self.broken = Some("first segment shorter than a header".into());
                return true;
            };
            let mut hb = [0u8; HDR_LEN];
            hb.copy_from_slice(head);
            let hdr = match Header::decode(&hb, MAX_MSG as u64) {
                Ok(h) => h,
                Err(e) => {
                    *self.broken = Some(e.to_string());
                    return true;
                }
            };
            match self.begin(hdr, &bytes[HDR_LEN..]) {
                Ok(Some(dest)) => *self.state = Some(InFrame { hdr, dest, off: 0 }),
                Ok(None) => return false,
                Err(why) => {
                    *self.broken = Some(why);
                    return true;
                }
            }
            bytes = &bytes[HDR_LEN..];
        }
        let Some(f) = self.state.as_mut() else {
            *self.broken = Some("a segment outside any frame".into());
            return true;
        };
        if f.off + bytes.len() as u64 > f.hdr.payload_len() {
            *self.broken = Some("frame longer than its header says".into());
            return true;
        }
        let off = f.off;
        f.off += bytes.len() as u64;
        self.write(off, bytes);
        if seg.last {
            let Some(f) = self.state.take() else { return true };
            if f.off != f.hdr.payload_len() {
                *self.broken = Some("frame shorter than its header says".into());
                return true;
            }
            if let Err(why) = self.end(f) {
                *self.broken = Some(why);
            }
        }
        true
    }

    /// Where a frame with header `hdr` goes (`first` is the payload in its first
    /// segment); `None` to leave it with the channel for now.
    fn begin(&mut self, hdr: Header, first: &[u8]) -> std::result::Result<Option<Dest>, String> {
        if matches!(hdr.op, OpCode::ReadReq | OpCode::WriteReq | OpCode::AtomicReq) && self.answers.full() {
            // Back-pressure: the peer does not take its answers. Its requests
            // stay with the channel (whose window closes) until it does.
            return Ok(None);
        }
        match hdr.op {
            OpCode::Msg => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src: self.src, tag: hdr.tag };
                if let Some(target) = self.rx.match_arrival(&m, hdr.len) {
                    return Ok(Some(Dest::Recv { target }));
                }
                if hdr.len > UNEXP_MAX_ONE || self.rx.unexpected_len() >= UNEXP_MAX_COUNT {
                    return Ok(None);
                }
                match self.rx.unexp_buf(hdr.len as usize) {
                    Ok(buf) => Ok(Some(Dest::Unexp { buf, m })),
                    Err(_) => Ok(None),
                }
            }
            OpCode::WriteReq => {
                let desc = RmaDesc::decode(first).ok_or("write request without its target in the first segment")?;
                let n = (hdr.len - RmaDesc::LEN as u64) as usize;
                // The first request of an operation checks its whole range (`tag`
                // is the operation's length), so a refused write lands nowhere.
                let mrs = self.ep.domain.objs.mrs();
                let mut first = false;
                let err = self
                    .rma
                    .begin(hdr.id, hdr.flags.has(HdrFlags::LAST), || {
                        // The whole range starts here and covers this request.
                        first = true;
                        let whole = usize::try_from(hdr.tag).unwrap_or(usize::MAX).max(n);
                        mrs.lookup(desc.key, desc.addr, whole, MrAccess::REMOTE_WRITE).err()
                    })
                    .map_err(|e| e.to_string())?;
                // A later request shares the operation's refusal, and its own range
                // is checked (its bytes are copied in as they arrive).
                let err = match first {
                    true => err,
                    false => err.or_else(|| mrs.lookup(desc.key, desc.addr, n, MrAccess::REMOTE_WRITE).err()),
                };
                Ok(Some(Dest::Write { desc, err }))
            }
            OpCode::ReadReq | OpCode::Rts | OpCode::Cts | OpCode::Nack | OpCode::Shutdown | OpCode::Ack => {
                Ok(Some(Dest::Skip))
            }
            // A keep-alive: nothing to do.
            OpCode::Hello if hdr.len == 0 => Ok(Some(Dest::Skip)),
            OpCode::Data => {
                let key = Rts { peer: self.peer, id: hdr.id, dc: false };
                let Some(r) = self.rndv_in.remove(&key) else {
                    return Err(format!("data for no message we cleared ({:#x})", hdr.id));
                };
                if r.hdr.len != hdr.len {
                    return Err(format!("{} bytes of data for a message of {}", hdr.len, r.hdr.len));
                }
                Ok(Some(Dest::Rndv(r)))
            }
            OpCode::AtomicReq => {
                let mut buf = self.rx.unexp_buf(hdr.len as usize).map_err(|_| "no memory")?;
                buf.clear();
                Ok(Some(Dest::Stage { buf }))
            }
            OpCode::RmaResp => {
                let Some(op) = self.ops.get(hdr.id).filter(|o| o.peer == self.peer && o.kind != OpKind::Send) else {
                    return Err(format!("an answer to no request of ours ({:#x})", hdr.id));
                };
                let base = if op.kind == OpKind::Read { op.got } else { 0 };
                Ok(Some(Dest::Resp { op: hdr.id, base }))
            }
            op => Err(format!("frame {op:?} is not used over udp")),
        }
    }

    /// Payload bytes `off..` of the arriving frame.
    fn write(&mut self, off: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let Some(f) = self.state.as_mut() else { return };
        match &mut f.dest {
            Dest::Recv { target } | Dest::Rndv(RndvIn { target, .. }) => self.rx.write(target, off, bytes),
            Dest::Unexp { buf, .. } | Dest::Stage { buf } => buf.extend_from_slice(bytes),
            Dest::Write { desc, err } => {
                // The target is in the first bytes of the payload.
                let skip = (RmaDesc::LEN as u64).saturating_sub(off).min(bytes.len() as u64) as usize;
                let data = &bytes[skip..];
                if err.is_none() && !data.is_empty() {
                    let at = desc.addr.wrapping_add(off + skip as u64 - RmaDesc::LEN as u64);
                    if let Err(e) = self.ep.domain.objs.mrs().copy_in(desc.key, at, data, MrAccess::REMOTE_WRITE) {
                        *err = Some(e);
                    }
                }
            }
            Dest::Resp { op, base } => {
                let (opid, base) = (*op, *base);
                if f.hdr.data != 0 {
                    return;
                }
                if let Some(o) = self.ops.get(opid) {
                    let at = base as u64 + off;
                    fabric_util::iov::copy_into(&o.dst[..o.ndst], IoVec::total(&o.dst[..o.ndst]), at, bytes);
                }
            }
            Dest::Skip => {}
        }
    }

    /// The arriving frame is complete.
    fn end(&mut self, f: InFrame) -> std::result::Result<(), String> {
        let hdr = f.hdr;
        match f.dest {
            Dest::Recv { target } => self.rx.complete(self.b, target, &hdr, self.src, false),
            Dest::Unexp { buf, m } => {
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let u = Unexp { body: UnexpBody::Eager(buf), len: hdr.len, data, tag: hdr.tag, rma: false };
                self.rx.arrive(self.b, m, u);
            }
            Dest::Write { err, .. } => {
                if let Some(e) = err {
                    fi_log!(Level::Info, NAME, "ep_data", "refused a remote write of {} bytes: {e}", hdr.len);
                }
                // Counted, and its CQ data delivered, once per operation that went
                // well as a whole.
                if self.rma.end(hdr.id, hdr.flags.has(HdrFlags::LAST), err) == Some(Ok(())) {
                    if let Some(c) = &self.b.rma_write_cntr {
                        c.inc();
                    }
                    if hdr.flags.has(HdrFlags::CQ_DATA) {
                        self.remote_cq_data(hdr.data);
                    }
                }
                self.answer(hdr.id, err, Vec::new());
            }
            Dest::Skip if hdr.op == OpCode::ReadReq => {
                // Answered once the peer has room for it (`Answers`).
                if self.answers.read(hdr) {
                    self.answer_read(hdr)?;
                }
            }
            Dest::Skip if hdr.op == OpCode::Rts => {
                let m = MsgSpec { tagged: hdr.flags.has(HdrFlags::TAGGED), src: self.src, tag: hdr.tag };
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                let r = Rts { peer: self.peer, id: hdr.id, dc: hdr.flags.has(HdrFlags::DC) };
                let u = Unexp { body: UnexpBody::Rts(r), len: hdr.len, data, tag: hdr.tag, rma: false };
                self.rx.arrive(self.b, m, u);
                // The answer (`Cts`) goes out with the endpoint's next actions.
            }
            Dest::Skip if hdr.op == OpCode::Cts => {
                let Some(o) = self.ops.get_mut(hdr.id).filter(|o| o.peer == self.peer && o.announced) else {
                    return Err(format!("clear to send for no message of ours ({:#x})", hdr.id));
                };
                o.announced = false;
                if o.dc {
                    // Complete once the data is acknowledged and the receiver's
                    // `Ack` came, in either order.
                    o.pending += 1;
                }
                let mut h = Header::new(OpCode::Data);
                h.id = hdr.id;
                h.len = o.len as u64;
                let mut f = Frame::new(hdr.id, &h, &[], FrameSrc::Op { off: 0, len: o.len }, true);
                f.awaited = true;
                self.outbox.push((self.peer, f));
            }
            Dest::Skip if hdr.op == OpCode::Nack => {
                // The receiver discarded it: the send completes.
                if self.ops.get(hdr.id).is_some_and(|o| o.peer == self.peer && o.announced) {
                    *self.copied -= op_step(self.ops, self.b, hdr.id, None);
                }
            }
            Dest::Skip if hdr.op == OpCode::Ack => {
                // The receiver has the data of a FI_DELIVERY_COMPLETE send.
                let Some(o) = self
                    .ops
                    .get_mut(hdr.id)
                    .filter(|o| o.peer == self.peer && o.kind == OpKind::Send && o.dc && !o.announced && !o.acked)
                else {
                    return Err(format!("delivery acknowledgement for no send of ours ({:#x})", hdr.id));
                };
                o.acked = true;
                let err = (hdr.data != 0).then(|| Error::from_errno(hdr.data.min(i32::MAX as u64) as i32));
                *self.copied -= op_step(self.ops, self.b, hdr.id, err);
            }
            Dest::Skip if hdr.op == OpCode::Shutdown => {
                // The peer closed its endpoint (an empty reason says so).
                *self.broken = Some(String::new());
            }
            Dest::Skip => {}
            Dest::Rndv(r) => {
                self.rx.complete(self.b, r.target, &r.hdr, r.src, false);
                if r.hdr.flags.has(HdrFlags::DC) {
                    // The data of a FI_DELIVERY_COMPLETE rendezvous is in: say so.
                    self.outbox.push((self.peer, control(OpCode::Ack, r.hdr.id)));
                }
            }
            Dest::Stage { buf } => {
                let desc = RmaDesc::decode(&buf).ok_or("atomic without its target")?;
                let ah = AtomicHdr::decode(buf.get(RmaDesc::LEN..).unwrap_or(&[])).ok_or("atomic without its op")?;
                let args = &buf[RmaDesc::LEN + AtomicHdr::LEN..];
                let mut result = Vec::new();
                let r = fabric_util::atomic::serve(
                    self.ep.domain.objs.mrs(),
                    self.ep.domain.objs.atomic_lock(),
                    desc,
                    ah,
                    args,
                    &mut result,
                );
                let r = r.map_err(|why| why.to_string());
                self.rx.recycle(buf);
                match r? {
                    Ok(()) => {
                        if let Some(c) = &self.b.rma_write_cntr {
                            c.inc();
                        }
                        self.answer(hdr.id, None, result);
                    }
                    Err(e) => {
                        fi_log!(Level::Info, NAME, "ep_data", "refused a remote atomic: {e}");
                        self.answer(hdr.id, Some(e), Vec::new());
                    }
                }
            }
            Dest::Resp { op, .. } => {
                let err = (hdr.data != 0).then(|| Error::from_errno(hdr.data.min(i32::MAX as u64) as i32));
                if let Some(o) = self.ops.get_mut(op) {
                    if o.kind == OpKind::Read {
                        o.got += hdr.len as usize;
                    }
                }
                *self.copied -= op_step(self.ops, self.b, op, err);
            }
        }
        Ok(())
    }

    /// Answer read request `hdr` with the bytes, or with the error.
    fn answer_read(&mut self, hdr: Header) -> std::result::Result<(), String> {
        let n = hdr.len as usize;
        let last = hdr.flags.has(HdrFlags::LAST);
        // A read's requests are checked one by one; once one is refused,
        // the rest of the operation is too.
        let refused = self.rma.begin(hdr.id, last, || None).map_err(|e| e.to_string())?;
        let mut out = self.rx.unexp_buf(n).map_err(|_| "no memory for a read")?;
        out.resize(n, 0);
        let r = match refused {
            Some(e) => Err(e),
            None => self.ep.domain.objs.mrs().copy_out(hdr.data, hdr.tag, &mut out, MrAccess::REMOTE_READ),
        };
        // Counted once per operation that went well as a whole.
        if self.rma.end(hdr.id, last, r.err()) == Some(Ok(())) {
            if let Some(c) = &self.b.rma_read_cntr {
                c.inc();
            }
        }
        match r {
            Ok(()) => self.answer(hdr.id, None, out),
            Err(e) => {
                fi_log!(Level::Info, NAME, "ep_data", "refused a remote read of {n} bytes: {e}");
                self.rx.recycle(out);
                self.answer(hdr.id, Some(e), Vec::new());
            }
        }
        Ok(())
    }

    /// Queue an answer to request `id` of this peer.
    fn answer(&mut self, id: u64, err: Option<Error>, payload: Vec<u8>) {
        let mut h = Header::new(OpCode::RmaResp);
        h.id = id;
        h.data = err.map_or(0, |e| e.errno() as u64);
        h.len = payload.len() as u64;
        let mut f = Frame::new(0, &h, &[], FrameSrc::Owned(payload), false);
        f.answer = true;
        self.answers.queued(f.len());
        self.outbox.push((self.peer, f));
    }

    /// Remote CQ data of a write: a completion on the receive queue.
    fn remote_cq_data(&mut self, data: u64) {
        self.rx.rma_data(self.b, self.src, data);
    }
}

impl Progress for UdpRdmEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.sock.as_raw_fd())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let g = self.lock();
        g.peers.iter().flatten().filter_map(|p| p.chan.poll_timeout()).min()
    }
}

impl EndpointOps for UdpRdmEp {
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
        Ok(Address::from(self.name))
    }

    fn setname(&self, _addr: &Address) -> Result<()> {
        // The socket is bound when the endpoint opens (give the address in the
        // info's src_addr).
        Err(Error::OpNotSupp)
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.send_common(op, flags, None)
    }

    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        self.recv_common(op, flags)
    }

    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        if data.len() > RDM_INJECT {
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
        if data.len() > RDM_INJECT {
            return Err(Error::MsgSize);
        }
        self.rma_common(op, flags, Some(data), false)
    }

    unsafe fn post_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_common(op, false, flags)
    }

    unsafe fn inject_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        self.atomic_common(op, true, flags)
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

impl Drop for UdpRdmEp {
    fn drop(&mut self) {
        let mut g = self.lock();
        self.close_locked(&mut g);
    }
}

/// The RDM endpoint for the domain (what `domain.rs` calls).
pub(crate) fn new_ep(domain: Arc<UdpDomain>, info: &Info) -> Result<Arc<dyn EndpointOps>> {
    let ep = UdpRdmEp::new(domain.clone(), info)?;
    domain.bind_auto_progress(ep.weak_progress())?;
    let ep: Arc<dyn EndpointOps> = ep;
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_fill_head_then_payload() {
        let mut ops = Slab::new();
        let data: Vec<u8> = (0..100u8).collect();
        let opid = ops.insert(TxOp {
            peer: PeerId { idx: 0, gen: 1 },
            kind: OpKind::Send,
            context: 0,
            flags: Caps::SEND,
            len: 100,
            src: [NULL_IOV; IOV_LIMIT],
            nsrc: 0,
            dst: [NULL_IOV; IOV_LIMIT],
            ndst: 0,
            owned: Some(data.clone()),
            silent: true,
            comp: false,
            dc: false,
            acked: false,
            pending: 1,
            got: 0,
            err: None,
            announced: false,
            budget: 0,
        });
        let mut h = Header::new(OpCode::Msg);
        h.len = 100;
        let f = Frame::new(opid, &h, &[], FrameSrc::Op { off: 0, len: 100 }, true);
        assert_eq!(f.len(), HDR_LEN + 100);
        let mut whole = vec![0u8; f.len()];
        // In pieces of every size, the frame reads the same.
        for step in [1usize, 7, 39, 40, 41, 140] {
            let mut off = 0;
            while off < whole.len() {
                let n = step.min(whole.len() - off);
                fill_frame(&f, &ops, off, &mut whole[off..off + n]);
                off += n;
            }
            assert_eq!(&whole[..HDR_LEN], &h.encode());
            assert_eq!(&whole[HDR_LEN..], &data[..]);
        }
    }

    #[test]
    fn window_fits_the_socket_buffer() {
        let c = channel_config(65507, 8 << 20);
        assert_eq!(c.mss, 65507 - HEADER_LEN);
        assert!((c.window as usize) * 65507 <= 4 << 20);
        let c = channel_config(1472, 8 << 20);
        assert_eq!(c.window, 1024);
        let c = channel_config(10, 1 << 10);
        assert!(c.mss >= HEAD_MAX);
        assert_eq!(c.window, 8);
    }
}

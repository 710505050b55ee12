//! udp RDM endpoints: reliable datagrams over one UDP socket.
//!
//! Every peer (a socket address) has a [`Channel`] of the shared reliability
//! protocol (`fabric_util::reliable`): sequence numbers, acknowledgements,
//! retransmission, flow control and in-order delivery. What the channel carries
//! are *frames*, each a `wire` header (40 bytes) and its payload, cut into
//! segments of at most one datagram. The protocol those frames speak (eager
//! messages, rendezvous, RMA and atomic requests and their answers) is the shared
//! RDM engine's ([`fabric_util::rdm::Engine`]); this provider connects it to the
//! channels: it gives the engine's frames to the peers' channels, reports each
//! one's acknowledgement ([`Engine::frame_done`]) or failure, and feeds the
//! segments that arrive to the engine ([`Engine::begin`], `write`, `end`).
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
//! complete), or, small and to a peer that answered us, when copied (within
//! [`COPY_BUDGET`]); RMA and atomic operations when their answers arrive. A peer
//! silent for the unreachable time-out while we wait for it fails everything in
//! flight with it (`FI_EHOSTUNREACH`), and is forgotten.
//!
//! The endpoint is laid out by operation class, as libfabric's providers are:
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the endpoint, its state, opening, binding, closing |
//! | `msg.rs` | sends and receives |
//! | `rma.rs` | RMA writes and reads |
//! | `atomic.rs` | atomics |
//! | `progress.rs` | the socket, the channels, frames in and out, keep-alives, lost peers |
//! | `conn.rs` | peers: by socket address, by AV handle |

mod atomic;
mod conn;
mod io;
mod msg;
mod progress;
mod rma;

use crate::domain::UdpDomain;
use crate::NAME;
use fabric_core::prov::{AtomicDesc, AvOps, CntrOps, CqOps, EndpointOps, EqOps, Op, RmaOp};
use fabric_core::sync::{SpinGuard, SpinLock};
use fabric_core::{Address, BindFlags, EpType, Error, FiAddr, Info, OpFlags, Result};
use fabric_util::bind::Bindings;
use fabric_util::progress::Progress;
use fabric_util::rdm::{self, Engine, Frame, PeerRx, Violation, HEAD_MAX};
use fabric_util::reliable::Nanos;
use fabric_util::reliable::{self, Channel, HEADER_LEN};
use fabric_util::scaffold;
use fabric_util::wire::{Header, OpCode};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Weak};
use std::time::Duration;

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
/// The most operations in flight on one endpoint (`FI_EAGAIN` beyond): the
/// engine's (rendezvous sends, RMA, atomics) and eager sends not yet acknowledged.
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

/// A reference to a peer, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PeerId {
    idx: u32,
    gen: u32,
}

struct Peer {
    addr: SocketAddr,
    /// `addr` as the system takes it.
    sa: socket2::SockAddr,
    uri: Address,
    chan: Channel,
    /// The frames given to `chan`, until acknowledged or failed, in the order
    /// given: the channel reports them in that order, and knows the frame
    /// `frames[i]` by the id `next_fid - frames.len() + i`.
    frames: VecDeque<Frame>,
    /// The id of the next frame given to `chan`.
    next_fid: u64,
    /// What the engine keeps of this peer: the frame arriving, its RMA
    /// operations in progress here, the answers it is owed.
    pr: PeerRx,
    /// Why it is to be dropped, seen while taking its segments: a protocol
    /// violation, or (an empty reason) its `Shutdown`.
    broken: Option<Violation>,
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
    /// The last lookup of `by_sock`, while its peer lives.
    last_sock: Option<(SocketAddr, PeerId)>,
    /// AV handle to peer, valid for `cache_version`.
    by_addr: HashMap<FiAddr, PeerId>,
    /// The last lookup of `by_addr`, valid for `cache_version` while its peer
    /// lives.
    last_addr: Option<(FiAddr, PeerId)>,
    cache_version: u64,
    /// The protocol: operations in flight, receives, frames to send.
    eng: Engine<PeerId>,
    /// Eager sends (`Msg` frames) given to the channels and not yet
    /// acknowledged: counted against [`TX_DEPTH`].
    sends: usize,
    /// Peers given frames since their last transmission (reused, never shrunk).
    touched: Vec<PeerId>,
    /// Datagram buffers.
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
    /// When to look for peers that need a keep-alive.
    next_keepalive: Nanos,
    /// When to look at every peer's channel (`None`: no timer armed).
    /// Conservative: a channel arms no timer sooner than `min_timer` after the
    /// time it is given, so touching channels at `now` lowers this to
    /// `now + min_timer` ([`Inner::timers_armed`]), and a look computes it
    /// exactly.
    next_scan: Option<Nanos>,
    /// The shortest time-out a channel arms (the acknowledgement delay, the
    /// smallest retransmission time-out), in nanoseconds.
    min_timer: u64,
}

impl Inner {
    /// Channels were given datagrams, frames or time at `now`: any timer they
    /// armed falls due no sooner than `now + min_timer`.
    fn timers_armed(&mut self, now: Nanos) {
        let soon = now.after(self.min_timer);
        self.next_scan = Some(self.next_scan.map_or(soon, |t| t.min(soon)));
    }
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
    /// The endpoint's state, under a spin lock: nothing done under it waits
    /// (the socket is non-blocking) or runs caller code.
    inner: SpinLock<Inner>,
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
        // UDP's own checksum covers each datagram end to end.
        payload_checksum: false,
        header_checksum: false,
    }
}

/// What the engine needs to know of udp.
fn engine_config() -> rdm::Config {
    rdm::Config {
        name: NAME,
        eager_max: EAGER_MAX,
        unexp_max_one: UNEXP_MAX_ONE,
        unexp_max_count: UNEXP_MAX_COUNT,
        // Beyond the limits, an unexpected message stays with its channel, whose
        // window closes: the sender waits.
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
            last_sock: None,
            by_addr: HashMap::new(),
            last_addr: None,
            cache_version: u64::MAX,
            eng: Engine::new(engine_config()),
            sends: 0,
            touched: Vec::new(),
            rbuf: vec![0u8; DGRAM_MAX + 1],
            sbuf: vec![0u8; cfg.mss + HEADER_LEN],
            next_keepalive: Nanos::now(),
            next_scan: None,
            min_timer: u64::try_from(
                cfg.ack_delay.min(cfg.rto_min).min(cfg.rto_initial).min(cfg.unreachable_after).as_nanos(),
            )
            .unwrap_or(u64::MAX),
        };
        Ok(Arc::new_cyclic(|me| UdpRdmEp {
            fid: fabric_core::prov::next_fid(),
            domain,
            sock,
            name,
            epoch: (fabric_util::random::u64_or_fallback() as u32).max(1),
            cfg,
            inner: SpinLock::new(inner),
            me: me.clone(),
        }))
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
    }

    fn weak_progress(&self) -> Weak<dyn Progress> {
        let w: Weak<dyn Progress> = self.me.clone();
        w
    }

    /// What the engine uses of the endpoint: its bindings, the domain's regions.
    fn cx<'a>(&'a self, b: &'a Bindings) -> rdm::Ctx<'a> {
        rdm::Ctx { b, objs: &self.domain.objs }
    }

    /// Whether an operation to `dest` may be posted now (`need_cq`: it completes
    /// on the transmit queue); its peer.
    fn check_ready(&self, g: &mut Inner, need_cq: bool, dest: FiAddr, now: Nanos) -> Result<PeerId> {
        if g.closed || !g.enabled {
            return Err(Error::OpBadState);
        }
        if need_cq && g.b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if g.eng.in_flight() + g.sends >= TX_DEPTH {
            return Err(Error::Again);
        }
        self.peer_for(g, dest, now)
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.closed {
            return;
        }
        // Tell peers what we received, so that their last sends complete, and
        // that we are gone, so that what they wait for from us fails now rather
        // than at their time-out (best effort: one try, no retransmission).
        let now = Nanos::now();
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
                if self.queue_frame(g, id, Frame::control(&Header::new(OpCode::Shutdown)), now).is_ok() {
                    self.flush_peer(g, id, now);
                }
            }
        }
        // What waited for the frames with the channels fails, then everything
        // else in flight.
        let Inner { peers, eng, b, .. } = g;
        for (idx, p) in peers.iter_mut().enumerate() {
            let Some(p) = p else { continue };
            let id = PeerId { idx: idx as u32, gen: p.gen };
            for f in p.frames.drain(..) {
                eng.frame_failed(b, id, f, Error::Canceled);
            }
        }
        g.sends = 0;
        let Inner { peers, eng, b, .. } = g;
        for p in peers.iter_mut().flatten() {
            eng.abandon(b, &mut p.pr, Error::Canceled);
        }
        eng.close(b, Error::Canceled);
        g.peers.clear();
        g.by_sock.clear();
        g.by_addr.clear();
        g.closed = true;
    }
}

fabric_util::bound!(UdpRdmEp);

impl EndpointOps for UdpRdmEp {
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
        scaffold::bind_av(self, av)
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

    fabric_util::endpoint_tail!(eng.rx);
}

fabric_util::close_on_drop!(UdpRdmEp);

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

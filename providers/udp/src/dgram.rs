//! DGRAM endpoints: unreliable, unordered messages of one datagram each over one
//! non-blocking UDP socket, with libfabric's semantics (`fi_endpoint(3)`,
//! `fi_msg(3)`, `fi_udp(7)`).
//!
//! - A send is one `sendmsg` that gathers the application's buffers straight from
//!   its memory, and completes at once (the datagram has left, as far as it ever
//!   will). `inject` does the same from the caller's slice, without a completion.
//!   A message larger than `max_msg_size` (the interface's MTU less the IP and UDP
//!   headers: datagrams are never fragmented) is refused with `FI_EMSGSIZE`, and a
//!   socket whose queue is full pushes back with `FI_EAGAIN`. Nothing is queued in
//!   the provider.
//! - Receives wait in a queue of `rx_attr.size` entries, in posting order.
//!   Progress (reading or waiting on a bound queue) takes each waiting datagram
//!   with one `recvmsg` straight into the buffers of the first posted receive. Its
//!   completion names the sender (`FI_SOURCE`): the sender's handle in the bound
//!   address vector, `FI_ADDR_NOTAVAIL` when it is not there. A datagram longer
//!   than the buffers fills them and completes with `FI_ETRUNC`, `olen` being the
//!   bytes cut off.
//! - A datagram that arrives while no receive is posted is dropped when a progress
//!   pass that starts with no receive posted finds it (a pass that fills the last
//!   posted receive stops there), and counted ([`dropped_datagrams`], and a debug-level log line per
//!   datagram): the provider never buffers for the application, and the sender
//!   never waits for the receiver. (What the kernel drops because the socket's
//!   receive buffer was full, `FI_UDP_RCVBUF`, is counted by the kernel:
//!   `netstat -su`, "receive buffer errors".)
//! - Multicast (IPv4, `FI_MULTICAST`): `join` adds the socket to a group on the
//!   domain's interface, and the handle it returns names the group in sends posted
//!   with `OpFlags::MULTICAST`. Only the groups an endpoint joined reach it. To
//!   receive a group's datagrams an endpoint must be bound to the group's port and
//!   to the wildcard address (`0.0.0.0`, with `set_name` before `enable`): the
//!   kernel delivers datagrams addressed to the group only to such sockets.
//! - Blocking waits sleep on the socket: it is the endpoint's wait descriptor.
//!
//! Closing the endpoint completes its posted receives with `FI_ECANCELED`, leaves
//! its groups and closes the socket.

use crate::attr::{IOV_LIMIT, QUEUE_SIZE};
use crate::domain::UdpDomain;
use crate::{sock, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{AvOps, CntrOps, CqOps, EndpointOps, EqOps, IoVec, McOps, Op};
use fabric_core::sync::{SpinGuard, SpinLock};
use fabric_core::{
    fi_log, AddrFormat, Address, BindFlags, Caps, CqEntry, EpType, Error, FiAddr, Info, OpFlags, Result,
};
use fabric_util::av::UtilAv;
use fabric_util::bind::Bindings;
use fabric_util::progress::Progress;
use socket2::{InterfaceIndexOrAddress, SockAddr, Socket};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Datagrams dropped by every DGRAM endpoint of the process.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many datagrams the udp provider's DGRAM endpoints of this process have
/// dropped because they arrived with no receive posted (each is also logged at
/// debug level, `FI_LOG_LEVEL=debug`). Datagrams the kernel dropped (receive
/// buffer full) are not among them.
pub fn dropped_datagrams() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The most datagrams one progress call takes; the rest wait for the next (the
/// socket stays readable, so a sleeping waiter wakes for them).
const PROGRESS_BUDGET: usize = 64;

/// Completion flags of a receive and of a send.
const RECV_FLAGS: Caps = Caps::RECV.union(Caps::MSG);
const SEND_FLAGS: Caps = Caps::SEND.union(Caps::MSG);

/// A posted receive.
#[derive(Clone, Copy)]
struct PostedRx {
    context: u64,
    user_context: u64,
    /// Its pieces: the first `niov`.
    iov: [IoVec; IOV_LIMIT],
    niov: usize,
    /// Posted with `FI_COMPLETION` ([`Bindings::rx_done`]).
    comp: bool,
}

const NO_RX: PostedRx = PostedRx {
    context: 0,
    user_context: 0,
    iov: [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT],
    niov: 0,
    comp: false,
};

/// The posted receives, oldest first: a ring whose entries are written where
/// they lie when posted and read there when filled, so a receive is never moved.
struct RxRing {
    /// `slots.len()` is a power of two; the entries outside the `len` posted
    /// ones, from `head` on (wrapping), are stale.
    slots: Box<[PostedRx]>,
    /// The oldest posted receive, when `len > 0`: always `< slots.len()`.
    head: usize,
    /// How many are posted: `<= slots.len()`.
    len: usize,
}

impl RxRing {
    /// Room for `n` receives (at least 1), allocated now, never again.
    fn with_room(n: usize) -> Result<RxRing> {
        let cap = n.max(1).next_power_of_two();
        let mut v = Vec::new();
        v.try_reserve_exact(cap).map_err(|_| Error::NoMem)?;
        v.resize(cap, NO_RX);
        Ok(RxRing { slots: v.into_boxed_slice(), head: 0, len: 0 })
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn front(&self) -> Option<&PostedRx> {
        (self.len > 0).then(|| &self.slots[self.head])
    }

    /// Forget the oldest receive (there is one).
    #[inline]
    fn pop(&mut self) {
        debug_assert!(self.len > 0);
        self.head = (self.head + 1) & self.mask();
        self.len -= 1;
    }

    /// The entry after the newest, to be filled and then made posted by `commit`;
    /// `None` when `limit` (at most the ring's room) are posted already.
    #[inline]
    fn next_free(&mut self, limit: usize) -> Option<&mut PostedRx> {
        if self.len >= limit.min(self.slots.len()) {
            return None;
        }
        let i = (self.head + self.len) & self.mask();
        Some(&mut self.slots[i])
    }

    /// The entry `next_free` gave is posted.
    #[inline]
    fn commit(&mut self) {
        debug_assert!(self.len < self.slots.len());
        self.len += 1;
    }

    /// Keep, in order, only the receives `keep` says yes to.
    fn retain(&mut self, mut keep: impl FnMut(&PostedRx) -> bool) {
        let mask = self.mask();
        let mut kept = 0;
        for r in 0..self.len {
            let from = (self.head + r) & mask;
            if keep(&self.slots[from]) {
                self.slots[(self.head + kept) & mask] = self.slots[from];
                kept += 1;
            }
        }
        self.len = kept;
    }
}

/// The last sender looked up in the AV: an IPv4 sender by its [`RawSource::key`],
/// any other by its address.
///
/// [`RawSource::key`]: sock::RawSource::key
#[derive(Clone, Copy)]
struct SrcCache {
    /// The AV's version when `handle` was found: stale once it differs.
    version: u64,
    /// The sender's key, or [`NO_KEY`] for a sender that is not IPv4 (then `addr`
    /// names it) and for none yet.
    key: u64,
    addr: Option<SocketAddr>,
    handle: FiAddr,
}

/// The key of a cached sender that has none (not IPv4), or of no sender: no
/// [`RawSource::word`](sock::RawSource::word) equals it (a word is 0 or begins
/// with a real address family, never `0xffff`), so it never answers for a datagram.
const NO_KEY: u64 = u64::MAX;

impl SrcCache {
    /// Nothing looked up yet.
    const EMPTY: SrcCache = SrcCache { version: 0, key: NO_KEY, addr: None, handle: FiAddr::NOTAVAIL };
}

/// The last destination of a send through the AV: its handle and socket address,
/// valid while the AV's version is `version`.
struct DstCache {
    version: u64,
    addr: FiAddr,
    to: SockAddr,
}

/// The version of an empty [`DstCache`]: an AV's version counts its changes from 0
/// (one at a time, [`UtilAv::version`]) and never gets there, so an empty cache
/// never answers.
const NO_VERSION: u64 = u64::MAX;

impl DstCache {
    /// Nothing sent yet (or the AV was bound anew).
    fn empty() -> DstCache {
        DstCache {
            version: NO_VERSION,
            addr: FiAddr::NOTAVAIL,
            to: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)).into(),
        }
    }
}

/// A multicast group slot; its handle is `(gen << 32) | index`.
struct McSlot {
    group: Option<SocketAddrV4>,
    gen: u32,
    /// Its generation would wrap: never used again, so no handle names two groups.
    retired: bool,
}

fn mc_handle(idx: usize, gen: u32) -> FiAddr {
    FiAddr((u64::from(gen) << 32) | idx as u64)
}

fn mc_slot(handle: FiAddr) -> (usize, u32) {
    ((handle.0 & u64::from(u32::MAX)) as usize, (handle.0 >> 32) as u32)
}

/// Where an endpoint is in its life, with its socket while it has one: the data
/// path checks that it is up and gets the socket with one compare.
enum State {
    /// Opened, not enabled yet: the socket is not bound yet.
    Idle(Socket),
    /// Enabled: the socket is bound and data moves.
    Up(Socket),
    /// Closed, and so is the socket: nothing moves any more.
    Closed,
}

impl State {
    /// The socket of an endpoint that is up, else `FI_EOPBADSTATE`.
    #[inline]
    fn up(&self) -> Result<&Socket> {
        match self {
            State::Up(s) => Ok(s),
            _ => Err(Error::OpBadState),
        }
    }

    /// The socket, until closed.
    fn socket(&self) -> Option<&Socket> {
        match self {
            State::Idle(s) | State::Up(s) => Some(s),
            State::Closed => None,
        }
    }

    fn is_closed(&self) -> bool {
        matches!(self, State::Closed)
    }
}

struct Inner {
    state: State,
    b: Bindings,
    /// The address to bind at `enable` (from the entry or `setname`), then the
    /// address bound.
    name: Option<SocketAddr>,
    /// Posted receives, oldest first.
    rxq: RxRing,
    /// Joined multicast groups.
    mcs: Vec<McSlot>,
    /// Where `recvmsg` writes each datagram's sender (made once, not per receive).
    src: sock::RawSource,
    /// The last sender looked up.
    src_cache: SrcCache,
    /// The last destination of a send through the AV, so that a stream of sends
    /// to one peer converts nothing.
    dst_cache: DstCache,
    /// The `sendmsg` header every send fills (made once, not per send).
    tx_hdr: sock::MsgHdr,
    /// Datagrams this endpoint dropped for want of a posted receive.
    dropped: u64,
}

/// A DGRAM endpoint of the udp provider.
pub(crate) struct DgramEp {
    fid: u64,
    domain: Arc<UdpDomain>,
    ipv6: bool,
    /// The socket's descriptor (the wait descriptor), -1 once closed.
    fd: AtomicI32,
    /// The largest message (and inject).
    max_msg: usize,
    /// The most receives posted at once.
    rx_size: usize,
    inner: SpinLock<Inner>,
    me: Weak<DgramEp>,
}

/// Take one datagram no receive was posted for off `sock` and drop it (counted
/// in `dropped` and [`DROPPED`]): `true` when one was dropped, `false` when none
/// was waiting (or the read failed).
#[cold]
#[inline(never)]
fn drop_one(sock: &Socket, dropped: &mut u64) -> bool {
    match sock::discard(sock) {
        Ok(d) => {
            *dropped += 1;
            DROPPED.fetch_add(1, Ordering::Relaxed);
            fi_log!(
                Level::Debug,
                NAME,
                "ep_data",
                "dropped a datagram of {} bytes from {}: no receive posted ({} dropped here so far)",
                d.size,
                fabric_core::log::or_unknown(d.src.as_ref()),
                dropped
            );
            true
        }
        Err(e) => {
            recv_failed(e);
            false
        }
    }
}

/// A progress pass that starts with no receive posted: drop up to
/// [`PROGRESS_BUDGET`] waiting datagrams ([`drop_one`]).
#[cold]
#[inline(never)]
fn drop_waiting(sock: &Socket, dropped: &mut u64) {
    for _ in 0..PROGRESS_BUDGET {
        if !drop_one(sock, dropped) {
            break;
        }
    }
}

/// A receive failed with `e`: logged, unless it is `Again` (nothing waiting). The
/// socket stays readable, so the next progress pass sees a lasting failure again.
#[cold]
#[inline(never)]
fn recv_failed(e: Error) {
    if e != Error::Again {
        fi_log!(Level::Debug, NAME, "ep_data", "recvmsg: {e}");
    }
}

/// The handle of `src` in `av` (`FI_ADDR_NOTAVAIL` if absent), remembering the
/// last answer while the AV does not change: an IPv4 sender met last time costs
/// one compare of its first eight bytes.
#[inline]
fn source(av: Option<&Arc<UtilAv>>, cache: &mut SrcCache, src: &sock::RawSource) -> FiAddr {
    let Some(av) = av else { return FiAddr::NOTAVAIL };
    // The version is read before the lookup, so a cached answer is never stale.
    let v = av.version();
    // The cached key is an IPv4 sender's or NO_KEY, which no word equals.
    if src.word() == cache.key && cache.version == v {
        return cache.handle;
    }
    source_slow(av, cache, src, v)
}

/// [`source`] for a sender not met last time, or not IPv4.
#[inline(never)]
fn source_slow(av: &UtilAv, cache: &mut SrcCache, src: &sock::RawSource, v: u64) -> FiAddr {
    let Some(addr) = src.addr() else { return FiAddr::NOTAVAIL };
    let key = match src.key() {
        0 => NO_KEY,
        k => k,
    };
    if key == NO_KEY && cache.key == NO_KEY && cache.version == v && cache.addr == Some(addr) {
        return cache.handle;
    }
    let handle = av.find(&Address::Sockaddr(addr)).unwrap_or(FiAddr::NOTAVAIL);
    *cache = SrcCache { version: v, key, addr: Some(addr), handle };
    handle
}

impl DgramEp {
    pub(crate) fn new(domain: Arc<UdpDomain>, info: &Info) -> Result<Arc<DgramEp>> {
        if info.ep_attr.ep_type != EpType::Dgram {
            return Err(Error::Inval);
        }
        let name = match &info.src_addr {
            Some(a) => Some(a.sockaddr().ok_or(Error::Inval)?),
            None => None,
        };
        let ipv6 = match name {
            Some(n) => n.is_ipv6(),
            None => match info.addr_format {
                AddrFormat::SockaddrIn6 => true,
                AddrFormat::SockaddrIn => false,
                _ => domain.iface().addr.is_ipv6(),
            },
        };
        let sock = domain.socket(ipv6)?;
        let fd = sock.as_raw_fd();
        let max_msg = domain.max_payload(ipv6);
        let rx_size = match info.rx_attr.size {
            0 => QUEUE_SIZE,
            n => n.min(1 << 16),
        };
        let rxq = RxRing::with_room(rx_size)?;
        let inner = Inner {
            state: State::Idle(sock),
            b: Bindings::default(),
            name,
            rxq,
            mcs: Vec::new(),
            src: sock::RawSource::new(),
            src_cache: SrcCache::EMPTY,
            dst_cache: DstCache::empty(),
            tx_hdr: sock::MsgHdr::new(),
            dropped: 0,
        };
        Ok(Arc::new_cyclic(|me| DgramEp {
            fid: fabric_core::prov::next_fid(),
            domain,
            ipv6,
            fd: AtomicI32::new(fd),
            max_msg,
            rx_size,
            inner: SpinLock::new(inner),
            me: me.clone(),
        }))
    }

    /// The endpoint's state. Nothing done under the lock waits (the socket is
    /// non-blocking) or runs caller code, and every change to `Inner` is complete
    /// before anything that could panic, so a spin lock without poisoning serves.
    fn lock(&self) -> SpinGuard<'_, Inner> {
        self.inner.lock()
    }

    fn weak_progress(&self) -> Weak<dyn Progress> {
        let w: Weak<dyn Progress> = self.me.clone();
        w
    }

    /// The address a send goes to: a multicast group's (with `MULTICAST`, built
    /// in `mc`) or an address-vector entry's (kept in `cache` while the AV does not
    /// change: the version is read before the lookup, so a cached answer is never
    /// stale).
    fn dest<'a>(
        &self,
        b: &Bindings,
        mcs: &[McSlot],
        cache: &'a mut DstCache,
        mc: &'a mut Option<SockAddr>,
        addr: FiAddr,
        flags: OpFlags,
    ) -> Result<&'a SockAddr> {
        // The common case first: the destination of the last send, the AV unchanged.
        let hit = !flags.contains(OpFlags::MULTICAST)
            && matches!(&b.av, Some(av) if cache.addr == addr && av.version() == cache.version);
        if hit {
            return Ok(&cache.to);
        }
        self.dest_slow(b, mcs, cache, mc, addr, flags)
    }

    /// [`dest`](Self::dest) for any other destination.
    #[inline(never)]
    fn dest_slow<'a>(
        &self,
        b: &Bindings,
        mcs: &[McSlot],
        cache: &'a mut DstCache,
        mc: &'a mut Option<SockAddr>,
        addr: FiAddr,
        flags: OpFlags,
    ) -> Result<&'a SockAddr> {
        if flags.contains(OpFlags::MULTICAST) {
            let (idx, gen) = mc_slot(addr);
            let sa = match mcs.get(idx) {
                Some(s) if s.gen == gen && !s.retired => s.group.map(SocketAddr::V4),
                _ => None,
            };
            let sa = self.checked(addr, sa)?;
            return Ok(mc.insert(sa.into()));
        }
        let av = b.av.as_ref().ok_or(Error::NoAv)?;
        let v = av.version();
        if cache.version != v || cache.addr != addr {
            let sa = self.checked(addr, av.with_addr(addr, Address::sockaddr).flatten())?;
            *cache = DstCache { version: v, addr, to: sa.into() };
        }
        Ok(&cache.to)
    }

    /// A destination found (or not) for `addr`, of the endpoint's address family.
    fn checked(&self, addr: FiAddr, sa: Option<SocketAddr>) -> Result<SocketAddr> {
        let Some(sa) = sa else {
            fi_log!(Level::Debug, NAME, "ep_data", "send to {addr}: no such destination");
            return Err(Error::Inval);
        };
        if sa.is_ipv6() != self.ipv6 {
            fi_log!(Level::Debug, NAME, "ep_data", "send to {sa}: not of the endpoint's address family");
            return Err(Error::Inval);
        }
        Ok(sa)
    }

    /// What every send checks once it has the socket of an endpoint that is up:
    /// the operation is one it has.
    fn check_send(flags: OpFlags) -> Result<()> {
        if flags.intersects(OpFlags::TAGGED | OpFlags::REMOTE_CQ_DATA) {
            // No tagged messages, no remote CQ data (libfabric's udp neither).
            return Err(Error::OpNotSupp);
        }
        Ok(())
    }

    fn progress_locked(&self, g: &mut Inner) {
        let Inner { state, rxq, b, src, src_cache, dropped, .. } = g;
        let State::Up(sock) = state else { return };
        // A pass that starts with receives posted fills them and stops when they
        // run out: a datagram that arrives for none is dropped by the next pass
        // that starts with none posted (one system call fewer per receive in a
        // ping-pong, where the queue empties with each datagram).
        if rxq.is_empty() {
            drop_waiting(sock, dropped);
            return;
        }
        let mut budget = PROGRESS_BUDGET;
        while let Some(rx) = rxq.front() {
            let iov = &rx.iov[..rx.niov];
            // SAFETY: the buffers of a posted receive are valid for writes and the
            // provider's alone until its completion is written (post_recv's
            // contract); it is still posted (it leaves the queue only below, or in
            // cancel and close, under this lock).
            let r = unsafe { sock::recv_raw(sock, iov, src) };
            match r {
                Ok(size) => {
                    let cap = match iov {
                        [v] => v.len,
                        _ => IoVec::total(iov),
                    };
                    let (context, comp) = (rx.context, rx.comp);
                    rxq.pop();
                    let from = source(b.av.as_ref(), src_cache, src);
                    // The entry is built whole in each branch, so that it is written
                    // straight into the queue, not built on the stack and copied.
                    let entry = |len| CqEntry { len, src: from, ..CqEntry::new(context, RECV_FLAGS) };
                    if size > cap {
                        b.rx_err(entry(cap), size - cap, Error::Trunc);
                    } else {
                        b.rx_done(entry(size), comp);
                    }
                    budget -= 1;
                    if budget == 0 {
                        break;
                    }
                }
                Err(Error::Again) => break,
                Err(e) => {
                    recv_failed(e);
                    break;
                }
            }
        }
    }

    /// Leave the group of `handle`, if it is still joined.
    fn leave(&self, handle: FiAddr) -> Result<()> {
        let mut g = self.lock();
        let (idx, gen) = mc_slot(handle);
        let Inner { state, mcs, .. } = &mut *g;
        let Some(sock) = state.socket() else { return Ok(()) };
        let Some(slot) = mcs.get_mut(idx).filter(|s| s.gen == gen && !s.retired) else { return Ok(()) };
        let Some(group) = slot.group.take() else { return Ok(()) };
        match slot.gen.checked_add(1) {
            Some(n) => slot.gen = n,
            None => slot.retired = true,
        }
        sock.leave_multicast_v4_n(group.ip(), &self.mc_interface()).map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "leaving {group} failed: {e}");
            Error::from(e)
        })?;
        fi_log!(Level::Info, NAME, "ep_ctrl", "left {group}");
        Ok(())
    }

    /// The interface multicast groups are joined on: the domain's.
    fn mc_interface(&self) -> InterfaceIndexOrAddress {
        let iface = self.domain.iface();
        match iface.addr {
            _ if iface.index > 0 => InterfaceIndexOrAddress::Index(iface.index),
            std::net::IpAddr::V4(a) => InterfaceIndexOrAddress::Address(a),
            _ => InterfaceIndexOrAddress::Address(Ipv4Addr::UNSPECIFIED),
        }
    }

    fn close_locked(&self, g: &mut Inner) {
        if g.state.is_closed() {
            return;
        }
        let open = std::mem::replace(&mut g.state, State::Closed);
        let Inner { rxq, b, mcs, dropped, .. } = g;
        rxq.retain(|rx| {
            b.rx_err(CqEntry::new(rx.context, RECV_FLAGS), 0, Error::Canceled);
            false
        });
        // Closing the socket leaves its groups; no handle names them any more.
        for s in mcs.iter_mut() {
            s.group = None;
            s.retired = true;
        }
        self.fd.store(-1, Ordering::Release);
        // Closing the descriptor also takes it out of every waiter's epoll set.
        drop(open);
        if *dropped > 0 {
            fi_log!(
                Level::Info,
                NAME,
                "ep_data",
                "endpoint {} closed; it dropped {} datagram(s) that arrived with no receive posted",
                self.fid,
                dropped
            );
        }
    }
}

impl Progress for DgramEp {
    fn progress(&self) {
        let mut g = self.lock();
        self.progress_locked(&mut g);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        let fd = self.fd.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }
}

impl EndpointOps for DgramEp {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()> {
        let ucq = self.domain.objs.find_cq(cq.fid()).ok_or(Error::Domain)?;
        let mut g = self.lock();
        if g.state.is_closed() {
            return Err(Error::OpBadState);
        }
        g.b.set_cq(&ucq, flags)?;
        drop(g);
        ucq.bind(self.weak_progress())
    }

    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()> {
        let c = self.domain.objs.find_cntr(cntr.fid()).ok_or(Error::Domain)?;
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        self.lock().b.set_cntr(&c, flags);
        c.bind(self.weak_progress())
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        // Nothing is reported there (joins complete at once), but binding one is
        // allowed, as libfabric's udp requires it for joins.
        let e = self.domain.fabric().find_eq(eq.fid()).ok_or(Error::Domain)?;
        self.lock().b.eq = Some(e);
        Ok(())
    }

    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()> {
        let a = self.domain.objs.find_av(av.fid()).ok_or(Error::Domain)?;
        let mut g = self.lock();
        g.b.av = Some(a);
        // Both caches answered for the AV bound before (whose versions are its own).
        g.src_cache = SrcCache::EMPTY;
        g.dst_cache = DstCache::empty();
        Ok(())
    }

    fn enable(&self) -> Result<()> {
        let mut g = self.lock();
        let sock = match &g.state {
            State::Idle(sock) => sock,
            State::Up(_) => return Ok(()),
            State::Closed => return Err(Error::OpBadState),
        };
        g.b.check_enable(true)?;
        let want = g.name.unwrap_or_else(|| self.domain.default_name(self.ipv6));
        let bound = self.domain.bind_socket(sock, want)?;
        fi_log!(Level::Debug, NAME, "ep_ctrl", "endpoint {} bound to {bound}", self.fid);
        g.name = Some(bound);
        // Idle, as seen above under this lock: its socket is the one now bound.
        g.state = match std::mem::replace(&mut g.state, State::Closed) {
            State::Idle(s) | State::Up(s) => State::Up(s),
            State::Closed => State::Closed,
        };
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        self.lock().name.map(Address::Sockaddr).ok_or(Error::OpBadState)
    }

    fn setname(&self, addr: &Address) -> Result<()> {
        let sa = addr.sockaddr().ok_or(Error::Inval)?;
        if sa.is_ipv6() != self.ipv6 {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        if !matches!(g.state, State::Idle(_)) {
            return Err(Error::OpBadState);
        }
        g.name = Some(sa);
        Ok(())
    }

    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let Inner { state, b, mcs, dst_cache, tx_hdr, .. } = &mut *g;
        let sock = state.up()?;
        Self::check_send(flags)?;
        if b.tx_cq.is_none() {
            return Err(Error::NoCq);
        }
        let len = match op.iov {
            [v] => v.len,
            iov if iov.len() <= IOV_LIMIT => IoVec::total(iov),
            _ => return Err(Error::Inval),
        };
        if len > self.max_msg {
            fi_log!(Level::Debug, NAME, "ep_data", "send of {len} bytes: above max_msg_size {}", self.max_msg);
            return Err(Error::MsgSize);
        }
        let mut mc = None;
        let to = self.dest(b, mcs, dst_cache, &mut mc, op.addr, flags)?;
        // SAFETY: post_send's contract: every IoVec of `op.iov` is valid for reads
        // until this operation's completion, which is written below, after the
        // datagram has left.
        let n = unsafe { sock::send_with(tx_hdr, sock, op.iov, to) }?;
        let mut e = CqEntry::new(op.context, SEND_FLAGS);
        e.len = n;
        b.tx_done(e, flags.contains(OpFlags::COMPLETION));
        Ok(())
    }

    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        if !matches!(g.state, State::Up(_)) {
            return Err(Error::OpBadState);
        }
        if flags.intersects(OpFlags::TAGGED | OpFlags::MULTI_RECV | OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD) {
            // No tagged receives (libfabric's udp neither), none of the others.
            return Err(if flags.contains(OpFlags::TAGGED) { Error::OpNotSupp } else { Error::BadFlags });
        }
        if g.b.rx_cq.is_none() {
            return Err(Error::NoCq);
        }
        let n = op.iov.len();
        if n > IOV_LIMIT {
            return Err(Error::Inval);
        }
        // Written where it will be read (the ring has room for rx_size).
        let Some(rx) = g.rxq.next_free(self.rx_size) else { return Err(Error::Again) };
        rx.context = op.context;
        rx.user_context = op.user_context;
        match op.iov {
            // One buffer, the common case: one store, not a call to memcpy.
            [v] => rx.iov[0] = *v,
            iov => rx.iov[..n].copy_from_slice(iov),
        }
        rx.niov = n;
        rx.comp = flags.contains(OpFlags::COMPLETION);
        g.rxq.commit();
        Ok(())
    }

    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()> {
        let mut g = self.lock();
        let Inner { state, b, mcs, dst_cache, .. } = &mut *g;
        let sock = state.up()?;
        Self::check_send(flags)?;
        if data.len() > self.max_msg {
            return Err(Error::MsgSize);
        }
        let mut mc = None;
        let to = self.dest(b, mcs, dst_cache, &mut mc, op.addr, flags)?;
        sock::send_slice(sock, data, to)?;
        b.tx_count(false);
        Ok(())
    }

    fn cancel(&self, user_context: u64) -> Result<()> {
        let mut g = self.lock();
        let Inner { rxq, b, .. } = &mut *g;
        let before = rxq.len;
        rxq.retain(|rx| {
            if rx.user_context == user_context {
                b.rx_err(CqEntry::new(rx.context, RECV_FLAGS), 0, Error::Canceled);
                false
            } else {
                true
            }
        });
        if rxq.len < before {
            Ok(())
        } else {
            Err(Error::NoEnt)
        }
    }

    fn set_min_multi_recv(&self, _bytes: usize) -> Result<()> {
        // No multi-receive buffers (libfabric's udp answers the same).
        Err(Error::NoProtoOpt)
    }

    fn join(&self, group: &Address) -> Result<Arc<dyn McOps>> {
        let sa = group.sockaddr().ok_or(Error::Inval)?;
        let SocketAddr::V4(g4) = sa else {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "join {group}: only IPv4 multicast groups are supported");
            return Err(Error::NoSys);
        };
        if !g4.ip().is_multicast() {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "join {group}: not a multicast address");
            return Err(Error::Inval);
        }
        if self.ipv6 {
            return Err(Error::Inval);
        }
        let mut g = self.lock();
        let sock = g.state.up()?;
        sock.join_multicast_v4_n(g4.ip(), &self.mc_interface()).map_err(|e| {
            fi_log!(Level::Info, NAME, "ep_ctrl", "join {g4} on {}: {e}", self.domain.iface().name);
            Error::from(e)
        })?;
        if let Some(name) = g.name {
            if g4.port() != 0 && name.port() != g4.port() {
                fi_log!(
                    Level::Warn,
                    NAME,
                    "ep_ctrl",
                    "joined {g4}, but the endpoint is bound to port {}: the group's datagrams will not reach it",
                    name.port()
                );
            } else if !name.ip().is_unspecified() {
                fi_log!(
                    Level::Info,
                    NAME,
                    "ep_ctrl",
                    "joined {g4}, but the endpoint is bound to {}: only an endpoint bound to 0.0.0.0 receives the group's datagrams",
                    name.ip()
                );
            }
        }
        let idx = match g.mcs.iter().position(|s| s.group.is_none() && !s.retired) {
            Some(i) => i,
            None => {
                g.mcs.push(McSlot { group: None, gen: 0, retired: false });
                g.mcs.len() - 1
            }
        };
        let slot = &mut g.mcs[idx];
        slot.group = Some(g4);
        let handle = mc_handle(idx, slot.gen);
        fi_log!(Level::Info, NAME, "ep_ctrl", "joined {g4} on {}", self.domain.iface().name);
        Ok(Arc::new(UdpMc {
            fid: fabric_core::prov::next_fid(),
            ep: self.me.clone(),
            group: group.clone(),
            handle,
            left: AtomicBool::new(false),
        }))
    }

    fn close(&self) -> Result<()> {
        let mut g = self.lock();
        self.close_locked(&mut g);
        Ok(())
    }
}

fabric_util::close_on_drop!(DgramEp);

/// A multicast group joined by a DGRAM endpoint.
struct UdpMc {
    fid: u64,
    ep: Weak<DgramEp>,
    group: Address,
    handle: FiAddr,
    left: AtomicBool,
}

impl McOps for UdpMc {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn group(&self) -> &Address {
        &self.group
    }

    fn addr(&self) -> FiAddr {
        self.handle
    }

    fn close(&self) -> Result<()> {
        if self.left.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match self.ep.upgrade() {
            Some(ep) => ep.leave(self.handle),
            None => Ok(()),
        }
    }
}

impl Drop for UdpMc {
    fn drop(&mut self) {
        let _ = McOps::close(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(addr: &str) -> Option<(Socket, SocketAddr)> {
        let sa: SocketAddr = addr.parse().unwrap();
        let cfg = crate::Config { iface: None, rcvbuf: 0, sndbuf: 0 };
        let s = sock::open(sa.is_ipv6(), &cfg).ok()?;
        let name = sock::bind(&s, sa).ok()?;
        Some((s, name))
    }

    /// Take the next datagram from `sock` into `src` (waiting up to 5 s for it).
    fn take(sock: &Socket, src: &mut sock::RawSource) {
        let mut p = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1, "a datagram arrives");
        // SAFETY: no pieces: only the sender is written.
        unsafe { sock::recv_raw(sock, &[], src) }.unwrap();
    }

    #[test]
    fn the_source_cache_follows_senders_and_the_av() {
        let (rx, rxn) = bound("127.0.0.1:0").unwrap();
        let (a, an) = bound("127.0.0.1:0").unwrap();
        let (c, cn) = bound("127.0.0.1:0").unwrap();
        let av = UtilAv::new(&fabric_core::AvAttr { av_type: fabric_core::AvType::Map, count: 4 }, "test", |a| {
            a.sockaddr().is_some()
        })
        .unwrap();
        let h = av.insert(&[Address::Sockaddr(an), Address::Sockaddr(cn)]).unwrap();
        let (ha, hc) = (h[0], h[1]);
        let mut src = sock::RawSource::new();
        let mut cache = SrcCache::EMPTY;
        let from = |s: &Socket, src: &mut sock::RawSource| {
            sock::send_slice(s, b"x", &rxn.into()).unwrap();
            take(&rx, src);
        };
        // Alternating senders: each named, the cache switching between them.
        for (s, want) in [(&a, ha), (&a, ha), (&c, hc), (&a, ha), (&c, hc), (&c, hc)] {
            from(s, &mut src);
            assert_eq!(source(Some(&av), &mut cache, &src), want);
        }
        // Without an AV nobody is named.
        from(&c, &mut src);
        assert_eq!(source(None, &mut cache, &src), FiAddr::NOTAVAIL);
        // c removed: the cached answer for it is stale and not given.
        assert_eq!(source(Some(&av), &mut cache, &src), hc);
        av.remove(&[hc]).unwrap();
        assert_eq!(source(Some(&av), &mut cache, &src), FiAddr::NOTAVAIL);
        from(&a, &mut src);
        assert_eq!(source(Some(&av), &mut cache, &src), ha);
        // A receive that names no sender (the kernel's length 0, as for an empty
        // name) is never taken for the sender cached last.
        let stale = sock::RawSource::new();
        assert_eq!(stale.word(), 0);
        assert_ne!(stale.word(), cache.key);
        // IPv6 senders (where there is an IPv6 loopback) go by their address.
        let (Some((rx6, rx6n)), Some((b6, b6n))) = (bound("[::1]:0"), bound("[::1]:0")) else {
            eprintln!("skipping the IPv6 part: no IPv6 loopback here");
            return;
        };
        let av6 = UtilAv::new(&fabric_core::AvAttr { av_type: fabric_core::AvType::Map, count: 4 }, "test", |a| {
            a.sockaddr().is_some()
        })
        .unwrap();
        let hb6 = av6.insert(&[Address::Sockaddr(b6n)]).unwrap()[0];
        let mut cache6 = SrcCache::EMPTY;
        for _ in 0..2 {
            sock::send_slice(&b6, b"y", &rx6n.into()).unwrap();
            take(&rx6, &mut src);
            assert_eq!(src.key(), 0, "not IPv4");
            assert_eq!(source(Some(&av6), &mut cache6, &src), hb6);
            assert_eq!(cache6.key, NO_KEY);
        }
    }

    #[test]
    fn rx_ring_posts_up_to_its_limit_and_keeps_order() {
        // Room for 4 (3 rounded up), but a limit of 3 posted at once.
        let mut ring = RxRing::with_room(3).unwrap();
        for c in 1..=3 {
            let rx = ring.next_free(3).expect("room below the limit");
            rx.context = c;
            ring.commit();
        }
        assert!(ring.next_free(3).is_none(), "three posted: the limit");
        assert!(ring.next_free(8).is_some(), "a limit above the room is the room");
        assert_eq!(ring.front().map(|r| r.context), Some(1));
        ring.pop();
        // Wraps around the slots, oldest first.
        for c in 4..=5 {
            ring.next_free(4).expect("room").context = c;
            ring.commit();
        }
        assert!(ring.next_free(usize::MAX).is_none(), "four posted: the ring is full");
        let mut seen = Vec::new();
        while let Some(r) = ring.front() {
            seen.push(r.context);
            ring.pop();
        }
        assert_eq!(seen, [2, 3, 4, 5]);
        assert!(ring.is_empty());
    }
}

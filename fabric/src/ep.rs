//! Endpoints: the data-transfer operations, and passive endpoints (listeners).

use crate::av::AddressVector;
use crate::buf::{Buf, OpBuffers};
use crate::cntr::Counter;
use crate::cq::{share, CompletionQueue, CqInner};
use crate::domain::Domain;
use crate::eq::EventQueue;
use crate::fabric::Fabric;
use crate::mc::Multicast;
use crate::mr::RegisteredBuf;
use crate::table::{RecBufs, Record};
use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_core::prov::{EndpointOps, IoVec, Op, PassiveEpOps};
use fabric_core::{Address, BindFlags, Caps, Error, FiAddr, Info, OpFlags, Result};
use std::fmt;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// Buffers per operation whose `IoVec` list is built on the stack; longer lists
/// are built in a short-lived `Vec`.
const SMALL_IOV: usize = 8;

/// An empty IoVec.
const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// An IoVec list built off the fast path: on the stack when short.
enum Iovs {
    Small([IoVec; SMALL_IOV], usize),
    Large(Vec<IoVec>),
}

impl Iovs {
    fn as_slice(&self) -> &[IoVec] {
        match self {
            Iovs::Small(a, n) => &a[..*n],
            Iovs::Large(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [IoVec] {
        match self {
            Iovs::Small(a, n) => &mut a[..*n],
            Iovs::Large(v) => v,
        }
    }
}

/// The buffers a post takes: a single `Buf` (statically one: the fast path) or
/// any [`OpBuffers`].
pub(crate) trait PostBufs {
    /// The one buffer, or all the buffers when they are not exactly one.
    fn single(self) -> std::result::Result<Buf, OpBuffers>;
    /// All the buffers.
    fn into_op_buffers(self) -> OpBuffers;
}

impl PostBufs for Buf {
    #[inline(always)]
    fn single(self) -> std::result::Result<Buf, OpBuffers> {
        Ok(self)
    }
    #[inline(always)]
    fn into_op_buffers(self) -> OpBuffers {
        OpBuffers::One(self)
    }
}

impl PostBufs for OpBuffers {
    #[inline(always)]
    fn single(self) -> std::result::Result<Buf, OpBuffers> {
        match self {
            OpBuffers::One(b) => Ok(b),
            b => Err(b),
        }
    }
    #[inline(always)]
    fn into_op_buffers(self) -> OpBuffers {
        self
    }
}

/// What posting an operation returns: `Ok(())`, or the error with the buffers.
pub type PostResult = std::result::Result<(), PostError>;

/// A post that failed: the error, and the operation's buffers given back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PostError {
    /// Why the operation was not posted (`Again` for back-pressure: read
    /// completions and retry; `NoCq` when no completion queue is bound for that
    /// direction).
    #[source]
    pub error: Error,
    /// The buffers of the operation, untouched.
    pub buffers: OpBuffers,
}

impl PostError {
    pub(crate) fn new(error: Error, buffers: OpBuffers) -> PostError {
        PostError { error, buffers }
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

/// A send described in full (`struct fi_msg` / `fi_msg_tagged`), for
/// [`Endpoint::sendmsg`] and [`Endpoint::tsendmsg`].
#[derive(Debug)]
pub struct SendMsg {
    /// The data: the contents (`..len`) of each buffer, in order.
    pub buffers: OpBuffers,
    /// Destination.
    pub addr: FiAddr,
    /// The application's context, returned in the completion.
    pub context: u64,
    /// Remote CQ data (sent with `OpFlags::REMOTE_CQ_DATA`).
    pub data: u64,
    /// Tag (tagged sends).
    pub tag: u64,
}

impl SendMsg {
    /// A send of `buffers` to `addr`, with no data and tag 0.
    pub fn new(buffers: impl Into<OpBuffers>, addr: FiAddr, context: u64) -> SendMsg {
        SendMsg { buffers: buffers.into(), addr, context, data: 0, tag: 0 }
    }
}

/// A receive described in full, for [`Endpoint::recvmsg`] and
/// [`Endpoint::trecvmsg`].
#[derive(Debug)]
pub struct RecvMsg {
    /// Where to receive: the whole capacity of each buffer, in order. `None` for a
    /// peek or a discard; exactly one buffer with `OpFlags::MULTI_RECV`.
    pub buffers: OpBuffers,
    /// Source filter (`FiAddr::UNSPEC`: any source).
    pub addr: FiAddr,
    /// The application's context, returned in the completion (and the key by
    /// which `CLAIM` finds a message peeked with `CLAIM`).
    pub context: u64,
    /// Tag (tagged receives).
    pub tag: u64,
    /// Tag bits to ignore when matching.
    pub ignore: u64,
}

impl RecvMsg {
    /// A receive into `buffers` from any source, tag 0, nothing ignored.
    pub fn new(buffers: impl Into<OpBuffers>, context: u64) -> RecvMsg {
        RecvMsg { buffers: buffers.into(), addr: FiAddr::UNSPEC, context, tag: 0, ignore: 0 }
    }
}

/// The non-buffer fields of one operation.
#[derive(Clone, Copy)]
struct Fields {
    addr: FiAddr,
    context: u64,
    data: u64,
    tag: u64,
    ignore: u64,
}

#[derive(Default)]
struct Bound {
    eq: Option<EventQueue>,
    av: Option<AddressVector>,
    cntrs: Vec<Counter>,
    cqs: Vec<CompletionQueue>,
}

/// An active endpoint (`fid_ep`): MSG (connected), RDM or DGRAM.
///
/// Operations take their buffers by value and give them back through the
/// completion queue bound for their direction (see the crate docs, "Memory
/// safety"). Closing the endpoint (explicitly or by dropping it) cancels what is
/// still posted; the canceled completions, with their buffers, stay readable on
/// the completion queues.
pub struct Endpoint {
    ops: Arc<dyn EndpointOps>,
    /// `ops` as a plain pointer, for the posts: a call through it does not locate
    /// the object inside the `Arc`'s allocation each time.
    prov: ProvEp,
    domain: Domain,
    tx: BoundCq,
    rx: BoundCq,
    bound: Mutex<Bound>,
    closed: bool,
    /// The endpoint's capabilities (its `Info`'s): what flags a post may carry.
    caps: Caps,
}

/// The completion queue bound for one direction of an [`Endpoint`]: null until
/// bound, then the shared state of a [`CompletionQueue`] that the endpoint's
/// `Bound::cqs` holds (pushed before the pointer is set, never removed) for as
/// long as the endpoint lives. A post finds its queue with one load and test.
struct BoundCq(AtomicPtr<CqInner>);

impl BoundCq {
    fn new() -> BoundCq {
        BoundCq(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The bound queue, if any.
    #[inline(always)]
    fn get(&self) -> Option<&CqInner> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: null, or the `CqInner` of an `Arc` held by the endpoint's
        // `Bound::cqs` (see the type), which outlives this `&self` (a field of
        // the same endpoint); the Acquire load pairs with `set`'s Release store.
        unsafe { p.as_ref() }
    }

    /// Record the bound queue, whose `Arc` the endpoint's `Bound::cqs` holds
    /// already.
    fn set(&self, cq: &Arc<CqInner>) {
        self.0.store(Arc::as_ptr(cq).cast_mut(), Ordering::Release);
    }
}

/// A pointer to the provider's endpoint, owned by the `Arc` beside it in
/// [`Endpoint`].
struct ProvEp(*const dyn EndpointOps);

// SAFETY: the pointer is only turned into a `&dyn EndpointOps` (see
// `Endpoint::prov`), and `dyn EndpointOps` is `Send + Sync`, so sending or sharing
// it is as sending or sharing the `Arc<dyn EndpointOps>` it comes from.
unsafe impl Send for ProvEp {}
// SAFETY: as for `Send`.
unsafe impl Sync for ProvEp {}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("fid", &self.ops.fid())
            .field("tx_cq", &self.tx.get().map(|c| c.ops.fid()))
            .field("rx_cq", &self.rx.get().map(|c| c.ops.fid()))
            .finish()
    }
}

impl Endpoint {
    pub(crate) fn open(domain: &Domain, info: &Info) -> Result<Endpoint> {
        let ops = domain.inner.ops.endpoint(info)?;
        Ok(Endpoint {
            prov: ProvEp(Arc::as_ptr(&ops)),
            ops,
            domain: domain.clone(),
            tx: BoundCq::new(),
            rx: BoundCq::new(),
            bound: Mutex::new(Bound::default()),
            closed: false,
            caps: info.caps,
        })
    }

    /// The provider's endpoint.
    #[inline(always)]
    fn prov(&self) -> &dyn EndpointOps {
        // SAFETY: `prov` points at the object `self.ops` owns, which lives as long
        // as `self` (the field is never replaced).
        unsafe { &*self.prov.0 }
    }

    fn bound(&self) -> std::sync::MutexGuard<'_, Bound> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The provider's object id (as in [`EqEvent`](crate::EqEvent)s).
    pub fn id(&self) -> u64 {
        self.ops.fid()
    }

    /// The domain of this endpoint.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Bind a completion queue for transmit and/or receive completions
    /// (`BindFlags::TRANSMIT`, `BindFlags::RECV`). Each direction can be bound once
    /// (`Err(Inval)` otherwise). `SELECTIVE_COMPLETION` is refused with
    /// `Err(BadFlags)`: the safe API gives buffers back through completions, so
    /// every operation must have one.
    pub fn bind_cq(&self, cq: &CompletionQueue, flags: BindFlags) -> Result<()> {
        let dirs = BindFlags::TRANSMIT | BindFlags::RECV;
        if flags.contains(BindFlags::SELECTIVE_COMPLETION) {
            fi_log!(Level::Warn, "core", "ep", "selective completion is not offered by the safe API");
            return Err(Error::BadFlags);
        }
        if flags.is_empty() || !dirs.contains(flags) {
            return Err(Error::BadFlags);
        }
        let (tx, rx) = (flags.contains(BindFlags::TRANSMIT), flags.contains(BindFlags::RECV));
        let mut b = self.bound();
        if (tx && self.tx.get().is_some()) || (rx && self.rx.get().is_some()) {
            fi_log!(Level::Warn, "core", "ep", "endpoint {}: duplicate completion queue binding", self.ops.fid());
            return Err(Error::Inval);
        }
        self.ops.bind_cq(&cq.inner.ops, flags)?;
        // Held first, then published (see `BoundCq`).
        b.cqs.push(cq.clone());
        if tx {
            self.tx.set(&cq.inner);
        }
        if rx {
            self.rx.set(&cq.inner);
        }
        Ok(())
    }

    /// Bind an address vector (RDM and DGRAM endpoints).
    pub fn bind_av(&self, av: &AddressVector) -> Result<()> {
        let mut b = self.bound();
        self.ops.bind_av(&av.inner.ops)?;
        b.av = Some(av.clone());
        Ok(())
    }

    /// Bind an event queue (MSG endpoints: connection events).
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut b = self.bound();
        self.ops.bind_eq(&eq.inner.ops)?;
        b.eq = Some(eq.clone());
        Ok(())
    }

    /// Bind a counter for the directions or events in `flags`.
    pub fn bind_counter(&self, cntr: &Counter, flags: BindFlags) -> Result<()> {
        let mut b = self.bound();
        self.ops.bind_cntr(&cntr.inner.ops, flags)?;
        b.cntrs.push(cntr.clone());
        Ok(())
    }

    /// Enable the endpoint once bound.
    pub fn enable(&self) -> Result<()> {
        self.ops.enable()
    }

    /// The endpoint's own address (`fi_getname`).
    pub fn name(&self) -> Result<Address> {
        self.ops.getname()
    }

    /// Set the endpoint's address (before `enable`).
    pub fn set_name(&self, addr: &Address) -> Result<()> {
        self.ops.setname(addr)
    }

    /// The connected peer's address (MSG endpoints).
    pub fn peer(&self) -> Result<Address> {
        self.ops.getpeer()
    }

    /// Connect to a passive endpoint, sending `data` with the request.
    pub fn connect(&self, addr: &Address, data: &[u8]) -> Result<()> {
        self.ops.connect(addr, data)
    }

    /// Accept the connection request this endpoint was opened for, sending `data`.
    pub fn accept(&self, data: &[u8]) -> Result<()> {
        self.ops.accept(data)
    }

    /// The most connection data `connect` and `accept` carry
    /// (`fi_getopt(FI_OPT_CM_DATA_SIZE)`): 256 bytes over tcp, 51 over verbs
    /// (an RC connect request's private data).
    pub fn cm_data_size(&self) -> usize {
        self.ops.cm_data_size()
    }

    /// Shut the connection down; both sides get a `Shutdown` event.
    pub fn shutdown(&self) -> Result<()> {
        self.ops.shutdown()
    }

    /// Cancel posted operations whose context is `context`: each completes with an
    /// error completion `Canceled` that gives its buffers back.
    pub fn cancel(&self, context: u64) -> Result<()> {
        self.ops.cancel(context)
    }

    /// Set the smallest free space a multi-receive buffer may keep before it is
    /// released (`FI_OPT_MIN_MULTI_RECV`).
    pub fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        self.ops.set_min_multi_recv(bytes)
    }

    /// Join the multicast group `group` (`fi_join`; the endpoint needs
    /// `FI_MULTICAST`, as udp's DGRAM endpoints have). Once joined, the group's
    /// messages arrive on the endpoint's posted receives, and a send posted with
    /// `OpFlags::MULTICAST` to [`Multicast::addr`] goes to the group. The join is
    /// complete when this returns (no `FI_JOIN_COMPLETE` event to wait for). The
    /// group is left when the returned handle is dropped or left
    /// ([`Multicast::leave`]), or when the endpoint closes. `Err(OpNotSupp)` where
    /// the endpoint has no multicast.
    pub fn join(&self, group: &Address) -> Result<Multicast> {
        self.ops.join(group).map(Multicast::new)
    }

    /// Close the endpoint: cancel everything posted (flushed as `Canceled` error
    /// completions that give the buffers back), disconnect, release the bindings.
    /// Dropping the endpoint does the same, ignoring errors.
    ///
    /// If the provider fails to close, its queues' tables of in-flight operations
    /// are leaked (kept alive forever) rather than freed, since the provider might
    /// still use their buffers.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.ops.close().inspect_err(|e| {
            fi_log!(
                Level::Warn,
                "core",
                "ep",
                "closing endpoint {} failed ({}): its in-flight buffers are leaked",
                self.ops.fid(),
                e
            );
            for cq in &self.bound().cqs {
                std::mem::forget(Arc::clone(&cq.inner));
            }
        })
    }

    /// Post a message operation: record it in the bound queue's table, then hand
    /// its buffers to the provider under the record's key.
    #[inline(always)]
    fn post(&self, rx: bool, buffers: impl PostBufs, f: Fields, flags: OpFlags) -> PostResult {
        let multi = rx && flags.contains(OpFlags::MULTI_RECV);
        let flags = flags | OpFlags::COMPLETION;
        let ops = self.prov();
        // SAFETY: `post_with` hands the call IoVecs that satisfy post_send's and
        // post_recv's contracts under the record key it passes (see there).
        self.post_with(rx, rx, multi, buffers, f.context, move |iov, key| unsafe {
            let op = Op {
                iov,
                addr: f.addr,
                context: key,
                user_context: f.context,
                data: f.data,
                tag: f.tag,
                ignore: f.ignore,
            };
            if rx {
                ops.post_recv(&op, flags)
            } else {
                ops.post_send(&op, flags)
            }
        })
    }

    /// The provider's endpoint.
    pub(crate) fn ops(&self) -> &Arc<dyn EndpointOps> {
        &self.ops
    }

    /// Record an operation's buffers in the table of the queue bound for its
    /// direction (`rx`: receive, else transmit), describe them as IoVecs (a
    /// buffer's whole capacity when `whole`, else its contents), and make the
    /// provider call with those IoVecs and the record's key as the completion
    /// context. If the call fails, the record is removed and the buffers given back.
    ///
    /// What the IoVecs guarantee to the call: each points into the heap allocation
    /// of a `Buf` now owned by the record under `key` in the queue's table (for a
    /// multi-receive buffer, by the `Arc` the record holds), at most its capacity
    /// long, all initialized. Moving a `Buf` does not move its bytes, and the
    /// pointers were taken with `Vec::as_mut_ptr`, which creates no reference that
    /// later accesses would invalidate. Nothing reads or writes those bytes until the
    /// record leaves the table, which happens only (a) when the provider's completion
    /// for `key` is read from the queue, which the provider writes only once it is
    /// done with the buffers (for a multi-receive buffer, only the bytes reported by
    /// each message completion are read before the buffer-released completion, as
    /// `post_recv` allows); (b) here, if the call fails, when the provider has not
    /// taken the operation; or (c) when the table is dropped, which needs this
    /// endpoint's `Arc` of the queue to go, which happens only after the provider's
    /// `close` returned (after which it touches no buffer), or never if `close`
    /// failed (see `close_inner`). The safe API binds no queue with selective
    /// completion, so every operation posted here gets a completion.
    ///
    /// The common case, one buffer, is inline; no buffer, several, or a
    /// multi-receive buffer take `Endpoint::record_general`.
    #[inline(always)]
    pub(crate) fn post_with(
        &self,
        rx: bool,
        whole: bool,
        multi: bool,
        buffers: impl PostBufs,
        context: u64,
        call: impl FnOnce(&[IoVec], u64) -> Result<()>,
    ) -> PostResult {
        let Some(cq) = (if rx { self.rx.get() } else { self.tx.get() }) else {
            return Err(PostError::new(Error::NoCq, buffers.into_op_buffers()));
        };
        let buffers = match buffers.single() {
            Ok(mut b) if !multi => {
                let iov = [IoVec { base: b.raw_ptr(), len: if whole { b.capacity() } else { b.len() } }];
                // The slot first, the record after: nothing that may unwind is
                // called while the record is built, so it is built in place.
                let mut t = cq.table();
                let idx = t.vacant();
                let key = t.fill(idx, Record { user_context: context, bufs: RecBufs::own(OpBuffers::One(b), rx) });
                drop(t);
                return match call(&iov, key) {
                    Ok(()) => Ok(()),
                    Err(error) => Err(self.post_failed(cq, key, error)),
                };
            }
            Ok(b) => OpBuffers::One(b),
            Err(OpBuffers::Registered(r)) if !multi => return self.post_registered(cq, rx, whole, r, context, call),
            Err(bufs) => bufs,
        };
        let (iovs, key) = self.record_general(cq, rx, whole, multi, buffers, context)?;
        match call(iovs.as_slice(), key) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.post_failed(cq, key, error)),
        }
    }

    /// [`Endpoint::post_with`] of a registered buffer: its IoVec and record built
    /// here, as a plain buffer's are (out of the plain buffer's path).
    #[inline(never)]
    fn post_registered(
        &self,
        cq: &CqInner,
        rx: bool,
        whole: bool,
        mut r: RegisteredBuf,
        context: u64,
        call: impl FnOnce(&[IoVec], u64) -> Result<()>,
    ) -> PostResult {
        let b = r.buf_mut();
        let iov = [IoVec { base: b.raw_ptr(), len: if whole { b.capacity() } else { b.len() } }];
        let key = cq.table().insert(Record { user_context: context, bufs: RecBufs::own(OpBuffers::Registered(r), rx) });
        match call(&iov, key) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.post_failed(cq, key, error)),
        }
    }

    /// [`Endpoint::post_with`]'s record and IoVecs for no buffer, several buffers
    /// or a multi-receive buffer.
    #[inline(never)]
    fn record_general(
        &self,
        cq: &CqInner,
        rx: bool,
        whole: bool,
        multi: bool,
        mut buffers: OpBuffers,
        context: u64,
    ) -> std::result::Result<(Iovs, u64), PostError> {
        if multi {
            buffers = match buffers {
                OpBuffers::Many(mut v) if v.len() == 1 => OpBuffers::One(v.remove(0)),
                b @ OpBuffers::One(_) => b,
                b => return Err(PostError::new(Error::Inval, b)),
            };
        }
        // The IoVec list: on the stack for short lists. It need only outlive the
        // provider call (a provider keeps copies).
        let n = buffers.count();
        let mut iovs =
            if n <= SMALL_IOV { Iovs::Small([NULL_IOV; SMALL_IOV], n) } else { Iovs::Large(vec![NULL_IOV; n]) };
        for (v, b) in iovs.as_mut_slice().iter_mut().zip(buffers.as_mut_slice()) {
            v.len = if whole { b.capacity() } else { b.len() };
            v.base = b.raw_ptr();
        }
        let bufs = match buffers {
            OpBuffers::One(b) if multi => RecBufs::Multi(share(b)),
            b => RecBufs::own(b, rx),
        };
        let key = cq.table().insert(Record { user_context: context, bufs });
        Ok((iovs, key))
    }

    /// A post the provider refused: its record out of the table, its buffers back.
    #[cold]
    #[inline(never)]
    fn post_failed(&self, cq: &CqInner, key: u64, error: Error) -> PostError {
        let rec = cq.table().remove(key);
        let buffers = match rec {
            Some(Record { bufs: RecBufs::Owned(b) | RecBufs::Recv(b), .. }) => b,
            Some(Record { bufs: RecBufs::Multi(s), .. }) => {
                Arc::try_unwrap(s).map_or(OpBuffers::None, |m| OpBuffers::One(m.buf))
            }
            None => {
                fi_log!(
                    Level::Warn,
                    "core",
                    "ep",
                    "endpoint {}: post failed ({}) but its operation was completed anyway",
                    self.ops.fid(),
                    error
                );
                OpBuffers::None
            }
        };
        PostError::new(error, buffers)
    }

    /// `Err(BadFlags)` for a send flag the endpoint's capabilities do not cover:
    /// `MULTICAST` without `FI_MULTICAST` (the provider would read the group's
    /// handle as a peer's).
    #[inline]
    fn check_send_flags(&self, flags: OpFlags) -> Result<()> {
        if flags.contains(OpFlags::MULTICAST) && !self.caps.contains(Caps::MULTICAST) {
            return Err(self.multicast_refused());
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn multicast_refused(&self) -> Error {
        fi_log!(
            Level::Info,
            "core",
            "ep",
            "endpoint {}: FI_MULTICAST send on an endpoint without FI_MULTICAST",
            self.ops.fid()
        );
        Error::BadFlags
    }

    #[inline(always)]
    fn send_op(&self, buffers: impl PostBufs, f: Fields, flags: OpFlags) -> PostResult {
        if let Err(e) = self.check_send_flags(flags) {
            return Err(PostError::new(e, buffers.into_op_buffers()));
        }
        self.post(false, buffers, f, flags)
    }

    #[inline(always)]
    fn recv_op(&self, buffers: impl PostBufs, f: Fields, flags: OpFlags) -> PostResult {
        self.post(true, buffers, f, flags)
    }

    fn inject_op(&self, data: &[u8], f: Fields, flags: OpFlags) -> Result<()> {
        let op = Op { iov: &[], addr: f.addr, context: 0, user_context: 0, data: f.data, tag: f.tag, ignore: 0 };
        self.ops.inject(data, &op, flags)
    }

    // ---- messages ----

    /// Send the contents of `buf` to `dest` (`fi_send`). The buffer comes back in
    /// the send's completion.
    #[inline]
    pub fn send(&self, buf: Buf, dest: FiAddr, context: u64) -> PostResult {
        self.send_op(buf, Fields { addr: dest, context, data: 0, tag: 0, ignore: 0 }, OpFlags::empty())
    }

    /// Send with remote CQ data (`fi_senddata`).
    pub fn senddata(&self, buf: Buf, data: u64, dest: FiAddr, context: u64) -> PostResult {
        self.send_op(buf, Fields { addr: dest, context, data, tag: 0, ignore: 0 }, OpFlags::REMOTE_CQ_DATA)
    }

    /// Send the contents of several buffers as one message (`fi_sendv`).
    pub fn sendv(&self, bufs: Vec<Buf>, dest: FiAddr, context: u64) -> PostResult {
        self.send_op(
            OpBuffers::Many(bufs),
            Fields { addr: dest, context, data: 0, tag: 0, ignore: 0 },
            OpFlags::empty(),
        )
    }

    /// Send with explicit flags (`fi_sendmsg`): `REMOTE_CQ_DATA` to send
    /// `msg.data`, `INJECT_COMPLETE`, `TRANSMIT_COMPLETE`, `DELIVERY_COMPLETE`,
    /// `FENCE`, `MORE`. `COMPLETION` is always added; `TAGGED` is removed.
    pub fn sendmsg(&self, msg: SendMsg, flags: OpFlags) -> PostResult {
        let f = Fields { addr: msg.addr, context: msg.context, data: msg.data, tag: 0, ignore: 0 };
        self.send_op(msg.buffers, f, flags - OpFlags::TAGGED)
    }

    /// Post a receive into the whole capacity of `buf` from `src`
    /// (`FiAddr::UNSPEC`: any) (`fi_recv`). The buffer comes back in the
    /// completion, its length set to the bytes received.
    #[inline]
    pub fn recv(&self, buf: Buf, src: FiAddr, context: u64) -> PostResult {
        self.recv_op(buf, Fields { addr: src, context, data: 0, tag: 0, ignore: 0 }, OpFlags::empty())
    }

    /// Post a receive scattering into several buffers (`fi_recvv`). They come back
    /// with their lengths as posted; the completion's `len` says how many bytes
    /// arrived.
    pub fn recvv(&self, bufs: Vec<Buf>, src: FiAddr, context: u64) -> PostResult {
        self.recv_op(OpBuffers::Many(bufs), Fields { addr: src, context, data: 0, tag: 0, ignore: 0 }, OpFlags::empty())
    }

    /// Post a receive with explicit flags (`fi_recvmsg`). With `MULTI_RECV` the one
    /// buffer takes many messages: each completes with a [`RecvView`](crate::RecvView)
    /// of its bytes, and the buffer comes back on the completion flagged
    /// `MULTI_RECV` once the provider releases it. `TAGGED` is removed.
    pub fn recvmsg(&self, msg: RecvMsg, flags: OpFlags) -> PostResult {
        let f = Fields { addr: msg.addr, context: msg.context, data: 0, tag: 0, ignore: 0 };
        self.recv_op(msg.buffers, f, flags - OpFlags::TAGGED)
    }

    /// Send a small message, copied before the call returns; no completion
    /// (`fi_inject`). At most `tx_attr.inject_size` bytes.
    pub fn inject(&self, data: &[u8], dest: FiAddr) -> Result<()> {
        self.inject_op(data, Fields { addr: dest, context: 0, data: 0, tag: 0, ignore: 0 }, OpFlags::empty())
    }

    /// [`Endpoint::inject`] with remote CQ data (`fi_injectdata`).
    pub fn injectdata(&self, data: &[u8], cq_data: u64, dest: FiAddr) -> Result<()> {
        let f = Fields { addr: dest, context: 0, data: cq_data, tag: 0, ignore: 0 };
        self.inject_op(data, f, OpFlags::REMOTE_CQ_DATA)
    }

    // ---- tagged messages ----

    /// Send a tagged message (`fi_tsend`).
    #[inline]
    pub fn tsend(&self, buf: Buf, dest: FiAddr, tag: u64, context: u64) -> PostResult {
        self.send_op(buf, Fields { addr: dest, context, data: 0, tag, ignore: 0 }, OpFlags::TAGGED)
    }

    /// Send a tagged message with remote CQ data (`fi_tsenddata`).
    pub fn tsenddata(&self, buf: Buf, data: u64, dest: FiAddr, tag: u64, context: u64) -> PostResult {
        let f = Fields { addr: dest, context, data, tag, ignore: 0 };
        self.send_op(buf, f, OpFlags::TAGGED | OpFlags::REMOTE_CQ_DATA)
    }

    /// Send a tagged message gathered from several buffers (`fi_tsendv`).
    pub fn tsendv(&self, bufs: Vec<Buf>, dest: FiAddr, tag: u64, context: u64) -> PostResult {
        self.send_op(OpBuffers::Many(bufs), Fields { addr: dest, context, data: 0, tag, ignore: 0 }, OpFlags::TAGGED)
    }

    /// Send a tagged message with explicit flags (`fi_tsendmsg`), as
    /// [`Endpoint::sendmsg`].
    pub fn tsendmsg(&self, msg: SendMsg, flags: OpFlags) -> PostResult {
        let f = Fields { addr: msg.addr, context: msg.context, data: msg.data, tag: msg.tag, ignore: 0 };
        self.send_op(msg.buffers, f, flags | OpFlags::TAGGED)
    }

    /// Post a tagged receive matching `tag` on the bits not set in `ignore`
    /// (`fi_trecv`).
    #[inline]
    pub fn trecv(&self, buf: Buf, src: FiAddr, tag: u64, ignore: u64, context: u64) -> PostResult {
        self.recv_op(buf, Fields { addr: src, context, data: 0, tag, ignore }, OpFlags::TAGGED)
    }

    /// Post a tagged receive scattering into several buffers (`fi_trecvv`).
    pub fn trecvv(&self, bufs: Vec<Buf>, src: FiAddr, tag: u64, ignore: u64, context: u64) -> PostResult {
        self.recv_op(OpBuffers::Many(bufs), Fields { addr: src, context, data: 0, tag, ignore }, OpFlags::TAGGED)
    }

    /// Post a tagged receive with explicit flags (`fi_trecvmsg`):
    ///
    /// - `PEEK` (no buffer): completes with the flags, length, tag and data of a
    ///   matching message without receiving it, or with an error completion
    ///   `NoMsg` if there is none. With `CLAIM`, the message is reserved for a
    ///   later `CLAIM` receive posted with the same `context`; with `DISCARD`,
    ///   it is dropped.
    /// - `CLAIM` (with buffers): receives the message claimed by an earlier peek
    ///   of the same `context`; with `DISCARD` (no buffer), drops it.
    /// - `MULTI_RECV`, as [`Endpoint::recvmsg`].
    pub fn trecvmsg(&self, msg: RecvMsg, flags: OpFlags) -> PostResult {
        let f = Fields { addr: msg.addr, context: msg.context, data: 0, tag: msg.tag, ignore: msg.ignore };
        self.recv_op(msg.buffers, f, flags | OpFlags::TAGGED)
    }

    /// Send a small tagged message, copied before the call returns; no completion
    /// (`fi_tinject`).
    pub fn tinject(&self, data: &[u8], dest: FiAddr, tag: u64) -> Result<()> {
        self.inject_op(data, Fields { addr: dest, context: 0, data: 0, tag, ignore: 0 }, OpFlags::TAGGED)
    }

    /// [`Endpoint::tinject`] with remote CQ data (`fi_tinjectdata`).
    pub fn tinjectdata(&self, data: &[u8], cq_data: u64, dest: FiAddr, tag: u64) -> Result<()> {
        let f = Fields { addr: dest, context: 0, data: cq_data, tag, ignore: 0 };
        self.inject_op(data, f, OpFlags::TAGGED | OpFlags::REMOTE_CQ_DATA)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

/// A passive endpoint (`fid_pep`): listens for connection requests, which arrive
/// as `ConnReq` events on its event queue. Dropping it stops listening.
pub struct PassiveEndpoint {
    ops: Arc<dyn PassiveEpOps>,
    _fabric: Fabric,
    eq: Mutex<Option<EventQueue>>,
    closed: bool,
}

impl fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassiveEndpoint").field("fid", &self.ops.fid()).finish()
    }
}

impl PassiveEndpoint {
    pub(crate) fn open(fabric: &Fabric, info: &Info) -> Result<PassiveEndpoint> {
        let ops = fabric.inner.ops.passive_ep(info)?;
        Ok(PassiveEndpoint { ops, _fabric: fabric.clone(), eq: Mutex::new(None), closed: false })
    }

    /// The provider's object id (the `fid` of its `ConnReq` events).
    pub fn id(&self) -> u64 {
        self.ops.fid()
    }

    /// Bind the event queue that receives connection requests.
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
        self.ops.bind_eq(&eq.inner.ops)?;
        *g = Some(eq.clone());
        Ok(())
    }

    /// Start listening.
    pub fn listen(&self) -> Result<()> {
        self.ops.listen()
    }

    /// The address peers connect to.
    pub fn name(&self) -> Result<Address> {
        self.ops.getname()
    }

    /// Choose the address to listen on (before `listen`).
    pub fn set_name(&self, addr: &Address) -> Result<()> {
        self.ops.setname(addr)
    }

    /// The most connection data `reject` carries (`FI_OPT_CM_DATA_SIZE`).
    pub fn cm_data_size(&self) -> usize {
        self.ops.cm_data_size()
    }

    /// Refuse the connection request of a `ConnReq` event's `info` (its `handle`),
    /// sending `data` to the peer. `Err(Inval)` if the entry has no handle.
    pub fn reject(&self, info: &Info, data: &[u8]) -> Result<()> {
        let handle = info.handle.as_ref().ok_or(Error::Inval)?;
        self.ops.reject(handle, data)
    }

    /// Stop listening. Dropping does the same, ignoring errors.
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        self.ops.close()
    }
}

impl Drop for PassiveEndpoint {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.ops.close();
        }
    }
}

//! The provider contract: the traits a provider implements behind the public API.
//!
//! Like mio's platform backends, providers sit behind these few traits. Objects are
//! shared (`Arc`) and thread-safe. Data-transfer calls take raw buffers through
//! `unsafe` methods whose `# Safety` sections state what the caller (the safe layer in
//! the `fabric` crate) guarantees. A provider reports every outcome of a posted
//! operation as exactly one completion (or error completion) on the bound queue,
//! unless the operation was posted without `COMPLETION` on a selective endpoint or
//! was an inject; after `close` returns, it touches none of the buffers it was given.

use crate::addr::{Address, FiAddr};
use crate::atomic::{AtomicKind, AtomicOp, Datatype, RmaIov};
use crate::entry::{AvAttr, CqAttr, CqEntry, CqErrEntry, EqAttr, EqErrEntry, EqEvent};
use crate::error::Result;
use crate::flags::{BindFlags, MrAccess, OpFlags};
use crate::info::{Hints, Info};
use crate::param::Param;
use std::any::Any;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `op_context` of a completion-queue entry that belongs to no operation
/// (`FI_EOVERRUN` reports). The safe layer never uses it for an operation.
pub const NO_CONTEXT: u64 = 0;

/// The connection data a connect, accept or reject carries unless the provider
/// says otherwise ([`EndpointOps::cm_data_size`]): libfabric's tcp figure.
pub const CM_DATA_SIZE: usize = 256;

/// Allocate a process-unique object id (libfabric's `fid`), never 0.
pub fn next_fid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One contiguous piece of a local buffer (`struct iovec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct IoVec {
    /// Start of the piece.
    pub base: *mut u8,
    /// Bytes in the piece.
    pub len: usize,
}

// SAFETY: an IoVec is a plain pointer and length; whoever dereferences it does so
// under the contract of the unsafe method it was passed to.
unsafe impl Send for IoVec {}
// SAFETY: as above; sharing the description of a buffer is not access to it.
unsafe impl Sync for IoVec {}

impl IoVec {
    /// Total length of a list of pieces.
    pub fn total(iov: &[IoVec]) -> usize {
        iov.iter().map(|v| v.len).sum()
    }
}

/// A data-transfer operation as posted to a provider (`struct fi_msg_tagged`).
#[derive(Debug, Clone, Copy)]
pub struct Op<'a> {
    /// The buffer pieces.
    pub iov: &'a [IoVec],
    /// Peer: the destination of a send, the source filter of a receive
    /// (`FiAddr::UNSPEC` for any).
    pub addr: FiAddr,
    /// Completion context: returned as `op_context` in the completion.
    pub context: u64,
    /// The application's own context value, used by `FI_CLAIM` to find a peeked
    /// message and by `cancel`.
    pub user_context: u64,
    /// Remote CQ data (with `OpFlags::REMOTE_CQ_DATA`).
    pub data: u64,
    /// Tag (tagged operations).
    pub tag: u64,
    /// Ignore mask (tagged receives).
    pub ignore: u64,
}

/// A one-sided operation as posted to a provider (`struct fi_msg_rma`).
#[derive(Debug, Clone, Copy)]
pub struct RmaOp<'a> {
    /// Local memory: the source of a write, the destination of a read.
    pub iov: &'a [IoVec],
    /// The peer.
    pub addr: FiAddr,
    /// The peer's memory.
    pub rma: &'a [RmaIov],
    /// Completion context, as in [`Op`].
    pub context: u64,
    /// The application's own context value.
    pub user_context: u64,
    /// Remote CQ data (writes with `OpFlags::REMOTE_CQ_DATA`).
    pub data: u64,
}

/// An atomic operation as posted to a provider (`struct fi_msg_atomic` with its
/// compare and result buffers).
#[derive(Debug, Clone, Copy)]
pub struct AtomicDesc {
    /// Plain, fetching or compare.
    pub kind: AtomicKind,
    /// The operation.
    pub op: AtomicOp,
    /// The element type.
    pub datatype: Datatype,
    /// Elements.
    pub count: usize,
    /// The operand (`count` elements; empty for `FI_ATOMIC_READ`).
    pub operand: IoVec,
    /// The compare operand (compare kind; empty otherwise).
    pub compare: IoVec,
    /// Where the prior target values go (fetch and compare kinds; empty otherwise).
    pub result: IoVec,
    /// The peer.
    pub addr: FiAddr,
    /// The peer's memory (`count` elements at `rma.addr`).
    pub rma: RmaIov,
    /// Completion context, as in [`Op`].
    pub context: u64,
    /// The application's own context value.
    pub user_context: u64,
}

/// A provider: a named source of fabrics.
pub trait Provider: Send + Sync + 'static {
    /// The provider's name (`tcp`).
    fn name(&self) -> &'static str;
    /// The provider's version (`FI_VERSION`).
    fn version(&self) -> u32;
    /// The provider's parameters, each read from `FI_<PROV>_<NAME>`.
    fn params(&self) -> Vec<Param>;
    /// The entries this provider offers for the hints, best first. Generic
    /// filtering ([`Info::check`]) is done by the caller; the provider resolves node,
    /// service and addresses and may apply [`Info::check`] itself. `Err(NoData)` with
    /// a logged reason when nothing fits.
    fn getinfo(&self, hints: &Hints) -> Result<Vec<Info>>;
    /// Open a fabric for an entry this provider returned.
    fn fabric(&self, info: &Info) -> Result<Arc<dyn FabricOps>>;
}

/// A fabric: a provider instance over one network.
pub trait FabricOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Open a domain for an entry.
    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>>;
    /// Open an event queue.
    fn eq_open(&self, attr: &EqAttr) -> Result<Arc<dyn EqOps>>;
    /// Open a passive endpoint (listener) for MSG endpoints.
    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEpOps>>;
}

/// A domain: one device or interface.
pub trait DomainOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// The entry the domain was opened with.
    fn info(&self) -> &Info;
    /// Open a completion queue.
    fn cq_open(&self, attr: &CqAttr) -> Result<Arc<dyn CqOps>>;
    /// Open a counter.
    fn cntr_open(&self) -> Result<Arc<dyn CntrOps>>;
    /// Open an address vector.
    fn av_open(&self, attr: &AvAttr) -> Result<Arc<dyn AvOps>>;
    /// Open an endpoint.
    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>>;
    /// Register memory.
    ///
    /// # Safety
    /// `base..base+len` must stay valid (allocated, not moved) until the region is
    /// closed, and while registered for remote or local access the provider may
    /// read or write it at any time an operation allows: the caller must not hold
    /// Rust references to it that assume exclusivity during such operations.
    unsafe fn mr_reg(&self, base: *mut u8, len: usize, access: MrAccess, requested_key: u64) -> Result<Arc<dyn MrOps>>;
    /// The most elements one atomic of this kind, operation and datatype may carry
    /// (`fi_query_atomic`); `Err(OpNotSupp)` when not supported.
    fn atomic_valid(&self, op: AtomicOp, datatype: Datatype, kind: AtomicKind) -> Result<usize> {
        let _ = (op, datatype, kind);
        Err(crate::Error::OpNotSupp)
    }
}

/// A registered memory region.
pub trait MrOps: Send + Sync {
    /// The key a peer uses to reach the region.
    fn key(&self) -> u64;
    /// The local descriptor (`fi_mr_desc`), as an opaque value.
    fn desc(&self) -> u64;
    /// Re-read the region's pages (`fi_mr_refresh`).
    fn refresh(&self) -> Result<()>;
    /// Close the region: later peer accesses fail with `FI_EACCES`.
    fn close(&self) -> Result<()>;
}

/// A completion queue.
pub trait CqOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Downcast support for providers.
    fn as_any(&self) -> &dyn Any;
    /// Read completions into `out`, making progress first. `Err(Again)` when none,
    /// `Err(Avail)` when an error entry is at the head.
    fn read(&self, out: &mut [CqEntry]) -> Result<usize>;
    /// Read one completion, making progress first: [`CqOps::read`] with room
    /// for one entry, the entry returned rather than copied into a slice (the
    /// path of `fi_cq_read(cq, &e, 1)` and of the Rust API's `read_one`).
    /// `Err(Again)` when none, `Err(Avail)` when an error entry is at the head.
    /// The default reads through [`CqOps::read`].
    fn read_one(&self) -> Result<CqEntry> {
        let mut e = [CqEntry::new(NO_CONTEXT, crate::Caps::empty())];
        match self.read(&mut e)? {
            0 => Err(crate::Error::Again),
            _ => Ok(e[0]),
        }
    }
    /// Read one error entry. `Err(Again)` when none.
    fn readerr(&self) -> Result<CqErrEntry>;
    /// Wait up to `timeout` (`None`: forever) for completions, busy-polling briefly
    /// and then sleeping. `Err(Again)` on time-out.
    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize>;
    /// A file descriptor that becomes readable when the queue may have entries,
    /// once [`CqOps::trywait`] said `Ok`.
    fn wait_fd(&self) -> Result<RawFd>;
    /// Prepare for the application to block on `wait_fd` (`fi_trywait`): `Ok`
    /// when it may block now (the descriptor becomes readable when completions
    /// may be there), `Err(Again)` when completions are there already (read them
    /// first), `Err(NoSys)` without an fd wait object. The default makes no
    /// preparation: for queues whose descriptor needs none.
    fn trywait(&self) -> Result<()> {
        self.wait_fd().map(|_| ())
    }
    /// Wake a thread blocked in `sread` (`fi_cq_signal`).
    fn signal(&self);
    /// A wait set is about to sleep on [`CqOps::wait_fd`] together with other
    /// objects' descriptors ([`crate::wait::Set::wait`]): like
    /// [`CqOps::trywait`], but from now until the matching [`CqOps::wait_end`]
    /// whatever would make entries appear makes the descriptor readable, as for
    /// the queue's own `sread` (peers that skip the wake-up while nobody sleeps
    /// are told someone does). `Ok` gives the time by which progress has work
    /// even if nothing arrives (a timer), if any: the sleep ends no later.
    /// `Err(Again)` when entries are there already; no `wait_end` is then due.
    /// The default is [`CqOps::trywait`], for queues whose descriptor needs no more.
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.trywait().map(|()| None)
    }
    /// The sleep announced by a successful [`CqOps::wait_begin`] ended.
    fn wait_end(&self) {}
}

/// An event queue.
pub trait EqOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Downcast support for providers.
    fn as_any(&self) -> &dyn Any;
    /// Read one event. `Err(Again)` when none, `Err(Avail)` when an error is at the head.
    fn read(&self) -> Result<EqEvent>;
    /// Look at the next event without removing it (`FI_PEEK`).
    fn peek(&self) -> Result<EqEvent>;
    /// Read one error entry.
    fn readerr(&self) -> Result<EqErrEntry>;
    /// Wait up to `timeout` for an event. `Err(Again)` on time-out.
    fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent>;
    /// A file descriptor readable when the queue may have events.
    fn wait_fd(&self) -> Result<RawFd>;
    /// Wake a thread blocked in `sread`.
    fn signal(&self);
    /// Queue an application's event (`fi_eq_write`) after everything queued so
    /// far; a reader gets it back as it was written. `Err(NoSys)` by default.
    fn write(&self, event: EqEvent) -> Result<()> {
        let _ = event;
        Err(crate::Error::NoSys)
    }
    /// Prepare for the application to block on [`EqOps::wait_fd`] (`fi_trywait`),
    /// as [`CqOps::trywait`]: `Err(Again)` when events are there already. The
    /// default makes no preparation: for queues whose descriptor needs none.
    fn trywait(&self) -> Result<()> {
        self.wait_fd().map(|_| ())
    }
    /// A wait set is about to sleep on [`EqOps::wait_fd`], as
    /// [`CqOps::wait_begin`]. The default is [`EqOps::trywait`].
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.trywait().map(|()| None)
    }
    /// The sleep announced by a successful [`EqOps::wait_begin`] ended.
    fn wait_end(&self) {}
}

/// A counter.
pub trait CntrOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Downcast support for providers.
    fn as_any(&self) -> &dyn Any;
    /// Successful completions counted (progressing first).
    fn read(&self) -> u64;
    /// Errors counted.
    fn readerr(&self) -> u64;
    /// Add to the success count.
    fn add(&self, n: u64);
    /// Set the success count.
    fn set(&self, n: u64);
    /// Add to the error count.
    fn adderr(&self, n: u64);
    /// Set the error count.
    fn seterr(&self, n: u64);
    /// Wait until the count reaches `threshold`; `Err(TimedOut)` after `timeout`,
    /// `Err(Avail)` if the error count changes meanwhile.
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()>;
    /// A file descriptor that becomes readable when the counts may have changed,
    /// once [`CntrOps::trywait`] or [`CntrOps::wait_begin`] said `Ok`.
    /// `Err(NoSys)` (the default) for a counter without one.
    fn wait_fd(&self) -> Result<RawFd> {
        Err(crate::Error::NoSys)
    }
    /// Prepare for the application to block on [`CntrOps::wait_fd`]
    /// (`fi_trywait`), as [`CqOps::trywait`]. A counter does not know which
    /// change its waiter waits for, so it answers `Ok` once armed: the waiter
    /// reads the counts once more before it blocks. The default makes no
    /// preparation.
    fn trywait(&self) -> Result<()> {
        self.wait_fd().map(|_| ())
    }
    /// A wait set is about to sleep on [`CntrOps::wait_fd`], as
    /// [`CqOps::wait_begin`]. The default is [`CntrOps::trywait`].
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.trywait().map(|()| None)
    }
    /// The sleep announced by a successful [`CntrOps::wait_begin`] ended.
    fn wait_end(&self) {}
}

/// An address vector.
pub trait AvOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Downcast support for providers.
    fn as_any(&self) -> &dyn Any;
    /// Insert addresses; one handle per address, in order. An address of the wrong
    /// format fails the call with `FI_EINVAL` and inserts nothing.
    fn insert(&self, addrs: &[Address]) -> Result<Vec<FiAddr>>;
    /// Remove handles.
    fn remove(&self, addrs: &[FiAddr]) -> Result<()>;
    /// The address behind a handle.
    fn lookup(&self, addr: FiAddr) -> Result<Address>;
    /// The address as a string (`fi_av_straddr`).
    fn straddr(&self, addr: &Address) -> String {
        addr.to_uri()
    }
}

/// A multicast group joined by an endpoint (`fid_mc`), from
/// [`EndpointOps::join`].
pub trait McOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// The group as joined.
    fn group(&self) -> &Address;
    /// The handle that names the group as the destination of a send posted with
    /// `OpFlags::MULTICAST` (`fi_mc_addr`). It is not an address-vector handle.
    fn addr(&self) -> FiAddr;
    /// Leave the group (`fi_close` on the `fid_mc`): its datagrams stop arriving
    /// and its handle stops naming it. Leaving again, or after the endpoint was
    /// closed (which left every group), does nothing.
    fn close(&self) -> Result<()>;
}

/// A passive endpoint: listens for connection requests.
pub trait PassiveEpOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Bind the event queue that receives connection requests.
    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()>;
    /// Start listening.
    fn listen(&self) -> Result<()>;
    /// The address peers connect to.
    fn getname(&self) -> Result<Address>;
    /// Choose the address to listen on (before `listen`).
    fn setname(&self, addr: &Address) -> Result<()>;
    /// Refuse a connection request, sending `data` to the peer.
    fn reject(&self, handle: &crate::info::ConnHandle, data: &[u8]) -> Result<()>;
    /// The most connection data a reject carries (`FI_OPT_CM_DATA_SIZE`).
    fn cm_data_size(&self) -> usize {
        CM_DATA_SIZE
    }
    /// Stop listening.
    fn close(&self) -> Result<()>;
}

/// An active endpoint (MSG, RDM or DGRAM).
pub trait EndpointOps: Send + Sync {
    /// Object id.
    fn fid(&self) -> u64;
    /// Bind a completion queue for transmit and/or receive completions.
    fn bind_cq(&self, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<()>;
    /// Bind a counter.
    fn bind_cntr(&self, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<()>;
    /// Bind the event queue (MSG endpoints).
    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()>;
    /// Bind the address vector (RDM and DGRAM endpoints).
    fn bind_av(&self, av: &Arc<dyn AvOps>) -> Result<()>;
    /// Enable the endpoint once bound.
    fn enable(&self) -> Result<()>;
    /// The endpoint's own address.
    fn getname(&self) -> Result<Address>;
    /// Set the address (before `enable`).
    fn setname(&self, addr: &Address) -> Result<()>;
    /// The connected peer's address (MSG endpoints).
    ///
    /// Connectionless endpoints (RDM, DGRAM) keep this default: `FI_EOPNOTSUPP`.
    fn getpeer(&self) -> Result<Address> {
        Err(crate::Error::OpNotSupp)
    }
    /// Connect to a passive endpoint, sending `param` (MSG endpoints).
    ///
    /// Connectionless endpoints (RDM, DGRAM) keep this default: `FI_EOPNOTSUPP`.
    fn connect(&self, addr: &Address, param: &[u8]) -> Result<()> {
        let _ = (addr, param);
        Err(crate::Error::OpNotSupp)
    }
    /// Accept the connection request this endpoint was opened for, sending `param`.
    ///
    /// Connectionless endpoints (RDM, DGRAM) keep this default: `FI_EOPNOTSUPP`.
    fn accept(&self, param: &[u8]) -> Result<()> {
        let _ = param;
        Err(crate::Error::OpNotSupp)
    }
    /// The most connection data a connect or accept carries
    /// (`FI_OPT_CM_DATA_SIZE`); more fails the call with `FI_EINVAL`.
    fn cm_data_size(&self) -> usize {
        CM_DATA_SIZE
    }
    /// Shut the connection down; both sides get `FI_SHUTDOWN`.
    ///
    /// Connectionless endpoints (RDM, DGRAM) keep this default: `FI_EOPNOTSUPP`.
    fn shutdown(&self) -> Result<()> {
        Err(crate::Error::OpNotSupp)
    }
    /// Post a send (tagged when `flags` has `TAGGED`).
    ///
    /// # Safety
    /// Every `IoVec` in `op.iov` must be valid for reads of its length, and stay
    /// valid and unmodified until the operation's completion has been written to the
    /// bound queue (or `close` has returned). With `INJECT`, only until the call
    /// returns.
    unsafe fn post_send(&self, op: &Op<'_>, flags: OpFlags) -> Result<()>;
    /// Post a receive (tagged when `flags` has `TAGGED`; `PEEK`, `CLAIM`, `DISCARD`,
    /// `MULTI_RECV` as libfabric specifies).
    ///
    /// # Safety
    /// Every `IoVec` in `op.iov` must be valid for writes of its length and not be
    /// read or written by anyone else until the operation's completion has been
    /// written to the bound queue (or `close` has returned). For `MULTI_RECV`, the
    /// bytes a completion reports become the caller's again at that completion; the
    /// rest stays the provider's until the buffer-released completion.
    unsafe fn post_recv(&self, op: &Op<'_>, flags: OpFlags) -> Result<()>;
    /// Send a small message copied at once (`fi_inject`, `fi_injectdata`,
    /// `fi_tinject`): no completion; `data` is reusable on return.
    fn inject(&self, data: &[u8], op: &Op<'_>, flags: OpFlags) -> Result<()>;
    /// Write local memory to a peer's registered memory (`fi_writemsg`); with
    /// `OpFlags::REMOTE_CQ_DATA` the target gets a completion carrying `op.data`,
    /// consuming a posted receive.
    ///
    /// # Safety
    /// As [`EndpointOps::post_send`] for `op.iov`.
    unsafe fn post_write(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        let _ = (op, flags);
        Err(crate::Error::OpNotSupp)
    }
    /// Read a peer's registered memory into local memory (`fi_readmsg`).
    ///
    /// # Safety
    /// As [`EndpointOps::post_recv`] for `op.iov` (valid for writes, untouched by
    /// anyone else until the completion).
    unsafe fn post_read(&self, op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        let _ = (op, flags);
        Err(crate::Error::OpNotSupp)
    }
    /// Write a small buffer copied at once (`fi_inject_write`): no completion.
    fn inject_write(&self, data: &[u8], op: &RmaOp<'_>, flags: OpFlags) -> Result<()> {
        let _ = (data, op, flags);
        Err(crate::Error::OpNotSupp)
    }
    /// An atomic operation on a peer's registered memory.
    ///
    /// # Safety
    /// `operand` and `compare` as [`EndpointOps::post_send`]'s buffers, `result` as
    /// [`EndpointOps::post_recv`]'s, until the completion.
    unsafe fn post_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let _ = (op, flags);
        Err(crate::Error::OpNotSupp)
    }
    /// An atomic whose `operand` and `compare` are copied before the call
    /// returns: with `flags` [`OpFlags::silent`] (`fi_inject_atomic`) nothing is
    /// reported when it completes, else it completes as
    /// [`EndpointOps::post_atomic`]'s with `flags`.
    ///
    /// # Safety
    /// `operand` and `compare` valid for reads during the call; `result` as
    /// [`EndpointOps::post_atomic`]'s.
    unsafe fn inject_atomic(&self, op: &AtomicDesc, flags: OpFlags) -> Result<()> {
        let _ = (op, flags);
        Err(crate::Error::OpNotSupp)
    }
    /// Cancel posted receives (and unsent sends, where the provider can) whose
    /// `user_context` is `user_context`: each completes with `FI_ECANCELED`.
    fn cancel(&self, user_context: u64) -> Result<()>;
    /// Set the smallest free space a multi-receive buffer may keep before it is
    /// released (`FI_OPT_MIN_MULTI_RECV`).
    fn set_min_multi_recv(&self, bytes: usize) -> Result<()>;
    /// Whether the remote CQ data of an RMA write takes a posted receive
    /// (`true`, the default: fabric's Rust API returns that receive's buffer in
    /// the completion, as libfabric's `FI_RX_CQ_DATA` mode) or completes with no
    /// context and consumes nothing (`false`: libfabric's rule without that mode,
    /// which its C ABI follows). Set before the endpoint is used. Endpoints
    /// without RMA keep this default: `FI_EOPNOTSUPP`.
    fn set_rx_cq_data(&self, takes_recv: bool) -> Result<()> {
        let _ = takes_recv;
        Err(crate::Error::OpNotSupp)
    }
    /// Join the multicast group `group` (`fi_join`), for an endpoint with
    /// `FI_MULTICAST`: once joined, the group's messages arrive on the endpoint's
    /// posted receives, and sends posted with `OpFlags::MULTICAST` to the returned
    /// group's [`McOps::addr`] go to the group. The join is complete when the call
    /// returns (libfabric reports `FI_JOIN_COMPLETE` on the endpoint's event queue;
    /// a provider whose join completes at once has no event to wait for).
    /// `Err(OpNotSupp)` where the endpoint has no multicast.
    fn join(&self, group: &Address) -> Result<Arc<dyn McOps>> {
        let _ = group;
        Err(crate::Error::OpNotSupp)
    }
    /// Close: cancel everything posted (flushed as `FI_ECANCELED` completions),
    /// disconnect, and release every buffer. After it returns the provider touches
    /// none of the buffers it was given.
    ///
    /// Call it before dropping the last reference, as `fi_close` must be called in
    /// C: a completion queue the endpoint is bound to holds the endpoint (so that a
    /// read of the queue reaches its progress without upgrading a weak reference),
    /// and lets it go only here. An endpoint dropped unclosed stays open, with its
    /// queue, until the process ends. (`fabric::Endpoint` closes on drop.)
    fn close(&self) -> Result<()>;
}

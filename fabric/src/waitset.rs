//! Wait sets and poll sets: one blocking wait, or one poll, over several
//! completion queues, counters and event queues (libfabric's `fi_wait_open` and
//! `fi_poll_open`).

use crate::cntr::Counter;
use crate::cq::{CompletionQueue, CqInner};
use crate::eq::EventQueue;
use fabric_core::wait::{CntrMember, CqMember, EqMember, Set, Waitable};
use fabric_core::{Error, Result};
use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::CompletionQueue {}
    impl Sealed for crate::Counter {}
    impl Sealed for crate::EventQueue {}
}

/// What a [`WaitSet`] or [`PollSet`] holds: a [`CompletionQueue`], a
/// [`Counter`] or an [`EventQueue`].
pub trait SetMember: sealed::Sealed {
    /// The member's object id (its `id()`).
    fn member_id(&self) -> u64;
    /// The member as the shared wait machinery sees it.
    #[doc(hidden)]
    fn waitable(&self) -> Arc<dyn Waitable>;
}

/// A completion queue of the safe API as a member: a buffer-released completion
/// waiting in the queue's own table counts as an entry.
struct SafeCq {
    inner: Arc<CqInner>,
    raw: CqMember,
}

impl Waitable for SafeCq {
    fn fid(&self) -> u64 {
        self.raw.fid()
    }
    fn ready(&self) -> Result<bool> {
        if self.inner.has_pending() {
            return Ok(true);
        }
        self.raw.ready()
    }
    fn wait_fd(&self) -> Result<RawFd> {
        self.raw.wait_fd()
    }
    fn trywait(&self) -> Result<()> {
        if self.inner.has_pending() {
            return Err(fabric_core::Error::Again);
        }
        self.raw.trywait()
    }
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.raw.wait_begin()
    }
    fn wait_end(&self) {
        self.raw.wait_end()
    }
}

/// A member that keeps its safe handle (`_keep`: the counter's domain, the
/// queue's fabric) open while the set holds it.
struct Held<M, K> {
    raw: M,
    _keep: K,
}

impl<M: Waitable, K: Send + Sync> Waitable for Held<M, K> {
    fn fid(&self) -> u64 {
        self.raw.fid()
    }
    fn ready(&self) -> Result<bool> {
        self.raw.ready()
    }
    fn wait_fd(&self) -> Result<RawFd> {
        self.raw.wait_fd()
    }
    fn trywait(&self) -> Result<()> {
        self.raw.trywait()
    }
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.raw.wait_begin()
    }
    fn wait_end(&self) {
        self.raw.wait_end()
    }
}

impl SetMember for CompletionQueue {
    fn member_id(&self) -> u64 {
        self.id()
    }
    fn waitable(&self) -> Arc<dyn Waitable> {
        Arc::new(SafeCq { inner: Arc::clone(&self.inner), raw: CqMember(Arc::clone(&self.inner.ops)) })
    }
}

impl SetMember for Counter {
    fn member_id(&self) -> u64 {
        self.id()
    }
    fn waitable(&self) -> Arc<dyn Waitable> {
        Arc::new(Held { raw: CntrMember::new(Arc::clone(&self.inner.ops)), _keep: Arc::clone(&self.inner) })
    }
}

impl SetMember for EventQueue {
    fn member_id(&self) -> u64 {
        self.id()
    }
    fn waitable(&self) -> Arc<dyn Waitable> {
        Arc::new(Held { raw: EqMember(Arc::clone(&self.inner.ops)), _keep: self.clone() })
    }
}

/// A wait set (`fid_wait`): one blocking wait over several completion queues,
/// counters and event queues, of any domains and providers.
///
/// [`WaitSet::wait`] returns when a member has something to read: a queue with
/// a completion, an event or an error entry, or a counter whose counts changed
/// since the set last reported it (each change once). It drives the progress of
/// every member's endpoints while it waits, as a queue's own `sread` does:
/// busy-polling briefly, then sleeping on the members' descriptors with
/// `trywait`-style arming, so no wake-up is lost and an idle waiter uses no CPU.
/// It does not say which member is ready: read them (a [`PollSet`] over the same
/// members tells). Members must have a wait object (not opened with
/// `WaitObj::None`). The set holds a handle on each member until it is removed.
///
/// # Example
///
/// One thread serving two endpoints, each with its own queue:
///
/// ```no_run
/// use fabric::{Buf, CqAttr, FiAddr, WaitSet};
/// use std::time::Duration;
/// # fn main() -> fabric::Result<()> {
/// # let info = fabric::getinfo(&fabric::Hints::new())?.remove(0);
/// # let domain = fabric::Fabric::open(&info)?.domain(&info)?;
/// let (cq_a, cq_b) = (domain.cq(CqAttr::default())?, domain.cq(CqAttr::default())?);
/// // ... endpoints bound to cq_a and cq_b, receives posted ...
/// let set = WaitSet::new()?;
/// set.add(&cq_a)?;
/// set.add(&cq_b)?;
/// loop {
///     match set.wait(Some(Duration::from_secs(1))) {
///         Ok(()) => {
///             for cq in [&cq_a, &cq_b] {
///                 while let Ok(c) = cq.read_one() {
///                     println!("context {} done", c.context);
///                 }
///             }
///         }
///         Err(fabric::Error::WaitTimedOut) => break,
///         Err(e) => return Err(e),
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct WaitSet {
    set: Set,
}

impl fmt::Debug for WaitSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitSet").field("set", &self.set).finish()
    }
}

impl WaitSet {
    /// An empty wait set.
    pub fn new() -> Result<WaitSet> {
        Ok(WaitSet { set: Set::wait_set()? })
    }

    /// Add a completion queue, counter or event queue. Adding one again does
    /// nothing. `Err(NoSys)` for a queue without a wait object. A counter's
    /// counts at this moment are the ones a change is measured from.
    pub fn add<M: SetMember>(&self, member: &M) -> Result<()> {
        if self.set.contains(member.member_id()) {
            return Ok(());
        }
        self.set.add(member.waitable(), member.member_id())
    }

    /// Remove a member; `Err(NoEnt)` if it is not one.
    pub fn remove<M: SetMember>(&self, member: &M) -> Result<()> {
        self.set.remove(member.member_id())
    }

    /// Members in the set.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Wait up to `timeout` (`None`: forever) until a member has something to
    /// read, driving the members' progress meanwhile. `Ok` then,
    /// `Err(WaitTimedOut)` when the time is up (`fi_wait`'s `FI_ETIMEDOUT`). An
    /// empty set just sleeps until the time-out (members added meanwhile count
    /// within 100 ms).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        match self.set.wait(timeout) {
            Err(Error::TimedOut) => Err(Error::WaitTimedOut),
            r => r,
        }
    }

    /// A descriptor that becomes readable when a member may have something
    /// (for the application's own `poll`/`epoll`; `FI_GETWAIT`). Call
    /// [`WaitSet::trywait`] before each block on it. Open the members' queues
    /// with `WaitObj::Fd` for this use: a provider may wake a descriptor only
    /// for those, or during [`WaitSet::wait`] (shm's peers write it only when
    /// told that someone sleeps on it).
    pub fn fd(&self) -> RawFd {
        // A wait set always has its epoll descriptor.
        self.set.fd().unwrap_or(-1)
    }

    /// Prepare to block on [`WaitSet::fd`] (`fi_trywait`): `Ok` when the
    /// application may block on it now, `Err(Again)` when a member has
    /// something to read already (read it, then try again).
    pub fn trywait(&self) -> Result<()> {
        self.set.trywait()
    }
}

/// A poll set (`fid_poll`): which of several completion queues, counters and
/// event queues have something to read, in one call that drives the progress of
/// them all.
///
/// Each member is added with a context value of the application's choosing;
/// [`PollSet::poll`] returns the contexts of the members with a completion, an
/// event or an error entry, and of the counters whose counts changed since the
/// set last reported them (each change once). Successive polls start at
/// different members, so a member that always has entries does not hide the
/// others from a caller who asks for one context at a time. The set holds a
/// handle on each member until it is removed.
///
/// # Example
///
/// ```no_run
/// use fabric::{CqAttr, PollSet};
/// # fn main() -> fabric::Result<()> {
/// # let info = fabric::getinfo(&fabric::Hints::new())?.remove(0);
/// # let domain = fabric::Fabric::open(&info)?.domain(&info)?;
/// let (tx, rx) = (domain.cq(CqAttr::default())?, domain.cq(CqAttr::default())?);
/// let set = PollSet::new();
/// set.add(&tx, 0)?;
/// set.add(&rx, 1)?;
/// let mut ready = [0u64; 2];
/// let n = set.poll(&mut ready)?;
/// for &which in &ready[..n] {
///     let cq = if which == 0 { &tx } else { &rx };
///     while let Ok(c) = cq.read_one() {
///         println!("{which}: context {}", c.context);
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct PollSet {
    set: Set,
}

impl fmt::Debug for PollSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollSet").field("set", &self.set).finish()
    }
}

impl Default for PollSet {
    fn default() -> Self {
        PollSet::new()
    }
}

impl PollSet {
    /// An empty poll set.
    pub fn new() -> PollSet {
        PollSet { set: Set::poll_set() }
    }

    /// Add a completion queue, counter or event queue, reported as `context`.
    /// Adding one again changes its context. A counter's counts at this moment
    /// are the ones a change is measured from.
    pub fn add<M: SetMember>(&self, member: &M, context: u64) -> Result<()> {
        // A member already there keeps its counter checkpoint: only its
        // context changes.
        self.set.add(member.waitable(), context)
    }

    /// Remove a member; `Err(NoEnt)` if it is not one.
    pub fn remove<M: SetMember>(&self, member: &M) -> Result<()> {
        self.set.remove(member.member_id())
    }

    /// Members in the set.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Drive the members' progress and write the contexts of those with
    /// something to read into `out`, up to its length; how many were written
    /// (0: none). An error of a member is returned only when no member had
    /// something.
    pub fn poll(&self, out: &mut [u64]) -> Result<usize> {
        self.set.poll(out)
    }
}

//! Event queues: connection management events.

use crate::fabric::Fabric;
use fabric_core::prov::EqOps;
use fabric_core::{EqAttr, EqErrEntry, EqEvent, Error, Result};
use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct EqInner {
    pub(crate) ops: Arc<dyn EqOps>,
    _fabric: Fabric,
}

/// An event queue (`fid_eq`): connection requests, established connections,
/// shutdowns, and errors of connections. Cloning gives another handle on the same
/// queue.
#[derive(Clone)]
pub struct EventQueue {
    pub(crate) inner: Arc<EqInner>,
}

impl fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue").field("fid", &self.inner.ops.fid()).finish()
    }
}

impl EventQueue {
    pub(crate) fn open(fabric: &Fabric, attr: EqAttr) -> Result<EventQueue> {
        let ops = fabric.inner.ops.eq_open(&attr)?;
        Ok(EventQueue { inner: Arc::new(EqInner { ops, _fabric: fabric.clone() }) })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// Read one event. `Err(Again)` when none, `Err(Avail)` when an error entry is
    /// at the head (read it with [`EventQueue::readerr`]).
    pub fn read(&self) -> Result<EqEvent> {
        self.inner.ops.read()
    }

    /// Look at the next event without removing it (`FI_PEEK`).
    pub fn peek(&self) -> Result<EqEvent> {
        self.inner.ops.peek()
    }

    /// Wait up to `timeout` (`None`: forever) for an event. `Err(WaitTimedOut)`
    /// on time-out (libfabric's `fi_eq_sread` says `FI_EAGAIN` then, as the C ABI
    /// does), `Err(Again)` when [`EventQueue::signal`] ended the wait.
    pub fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        match self.inner.ops.sread(timeout) {
            Err(Error::Again) if deadline.is_some_and(|d| Instant::now() >= d) => Err(Error::WaitTimedOut),
            r => r,
        }
    }

    /// Read one error entry. `Err(Again)` when none.
    pub fn readerr(&self) -> Result<EqErrEntry> {
        self.inner.ops.readerr()
    }

    /// A file descriptor readable when the queue may have events.
    pub fn wait_fd(&self) -> Result<RawFd> {
        self.inner.ops.wait_fd()
    }

    /// Prepare to block on [`EventQueue::wait_fd`] (`fi_trywait`): `Ok` when
    /// the application may block on it now, `Err(Again)` when events are there
    /// already (read them, then try again).
    pub fn trywait(&self) -> Result<()> {
        self.inner.ops.trywait()
    }

    /// Wake a thread blocked in [`EventQueue::sread`].
    pub fn signal(&self) {
        self.inner.ops.signal()
    }

    /// Queue an event of the application's own (`fi_eq_write`): `event` (such
    /// as libfabric's `FI_NOTIFY`, 0) and a copy of `data`, after everything
    /// queued so far. A read returns it as [`EqEvent::User`], wakes a blocked
    /// [`EventQueue::sread`] like any event. `Err(NoSys)` if the provider's
    /// queues take no application events.
    pub fn write(&self, event: u32, data: &[u8]) -> Result<()> {
        self.inner.ops.write(EqEvent::User { event, data: data.to_vec() })
    }
}

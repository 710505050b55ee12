//! Counters: completion counting without entries.

use crate::domain::Domain;
use fabric_core::prov::CntrOps;
use fabric_core::{Error, Result};
use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct CntrInner {
    pub(crate) ops: Arc<dyn CntrOps>,
    _domain: Domain,
}

/// A counter (`fid_cntr`): counts completed operations (and errors) of the
/// endpoints it is bound to. Counting does not replace completions: with the safe
/// API, buffers still come back through the completion queue. Cloning gives
/// another handle on the same counter.
#[derive(Clone)]
pub struct Counter {
    pub(crate) inner: Arc<CntrInner>,
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter").field("fid", &self.inner.ops.fid()).finish()
    }
}

impl Counter {
    pub(crate) fn open(domain: &Domain) -> Result<Counter> {
        let ops = domain.inner.ops.cntr_open()?;
        Ok(Counter { inner: Arc::new(CntrInner { ops, _domain: domain.clone() }) })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// Successful completions counted (making progress first).
    pub fn read(&self) -> u64 {
        self.inner.ops.read()
    }

    /// Errors counted.
    pub fn readerr(&self) -> u64 {
        self.inner.ops.readerr()
    }

    /// Add to the success count.
    pub fn add(&self, n: u64) {
        self.inner.ops.add(n)
    }

    /// Set the success count.
    pub fn set(&self, n: u64) {
        self.inner.ops.set(n)
    }

    /// Add to the error count.
    pub fn adderr(&self, n: u64) {
        self.inner.ops.adderr(n)
    }

    /// Set the error count.
    pub fn seterr(&self, n: u64) {
        self.inner.ops.seterr(n)
    }

    /// A file descriptor that becomes readable when the counts may have
    /// changed, once [`Counter::trywait`] or [`Counter::begin_sleep`] said `Ok`
    /// (for the application's own `poll`/`epoll`). `Err(NoSys)` for a counter
    /// without one.
    pub fn wait_fd(&self) -> Result<RawFd> {
        self.inner.ops.wait_fd()
    }

    /// Prepare to block on [`Counter::wait_fd`] (`fi_trywait`): drives
    /// progress and arms the descriptor. A counter does not know which count
    /// its waiter waits for, so `Ok` once armed: read the counts once more
    /// before blocking.
    pub fn trywait(&self) -> Result<()> {
        self.inner.ops.trywait()
    }

    /// Wait until the count reaches `threshold`; `Err(WaitTimedOut)` after
    /// `timeout` (`None`: forever; libfabric's `fi_cntr_wait` says
    /// `FI_ETIMEDOUT` then, as the C ABI does), `Err(Avail)` if the error count
    /// changes meanwhile.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        match self.inner.ops.wait(threshold, timeout) {
            Err(Error::TimedOut) => Err(Error::WaitTimedOut),
            r => r,
        }
    }
}

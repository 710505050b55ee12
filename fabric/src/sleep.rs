//! Sleeping on a queue's descriptor in the application's own event loop.

use crate::cntr::Counter;
use crate::cq::CompletionQueue;
use crate::eq::EventQueue;
use fabric_core::prov::{CntrOps, CqOps, EqOps};
use fabric_core::Result;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// The object whose sleep a [`Sleep`] ends.
enum Sleeper {
    Cq(Arc<dyn CqOps>),
    Eq(Arc<dyn EqOps>),
    Cntr(Arc<dyn CntrOps>),
}

/// A sleep on a queue's or counter's wait descriptor, announced by
/// [`CompletionQueue::begin_sleep`], [`EventQueue::begin_sleep`] or
/// [`Counter::begin_sleep`], and ended when this value drops.
///
/// Between the announcement and the drop, whatever would make the object have
/// something to read makes its descriptor readable (as during the object's own
/// blocking wait: peers that skip wake-ups while nobody sleeps are told that
/// someone does). [`Sleep::wake_by`] is the time by which progress has work even
/// if nothing arrives (a retransmission or acknowledgement timer): sleep no
/// longer, then read the object (which drives that work) and sleep again.
///
/// This is libfabric's `fi_trywait` protocol for a waiter that sleeps in an
/// event loop of its own (epoll, an async runtime): read until the object is
/// empty, announce the sleep (it answers `Err(Again)` when something arrived
/// meanwhile: read again), sleep on the descriptor until readable or
/// [`Sleep::wake_by`], drop the `Sleep`, and read again.
#[must_use = "the sleep ends when the value drops"]
pub struct Sleep {
    of: Sleeper,
    wake_by: Option<Instant>,
}

impl Sleep {
    /// The time by which progress has work even if nothing arrives, if any.
    pub fn wake_by(&self) -> Option<Instant> {
        self.wake_by
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        match &self.of {
            Sleeper::Cq(o) => o.wait_end(),
            Sleeper::Eq(o) => o.wait_end(),
            Sleeper::Cntr(o) => o.wait_end(),
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fid = match &self.of {
            Sleeper::Cq(o) => o.fid(),
            Sleeper::Eq(o) => o.fid(),
            Sleeper::Cntr(o) => o.fid(),
        };
        f.debug_struct("Sleep").field("fid", &fid).field("wake_by", &self.wake_by).finish()
    }
}

impl CompletionQueue {
    /// Announce a sleep on [`CompletionQueue::wait_fd`] (see [`Sleep`]): drives
    /// progress, then `Err(Again)` when completions are there already (read
    /// them first), `Err(NoSys)` for a queue opened without `WaitObj::Fd`, else
    /// the [`Sleep`], which ends the sleep when dropped. Like
    /// [`CompletionQueue::trywait`], and in addition it tells the provider's
    /// transports that someone sleeps and gives the time of the next timer.
    pub fn begin_sleep(&self) -> Result<Sleep> {
        let ops = &self.inner.ops;
        if self.inner.has_pending() {
            return Err(fabric_core::Error::Again);
        }
        let wake_by = ops.wait_begin()?;
        Ok(Sleep { of: Sleeper::Cq(Arc::clone(ops)), wake_by })
    }
}

impl EventQueue {
    /// Announce a sleep on [`EventQueue::wait_fd`], as
    /// [`CompletionQueue::begin_sleep`]: `Err(Again)` when events are there
    /// already.
    pub fn begin_sleep(&self) -> Result<Sleep> {
        let ops = &self.inner.ops;
        let wake_by = ops.wait_begin()?;
        Ok(Sleep { of: Sleeper::Eq(Arc::clone(ops)), wake_by })
    }
}

impl Counter {
    /// Announce a sleep on [`Counter::wait_fd`], as
    /// [`CompletionQueue::begin_sleep`]. A counter does not know which count
    /// its waiter waits for: read the counts once more after this and before
    /// sleeping.
    pub fn begin_sleep(&self) -> Result<Sleep> {
        let ops = &self.inner.ops;
        let wake_by = ops.wait_begin()?;
        Ok(Sleep { of: Sleeper::Cntr(Arc::clone(ops)), wake_by })
    }
}

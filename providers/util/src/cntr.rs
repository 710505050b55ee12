//! Completion counters shared by the providers (libfabric's `util_cntr`).
//!
//! A [`UtilCntr`] counts successful and failed completions in two atomics, with
//! no entries. Reads drive the progress of the objects bound to it, and
//! [`CntrOps::wait`] blocks until the success count reaches a threshold, as
//! `fi_cntr_wait` does.

use crate::progress::{Progress, Waiter};
use fabric_core::prov::{next_fid, CntrOps};
use fabric_core::{Error, Result};
use std::any::Any;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A completion counter: a success count and an error count, with blocking waits
/// that drive the progress of the objects bound to it.
///
/// Providers count with [`UtilCntr::inc`] and [`UtilCntr::inc_err`]; the
/// application reads and waits through [`CntrOps`].
pub struct UtilCntr {
    fid: u64,
    // Sequentially consistent: an update must be visible to a waiter that
    // announced its sleep before `Waiter::notify` looks for sleepers.
    count: AtomicU64,
    errors: AtomicU64,
    waiter: Waiter,
}

impl UtilCntr {
    /// Open a counter, both counts zero.
    pub fn new() -> Result<Arc<UtilCntr>> {
        Ok(Arc::new(UtilCntr {
            fid: next_fid(),
            count: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            waiter: Waiter::new()?,
        }))
    }

    /// Count one successful completion and wake a waiter, if any.
    pub fn inc(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// Count one failed completion and wake a waiter, if any.
    pub fn inc_err(&self) {
        self.errors.fetch_add(1, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// Bind an object whose progress reads and waits on this counter drive.
    pub fn bind(&self, obj: Weak<dyn Progress>) -> Result<()> {
        self.waiter.bind(obj)
    }

    /// Unbind an object bound with [`UtilCntr::bind`].
    pub fn unbind(&self, obj: &Arc<dyn Progress>) {
        self.waiter.unbind(obj)
    }

    /// The counter's waiter (its epoll set and bound objects).
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }
}

impl fmt::Debug for UtilCntr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UtilCntr")
            .field("fid", &self.fid)
            .field("count", &self.count.load(Ordering::Relaxed))
            .field("errors", &self.errors.load(Ordering::Relaxed))
            .finish()
    }
}

impl CntrOps for UtilCntr {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// Drive progress of the bound objects, then return the success count.
    fn read(&self) -> u64 {
        self.waiter.progress();
        self.count.load(Ordering::SeqCst)
    }

    /// Drive progress of the bound objects, then return the error count.
    fn readerr(&self) -> u64 {
        self.waiter.progress();
        self.errors.load(Ordering::SeqCst)
    }

    /// Add to the success count (wrapping) and wake a waiter, if any.
    fn add(&self, n: u64) {
        self.count.fetch_add(n, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// Set the success count and wake a waiter, if any.
    fn set(&self, n: u64) {
        self.count.store(n, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// Add to the error count (wrapping) and wake a waiter, if any.
    fn adderr(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// Set the error count and wake a waiter, if any.
    fn seterr(&self, n: u64) {
        self.errors.store(n, Ordering::SeqCst);
        self.waiter.notify();
    }

    /// The waiter's epoll descriptor: readable when the counts may have changed
    /// (after `trywait` or `wait_begin`).
    fn wait_fd(&self) -> Result<RawFd> {
        Ok(self.waiter.fd())
    }

    /// Progress, then arm the bound objects' descriptors. Always `Ok` once
    /// armed: the caller compares the counts with those it knows.
    fn trywait(&self) -> Result<()> {
        self.waiter.trywait(|| false)
    }

    /// Announce a wait set's sleep on the counter's descriptor to the bound
    /// objects (as `wait` announces its own).
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.waiter.sleep_begin(|| false)
    }

    /// End the sleep announced by `wait_begin`.
    fn wait_end(&self) {
        self.waiter.sleep_end()
    }

    /// Wait up to `timeout` (`None`: forever) until the success count is at least
    /// `threshold`, busy-polling briefly and then sleeping on the bound objects'
    /// descriptors. `Err(Avail)` if the error count changes during the wait (read
    /// it with `readerr`), `Err(TimedOut)` on time-out.
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        let errors_at_start = self.errors.load(Ordering::SeqCst);
        // `Waiter::wait` drives progress before each call.
        let r = self.waiter.wait(timeout, || {
            if self.count.load(Ordering::SeqCst) >= threshold {
                Some(Ok(()))
            } else if self.errors.load(Ordering::SeqCst) != errors_at_start {
                Some(Err(Error::Avail))
            } else {
                None
            }
        });
        match r {
            Ok(r) => r,
            Err(Error::Again) => Err(Error::TimedOut),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn counts_and_setters() {
        let c = UtilCntr::new().unwrap();
        assert_ne!(c.fid(), 0);
        assert!(c.as_any().downcast_ref::<UtilCntr>().is_some());
        assert_eq!((c.read(), c.readerr()), (0, 0));
        c.inc();
        c.inc();
        c.inc_err();
        assert_eq!((c.read(), c.readerr()), (2, 1));
        c.add(5);
        c.adderr(2);
        assert_eq!((c.read(), c.readerr()), (7, 3));
        c.set(1);
        c.seterr(0);
        assert_eq!((c.read(), c.readerr()), (1, 0));
    }

    #[test]
    fn wait_already_reached() {
        let c = UtilCntr::new().unwrap();
        c.add(3);
        assert_eq!(c.wait(3, Some(Duration::ZERO)), Ok(()));
        assert_eq!(c.wait(0, None), Ok(()));
    }

    #[test]
    fn wait_times_out() {
        let c = UtilCntr::new().unwrap();
        let start = Instant::now();
        assert_eq!(c.wait(1, Some(Duration::from_millis(50))), Err(Error::TimedOut));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50), "returned after {took:?}");
    }

    #[test]
    fn wait_reaches_threshold_from_another_thread() {
        let c = UtilCntr::new().unwrap();
        let c2 = c.clone();
        let h = std::thread::spawn(move || c2.wait(3, Some(Duration::from_secs(10))));
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(20));
            c.inc();
        }
        assert_eq!(h.join().unwrap(), Ok(()));
        assert_eq!(c.read(), 3);
    }

    #[test]
    fn wait_sees_error_count_change() {
        let c = UtilCntr::new().unwrap();
        c.inc_err(); // Errors before the wait do not end it.
        let c2 = c.clone();
        let h = std::thread::spawn(move || c2.wait(10, Some(Duration::from_secs(10))));
        std::thread::sleep(Duration::from_millis(50));
        c.inc();
        c.inc_err();
        assert_eq!(h.join().unwrap(), Err(Error::Avail));
        assert_eq!((c.read(), c.readerr()), (1, 2));
    }

    /// An endpoint stand-in: each progress call completes one operation.
    struct Completer {
        cntr: Weak<UtilCntr>,
        calls: AtomicUsize,
    }

    impl Progress for Completer {
        fn progress(&self) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(c) = self.cntr.upgrade() {
                c.inc();
            }
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn read_and_wait_drive_bound_progress() {
        let c = UtilCntr::new().unwrap();
        let p = Arc::new(Completer { cntr: Arc::downgrade(&c), calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = p.clone();
        c.bind(Arc::downgrade(&d)).unwrap();
        assert_eq!(c.read(), 1);
        assert_eq!(c.wait(5, Some(Duration::from_secs(10))), Ok(()));
        assert!(c.read() >= 5);
        c.unbind(&d);
        let n = c.read();
        assert_eq!(c.read(), n, "unbound: no more progress");
    }
}

//! Event queue storage shared by the providers (libfabric's `util_eq`).
//!
//! A [`UtilEq`] holds control events (connection requests, established and shut
//! down connections) and error events in one FIFO, in the order the provider
//! pushed them. [`EqOps::read`] returns `Err(Avail)` when an error event is at the
//! head, and [`EqOps::readerr`] pops it, as `fi_eq_read` / `fi_eq_readerr` do.
//!
//! Control events are rare and carry owned data (an `Info`, connection data), so
//! the queue is sized for the expected number of events but grows past it
//! rather than lose one: a lost connection request or shutdown would hang the
//! application waiting for it.

use crate::progress::{Progress, Waiter};
use fabric_core::prov::{next_fid, EqOps};
use fabric_core::{EqAttr, EqErrEntry, EqEvent, Error, Result, WaitObj};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Events a queue is sized for when the attributes ask for the provider's
/// default (0).
pub const DEFAULT_EQ_SIZE: usize = 256;

/// One queued item: an event or an error event.
enum Slot {
    Event(EqEvent),
    Error(EqErrEntry),
}

/// An event queue: a FIFO of control events and error events, with blocking
/// reads that drive the progress of the objects bound to it.
///
/// Providers push with [`UtilEq::push`] and [`UtilEq::push_err`] (usually from
/// inside [`Progress::progress`], called by the queue's own reads); the
/// application reads through [`EqOps`].
pub struct UtilEq {
    fid: u64,
    wait_obj: WaitObj,
    queue: Mutex<VecDeque<Slot>>,
    waiter: Waiter,
}

impl UtilEq {
    /// Open an event queue. A `size` of 0 means [`DEFAULT_EQ_SIZE`]; the size is
    /// reserved up front and the queue grows past it rather than drop an event.
    /// `Err(NoMem)` if the storage cannot be allocated.
    pub fn new(attr: &EqAttr) -> Result<Arc<UtilEq>> {
        let size = if attr.size == 0 { DEFAULT_EQ_SIZE } else { attr.size };
        let mut queue = VecDeque::new();
        queue.try_reserve_exact(size).map_err(|_| Error::NoMem)?;
        Ok(Arc::new(UtilEq {
            fid: next_fid(),
            wait_obj: attr.wait_obj,
            queue: Mutex::new(queue),
            waiter: Waiter::new()?,
        }))
    }

    /// Queue an event and wake a sleeping reader, if any.
    pub fn push(&self, e: EqEvent) {
        self.lock().push_back(Slot::Event(e));
        self.waiter.notify();
    }

    /// Queue an error event after everything pushed so far, and wake a sleeping
    /// reader, if any.
    pub fn push_err(&self, e: EqErrEntry) {
        self.lock().push_back(Slot::Error(e));
        self.waiter.notify();
    }

    /// Bind an object whose progress reads and waits on this queue drive.
    pub fn bind(&self, obj: Weak<dyn Progress>) -> Result<()> {
        self.waiter.bind(obj)
    }

    /// Unbind an object bound with [`UtilEq::bind`].
    pub fn unbind(&self, obj: &Arc<dyn Progress>) {
        self.waiter.unbind(obj)
    }

    /// The queue's waiter (its epoll set and bound objects).
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Slot>> {
        // Every mutation is a single push or pop, so a poisoned lock still guards
        // a consistent queue.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pop the event at the head: `Err(Avail)` for an error, `Err(Again)` if empty.
    fn pop_event(&self) -> Result<EqEvent> {
        let mut q = self.lock();
        match q.front() {
            None => Err(Error::Again),
            Some(Slot::Error(_)) => Err(Error::Avail),
            Some(Slot::Event(_)) => match q.pop_front() {
                Some(Slot::Event(e)) => Ok(e),
                // Unreachable: the head was just seen to be an event, under the lock.
                _ => Err(Error::Again),
            },
        }
    }

    fn blocking_allowed(&self) -> Result<()> {
        if self.wait_obj == WaitObj::None {
            Err(Error::NoSys)
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for UtilEq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UtilEq")
            .field("fid", &self.fid)
            .field("wait_obj", &self.wait_obj)
            .field("queued", &self.lock().len())
            .finish()
    }
}

impl EqOps for UtilEq {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// Drive progress of the bound objects, then pop the event at the head.
    /// `Err(Again)` when there is none, `Err(Avail)` when an error event is at the
    /// head (read it with `readerr`).
    fn read(&self) -> Result<EqEvent> {
        // No lock held here: progress pushes into this queue.
        self.waiter.progress();
        self.pop_event()
    }

    /// Like `read`, but leave the event in the queue (`FI_PEEK`).
    fn peek(&self) -> Result<EqEvent> {
        self.waiter.progress();
        match self.lock().front() {
            None => Err(Error::Again),
            Some(Slot::Error(_)) => Err(Error::Avail),
            Some(Slot::Event(e)) => Ok(e.clone()),
        }
    }

    /// Pop the error event at the head. `Err(Again)` when the head is not an
    /// error (or the queue is empty).
    fn readerr(&self) -> Result<EqErrEntry> {
        let mut q = self.lock();
        if !matches!(q.front(), Some(Slot::Error(_))) {
            return Err(Error::Again);
        }
        match q.pop_front() {
            Some(Slot::Error(e)) => Ok(e),
            // Unreachable: the head was just seen to be an error, under the lock.
            _ => Err(Error::Again),
        }
    }

    /// Like `read`, but wait up to `timeout` (`None`: forever) for an event:
    /// busy-poll briefly, then sleep on the bound objects' descriptors.
    /// `Err(Again)` on time-out or when [`EqOps::signal`] ends the wait,
    /// `Err(Avail)` when an error event is at the head, `Err(NoSys)` for a queue
    /// opened with `WaitObj::None`.
    fn sread(&self, timeout: Option<Duration>) -> Result<EqEvent> {
        self.blocking_allowed()?;
        // `Waiter::wait` drives progress before each call, without the lock.
        self.waiter.wait_take(timeout, || self.pop_event())
    }

    /// The waiter's epoll descriptor: readable when the queue may have events.
    /// `Err(NoSys)` for a queue opened with `WaitObj::None`.
    fn wait_fd(&self) -> Result<RawFd> {
        self.blocking_allowed()?;
        Ok(self.waiter.fd())
    }

    /// Progress, then arm the bound objects' descriptors unless events are
    /// queued (`Err(Again)`). `Err(NoSys)` for a queue opened with
    /// `WaitObj::None`.
    fn trywait(&self) -> Result<()> {
        self.blocking_allowed()?;
        self.waiter.trywait(|| !self.lock().is_empty())
    }

    /// Announce a wait set's sleep on the queue's descriptor to the bound
    /// objects, unless events are queued (`Err(Again)`). `Err(NoSys)` for a
    /// queue opened with `WaitObj::None`.
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.blocking_allowed()?;
        self.waiter.sleep_begin(|| !self.lock().is_empty())
    }

    /// End the sleep announced by `wait_begin`.
    fn wait_end(&self) {
        self.waiter.sleep_end()
    }

    /// Wake a thread blocked in `sread`, which returns `Err(Again)` unless an
    /// event arrived. A signal with no one waiting ends the next `sread` that
    /// finds the queue empty.
    fn signal(&self) {
        self.waiter.interrupt();
    }

    /// Queue the application's event like a provider's (`fi_eq_write`).
    fn write(&self, event: EqEvent) -> Result<()> {
        self.push(event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn eq() -> Arc<UtilEq> {
        UtilEq::new(&EqAttr::default()).unwrap()
    }

    fn connected(fid: u64) -> EqEvent {
        EqEvent::Connected { fid, data: vec![fid as u8] }
    }

    fn refused(fid: u64) -> EqErrEntry {
        EqErrEntry { fid, err: Error::ConnRefused, prov_errno: 0, data: b"no".to_vec() }
    }

    fn fid_of(r: Result<EqEvent>) -> Result<u64> {
        r.map(|e| e.fid())
    }

    #[test]
    fn empty_queue() {
        let q = eq();
        assert_eq!(fid_of(q.read()), Err(Error::Again));
        assert_eq!(fid_of(q.peek()), Err(Error::Again));
        assert_eq!(q.readerr(), Err(Error::Again));
        assert_ne!(q.fid(), 0);
        assert!(q.as_any().downcast_ref::<UtilEq>().is_some());
        assert!(q.wait_fd().is_ok());
    }

    #[test]
    fn events_and_errors_keep_push_order() {
        let q = eq();
        q.push(connected(1));
        q.push_err(refused(2));
        q.push(EqEvent::Shutdown { fid: 3 });
        q.push_err(refused(4));

        assert_eq!(q.readerr(), Err(Error::Again), "head is an event");
        assert_eq!(fid_of(q.peek()), Ok(1));
        assert_eq!(fid_of(q.peek()), Ok(1), "peek does not remove");
        match q.read() {
            Ok(EqEvent::Connected { fid: 1, data }) => assert_eq!(data, [1]),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(fid_of(q.read()), Err(Error::Avail));
        assert_eq!(fid_of(q.peek()), Err(Error::Avail));
        assert_eq!(fid_of(q.read()), Err(Error::Avail), "Avail until the error is read");
        assert_eq!(q.readerr(), Ok(refused(2)));
        assert_eq!(q.read().map(|e| e.name()), Ok("FI_SHUTDOWN"));
        assert_eq!(q.readerr().map(|e| e.fid), Ok(4));
        assert_eq!(fid_of(q.read()), Err(Error::Again));
    }

    #[test]
    fn grows_past_size_without_loss() {
        let q = UtilEq::new(&EqAttr { size: 2, ..Default::default() }).unwrap();
        for i in 0..10 {
            q.push(connected(i));
        }
        for i in 0..10 {
            assert_eq!(fid_of(q.read()), Ok(i));
        }
        assert_eq!(fid_of(q.read()), Err(Error::Again));
    }

    #[test]
    fn sread_times_out_with_again() {
        let q = eq();
        let start = Instant::now();
        assert_eq!(fid_of(q.sread(Some(Duration::from_millis(50)))), Err(Error::Again));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50), "returned after {took:?}");
    }

    #[test]
    fn sread_needs_a_wait_object() {
        let q = UtilEq::new(&EqAttr { wait_obj: WaitObj::None, ..Default::default() }).unwrap();
        assert_eq!(fid_of(q.sread(Some(Duration::ZERO))), Err(Error::NoSys));
        assert_eq!(q.wait_fd(), Err(Error::NoSys));
        q.push(connected(1));
        assert_eq!(fid_of(q.read()), Ok(1));
    }

    #[test]
    fn sread_woken_by_push_from_another_thread() {
        let q = eq();
        let q2 = q.clone();
        let h = std::thread::spawn(move || fid_of(q2.sread(Some(Duration::from_secs(10)))));
        std::thread::sleep(Duration::from_millis(50));
        q.push(connected(7));
        assert_eq!(h.join().unwrap(), Ok(7));
    }

    #[test]
    fn sread_reports_an_error_at_head() {
        let q = eq();
        let q2 = q.clone();
        let h = std::thread::spawn(move || fid_of(q2.sread(Some(Duration::from_secs(10)))));
        std::thread::sleep(Duration::from_millis(50));
        q.push_err(refused(9));
        assert_eq!(h.join().unwrap(), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.fid), Ok(9));
    }

    #[test]
    fn signal_unblocks_sread() {
        let q = eq();
        let q2 = q.clone();
        let h = std::thread::spawn(move || {
            let start = Instant::now();
            (fid_of(q2.sread(None)), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        q.signal();
        let (r, took) = h.join().unwrap();
        assert_eq!(r, Err(Error::Again));
        assert!(took < Duration::from_secs(5));
        // Consumed: the next sread waits (and times out) again.
        assert_eq!(fid_of(q.sread(Some(Duration::from_millis(10)))), Err(Error::Again));
    }

    #[test]
    fn written_events_keep_their_bytes_and_order() {
        let q = eq();
        q.push(connected(1));
        q.write(EqEvent::User { event: 0, data: b"note".to_vec() }).unwrap();
        assert_eq!(fid_of(q.read()), Ok(1));
        match q.peek() {
            Ok(EqEvent::User { event: 0, data }) => assert_eq!(data, b"note"),
            other => panic!("unexpected {other:?}"),
        }
        match q.read() {
            Ok(e @ EqEvent::User { .. }) => assert_eq!((e.name(), e.fid()), ("FI_NOTIFY", 0)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(fid_of(q.read()), Err(Error::Again));
    }

    /// A passive endpoint stand-in: its first progress call accepts a request.
    struct Listener {
        eq: Weak<UtilEq>,
        calls: AtomicUsize,
    }

    impl Progress for Listener {
        fn progress(&self) {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                if let Some(eq) = self.eq.upgrade() {
                    eq.push(EqEvent::Shutdown { fid: 77 });
                }
            }
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn read_drives_bound_progress() {
        let q = eq();
        let l = Arc::new(Listener { eq: Arc::downgrade(&q), calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = l.clone();
        q.bind(Arc::downgrade(&d)).unwrap();
        assert_eq!(fid_of(q.peek()), Ok(77));
        assert_eq!(fid_of(q.read()), Ok(77));
        assert_eq!(fid_of(q.read()), Err(Error::Again));
        assert!(l.calls.load(Ordering::SeqCst) >= 3);
        q.unbind(&d);
        let calls = l.calls.load(Ordering::SeqCst);
        assert_eq!(fid_of(q.read()), Err(Error::Again));
        assert_eq!(l.calls.load(Ordering::SeqCst), calls);
    }
}

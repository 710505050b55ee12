//! Completion queue storage shared by the providers (libfabric's `util_cq`).
//!
//! A [`UtilCq`] keeps a pre-sized ring of successful completions and a small queue
//! of error completions, and reports them in the order the provider pushed them:
//! [`CqOps::read`] returns successes from the head until it meets an error, and
//! then `Err(Avail)` so the application calls [`CqOps::readerr`], exactly as
//! `fi_cq_read` / `fi_cq_readerr` behave.
//!
//! Each error remembers how many successes had been pushed before it (its
//! position in the success stream), so the successes stay in a dense ring of
//! plain `CqEntry` values that `read` copies out without looking at each one.
//!
//! # Overrun
//!
//! The queue never drops a completion: losing one would leave the application
//! waiting forever for an operation that finished. When a push finds `size`
//! entries already queued, the entry is kept anyway (the storage grows, which
//! allocates) and an error entry with `err: Error::Overrun` is inserted just
//! before it, at the point where the overrun happened. The application learns
//! from it, once per overrun, that it sized the queue too small, reads the error
//! with `readerr`, and then keeps reading the entries that follow. A new overrun
//! is reported only after the queue has had room again.

use crate::progress::{Progress, Waiter};
use fabric_core::prov::{next_fid, CqOps};
use fabric_core::sync::{SpinGuard, SpinLock};
use fabric_core::{Caps, CqAttr, CqEntry, CqErrEntry, Error, Result, WaitObj};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Entries a queue holds when the attributes ask for the provider's default (0).
pub const DEFAULT_CQ_SIZE: usize = 1024;

/// How many reads in a row may return completions already queued without
/// driving the bound objects' progress first.
pub const MAX_READS_WITHOUT_PROGRESS: usize = 8;

/// Error entries reserved up front (at most the queue's size): errors are rare,
/// but a flush on close may produce a burst of them without allocating.
const ERR_RESERVE: usize = 64;

/// The error entry that marks an overrun.
fn overrun_entry() -> CqErrEntry {
    CqErrEntry {
        entry: CqEntry::new(fabric_core::prov::NO_CONTEXT, Caps::empty()),
        olen: 0,
        err: Error::Overrun,
        prov_errno: 0,
    }
}

/// The queue proper, under the lock.
struct Queue {
    /// Successful completions: the `i`-th success pushed is in slot `i & mask`
    /// while `popped <= i < pushed`. The length is a power of two, at least the
    /// queue's size; it doubles (once per doubling of an overrun) when full.
    slots: Vec<CqEntry>,
    /// `slots.len() - 1`.
    mask: usize,
    /// Error completions, oldest first, each with its position: the number of
    /// successes pushed before it (on the `pushed` scale).
    errs: VecDeque<(u64, CqErrEntry)>,
    /// Successes ever pushed.
    pushed: u64,
    /// Successes ever popped; `pushed - popped` are queued.
    popped: u64,
    /// An overrun has been recorded and the queue has not had room since.
    overrun: bool,
    /// The queue's size while no overrun is recorded, 0 while one is: a push
    /// below it (`len < limit`) is in the fast path, with one compare.
    limit: usize,
    /// Entries queued, successes and errors: `pushed - popped + errs.len()`,
    /// kept as one word so a push checks the size with one compare.
    len: usize,
}

impl Queue {
    /// The ring slot of the `n`-th success pushed (`n` on the `pushed` scale),
    /// without a bounds check: `n & mask` is always inside the ring.
    #[inline(always)]
    fn at(&self, n: u64) -> &CqEntry {
        debug_assert_eq!(self.slots.len(), self.mask + 1);
        // SAFETY: `slots.len()` is a power of two and `mask` is `slots.len() - 1`
        // (set together in `UtilCq::new` and `Queue::grow`, and nowhere else),
        // so `n & mask < slots.len()`.
        unsafe { self.slots.get_unchecked(n as usize & self.mask) }
    }

    /// [`Queue::at`], to write the slot.
    #[inline(always)]
    fn at_mut(&mut self, n: u64) -> &mut CqEntry {
        debug_assert_eq!(self.slots.len(), self.mask + 1);
        let i = n as usize & self.mask;
        // SAFETY: as in `at`: `i = n & mask < slots.len()`.
        unsafe { self.slots.get_unchecked_mut(i) }
    }

    /// Successes queued.
    #[inline]
    fn succ_len(&self) -> usize {
        (self.pushed - self.popped) as usize
    }

    /// Successes that may be read before the head error (all of them if none).
    fn readable(&self) -> usize {
        match self.errs.front() {
            // The head error's position is never behind `popped`: successes before
            // it are only popped up to it. Saturate anyway rather than trust it.
            Some(&(pos, _)) => usize::try_from(pos.saturating_sub(self.popped)).unwrap_or(usize::MAX),
            None => self.succ_len(),
        }
    }

    /// Whether the next thing to read is an error.
    fn error_at_head(&self) -> bool {
        self.errs.front().is_some_and(|&(pos, _)| pos <= self.popped)
    }

    /// Append a success. Within the queue's `size` (the usual case), that is a
    /// store into the ring and two counts; the rest is [`Queue::push_full`].
    #[inline(always)]
    fn push_succ(&mut self, size: usize, e: CqEntry) {
        // `len < limit` means `len < size <= slots.len()` and no overrun
        // recorded: the ring has room, and there is no overrun to end.
        if self.len >= self.limit {
            self.push_full(size);
        }
        *self.at_mut(self.pushed) = e;
        self.pushed += 1;
        self.len += 1;
    }

    /// [`Queue::push_succ`] past the fast path: an overrun recorded, or the end
    /// of one (the queue has room again), and the ring grown if full.
    #[cold]
    #[inline(never)]
    fn push_full(&mut self, size: usize) {
        self.check_overrun(size);
        if self.succ_len() == self.slots.len() {
            self.grow();
        }
    }

    /// Double the ring (an overrun filled it), keeping each queued success at
    /// the slot its index masks to.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let len = self.slots.len() * 2;
        let mut slots = vec![placeholder(); len];
        for i in self.popped..self.pushed {
            slots[i as usize & (len - 1)] = self.slots[i as usize & self.mask];
        }
        self.slots = slots;
        self.mask = len - 1;
    }

    /// Move the `n` oldest successes (queued) into `out[..n]`: one (the usual
    /// read) inline, more in a loop out of line.
    #[inline]
    fn pop_into(&mut self, out: &mut [CqEntry], n: usize) {
        if n == 1 {
            if let Some(dst) = out.first_mut() {
                *dst = *self.at(self.popped);
            }
            self.popped += 1;
        } else {
            self.pop_many(out, n);
        }
    }

    /// [`Queue::pop_into`] of more than one entry.
    #[inline(never)]
    fn pop_many(&mut self, out: &mut [CqEntry], n: usize) {
        let from = self.popped as usize;
        for (i, dst) in out[..n].iter_mut().enumerate() {
            *dst = self.slots[(from + i) & self.mask];
        }
        self.popped += n as u64;
    }

    /// Copy successes into `out`: `Err(Avail)` when an error is at the head and
    /// nothing was copied, `Err(Again)` when the queue is empty.
    #[inline]
    fn copy_out(&mut self, out: &mut [CqEntry]) -> Result<usize> {
        // The usual case: no error queued, so every entry is a readable success.
        if self.errs.is_empty() {
            match (self.len, out.len()) {
                (0, _) => return Err(Error::Again),
                (_, 0) => {}
                (1, _) | (_, 1) => {
                    self.pop_into(out, 1);
                    self.len -= 1;
                    return Ok(1);
                }
                (len, room) => {
                    let n = len.min(room);
                    self.pop_into(out, n);
                    self.len -= n;
                    return Ok(n);
                }
            }
        }
        self.copy_out_slow(out)
    }

    /// Take the oldest success, as [`Queue::copy_out`] into room for one:
    /// `Err(Avail)` when an error is at the head, `Err(Again)` when the queue
    /// is empty. Not `with_one(|e| *e)`: the entry returned through the
    /// closure's `Result` compiled to more copying (62 instructions more per
    /// 64 B shm round trip through the Rust API, `benches/instr.sh`).
    #[inline]
    fn pop_one(&mut self) -> Result<CqEntry> {
        if self.errs.is_empty() {
            if self.len == 0 {
                return Err(Error::Again);
            }
            let e = *self.at(self.popped);
            self.popped += 1;
            self.len -= 1;
            return Ok(e);
        }
        self.pop_one_slow()
    }

    /// Take the oldest success, as [`Queue::copy_out`] into room for one, handing
    /// the entry to `f` where it lies in the ring rather than copying it out:
    /// `Err(Avail)` when an error is at the head, `Err(Again)` when the queue is
    /// empty (and `f` is not called).
    #[inline(always)]
    fn with_one<T>(&mut self, f: impl FnOnce(&CqEntry) -> T) -> Result<T> {
        if self.errs.is_empty() {
            if self.len == 0 {
                return Err(Error::Again);
            }
            let r = f(self.at(self.popped));
            self.popped += 1;
            self.len -= 1;
            return Ok(r);
        }
        self.pop_one_slow().map(|e| f(&e))
    }

    /// [`Queue::with_one`] with errors queued.
    #[cold]
    #[inline(never)]
    fn pop_one_slow(&mut self) -> Result<CqEntry> {
        let mut out = [placeholder()];
        match self.copy_out_slow(&mut out)? {
            0 => Err(Error::Again),
            _ => Ok(out[0]),
        }
    }

    /// [`Queue::copy_out`] with errors queued (or no room in `out`).
    #[cold]
    #[inline(never)]
    fn copy_out_slow(&mut self, out: &mut [CqEntry]) -> Result<usize> {
        let n = self.readable().min(self.succ_len()).min(out.len());
        if n == 0 {
            return if self.error_at_head() {
                Err(Error::Avail)
            } else if self.succ_len() == 0 {
                Err(Error::Again)
            } else {
                // Entries are waiting but `out` has no room for them.
                Ok(0)
            };
        }
        self.pop_into(out, n);
        self.len -= n;
        Ok(n)
    }

    /// Record an overrun if this push finds the queue full (see the module docs).
    #[inline]
    fn check_overrun(&mut self, size: usize) {
        if self.len < size {
            self.overrun = false;
            self.limit = size;
        } else {
            self.record_overrun();
        }
    }

    /// The queue is full: insert the overrun marker, unless it is already there.
    #[cold]
    #[inline(never)]
    fn record_overrun(&mut self) {
        if !self.overrun {
            self.overrun = true;
            self.limit = 0;
            self.errs.push_back((self.pushed, overrun_entry()));
            self.len += 1;
        }
    }
}

/// What an unused slot of the ring holds.
fn placeholder() -> CqEntry {
    CqEntry::new(0, Caps::empty())
}

/// A completion queue: a pre-sized FIFO of completions and error completions,
/// with blocking reads that drive the progress of the objects bound to it.
///
/// Providers push entries with [`UtilCq::push`] and [`UtilCq::push_err`] (usually
/// from inside [`Progress::progress`], called by the queue's own reads); the
/// application reads them through [`CqOps`].
pub struct UtilCq {
    fid: u64,
    /// Capacity before an overrun is reported.
    size: usize,
    wait_obj: WaitObj,
    queue: SpinLock<Queue>,
    /// Entries in `queue` (successes and errors), stored under its lock after every
    /// change: a read that finds zero returns at once without taking the lock.
    /// A push racing with that read is seen by the next one.
    entries: AtomicUsize,
    /// Reads in a row that found completions queued and so returned them
    /// without driving progress (see [`CqOps::read`]).
    reads_without_progress: AtomicUsize,
    waiter: Waiter,
}

impl UtilCq {
    /// Open a completion queue. A `size` of 0 means [`DEFAULT_CQ_SIZE`]. The storage
    /// is allocated here, so reads and pushes within the size do not allocate.
    /// `Err(NoMem)` if the storage cannot be allocated.
    pub fn new(attr: &CqAttr) -> Result<Arc<UtilCq>> {
        let size = if attr.size == 0 { DEFAULT_CQ_SIZE } else { attr.size };
        let len = size.checked_next_power_of_two().ok_or(Error::NoMem)?;
        let mut slots = Vec::new();
        slots.try_reserve_exact(len).map_err(|_| Error::NoMem)?;
        slots.resize(len, placeholder());
        let mut errs = VecDeque::new();
        errs.try_reserve_exact(size.min(ERR_RESERVE)).map_err(|_| Error::NoMem)?;
        Ok(Arc::new(UtilCq {
            fid: next_fid(),
            size,
            wait_obj: attr.wait_obj,
            queue: SpinLock::new(Queue {
                slots,
                mask: len - 1,
                errs,
                pushed: 0,
                popped: 0,
                overrun: false,
                limit: size,
                len: 0,
            }),
            entries: AtomicUsize::new(0),
            reads_without_progress: AtomicUsize::new(0),
            waiter: Waiter::new()?,
        }))
    }

    /// Queue a successful completion and wake a sleeping reader, if any. Never
    /// drops the entry: past `size` entries, an overrun is recorded instead (see
    /// the module docs). Inlined, so that the entry's fields are stored
    /// straight into the ring's slot rather than built and copied there.
    #[inline(always)]
    pub fn push(&self, e: CqEntry) {
        {
            let mut q = self.lock();
            q.push_succ(self.size, e);
            self.publish(&q);
        }
        self.waiter.notify();
    }

    /// Queue an error completion after everything pushed so far, and wake a
    /// sleeping reader, if any. Counts toward `size` like a success.
    pub fn push_err(&self, e: CqErrEntry) {
        {
            let mut q = self.lock();
            q.check_overrun(self.size);
            let pos = q.pushed;
            q.errs.push_back((pos, e));
            q.len += 1;
            self.publish(&q);
        }
        self.waiter.notify();
    }

    /// Bind an object whose progress reads and waits on this queue drive.
    pub fn bind(&self, obj: Weak<dyn Progress>) -> Result<()> {
        self.waiter.bind(obj)
    }

    /// Bind an object and hold it until it is unbound ([`Waiter::bind_owned`]):
    /// reads drive its progress without upgrading a `Weak`. Its close must
    /// call [`UtilCq::unbind_addr`] (an endpoint holds its queues, so the two
    /// would keep each other alive).
    pub fn bind_owned(&self, obj: Arc<dyn Progress>) -> Result<()> {
        self.waiter.bind_owned(obj)
    }

    /// Unbind an object bound with [`UtilCq::bind`] or [`UtilCq::bind_owned`].
    pub fn unbind(&self, obj: &Arc<dyn Progress>) {
        self.waiter.unbind(obj)
    }

    /// Unbind the object at `addr`, whose wait descriptor is `fd`
    /// ([`Waiter::unbind_addr`]): what an endpoint's close calls with itself.
    pub fn unbind_addr(&self, addr: *const (), fd: Option<RawFd>) {
        self.waiter.unbind_addr(addr, fd)
    }

    /// The wait object the queue was opened with.
    pub fn wait_obj(&self) -> WaitObj {
        self.wait_obj
    }

    /// The queue's waiter (its epoll set and bound objects).
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// Record how many entries the queue holds (called with its lock held).
    #[inline]
    fn publish(&self, q: &Queue) {
        debug_assert_eq!(q.len, q.succ_len() + q.errs.len(), "the entry count drifted");
        self.entries.store(q.len, Ordering::Release);
    }

    /// Copy out under the lock, unless the queue is known empty.
    #[inline]
    fn take(&self, out: &mut [CqEntry]) -> Result<usize> {
        if self.entries.load(Ordering::Acquire) == 0 {
            return Err(Error::Again);
        }
        let mut q = self.lock();
        let r = q.copy_out(out);
        self.publish(&q);
        r
    }

    /// [`CqOps::read`] of a queue found empty, or after too many reads without
    /// progress: drive the bound objects' progress, then take what is queued.
    /// Out of line, so that a read of completions already queued saves no
    /// registers for the call.
    #[inline(never)]
    fn progress_and_take(&self, out: &mut [CqEntry]) -> Result<usize> {
        self.drive_progress();
        self.take(out)
    }

    /// [`CqOps::read`] of a queue with completions queued: copy them out under
    /// the lock. Out of line like [`UtilCq::progress_and_take`], so that the
    /// read itself is a check and a tail call either way.
    #[inline(never)]
    fn take_queued(&self, out: &mut [CqEntry]) -> Result<usize> {
        let mut q = self.lock();
        let r = q.copy_out(out);
        self.publish(&q);
        r
    }

    /// [`UtilCq::progress_and_take`] of one entry ([`CqOps::read_one`]).
    #[inline(never)]
    fn progress_and_take_one(&self) -> Result<CqEntry> {
        self.drive_progress();
        if self.entries.load(Ordering::Acquire) == 0 {
            return Err(Error::Again);
        }
        // Inline: this function's frame is set up already.
        self.pop_one_locked()
    }

    /// [`CqOps::read_one`] of a queue known to be this type (no dynamic call),
    /// with the same progress rule, handing the entry to `f` in place under the
    /// queue's lock rather than returning a copy: a C ABI read writes the
    /// caller's entry straight from the ring. `f` runs under the lock, so it
    /// must not touch this queue (nor take a lock that is held around a push
    /// into it); it is not called on `Err`.
    #[inline(always)]
    pub fn read_one_with<T>(&self, f: impl FnOnce(&CqEntry) -> T) -> Result<T> {
        if self.progress_due() {
            self.progress_for_read();
            if self.entries.load(Ordering::Acquire) == 0 {
                return Err(Error::Again);
            }
        }
        self.with_one_locked(f)
    }

    /// The progress of a read, inline in the read (a call only into the bound
    /// objects' progress): out of line, its own frame and register saves cost
    /// more than the pop after it gained from a smaller read (shm 64 B, Rust
    /// API: 9 instructions per call).
    #[inline(always)]
    fn progress_for_read(&self) {
        self.drive_progress();
    }

    /// The rule of every read: whether it drives progress first. It does when
    /// the queue is empty, or after [`MAX_READS_WITHOUT_PROGRESS`] reads in a row
    /// that did not; otherwise the read is counted as one that did not.
    #[inline(always)]
    fn progress_due(&self) -> bool {
        let skipped = self.reads_without_progress.load(Ordering::Relaxed);
        if self.entries.load(Ordering::Acquire) == 0 || skipped >= MAX_READS_WITHOUT_PROGRESS {
            return true;
        }
        // Racing readers may lose a count: progress then comes a read later.
        self.reads_without_progress.store(skipped + 1, Ordering::Relaxed);
        false
    }

    /// Drive the bound objects' progress for a read, restarting the count of
    /// reads without it.
    #[inline(always)]
    fn drive_progress(&self) {
        self.reads_without_progress.store(0, Ordering::Relaxed);
        // No lock held here: progress pushes into this queue.
        self.waiter.progress();
    }

    /// Pop one entry under the lock ([`Queue::pop_one`]).
    #[inline(always)]
    fn pop_one_locked(&self) -> Result<CqEntry> {
        let mut q = self.lock();
        let r = q.pop_one();
        self.publish(&q);
        r
    }

    /// Take one entry under the lock ([`Queue::with_one`]).
    #[inline(always)]
    fn with_one_locked<T>(&self, f: impl FnOnce(&CqEntry) -> T) -> Result<T> {
        let mut q = self.lock();
        let r = q.with_one(f);
        self.publish(&q);
        r
    }

    #[inline]
    fn lock(&self) -> SpinGuard<'_, Queue> {
        // The queue's invariants hold between statements that could panic.
        self.queue.lock()
    }

    fn blocking_allowed(&self) -> Result<()> {
        if self.wait_obj == WaitObj::None {
            Err(Error::NoSys)
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for UtilCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.lock();
        f.debug_struct("UtilCq")
            .field("fid", &self.fid)
            .field("size", &self.size)
            .field("wait_obj", &self.wait_obj)
            .field("completions", &q.succ_len())
            .field("errors", &q.errs.len())
            .finish()
    }
}

impl CqOps for UtilCq {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// Drive progress of the bound objects, then copy completions from the head
    /// until `out` is full, the queue is empty, or an error entry is next.
    /// `Err(Again)` when there is nothing, `Err(Avail)` when an error entry is at
    /// the head (read it with `readerr`). With an empty `out`, `Ok(0)` says that
    /// completions are waiting.
    ///
    /// A read that finds completions already queued returns them without
    /// driving progress first, up to [`MAX_READS_WITHOUT_PROGRESS`] reads in a
    /// row: progress still runs at least that often while the application keeps
    /// reading, and always once the queue is empty.
    fn read(&self, out: &mut [CqEntry]) -> Result<usize> {
        if self.progress_due() {
            return self.progress_and_take(out);
        }
        self.take_queued(out)
    }

    /// [`CqOps::read`] of one entry, returned: the same progress rule. The
    /// pop of an entry already queued is inline here (unlike `read`'s
    /// [`UtilCq::take_queued`]): it needs few registers, so the progress path,
    /// a call out of line, pays little for it.
    fn read_one(&self) -> Result<CqEntry> {
        if self.progress_due() {
            return self.progress_and_take_one();
        }
        self.pop_one_locked()
    }

    /// Pop the error entry at the head. `Err(Again)` when the head is not an error
    /// (or the queue is empty).
    fn readerr(&self) -> Result<CqErrEntry> {
        let mut q = self.lock();
        if !q.error_at_head() {
            return Err(Error::Again);
        }
        let e = q.errs.pop_front().map(|(_, e)| e).ok_or(Error::Again);
        if e.is_ok() {
            q.len -= 1;
        }
        self.publish(&q);
        e
    }

    /// Like `read`, but wait up to `timeout` (`None`: forever) for completions:
    /// busy-poll briefly, then sleep on the bound objects' descriptors.
    /// `Err(Again)` on time-out or when [`CqOps::signal`] ends the wait,
    /// `Err(Avail)` when an error entry is at the head, `Err(NoSys)` for a queue
    /// opened with `WaitObj::None`.
    fn sread(&self, out: &mut [CqEntry], timeout: Option<Duration>) -> Result<usize> {
        self.blocking_allowed()?;
        // `Waiter::wait` drives progress before each call, without the lock.
        self.waiter.wait_take(timeout, || self.take(out))
    }

    /// The waiter's epoll descriptor: readable when the queue may have entries.
    /// `Err(NoSys)` for a queue opened with `WaitObj::None`.
    fn wait_fd(&self) -> Result<RawFd> {
        self.blocking_allowed()?;
        Ok(self.waiter.fd())
    }

    /// Progress, then arm the bound objects' descriptors unless completions are
    /// queued (`Err(Again)`). `Err(NoSys)` for a queue opened with `WaitObj::None`.
    fn trywait(&self) -> Result<()> {
        self.blocking_allowed()?;
        self.waiter.trywait(|| self.entries.load(Ordering::Acquire) > 0)
    }

    /// Announce a wait set's sleep on the queue's descriptor to the bound
    /// objects (as `sread` announces its own), unless completions are queued
    /// (`Err(Again)`). `Err(NoSys)` for a queue opened with `WaitObj::None`.
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.blocking_allowed()?;
        self.waiter.sleep_begin(|| self.entries.load(Ordering::Acquire) > 0)
    }

    /// End the sleep announced by `wait_begin`.
    fn wait_end(&self) {
        self.waiter.sleep_end()
    }

    /// Wake a thread blocked in `sread`, which returns `Err(Again)` unless
    /// completions arrived. As with `fi_cq_signal`, a signal with no one waiting
    /// ends the next `sread` that finds the queue empty.
    fn signal(&self) {
        self.waiter.interrupt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    fn cq(size: usize) -> Arc<UtilCq> {
        UtilCq::new(&CqAttr { size, ..Default::default() }).unwrap()
    }

    fn ok(ctx: u64) -> CqEntry {
        CqEntry::new(ctx, Caps::RECV)
    }

    fn err(ctx: u64, e: Error) -> CqErrEntry {
        CqErrEntry { entry: ok(ctx), olen: 0, err: e, prov_errno: 0 }
    }

    fn empty() -> [CqEntry; 16] {
        [ok(0); 16]
    }

    #[test]
    fn default_size_and_empty_read() {
        let q = cq(0);
        assert_eq!(q.size, DEFAULT_CQ_SIZE);
        let mut out = empty();
        assert_eq!(q.read(&mut out), Err(Error::Again));
        assert_eq!(q.readerr(), Err(Error::Again));
        assert_ne!(q.fid(), 0);
        assert!(q.as_any().downcast_ref::<UtilCq>().is_some());
    }

    #[test]
    fn successes_and_errors_keep_push_order() {
        let q = cq(16);
        q.push(ok(1));
        q.push(ok(2));
        q.push_err(err(3, Error::Trunc));
        q.push(ok(4));
        q.push_err(err(5, Error::Canceled));
        q.push_err(err(6, Error::Canceled));
        q.push(ok(7));

        let mut out = empty();
        // Successes up to the first error; the error is not skipped.
        assert_eq!(q.read(&mut out), Ok(2));
        assert_eq!((out[0].op_context, out[1].op_context), (1, 2));
        assert_eq!(q.read(&mut out), Err(Error::Avail));
        assert_eq!(q.read(&mut out), Err(Error::Avail), "Avail until the error is read");
        assert_eq!(q.readerr().map(|e| (e.entry.op_context, e.err)), Ok((3, Error::Trunc)));
        // Next is a success: readerr has nothing at the head.
        assert_eq!(q.readerr(), Err(Error::Again));
        assert_eq!(q.read(&mut out), Ok(1));
        assert_eq!(out[0].op_context, 4);
        assert_eq!(q.read(&mut out), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.entry.op_context), Ok(5));
        assert_eq!(q.read(&mut out), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.entry.op_context), Ok(6));
        assert_eq!(q.read(&mut out), Ok(1));
        assert_eq!(out[0].op_context, 7);
        assert_eq!(q.read(&mut out), Err(Error::Again));
    }

    #[test]
    fn read_one_keeps_push_order_and_stops_at_errors() {
        let q = cq(4);
        assert_eq!(q.read_one(), Err(Error::Again));
        q.push(ok(1));
        q.push_err(err(2, Error::Trunc));
        q.push(ok(3));
        assert_eq!(q.read_one().map(|e| e.op_context), Ok(1));
        assert_eq!(q.read_one(), Err(Error::Avail));
        assert_eq!(q.read_one(), Err(Error::Avail), "Avail until the error is read");
        assert_eq!(q.readerr().map(|e| e.entry.op_context), Ok(2));
        assert_eq!(q.read_one(), Ok(ok(3)));
        assert_eq!(q.read_one(), Err(Error::Again));
        // An overrun's marker comes where it happened; nothing is lost.
        for i in 0..6 {
            q.push(ok(10 + i));
        }
        for i in 0..4 {
            assert_eq!(q.read_one().map(|e| e.op_context), Ok(10 + i));
        }
        assert_eq!(q.read_one(), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun));
        assert_eq!(q.read_one().map(|e| e.op_context), Ok(14));
        assert_eq!(q.read_one().map(|e| e.op_context), Ok(15));
        assert_eq!(q.read_one(), Err(Error::Again));
    }

    #[test]
    fn read_one_drives_progress_like_read() {
        let q = cq(64);
        let p = Arc::new(Pusher { cq: Arc::downgrade(&q), per_call: 1, calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = p.clone();
        q.bind(Arc::downgrade(&d)).unwrap();
        // Empty: the read drives progress, which pushes the entry it returns.
        assert_eq!(q.read_one().map(|e| e.op_context), Ok(0));
        assert_eq!(p.calls.load(Ordering::SeqCst), 1);
        // A backlog read one at a time still drives progress regularly.
        for i in 0..32 {
            q.push(ok(1000 + i));
        }
        for _ in 0..32 {
            assert!(q.read_one().is_ok());
        }
        let calls = p.calls.load(Ordering::SeqCst);
        assert!(calls > 32 / (MAX_READS_WITHOUT_PROGRESS + 1), "progress ran only {calls} times");
    }

    #[test]
    fn read_one_with_is_read_one_in_place() {
        let q = cq(4);
        let mut seen = Vec::new();
        let mut take = |q: &UtilCq| q.read_one_with(|e| seen.push(e.op_context));
        assert_eq!(take(&q), Err(Error::Again));
        q.push(ok(1));
        q.push_err(err(2, Error::Trunc));
        q.push(ok(3));
        assert_eq!(take(&q), Ok(()));
        assert_eq!(take(&q), Err(Error::Avail), "an error at the head is not skipped");
        assert_eq!(q.readerr().map(|e| e.entry.op_context), Ok(2));
        assert_eq!(take(&q), Ok(()));
        assert_eq!(take(&q), Err(Error::Again));
        // Each entry reached the closure once, in push order; errors never did.
        assert_eq!(seen, [1, 3]);

        // An empty queue drives its bound objects' progress, and the entry that
        // progress pushed is the one read; a backlog still drives it regularly.
        let q = cq(64);
        let p = Arc::new(Pusher { cq: Arc::downgrade(&q), per_call: 1, calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = p.clone();
        q.bind(Arc::downgrade(&d)).unwrap();
        assert_eq!(q.read_one_with(|e| e.op_context), Ok(0));
        assert_eq!(p.calls.load(Ordering::SeqCst), 1);
        for i in 0..32 {
            q.push(ok(1000 + i));
        }
        for _ in 0..32 {
            assert!(q.read_one_with(|e| e.op_context).is_ok());
        }
        let calls = p.calls.load(Ordering::SeqCst);
        assert!(calls > 32 / (MAX_READS_WITHOUT_PROGRESS + 1), "progress ran only {calls} times");
    }

    #[test]
    fn read_stops_at_buffer_size() {
        let q = cq(16);
        for i in 0..5 {
            q.push(ok(i));
        }
        let mut out = [ok(99); 3];
        assert_eq!(q.read(&mut out), Ok(3));
        assert_eq!(q.read(&mut []), Ok(0), "waiting entries, no room");
        assert_eq!(q.read(&mut out), Ok(2));
        assert_eq!((out[0].op_context, out[1].op_context), (3, 4));
    }

    #[test]
    fn error_first_then_successes() {
        let q = cq(4);
        q.push_err(err(1, Error::Access));
        q.push(ok(2));
        let mut out = empty();
        assert_eq!(q.read(&mut out), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Access));
        assert_eq!(q.read(&mut out), Ok(1));
        assert_eq!(out[0].op_context, 2);
    }

    #[test]
    fn overrun_reported_once_and_nothing_lost() {
        let q = cq(4);
        for i in 0..10 {
            q.push(ok(i));
        }
        let mut out = empty();
        // The four that fit, then the overrun marker where the fifth was pushed.
        assert_eq!(q.read(&mut out), Ok(4));
        assert_eq!(out[..4].iter().map(|e| e.op_context).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(q.read(&mut out), Err(Error::Avail));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun));
        // Reported once: the rest follows in order.
        assert_eq!(q.read(&mut out), Ok(6));
        assert_eq!(out[..6].iter().map(|e| e.op_context).collect::<Vec<_>>(), [4, 5, 6, 7, 8, 9]);
        assert_eq!(q.read(&mut out), Err(Error::Again));
        assert_eq!(q.readerr(), Err(Error::Again));

        // After the queue had room again, a new overrun is a new report.
        for i in 0..6 {
            q.push(ok(i));
        }
        assert_eq!(q.read(&mut out), Ok(4));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun));
        assert_eq!(q.read(&mut out), Ok(2));
    }

    #[test]
    fn growing_a_wrapped_ring_keeps_the_order() {
        let q = cq(3);
        let mut out = empty();
        for i in 0..3 {
            q.push(ok(i));
            assert_eq!(q.read(&mut out), Ok(1));
        }
        for i in 0..7 {
            q.push(ok(100 + i));
        }
        assert_eq!(q.read(&mut out), Ok(3));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun));
        assert_eq!(q.read(&mut out[3..]), Ok(4));
        assert_eq!(out[..7].iter().map(|e| e.op_context).collect::<Vec<_>>(), (100..107).collect::<Vec<_>>());
        assert_eq!(q.read(&mut out), Err(Error::Again));
    }

    #[test]
    fn overrun_by_an_error_entry() {
        let q = cq(2);
        q.push(ok(1));
        q.push(ok(2));
        q.push_err(err(3, Error::Trunc));
        let mut out = empty();
        assert_eq!(q.read(&mut out), Ok(2));
        assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun));
        assert_eq!(q.readerr().map(|e| (e.entry.op_context, e.err)), Ok((3, Error::Trunc)));
        assert_eq!(q.read(&mut out), Err(Error::Again));
    }

    #[test]
    fn sread_times_out_with_again() {
        let q = cq(4);
        let mut out = empty();
        let start = Instant::now();
        assert_eq!(q.sread(&mut out, Some(Duration::from_millis(50))), Err(Error::Again));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50), "returned after {took:?}");
    }

    #[test]
    fn sread_needs_a_wait_object() {
        let q = UtilCq::new(&CqAttr { wait_obj: WaitObj::None, ..Default::default() }).unwrap();
        let mut out = empty();
        assert_eq!(q.sread(&mut out, Some(Duration::ZERO)), Err(Error::NoSys));
        assert_eq!(q.wait_fd(), Err(Error::NoSys));
        // Polling still works.
        q.push(ok(1));
        assert_eq!(q.read(&mut out), Ok(1));
        assert!(cq(1).wait_fd().is_ok());
    }

    #[test]
    fn sread_woken_by_push_from_another_thread() {
        let q = cq(4);
        let q2 = q.clone();
        let h = std::thread::spawn(move || {
            let mut out = empty();
            q2.sread(&mut out, Some(Duration::from_secs(10))).map(|n| (n, out[0].op_context))
        });
        std::thread::sleep(Duration::from_millis(50));
        q.push(ok(42));
        assert_eq!(h.join().unwrap(), Ok((1, 42)));
    }

    #[test]
    fn sread_reports_an_error_at_head() {
        let q = cq(4);
        q.push_err(err(1, Error::Canceled));
        let mut out = empty();
        assert_eq!(q.sread(&mut out, Some(Duration::from_secs(10))), Err(Error::Avail));
    }

    #[test]
    fn signal_unblocks_sread() {
        let q = cq(4);
        let q2 = q.clone();
        let h = std::thread::spawn(move || {
            let mut out = empty();
            let start = Instant::now();
            (q2.sread(&mut out, None), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        q.signal();
        let (r, took) = h.join().unwrap();
        assert_eq!(r, Err(Error::Again));
        assert!(took < Duration::from_secs(5));
        // The signal was consumed: the next sread waits again.
        let mut out = empty();
        assert_eq!(q.sread(&mut out, Some(Duration::from_millis(10))), Err(Error::Again));
        q.push(ok(1));
        assert_eq!(q.sread(&mut out, Some(Duration::from_millis(10))), Ok(1));
    }

    #[test]
    fn signal_does_not_hide_completions() {
        let q = cq(4);
        q.push(ok(1));
        q.signal();
        let mut out = empty();
        assert_eq!(q.sread(&mut out, None), Ok(1));
        // The pending signal ends the next wait that finds nothing.
        assert_eq!(q.sread(&mut out, None), Err(Error::Again));
    }

    /// An endpoint stand-in: each progress call completes `per_call` operations.
    struct Pusher {
        cq: Weak<UtilCq>,
        per_call: u64,
        calls: AtomicUsize,
    }

    impl Progress for Pusher {
        fn progress(&self) {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) as u64;
            if let Some(cq) = self.cq.upgrade() {
                for i in 0..self.per_call {
                    cq.push(ok(n * self.per_call + i));
                }
            }
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn read_drives_bound_progress() {
        let q = cq(8);
        let p = Arc::new(Pusher { cq: Arc::downgrade(&q), per_call: 2, calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = p.clone();
        q.bind(Arc::downgrade(&d)).unwrap();

        let mut out = empty();
        assert_eq!(q.read(&mut out), Ok(2));
        assert_eq!((out[0].op_context, out[1].op_context), (0, 1));
        assert_eq!(q.sread(&mut out, Some(Duration::from_secs(1))), Ok(2));
        assert_eq!((out[0].op_context, out[1].op_context), (2, 3));

        q.unbind(&d);
        let calls = p.calls.load(Ordering::SeqCst);
        assert_eq!(q.read(&mut out), Err(Error::Again));
        assert_eq!(p.calls.load(Ordering::SeqCst), calls, "unbound: no more progress");
    }

    /// An endpoint stand-in that holds its queue, as an endpoint's bindings do.
    struct Holder {
        /// Held only, as an endpoint's bindings hold its queue.
        _cq: Arc<UtilCq>,
        calls: AtomicUsize,
    }

    impl Progress for Holder {
        fn progress(&self) {
            self.calls.fetch_add(1, Ordering::SeqCst);
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn an_owned_binding_keeps_the_object_until_unbound_and_then_no_cycle_remains() {
        let q = cq(4);
        let h = Arc::new(Holder { _cq: q.clone(), calls: AtomicUsize::new(0) });
        let addr = Arc::as_ptr(&h) as *const ();
        let d: Arc<dyn Progress> = h.clone();
        q.bind_owned(d.clone()).unwrap();
        // Bound twice (transmit, then receive): still one object, progressed once a read.
        q.bind_owned(d).unwrap();
        let (weak_h, weak_q) = (Arc::downgrade(&h), Arc::downgrade(&q));
        drop(h);
        let mut out = empty();
        assert_eq!(q.read(&mut out), Err(Error::Again));
        let calls = weak_h.upgrade().expect("the queue holds the bound object").calls.load(Ordering::SeqCst);
        assert_eq!(calls, 1, "one progress call per read");
        // The object's close unbinds it (by address): it goes, and with it the
        // last reference it held to the queue once ours is dropped too.
        q.unbind_addr(addr, None);
        assert!(weak_h.upgrade().is_none(), "unbound: the object was dropped");
        assert_eq!(q.read(&mut out), Err(Error::Again));
        drop(q);
        assert!(weak_q.upgrade().is_none(), "no cycle keeps the queue alive");
        // A weak binding never kept anything alive.
        let q = cq(4);
        let h = Arc::new(Holder { _cq: q.clone(), calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = h.clone();
        q.bind(Arc::downgrade(&d)).unwrap();
        let weak_h = Arc::downgrade(&h);
        drop((h, d));
        assert!(weak_h.upgrade().is_none());
        assert_eq!(q.read(&mut out), Err(Error::Again), "a dead weak binding is skipped");
    }

    #[test]
    fn reads_of_queued_completions_still_drive_progress_regularly() {
        let q = cq(64);
        let p = Arc::new(Pusher { cq: Arc::downgrade(&q), per_call: 1, calls: AtomicUsize::new(0) });
        let d: Arc<dyn Progress> = p.clone();
        q.bind(Arc::downgrade(&d)).unwrap();
        // A backlog the application reads one entry at a time, never emptying it.
        for i in 0..32 {
            q.push(ok(1000 + i));
        }
        let mut out = empty();
        for _ in 0..32 {
            assert_eq!(q.read(&mut out[..1]), Ok(1));
        }
        let calls = p.calls.load(Ordering::SeqCst);
        assert!(calls >= 32 / (MAX_READS_WITHOUT_PROGRESS + 1), "progress ran only {calls} times");
        // An empty queue always drives progress.
        while q.entries.load(Ordering::SeqCst) > 0 {
            assert!(q.read(&mut out).is_ok());
        }
        let calls = p.calls.load(Ordering::SeqCst);
        assert_eq!(q.read(&mut out[..1]), Ok(1), "the read that found nothing queued drove progress");
        assert_eq!(p.calls.load(Ordering::SeqCst), calls + 1);
    }

    #[test]
    fn many_threads_push_nothing_lost() {
        let q = cq(64);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        q.push(ok(t * 1000 + i));
                    }
                })
            })
            .collect();
        let mut seen = vec![false; 4000];
        let mut out = empty();
        let mut got = 0;
        while got < 4000 {
            match q.sread(&mut out, Some(Duration::from_secs(10))) {
                Ok(n) => {
                    for e in &out[..n] {
                        assert!(!seen[e.op_context as usize]);
                        seen[e.op_context as usize] = true;
                    }
                    got += n;
                }
                Err(Error::Avail) => assert_eq!(q.readerr().map(|e| e.err), Ok(Error::Overrun)),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        for h in threads {
            h.join().unwrap();
        }
        assert_eq!(q.read(&mut out), Err(Error::Again));
    }
}

//! Completion queues: completions that give the operations' buffers back.

use crate::buf::{Buf, OpBuffers};
use crate::domain::Domain;
use crate::table::{Live, MultiRecvBuf, PendingRelease, RecBufs, Record, Table, TableGuard, TableLock};
use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_core::prov::CqOps;
use fabric_core::{Caps, CqAttr, CqEntry, CqErrEntry, CqFormat, Error, FiAddr, Result};
use fabric_util::cq::UtilCq;
use std::fmt;
use std::ops::Deref;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Entries read from the provider per call when reading in batches: a stack
/// array, so batch reads allocate nothing.
const CHUNK: usize = 16;

/// The shared state of a completion queue: the provider's queue and the table of
/// operations in flight whose completions it will carry.
pub(crate) struct CqInner {
    pub(crate) ops: Arc<dyn CqOps>,
    /// `ops` as a plain pointer, for the reads: a call through it does not
    /// locate the object inside the `Arc`'s allocation each time.
    prov: ProvCq,
    /// `ops` as the providers' shared queue type when it is one (null
    /// otherwise), which `fast` holds while nothing is pending: a read then
    /// pops the entry inline rather than through the vtable and a copy in
    /// memory.
    util: UtilPtr,
    table: TableLock,
    /// Whether `table.pending` may be non-empty: set under the table's lock after a
    /// push, cleared under it when a pop empties it, so a read with nothing
    /// pending skips the lock.
    has_pending: AtomicBool,
    /// `util` while nothing is pending (`has_pending` clear), null otherwise:
    /// set and cleared with `has_pending`, so that a read tests one value for
    /// its inline path.
    fast: AtomicPtr<UtilCq>,
    format: CqFormat,
    _domain: Domain,
}

/// A pointer to the provider's queue, owned by the `Arc` beside it in [`CqInner`].
struct ProvCq(*const dyn CqOps);

/// The provider's queue as a [`UtilCq`] (or null), owned by the `Arc` beside it
/// in [`CqInner`].
struct UtilPtr(*const UtilCq);

// SAFETY: the pointer is only turned into a `&UtilCq` (see `CqInner::fast`), and
// `UtilCq` is `Send + Sync` (it is a `dyn CqOps`), so sending or sharing it is as
// sending or sharing the `Arc<dyn CqOps>` it comes from.
unsafe impl Send for UtilPtr {}
// SAFETY: as for `Send`.
unsafe impl Sync for UtilPtr {}

// SAFETY: the pointer is only turned into a `&dyn CqOps` (see `CqInner::prov`),
// and `dyn CqOps` is `Send + Sync`, so sending or sharing it is as sending or
// sharing the `Arc<dyn CqOps>` it comes from.
unsafe impl Send for ProvCq {}
// SAFETY: as for `Send`.
unsafe impl Sync for ProvCq {}

impl CqInner {
    /// The provider's queue.
    #[inline(always)]
    fn prov(&self) -> &dyn CqOps {
        // SAFETY: `prov` points at the object `self.ops` owns, which lives as long
        // as `self` (the field is never replaced).
        unsafe { &*self.prov.0 }
    }

    /// The provider's queue as a [`UtilCq`], if it is one and no
    /// buffer-released completion is pending: a read's inline path.
    #[inline(always)]
    fn fast(&self) -> Option<&UtilCq> {
        let p = self.fast.load(Ordering::Acquire);
        // SAFETY: null or `util.0` (see `set_pending`), which points at the
        // object `self.ops` owns, alive as long as `self`.
        unsafe { p.as_ref() }
    }

    /// Record whether a buffer-released completion is pending (under the
    /// table's lock): `has_pending`, and `fast` null while it is set.
    fn set_pending(&self, pending: bool) {
        self.has_pending.store(pending, Ordering::Release);
        let fast = if pending { std::ptr::null_mut() } else { self.util.0.cast_mut() };
        self.fast.store(fast, Ordering::Release);
    }

    #[inline(always)]
    pub(crate) fn table(&self) -> TableGuard<'_> {
        self.table.lock()
    }

    #[cold]
    #[inline(never)]
    fn unknown(&self, ctx: u64, what: &str) {
        fi_log!(
            Level::Warn,
            "core",
            "cq",
            "cq {}: {} for unknown operation context {:#x} skipped (not posted through this queue)",
            self.ops.fid(),
            what,
            ctx
        );
    }

    /// Whether a buffer-released completion waits since a split (the next read
    /// returns it without asking the provider).
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        self.has_pending.load(Ordering::Acquire)
    }

    /// A buffer-released completion waiting since a split, if any (callers test
    /// [`CqInner::has_pending`] first).
    #[cold]
    #[inline(never)]
    fn take_pending(&self) -> Option<Completion> {
        let mut t = self.table();
        let p = t.pending.pop_front();
        if t.pending.is_empty() {
            self.set_pending(false);
        }
        drop(t);
        Some(release_completion(p?))
    }

    /// Turn a provider entry into a completion, taking the record out of the table
    /// (a multi-receive record stays until its buffer is released). `Err(Again)`
    /// for an unknown context (logged; the caller skips the entry). `split` is set
    /// when the entry both completed a message and released its multi-receive
    /// buffer: the release then waits in `pending` for the next read.
    ///
    /// A `Result` rather than an `Option`, so that `read_one` returns the
    /// completion where it was built rather than a copy.
    #[inline(always)]
    fn convert(&self, e: &CqEntry, split: &mut bool) -> Result<Completion> {
        let key = e.op_context;
        let mut t = self.table();
        let Some(i) = t.find(key) else {
            drop(t);
            self.unknown(key, "completion");
            return Err(Error::Again);
        };
        if let RecBufs::Multi(_) = t.at(&i).bufs {
            return self.convert_multi(t, i, e, split).ok_or(Error::Again);
        }
        let rec = t.take(i);
        drop(t);
        Ok(completion_of(rec, e))
    }

    /// The record of the provider entry `e`, out of the table, when it is the
    /// common case: a live record of the operation's own buffers. `None` for a
    /// multi-receive record or an unknown context (left for
    /// [`CqInner::convert_rare`]).
    #[inline(always)]
    fn take_own(&self, e: &CqEntry) -> Option<Record> {
        let mut t = self.table();
        match t.find(e.op_context) {
            Some(i) if !matches!(t.at(&i).bufs, RecBufs::Multi(_)) => Some(t.take(i)),
            _ => None,
        }
    }

    /// [`CompletionQueue::read_one`]'s conversion of an entry of a multi-receive
    /// buffer or of an unknown context (logged and skipped: the queue is read
    /// again).
    #[cold]
    #[inline(never)]
    fn convert_rare(&self, e: &CqEntry) -> Result<Completion> {
        match self.convert(e, &mut false) {
            Ok(c) => Ok(c),
            Err(_) => self.read_one_slow(),
        }
    }

    /// [`CompletionQueue::read_one`] when a buffer-released completion may be
    /// pending, after an entry of unknown context was skipped, or for a queue
    /// that is not the providers' shared [`UtilCq`] (read through the vtable).
    #[cold]
    #[inline(never)]
    fn read_one_slow(&self) -> Result<Completion> {
        if self.has_pending() {
            if let Some(c) = self.take_pending() {
                return Ok(c);
            }
        }
        let mut e = [CqEntry::new(0, Caps::empty())];
        loop {
            if self.prov().read(&mut e)? == 0 {
                return Err(Error::Again);
            }
            let c = self.convert(&e[0], &mut false);
            if c.is_ok() {
                return c;
            }
        }
    }

    /// [`CqInner::convert`] for a multi-receive record, in slot `i` of the locked
    /// table `t` (out of line and marked cold, which keeps the common path short:
    /// a multi-receive buffer's completions pay a call, not the others).
    #[cold]
    #[inline(never)]
    fn convert_multi(&self, mut t: TableGuard<'_>, i: Live, e: &CqEntry, split: &mut bool) -> Option<Completion> {
        let r = t.at(&i);
        let context = r.user_context;
        let RecBufs::Multi(shared) = &r.bufs else { unreachable!("a multi-receive record") };
        let shared = Arc::clone(shared);
        let mut c = Completion {
            context,
            flags: e.flags,
            len: e.len,
            data: e.data,
            tag: e.tag,
            src: e.src,
            buffers: OpBuffers::None,
            recv: None,
        };
        if !e.flags.contains(Caps::MULTI_RECV) {
            // One message: the record stays, the buffer stays the provider's
            // except for the bytes this completion reports.
            drop(t);
            c.recv = make_view(shared, e, self.ops.fid());
            return Some(c);
        }
        let rec = t.take(i);
        if e.len > 0 {
            // The last message and the release in one entry: deliver the
            // message now and the release at the next read, when the
            // application has had a chance to drop this message's view.
            t.pending.push_back(PendingRelease {
                context,
                flags: (e.flags & (Caps::RECV | Caps::MSG | Caps::TAGGED)) | Caps::MULTI_RECV,
                shared: Arc::clone(&shared),
            });
            self.set_pending(true);
            drop(t);
            drop(rec);
            c.flags.remove(Caps::MULTI_RECV);
            c.recv = make_view(shared, e, self.ops.fid());
            *split = true;
        } else {
            drop(t);
            drop(rec);
            c.buffers = unwrap_shared(shared);
        }
        Some(c)
    }

    /// Turn a provider error entry into an error completion; `None` for an unknown
    /// context (logged). An error entry ends its operation, except one about a single
    /// message of a multi-receive buffer (neither `MULTI_RECV` in its flags nor
    /// `FI_ECANCELED`), which leaves the buffer posted.
    fn convert_err(&self, e: &CqErrEntry) -> Option<CompletionError> {
        let key = e.entry.op_context;
        let mut ce = CompletionError {
            context: 0,
            flags: e.entry.flags,
            len: e.entry.len,
            olen: e.olen,
            err: e.err,
            prov_errno: e.prov_errno,
            data: e.entry.data,
            tag: e.entry.tag,
            src: e.entry.src,
            buffers: OpBuffers::None,
        };
        if key == fabric_core::prov::NO_CONTEXT {
            // An error about the queue itself (overrun): no operation, no buffers.
            return Some(ce);
        }
        let mut t = self.table();
        let Some(i) = t.find(key) else {
            drop(t);
            self.unknown(key, "error completion");
            return None;
        };
        let r = t.at(&i);
        ce.context = r.user_context;
        if matches!(r.bufs, RecBufs::Multi(_))
            && !(e.entry.flags.contains(Caps::MULTI_RECV) || e.err == Error::Canceled)
        {
            return Some(ce);
        }
        let rec = t.take(i);
        drop(t);
        ce.buffers = match rec.bufs {
            RecBufs::Multi(shared) => unwrap_shared(shared),
            RecBufs::Owned(bufs) => bufs,
            RecBufs::Recv(mut bufs) => {
                set_recv_len(&mut bufs, e.entry.len);
                bufs
            }
        };
        Some(ce)
    }
}

/// The completion of a record taken out of the table for the provider entry
/// `e`: its buffers given back (a receive's length set to what arrived).
#[inline(always)]
fn completion_of(rec: Record, e: &CqEntry) -> Completion {
    let buffers = match rec.bufs {
        RecBufs::Recv(mut bufs) => {
            set_recv_len(&mut bufs, e.len);
            bufs
        }
        RecBufs::Owned(bufs) => bufs,
        RecBufs::Multi(shared) => unwrap_shared(shared),
    };
    Completion {
        context: rec.user_context,
        flags: e.flags,
        len: e.len,
        data: e.data,
        tag: e.tag,
        src: e.src,
        buffers,
        recv: None,
    }
}

/// A single receive buffer's length becomes the bytes received; vectored receives
/// keep their lengths as posted.
#[inline]
fn set_recv_len(bufs: &mut OpBuffers, len: usize) {
    if let OpBuffers::One(b) = bufs {
        b.set_len_within(len);
    } else if let OpBuffers::Registered(r) = bufs {
        set_registered_len(r, len);
    }
}

/// [`set_recv_len`] of a registered buffer, out of the common path.
#[cold]
#[inline(never)]
fn set_registered_len(r: &mut crate::RegisteredBuf, len: usize) {
    r.buf_mut().set_len_within(len);
}

/// The buffer of a released multi-receive record, if no view of it is alive.
#[cold]
fn unwrap_shared(shared: Arc<MultiRecvBuf>) -> OpBuffers {
    match Arc::try_unwrap(shared) {
        Ok(m) => OpBuffers::One(m.buf),
        Err(_) => {
            fi_log!(
                Level::Debug,
                "core",
                "cq",
                "multi-receive buffer released while message views are alive: it is freed when they drop"
            );
            OpBuffers::None
        }
    }
}

fn release_completion(p: PendingRelease) -> Completion {
    Completion {
        context: p.context,
        flags: p.flags,
        len: 0,
        data: 0,
        tag: 0,
        src: FiAddr::NOTAVAIL,
        buffers: unwrap_shared(p.shared),
        recv: None,
    }
}

/// The view of one message of a multi-receive buffer, after checking that the
/// provider's `buf`/`len` lie inside the buffer.
fn make_view(shared: Arc<MultiRecvBuf>, e: &CqEntry, cq: u64) -> Option<RecvView> {
    if e.len == 0 {
        return Some(RecvView { shared, off: 0, len: 0 });
    }
    let base = shared.buf.raw_const_ptr() as usize;
    let cap = shared.buf.capacity();
    match e.buf.checked_sub(base) {
        Some(off) if off <= cap && e.len <= cap - off => Some(RecvView { shared, off, len: e.len }),
        _ => {
            fi_log!(
                Level::Warn,
                "core",
                "cq",
                "cq {}: multi-receive completion at {:#x}+{} outside its buffer {:#x}+{}: no view given",
                cq,
                e.buf,
                e.len,
                base,
                cap
            );
            None
        }
    }
}

/// A completion queue (`fid_cq`) and the owner of the operations in flight whose
/// completions it carries (see the crate docs, "Memory safety").
///
/// Reading a completion gives the operation's buffers back. Cloning gives another
/// handle on the same queue.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("fid", &self.inner.ops.fid())
            .field("format", &self.inner.format)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl CompletionQueue {
    pub(crate) fn open(domain: &Domain, attr: CqAttr) -> Result<CompletionQueue> {
        let ops = domain.inner.ops.cq_open(&attr)?;
        let size = if attr.size > 0 { attr.size } else { domain.info().tx_attr.size + domain.info().rx_attr.size };
        let table = TableLock::new(Table::new(size, ops.fid()));
        let util = ops.as_any().downcast_ref::<UtilCq>().map_or(std::ptr::null(), |u| u as *const UtilCq);
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                prov: ProvCq(Arc::as_ptr(&ops)),
                util: UtilPtr(util),
                ops,
                table,
                has_pending: AtomicBool::new(false),
                fast: AtomicPtr::new(util.cast_mut()),
                format: attr.format,
                _domain: domain.clone(),
            }),
        })
    }

    /// The provider's object id.
    pub fn id(&self) -> u64 {
        self.inner.ops.fid()
    }

    /// The entry format asked for at open. The safe API always delivers every
    /// field of [`Completion`]; the format only matters to the provider.
    pub fn format(&self) -> CqFormat {
        self.inner.format
    }

    /// Operations posted through this queue whose completions have not been read
    /// (counted by a walk over the queue's table: for diagnostics, not the data
    /// path).
    pub fn in_flight(&self) -> usize {
        self.inner.table().live()
    }

    /// Read one completion, making progress first. `Err(Again)` when there is none,
    /// `Err(Avail)` when an error completion is at the head (read it with
    /// [`CompletionQueue::readerr`], or use [`CompletionQueue::next`], which reads
    /// either).
    #[inline(always)]
    pub fn read_one(&self) -> Result<Completion> {
        self.read_with(|c| c)
    }

    /// [`CompletionQueue::read_one`], handing the completion to `f`: `f`'s
    /// result, or the read's error (and `f` is not called).
    ///
    /// Every path ends in one completion in registers, which `f` gets: the
    /// common path's is built there, the rare paths' are loaded from where their
    /// out-of-line calls returned them. Were a path's call to return into the
    /// caller's `Result` directly (as when each path returned its own), the
    /// common path's completion would be written to that memory and read back
    /// by a caller that takes it apart at once.
    #[inline(always)]
    fn read_with<R>(&self, f: impl FnOnce(Completion) -> R) -> Result<R> {
        let inner = &*self.inner;
        let c = match inner.fast() {
            // Popped inline (progress, when due, is a call that returns
            // nothing), so the entry's fields stay in registers.
            Some(u) => match u.read_one_with(|e| *e) {
                Ok(ref e) => match inner.take_own(e) {
                    Some(rec) => completion_of(rec, e),
                    None => {
                        // A copy to the out-of-line call, so that `e` itself
                        // need not live in memory.
                        let copy = *e;
                        inner.convert_rare(&copy)?
                    }
                },
                Err(e) => return Err(e),
            },
            _ => inner.read_one_slow()?,
        };
        Ok(f(c))
    }

    /// Read up to `max` completions, appending them to `out`; how many were
    /// appended. `Err(Again)` when there is none, `Err(Avail)` when an error
    /// completion is at the head. Allocates nothing when `out` has room for `max`
    /// more entries.
    ///
    /// A batch stops after a completion whose multi-receive buffer was released
    /// with its last message, so that the application can drop that message's
    /// [`RecvView`] before the next read gives the buffer back.
    pub fn read(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        let mut got = 0;
        while got < max {
            if self.inner.has_pending() {
                if let Some(c) = self.inner.take_pending() {
                    out.push(c);
                    got += 1;
                    continue;
                }
            }
            let mut entries = [CqEntry::new(0, Caps::empty()); CHUNK];
            let want = (max - got).min(CHUNK);
            let n = match self.inner.prov().read(&mut entries[..want]) {
                Ok(n) => n,
                Err(_) if got > 0 => break,
                Err(e) => return Err(e),
            };
            let mut split = false;
            for e in &entries[..n.min(want)] {
                if let Ok(c) = self.inner.convert(e, &mut split) {
                    out.push(c);
                    got += 1;
                }
            }
            if split || n < want {
                break;
            }
        }
        if got == 0 && max > 0 {
            return Err(Error::Again);
        }
        Ok(got)
    }

    /// Read one error completion, giving the failed operation's buffers back.
    /// `Err(Again)` when there is none.
    pub fn readerr(&self) -> Result<CompletionError> {
        loop {
            let e = self.inner.ops.readerr()?;
            if let Some(ce) = self.inner.convert_err(&e) {
                return Ok(ce);
            }
        }
    }

    /// Wait up to `timeout` (`None`: forever) for a completion, busy-polling
    /// briefly and then sleeping. `Err(WaitTimedOut)` on time-out (libfabric's
    /// `fi_cq_sread` says `FI_EAGAIN` then, as the C ABI does), `Err(Again)` when
    /// [`CompletionQueue::signal`] ended the wait, `Err(Avail)` when an error
    /// completion is at the head.
    pub fn sread(&self, timeout: Option<Duration>) -> Result<Completion> {
        if self.inner.has_pending() {
            if let Some(c) = self.inner.take_pending() {
                return Ok(c);
            }
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut e = [CqEntry::new(0, Caps::empty())];
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.inner.ops.sread(&mut e, left) {
                Ok(n) if n > 0 => {
                    let c = self.inner.convert(&e[0], &mut false);
                    if c.is_ok() {
                        return c;
                    }
                }
                Ok(_) => {}
                Err(Error::Again) if !deadline.is_some_and(|d| Instant::now() >= d) => return Err(Error::Again),
                Err(Error::Again) => return Err(Error::WaitTimedOut),
                Err(e) => return Err(e),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::WaitTimedOut);
            }
        }
    }

    /// The next entry of the queue, successful or not, making progress first:
    /// `Ok(Some(Ok(completion)))`, `Ok(Some(Err(error_completion)))` for an
    /// operation that failed, `Ok(None)` when the queue is empty. `Err` only when
    /// the queue itself cannot be read.
    ///
    /// This is [`CompletionQueue::read_one`] followed, when it says an error
    /// completion is at the head (`Err(Avail)`), by [`CompletionQueue::readerr`],
    /// in one call. [`CompletionError`] converts into [`Error`], so `?` works on
    /// the inner result too.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn drain(cq: &fabric::CompletionQueue) -> fabric::Result<()> {
    /// while let Some(entry) = cq.next()? {
    ///     match entry {
    ///         Ok(c) => println!("operation {} done, {} bytes", c.context, c.len),
    ///         Err(e) => eprintln!("operation {} failed: {e}", e.context),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn next(&self) -> Result<Option<std::result::Result<Completion, CompletionError>>> {
        loop {
            match self.read_one() {
                Ok(c) => return Ok(Some(Ok(c))),
                Err(Error::Again) => return Ok(None),
                Err(Error::Avail) => match self.readerr() {
                    Ok(e) => return Ok(Some(Err(e))),
                    // Another reader took the error entry (or it was for an
                    // operation this queue does not know): read again.
                    Err(Error::Again) => continue,
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// Wait up to `timeout` (`None`: forever) for the next entry, successful or
    /// not, as [`CompletionQueue::sread`] waits: `Ok(None)` on time-out (or when
    /// [`CompletionQueue::signal`] woke it), else as [`CompletionQueue::next`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn one(cq: &fabric::CompletionQueue) -> fabric::Result<()> {
    /// match cq.wait_next(Some(Duration::from_secs(1)))? {
    ///     Some(Ok(c)) => println!("operation {} done", c.context),
    ///     Some(Err(e)) => eprintln!("operation {} failed: {e}", e.context),
    ///     None => eprintln!("nothing within a second"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_next(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<std::result::Result<Completion, CompletionError>>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.sread(left) {
                Ok(c) => return Ok(Some(Ok(c))),
                Err(Error::Again | Error::WaitTimedOut) => return Ok(None),
                Err(Error::Avail) => match self.readerr() {
                    Ok(e) => return Ok(Some(Err(e))),
                    // As in `next`: the error entry is gone, wait for the next one.
                    Err(Error::Again) => continue,
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// A file descriptor that becomes readable when the queue may have entries
    /// (for the application's own `poll`/`epoll`). As with libfabric's, call
    /// [`CompletionQueue::trywait`] before each block on it.
    pub fn wait_fd(&self) -> Result<RawFd> {
        self.inner.ops.wait_fd()
    }

    /// Prepare to block on [`CompletionQueue::wait_fd`] (`fi_trywait`): `Ok` when
    /// the application may block on the descriptor now (it becomes readable when
    /// completions may be there); `Err(Again)` when completions are already
    /// there (read them, then try again). `Err(NoSys)` for a queue opened without
    /// an fd wait object. Some providers need it: a verbs completion queue is
    /// armed for one notification here rather than after every completion.
    pub fn trywait(&self) -> Result<()> {
        self.inner.ops.trywait()
    }

    /// Wake a thread blocked in [`CompletionQueue::sread`] (`fi_cq_signal`).
    pub fn signal(&self) {
        self.inner.ops.signal()
    }
}

/// A successful completion (`struct fi_cq_tagged_entry` plus the source), with
/// the operation's buffers.
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion {
    /// The context given when the operation was posted.
    pub context: u64,
    /// Completion flags: `SEND`/`RECV`, `MSG`/`TAGGED`, `REMOTE_CQ_DATA`, and
    /// `MULTI_RECV` on the completion that gives a multi-receive buffer back.
    pub flags: Caps,
    /// Bytes transferred (received length for receives; for a peek, the length of
    /// the message found).
    pub len: usize,
    /// Remote CQ data, when `flags` has `REMOTE_CQ_DATA`.
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Source of a receive (`FiAddr::NOTAVAIL` when unknown).
    pub src: FiAddr,
    /// The operation's own buffers, given back. A single receive buffer's length is
    /// set to the bytes received; vectored receives keep their lengths as posted.
    /// For a multi-receive buffer: `None` on each message's completion, and the
    /// buffer itself on the completion whose flags contain `MULTI_RECV`, unless a
    /// [`RecvView`] of it was still alive then (the buffer is then freed when the
    /// last view drops).
    pub buffers: OpBuffers,
    /// The received message inside a multi-receive buffer (only for multi-receive
    /// message completions).
    pub recv: Option<RecvView>,
}

impl Completion {
    /// The received bytes: the message of a multi-receive completion, else the
    /// contents of the single buffer given back (empty if none).
    pub fn bytes(&self) -> &[u8] {
        match (&self.recv, &self.buffers) {
            (Some(v), _) => v,
            (None, OpBuffers::One(b)) => b,
            (None, OpBuffers::Registered(r)) => r,
            _ => &[],
        }
    }
}

/// An error completion (`struct fi_cq_err_entry`), with the operation's buffers.
#[derive(Debug)]
#[non_exhaustive]
pub struct CompletionError {
    /// The context given when the operation was posted.
    pub context: u64,
    /// Completion flags, as far as known.
    pub flags: Caps,
    /// Bytes transferred before the error (for `FI_ETRUNC`, the bytes placed).
    pub len: usize,
    /// Bytes that did not fit (`FI_ETRUNC`).
    pub olen: usize,
    /// The error.
    pub err: Error,
    /// The provider's own error number.
    pub prov_errno: i32,
    /// Remote CQ data, when `flags` has `REMOTE_CQ_DATA`.
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Source of the message, when known.
    pub src: FiAddr,
    /// The failed operation's buffers, given back (a single receive buffer's length
    /// set to the bytes placed). `None` for an error about one message of a
    /// multi-receive buffer that stays posted.
    pub buffers: OpBuffers,
}

impl fmt::Display for CompletionError {
    /// As `fi_cq_strerror`: the error's text, then the overflow length of a
    /// truncation and the provider's own number when it says more.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.err)?;
        if self.olen > 0 || self.err == Error::Trunc {
            write!(f, " (olen {})", self.olen)?;
        }
        if self.prov_errno != 0 && self.prov_errno != self.err.errno() {
            write!(f, " (prov_errno {})", self.prov_errno)?;
        }
        Ok(())
    }
}

impl std::error::Error for CompletionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}

impl From<CompletionError> for Error {
    fn from(e: CompletionError) -> Error {
        e.err
    }
}

/// The bytes of one message received into a multi-receive buffer.
///
/// Dereferences to the message. It keeps the shared buffer alive; the buffer
/// itself comes back (on the completion flagged `MULTI_RECV`) only if no view of
/// it is alive by then, so drop views once the message is handled.
///
/// Soundness: the view's range lies inside the buffer (checked against the
/// provider's report), and by the contract of `EndpointOps::post_recv` in
/// `fabric_core::prov` ("For `MULTI_RECV`, the bytes a completion reports become
/// the caller's again at that completion; the rest stays the provider's until the
/// buffer-released completion") the provider never writes those bytes again,
/// while it keeps writing other parts of the buffer. Nobody holds a `&mut` to the
/// buffer while any view exists: it is handed back only by `Arc::try_unwrap`.
#[derive(Clone)]
pub struct RecvView {
    shared: Arc<MultiRecvBuf>,
    off: usize,
    len: usize,
}

impl RecvView {
    /// Where the message starts inside the multi-receive buffer.
    pub fn offset(&self) -> usize {
        self.off
    }

    /// The message bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `off + len <= capacity` was checked when the view was made, so the
        // range is inside the live allocation the Arc keeps alive, and initialized
        // (a `Buf` initializes its whole capacity). The provider completed these
        // bytes and, per the `post_recv` multi-receive contract, never writes them
        // again; no `&mut` to the buffer exists while it is shared (see the type's
        // docs). The pointer comes from `Vec::as_ptr`, which creates no reference to
        // the bytes the provider may still be writing elsewhere in the buffer.
        unsafe { std::slice::from_raw_parts(self.shared.buf.raw_const_ptr().add(self.off), self.len) }
    }
}

impl Deref for RecvView {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for RecvView {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for RecvView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvView").field("offset", &self.off).field("len", &self.len).finish()
    }
}

/// Wrap a multi-receive buffer for sharing (used when posting).
pub(crate) fn share(buf: Buf) -> Arc<MultiRecvBuf> {
    Arc::new(MultiRecvBuf { buf })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CqAttr, EpType, Fabric, Hints};
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A provider queue that is not a `UtilCq`: entries pushed by the test.
    struct Plain(Mutex<VecDeque<CqEntry>>);

    impl CqOps for Plain {
        fn fid(&self) -> u64 {
            77
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn read(&self, out: &mut [CqEntry]) -> Result<usize> {
            let mut q = self.0.lock().unwrap();
            let mut n = 0;
            while n < out.len() {
                let Some(e) = q.pop_front() else { break };
                out[n] = e;
                n += 1;
            }
            if n == 0 {
                Err(Error::Again)
            } else {
                Ok(n)
            }
        }
        fn readerr(&self) -> Result<CqErrEntry> {
            Err(Error::Again)
        }
        fn sread(&self, out: &mut [CqEntry], _: Option<Duration>) -> Result<usize> {
            self.read(out)
        }
        fn wait_fd(&self) -> Result<RawFd> {
            Err(Error::NoSys)
        }
        fn signal(&self) {}
    }

    /// A queue that is not the providers' shared `UtilCq` is read through the
    /// vtable: its completions give the buffers back (a receive's length set to
    /// the bytes received), an unknown context is skipped, an empty queue says
    /// `Again`.
    #[test]
    fn another_providers_queue_is_read_through_the_vtable() {
        let info = crate::getinfo(&Hints::new().provider("shm").ep_type(EpType::Rdm)).unwrap().remove(0);
        let fabric = Fabric::open(&info).unwrap();
        let domain = fabric.domain(&info).unwrap();
        let plain = Arc::new(Plain(Mutex::new(VecDeque::new())));
        let ops: Arc<dyn CqOps> = plain.clone();
        let cq = CompletionQueue {
            inner: Arc::new(CqInner {
                prov: ProvCq(Arc::as_ptr(&ops)),
                util: UtilPtr(std::ptr::null()),
                ops,
                table: TableLock::new(Table::new(16, 1)),
                has_pending: AtomicBool::new(false),
                fast: AtomicPtr::new(std::ptr::null_mut()),
                format: CqFormat::Tagged,
                _domain: domain,
            }),
        };
        let mut t = cq.inner.table();
        let recv = t.insert(Record { user_context: 5, bufs: RecBufs::own(OpBuffers::One(Buf::new(64)), true) });
        let send = t.insert(Record { user_context: 6, bufs: RecBufs::own(OpBuffers::One(Buf::new(32)), false) });
        drop(t);
        {
            let mut q = plain.0.lock().unwrap();
            q.push_back(CqEntry { len: 10, ..CqEntry::new(recv, Caps::RECV | Caps::TAGGED) });
            q.push_back(CqEntry::new(recv ^ (1 << 40), Caps::RECV));
            q.push_back(CqEntry { len: 32, ..CqEntry::new(send, Caps::SEND) });
        }
        let c = cq.read_one().unwrap();
        assert_eq!((c.context, c.len, c.bytes().len()), (5, 10, 10));
        let c = cq.read_one().unwrap();
        assert_eq!((c.context, c.buffers.into_buf().map(|b| b.len())), (6, Some(32)), "the stale key was skipped");
        assert_eq!(cq.read_one().unwrap_err(), Error::Again);
        assert_eq!(cq.in_flight(), 0);
    }

    /// The providers whose queues are the shared `UtilCq` take the inline read
    /// path: the downcast at open finds the type (a provider that wrapped its
    /// queue would silently lose the path, which this catches).
    #[test]
    fn util_queues_are_read_inline() {
        let mut provs = Vec::new();
        if cfg!(feature = "shm") {
            provs.push("shm");
        }
        if cfg!(feature = "tcp") {
            provs.push("tcp");
        }
        if cfg!(feature = "udp") {
            provs.push("udp");
        }
        for prov in provs {
            let mut hints = Hints::new().provider(prov).ep_type(EpType::Rdm);
            if prov != "shm" {
                hints = hints.node("127.0.0.1").source(true);
            }
            let info = crate::getinfo(&hints).unwrap().remove(0);
            let fabric = Fabric::open(&info).unwrap();
            let domain = fabric.domain(&info).unwrap();
            let cq = domain.cq(CqAttr::default()).unwrap();
            assert!(cq.inner.fast().is_some(), "{prov}: its queue is read through the vtable");
            // A buffer-released completion pending takes reads off the inline
            // path (to the one that delivers it first), and back when delivered.
            cq.inner.set_pending(true);
            assert!(cq.inner.fast().is_none(), "{prov}: inline with a completion pending");
            cq.inner.set_pending(false);
            assert!(cq.inner.fast().is_some(), "{prov}: not inline again");
            assert_eq!(cq.read_one().map(|c| c.context).unwrap_err(), fabric_core::Error::Again, "{prov}: empty");
        }
    }
}

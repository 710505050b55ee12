//! Progress and blocking waits, shared by completion queues, event queues and
//! counters.
//!
//! Data progress is manual: reading a queue calls [`Progress::progress`] on every
//! object bound to it. A blocking wait busy-polls for a short time (the lowest
//! latency on sockets) and then sleeps in `epoll_wait` on the file descriptors the
//! bound objects expose plus an eventfd that [`Waiter::signal`] writes, so an idle
//! waiter uses no CPU. The epoll descriptor is level-triggered, so a descriptor that
//! stays readable keeps waking the waiter until progress drains it: no wake-up is
//! lost between a poll and a sleep.
//!
//! The bound objects' descriptors join the epoll set only when something may block
//! on it: the first sleep of a wait, `fi_trywait`, or the set's descriptor handed
//! out (`FI_GETWAIT`, a wait set). Until then, an application that only polls
//! pays nothing for the set: a socket watched by an epoll set runs the set's
//! callback in the kernel for every packet it receives (measured here on udp DGRAM's
//! 64 B ping-pong: 2.99 us per message with the socket in the set from bind, 2.80
//! without, medians of 9).
//!
//! # Lifetimes
//!
//! A bound object is held either weakly ([`Waiter::bind`]: event queues,
//! counters, a domain's progress thread; a dead one is skipped and pruned) or
//! strongly ([`Waiter::bind_owned`]: an endpoint bound to a completion queue),
//! which saves each progress call the upgrade of a `Weak`. An owned object
//! stays alive while it is bound, so its owner must unbind it when it closes
//! (`scaffold::bind_cq` binds an endpoint so, and `endpoint_tail!`'s close
//! unbinds it): an endpoint holds its queues, and the two would otherwise keep
//! each other alive. Either way progress runs with no lock held, on a strong
//! reference taken for the call: the object's last reference may end there,
//! and its `Drop` may unbind from this very waiter.

use fabric_core::sync::SpinLock;
use fabric_core::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Something that makes progress when a queue it is bound to is read or waited on:
/// an endpoint, a passive endpoint.
pub trait Progress: Send + Sync {
    /// Move whatever can move without blocking.
    fn progress(&self);
    /// The descriptor that becomes readable when progress may be possible (an
    /// endpoint's own epoll descriptor, a listening socket), if any.
    fn wait_fd(&self) -> Option<RawFd>;
    /// A waiter bound to this object is about to sleep: from now until
    /// [`Progress::end_sleep`], whatever would make progress possible must make
    /// `wait_fd` readable (a transport whose peers skip the wake-up while nobody
    /// sleeps, such as shared memory, tells them here). Progress runs once more
    /// after this call and before the sleep, so nothing is missed in between.
    fn prepare_sleep(&self) {}
    /// The sleep announced by [`Progress::prepare_sleep`] ended.
    fn end_sleep(&self) {}
    /// The application is about to block on a queue's descriptor itself
    /// ([`Waiter::trywait`], `fi_trywait`): from now on, whatever would make
    /// progress possible must make `wait_fd` readable (a device completion queue
    /// is armed for one notification). Unlike a sleep there is no end: progress
    /// runs once more after this call, and later progress takes over.
    fn trywait(&self) {}
    /// The next time progress has work even if nothing arrives (a retransmission
    /// or acknowledgement timer): a blocking wait sleeps no longer than this.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
}

/// An object bound to a [`Waiter`]: held weakly (its owner may drop it whenever
/// it likes; a dead one is skipped and pruned), or strongly while bound
/// ([`Waiter::bind_owned`]: an endpoint bound to a completion queue, which its
/// close unbinds), so that progress reaches it without upgrading a `Weak`.
enum BoundObj {
    /// Held by the waiter until unbound.
    Owned(Arc<dyn Progress>),
    /// Held by someone else; progress skips it once it is gone.
    Weak(Weak<dyn Progress>),
}

impl BoundObj {
    /// The object, if it is alive.
    #[inline(always)]
    fn get(&self) -> Option<Arc<dyn Progress>> {
        match self {
            BoundObj::Owned(a) => Some(a.clone()),
            BoundObj::Weak(w) => w.upgrade(),
        }
    }

    /// Whether it may still be alive (an owned one always is).
    fn alive(&self) -> bool {
        match self {
            BoundObj::Owned(_) => true,
            BoundObj::Weak(w) => w.strong_count() > 0,
        }
    }

    /// The object's address (its identity).
    fn addr(&self) -> *const () {
        match self {
            BoundObj::Owned(a) => Arc::as_ptr(a) as *const (),
            BoundObj::Weak(w) => w.as_ptr() as *const (),
        }
    }

    /// Whether it is the object at `addr` (by identity).
    fn is(&self, addr: *const ()) -> bool {
        std::ptr::addr_eq(self.addr(), addr)
    }
}

/// How long a blocking wait spins before it sleeps, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// A level-triggered epoll set with an eventfd for wake-ups, and the list of
/// objects whose progress a read drives.
pub struct Waiter {
    /// The epoll descriptor: the eventfd plus each bound object's wait descriptor.
    epfd: OwnedFd,
    /// Written by `signal`, read (drained) after each sleep.
    evfd: OwnedFd,
    /// Objects bound to this queue; dead weak ones are pruned on the next bind,
    /// owned ones are dropped when unbound (or with the waiter).
    bound: SpinLock<Vec<BoundObj>>,
    /// Whether the bound objects' descriptors are in the epoll set: false until
    /// something may block on it ([`Waiter::arm`]), then true for good. Written
    /// only under `bound`'s lock, so a bind either sees it set (and registers its
    /// own descriptor) or is seen by the arming pass.
    armed: AtomicBool,
    /// Threads inside `wait`; `notify` writes the eventfd only when non-zero.
    sleepers: AtomicUsize,
    /// Set by `interrupt`, cleared by the `wait_take` it ends.
    interrupted: AtomicBool,
    /// How long to busy-poll before sleeping.
    spin: Duration,
}

impl Waiter {
    /// A new waiter.
    pub fn new() -> Result<Waiter> {
        // SAFETY: epoll_create1 and eventfd take no pointers; the results are checked
        // and each valid descriptor is owned exactly once by an OwnedFd.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            if ep < 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            let epfd = OwnedFd::from_raw_fd(ep);
            let ev = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if ev < 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            let evfd = OwnedFd::from_raw_fd(ev);
            let w = Waiter {
                epfd,
                evfd,
                bound: SpinLock::new(Vec::new()),
                armed: AtomicBool::new(false),
                sleepers: AtomicUsize::new(0),
                interrupted: AtomicBool::new(false),
                spin: DEFAULT_SPIN,
            };
            w.add_fd(ev)?;
            Ok(w)
        }
    }

    /// Add a descriptor to the epoll set (level-triggered, readable).
    pub fn add_fd(&self, fd: RawFd) -> Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Change a registered descriptor's interest: readable, plus writable when
    /// `write` (a socket whose send queue is blocked).
    pub fn set_write_interest(&self, fd: RawFd, write: bool) -> Result<()> {
        self.set_interest(fd, true, write)
    }

    /// Change a registered descriptor's interest: readable when `read` (off while
    /// its reader holds back, so that a waiter does not wake for it), writable
    /// when `write`.
    pub fn set_interest(&self, fd: RawFd, read: bool, write: bool) -> Result<()> {
        let mut events = 0u32;
        if read {
            events |= libc::EPOLLIN as u32;
        }
        if write {
            events |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event { events, u64: fd as u64 };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// The descriptors ready now (no waiting), into `out`; their count. A count
    /// equal to `out.len()` may mean more are ready. Checking readiness this way
    /// costs one system call for the whole set, and unlike a speculative `recv` it
    /// does not take each socket's lock (which contends with the kernel delivering
    /// into that socket while a peer sends).
    pub fn ready_now(&self, out: &mut [RawFd]) -> usize {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 32];
        let max = out.len().min(evs.len());
        if max == 0 {
            return 0;
        }
        // SAFETY: `evs` holds at least `max` events for the kernel to fill.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), max as i32, 0) };
        let n = n.max(0) as usize;
        for (o, e) in out.iter_mut().zip(&evs[..n]) {
            *o = e.u64 as RawFd;
        }
        n
    }

    /// Remove a descriptor from the epoll set (errors ignored: it may be closed).
    pub fn del_fd(&self, fd: RawFd) {
        // SAFETY: EPOLL_CTL_DEL ignores the event pointer; passing null is allowed
        // since Linux 2.6.9.
        unsafe {
            libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
        }
    }

    /// Bind an object: reads drive its progress, waits watch its descriptor.
    /// It is held weakly: its owner may drop it at any time.
    pub fn bind(&self, obj: Weak<dyn Progress>) -> Result<()> {
        let fd = obj.upgrade().and_then(|o| o.wait_fd());
        self.bind_obj(fd, BoundObj::Weak(obj))
    }

    /// Bind an object and hold it (a strong reference) until
    /// [`Waiter::unbind`] or [`Waiter::unbind_addr`], or until the waiter
    /// goes: progress then reaches it without upgrading a `Weak` (one atomic
    /// increment instead of a compare-and-swap loop). The object's owner must
    /// unbind it when it closes, or the two keep each other alive if it holds
    /// this waiter's queue (an endpoint does).
    pub fn bind_owned(&self, obj: Arc<dyn Progress>) -> Result<()> {
        let fd = obj.wait_fd();
        self.bind_obj(fd, BoundObj::Owned(obj))
    }

    /// Bind `obj` (wait descriptor `fd`), once: an object bound already (the
    /// same endpoint bound for transmit and then for receive) stays bound as
    /// it was, and its progress runs once per read.
    fn bind_obj(&self, fd: Option<RawFd>, obj: BoundObj) -> Result<()> {
        let addr = obj.addr();
        let mut b = self.bound.lock();
        if self.armed.load(Ordering::Relaxed) {
            if let Some(fd) = fd {
                self.add_fd(fd)?;
            }
        }
        b.retain(BoundObj::alive);
        if !b.iter().any(|o| o.is(addr)) {
            b.push(obj);
        }
        Ok(())
    }

    /// Put the bound objects' descriptors into the epoll set, once: before
    /// anything blocks on it. A descriptor the kernel refuses is logged and left
    /// out (a wait then wakes on its 100 ms period instead).
    pub fn arm(&self) {
        if self.armed.load(Ordering::Acquire) {
            return;
        }
        self.arm_slow();
    }

    #[cold]
    #[inline(never)]
    fn arm_slow(&self) {
        // The objects are upgraded under the lock and dropped after it (a last
        // reference's Drop may unbind, which takes the lock).
        let mut live = Vec::new();
        {
            let b = self.bound.lock();
            if self.armed.load(Ordering::Relaxed) {
                return;
            }
            live.extend(b.iter().filter_map(BoundObj::get));
            for o in &live {
                if let Some(fd) = o.wait_fd() {
                    if let Err(e) = self.add_fd(fd) {
                        fabric_core::fi_log!(
                            fabric_core::log::Level::Warn,
                            "util",
                            "core",
                            "cannot watch descriptor {fd} of a bound object ({e}): blocking waits poll it every 100 ms"
                        );
                    }
                }
            }
            self.armed.store(true, Ordering::Release);
        }
        drop(live);
    }

    /// Unbind an object (by identity), weakly bound or owned.
    pub fn unbind(&self, obj: &Arc<dyn Progress>) {
        self.unbind_addr(Arc::as_ptr(obj) as *const (), obj.wait_fd());
    }

    /// Unbind the object at `addr` (what `Arc::as_ptr` gives for it; an
    /// endpoint's own `self as *const _`), with its wait descriptor `fd`: the
    /// form an object's own close uses. An owned object's reference is
    /// dropped after the lock is released (it may be the last one, and the
    /// object's `Drop` may unbind from this very waiter).
    pub fn unbind_addr(&self, addr: *const (), fd: Option<RawFd>) {
        let mut gone = Vec::new();
        {
            let mut b = self.bound.lock();
            if let Some(fd) = fd.filter(|_| self.armed.load(Ordering::Relaxed)) {
                self.del_fd(fd);
            }
            let mut i = 0;
            while i < b.len() {
                if !b[i].alive() || b[i].is(addr) {
                    gone.push(b.remove(i));
                } else {
                    i += 1;
                }
            }
        }
        drop(gone);
    }

    /// Drive progress of every bound object once.
    #[inline(always)]
    pub fn progress(&self) {
        self.each_bound(|o| o.progress());
    }

    /// Prepare for the application to block on [`Waiter::fd`] (`fi_trywait`):
    /// progress; `Err(Again)` when `ready` says there is something to read;
    /// else tell every bound object ([`Progress::trywait`]), progress once more
    /// (so what arrived meanwhile is not missed) and check again. `Ok`: the
    /// descriptor becomes readable when progress may be possible.
    pub fn trywait(&self, mut ready: impl FnMut() -> bool) -> Result<()> {
        self.arm();
        self.progress();
        if ready() {
            return Err(Error::Again);
        }
        self.each_bound(|o| o.trywait());
        self.progress();
        if ready() {
            Err(Error::Again)
        } else {
            Ok(())
        }
    }

    /// A waiter outside this queue (a wait set) is about to sleep on
    /// [`Waiter::fd`] together with other descriptors: announce the sleep as
    /// [`Waiter::wait`] does (to the bound objects, and to `notify`, which then
    /// writes the eventfd), progress once more and check `ready`. `Err(Again)`
    /// (the announcement withdrawn) when there is something to read; else `Ok`
    /// with the earliest time a bound object has timer work, and the caller
    /// calls [`Waiter::sleep_end`] after its sleep.
    pub fn sleep_begin(&self, mut ready: impl FnMut() -> bool) -> Result<Option<Instant>> {
        self.arm();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.each_bound(|o| o.prepare_sleep());
        self.progress();
        if ready() {
            self.sleep_end();
            return Err(Error::Again);
        }
        let mut wake: Option<Instant> = None;
        self.each_bound(|o| {
            if let Some(t) = o.next_deadline() {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        });
        Ok(wake)
    }

    /// End a sleep announced by [`Waiter::sleep_begin`]; the eventfd is drained
    /// (an `interrupt` stays recorded for `wait_take`), so that the descriptor
    /// does not stay readable for a wake-up already served.
    pub fn sleep_end(&self) {
        self.each_bound(|o| o.end_sleep());
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
        unsafe {
            libc::read(self.evfd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8);
        }
    }

    /// Call `f` on every bound object that is still alive. No lock is held while
    /// `f` runs (an object's progress may push into this very queue, or drop the
    /// last reference to an object whose `Drop` unbinds it). The usual case, one
    /// bound object, costs one lock and one reference taken (an increment when
    /// it is owned, an upgrade when weak); more are collected first
    /// ([`Waiter::each_bound_many`]).
    #[inline(always)]
    fn each_bound(&self, mut f: impl FnMut(&Arc<dyn Progress>)) {
        let one = {
            let b = self.bound.lock();
            match b.len() {
                0 => return,
                1 => b[0].get(),
                _ => None,
            }
        };
        match one {
            Some(o) => f(&o),
            None => self.each_bound_many(&mut f),
        }
    }

    /// [`Waiter::each_bound`] for more than one bound object (or one that is
    /// gone): the live ones are collected under the lock, then called without it.
    #[cold]
    #[inline(never)]
    fn each_bound_many(&self, f: &mut dyn FnMut(&Arc<dyn Progress>)) {
        let objs = {
            let b = self.bound.lock();
            if b.len() < 2 {
                // One object that is gone (or unbound meanwhile): nothing to call.
                return;
            }
            smallvec_free::Objs::collect(&b)
        };
        objs.each(f);
    }

    /// Wake threads sleeping in [`Waiter::wait`], if any.
    #[inline]
    pub fn notify(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.signal();
        }
    }

    /// Wake a sleeper unconditionally (the next wait returns at once).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(self.evfd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8);
        }
    }

    /// End a `wait_take` in progress (or the next one that finds nothing), as
    /// `fi_cq_signal` / `fi_eq_signal` do.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::Release);
        self.signal();
    }

    /// A queue's blocking read: wait up to `timeout` until `take` gives something
    /// other than `Err(Again)`. `Err(Again)` on time-out, or when an `interrupt`
    /// is found with nothing to take (the interrupt is then consumed).
    pub fn wait_take<T>(&self, timeout: Option<Duration>, mut take: impl FnMut() -> Result<T>) -> Result<T> {
        self.wait(timeout, || match take() {
            Err(Error::Again) => self.interrupted.swap(false, Ordering::AcqRel).then_some(Err(Error::Again)),
            r => Some(r),
        })
        .and_then(|r| r)
    }

    /// The epoll descriptor: readable when a wait would wake (handing it out arms
    /// the set: [`Waiter::arm`]).
    pub fn fd(&self) -> RawFd {
        self.arm();
        self.epfd.as_raw_fd()
    }

    /// Wait until `ready` returns `Some`, or the time-out passes (`Err(Again)`).
    /// Between checks, drives progress; spins first, then sleeps in epoll.
    pub fn wait<T>(&self, timeout: Option<Duration>, mut ready: impl FnMut() -> Option<T>) -> Result<T> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        loop {
            self.progress();
            if let Some(v) = ready() {
                return Ok(v);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Again);
            }
            if now.duration_since(start) < self.spin {
                std::hint::spin_loop();
                continue;
            }
            // Announce the sleep, then check once more so a notify between the
            // check above and the sleep is not lost.
            self.arm();
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            self.each_bound(|o| o.prepare_sleep());
            self.progress();
            let got = ready();
            if got.is_none() {
                let mut wake = deadline;
                self.each_bound(|o| {
                    if let Some(t) = o.next_deadline() {
                        wake = Some(wake.map_or(t, |w| w.min(t)));
                    }
                });
                let ms = match wake {
                    None => 100,
                    // Round up: waking before a timer is due would only spin.
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        (left.as_micros().div_ceil(1000)).clamp(0, 100) as i32
                    }
                };
                if ms > 0 {
                    self.sleep(ms);
                }
            }
            self.each_bound(|o| o.end_sleep());
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            if let Some(v) = got {
                return Ok(v);
            }
        }
    }

    fn sleep(&self, ms: i32) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `evs` is a valid array of 8 epoll_events for the kernel to fill.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, ms) };
        for ev in evs.iter().take(n.max(0) as usize) {
            if ev.u64 == self.evfd.as_raw_fd() as u64 {
                let mut v: u64 = 0;
                // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
                unsafe {
                    libc::read(self.evfd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8);
                }
            }
        }
    }
}

/// Objects opened on a domain or fabric, by fid, held weakly so endpoints can find
/// the concrete object behind a `dyn` handle.
pub struct FidRegistry<T> {
    items: Mutex<Vec<(u64, Weak<T>)>>,
}

impl<T> Default for FidRegistry<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> FidRegistry<T> {
    /// An empty registry.
    pub fn new() -> Self {
        FidRegistry { items: Mutex::new(Vec::new()) }
    }

    /// Record `obj` under `fid` (forgetting dead ones).
    pub fn add(&self, fid: u64, obj: &Arc<T>) {
        let mut g = self.items.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0);
        g.push((fid, Arc::downgrade(obj)));
    }

    /// The live object with this fid.
    pub fn find(&self, fid: u64) -> Option<Arc<T>> {
        let g = self.items.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().find(|(f, _)| *f == fid).and_then(|(_, w)| w.upgrade())
    }
}

/// The optional progress thread of a domain opened with `FI_PROGRESS_AUTO`: it
/// drives every endpoint bound to it, sleeping in epoll on their sockets when
/// there is nothing to do, so operations complete without the application reading
/// its queues.
pub struct AutoProgress {
    waiter: Arc<Waiter>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AutoProgress {
    /// Drive `obj` from the thread too.
    pub fn bind(&self, obj: Weak<dyn Progress>) -> Result<()> {
        self.waiter.bind(obj)
    }

    /// Start the thread (named `name`).
    pub fn start(name: &str) -> Result<AutoProgress> {
        let waiter = Arc::new(Waiter::new()?);
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (waiter.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    let _ =
                        w.wait(Some(std::time::Duration::from_millis(100)), || s.load(Ordering::Acquire).then_some(()));
                }
            })
            .map_err(Error::from)?;
        Ok(AutoProgress { waiter, stop, thread: Mutex::new(Some(thread)) })
    }
}

impl Drop for AutoProgress {
    /// Stop the thread and wait for it to end, unless this drop runs on that very
    /// thread. That happens whenever the application drops its last handle while
    /// the thread holds an endpoint it upgraded for progress: the endpoint's last
    /// reference then ends on the thread, and with it the domain that owns this
    /// `AutoProgress`. A thread cannot join itself, so it is told to stop and left
    /// to return from its loop (it owns its `Waiter` and stop flag, so nothing it
    /// touches on the way out is freed under it).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.waiter.signal();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// A tiny fixed-capacity collection of upgraded objects, so that progress does not
/// allocate for the common case of a few bound objects.
mod smallvec_free {
    use super::{BoundObj, Progress};
    use std::sync::Arc;

    const INLINE: usize = 8;

    pub(super) struct Objs {
        inline: [Option<Arc<dyn Progress>>; INLINE],
        spill: Vec<Arc<dyn Progress>>,
    }

    impl Objs {
        pub(super) fn collect(list: &[BoundObj]) -> Objs {
            let mut o = Objs { inline: Default::default(), spill: Vec::new() };
            let mut n = 0;
            for w in list {
                if let Some(a) = w.get() {
                    if n < INLINE {
                        o.inline[n] = Some(a);
                        n += 1;
                    } else {
                        o.spill.push(a);
                    }
                }
            }
            o
        }

        pub(super) fn each(&self, f: &mut dyn FnMut(&Arc<dyn Progress>)) {
            for a in self.inline.iter().flatten() {
                f(a);
            }
            for a in &self.spill {
                f(a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Ticker(AtomicU64);
    impl Progress for Ticker {
        fn progress(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn wait_drives_progress_until_ready() {
        let w = Waiter::new().unwrap();
        let t = Arc::new(Ticker(AtomicU64::new(0)));
        let d: Arc<dyn Progress> = t.clone();
        w.bind(Arc::downgrade(&d)).unwrap();
        let got = w.wait(Some(Duration::from_secs(5)), || (t.0.load(Ordering::SeqCst) >= 3).then_some(7)).unwrap();
        assert_eq!(got, 7);
    }

    /// Exposes a readable eventfd as its wait descriptor.
    struct Readable(OwnedFd);
    impl Progress for Readable {
        fn progress(&self) {}
        fn wait_fd(&self) -> Option<RawFd> {
            Some(self.0.as_raw_fd())
        }
    }

    fn readable() -> Arc<Readable> {
        // SAFETY: eventfd takes no pointers; the result is checked and owned once.
        let fd = unsafe { libc::eventfd(1, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nobody else owns.
        Arc::new(Readable(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The number of descriptors ready in `w`'s epoll set (its own eventfd is
    /// quiet unless signalled).
    fn ready_in_set(w: &Waiter) -> usize {
        w.ready_now(&mut [0; 8])
    }

    #[test]
    fn bound_descriptors_join_the_set_only_when_something_may_block() {
        // Bound before arming: not watched until the descriptor is handed out.
        let w = Waiter::new().unwrap();
        let r = readable();
        let d: Arc<dyn Progress> = r.clone();
        w.bind(Arc::downgrade(&d)).unwrap();
        assert_eq!(ready_in_set(&w), 0, "a polling-only queue watches nothing");
        let _ = w.fd();
        assert_eq!(ready_in_set(&w), 1, "handing out the descriptor arms the set");
        // Bound after arming: watched at once; unbinding stops watching it.
        let r2 = readable();
        let d2: Arc<dyn Progress> = r2.clone();
        w.bind(Arc::downgrade(&d2)).unwrap();
        assert_eq!(ready_in_set(&w), 2);
        w.unbind(&d2);
        assert_eq!(ready_in_set(&w), 1);
        // A wait that sleeps arms the set too, and wakes for the descriptor.
        let w = Waiter::new().unwrap();
        w.bind(Arc::downgrade(&d)).unwrap();
        assert_eq!(ready_in_set(&w), 0);
        let mut sleeps = 0;
        let got = w.wait(Some(Duration::from_secs(5)), || {
            sleeps += 1;
            (ready_in_set(&w) == 1).then_some(())
        });
        assert_eq!(got, Ok(()));
        assert!(sleeps >= 2);
        // trywait arms it as well.
        let w = Waiter::new().unwrap();
        w.bind(Arc::downgrade(&d)).unwrap();
        let _ = w.trywait(|| false);
        assert_eq!(ready_in_set(&w), 1);
    }

    /// Counts its progress calls and the trywaits it was told of.
    struct Armable {
        progress: AtomicU64,
        armed: AtomicU64,
    }
    impl Progress for Armable {
        fn progress(&self) {
            self.progress.fetch_add(1, Ordering::SeqCst);
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
        fn trywait(&self) {
            self.armed.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn trywait_arms_only_when_nothing_is_ready() {
        let w = Waiter::new().unwrap();
        let a = Arc::new(Armable { progress: AtomicU64::new(0), armed: AtomicU64::new(0) });
        let d: Arc<dyn Progress> = a.clone();
        w.bind(Arc::downgrade(&d)).unwrap();
        // Something to read: Again, after one progress, and nothing armed.
        assert_eq!(w.trywait(|| true), Err(Error::Again));
        assert_eq!((a.progress.load(Ordering::SeqCst), a.armed.load(Ordering::SeqCst)), (1, 0));
        // Nothing: armed, then progress once more (what arrived meanwhile counts).
        assert_eq!(w.trywait(|| false), Ok(()));
        assert_eq!((a.progress.load(Ordering::SeqCst), a.armed.load(Ordering::SeqCst)), (3, 1));
        // Something arrives during the second progress: Again, though armed.
        let seen = a.progress.load(Ordering::SeqCst);
        assert_eq!(w.trywait(|| a.progress.load(Ordering::SeqCst) >= seen + 2), Err(Error::Again));
        assert_eq!(a.armed.load(Ordering::SeqCst), 2);
    }

    /// Holds the only reference to an `AutoProgress` and drops it from its own
    /// progress, which the progress thread runs: the drop must not try to join
    /// the thread it runs on.
    struct DropsTheThread {
        auto: Mutex<Option<AutoProgress>>,
        dropped: AtomicBool,
    }
    impl Progress for DropsTheThread {
        fn progress(&self) {
            let auto = self.auto.lock().unwrap().take();
            if auto.is_some() {
                drop(auto);
                // Reached only if the drop returned instead of panicking.
                self.dropped.store(true, Ordering::SeqCst);
            }
        }
        fn wait_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn auto_progress_dropped_on_its_own_thread_stops_without_joining_itself() {
        let auto = AutoProgress::start("test-progress").unwrap();
        let obj = Arc::new(DropsTheThread { auto: Mutex::new(None), dropped: AtomicBool::new(false) });
        let d: Arc<dyn Progress> = obj.clone();
        auto.bind(Arc::downgrade(&d)).unwrap();
        *obj.auto.lock().unwrap() = Some(auto);
        let start = Instant::now();
        while !obj.dropped.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(20), "the progress thread never dropped it cleanly");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn wait_times_out_and_sleeps() {
        let w = Waiter::new().unwrap();
        let start = Instant::now();
        let r: Result<()> = w.wait(Some(Duration::from_millis(30)), || None);
        assert_eq!(r, Err(Error::Again));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn signal_wakes_a_sleeper() {
        let w = Arc::new(Waiter::new().unwrap());
        let flag = Arc::new(AtomicU64::new(0));
        let (w2, f2) = (w.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            w2.wait(Some(Duration::from_secs(10)), || (f2.load(Ordering::SeqCst) == 1).then_some(()))
        });
        std::thread::sleep(Duration::from_millis(50));
        flag.store(1, Ordering::SeqCst);
        w.notify();
        assert_eq!(h.join().unwrap(), Ok(()));
    }
}

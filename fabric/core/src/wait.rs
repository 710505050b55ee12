//! Wait sets and poll sets over completion queues, counters and event queues
//! (libfabric's `fid_wait` and `fid_poll`), written once over the provider
//! contract for both front ends: the safe API's `WaitSet`/`PollSet` and the C
//! ABI's `fi_wait_open`/`fi_poll_open`.
//!
//! A [`Set`] holds [`Waitable`] members, each with a context value.
//! [`Set::poll`] drives every member's progress and reports the contexts of those
//! with something to read: a queue with entries (or an error entry), a counter
//! whose success or error count changed since the set last reported it, as
//! libfabric's `util_poll` does. [`Set::wait`] blocks until one member has
//! something to read: it polls, spins briefly, then announces the sleep to every
//! member ([`Waitable::wait_begin`], so that transports which skip wake-ups while
//! nobody sleeps wake this waiter), polls once more and sleeps in `epoll` on the
//! members' descriptors. Progress is manual in every built-in provider, so the
//! waiter drives it: a message to any member's endpoint ends the wait.

use crate::prov::{CntrOps, CqOps, EqOps};
use crate::{CqEntry, Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long [`Set::wait`] busy-polls before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// The longest single sleep: a member whose wake-up got lost (a provider bug)
/// costs at most this, and members added meanwhile are seen.
const SLEEP_MAX_MS: i32 = 100;

/// A member of a wait set or poll set.
pub trait Waitable: Send + Sync {
    /// The member's object id (unique among live objects).
    fn fid(&self) -> u64;
    /// Drive progress and say whether there is something to read. A counter
    /// answers `true` once per change of its counts.
    fn ready(&self) -> Result<bool>;
    /// The descriptor that becomes readable when the member may have something,
    /// once [`Waitable::trywait`] or [`Waitable::wait_begin`] said `Ok`.
    fn wait_fd(&self) -> Result<RawFd>;
    /// Prepare for the application to block on the descriptor (`fi_trywait`);
    /// `Err(Again)` when there is something to read already.
    fn trywait(&self) -> Result<()>;
    /// A waiter is about to sleep on the descriptor (see
    /// [`CqOps::wait_begin`]): `Ok` with the time by which progress has work, if
    /// any; `Err(Again)` when there is something to read already.
    fn wait_begin(&self) -> Result<Option<Instant>>;
    /// The sleep announced by a successful [`Waitable::wait_begin`] ended.
    fn wait_end(&self);
}

/// The descriptor methods of a member, forwarded to the provider object in
/// field `$f`.
macro_rules! forward_waits {
    ($f:tt) => {
        fn wait_fd(&self) -> Result<RawFd> {
            self.$f.wait_fd()
        }
        fn trywait(&self) -> Result<()> {
            self.$f.trywait()
        }
        fn wait_begin(&self) -> Result<Option<Instant>> {
            self.$f.wait_begin()
        }
        fn wait_end(&self) {
            self.$f.wait_end()
        }
    };
}

/// A completion queue as a member: ready when it has entries or an error entry.
pub struct CqMember(pub Arc<dyn CqOps>);

impl Waitable for CqMember {
    fn fid(&self) -> u64 {
        self.0.fid()
    }
    fn ready(&self) -> Result<bool> {
        // An empty read drives progress: `Ok(0)` says completions are waiting.
        let mut none: [CqEntry; 0] = [];
        match self.0.read(&mut none) {
            Ok(_) | Err(Error::Avail) => Ok(true),
            Err(Error::Again) => Ok(false),
            Err(e) => Err(e),
        }
    }
    forward_waits!(0);
}

/// An event queue as a member: ready when it has an event or an error event.
pub struct EqMember(pub Arc<dyn EqOps>);

impl Waitable for EqMember {
    fn fid(&self) -> u64 {
        self.0.fid()
    }
    fn ready(&self) -> Result<bool> {
        match self.0.peek() {
            Ok(_) | Err(Error::Avail) => Ok(true),
            Err(Error::Again) => Ok(false),
            Err(e) => Err(e),
        }
    }
    forward_waits!(0);
}

/// A counter as a member: ready once each time its success or error count
/// differs from the counts it last reported (libfabric's checkpoints), starting
/// from the counts when it was made.
pub struct CntrMember {
    ops: Arc<dyn CntrOps>,
    seen: Mutex<(u64, u64)>,
}

impl CntrMember {
    /// A member for `ops`, with its current counts as seen.
    pub fn new(ops: Arc<dyn CntrOps>) -> CntrMember {
        let seen = (ops.read(), ops.readerr());
        CntrMember { ops, seen: Mutex::new(seen) }
    }

    /// The counts as the member last reported them (success, errors).
    pub fn seen(&self) -> (u64, u64) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Waitable for CntrMember {
    fn fid(&self) -> u64 {
        self.ops.fid()
    }
    fn ready(&self) -> Result<bool> {
        // `read` drives progress; `readerr` after it sees the errors it counted.
        let now = (self.ops.read(), self.ops.readerr());
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now {
            return Ok(false);
        }
        *seen = now;
        Ok(true)
    }
    fn wait_fd(&self) -> Result<RawFd> {
        self.ops.wait_fd()
    }
    fn trywait(&self) -> Result<()> {
        self.ops.trywait()?;
        if self.ready()? {
            return Err(Error::Again);
        }
        Ok(())
    }
    fn wait_begin(&self) -> Result<Option<Instant>> {
        self.ops.wait_begin()
    }
    fn wait_end(&self) {
        self.ops.wait_end()
    }
}

/// One member and the context it reports.
#[derive(Clone)]
struct Entry {
    obj: Arc<dyn Waitable>,
    context: u64,
    /// Its descriptor in the epoll set (wait sets only).
    fd: Option<RawFd>,
}

/// A wait set or a poll set: members with their contexts (see the module docs).
pub struct Set {
    members: Mutex<Vec<Entry>>,
    /// The epoll set of the members' descriptors: wait sets only.
    epfd: Option<OwnedFd>,
    /// Where the next poll starts, so that a busy member does not hide the
    /// others from a caller who asks for one context at a time.
    cursor: AtomicUsize,
}

impl Set {
    /// A poll set: members need no descriptor, and [`Set::wait`] is refused.
    pub fn poll_set() -> Set {
        Set { members: Mutex::new(Vec::new()), epfd: None, cursor: AtomicUsize::new(0) }
    }

    /// A wait set: each member must have a descriptor ([`Waitable::wait_fd`]),
    /// gathered in one epoll set ([`Set::fd`]).
    pub fn wait_set() -> Result<Set> {
        // SAFETY: epoll_create1 takes no pointers; a valid result is owned once.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: `ep` is a fresh descriptor nobody else owns.
        let epfd = unsafe { OwnedFd::from_raw_fd(ep) };
        Ok(Set { members: Mutex::new(Vec::new()), epfd: Some(epfd), cursor: AtomicUsize::new(0) })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        // Every change is one push or one removal: a poisoned lock guards a
        // consistent list.
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add a member reporting `context`. Adding a member again (same fid) only
    /// changes its context. A wait set refuses a member without a descriptor
    /// (`Err(NoSys)`, as the member's own `wait_fd` says).
    pub fn add(&self, obj: Arc<dyn Waitable>, context: u64) -> Result<()> {
        let mut m = self.lock();
        if let Some(e) = m.iter_mut().find(|e| e.obj.fid() == obj.fid()) {
            e.context = context;
            return Ok(());
        }
        let fd = match &self.epfd {
            None => None,
            Some(ep) => {
                let fd = obj.wait_fd()?;
                if !m.iter().any(|e| e.fd == Some(fd)) {
                    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
                    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
                    let r = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
                    if r < 0 {
                        let e = std::io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(e.into());
                        }
                    }
                }
                Some(fd)
            }
        };
        m.try_reserve(1).map_err(|_| Error::NoMem)?;
        m.push(Entry { obj, context, fd });
        Ok(())
    }

    /// Remove the member with object id `fid`; `Err(NoEnt)` if there is none.
    pub fn remove(&self, fid: u64) -> Result<()> {
        let mut m = self.lock();
        let i = m.iter().position(|e| e.obj.fid() == fid).ok_or(Error::NoEnt)?;
        let e = m.remove(i);
        if let (Some(ep), Some(fd)) = (&self.epfd, e.fd) {
            if !m.iter().any(|o| o.fd == Some(fd)) {
                // SAFETY: EPOLL_CTL_DEL ignores the event pointer (null is allowed
                // since Linux 2.6.9); the descriptor is still open: `e` holds its
                // object until the end of this scope.
                unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
            }
        }
        drop(m);
        drop(e);
        Ok(())
    }

    /// Whether the member with object id `fid` is in the set.
    pub fn contains(&self, fid: u64) -> bool {
        self.lock().iter().any(|e| e.obj.fid() == fid)
    }

    /// Members in the set.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The epoll descriptor of a wait set (`FI_GETWAIT`): readable when a
    /// member's descriptor is. Call [`Set::trywait`] before blocking on it.
    pub fn fd(&self) -> Option<RawFd> {
        self.epfd.as_ref().map(|e| e.as_raw_fd())
    }

    /// The members as they are now, into `out` (cleared first), so that no lock
    /// is held while their progress runs.
    fn snapshot(&self, out: &mut Vec<Entry>) {
        out.clear();
        out.extend(self.lock().iter().cloned());
    }

    /// Drive the progress of the members, starting after where the last poll
    /// started, and write the contexts of those with something to read into
    /// `out`; how many were written (0: none). Stops once `out` is full. An error
    /// of a member is returned only when no member had something.
    pub fn poll(&self, out: &mut [u64]) -> Result<usize> {
        let mut snap = Vec::new();
        self.snapshot(&mut snap);
        if snap.is_empty() || out.is_empty() {
            return Ok(0);
        }
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % snap.len();
        let (mut got, mut err) = (0, None);
        for i in 0..snap.len() {
            if got == out.len() {
                break;
            }
            let e = &snap[(start + i) % snap.len()];
            match e.obj.ready() {
                Ok(true) => {
                    out[got] = e.context;
                    got += 1;
                }
                Ok(false) => {}
                Err(x) => err = err.or(Some(x)),
            }
        }
        match err {
            Some(x) if got == 0 => Err(x),
            _ => Ok(got),
        }
    }

    /// Whether any member has something to read (driving the progress of the
    /// members up to the first that has).
    fn any_ready(snap: &[Entry]) -> Result<bool> {
        for e in snap {
            if e.obj.ready()? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Prepare for the application to block on [`Set::fd`] (`fi_trywait` on the
    /// wait set): `Ok` when it may, `Err(Again)` when a member has something
    /// to read (read it first). A counter's change counts as read once this says
    /// so.
    pub fn trywait(&self) -> Result<()> {
        if self.epfd.is_none() {
            return Err(Error::NoSys);
        }
        let mut snap = Vec::new();
        self.snapshot(&mut snap);
        if Set::any_ready(&snap)? {
            return Err(Error::Again);
        }
        for e in &snap {
            e.obj.trywait()?;
        }
        if Set::any_ready(&snap)? {
            return Err(Error::Again);
        }
        Ok(())
    }

    /// Wait up to `timeout` (`None`: forever) until a member has something to
    /// read, driving the members' progress meanwhile: `Ok` then (which one is
    /// for the caller to find, by reading them or with a poll set),
    /// `Err(TimedOut)` after `timeout`. Spins briefly, then sleeps. Members
    /// added or removed during the wait count from its next round (at most
    /// 100 ms). `Err(NoSys)` on a poll set.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let Some(ep) = &self.epfd else {
            return Err(Error::NoSys);
        };
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut snap = Vec::new();
        loop {
            self.snapshot(&mut snap);
            if Set::any_ready(&snap)? {
                return Ok(());
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::TimedOut);
            }
            if now.duration_since(start) < SPIN {
                std::hint::spin_loop();
                continue;
            }
            // Announce the sleep to every member, then look once more: what
            // arrived before the announcement is seen now, what arrives after
            // it makes a descriptor readable.
            let mut wake = deadline;
            let mut begun = 0;
            let mut outcome: Option<Result<()>> = None;
            for e in &snap {
                match e.obj.wait_begin() {
                    Ok(t) => {
                        begun += 1;
                        if let Some(t) = t {
                            wake = Some(wake.map_or(t, |w| w.min(t)));
                        }
                    }
                    Err(Error::Again) => {
                        outcome = Some(Ok(()));
                        break;
                    }
                    Err(x) => {
                        outcome = Some(Err(x));
                        break;
                    }
                }
            }
            if outcome.is_none() {
                match Set::any_ready(&snap) {
                    Ok(false) => {}
                    Ok(true) => outcome = Some(Ok(())),
                    Err(x) => outcome = Some(Err(x)),
                }
            }
            if outcome.is_none() {
                let ms = match wake {
                    None => SLEEP_MAX_MS,
                    // Round up: waking before a timer is due would only spin.
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        left.as_micros().div_ceil(1000).min(SLEEP_MAX_MS as u128) as i32
                    }
                };
                if ms > 0 {
                    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
                    // SAFETY: `evs` is a valid array of 8 epoll_events for the kernel
                    // to fill. Readiness is only a hint: the next round polls.
                    unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, ms) };
                }
            }
            for e in &snap[..begun] {
                e.obj.wait_end();
            }
            if let Some(r) = outcome {
                return r;
            }
        }
    }
}

impl std::fmt::Debug for Set {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fids: Vec<u64> = self.lock().iter().map(|e| e.obj.fid()).collect();
        f.debug_struct("Set").field("wait", &self.epfd.is_some()).field("members", &fids).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// A member whose readiness and descriptor the test controls.
    struct Fake {
        fid: u64,
        ready: AtomicBool,
        polls: AtomicU64,
        begun: AtomicU64,
        ended: AtomicU64,
        fd: Option<OwnedFd>,
    }

    impl Fake {
        fn new(fid: u64, with_fd: bool) -> Arc<Fake> {
            let fd = with_fd.then(|| {
                // SAFETY: eventfd takes no pointers; the result is owned once.
                let ev = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
                assert!(ev >= 0);
                // SAFETY: a fresh descriptor.
                unsafe { OwnedFd::from_raw_fd(ev) }
            });
            Arc::new(Fake {
                fid,
                ready: AtomicBool::new(false),
                polls: AtomicU64::new(0),
                begun: AtomicU64::new(0),
                ended: AtomicU64::new(0),
                fd,
            })
        }
    }

    impl Waitable for Fake {
        fn fid(&self) -> u64 {
            self.fid
        }
        fn ready(&self) -> Result<bool> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            Ok(self.ready.load(Ordering::SeqCst))
        }
        fn wait_fd(&self) -> Result<RawFd> {
            self.fd.as_ref().map(|f| f.as_raw_fd()).ok_or(Error::NoSys)
        }
        fn trywait(&self) -> Result<()> {
            Ok(())
        }
        fn wait_begin(&self) -> Result<Option<Instant>> {
            self.begun.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
        fn wait_end(&self) {
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn poll_reports_exactly_the_ready_members_and_rotates() {
        let s = Set::poll_set();
        let (a, b, c) = (Fake::new(1, false), Fake::new(2, false), Fake::new(3, false));
        s.add(a.clone(), 10).unwrap();
        s.add(b.clone(), 20).unwrap();
        s.add(c.clone(), 30).unwrap();
        let mut out = [0u64; 8];
        assert_eq!(s.poll(&mut out), Ok(0));
        a.ready.store(true, Ordering::SeqCst);
        c.ready.store(true, Ordering::SeqCst);
        let n = s.poll(&mut out).unwrap();
        let mut got = out[..n].to_vec();
        got.sort();
        assert_eq!(got, [10, 30]);
        // One at a time: both come out over two polls.
        let mut one = [0u64; 1];
        let mut seen = Vec::new();
        for _ in 0..3 {
            assert_eq!(s.poll(&mut one), Ok(1));
            seen.push(one[0]);
        }
        assert!(seen.contains(&10) && seen.contains(&30), "{seen:?}");
        assert_eq!(s.remove(1), Ok(()));
        assert_eq!(s.remove(1), Err(Error::NoEnt));
        assert_eq!(s.poll(&mut out), Ok(1));
        assert_eq!(out[0], 30);
        assert_eq!(s.wait(Some(Duration::ZERO)), Err(Error::NoSys));
    }

    #[test]
    fn wait_set_needs_descriptors_and_times_out() {
        let s = Set::wait_set().unwrap();
        assert_eq!(s.add(Fake::new(1, false), 0), Err(Error::NoSys));
        let a = Fake::new(2, true);
        s.add(a.clone(), 0).unwrap();
        s.add(a.clone(), 5).unwrap();
        assert_eq!(s.len(), 1, "adding again changes only the context");
        let start = Instant::now();
        assert_eq!(s.wait(Some(Duration::from_millis(30))), Err(Error::TimedOut));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let (b, e) = (a.begun.load(Ordering::SeqCst), a.ended.load(Ordering::SeqCst));
        assert!(b >= 1, "it slept");
        assert_eq!(b, e, "every announced sleep ended");
        assert_eq!(s.trywait(), Ok(()));
        a.ready.store(true, Ordering::SeqCst);
        assert_eq!(s.trywait(), Err(Error::Again));
        assert_eq!(s.wait(None), Ok(()));
    }

    #[test]
    fn wait_wakes_when_a_member_becomes_ready() {
        let s = Arc::new(Set::wait_set().unwrap());
        let (a, b) = (Fake::new(1, true), Fake::new(2, true));
        s.add(a.clone(), 1).unwrap();
        s.add(b.clone(), 2).unwrap();
        let s2 = s.clone();
        let h = std::thread::spawn(move || s2.wait(Some(Duration::from_secs(20))));
        std::thread::sleep(Duration::from_millis(20));
        b.ready.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        let fd = b.wait_fd().unwrap();
        // SAFETY: writes 8 bytes from a valid u64 to the test's eventfd.
        unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
        assert_eq!(h.join().unwrap(), Ok(()));
    }
}

//! Await fabric's completion queues, event queues and counters from
//! [tokio](https://tokio.rs), without a thread per queue.
//!
//! [`AsyncCq::next`] awaits the next entry of a completion queue,
//! [`AsyncEq::next`] the next event of an event queue, and
//! [`AsyncCounter::wait_for`] a counter reaching a threshold. Each wrapper puts
//! the queue's wait descriptor into tokio's reactor ([`tokio::io::unix::AsyncFd`]),
//! so one task, or a handful, can serve any number of queues.
//!
//! # How a wait goes
//!
//! Progress is manual (see the `fabric` crate's docs, "Progress and waiting"):
//! reading a queue drives its endpoints. A future of this crate, each time it is
//! polled:
//!
//! 1. reads the queue (which drives progress) and returns what it finds;
//! 2. when the queue is empty, announces a sleep on the queue's descriptor
//!    ([`fabric::CompletionQueue::begin_sleep`]: libfabric's `fi_trywait`, plus
//!    telling the provider that someone sleeps, so that transports which skip
//!    wake-ups while nobody waits, such as shm, write the descriptor). When that
//!    says something arrived meanwhile, it reads again;
//! 3. awaits the descriptor's readiness, but no longer than the provider's next
//!    timer (a retransmission or a delayed acknowledgement of udp's reliable
//!    protocol, which only progress runs) nor 100 ms (so that a lost wake-up, a
//!    provider bug, costs at most that);
//! 4. on readiness clears it, ends the sleep, and goes back to 1.
//!
//! # Dropping a future
//!
//! Every future here is cancel-safe: an entry is taken from the queue only in
//! the poll that returns it, so dropping a pending future (a `select!` that
//! took another branch, a time-out) loses no completion and no event: the next
//! read gets it.
//!
//! # Requirements
//!
//! - The queue needs a wait descriptor: open it with `WaitObj::Fd`
//!   ([`AsyncCq::open`] and [`AsyncEq::open`] do). A queue opened with
//!   `WaitObj::None` is refused with an error that says so.
//! - One wrapper per queue: a descriptor can be registered with tokio's
//!   reactor once. Share the wrapper (by reference or in an `Arc`); any number
//!   of tasks may await it at once.
//! - A tokio runtime with I/O and time enabled (`Builder::enable_all`).
//!   Making a wrapper outside a runtime is refused with an error; inside one
//!   without I/O enabled it panics, as tokio's own sockets do.
//!
//! # Example
//!
//! An RDM endpoint on loopback sends itself a message; one task awaits both
//! completions:
//!
//! ```
//! use fabric::{AvAttr, BindFlags, Buf, EpType, Fabric, FiAddr, Hints};
//! use fabric_tokio::AsyncCq;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let hints = Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true);
//!     let info = fabric::getinfo(&hints)?.remove(0);
//!     let fabric = Fabric::open(&info)?;
//!     let domain = fabric.domain(&info)?;
//!     let cq = AsyncCq::open(&domain, Default::default())?; // with WaitObj::Fd
//!     let av = domain.av(AvAttr::default())?;
//!     let ep = domain.endpoint(&info)?;
//!     ep.bind_cq(cq.queue(), BindFlags::TRANSMIT | BindFlags::RECV)?;
//!     ep.bind_av(&av)?;
//!     ep.enable()?;
//!
//!     let me = av.insert_one(&ep.name()?)?;
//!     ep.recv(Buf::new(64), FiAddr::UNSPEC, 1)?;
//!     ep.send(Buf::from(&b"hello"[..]), me, 2)?;
//!     let mut got = Vec::new();
//!     while got.len() < 2 {
//!         let c = cq.next().await??; // an error completion is an error too
//!         if c.context == 1 {
//!             assert_eq!(c.bytes(), b"hello");
//!         }
//!         got.push(c.context);
//!     }
//!     got.sort();
//!     assert_eq!(got, [1, 2]);
//!     Ok::<(), Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```

#![deny(unsafe_code)]

use fabric::{
    Completion, CompletionError, CompletionQueue, Counter, CqAttr, Domain, EqAttr, EqErrEntry, EqEvent, Error,
    EventQueue, Fabric, Result, Sleep, WaitObj,
};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The longest one sleep lasts before the queue is read again, whatever the
/// descriptor says: a wake-up lost by a provider costs at most this.
pub const SLEEP_MAX: Duration = Duration::from_millis(100);

/// A queue's wait descriptor, with a handle on the queue that owns it: the
/// descriptor stays open as long as this value.
struct WaitFd<Q> {
    fd: RawFd,
    _queue: Q,
}

impl<Q> AsRawFd for WaitFd<Q> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// The registration of a queue's descriptor with tokio's reactor.
struct Reactor<Q> {
    fd: AsyncFd<WaitFd<Q>>,
}

impl<Q> Reactor<Q> {
    /// Register `fd`, the descriptor of `queue`, the queue `what` (for error
    /// messages).
    fn new(queue: Q, fd: Result<RawFd>, what: &str, id: u64) -> io::Result<Reactor<Q>> {
        let fd = match fd {
            Ok(fd) => fd,
            Err(Error::NoSys) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "fabric-tokio: {what} {id} has no wait descriptor: open it with wait_obj: WaitObj::Fd \
                         to await it"
                    ),
                ))
            }
            Err(e) => {
                return Err(io::Error::other(format!("fabric-tokio: {what} {id}: its wait descriptor: {e}")));
            }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(format!(
                "fabric-tokio: {what} {id}: wrapped outside a tokio runtime (make it inside one, with I/O enabled)"
            )));
        }
        // SAFETY: `fd` is the queue's wait descriptor, open as long as the queue
        // is; `WaitFd` holds a handle on the queue, so the descriptor stays open
        // and the same for as long as the `AsyncFd` owns it, and `as_raw_fd`
        // always returns it.
        #[allow(unsafe_code)]
        let r = unsafe { AsyncFd::register_with_interest(WaitFd { fd, _queue: queue }, Interest::READABLE) };
        match r.map_err(|e| e.into_parts().1) {
            Ok(fd) => Ok(Reactor { fd }),
            Err(e) if e.raw_os_error() == Some(17) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("fabric-tokio: {what} {id} is already registered with tokio (one wrapper per queue: share it)"),
            )),
            Err(e) => Err(io::Error::new(e.kind(), format!("fabric-tokio: {what} {id}: registering with tokio: {e}"))),
        }
    }

    /// Sleep until the descriptor is readable, `sleep`'s timer, or
    /// [`SLEEP_MAX`], then end the sleep.
    async fn sleep(&self, sleep: Sleep) -> Result<()> {
        let cap = Instant::now() + SLEEP_MAX;
        let until = sleep.wake_by().map_or(cap, |t| t.min(cap));
        match tokio::time::timeout_at(until.into(), self.fd.readable()).await {
            Ok(Ok(mut ready)) => ready.clear_ready(),
            Ok(Err(e)) => return Err(e.into()),
            Err(_elapsed) => {}
        }
        drop(sleep);
        Ok(())
    }
}

/// A completion queue awaited from tokio (see the crate docs).
pub struct AsyncCq {
    // The registration holds a handle on the queue too: the descriptor stays
    // open until it is out of tokio's reactor.
    reactor: Reactor<CompletionQueue>,
    cq: CompletionQueue,
}

impl fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCq").field("cq", &self.cq).field("fd", &self.reactor.fd.get_ref().fd).finish()
    }
}

impl AsyncCq {
    /// Open a completion queue of `domain` with `attr`, its wait object set to
    /// `WaitObj::Fd`, and wrap it. `attr.wait_obj` must be `Unspec` or `Fd`
    /// (`None` asks for a queue that cannot be waited on: refused).
    pub fn open(domain: &Domain, attr: CqAttr) -> io::Result<AsyncCq> {
        if attr.wait_obj == WaitObj::None {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "fabric-tokio: a completion queue opened with WaitObj::None cannot be awaited: use WaitObj::Fd",
            ));
        }
        let cq = domain
            .cq(CqAttr { wait_obj: WaitObj::Fd, ..attr })
            .map_err(|e| io::Error::other(format!("fabric-tokio: opening a completion queue with WaitObj::Fd: {e}")))?;
        AsyncCq::new(cq)
    }

    /// Wrap a completion queue opened with a wait descriptor (`WaitObj::Fd`;
    /// refused with an error saying so for a queue without one).
    pub fn new(cq: CompletionQueue) -> io::Result<AsyncCq> {
        let reactor = Reactor::new(cq.clone(), cq.wait_fd(), "completion queue", cq.id())?;
        Ok(AsyncCq { reactor, cq })
    }

    /// The queue, for binding endpoints and for non-blocking reads.
    pub fn queue(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The next entry of the queue, successful or not: `Ok(Ok(completion))`,
    /// `Ok(Err(error_completion))` for an operation that failed (both give the
    /// operation's buffers back), `Err` when the queue itself cannot be read
    /// or waited on. Cancel-safe: dropping the future loses no entry.
    pub async fn next(&self) -> Result<std::result::Result<Completion, CompletionError>> {
        loop {
            if let Some(entry) = self.cq.next()? {
                return Ok(entry);
            }
            match self.cq.begin_sleep() {
                Ok(sleep) => self.reactor.sleep(sleep).await?,
                Err(Error::Again) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The queue back, its descriptor out of tokio's reactor.
    pub fn into_inner(self) -> CompletionQueue {
        let AsyncCq { reactor, cq } = self;
        drop(reactor);
        cq
    }
}

/// An event queue awaited from tokio (see the crate docs).
pub struct AsyncEq {
    reactor: Reactor<EventQueue>,
    eq: EventQueue,
}

impl fmt::Debug for AsyncEq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEq").field("eq", &self.eq).field("fd", &self.reactor.fd.get_ref().fd).finish()
    }
}

impl AsyncEq {
    /// Open an event queue of `fabric` with `attr`, its wait object set to
    /// `WaitObj::Fd`, and wrap it (`WaitObj::None` is refused).
    pub fn open(fabric: &Fabric, attr: EqAttr) -> io::Result<AsyncEq> {
        if attr.wait_obj == WaitObj::None {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "fabric-tokio: an event queue opened with WaitObj::None cannot be awaited: use WaitObj::Fd",
            ));
        }
        let eq = fabric
            .eq(EqAttr { wait_obj: WaitObj::Fd, ..attr })
            .map_err(|e| io::Error::other(format!("fabric-tokio: opening an event queue with WaitObj::Fd: {e}")))?;
        AsyncEq::new(eq)
    }

    /// Wrap an event queue opened with a wait descriptor (`WaitObj::Fd`).
    pub fn new(eq: EventQueue) -> io::Result<AsyncEq> {
        let reactor = Reactor::new(eq.clone(), eq.wait_fd(), "event queue", eq.id())?;
        Ok(AsyncEq { reactor, eq })
    }

    /// The queue, for binding endpoints and for non-blocking reads.
    pub fn queue(&self) -> &EventQueue {
        &self.eq
    }

    /// The next event: `Ok(Ok(event))`, `Ok(Err(error_entry))` for an error
    /// event (a refused connection), `Err` when the queue cannot be read or
    /// waited on. Cancel-safe.
    pub async fn next(&self) -> Result<std::result::Result<EqEvent, EqErrEntry>> {
        loop {
            match self.eq.read() {
                Ok(ev) => return Ok(Ok(ev)),
                Err(Error::Avail) => match self.eq.readerr() {
                    Ok(e) => return Ok(Err(e)),
                    // Another reader took it: look again.
                    Err(Error::Again) => continue,
                    Err(e) => return Err(e),
                },
                Err(Error::Again) => {}
                Err(e) => return Err(e),
            }
            match self.eq.begin_sleep() {
                Ok(sleep) => self.reactor.sleep(sleep).await?,
                Err(Error::Again) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The queue back, its descriptor out of tokio's reactor.
    pub fn into_inner(self) -> EventQueue {
        let AsyncEq { reactor, eq } = self;
        drop(reactor);
        eq
    }
}

/// A counter awaited from tokio (see the crate docs).
pub struct AsyncCounter {
    reactor: Reactor<Counter>,
    cntr: Counter,
}

impl fmt::Debug for AsyncCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCounter").field("cntr", &self.cntr).field("fd", &self.reactor.fd.get_ref().fd).finish()
    }
}

impl AsyncCounter {
    /// Wrap a counter (every built-in provider's counters have a wait
    /// descriptor; one without is refused with an error saying so).
    pub fn new(cntr: Counter) -> io::Result<AsyncCounter> {
        let reactor = Reactor::new(cntr.clone(), cntr.wait_fd(), "counter", cntr.id())?;
        Ok(AsyncCounter { reactor, cntr })
    }

    /// The counter, for binding endpoints and reading it.
    pub fn counter(&self) -> &Counter {
        &self.cntr
    }

    /// Wait until the success count reaches `threshold`, and return the count
    /// then (as `fi_cntr_wait`). `Err(Avail)` if the error count changes while
    /// waiting (read it with [`Counter::readerr`]). Cancel-safe: it reads,
    /// never takes.
    pub async fn wait_for(&self, threshold: u64) -> Result<u64> {
        let errors = self.cntr.readerr();
        loop {
            let n = self.cntr.read();
            if n >= threshold {
                return Ok(n);
            }
            if self.cntr.readerr() != errors {
                return Err(Error::Avail);
            }
            let sleep = match self.cntr.begin_sleep() {
                Ok(s) => s,
                Err(Error::Again) => continue,
                Err(e) => return Err(e),
            };
            // The counter armed does not know our threshold: look once more.
            if self.cntr.read() >= threshold || self.cntr.readerr() != errors {
                continue;
            }
            self.reactor.sleep(sleep).await?;
        }
    }

    /// The counter back, its descriptor out of tokio's reactor.
    pub fn into_inner(self) -> Counter {
        let AsyncCounter { reactor, cntr } = self;
        drop(reactor);
        cntr
    }
}

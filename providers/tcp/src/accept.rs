//! Taking connections in without being taken down by them: accepted connections
//! that never identify themselves are bounded in number and in time (see
//! [`DropReport`] and `FI_TCP_HANDSHAKE_TIMEOUT` / `FI_TCP_HANDSHAKE_MAX`), and a
//! listener whose `accept` fails for want of descriptors neither spins nor floods
//! the log ([`Acceptor`]).
//!
//! Out of descriptors (`EMFILE`, `ENFILE`), `accept` fails while the connection
//! stays in the backlog, so a level-triggered listener stays readable and every
//! progress call would try again at once. Instead, the connection is accepted with
//! a process-wide reserve descriptor and closed at once (the technique libev
//! documents), so its peer learns at once that it was refused (its operations
//! fail) rather than waiting in the backlog for a descriptor that may never come.
//! When even that fails (or the failure is of memory), the listener leaves the
//! wait set for a back-off, growing from 10 ms to 1 s, and comes back when it ends
//! or when the endpoint closes a connection.

use crate::NAME;
use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_util::progress::Waiter;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Calls to `accept` on listeners of this process (see [`crate::accept_calls`]).
pub(crate) static ACCEPT_CALLS: AtomicU64 = AtomicU64::new(0);

/// The reserve descriptor, open while nobody needs it.
static RESERVE: Mutex<Option<File>> = Mutex::new(None);

/// First and longest back-off of a listener that cannot accept.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Least time between two warnings about dropped connections.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Whether an error means the process (or system) ran out of descriptors or
/// memory for a socket, rather than something about one connection.
pub(crate) fn out_of_descriptors(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// Open the reserve descriptor if it is not open (called when a listener is made).
pub(crate) fn reserve_init() {
    let mut r = RESERVE.lock().unwrap_or_else(|e| e.into_inner());
    if r.is_none() {
        *r = File::open("/dev/null").ok();
    }
}

/// What became of a connection taken with the reserve descriptor.
enum Refusal {
    /// Accepted and closed at once: the peer sees the close.
    Refused,
    /// Nothing was waiting (`accept` fails with `EMFILE` before it looks).
    Empty,
    /// No reserve, or the accept failed anyway.
    Failed,
}

/// Accept one connection with the reserve descriptor and close it at once.
fn refuse_one(l: &TcpListener) -> Refusal {
    let mut r = RESERVE.lock().unwrap_or_else(|e| e.into_inner());
    if r.take().is_none() {
        return Refusal::Failed;
    }
    ACCEPT_CALLS.fetch_add(1, Ordering::Relaxed);
    let out = match l.accept() {
        Ok(_) => Refusal::Refused, // dropped here: closed
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Refusal::Empty,
        Err(_) => Refusal::Failed,
    };
    *r = File::open("/dev/null").ok();
    out
}

/// One line per episode of descriptor starvation, however many failures it has.
#[derive(Debug, Default)]
pub(crate) struct Starvation {
    /// Failures in the current episode (none: not starved).
    failures: Option<u64>,
    /// Connections refused at once in this episode.
    refused: u64,
}

impl Starvation {
    /// A socket could not be made: the first failure of an episode is logged.
    pub(crate) fn fail(&mut self, what: &str, e: &std::io::Error) {
        match &mut self.failures {
            Some(n) => *n += 1,
            None => {
                fi_log!(
                    Level::Warn,
                    NAME,
                    "ep_ctrl",
                    "out of descriptors ({what}: {e}): connections to new peers fail with errors and \
                     incoming connections are refused until descriptors are freed (one line per episode; \
                     raise the limit, ulimit -n)"
                );
                self.failures = Some(1);
            }
        }
    }

    /// A socket was made: the episode (if any) is over.
    pub(crate) fn ok(&mut self) {
        if let Some(n) = self.failures.take() {
            fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "descriptors available again after {n} failures ({} incoming connections refused)",
                self.refused
            );
            self.refused = 0;
        }
    }
}

/// The accepting side of a listener.
#[derive(Debug)]
pub(crate) struct Acceptor {
    /// Out of the wait set until then.
    paused_until: Option<Instant>,
    backoff: Duration,
    /// Descriptor starvation, shared with the endpoint's connects.
    pub(crate) starved: Starvation,
    /// Connections dropped before they identified themselves.
    pub(crate) drops: DropReport,
}

impl Default for Acceptor {
    fn default() -> Self {
        Acceptor {
            paused_until: None,
            backoff: BACKOFF_MIN,
            starved: Starvation::default(),
            drops: DropReport::default(),
        }
    }
}

impl Acceptor {
    /// Accept what waits on `l` (out of the wait set `poll` while backing off),
    /// handing each connection to `take`.
    ///
    /// At most a quarter of `FI_TCP_HANDSHAKE_MAX` connections are taken per call
    /// (the rest wait for the next: the listener is level-triggered), so that a
    /// connection accepted in one progress call, whose hello is read in the next,
    /// is not pushed out by newer ones first during a flood.
    pub(crate) fn accept(
        &mut self,
        l: &TcpListener,
        poll: &Waiter,
        now: Instant,
        mut take: impl FnMut(TcpStream, SocketAddr),
    ) {
        if let Some(t) = self.paused_until {
            if now < t {
                return;
            }
            self.resume(l, poll);
        }
        let budget = (crate::config().handshake_max / 4).clamp(1, 256);
        for _ in 0..budget {
            ACCEPT_CALLS.fetch_add(1, Ordering::Relaxed);
            match l.accept() {
                Ok((s, peer)) => {
                    self.starved.ok();
                    self.backoff = BACKOFF_MIN;
                    take(s, peer);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                // This connection's trouble (reset before it was accepted): next.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO | libc::EINTR)) => {}
                Err(e) => {
                    let starved = out_of_descriptors(e.raw_os_error());
                    if starved {
                        self.starved.fail("accept", &e);
                        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                            match refuse_one(l) {
                                Refusal::Refused => {
                                    self.starved.refused += 1;
                                    continue;
                                }
                                // Drained: the listener is not readable any more.
                                Refusal::Empty => return,
                                Refusal::Failed => {}
                            }
                        }
                    } else {
                        fi_log!(
                            Level::Warn,
                            NAME,
                            "ep_ctrl",
                            "accept failed: {e}; retrying in {} ms",
                            self.backoff.as_millis()
                        );
                    }
                    // Out of the wait set for a while, so that progress does not spin.
                    poll.del_fd(l.as_raw_fd());
                    self.paused_until = Some(now + self.backoff);
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                    return;
                }
            }
        }
    }

    /// Put the listener back in the wait set now (a descriptor was freed).
    pub(crate) fn resume(&mut self, l: &TcpListener, poll: &Waiter) {
        if self.paused_until.take().is_some() {
            if let Err(e) = poll.add_fd(l.as_raw_fd()) {
                fi_log!(Level::Warn, NAME, "ep_ctrl", "listener back in the wait set failed: {e}");
            }
        }
    }

    /// Whether the listener is backing off.
    pub(crate) fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// When the back-off ends, if one runs.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.paused_until
    }
}

/// Connections dropped before their hello, reported at warn at most once a second
/// with counts, not once per connection.
#[derive(Debug, Default)]
pub(crate) struct DropReport {
    timed_out: u64,
    evicted: u64,
    last: Option<Instant>,
}

impl DropReport {
    /// A connection sent no complete hello in time.
    pub(crate) fn timed_out(&mut self) {
        self.timed_out += 1;
    }

    /// A connection was dropped for a newer one at the limit.
    pub(crate) fn evicted(&mut self) {
        self.evicted += 1;
    }

    /// Log what was dropped since the last line, unless a line went out less than
    /// a second ago (then later); `force` logs now whatever is pending.
    pub(crate) fn report(&mut self, now: Instant, what: &str, force: bool) {
        if self.timed_out + self.evicted == 0 {
            return;
        }
        if !force && self.last.is_some_and(|t| now.duration_since(t) < REPORT_EVERY) {
            return;
        }
        let c = crate::config();
        fi_log!(
            Level::Warn,
            NAME,
            "ep_ctrl",
            "{what}: closed {} connections that sent no hello within {} ms (FI_TCP_HANDSHAKE_TIMEOUT) and {} \
             that waited for one beyond the {} allowed (FI_TCP_HANDSHAKE_MAX)",
            self.timed_out,
            c.handshake_timeout.as_millis(),
            self.evicted,
            c.handshake_max
        );
        self.timed_out = 0;
        self.evicted = 0;
        self.last = Some(now);
    }
}

//! One side's link to its peer, shared by `fi_pingpong` and `fi_perf` and below
//! both [`crate::common`] and the tools: the failure type and its exit status,
//! control messages ([`crate::oob`]) sent and received as text, the fabric objects
//! of one side and their opening (connectionless, or MSG on an event queue),
//! completions read as failures, and the watchdog of a poll loop. It imports
//! nothing of this crate but [`crate::oob`].

use crate::oob::{Ctrl, PeerState};
use fabric::{
    Address, AddressVector, AvAttr, BindFlags, Completion, CompletionQueue, CqAttr, Domain, Endpoint, EpType, EqEvent,
    Error, EventQueue, Fabric, Info, PassiveEndpoint,
};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Empty polls between two looks at the clock.
const SPINS_PER_CLOCK: u32 = 256;
/// How often the watchdog looks at the control connection and the event queue.
const PEER_CHECK: Duration = Duration::from_millis(100);

/// A failure: the message for standard error and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// The message, printed on standard error as `<tool>: <msg>`.
    pub(crate) msg: String,
    /// The exit status.
    pub(crate) status: i32,
}

impl Failure {
    /// A failure of the tool itself, exit status 1.
    pub(crate) fn new(msg: impl Into<String>) -> Failure {
        Failure { msg: msg.into(), status: 1 }
    }

    /// A failed fabric call: `call` and the error, with the error number as the
    /// exit status (clamped to 1..=255), as libfabric's tools exit.
    pub(crate) fn fabric(call: &str, e: Error) -> Failure {
        Failure { msg: format!("{call}: {} ({e})", -e.errno()), status: e.errno().clamp(1, 255) }
    }
}

/// A result whose error is a [`Failure`].
pub(crate) type Res<T> = std::result::Result<T, Failure>;

/// Send one control message.
pub(crate) fn ctrl_send(ctrl: &mut Ctrl, msg: &str) -> Res<()> {
    ctrl.send(msg.as_bytes()).map_err(|e| Failure::new(format!("control connection: sending {msg:?}: {e}")))
}

/// Receive one control message, which must be text.
pub(crate) fn ctrl_recv(ctrl: &mut Ctrl) -> Res<String> {
    let m = ctrl.recv().map_err(|e| Failure::new(format!("control connection: {e}")))?;
    String::from_utf8(m).map_err(|_| Failure::new("control connection: the peer sent a malformed message"))
}

/// The value of `key=` in a space-separated message.
pub fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.split(' ').find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The name of an endpoint type in control messages and `-e`.
pub(crate) fn ep_name(t: EpType) -> &'static str {
    match t {
        EpType::Msg => "msg",
        EpType::Rdm => "rdm",
        EpType::Dgram => "dgram",
        _ => "unspec",
    }
}

/// The fabric objects of one side.
pub(crate) struct Objects {
    pub(crate) ep: Endpoint,
    pub(crate) cq: CompletionQueue,
    pub(crate) eq: Option<EventQueue>,
    pub(crate) av: Option<AddressVector>,
    _pep: Option<PassiveEndpoint>,
    _domain: Domain,
    _fabric: Fabric,
    pub(crate) info: Info,
}

/// Open fabric, domain, queue, address vector and endpoint for an RDM or DGRAM
/// entry, with a completion queue of these attributes.
pub(crate) fn open_connless_with(info: Info, cq_attr: CqAttr) -> Res<Objects> {
    let fabric = Fabric::open(&info).map_err(|e| Failure::fabric("fi_fabric", e))?;
    let domain = fabric.domain(&info).map_err(|e| Failure::fabric("fi_domain", e))?;
    let cq = domain.cq(cq_attr).map_err(|e| Failure::fabric("fi_cq_open", e))?;
    let av = domain.av(AvAttr { count: 2, ..Default::default() }).map_err(|e| Failure::fabric("fi_av_open", e))?;
    let ep = domain.endpoint(&info).map_err(|e| Failure::fabric("fi_endpoint", e))?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).map_err(|e| Failure::fabric("fi_ep_bind(cq)", e))?;
    ep.bind_av(&av).map_err(|e| Failure::fabric("fi_ep_bind(av)", e))?;
    ep.enable().map_err(|e| Failure::fabric("fi_enable", e))?;
    Ok(Objects { ep, cq, eq: None, av: Some(av), _pep: None, _domain: domain, _fabric: fabric, info })
}

/// Open domain, queues and endpoint for an MSG entry (the client's, or the one of a
/// connection request), bound to `eq`, with a completion queue of these
/// attributes.
pub(crate) fn open_msg_with(
    fabric: Fabric,
    eq: EventQueue,
    info: Info,
    pep: Option<PassiveEndpoint>,
    cq_attr: CqAttr,
) -> Res<Objects> {
    let domain = fabric.domain(&info).map_err(|e| Failure::fabric("fi_domain", e))?;
    let cq = domain.cq(cq_attr).map_err(|e| Failure::fabric("fi_cq_open", e))?;
    let ep = domain.endpoint(&info).map_err(|e| Failure::fabric("fi_endpoint", e))?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).map_err(|e| Failure::fabric("fi_ep_bind(cq)", e))?;
    ep.bind_eq(&eq).map_err(|e| Failure::fabric("fi_ep_bind(eq)", e))?;
    ep.enable().map_err(|e| Failure::fabric("fi_enable", e))?;
    Ok(Objects { ep, cq, eq: Some(eq), av: None, _pep: pep, _domain: domain, _fabric: fabric, info })
}

/// Wait for one event on `eq`, up to `timeout`, watching the control connection.
pub(crate) fn eq_wait(eq: &EventQueue, ctrl: &mut Ctrl, timeout: Duration, what: &str) -> Res<EqEvent> {
    let start = Instant::now();
    loop {
        match eq.sread(Some(PEER_CHECK)) {
            Ok(ev) => return Ok(ev),
            Err(Error::Again | Error::WaitTimedOut) => {}
            Err(Error::Avail) => {
                return Err(match eq.readerr() {
                    Ok(e) => Failure::new(format!("{what}: {} ({})", e.err, -e.err.errno())),
                    Err(e) => Failure::fabric("fi_eq_readerr", e),
                })
            }
            Err(e) => return Err(Failure::fabric("fi_eq_sread", e)),
        }
        match ctrl.peer_state() {
            PeerState::Alive => {}
            PeerState::Gone => return Err(Failure::new(format!("{what}: the peer closed the control connection"))),
            PeerState::Failed(why) => return Err(Failure::new(format!("{what}: the peer failed: {why}"))),
        }
        if start.elapsed() >= timeout {
            return Err(Failure::new(format!("{what}: no event for {:.0} s", timeout.as_secs_f64())));
        }
    }
}

/// The server's address as the client should use it: an unspecified IP (a server
/// bound to every address) becomes the address the control connection reached.
pub(crate) fn connect_addr(srv: &Address, ctrl: &Ctrl) -> Address {
    match srv.sockaddr() {
        Some(sa) if sa.ip().is_unspecified() => {
            let ip: IpAddr = ctrl.peer_addr().map(|p| p.ip()).unwrap_or(sa.ip());
            Address::Sockaddr(SocketAddr::new(ip, sa.port()))
        }
        _ => srv.clone(),
    }
}

/// The next completion of `cq`, if any: an error completion is the failure of its
/// operation (`op` of its context), as is a failed read of the queue.
#[inline]
pub(crate) fn next_completion(cq: &CompletionQueue, op: impl Fn(u64) -> &'static str) -> Res<Option<Completion>> {
    match cq.next() {
        Ok(Some(Ok(c))) => Ok(Some(c)),
        Ok(Some(Err(ce))) => Err(Failure {
            msg: format!("{} failed: {} ({}){}", op(ce.context), ce, -ce.err.errno(), peer_hint(ce.err)),
            status: ce.err.errno().clamp(1, 255),
        }),
        Ok(None) => Ok(None),
        Err(e) => Err(Failure::fabric("fi_cq_read", e)),
    }
}

/// What an error completion says about the peer, appended to its message.
pub(crate) fn peer_hint(e: Error) -> &'static str {
    match e {
        Error::ConnReset | Error::Shutdown | Error::NotConn | Error::ConnAborted | Error::ConnRefused => {
            ": the peer is gone"
        }
        _ => "",
    }
}

/// The watchdog of a poll loop: the time of the last progress, and looks at the
/// clock, the control connection and the event queue every so often.
pub(crate) struct Watch {
    timeout: Duration,
    spins: u32,
    /// Something completed since the clock was last read: the next look at the
    /// clock restarts the timeout from there.
    progressed: bool,
    last_progress: Instant,
    last_peer_check: Instant,
}

impl Watch {
    /// A watchdog that fails after `timeout` without progress.
    pub(crate) fn new(timeout: Duration) -> Watch {
        let now = Instant::now();
        Watch { timeout, spins: 0, progressed: false, last_progress: now, last_peer_check: now }
    }

    /// Something completed: restart the clock. The clock itself is read only at
    /// the next periodic look (every few hundred empty polls), not on every
    /// completion, which in a ping-pong would be once per message: the timeout then
    /// runs from that look, a few hundred polls late at most.
    #[inline]
    pub(crate) fn progress(&mut self) {
        self.spins = 0;
        self.progressed = true;
    }

    /// An empty poll: every few hundred, look at the clock; every 100 ms, at the
    /// peer.
    #[inline]
    pub(crate) fn tick_checked(&mut self, ctrl: Option<&mut Ctrl>, eq: Option<&EventQueue>, what: &str) -> Res<()> {
        self.spins += 1;
        if self.spins < SPINS_PER_CLOCK {
            return Ok(());
        }
        self.spins = 0;
        self.check(ctrl, eq, what)
    }

    #[cold]
    fn check(&mut self, ctrl: Option<&mut Ctrl>, eq: Option<&EventQueue>, what: &str) -> Res<()> {
        let now = Instant::now();
        if self.progressed {
            self.progressed = false;
            self.last_progress = now;
        }
        if now.duration_since(self.last_progress) >= self.timeout {
            return Err(Failure {
                msg: format!(
                    "no progress for {:.0} s waiting for {what}: is the peer alive? (--timeout sets the limit)",
                    self.timeout.as_secs_f64()
                ),
                status: Error::TimedOut.errno(),
            });
        }
        if now.duration_since(self.last_peer_check) < PEER_CHECK {
            return Ok(());
        }
        self.last_peer_check = now;
        if let Some(eq) = eq {
            match eq.read() {
                Ok(EqEvent::Shutdown { .. }) => {
                    return Err(Failure::new(format!("the peer shut the connection down while waiting for {what}")))
                }
                Ok(ev) => return Err(Failure::new(format!("unexpected event {} while waiting for {what}", ev.name()))),
                Err(Error::Again) => {}
                Err(Error::Avail) => {
                    let why = eq.readerr().map(|e| e.err.to_string()).unwrap_or_else(|e| e.to_string());
                    return Err(Failure::new(format!("connection error while waiting for {what}: {why}")));
                }
                Err(e) => return Err(Failure::fabric("fi_eq_read", e)),
            }
        }
        match ctrl.map(|c| c.peer_state()) {
            None | Some(PeerState::Alive) => Ok(()),
            Some(PeerState::Gone) => {
                Err(Failure::new(format!("the peer closed the control connection while waiting for {what}")))
            }
            Some(PeerState::Failed(why)) => Err(Failure::new(format!("the peer failed: {why}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls enough empty times for the watchdog to look at the clock once.
    fn look(w: &mut Watch) -> Res<()> {
        for _ in 0..SPINS_PER_CLOCK {
            w.tick_checked(None, None, "a test")?;
        }
        Ok(())
    }

    #[test]
    fn watchdog_fails_without_progress() {
        let mut w = Watch::new(Duration::from_millis(20));
        look(&mut w).expect("within the timeout");
        std::thread::sleep(Duration::from_millis(40));
        let f = look(&mut w).expect_err("past the timeout");
        assert!(f.msg.contains("no progress"), "{}", f.msg);
    }

    #[test]
    fn a_completion_restarts_the_timeout_without_reading_the_clock() {
        let mut w = Watch::new(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(40));
        // The completion came just now: the next look must not count the time before it.
        w.progress();
        look(&mut w).expect("a completion restarted the timeout");
        std::thread::sleep(Duration::from_millis(40));
        look(&mut w).expect_err("nothing completed since");
    }
}

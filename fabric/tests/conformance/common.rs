//! Set-up and waiting helpers shared by every area of the suite: finding the
//! provider's entry, RDM and MSG pairs (each side with its own fabric, domain, CQ,
//! AV or EQ), and waits that drive the other side's progress and fail the test
//! when nothing happens within a generous watchdog.

use fabric::*;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one wait may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(60);
/// How long a whole test may take.
pub const TEST_WATCHDOG: Duration = Duration::from_secs(300);
/// How long to keep driving progress when checking that nothing arrives.
pub const QUIET: Duration = Duration::from_millis(300);
/// Filler of receive buffers, to see bytes written past a message.
pub const FILL: u8 = 0xEE;

/// Run one test of provider `prov` on its own thread under the test watchdog: a
/// hang fails the test. The thread takes the test's name as cargo shows it,
/// `<provider>::<area>::<test>` (libtest's name for the thread that calls this),
/// which [`skip`] reads.
pub fn run(prov: &'static str, f: fn(&'static str)) {
    let name = match std::thread::current().name() {
        Some(n) if n.strip_prefix(prov).is_some_and(|rest| rest.starts_with("::")) => n.to_owned(),
        other => format!("{prov}::{}", other.unwrap_or("?")),
    };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            f(prov);
            let _ = tx.send(());
        })
        .expect("spawn the test thread");
    match rx.recv_timeout(TEST_WATCHDOG) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("watchdog: {name} did not finish within {TEST_WATCHDOG:?}: it hangs")
        }
    }
}

/// Two tests of one body for RDM and MSG endpoints:
/// `rdm_and_msg!(sizes: rdm_sizes, msg_sizes)` makes the tests `rdm_sizes` and
/// `msg_sizes`, which [`run`] `sizes(prov, EpType::Rdm)` and
/// `sizes(prov, EpType::Msg)` against the provider of the enclosing suite. (To
/// mark one of them `#[ignore]`, write the two tests out.)
macro_rules! rdm_and_msg {
    ($body:ident: $rdm:ident, $msg:ident) => {
        #[test]
        fn $rdm() {
            $crate::common::run(super::PROV, |prov| $body(prov, fabric::EpType::Rdm));
        }

        #[test]
        fn $msg() {
            $crate::common::run(super::PROV, |prov| $body(prov, fabric::EpType::Msg));
        }
    };
}
pub(crate) use rdm_and_msg;

/// Say why a test (or part of one) does not run: the provider's `Info` says what
/// it needs is absent. Reported (and counted) by `fabric_testkit`, never a
/// failure; a provider that offers nothing at all here is another matter
/// ([`find_info_with`]).
pub fn skip(why: impl fmt::Display) {
    // The test's thread is named `<provider>::<area>::<test>` (`run`).
    let name = std::thread::current().name().map(str::to_owned).unwrap_or_default();
    let prov = name.split("::").next().unwrap_or("?");
    fabric_testkit::absent(prov, why);
}

/// A patterned payload: every byte depends on its offset (shifts, swaps and
/// repeated blocks show) and on `seed` (messages are told apart).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = i.wrapping_add(seed.wrapping_mul(0x9E37_79B9));
            (x ^ (x >> 8) ^ (x >> 16) ^ (x >> 24)).wrapping_add(seed) as u8
        })
        .collect()
}

/// Byte-exact comparison that reports the first difference, not megabytes.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

/// The outcome of one operation as read from a completion queue.
pub type Res = std::result::Result<Completion, CompletionError>;

/// Something whose polling makes progress: a completion queue (whatever it yields
/// is kept for later), an event queue (peeked), a counter (read).
pub trait Drive: Sync {
    /// Make progress once.
    fn drive(&self);
}

/// A completion queue plus the completions read while driving progress for
/// another wait, kept in order for this queue's own waits.
pub struct Cq {
    pub name: &'static str,
    pub cq: CompletionQueue,
    stash: Mutex<VecDeque<Res>>,
}

impl Cq {
    pub fn new(name: &'static str, cq: CompletionQueue) -> Cq {
        Cq { name, cq, stash: Mutex::new(VecDeque::new()) }
    }

    fn stash(&self) -> std::sync::MutexGuard<'_, VecDeque<Res>> {
        self.stash.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read one outcome from the queue itself (progressing it).
    fn read_raw(&self) -> Option<Res> {
        self.cq.next().unwrap_or_else(|e| panic!("cq {}: read failed: {e}", self.name))
    }

    /// The next outcome, if any: kept ones first.
    pub fn poll(&self) -> Option<Res> {
        if let Some(r) = self.stash().pop_front() {
            return Some(r);
        }
        self.read_raw()
    }

    /// Whether an outcome is kept or readable now (keeping it).
    pub fn has_entry(&self) -> bool {
        if !self.stash().is_empty() {
            return true;
        }
        match self.read_raw() {
            Some(r) => {
                self.stash().push_back(r);
                true
            }
            None => false,
        }
    }
}

impl Drive for Cq {
    fn drive(&self) {
        if let Some(r) = self.read_raw() {
            self.stash().push_back(r);
        }
    }
}

impl Drive for EventQueue {
    fn drive(&self) {
        let _ = self.peek();
    }
}

impl Drive for Counter {
    fn drive(&self) {
        let _ = self.read();
    }
}

fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins % 64 == 0 {
        std::thread::sleep(Duration::from_micros(200));
    } else {
        std::thread::yield_now();
    }
}

/// Wait for the next outcome on `cq`, driving `others` meanwhile (in one thread,
/// the peer's progress happens only when its queues are read). Fails the test after
/// `timeout` instead of hanging.
#[track_caller]
pub fn wait_for(cq: &Cq, others: &[&dyn Drive], timeout: Duration) -> Res {
    let start = Instant::now();
    let mut spins = 0;
    loop {
        if let Some(r) = cq.poll() {
            return r;
        }
        for o in others {
            o.drive();
        }
        if start.elapsed() > timeout {
            panic!(
                "watchdog: no completion on cq {} within {timeout:?} ({} operations in flight)",
                cq.name,
                cq.cq.in_flight()
            );
        }
        pause(&mut spins);
    }
}

/// Drive everything for `dur`; what the queues yield is kept.
pub fn settle(drivers: &[&dyn Drive], dur: Duration) {
    let start = Instant::now();
    let mut spins = 0;
    while start.elapsed() < dur {
        for d in drivers {
            d.drive();
        }
        pause(&mut spins);
    }
}

/// Drive everything for [`QUIET`] and fail if `cq` yields anything.
#[track_caller]
pub fn assert_quiet(cq: &Cq, drivers: &[&dyn Drive], what: &str) {
    settle(drivers, QUIET);
    if let Some(r) = cq.poll() {
        panic!("{what}: unexpected outcome on cq {}: {r:?}", cq.name);
    }
}

/// Wait for the next event on `eq` (or its next error entry), driving `others`.
#[track_caller]
pub fn wait_event(
    eq: &EventQueue,
    others: &[&dyn Drive],
    timeout: Duration,
) -> std::result::Result<EqEvent, EqErrEntry> {
    let start = Instant::now();
    let mut spins = 0;
    loop {
        match eq.read() {
            Ok(ev) => return Ok(ev),
            Err(Error::Avail) => match eq.readerr() {
                Ok(e) => return Err(e),
                Err(Error::Again) => {}
                Err(e) => panic!("eq readerr after FI_EAVAIL failed: {e}"),
            },
            Err(Error::Again) => {}
            Err(e) => panic!("eq read failed: {e}"),
        }
        for o in others {
            o.drive();
        }
        if start.elapsed() > timeout {
            panic!("watchdog: no event within {timeout:?}");
        }
        pause(&mut spins);
    }
}

/// Expect a success.
#[track_caller]
pub fn ok(r: Res, what: &str) -> Completion {
    match r {
        Ok(c) => c,
        Err(e) => panic!("{what}: error completion {} (context {}): {e:?}", e.err, e.context),
    }
}

/// Expect an error completion.
#[track_caller]
pub fn err(r: Res, what: &str) -> CompletionError {
    match r {
        Err(e) => e,
        Ok(c) => panic!("{what}: expected an error completion, got a success: {c:?}"),
    }
}

/// Whether a refused remote access ends the connection: an RC queue pair (a
/// verbs MSG endpoint, `FI_PROTO_RDMA_CM_IB_RC`) goes to the error state on a
/// remote access error, by the InfiniBand specification, and an iWARP one
/// (`FI_PROTO_IWARP`) is ended by the target's TERMINATE (RDMAP); there is
/// nothing left to check the connection's survival on.
pub fn access_error_breaks_connection(info: &Info) -> bool {
    info.ep_attr.ep_type == EpType::Msg
        && matches!(info.ep_attr.protocol, fabric::Protocol::RdmaCmIbRc | fabric::Protocol::Iwarp)
}

/// Whether the entry's domain is an iWARP device (its MSG entry's protocol is
/// `FI_PROTO_IWARP`; an RDM entry over it says `FI_PROTO_RXM`).
pub fn is_iwarp(info: &Info) -> bool {
    let msg = Hints::new().provider(&info.fabric_attr.prov_name).ep_type(EpType::Msg);
    getinfo(&msg).is_ok_and(|v| {
        v.iter().any(|i| i.domain_attr.name == info.domain_attr.name && i.ep_attr.protocol == fabric::Protocol::Iwarp)
    })
}

/// The first entry of `prov` for an endpoint type and caps: on the loopback
/// interface when the provider takes a node (sockets providers), else the first it
/// offers. `None` (and a `skipped:` line) when it offers none.
pub fn find_info(prov: &str, ep_type: EpType, caps: Caps) -> Option<Info> {
    find_info_with(prov, ep_type, caps, |h| h)
}

/// [`find_info`] with more hints.
pub fn find_info_with(prov: &str, ep_type: EpType, caps: Caps, more: impl Fn(Hints) -> Hints) -> Option<Info> {
    let base = more(Hints::new().provider(prov).ep_type(ep_type).caps(caps));
    let local = base.clone().node("127.0.0.1").source(true);
    if let Ok(mut v) = getinfo(&local) {
        if !v.is_empty() {
            return Some(v.remove(0));
        }
    }
    match getinfo(&base) {
        Ok(mut v) if !v.is_empty() => Some(v.remove(0)),
        Ok(_) | Err(Error::NoData) => {
            // Nothing at all from the provider is a missing environment (no
            // device, say), which fails where the provider is required
            // (`FABRIC_REQUIRE`); else its entries lack what the test needs.
            if !getinfo(&Hints::new().provider(prov)).is_ok_and(|v| !v.is_empty()) {
                fabric_testkit::skip(prov, format!("{prov} offers no endpoint at all here"));
            } else {
                skip(format!("{prov} offers no {ep_type} endpoint with {caps:?}"));
            }
            None
        }
        Err(e) => panic!("getinfo({prov}, {ep_type}, {caps:?}) failed: {e}"),
    }
}

/// Whether the entry's addresses are socket addresses (sockets providers), for
/// the tests of node/service resolution.
pub fn is_sockaddr(info: &Info) -> bool {
    matches!(info.addr_format, AddrFormat::Sockaddr | AddrFormat::SockaddrIn | AddrFormat::SockaddrIn6)
}

/// How a side is built.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// The completion queue's attributes.
    pub cq: CqAttr,
    /// Bind a counter for transmit and receive.
    pub counter: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts { cq: CqAttr { format: CqFormat::Tagged, ..Default::default() }, counter: false }
    }
}

/// One endpoint with its own queues. Fields drop in order: the endpoint first.
pub struct Side {
    pub ep: Endpoint,
    pub cq: Cq,
    pub av: Option<AddressVector>,
    pub eq: Option<EventQueue>,
    pub cntr: Option<Counter>,
    pub domain: Domain,
}

impl Side {
    /// What to drive for this side's progress.
    pub fn drivers(&self) -> Vec<&dyn Drive> {
        let mut v: Vec<&dyn Drive> = vec![&self.cq];
        if let Some(eq) = &self.eq {
            v.push(eq);
        }
        v
    }
}

/// Whether the provider opens counters on this entry's domain (`None`: skipped).
pub fn counters_offered(info: &Info) -> Option<()> {
    let f = Fabric::open(info).expect("open fabric");
    let d = f.domain(info).expect("open domain");
    match d.counter() {
        Ok(_) => Some(()),
        Err(e) => {
            skip(format!("counters not offered: {e}"));
            None
        }
    }
}

fn bind_common(name: &'static str, domain: &Domain, ep: &Endpoint, o: Opts) -> (Cq, Option<Counter>) {
    let cq = domain.cq(o.cq).expect("open cq");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
    let cntr = o.counter.then(|| {
        let c = domain.counter().expect("open counter");
        ep.bind_counter(&c, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind counter");
        c
    });
    (Cq::new(name, cq), cntr)
}

/// An enabled RDM endpoint with its own fabric, domain, CQ and AV.
pub fn rdm_side(name: &'static str, info: &Info, o: Opts) -> Side {
    let fabric = Fabric::open(info).expect("open fabric");
    let domain = fabric.domain(info).expect("open domain");
    let av = domain.av(AvAttr::default()).expect("open av");
    let ep = domain.endpoint(info).expect("open endpoint");
    let (cq, cntr) = bind_common(name, &domain, &ep, o);
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    Side { ep, cq, av: Some(av), eq: None, cntr, domain }
}

/// `n` RDM endpoints, each knowing every other (and itself) in its AV.
pub struct Group {
    pub info: Info,
    pub sides: Vec<Side>,
    /// `addr[i][j]`: side `j` in side `i`'s AV.
    pub addr: Vec<Vec<FiAddr>>,
}

impl Group {
    pub fn new(prov: &str, caps: Caps, opts: &[Opts]) -> Option<Group> {
        Group::from_info(find_info(prov, EpType::Rdm, caps)?, opts)
    }

    pub fn from_info(info: Info, opts: &[Opts]) -> Option<Group> {
        if opts.iter().any(|o| o.counter) {
            counters_offered(&info)?;
        }
        const NAMES: [&str; 4] = ["a", "b", "c", "d"];
        let sides: Vec<Side> = opts.iter().enumerate().map(|(i, o)| rdm_side(NAMES[i], &info, *o)).collect();
        let names: Vec<Address> = sides.iter().map(|s| s.ep.name().expect("endpoint name")).collect();
        let addr = sides
            .iter()
            .map(|s| {
                let v = s.av.as_ref().expect("rdm side has an av").insert(&names).expect("av insert");
                assert_eq!(v.len(), names.len(), "one handle per address");
                v
            })
            .collect();
        Some(Group { info, sides, addr })
    }

    pub fn drivers(&self) -> Vec<&dyn Drive> {
        self.sides.iter().map(|s| &s.cq as &dyn Drive).collect()
    }
}

/// A passive endpoint listening, with its event queue and fabric.
pub struct Listener {
    pub pep: PassiveEndpoint,
    pub eq: EventQueue,
    pub fabric: Fabric,
}

/// Listen on the entry's source address.
pub fn listen(info: &Info) -> Listener {
    let fabric = Fabric::open(info).expect("open fabric");
    let eq = fabric.eq(EqAttr::default()).expect("open eq");
    let pep = fabric.passive_ep(info).expect("open passive endpoint");
    pep.bind_eq(&eq).expect("bind eq to pep");
    pep.listen().expect("listen");
    Listener { pep, eq, fabric }
}

/// An enabled, unconnected MSG endpoint with its own EQ and CQ, on `fabric` (the
/// listener's, for an accepting side) or on a fabric of its own.
pub fn msg_side(name: &'static str, fabric: Option<&Fabric>, info: &Info, o: Opts) -> Side {
    let fabric = match fabric {
        Some(f) => f.clone(),
        None => Fabric::open(info).expect("open fabric"),
    };
    let domain = fabric.domain(info).expect("open domain");
    let eq = fabric.eq(EqAttr::default()).expect("open eq");
    let ep = domain.endpoint(info).expect("open endpoint");
    let (cq, cntr) = bind_common(name, &domain, &ep, o);
    ep.bind_eq(&eq).expect("bind eq");
    ep.enable().expect("enable");
    Side { ep, cq, av: None, eq: Some(eq), cntr, domain }
}

/// Two connected or addressed endpoints: `a` sends to `b` through `a_to_b`. For
/// MSG, `a` is the client and `b` the server's accepted endpoint.
pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub a_to_b: FiAddr,
    pub b_to_a: FiAddr,
    pub info: Info,
    pub ep_type: EpType,
    pub listener: Option<Listener>,
}

impl Pair {
    /// A pair of the given type, or `None` (skipped) when the provider offers no
    /// such endpoint with `caps`.
    pub fn new(prov: &str, ep_type: EpType, caps: Caps) -> Option<Pair> {
        Pair::with(prov, ep_type, caps, Opts::default(), Opts::default())
    }

    pub fn with(prov: &str, ep_type: EpType, caps: Caps, oa: Opts, ob: Opts) -> Option<Pair> {
        Pair::from_info(find_info(prov, ep_type, caps)?, oa, ob)
    }

    /// A pair of endpoints of an entry.
    pub fn from_info(info: Info, oa: Opts, ob: Opts) -> Option<Pair> {
        let ep_type = info.ep_attr.ep_type;
        match ep_type {
            EpType::Rdm => {
                let mut g = Group::from_info(info, &[oa, ob])?;
                let b = g.sides.pop().expect("two sides");
                let a = g.sides.pop().expect("two sides");
                Some(Pair { a, b, a_to_b: g.addr[0][1], b_to_a: g.addr[1][0], info: g.info, ep_type, listener: None })
            }
            EpType::Msg => msg_pair(info, oa, ob),
            t => panic!("no pair of type {t}"),
        }
    }

    pub fn drivers(&self) -> Vec<&dyn Drive> {
        let mut v = self.a.drivers();
        v.extend(self.b.drivers());
        if let Some(l) = &self.listener {
            v.push(&l.eq);
        }
        v
    }

    #[track_caller]
    pub fn next_a(&self) -> Res {
        wait_for(&self.a.cq, &self.drivers(), WAIT)
    }

    #[track_caller]
    pub fn next_b(&self) -> Res {
        wait_for(&self.b.cq, &self.drivers(), WAIT)
    }

    #[track_caller]
    pub fn ok_a(&self) -> Completion {
        ok(self.next_a(), "a")
    }

    #[track_caller]
    pub fn ok_b(&self) -> Completion {
        ok(self.next_b(), "b")
    }

    #[track_caller]
    pub fn err_a(&self) -> CompletionError {
        err(self.next_a(), "a")
    }

    #[track_caller]
    pub fn err_b(&self) -> CompletionError {
        err(self.next_b(), "b")
    }

    /// Drive both sides for a while (completions are kept).
    pub fn settle(&self, dur: Duration) {
        settle(&self.drivers(), dur)
    }

    /// The source a receive at `b` should report for a message from `a`.
    #[track_caller]
    pub fn check_src_at_b(&self, c: &Completion) {
        if self.ep_type == EpType::Rdm && self.info.caps.contains(Caps::SOURCE) {
            assert_eq!(c.src, self.b_to_a, "source of a message from a, as b's AV knows it");
        }
    }

    /// One message each way, so that connections made on demand exist.
    pub fn warm_up(&self) {
        for (from, to, dest) in [(&self.a, &self.b, self.a_to_b), (&self.b, &self.a, self.b_to_a)] {
            to.ep.recv(Buf::new(16), FiAddr::UNSPEC, 0xAAAA).expect("warm-up recv");
            from.ep.send(Buf::from(b"warm-up"), dest, 0xBBBB).expect("warm-up send");
            let d = self.drivers();
            let r = ok(wait_for(&to.cq, &d, WAIT), "warm-up receive");
            assert_eq!(r.bytes(), b"warm-up");
            ok(wait_for(&from.cq, &d, WAIT), "warm-up send");
        }
    }
}

/// Connect a client to a listener: client `a`, accepted server `b`.
fn msg_pair(info: Info, oa: Opts, ob: Opts) -> Option<Pair> {
    if oa.counter || ob.counter {
        counters_offered(&info)?;
    }
    let l = listen(&info);
    let addr = l.pep.name().expect("listener name");
    let a = msg_side("a", None, &info, oa);
    a.ep.connect(&addr, b"").expect("connect");
    let (req, _) = expect_connreq(&l, &a.drivers());
    let b = msg_side("b", Some(&l.fabric), &req, ob);
    b.ep.accept(b"").expect("accept");
    let mut d = a.drivers();
    d.extend(b.drivers());
    d.push(&l.eq);
    expect_connected(a.eq.as_ref().expect("msg side has an eq"), &d, a.ep.id());
    expect_connected(b.eq.as_ref().expect("msg side has an eq"), &d, b.ep.id());
    Some(Pair { a, b, a_to_b: FiAddr::UNSPEC, b_to_a: FiAddr::UNSPEC, info, ep_type: EpType::Msg, listener: Some(l) })
}

/// Wait for a connection request on the listener: its entry and data.
#[track_caller]
pub fn expect_connreq(l: &Listener, others: &[&dyn Drive]) -> (Info, Vec<u8>) {
    match wait_event(&l.eq, others, WAIT) {
        Ok(EqEvent::ConnReq { fid, info, data }) => {
            assert_eq!(fid, l.pep.id(), "connection request names the passive endpoint");
            assert!(info.handle.is_some(), "connection request entry has a handle");
            (*info, data)
        }
        other => panic!("expected FI_CONNREQ, got {other:?}"),
    }
}

/// Wait for `Connected` on an endpoint's EQ: the peer's data.
#[track_caller]
pub fn expect_connected(eq: &EventQueue, others: &[&dyn Drive], fid: u64) -> Vec<u8> {
    match wait_event(eq, others, WAIT) {
        Ok(EqEvent::Connected { fid: f, data }) => {
            assert_eq!(f, fid, "FI_CONNECTED names the endpoint");
            data
        }
        other => panic!("expected FI_CONNECTED, got {other:?}"),
    }
}

/// Run `f` while a second thread keeps driving `drivers` (a peer's progress for a
/// blocking call of this thread).
pub fn with_driver<R>(drivers: &[&dyn Drive], f: impl FnOnce() -> R) -> R {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut spins = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for d in drivers {
                    d.drive();
                }
                pause(&mut spins);
            }
        });
        // Stop the driver even if `f` panics, or the scope would wait for it forever.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        f()
    })
}

/// An enabled endpoint like [`rdm_side`] or [`msg_side`] (default [`Opts`]), with
/// `setup(&domain, &ep)` called after the usual bindings and before `enable`: for
/// bindings that must precede it, such as counters of remote accesses.
fn side_with_setup(
    name: &'static str,
    fabric: Option<&Fabric>,
    info: &Info,
    setup: &dyn Fn(&Domain, &Endpoint),
) -> Side {
    let fabric = match fabric {
        Some(f) => f.clone(),
        None => Fabric::open(info).expect("open fabric"),
    };
    let domain = fabric.domain(info).expect("open domain");
    let ep = domain.endpoint(info).expect("open endpoint");
    let (cq, cntr) = bind_common(name, &domain, &ep, Opts::default());
    let (av, eq) = match info.ep_attr.ep_type {
        EpType::Msg => {
            let eq = fabric.eq(EqAttr::default()).expect("open eq");
            ep.bind_eq(&eq).expect("bind eq");
            (None, Some(eq))
        }
        _ => {
            let av = domain.av(AvAttr::default()).expect("open av");
            ep.bind_av(&av).expect("bind av");
            (Some(av), None)
        }
    };
    setup(&domain, &ep);
    ep.enable().expect("enable");
    Side { ep, cq, av, eq, cntr, domain }
}

impl Pair {
    /// A pair of the given type (default [`Opts`]) whose `b` gets `setup_b(&domain,
    /// &ep)` before it is enabled; `None` (skipped) when the provider offers no such
    /// endpoint with `caps`.
    pub fn with_setup(prov: &str, ep_type: EpType, caps: Caps, setup_b: &dyn Fn(&Domain, &Endpoint)) -> Option<Pair> {
        let info = find_info(prov, ep_type, caps)?;
        let ep_type = info.ep_attr.ep_type;
        match ep_type {
            EpType::Rdm => {
                let a = rdm_side("a", &info, Opts::default());
                let b = side_with_setup("b", None, &info, setup_b);
                let insert = |s: &Side| {
                    let names = [a.ep.name().expect("endpoint name"), b.ep.name().expect("endpoint name")];
                    let v = s.av.as_ref().expect("rdm side has an av").insert(&names).expect("av insert");
                    assert_eq!(v.len(), 2, "one handle per address");
                    v
                };
                let (in_a, in_b) = (insert(&a), insert(&b));
                Some(Pair { a_to_b: in_a[1], b_to_a: in_b[0], a, b, info, ep_type, listener: None })
            }
            EpType::Msg => {
                let l = listen(&info);
                let addr = l.pep.name().expect("listener name");
                let a = msg_side("a", None, &info, Opts::default());
                a.ep.connect(&addr, b"").expect("connect");
                let (req, _) = expect_connreq(&l, &a.drivers());
                let b = side_with_setup("b", Some(&l.fabric), &req, setup_b);
                b.ep.accept(b"").expect("accept");
                let mut d = a.drivers();
                d.extend(b.drivers());
                d.push(&l.eq);
                expect_connected(a.eq.as_ref().expect("msg side has an eq"), &d, a.ep.id());
                expect_connected(b.eq.as_ref().expect("msg side has an eq"), &d, b.ep.id());
                Some(Pair {
                    a,
                    b,
                    a_to_b: FiAddr::UNSPEC,
                    b_to_a: FiAddr::UNSPEC,
                    info,
                    ep_type: EpType::Msg,
                    listener: Some(l),
                })
            }
            t => panic!("no pair of type {t}"),
        }
    }
}

// Memory regions, for the RMA and atomic areas.

pub const MIB: usize = 1 << 20;

/// Remote read and write.
pub const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

/// A region registered at a target, and how a peer reaches its bytes.
pub struct Region {
    pub mr: MemoryRegion,
    /// The remote address of byte 0: the registered address with
    /// `FI_MR_VIRT_ADDR`, else 0 (peers give offsets).
    pub base: u64,
}

/// Keys asked for on domains without `FI_MR_PROV_KEY`.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0x5EED_0001);

impl Region {
    /// Register `init` on `side`'s domain with `access`.
    pub fn new(side: &Side, init: Vec<u8>, access: MrAccess) -> Region {
        let mode = side.domain.info().domain_attr.mr_mode;
        let buf = Buf::from(init);
        let mr = if mode.contains(MrMode::PROV_KEY) {
            side.domain.register(buf, access)
        } else {
            side.domain.register_with_key(buf, access, NEXT_KEY.fetch_add(1, Ordering::Relaxed))
        }
        .expect("register a memory region");
        let base = mr.remote().addr;
        Region { mr, base }
    }

    pub fn key(&self) -> u64 {
        self.mr.key()
    }

    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// Where byte `off` of the region is, for a peer (`off` may lie outside).
    pub fn at(&self, off: u64) -> Remote {
        Remote { addr: self.base.wrapping_add(off), key: self.key() }
    }

    /// Deregister: the region's bytes.
    pub fn close(self) -> Vec<u8> {
        let len = self.len();
        let mut b = self.mr.close().expect("close the memory region");
        assert_eq!(b.capacity(), len, "the registered buffer comes back");
        b.set_len(len).expect("within capacity");
        b.into_vec()
    }
}

/// A key none of `regions` has (nor 0 or `FI_KEY_NOTAVAIL`).
pub fn unknown_key(regions: &[&Region]) -> u64 {
    let mut k = regions.first().map_or(1, |r| r.key()) ^ 0x9E37_79B9_7F4A_7C15;
    while k == 0 || k == u64::MAX || regions.iter().any(|r| r.key() == k) {
        k = k.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    }
    k
}

/// The remote address `delta` bytes from the region's byte 0 (may wrap).
pub fn beside(r: &Region, delta: i64) -> Remote {
    Remote { addr: r.base.wrapping_add_signed(delta), key: r.key() }
}

/// Run this test binary again in a child process with `var` set to `value`, on
/// the tests `args` select (filters and `--skip`s, two threads), for a setting
/// read once per process; assert that the child passed, and ran at least
/// `min_passed` tests, and print its summary line after `what`.
pub fn rerun_in_child(args: &[&str], (var, value): (&str, &str), min_passed: usize, what: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(args)
        .arg("--test-threads=2")
        .env(var, value)
        .output()
        .expect("run the tests in a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    let summary = stdout.lines().find(|l| l.starts_with("test result:")).unwrap_or_default();
    println!("{what}: {summary}");
    let passed: usize = summary
        .split(';')
        .find_map(|p| p.trim().strip_prefix("test result: ok.").map(str::trim))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= min_passed, "{what}: the child ran the tests ({summary})");
}

//! DGRAM endpoints of the udp provider through the public API, on loopback: sends
//! and receives, the source of a datagram (in the AV or not), truncation, drops
//! when no receive is posted (the sender never waits), the size limit that the
//! MTU sets, inject, multicast groups, and blocking waits.

#![cfg(feature = "udp")]

use fabric::{
    Address, AddressVector, AvAttr, BindFlags, Buf, Caps, Completion, CompletionError, CompletionQueue, CqAttr, Domain,
    Endpoint, EpType, Error, Fabric, FiAddr, Hints, Info, OpFlags, SendMsg,
};
use std::time::{Duration, Instant};

/// How long a wait may take before the test fails instead of hanging.
const WAIT: Duration = Duration::from_secs(30);
/// How long to keep driving progress when checking that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);

struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    info: Info,
    _domain: Domain,
    _fabric: Fabric,
}

/// The udp DGRAM entry on IPv4 loopback.
fn lo_info() -> Info {
    let h = Hints::new().provider("udp").ep_type(EpType::Dgram).node("127.0.0.1").source(true);
    let v = fabric::getinfo(&h).expect("udp offers DGRAM on loopback");
    v.into_iter().next().expect("one entry")
}

/// A DGRAM endpoint on loopback, bound to `name` if given.
fn side_named(name: Option<&str>) -> Side {
    let info = lo_info();
    let fabric = Fabric::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(CqAttr::default()).unwrap();
    let av = domain.av(AvAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    ep.bind_av(&av).unwrap();
    if let Some(n) = name {
        ep.set_name(&Address::parse(n).unwrap()).unwrap();
    }
    ep.enable().unwrap();
    Side { ep, cq, av, info, _domain: domain, _fabric: fabric }
}

fn side() -> Side {
    side_named(None)
}

/// `a` and `b`, each with the other in its AV: (a, b, b's handle at a, a's at b).
fn pair() -> (Side, Side, FiAddr, FiAddr) {
    let (a, b) = (side(), side());
    let hb = a.av.insert_one(&b.ep.name().unwrap()).unwrap();
    let ha = b.av.insert_one(&a.ep.name().unwrap()).unwrap();
    (a, b, hb, ha)
}

/// The next completion of `cq` (Ok) or error completion (Err), within [`WAIT`].
fn next(cq: &CompletionQueue) -> Result<Completion, CompletionError> {
    let start = Instant::now();
    loop {
        if let Some(r) = cq.next().unwrap_or_else(|e| panic!("cq read: {e}")) {
            return r;
        }
        assert!(start.elapsed() < WAIT, "no completion within {WAIT:?}");
    }
}

/// Drive `cq` for [`QUIET`] and say that nothing completed.
fn quiet(cq: &CompletionQueue, what: &str) {
    let start = Instant::now();
    while start.elapsed() < QUIET {
        match cq.next() {
            Ok(None) => {}
            Ok(Some(Ok(c))) => panic!("{what}: unexpected completion {c:?}"),
            Ok(Some(Err(e))) => panic!("{what}: unexpected error completion {e:?}"),
            Err(e) => panic!("{what}: cq read: {e}"),
        }
    }
}

/// Read the completion of a send of context `ctx` from `cq`.
fn send_done(cq: &CompletionQueue, ctx: u64, len: usize) {
    let c = next(cq).expect("a send completes");
    assert_eq!(c.context, ctx);
    assert!(c.flags.contains(Caps::SEND | Caps::MSG), "{:?}", c.flags);
    assert_eq!(c.len, len);
    assert_eq!(c.buffers.into_buf().expect("the buffer comes back").len(), len);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

#[test]
fn send_and_receive() {
    let (a, b, hb, ha) = pair();
    assert_eq!(Address::parse(&a.ep.name().unwrap().to_uri()).unwrap(), a.ep.name().unwrap());
    b.ep.recv(Buf::new(100), FiAddr::UNSPEC, 10).unwrap();
    a.ep.send(Buf::from(&b"hello"[..]), hb, 1).unwrap();
    send_done(&a.cq, 1, 5);
    let c = next(&b.cq).expect("received");
    assert_eq!(c.context, 10);
    assert!(c.flags.contains(Caps::RECV | Caps::MSG), "{:?}", c.flags);
    assert_eq!((c.len, c.bytes()), (5, &b"hello"[..]));
    assert_eq!(c.src, ha, "the source is the sender's handle in the AV");

    // Gathered from three buffers, scattered into two; an empty datagram.
    b.ep.recvv(vec![Buf::new(4), Buf::new(100)], FiAddr::UNSPEC, 11).unwrap();
    b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 12).unwrap();
    let parts = vec![Buf::from(&b"abc"[..]), Buf::from(&b"defg"[..]), Buf::from(&b"hij"[..])];
    a.ep.sendv(parts, hb, 2).unwrap();
    a.ep.send(Buf::new(0), hb, 3).unwrap();
    let c = next(&b.cq).unwrap();
    assert_eq!((c.context, c.len, c.src), (11, 10, ha));
    let bufs = c.buffers.into_vec();
    assert_eq!(&bufs[0][..], b"abcd");
    assert_eq!(&bufs[1][..6], b"efghij");
    let c = next(&b.cq).unwrap();
    assert_eq!((c.context, c.len), (12, 0));
    for _ in 0..2 {
        let c = next(&a.cq).unwrap();
        assert!(c.context == 2 || c.context == 3);
    }
}

#[test]
fn a_newly_bound_av_is_the_one_sends_go_by() {
    let (a, b, hb, _) = pair();
    let c = side();
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 1).unwrap();
    a.ep.send(Buf::from(&b"to b"[..]), hb, 2).unwrap();
    send_done(&a.cq, 2, 4);
    assert_eq!(next(&b.cq).unwrap().bytes(), b"to b");
    // A second AV naming c by the very handle (and at the same version) the first
    // named b by: once it is bound, that handle means c.
    let av2 = a._domain.av(AvAttr::default()).unwrap();
    let hc = av2.insert_one(&c.ep.name().unwrap()).unwrap();
    assert_eq!(hc, hb, "the first handle of a fresh AV (else this test checks less)");
    a.ep.bind_av(&av2).unwrap();
    c.ep.recv(Buf::new(16), FiAddr::UNSPEC, 3).unwrap();
    a.ep.send(Buf::from(&b"to c"[..]), hc, 4).unwrap();
    send_done(&a.cq, 4, 4);
    assert_eq!(next(&c.cq).unwrap().bytes(), b"to c");
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 5).unwrap();
    quiet(&b.cq, "b, no longer in the bound AV");
}

#[test]
fn unknown_sender_is_not_available() {
    let (a, b) = (side(), side());
    let hb = a.av.insert_one(&b.ep.name().unwrap()).unwrap();
    // b knows someone else, not a.
    let other = side();
    b.av.insert_one(&other.ep.name().unwrap()).unwrap();
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 1).unwrap();
    a.ep.send(Buf::from(&b"who"[..]), hb, 2).unwrap();
    let c = next(&b.cq).unwrap();
    assert_eq!(c.bytes(), b"who");
    assert_eq!(c.src, FiAddr::NOTAVAIL);
    // Once a is inserted, its datagrams name it.
    let ha = b.av.insert_one(&a.ep.name().unwrap()).unwrap();
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 3).unwrap();
    a.ep.send(Buf::from(&b"me"[..]), hb, 4).unwrap();
    assert_eq!(next(&b.cq).unwrap().src, ha);
}

#[test]
fn truncation_reports_the_real_length() {
    let (a, b, hb, ha) = pair();
    let data = pattern(1000, 3);
    b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 5).unwrap();
    a.ep.send(Buf::from(data.clone()), hb, 1).unwrap();
    send_done(&a.cq, 1, 1000);
    let e = next(&b.cq).expect_err("a truncated receive is an error completion");
    assert_eq!(e.err, Error::Trunc);
    assert_eq!(e.err.errno(), 265);
    assert_eq!((e.context, e.len, e.olen, e.src), (5, 64, 936, ha));
    let buf = e.buffers.into_buf().expect("the buffer comes back");
    assert_eq!(&buf[..], &data[..64]);
    // The next datagram is whole again.
    b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 6).unwrap();
    a.ep.send(Buf::from(&b"fits"[..]), hb, 2).unwrap();
    assert_eq!(next(&b.cq).unwrap().bytes(), b"fits");
}

#[test]
fn datagrams_without_a_receive_are_dropped_and_counted() {
    let (a, b, hb, _) = pair();
    let before = fabric_udp::dropped_datagrams();
    let start = Instant::now();
    for i in 0..1000u64 {
        // The sender never waits for the receiver: every send is taken at once.
        a.ep.send(Buf::from(&pattern(32, i as u8)[..]), hb, i).unwrap_or_else(|e| panic!("send {i}: {e}"));
    }
    let mut done = 0;
    while done < 1000 {
        next(&a.cq).expect("sends complete");
        done += 1;
    }
    assert!(start.elapsed() < WAIT);
    // b's progress finds the datagrams the kernel kept, with no receive posted.
    quiet(&b.cq, "no receive posted");
    let dropped = fabric_udp::dropped_datagrams() - before;
    assert!(dropped >= 1, "nothing counted as dropped");
    println!("{dropped} datagrams dropped by the provider (the rest by the kernel)");
    // Nothing was kept: the next receive gets the next datagram.
    b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).unwrap();
    quiet(&b.cq, "the socket was drained");
    a.ep.send(Buf::from(&b"after"[..]), hb, 2000).unwrap();
    assert_eq!(next(&b.cq).unwrap().bytes(), b"after");
}

#[test]
fn max_msg_size_is_the_limit() {
    let (a, b, hb, _) = pair();
    let max = a.info.ep_attr.max_msg_size;
    assert_eq!(max, 65507, "loopback's MTU (65536) allows the largest IPv4 datagram");
    assert_eq!(a.info.tx_attr.inject_size, max);
    let data = pattern(max, 9);
    b.ep.recv(Buf::new(max + 1), FiAddr::UNSPEC, 1).unwrap();
    a.ep.send(Buf::from(data.clone()), hb, 1).unwrap();
    send_done(&a.cq, 1, max);
    let c = next(&b.cq).unwrap();
    assert_eq!(c.len, max);
    assert!(c.bytes() == &data[..], "the largest datagram arrives intact");

    let e = a.ep.send(Buf::from(pattern(max + 1, 1)), hb, 2).expect_err("one byte too many");
    assert_eq!(e.error, Error::MsgSize);
    assert_eq!(e.buffers.into_buf().expect("the buffer comes back").len(), max + 1);
    assert_eq!(a.ep.inject(&pattern(max + 1, 1), hb), Err(Error::MsgSize));
    let parts = vec![Buf::from(pattern(max, 1)), Buf::from(&b"!"[..])];
    assert_eq!(a.ep.sendv(parts, hb, 3).expect_err("gathered, too").error, Error::MsgSize);
    quiet(&a.cq, "refused sends complete nothing");
    quiet(&b.cq, "refused sends send nothing");
}

#[test]
fn inject_copies_and_completes_nothing() {
    let (a, b, hb, ha) = pair();
    b.ep.recv(Buf::new(32), FiAddr::UNSPEC, 1).unwrap();
    let mut data = *b"injected";
    a.ep.inject(&data, hb).unwrap();
    data.fill(0);
    let c = next(&b.cq).unwrap();
    assert_eq!((c.bytes(), c.src), (&b"injected"[..], ha));
    quiet(&a.cq, "inject has no completion");
    // Neither tagged messages nor remote CQ data on DGRAM endpoints.
    assert_eq!(a.ep.tinject(b"x", hb, 7), Err(Error::OpNotSupp));
    assert_eq!(a.ep.injectdata(b"x", 7, hb), Err(Error::OpNotSupp));
    assert_eq!(a.ep.tsend(Buf::new(1), hb, 1, 1).expect_err("no tagged").error, Error::OpNotSupp);
    assert_eq!(a.ep.send(Buf::new(1), FiAddr(12345), 1).expect_err("no such peer").error, Error::Inval);
}

#[test]
fn close_cancels_posted_receives() {
    let b = side();
    b.ep.recv(Buf::new(10), FiAddr::UNSPEC, 1).unwrap();
    b.ep.recv(Buf::new(10), FiAddr::UNSPEC, 2).unwrap();
    b.ep.cancel(1).unwrap();
    assert_eq!(b.ep.cancel(99), Err(Error::NoEnt));
    let e = next(&b.cq).expect_err("canceled");
    assert_eq!((e.context, e.err), (1, Error::Canceled));
    let Side { ep, cq, .. } = b;
    ep.close().unwrap();
    let e = next(&cq).expect_err("flushed on close");
    assert_eq!((e.context, e.err), (2, Error::Canceled));
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 10);
}

#[test]
fn blocking_read_wakes_on_arrival() {
    let (a, b, hb, _) = pair();
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 1).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            a.ep.send(Buf::from(&b"wake"[..]), hb, 1).unwrap();
            send_done(&a.cq, 1, 4);
        });
        let start = Instant::now();
        let c = b.cq.sread(Some(Duration::from_secs(20))).expect("woken by the datagram");
        let took = start.elapsed();
        assert_eq!(c.bytes(), b"wake");
        assert!(took >= Duration::from_millis(250), "it waited for the datagram ({took:?})");
        assert!(took < Duration::from_secs(10), "it woke on arrival ({took:?})");
    });
    // With no receive posted, an arrival is dropped and does not end a wait.
    let before = fabric_udp::dropped_datagrams();
    a.ep.inject(b"nobody", hb).unwrap();
    let start = Instant::now();
    assert!(matches!(b.cq.sread(Some(Duration::from_millis(300))), Err(Error::WaitTimedOut)));
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(fabric_udp::dropped_datagrams() > before);
}

#[test]
fn multicast_join_and_leave() {
    // Receivers of a group bind to the wildcard address and the group's port.
    let rx = side_named(Some("0.0.0.0:0"));
    let port = rx.ep.name().unwrap().sockaddr().unwrap().port();
    let group = Address::parse(&format!("239.255.{}.{}:{port}", std::process::id() % 250, port % 250 + 1)).unwrap();
    let joined = match rx.ep.join(&group) {
        Ok(m) => m,
        Err(e) => {
            fabric_testkit::skip("multicast", format!("the kernel refuses to join {group} on lo: {e}"));
            return;
        }
    };
    assert_eq!(joined.group(), &group);
    let tx = side();
    let htx = rx.av.insert_one(&tx.ep.name().unwrap()).unwrap();
    let to_group = tx.ep.join(&group).expect("a second endpoint joins too");

    rx.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).unwrap();
    let msg = SendMsg::new(Buf::from(&b"to the group"[..]), to_group.addr(), 5);
    if let Err(e) = tx.ep.sendmsg(msg, OpFlags::MULTICAST) {
        fabric_testkit::skip("multicast", format!("the kernel refuses multicast sends on lo: {}", e.error));
        return;
    }
    send_done(&tx.cq, 5, 12);
    let c = next(&rx.cq).unwrap();
    assert_eq!((c.bytes(), c.src), (&b"to the group"[..], htx));
    // The group's address in the AV works as a destination too.
    let hg = tx.av.insert_one(&group).unwrap();
    rx.ep.recv(Buf::new(64), FiAddr::UNSPEC, 2).unwrap();
    tx.ep.inject(b"via the av", hg).unwrap();
    assert_eq!(next(&rx.cq).unwrap().bytes(), b"via the av");

    // Once left, the group's datagrams no longer arrive (the sender is still a
    // member, so they do reach the host).
    joined.leave().unwrap();
    tx.ep.inject(b"after leaving", hg).unwrap();
    quiet(&rx.cq, "left the group");
    // A stale group handle names nothing.
    let stale = to_group.addr();
    to_group.leave().unwrap();
    let msg = SendMsg::new(Buf::from(&b"x"[..]), stale, 6);
    assert_eq!(tx.ep.sendmsg(msg, OpFlags::MULTICAST).expect_err("left").error, Error::Inval);
    // Not a group; an IPv6 group.
    assert_eq!(rx.ep.join(&Address::parse("10.1.2.3:9").unwrap()).unwrap_err(), Error::Inval);
    assert_eq!(rx.ep.join(&Address::parse("[ff02::1]:9").unwrap()).unwrap_err(), Error::NoSys);
    // A group handle outlives its endpoint harmlessly.
    let g2 = rx.ep.join(&group).unwrap();
    drop(rx);
    g2.leave().unwrap();
}

#[test]
fn misuse_is_refused() {
    let info = lo_info();
    let fabric = Fabric::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(CqAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    assert_eq!(ep.enable(), Err(Error::NoCq));
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    assert_eq!(ep.enable(), Err(Error::NoAv));
    assert_eq!(ep.recv(Buf::new(1), FiAddr::UNSPEC, 1).expect_err("not enabled").error, Error::OpBadState);
    assert_eq!(ep.set_name(&Address::parse("[::1]:0").unwrap()), Err(Error::Inval));
    assert_eq!(ep.join(&Address::parse("239.1.1.1:1").unwrap()).unwrap_err(), Error::OpBadState);
    let av = domain.av(AvAttr::default()).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    assert_eq!(ep.set_name(&Address::parse("127.0.0.1:0").unwrap()), Err(Error::OpBadState));
    assert_eq!(av.insert_one(&Address::parse("fi_shm://x").unwrap()), Err(Error::Inval));
    assert!(fabric.passive_ep(&info).is_err());
    // RDM entries are offered on the same interfaces.
    let rdm = fabric::getinfo(&Hints::new().provider("udp").ep_type(EpType::Rdm).node("127.0.0.1").source(true));
    let rdm = rdm.expect("udp offers RDM").remove(0);
    assert_eq!(rdm.ep_attr.protocol, fabric::Protocol::Rxd);
}

#[test]
fn ipv6_loopback() {
    let h = Hints::new().provider("udp").ep_type(EpType::Dgram).node("::1").source(true);
    let info = match fabric::getinfo(&h) {
        Ok(mut v) => v.remove(0),
        Err(e) => {
            fabric_testkit::skip("ipv6", format!("no IPv6 loopback ({e})"));
            return;
        }
    };
    assert_eq!(info.addr_format, fabric::AddrFormat::SockaddrIn6);
    assert!(!info.caps.contains(Caps::MULTICAST), "multicast groups are IPv4 only");
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", info.domain_attr.name));
    if let Ok(mtu) = mtu {
        let mtu: usize = mtu.trim().parse().unwrap();
        assert_eq!(info.ep_attr.max_msg_size, (mtu - 48).min(65527));
    }
    let open = || {
        let fabric = Fabric::open(&info).unwrap();
        let domain = fabric.domain(&info).unwrap();
        let cq = domain.cq(CqAttr::default()).unwrap();
        let av = domain.av(AvAttr::default()).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        Side { ep, cq, av, info: info.clone(), _domain: domain, _fabric: fabric }
    };
    let (a, b) = (open(), open());
    let name = b.ep.name().unwrap();
    assert!(name.to_uri().starts_with("fi_sockaddr_in6://[::1]:"), "{name}");
    let hb = a.av.insert_one(&Address::parse(&name.to_uri()).unwrap()).unwrap();
    let ha = b.av.insert_one(&a.ep.name().unwrap()).unwrap();
    let max = info.ep_attr.max_msg_size;
    let data = pattern(max, 4);
    b.ep.recv(Buf::new(max), FiAddr::UNSPEC, 1).unwrap();
    a.ep.send(Buf::from(data.clone()), hb, 2).unwrap();
    send_done(&a.cq, 2, max);
    let c = next(&b.cq).unwrap();
    assert_eq!(c.src, ha);
    assert!(c.bytes() == &data[..]);
    assert_eq!(a.ep.inject(&pattern(max + 1, 0), hb), Err(Error::MsgSize));
    // An IPv4 peer is not reachable from an IPv6 endpoint.
    let h4 = a.av.insert_one(&Address::parse("127.0.0.1:9").unwrap()).unwrap();
    assert_eq!(a.ep.inject(b"x", h4), Err(Error::Inval));
}

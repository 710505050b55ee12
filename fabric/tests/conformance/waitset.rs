//! Wait sets and poll sets: one blocking wait over several queues and counters
//! that drives the progress of all of them, and a poll that names the members
//! with something to read.

use super::PROV;
use crate::common::*;
use fabric::*;
use std::time::{Duration, Instant};

/// Wait on `set` until `done` says so, handing every completion read from `cqs`
/// (after each wake-up) to `seen`. Fails the test if the set times out first.
#[track_caller]
fn wait_until(set: &WaitSet, cqs: &[&Cq], seen: &mut Vec<(usize, Res)>, mut done: impl FnMut(&[(usize, Res)]) -> bool) {
    let start = Instant::now();
    while !done(seen) {
        match set.wait(Some(WAIT)) {
            Ok(()) => {}
            Err(e) => panic!("wait set: {e} after {:?} with {} outcomes seen", start.elapsed(), seen.len()),
        }
        for (i, cq) in cqs.iter().enumerate() {
            while let Some(r) = cq.poll() {
                seen.push((i, r));
            }
        }
        assert!(start.elapsed() < WAIT, "watchdog: nothing done within {WAIT:?}");
    }
}

fn has(seen: &[(usize, Res)], cq: usize, context: u64) -> bool {
    seen.iter().any(|(i, r)| *i == cq && r.as_ref().is_ok_and(|c| c.context == context))
}

/// Two endpoints served from one thread by one wait set over both queues: a
/// message either way wakes it, and since the set drives both endpoints'
/// progress nothing else is needed (not even for connecting, or for a
/// rendezvous).
#[test]
fn two_endpoints_one_thread() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        let set = WaitSet::new().expect("open wait set");
        set.add(&p.a.cq.cq).expect("add a's cq");
        set.add(&p.b.cq.cq).expect("add b's cq");
        assert_eq!(set.len(), 2);
        let cqs = [&p.a.cq, &p.b.cq];
        let mut seen = Vec::new();
        let big = pattern(256 * 1024, 7);
        for (round, len) in [(0u64, 13usize), (1, big.len())] {
            let data = pattern(len, round);
            // a to b.
            p.b.ep.recv(Buf::new(len), FiAddr::UNSPEC, 100 + round).expect("post recv on b");
            p.a.ep.send(Buf::from(data.clone()), p.a_to_b, 200 + round).expect("post send on a");
            wait_until(&set, &cqs, &mut seen, |s| has(s, 1, 100 + round) && has(s, 0, 200 + round));
            // b to a.
            p.a.ep.recv(Buf::new(len), FiAddr::UNSPEC, 300 + round).expect("post recv on a");
            p.b.ep.send(Buf::from(data.clone()), p.b_to_a, 400 + round).expect("post send on b");
            wait_until(&set, &cqs, &mut seen, |s| has(s, 0, 300 + round) && has(s, 1, 400 + round));
            for (i, r) in seen.drain(..) {
                let c = ok(r, if i == 0 { "a" } else { "b" });
                if c.context == 100 + round || c.context == 300 + round {
                    assert_bytes(c.bytes(), &data, "received through the wait set");
                }
            }
        }
        // Everything read: the set waits until its time-out.
        let t = Duration::from_millis(200);
        let start = Instant::now();
        assert_eq!(set.wait(Some(t)), Err(Error::WaitTimedOut), "nothing to read");
        assert!(start.elapsed() >= t - Duration::from_millis(20), "returned before its time-out");
    });
}

/// A set that sleeps wakes for a message a peer thread sends meanwhile (the
/// peer, driven by its own `sread`, answers only once it has waited a while, so
/// the set is asleep by then: on shared memory the peer must see the sleep
/// announced to wake it).
#[test]
fn wakes_for_a_peer_thread() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        p.warm_up();
        let set = WaitSet::new().expect("open wait set");
        set.add(&p.a.cq.cq).expect("add a's cq");
        for round in 0..3u64 {
            p.a.ep.recv(Buf::new(64), FiAddr::UNSPEC, 10 + round).expect("post recv on a");
            p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 20 + round).expect("post recv on b");
            p.a.ep.send(Buf::from(pattern(32, round)), p.a_to_b, 30 + round).expect("post send on a");
            std::thread::scope(|s| {
                s.spawn(|| {
                    // b: receive, wait a little, answer, and see the answer sent.
                    let r = p.b.cq.cq.sread(Some(WAIT)).expect("b receives");
                    assert_eq!(r.context, 20 + round);
                    std::thread::sleep(Duration::from_millis(50));
                    p.b.ep.send(Buf::from(pattern(32, 100 + round)), p.b_to_a, 40 + round).expect("post answer");
                    let r = p.b.cq.cq.sread(Some(WAIT)).expect("b's answer completes");
                    assert_eq!(r.context, 40 + round);
                });
                let start = Instant::now();
                let mut got = Vec::new();
                while !got.contains(&(10 + round)) {
                    set.wait(Some(WAIT)).expect("the answer wakes the set");
                    while let Some(r) = p.a.cq.poll() {
                        let c = ok(r, "a");
                        if c.context == 10 + round {
                            assert_bytes(c.bytes(), &pattern(32, 100 + round), "the answer");
                        }
                        got.push(c.context);
                    }
                    assert!(start.elapsed() < WAIT, "watchdog");
                }
                assert!(got.contains(&(30 + round)), "a's send completed too: {got:?}");
            });
        }
    });
}

/// An idle set times out (every kind of member), and membership is checked.
#[test]
fn wait_set_times_out() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Rdm, Caps::MSG) else { return };
        let fabric = Fabric::open(&info).expect("open fabric");
        let domain = fabric.domain(&info).expect("open domain");
        let cq = domain.cq(CqAttr::default()).expect("open cq");
        let eq = fabric.eq(EqAttr::default()).expect("open eq");
        let set = WaitSet::new().expect("open wait set");
        set.add(&cq).expect("add cq");
        set.add(&cq).expect("adding again is allowed");
        set.add(&eq).expect("add eq");
        let cntr = domain.counter().ok();
        if let Some(c) = &cntr {
            set.add(c).expect("add counter");
        }
        assert_eq!(set.len(), 2 + cntr.is_some() as usize, "one membership per object");
        for t in [Duration::ZERO, Duration::from_millis(300)] {
            let start = Instant::now();
            assert_eq!(set.wait(Some(t)), Err(Error::WaitTimedOut), "wait({t:?}) on an idle set");
            assert!(
                start.elapsed() >= t.saturating_sub(Duration::from_millis(20)),
                "wait({t:?}) returned before its time-out"
            );
        }
        assert_eq!(set.trywait(), Ok(()), "nothing to read: the application may block on the set's fd");
        assert!(set.fd() >= 0);
        set.remove(&cq).expect("remove cq");
        assert_eq!(set.remove(&cq), Err(Error::NoEnt), "removed already");
        let none = domain.cq(CqAttr { wait_obj: WaitObj::None, ..Default::default() }).expect("open cq without wait");
        assert_eq!(set.add(&none), Err(Error::NoSys), "a queue without a wait object cannot be waited on");
    });
}

/// A counter member wakes the set once per change of its counts, here a
/// receive counted on `b`, whose endpoint the set's wait drives.
#[test]
fn wait_set_counter() {
    run(PROV, |prov| {
        let counted = Opts { counter: true, ..Opts::default() };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), counted) else { return };
        p.warm_up();
        let cb = p.b.cntr.as_ref().expect("counter");
        let set = WaitSet::new().expect("open wait set");
        set.add(&p.a.cq.cq).expect("add a's cq");
        set.add(cb).expect("add b's counter");
        let b0 = cb.read();
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        p.a.ep.send(Buf::from(b"count me"), p.a_to_b, 2).expect("post send");
        let start = Instant::now();
        let mut sent = false;
        while cb.read() < b0 + 1 || !sent {
            set.wait(Some(WAIT)).expect("wait for the send and the counted receive");
            while let Some(r) = p.a.cq.poll() {
                sent |= ok(r, "a").context == 2;
            }
            assert!(start.elapsed() < WAIT, "watchdog");
        }
        // The change is reported once; afterwards the set is idle again.
        let mut reported = 0;
        while set.wait(Some(Duration::from_millis(200))).is_ok() {
            reported += 1;
            assert!(reported < 10, "the same change keeps waking the set");
        }
        assert!(reported <= 1, "one change, reported at most once more ({reported})");
        cb.add(5);
        assert_eq!(set.wait(Some(WAIT)), Ok(()), "an application's change counts too");
        assert_eq!(set.wait(Some(Duration::from_millis(100))), Err(Error::WaitTimedOut), "and only once");
        assert_eq!(ok(p.next_b(), "b").bytes(), b"count me");
    });
}

/// An event queue member: a connection request wakes a set over the listener's
/// queue and the client's queues, which it connects (MSG endpoints).
#[test]
fn wait_set_event_queue() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Msg, Caps::MSG) else { return };
        let l = listen(&info);
        let a = msg_side("a", None, &info, Opts::default());
        let set = WaitSet::new().expect("open wait set");
        set.add(&l.eq).expect("add listener's eq");
        set.add(a.eq.as_ref().expect("client eq")).expect("add client's eq");
        set.add(&a.cq.cq).expect("add client's cq");
        a.ep.connect(&l.pep.name().expect("listener name"), b"hi").expect("connect");
        let start = Instant::now();
        let req = loop {
            set.wait(Some(WAIT)).expect("wait for the connection request");
            match l.eq.read() {
                Ok(EqEvent::ConnReq { info, data, .. }) => {
                    assert_eq!(data, b"hi");
                    break info;
                }
                Ok(other) => panic!("expected FI_CONNREQ, got {other:?}"),
                Err(Error::Again) => {}
                Err(e) => panic!("listener eq: {e}"),
            }
            assert!(start.elapsed() < WAIT, "watchdog");
        };
        let b = msg_side("b", Some(&l.fabric), &req, Opts::default());
        set.add(b.eq.as_ref().expect("server eq")).expect("add server's eq");
        b.ep.accept(b"").expect("accept");
        let (mut a_up, mut b_up) = (false, false);
        while !(a_up && b_up) {
            set.wait(Some(WAIT)).expect("wait for both connections");
            for (eq, up, fid) in [(a.eq.as_ref(), &mut a_up, a.ep.id()), (b.eq.as_ref(), &mut b_up, b.ep.id())] {
                match eq.expect("eq").read() {
                    Ok(EqEvent::Connected { fid: f, .. }) => {
                        assert_eq!(f, fid);
                        *up = true;
                    }
                    Ok(other) => panic!("expected FI_CONNECTED, got {other:?}"),
                    Err(Error::Again) => {}
                    Err(e) => panic!("eq: {e}"),
                }
            }
            assert!(start.elapsed() < WAIT, "watchdog");
        }
        let t = Duration::from_millis(200);
        assert_eq!(set.wait(Some(t)), Err(Error::WaitTimedOut), "every event read");
    });
}

/// Sorted contexts of one poll.
fn poll_sorted(set: &PollSet) -> Vec<u64> {
    let mut out = [0u64; 8];
    let n = set.poll(&mut out).expect("poll");
    let mut v = out[..n].to_vec();
    v.sort_unstable();
    v
}

/// A poll set names exactly the members with something to read, drives their
/// progress, and reports a counter's change once.
#[test]
fn poll_set_contexts() {
    run(PROV, |prov| {
        let counted = Opts { counter: true, ..Opts::default() };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), counted) else { return };
        p.warm_up();
        let cb = p.b.cntr.as_ref().expect("counter");
        let set = PollSet::new();
        set.add(&p.a.cq.cq, 10).expect("add a's cq");
        set.add(&p.b.cq.cq, 20).expect("add b's cq");
        set.add(cb, 30).expect("add b's counter");
        assert!(poll_sorted(&set).is_empty(), "nothing to read yet");
        assert_eq!(set.poll(&mut []), Ok(0), "no room: nothing reported");
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        p.a.ep.send(Buf::from(b"poll me"), p.a_to_b, 2).expect("post send");
        // Polling alone drives both endpoints: wait until both queues have their
        // completion, and the counter its change.
        let start = Instant::now();
        let mut counter_seen = 0;
        loop {
            let got = poll_sorted(&set);
            counter_seen += got.contains(&30) as usize;
            if got.contains(&10) && got.contains(&20) && counter_seen > 0 {
                break;
            }
            assert!(start.elapsed() < WAIT, "watchdog: polled {got:?}");
            std::thread::yield_now();
        }
        assert_eq!(counter_seen, 1, "the counter's change is reported once");
        assert_eq!(poll_sorted(&set), [10, 20], "both queues hold their completion");
        assert_eq!(ok(p.a.cq.poll().expect("a's completion"), "a").context, 2);
        assert_eq!(poll_sorted(&set), [20], "only b's queue has something now");
        assert_eq!(ok(p.b.cq.poll().expect("b's completion"), "b").bytes(), b"poll me");
        assert!(poll_sorted(&set).is_empty(), "everything read");
        cb.add(1);
        assert_eq!(poll_sorted(&set), [30], "an application's change of the counter");
        assert!(poll_sorted(&set).is_empty(), "reported once");
        set.remove(&p.b.cq.cq).expect("remove");
        assert_eq!(set.len(), 2);
    });
}

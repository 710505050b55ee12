//! Errors: posting without a CQ or before enable, binding twice, sending
//! unconnected, the peer dying mid-transfer, CQ overrun, closing with posted
//! receives. A failure is an error (at once or as an error completion) that
//! gives the buffers back; never a hang, never a lost completion.

use super::PROV;
use crate::common::*;
use fabric::*;
use std::collections::BTreeMap;

/// An RDM endpoint on `s`'s domain bound to a new CQ for `dirs` (and `s`'s AV),
/// enabled if `enable`.
fn extra_rdm_ep(s: &Side, dirs: BindFlags, enable: bool) -> (Endpoint, CompletionQueue) {
    let cq = s.domain.cq(CqAttr::default()).expect("open cq");
    let ep = s.domain.endpoint(s.domain.info()).expect("open endpoint");
    ep.bind_cq(&cq, dirs).expect("bind cq");
    ep.bind_av(s.av.as_ref().expect("rdm side has an av")).expect("bind av");
    if enable {
        ep.enable().expect("enable");
    }
    (ep, cq)
}

#[track_caller]
fn assert_refused(r: PostResult, want: Option<Error>, n: usize, what: &str) {
    let e = r.expect_err(what);
    if let Some(w) = want {
        assert_eq!(e.error, w, "{what}");
    }
    assert_ne!(e.error, Error::Again, "{what}: not back-pressure");
    assert_eq!(e.buffers.count(), n, "{what}: every buffer given back");
}

/// Posting in a direction with no CQ bound: `FI_ENOCQ`, buffers given back.
#[test]
fn no_cq_returns_buffers() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG | Caps::TAGGED, &[Opts::default()]) else { return };
        let s = &g.sides[0];
        let dest = g.addr[0][0];
        let (tx_only, _cq1) = extra_rdm_ep(s, BindFlags::TRANSMIT, true);
        assert_refused(tx_only.recv(Buf::new(8), FiAddr::UNSPEC, 1), Some(Error::NoCq), 1, "recv with no receive CQ");
        assert_refused(
            tx_only.recvv(vec![Buf::new(8), Buf::new(8)], FiAddr::UNSPEC, 1),
            Some(Error::NoCq),
            2,
            "recvv with no receive CQ",
        );
        assert_refused(
            tx_only.trecv(Buf::new(8), FiAddr::UNSPEC, 1, 0, 1),
            Some(Error::NoCq),
            1,
            "trecv, no receive CQ",
        );
        let (rx_only, _cq2) = extra_rdm_ep(s, BindFlags::RECV, true);
        let e = rx_only.send(Buf::from(b"kept"), dest, 2).expect_err("send with no transmit CQ");
        assert_eq!(e.error, Error::NoCq);
        assert_eq!(e.buffers.into_buf().expect("buffer back").as_slice(), b"kept", "untouched");
        assert_refused(rx_only.sendv(vec![Buf::new(1), Buf::new(2)], dest, 2), Some(Error::NoCq), 2, "sendv, no CQ");
        assert_refused(rx_only.tsend(Buf::new(1), dest, 1, 2), Some(Error::NoCq), 1, "tsend with no transmit CQ");
        assert_refused(rx_only.senddata(Buf::new(1), 1, dest, 2), Some(Error::NoCq), 1, "senddata, no transmit CQ");
    });
}

/// Operations on an endpoint not yet enabled fail and give the buffers back.
#[test]
fn ops_before_enable() {
    run(PROV, |prov| {
        if let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default()]) {
            let s = &g.sides[0];
            let (ep, cq) = extra_rdm_ep(s, BindFlags::TRANSMIT | BindFlags::RECV, false);
            assert_refused(ep.send(Buf::from(b"x"), g.addr[0][0], 1), None, 1, "send before enable");
            assert_refused(ep.recv(Buf::new(8), FiAddr::UNSPEC, 2), None, 1, "recv before enable");
            assert!(ep.inject(b"x", g.addr[0][0]).is_err(), "inject before enable must fail");
            assert_eq!(cq.in_flight(), 0);
            // Enabled, it works.
            ep.enable().expect("enable");
            ep.recv(Buf::new(8), FiAddr::UNSPEC, 3).expect("recv after enable");
            ep.cancel(3).expect("cancel");
            let e = err(wait_for(&Cq::new("x", cq), &[], WAIT), "canceled receive");
            assert_eq!(e.err, Error::Canceled);
        }
        if let Some(info) = find_info(prov, EpType::Msg, Caps::MSG) {
            let l = listen(&info);
            let f = Fabric::open(&info).expect("open fabric");
            let d = f.domain(&info).expect("open domain");
            let eq = f.eq(EqAttr::default()).expect("open eq");
            let cq = d.cq(CqAttr::default()).expect("open cq");
            let ep = d.endpoint(&info).expect("open endpoint");
            ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
            ep.bind_eq(&eq).expect("bind eq");
            assert!(ep.connect(&l.pep.name().expect("name"), b"").is_err(), "connect before enable must fail");
            assert_refused(ep.send(Buf::from(b"x"), FiAddr::UNSPEC, 1), None, 1, "MSG send before enable");
        }
    });
}

/// A direction binds one CQ; selective completion is refused by the safe API.
#[test]
fn double_cq_bind() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default()]) else { return };
        let s = &g.sides[0];
        assert_eq!(s.ep.bind_cq(&s.cq.cq, BindFlags::TRANSMIT), Err(Error::Inval), "second transmit binding");
        let other = s.domain.cq(CqAttr::default()).expect("open cq");
        assert_eq!(s.ep.bind_cq(&other, BindFlags::RECV), Err(Error::Inval), "second receive binding");
        let ep = s.domain.endpoint(&g.info).expect("open endpoint");
        let sel = BindFlags::TRANSMIT | BindFlags::SELECTIVE_COMPLETION;
        assert_eq!(ep.bind_cq(&other, sel), Err(Error::BadFlags), "selective completion");
        assert_eq!(ep.bind_cq(&other, BindFlags::empty()), Err(Error::BadFlags), "no direction");
    });
}

/// `FI_MULTICAST` on a send needs the capability: without it the send is
/// refused with `FI_EBADFLAGS`, the buffer given back and nothing sent (the
/// destination is no group).
#[test]
fn multicast_flag_needs_the_cap() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG | Caps::TAGGED, &[Opts::default()]) else { return };
        if g.info.caps.contains(Caps::MULTICAST) {
            skip("the endpoint has FI_MULTICAST");
            return;
        }
        let s = &g.sides[0];
        let dest = g.addr[0][0];
        let m = SendMsg::new(Buf::from(b"group?"), dest, 1);
        let e = s.ep.sendmsg(m, OpFlags::MULTICAST).expect_err("multicast send without FI_MULTICAST");
        assert_eq!(e.error, Error::BadFlags);
        assert_eq!(e.buffers.into_buf().expect("buffer back").as_slice(), b"group?", "untouched");
        let m = SendMsg::new(Buf::from(b"group?"), dest, 2);
        assert_refused(s.ep.tsendmsg(m, OpFlags::MULTICAST), Some(Error::BadFlags), 1, "tagged multicast send");
        assert_eq!(s.cq.cq.in_flight(), 0, "nothing recorded for the refused posts");
    });
}

/// A MSG endpoint enabled but not connected cannot send.
#[test]
fn msg_send_unconnected() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Msg, Caps::MSG) else { return };
        let a = msg_side("a", None, &info, Opts::default());
        match a.ep.send(Buf::from(b"nobody"), FiAddr::UNSPEC, 1) {
            Err(e) => {
                assert_ne!(e.error, Error::Again);
                assert_eq!(e.buffers.into_buf().expect("buffer back").as_slice(), b"nobody");
            }
            Ok(()) => {
                let e = err(wait_for(&a.cq, &a.drivers(), WAIT), "send on an unconnected endpoint");
                assert_eq!(e.buffers.into_buf().expect("buffer back").as_slice(), b"nobody");
            }
        }
    });
}

/// The receiver's endpoint is closed while an 8 MiB rendezvous is under way: its
/// receive comes back (done or canceled) with its buffer, and the sender gets
/// exactly one completion (done or failed), never a hang.
fn receiver_dies_during_rendezvous(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    p.warm_up();
    const N: usize = 8 << 20;
    p.b.ep.recv(Buf::new(N), FiAddr::UNSPEC, 1).expect("post recv");
    p.a.ep.send(Buf::from(pattern(N, 1)), p.a_to_b, 2).expect("post send");
    // Let the transfer start.
    for _ in 0..50 {
        p.a.cq.drive();
        p.b.cq.drive();
    }
    let Pair { a, b, listener, .. } = p;
    let Side { ep: b_ep, cq: b_cq, .. } = b;
    b_ep.close().expect("close the receiver");
    match wait_for(&b_cq, &[], WAIT) {
        Ok(c) => {
            assert_eq!(c.context, 1);
            assert_bytes(c.bytes(), &pattern(N, 1), "a receive that finished before the close");
        }
        Err(e) => {
            assert_eq!(e.context, 1);
            let buf = e.buffers.into_buf().expect("the interrupted receive gives its buffer back");
            assert_eq!(buf.capacity(), N);
            println!("receiver's interrupted receive: {}", e.err);
        }
    }
    let mut d = a.drivers();
    if let Some(l) = &listener {
        d.push(&l.eq);
    }
    let s = wait_for(&a.cq, &d, WAIT);
    match &s {
        Ok(c) => assert_eq!(c.context, 2),
        Err(e) => {
            assert_eq!(e.context, 2);
            println!("sender's completion: {}", e.err);
        }
    }
    let bufs = s.map(|c| c.buffers).unwrap_or_else(|e| e.buffers);
    assert_eq!(bufs.into_buf().expect("send buffer back").capacity(), N);
    assert_eq!(a.cq.cq.in_flight() + b_cq.cq.in_flight(), 0);
}

rdm_and_msg!(receiver_dies_during_rendezvous: rdm_receiver_dies_during_rendezvous, msg_receiver_dies_during_rendezvous);

/// The receiver dies with an 8 MiB message it never matched: the data cannot
/// have been delivered, so the sender gets an error completion.
fn receiver_dies_with_unmatched_rendezvous(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    p.warm_up();
    const N: usize = 8 << 20;
    p.a.ep.send(Buf::from(pattern(N, 1)), p.a_to_b, 2).expect("post send");
    p.settle(QUIET);
    let Pair { a, b, listener, .. } = p;
    drop(b);
    let mut d = a.drivers();
    if let Some(l) = &listener {
        d.push(&l.eq);
    }
    let e = err(wait_for(&a.cq, &d, WAIT), "a send whose receiver died before matching it");
    assert_eq!(e.context, 2);
    assert_ne!(e.err, Error::Again);
    println!("sender's error: {e}");
    assert_eq!(e.buffers.into_buf().expect("send buffer back").capacity(), N);
}

rdm_and_msg!(receiver_dies_with_unmatched_rendezvous: rdm_receiver_dies_with_unmatched_rendezvous, msg_receiver_dies_with_unmatched_rendezvous);

/// The receiver stops reading, the sender queues far more than the transport
/// buffers, then the receiver dies: every send completes exactly once (the ones
/// still queued with an error), none hangs.
fn receiver_dies_with_sends_queued(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    p.warm_up();
    const K: u64 = 400;
    const LEN: usize = 32 << 10;
    let msg = pattern(LEN, 3);
    for i in 0..K {
        p.a.ep.send(Buf::from(msg.clone()), p.a_to_b, i).expect("post send");
    }
    // Only the sender makes progress: the receiver's socket buffers fill.
    settle(&[&p.a.cq], QUIET);
    let Pair { a, b, listener, .. } = p;
    drop(b);
    let mut d = a.drivers();
    if let Some(l) = &listener {
        d.push(&l.eq);
    }
    let mut seen = BTreeMap::new();
    for _ in 0..K {
        let r = wait_for(&a.cq, &d, WAIT);
        let (ctx, res) = match r {
            Ok(c) => (c.context, None),
            Err(e) => {
                assert_eq!(e.buffers.count(), 1, "failed send gives its buffer back");
                (e.context, Some(e.err))
            }
        };
        assert!(seen.insert(ctx, res).is_none(), "send {ctx} completed twice");
    }
    let failed = seen.values().filter(|r| r.is_some()).count();
    println!("{} of {K} queued sends failed: {:?}", failed, seen.values().flatten().next());
    assert!(failed > 0, "{K} x {LEN} bytes cannot all have reached a receiver that never read");
    assert_eq!(a.cq.cq.in_flight(), 0);
}

rdm_and_msg!(receiver_dies_with_sends_queued: rdm_receiver_dies_with_sends_queued, msg_receiver_dies_with_sends_queued);

/// A CQ of 4 entries gets 10 completions before it is read: an `FI_EOVERRUN`
/// error entry appears once, and no completion is lost.
#[test]
fn cq_overrun() {
    run(PROV, |prov| {
        let small = Opts { cq: CqAttr { size: 4, ..Opts::default().cq }, counter: true };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), small) else { return };
        p.warm_up();
        let cntr = p.b.cntr.as_ref().expect("counter bound");
        let base = cntr.read();
        for i in 0..10u64 {
            p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, i).expect("post recv");
        }
        for i in 0..10u64 {
            p.a.ep.send(Buf::from(pattern(10, i)), p.a_to_b, 100 + i).expect("post send");
        }
        // Progress the receiver through its counter only: the CQ is not read.
        let start = std::time::Instant::now();
        while cntr.read() < base + 10 {
            p.a.cq.drive();
            assert!(start.elapsed() < WAIT, "watchdog: only {} of 10 receives counted", cntr.read() - base);
        }
        let mut got = Vec::new();
        let mut overruns = 0;
        while got.len() < 10 {
            match wait_for(&p.b.cq, &[&p.a.cq], WAIT) {
                Ok(c) => got.push(c.context),
                Err(e) if e.err == Error::Overrun => overruns += 1,
                Err(e) => panic!("unexpected error completion {e}: {e:?}"),
            }
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>(), "every completion, in order, none lost");
        assert_eq!(overruns, 1, "one FI_EOVERRUN entry for the overrun");
        assert_quiet(&p.b.cq, &p.drivers(), "after the overrun");
    });
}

/// Closing an endpoint with posted receives gives each back as a `Canceled`
/// error completion with its buffers.
fn close_cancels_posted(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let mut want = BTreeMap::new();
    p.b.ep.recv(Buf::new(10), FiAddr::UNSPEC, 1).expect("post recv");
    want.insert(1, vec![10]);
    p.b.ep.recv(Buf::new(20), FiAddr::UNSPEC, 2).expect("post recv");
    want.insert(2, vec![20]);
    p.b.ep.recvv(vec![Buf::new(5), Buf::new(6)], FiAddr::UNSPEC, 3).expect("post recvv");
    want.insert(3, vec![5, 6]);
    if p.info.caps.contains(Caps::MULTI_RECV) {
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(4096), 4), OpFlags::MULTI_RECV).expect("post multi-receive");
        want.insert(4, vec![4096]);
    }
    let Pair { b, .. } = p;
    let Side { ep, cq, .. } = b;
    assert_eq!(cq.cq.in_flight(), want.len());
    ep.close().expect("close with posted receives");
    let mut got = BTreeMap::new();
    for _ in 0..want.len() {
        let e = err(wait_for(&cq, &[], WAIT), "a receive posted when the endpoint closed");
        assert_eq!(e.err, Error::Canceled, "context {}: {e}", e.context);
        let caps: Vec<usize> = e.buffers.into_vec().iter().map(|b| b.capacity()).collect();
        assert!(got.insert(e.context, caps).is_none(), "context {} canceled twice", e.context);
    }
    assert_eq!(got, want, "each receive comes back once with its buffers");
    assert_eq!(cq.cq.in_flight(), 0);
    assert!(cq.poll().is_none(), "nothing else on the queue");
}

rdm_and_msg!(close_cancels_posted: rdm_close_cancels_posted, msg_close_cancels_posted);

/// Side 0 of `g` sends one message to side 1, and both complete: the two have met.
fn warm_up(g: &Group) {
    let (a, b) = (&g.sides[0], &g.sides[1]);
    b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 1).expect("post recv");
    a.ep.send(Buf::from(b"hi"), g.addr[0][1], 1).expect("send");
    let d = g.drivers();
    ok(wait_for(&b.cq, &d, WAIT), "warm-up receive");
    ok(wait_for(&a.cq, &d, WAIT), "warm-up send");
}

/// Sending to an RDM peer whose endpoint is gone fails (at once or as an error
/// completion) with the buffer back; never a hang. Both for a peer never
/// connected to, and for one whose connection the sender saw close.
#[test]
fn rdm_send_to_dead_peer() {
    run(PROV, |prov| {
        for warm in [false, true] {
            let Some(mut g) = Group::new(prov, Caps::MSG, &[Opts::default(); 2]) else { return };
            if warm {
                warm_up(&g);
            }
            drop(g.sides.pop());
            let a = &g.sides[0];
            // Let the sender see the connection close.
            settle(&[&a.cq], QUIET);
            for (i, n) in [100usize, 1 << 20].into_iter().enumerate() {
                let want = pattern(n, i as u64);
                let back = match a.ep.send(Buf::from(want.clone()), g.addr[0][1], 10 + i as u64) {
                    Err(e) => {
                        assert_ne!(e.error, Error::Again);
                        e.buffers
                    }
                    Ok(()) => {
                        let e = err(wait_for(&a.cq, &[], WAIT), "send to a dead peer");
                        assert_eq!(e.context, 10 + i as u64);
                        println!("send of {n} bytes to a dead peer (connected before: {warm}): {e}");
                        e.buffers
                    }
                };
                assert_bytes(&back.into_buf().expect("buffer back"), &want, "buffer of the failed send");
            }
        }
    });
}

/// An RDM peer restarts at the same address: after the sender has seen the old
/// connection close, its messages reach the new endpoint.
#[test]
fn rdm_peer_restart() {
    run(PROV, |prov| {
        let Some(mut g) = Group::new(prov, Caps::MSG, &[Opts::default(); 2]) else { return };
        warm_up(&g);
        let old = g.sides.pop().expect("b");
        let name = old.ep.name().expect("b's name");
        drop(old);
        let a = &g.sides[0];
        settle(&[&a.cq], QUIET);
        // The new endpoint, at the old address.
        let f = Fabric::open(&g.info).expect("open fabric");
        let d = f.domain(&g.info).expect("open domain");
        let cq = Cq::new("b2", d.cq(CqAttr::default()).expect("cq"));
        let av = d.av(AvAttr::default()).expect("av");
        let ep = d.endpoint(&g.info).expect("endpoint");
        ep.bind_cq(&cq.cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        if let Err(e) = ep.set_name(&name) {
            skip(format!("set_name not supported: {e}"));
            return;
        }
        ep.enable().expect("enable at the old address");
        assert_eq!(ep.name().expect("name"), name);
        ep.recv(Buf::new(64), FiAddr::UNSPEC, 5).expect("post recv");
        let drivers: [&dyn Drive; 2] = [&a.cq, &cq];
        let mut delivered = false;
        for attempt in 0..3u64 {
            a.ep.send(Buf::from(b"again"), g.addr[0][1], 20 + attempt).expect("send");
            match wait_for(&a.cq, &drivers, WAIT) {
                Ok(_) => {
                    delivered = true;
                    break;
                }
                Err(e) => println!("attempt {attempt} failed: {e}"),
            }
        }
        assert!(delivered, "no send to the restarted peer succeeded");
        let r = ok(wait_for(&cq, &drivers, WAIT), "receive at the restarted peer");
        assert_eq!(r.bytes(), b"again");
    });
}

/// Closing a sender with sends it could not finish (a rendezvous never matched,
/// sends queued behind it) gives each back as an error completion.
fn close_cancels_pending_sends(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    p.warm_up();
    p.a.ep.send(Buf::from(pattern(4 << 20, 1)), p.a_to_b, 1).expect("post send");
    for i in 2..50u64 {
        p.a.ep.send(Buf::from(pattern(64 << 10, i)), p.a_to_b, i).expect("post send");
    }
    // Only the sender progresses: the receiver never matches or reads.
    settle(&[&p.a.cq], QUIET);
    let Pair { a, b, .. } = p;
    let Side { ep, cq, .. } = a;
    ep.close().expect("close the sender");
    let mut seen = BTreeMap::new();
    for _ in 1..50 {
        let r = wait_for(&cq, &[], WAIT);
        let (ctx, res) = match r {
            Ok(c) => (c.context, None),
            Err(e) => {
                assert_eq!(e.buffers.count(), 1, "a failed send gives its buffer back");
                (e.context, Some(e.err))
            }
        };
        assert!(seen.insert(ctx, res).is_none(), "send {ctx} completed twice");
    }
    assert!(seen[&1].is_some(), "the unmatched rendezvous cannot have succeeded");
    assert_eq!(cq.cq.in_flight(), 0);
    assert!(cq.poll().is_none());
    drop(b);
}

rdm_and_msg!(close_cancels_pending_sends: rdm_close_cancels_pending_sends, msg_close_cancels_pending_sends);

/// The peer of a MSG endpoint with several posted receives shuts down; closing
/// the endpoint afterwards: every receive comes back exactly once, with its
/// buffer (flushed at the shutdown or canceled at the close).
#[test]
fn msg_posted_receives_survive_peer_shutdown() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Msg, Caps::MSG) else { return };
        p.warm_up();
        for ctx in 1..=3u64 {
            p.b.ep.recv(Buf::new(10 * ctx as usize), FiAddr::UNSPEC, ctx).expect("post recv");
        }
        p.a.ep.shutdown().expect("shutdown");
        let d = p.drivers();
        match wait_event(p.b.eq.as_ref().expect("eq"), &d, WAIT) {
            Ok(EqEvent::Shutdown { .. }) => {}
            other => panic!("expected FI_SHUTDOWN, got {other:?}"),
        }
        let Pair { b, .. } = p;
        let Side { ep, cq, .. } = b;
        ep.close().expect("close");
        let mut got = BTreeMap::new();
        for _ in 0..3 {
            let e = err(wait_for(&cq, &[], WAIT), "a receive posted when the peer shut down");
            let cap = e.buffers.into_buf().expect("buffer back").capacity();
            assert!(got.insert(e.context, cap).is_none(), "receive {} came back twice", e.context);
        }
        assert_eq!(got, BTreeMap::from([(1, 10), (2, 20), (3, 30)]));
        assert_eq!(cq.cq.in_flight(), 0);
    });
}

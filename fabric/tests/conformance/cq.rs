//! Completion queues, event queues and counters: blocking reads and their
//! time-outs, the wait fd, `signal`, batch reads, counting.

use super::PROV;
use crate::common::*;
use fabric::*;
use std::time::{Duration, Instant};

/// `sread` on an empty queue returns `Err(WaitTimedOut)`, whose text says so,
/// after about the time-out: not early, and not never.
#[test]
fn sread_times_out() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default()]) else { return };
        let cq = &g.sides[0].cq.cq;
        for t in [Duration::ZERO, Duration::from_millis(300)] {
            let start = Instant::now();
            let r = cq.sread(Some(t));
            let took = start.elapsed();
            let e = r.map(|c| c.context).unwrap_err();
            assert_eq!(e, Error::WaitTimedOut, "sread({t:?}) on an empty queue");
            assert_eq!(e.to_string(), "Timed out waiting", "the error says it timed out");
            assert!(took >= t, "sread({t:?}) returned after {took:?}: before its time-out");
            assert!(took < t + Duration::from_secs(20), "sread({t:?}) took {took:?}");
        }
    });
}

/// `sread` returns a completion that arrives while it waits.
#[test]
fn sread_returns_completion() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        p.warm_up();
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        p.a.ep.send(Buf::from(b"wake up"), p.a_to_b, 2).expect("post send");
        let r = with_driver(&[&p.a.cq], || p.b.cq.cq.sread(Some(WAIT)));
        let c = r.expect("sread returns the completion");
        assert_eq!((c.context, c.bytes()), (1, &b"wake up"[..]));
        assert_eq!(p.ok_a().context, 2);
    });
}

/// Whether this entry's domain opens a CQ with an fd wait object (`None`: skipped).
fn fd_cq_offered(info: &Info) -> Option<()> {
    let f = Fabric::open(info).expect("open fabric");
    let d = f.domain(info).expect("open domain");
    match d.cq(CqAttr { wait_obj: WaitObj::Fd, ..Default::default() }) {
        Ok(_) => Some(()),
        Err(e) => {
            skip(format!("no CQ with an fd wait object: {e}"));
            None
        }
    }
}

/// The wait fd is a valid descriptor that `poll` reports readable once a
/// completion may be there, after `trywait` said the application may block
/// (`fi_trywait`); `trywait` says `Again` while completions are queued.
#[test]
fn wait_fd_is_pollable() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Rdm, Caps::MSG) else { return };
        if fd_cq_offered(&info).is_none() {
            return;
        }
        let fd_opts = Opts { cq: CqAttr { wait_obj: WaitObj::Fd, ..Opts::default().cq }, counter: false };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), fd_opts) else { return };
        p.warm_up();
        let fd = p.b.cq.cq.wait_fd().expect("wait_fd of a CQ with an fd wait object");
        assert!(fd >= 0, "wait fd {fd}");
        // SAFETY: F_GETFD only reads the descriptor's flags; any int is a valid argument.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags, -1, "wait fd {fd} is not an open descriptor: {}", std::io::Error::last_os_error());
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        p.b.cq.cq.trywait().expect("trywait on an empty queue");
        p.a.ep.send(Buf::from(b"poll me"), p.a_to_b, 2).expect("post send");
        let (n, revents) = with_driver(&[&p.a.cq], || {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, WAIT.as_millis() as libc::c_int) };
            (n, pfd.revents)
        });
        assert_eq!(
            n,
            1,
            "poll on the wait fd: {}",
            if n < 0 { std::io::Error::last_os_error().to_string() } else { "timed out".into() }
        );
        assert_ne!(revents & libc::POLLIN, 0, "wait fd readable");
        // The completion is (or is about to be) queued: no blocking now.
        let start = Instant::now();
        loop {
            match p.b.cq.cq.trywait() {
                Err(Error::Again) => break,
                Ok(()) => {
                    assert!(start.elapsed() < WAIT, "trywait says Ok with a completion due");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("trywait: {e}"),
            }
        }
        let c = p.ok_b();
        assert_eq!((c.context, c.bytes()), (1, &b"poll me"[..]));
        p.ok_a();
    });
}

/// `signal` wakes a thread blocked in `sread`, which returns without a completion.
#[test]
fn signal_wakes_sread() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default()]) else { return };
        let cq = &g.sides[0].cq.cq;
        let long = Duration::from_secs(40);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let start = Instant::now();
                let r = cq.sread(Some(long));
                (r.map(|c| c.context), start.elapsed())
            });
            let start = Instant::now();
            // Signal until the waiter is woken (a signal sent before it sleeps may be
            // consumed by nobody).
            while !h.is_finished() && start.elapsed() < long {
                std::thread::sleep(Duration::from_millis(100));
                cq.signal();
            }
            let (r, took) = h.join().expect("sread thread");
            assert!(r.is_err(), "sread woken by signal returned a completion: {r:?}");
            assert!(took < Duration::from_secs(30), "signal did not wake sread: it returned after {took:?}");
        });
    });
}

/// `read` takes at most `max` completions, in order.
#[test]
fn read_batch() {
    run(PROV, |prov| {
        let counted = Opts { counter: true, ..Opts::default() };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), counted) else { return };
        p.warm_up();
        let cntr = p.b.cntr.as_ref().expect("counter");
        let base = cntr.read();
        for i in 0..5u64 {
            p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, i).expect("post recv");
            p.a.ep.send(Buf::from(pattern(8, i)), p.a_to_b, 10 + i).expect("post send");
        }
        let start = Instant::now();
        while cntr.read() < base + 5 {
            p.a.cq.drive();
            assert!(start.elapsed() < WAIT, "watchdog: receives not counted");
        }
        let mut out = Vec::with_capacity(10);
        assert_eq!(p.b.cq.cq.read(&mut out, 3), Ok(3), "a batch of at most 3");
        assert_eq!(p.b.cq.cq.read(&mut out, 10), Ok(2), "the remaining 2");
        let ctx: Vec<u64> = out.iter().map(|c| c.context).collect();
        assert_eq!(ctx, [0, 1, 2, 3, 4]);
        for (i, c) in out.iter().enumerate() {
            assert_bytes(c.bytes(), &pattern(8, i as u64), "batch-read message");
        }
        assert_eq!(p.b.cq.cq.read(&mut out, 10).unwrap_err(), Error::Again, "empty queue");
        for _ in 0..5 {
            p.ok_a();
        }
    });
}

/// `sread` on an empty event queue times out with `Err(WaitTimedOut)`.
#[test]
fn eq_sread_times_out() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Unspec, Caps::MSG) else { return };
        let f = Fabric::open(&info).expect("open fabric");
        let eq = f.eq(EqAttr::default()).expect("open eq");
        let t = Duration::from_millis(300);
        let start = Instant::now();
        let r = eq.sread(Some(t));
        let took = start.elapsed();
        assert_eq!(r.unwrap_err(), Error::WaitTimedOut, "sread on an empty event queue");
        assert!(took >= t - Duration::from_millis(20), "returned after {took:?}, before the time-out {t:?}");
        assert!(took < t + Duration::from_secs(20), "took {took:?}");
        assert_eq!(eq.read().unwrap_err(), Error::Again);
        assert_eq!(eq.readerr().unwrap_err(), Error::Again);
    });
}

/// Events the application writes come back in order, with their number and
/// bytes, to `read`, `peek` and `sread`.
#[test]
fn eq_write_reads_back() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Unspec, Caps::MSG) else { return };
        let f = Fabric::open(&info).expect("open fabric");
        let eq = f.eq(EqAttr::default()).expect("open eq");
        eq.write(0, b"first").expect("write FI_NOTIFY");
        eq.write(77, &[]).expect("write an empty event");
        match eq.peek() {
            Ok(EqEvent::User { event: 0, data }) => assert_eq!(data, b"first"),
            other => panic!("peek: {other:?}"),
        }
        match eq.read() {
            Ok(EqEvent::User { event: 0, data }) => assert_eq!(data, b"first"),
            other => panic!("read: {other:?}"),
        }
        match eq.sread(None) {
            Ok(EqEvent::User { event: 77, data }) => assert!(data.is_empty()),
            other => panic!("sread: {other:?}"),
        }
        assert_eq!(eq.read().unwrap_err(), Error::Again);
    });
}

/// Counters bound to endpoints count their successful and failed completions.
#[test]
fn counters_count_completions() {
    run(PROV, |prov| {
        let counted = Opts { counter: true, ..Opts::default() };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, counted, counted) else { return };
        p.warm_up();
        let (ca, cb) = (p.a.cntr.as_ref().expect("counter"), p.b.cntr.as_ref().expect("counter"));
        let (a0, b0) = (ca.read(), cb.read());
        assert_eq!((a0, b0), (2, 2), "warm-up: one send and one receive on each side");
        assert_eq!((ca.readerr(), cb.readerr()), (0, 0));
        for i in 0..5u64 {
            p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, i).expect("post recv");
            p.a.ep.send(Buf::from(pattern(10, i)), p.a_to_b, i).expect("post send");
        }
        for _ in 0..5 {
            p.ok_b();
            p.ok_a();
        }
        assert_eq!(ca.read(), a0 + 5, "sends counted");
        assert_eq!(cb.read(), b0 + 5, "receives counted");
        // An error completion counts as an error.
        p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 9).expect("post recv");
        p.a.ep.send(Buf::from(pattern(100, 9)), p.a_to_b, 9).expect("post send");
        assert_eq!(p.err_b().err, Error::Trunc);
        p.ok_a();
        assert_eq!(cb.readerr(), 1, "truncated receive counted as an error");
        assert_eq!(cb.read(), b0 + 5, "and not as a success");
        assert_eq!(ca.read(), a0 + 6);
        // The application's own updates.
        cb.add(10);
        assert_eq!(cb.read(), b0 + 15);
        cb.set(3);
        assert_eq!(cb.read(), 3);
        cb.adderr(2);
        assert_eq!(cb.readerr(), 3);
        cb.seterr(0);
        assert_eq!(cb.readerr(), 0);
    });
}

/// `wait` returns once the count reaches the threshold (making progress), and
/// times out with `Err(WaitTimedOut)` when it does not.
#[test]
fn counter_wait() {
    run(PROV, |prov| {
        let counted = Opts { counter: true, ..Opts::default() };
        let Some(p) = Pair::with(prov, EpType::Rdm, Caps::MSG, Opts::default(), counted) else { return };
        p.warm_up();
        let cb = p.b.cntr.as_ref().expect("counter");
        let b0 = cb.read();
        for i in 0..3u64 {
            p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, i).expect("post recv");
            p.a.ep.send(Buf::from(pattern(10, i)), p.a_to_b, i).expect("post send");
        }
        let r = with_driver(&[&p.a.cq], || cb.wait(b0 + 3, Some(WAIT)));
        assert_eq!(r, Ok(()), "wait for 3 receives");
        assert!(cb.read() >= b0 + 3);
        let t = Duration::from_millis(300);
        let start = Instant::now();
        assert_eq!(cb.wait(b0 + 1000, Some(t)), Err(Error::WaitTimedOut), "wait for a count never reached");
        assert!(start.elapsed() >= t - Duration::from_millis(20), "counter wait returned before its time-out");
        for _ in 0..3 {
            p.ok_b();
            p.ok_a();
        }
    });
}

/// `sread` with an error completion at the head returns `Err(Avail)`; `readerr`
/// then gives it.
#[test]
fn sread_reports_error_at_head() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        p.warm_up();
        p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 1).expect("post recv");
        p.a.ep.send(Buf::from(pattern(100, 1)), p.a_to_b, 2).expect("post send");
        let r = with_driver(&[&p.a.cq], || p.b.cq.cq.sread(Some(WAIT)));
        assert_eq!(r.map(|c| c.context).unwrap_err(), Error::Avail, "sread with an error at the head");
        let e = p.b.cq.cq.readerr().expect("readerr after FI_EAVAIL");
        assert_eq!((e.err, e.context), (Error::Trunc, 1));
        p.ok_a();
    });
}

/// Separate transmit and receive queues: each completion goes to the queue bound
/// for its direction.
#[test]
fn separate_tx_rx_queues() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Rdm, Caps::MSG) else { return };
        let mk = |name: &'static str| {
            let f = Fabric::open(&info).expect("open fabric");
            let d = f.domain(&info).expect("open domain");
            let (tx, rx) = (d.cq(CqAttr::default()).expect("cq"), d.cq(CqAttr::default()).expect("cq"));
            let av = d.av(AvAttr::default()).expect("av");
            let ep = d.endpoint(&info).expect("endpoint");
            ep.bind_cq(&tx, BindFlags::TRANSMIT).expect("bind tx cq");
            ep.bind_cq(&rx, BindFlags::RECV).expect("bind rx cq");
            ep.bind_av(&av).expect("bind av");
            ep.enable().expect("enable");
            (ep, Cq::new(name, tx), Cq::new(name, rx), av)
        };
        let (a_ep, a_tx, a_rx, a_av) = mk("a");
        let (b_ep, b_tx, b_rx, _b_av) = mk("b");
        let dest = a_av.insert_one(&b_ep.name().expect("name")).expect("insert");
        let d: [&dyn Drive; 4] = [&a_tx, &a_rx, &b_tx, &b_rx];
        b_ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        a_ep.send(Buf::from(b"split"), dest, 2).expect("post send");
        let r = ok(wait_for(&b_rx, &d, WAIT), "receive on the receive queue");
        assert_eq!((r.context, r.bytes()), (1, &b"split"[..]));
        let s = ok(wait_for(&a_tx, &d, WAIT), "send on the transmit queue");
        assert_eq!(s.context, 2);
        settle(&d, QUIET);
        assert!(!a_rx.has_entry() && !b_tx.has_entry(), "a completion went to the other direction's queue");
        assert_eq!(b_tx.cq.in_flight() + a_rx.cq.in_flight(), 0);
    });
}

/// With automatic data progress (when offered), a rendezvous completes while
/// only the sender's queue is read: the receiver progresses by itself.
#[test]
fn auto_progress() {
    run(PROV, |prov| {
        for t in [EpType::Rdm, EpType::Msg] {
            let auto = |h: Hints| Hints { data_progress: Progress::Auto, ..h };
            let Some(info) = find_info_with(prov, t, Caps::MSG, auto) else { continue };
            assert_eq!(info.domain_attr.data_progress, Progress::Auto, "{t}: asked for automatic progress");
            let Some(p) = Pair::from_info(info, Opts::default(), Opts::default()) else { continue };
            const N: usize = 4 << 20;
            p.b.ep.recv(Buf::new(N), FiAddr::UNSPEC, 1).expect("post recv");
            p.a.ep.send(Buf::from(pattern(N, 1)), p.a_to_b, 2).expect("post send");
            // Only the sender's queue (and, for MSG, nothing else) is read.
            let s = ok(wait_for(&p.a.cq, &[], WAIT), "send completing without the receiver being read");
            assert_eq!(s.context, 2);
            // The receive completed meanwhile: waiting for it takes a provider-side
            // progress of at most one read.
            let r = ok(wait_for(&p.b.cq, &[], WAIT), "receive");
            assert_bytes(r.bytes(), &pattern(N, 1), "message moved by automatic progress");
        }
    });
}

//! fabric-tokio on every built-in provider: completions, events and counters
//! awaited from one task; dropped futures lose nothing; queues that cannot be
//! awaited are refused with errors that say why.

#![allow(missing_docs)]

use fabric::{
    AvAttr, BindFlags, Buf, Caps, CompletionQueue, CqAttr, Domain, Endpoint, EpType, EqAttr, EqEvent, Fabric, FiAddr,
    Hints, Info, WaitObj,
};
use fabric_testkit::Rng;
use fabric_tokio::{AsyncCounter, AsyncCq, AsyncEq};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a test may take before it fails (a watchdog, not a timing
/// assertion).
const WATCHDOG: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// The built-in providers allowed by `FI_PROVIDER`.
fn providers() -> Vec<String> {
    let v: Vec<String> = fabric::providers().iter().map(|p| p.name().to_string()).collect();
    assert!(!v.is_empty(), "no provider built in");
    v
}

/// The first RDM entry of `prov` with messages, on loopback when it takes a
/// node.
fn rdm(prov: &str) -> Option<Info> {
    let base = Hints::new().provider(prov).ep_type(EpType::Rdm).caps(Caps::MSG);
    for h in [base.clone().node("127.0.0.1").source(true), base] {
        if let Ok(mut v) = fabric::getinfo(&h) {
            if !v.is_empty() {
                return Some(v.remove(0));
            }
        }
    }
    eprintln!("skipped: {prov} offers no RDM endpoint with messages");
    None
}

/// An endpoint of `info` in a domain of its own, bound to `cq` (made by
/// `mk_cq` in that domain) and to an address vector.
struct Side<Q> {
    ep: Endpoint,
    cq: Q,
    av: fabric::AddressVector,
    domain: Domain,
    _fabric: Fabric,
}

fn side<Q>(info: &Info, mk_cq: impl FnOnce(&Domain) -> Q, cq_of: impl Fn(&Q) -> &CompletionQueue) -> Side<Q> {
    let fabric = Fabric::open(info).expect("open fabric");
    let domain = fabric.domain(info).expect("open domain");
    let cq = mk_cq(&domain);
    let av = domain.av(AvAttr::default()).expect("open av");
    let ep = domain.endpoint(info).expect("open endpoint");
    ep.bind_cq(cq_of(&cq), BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    Side { ep, cq, av, domain, _fabric: fabric }
}

/// A sender on a thread of its own: `n` messages to `dest`, the `i`-th carrying
/// `i` (8 bytes) and sent with context `i`, each send's completion awaited
/// (blocking); now and then it pauses, so that the receiver's futures wait.
fn sender(a: Side<CompletionQueue>, dest: FiAddr, n: u64) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(move || {
        let mut rng = Rng::new(0x5eed);
        for i in 0..n {
            let mut buf = Buf::from(&i.to_le_bytes()[..]);
            let start = Instant::now();
            loop {
                match a.ep.send(buf, dest, i) {
                    Ok(()) => break,
                    Err(e) if e.error == fabric::Error::Again && start.elapsed() < WATCHDOG => {
                        buf = e.buffers.into_buf().expect("the send's buffer back");
                        let _ = a.cq.next();
                    }
                    Err(e) => return Err(format!("send {i}: {e}")),
                }
            }
            match a.cq.wait_next(Some(WATCHDOG)) {
                Ok(Some(Ok(c))) if c.context == i => {}
                other => return Err(format!("send {i}'s completion: {other:?}")),
            }
            if rng.chance(0.1) {
                std::thread::sleep(Duration::from_millis(rng.range(1..=5)));
            }
        }
        Ok(())
    })
}

/// Dropping a pending `AsyncCq::next` future (here at a random short time-out,
/// hundreds of times while messages keep arriving) loses no completion: every
/// message arrives once, with its payload.
#[test]
fn dropped_futures_lose_no_completion() {
    for prov in providers() {
        let Some(info) = rdm(&prov) else { continue };
        let rt = runtime();
        rt.block_on(async {
            const N: u64 = 400;
            const POSTED: u64 = 16;
            let a = side(&info, |d| d.cq(CqAttr::default()).expect("a's cq"), |q| q);
            let b = side(&info, |d| AsyncCq::open(d, CqAttr::default()).expect("b's async cq"), AsyncCq::queue);
            let a_to_b = a.av.insert_one(&b.ep.name().unwrap()).unwrap();
            b.av.insert_one(&a.ep.name().unwrap()).unwrap();
            for r in 0..POSTED {
                b.ep.recv(Buf::new(64), FiAddr::UNSPEC, r).expect("post recv");
            }
            let t = sender(a, a_to_b, N);
            let mut rng = Rng::new(7);
            let (mut seen, mut dropped) = (BTreeSet::new(), 0u32);
            let start = Instant::now();
            while (seen.len() as u64) < N {
                assert!(start.elapsed() < WATCHDOG, "{prov}: {} of {N} messages after {WATCHDOG:?}", seen.len());
                let wait = Duration::from_micros(rng.range(0..=3000));
                match tokio::time::timeout(wait, b.cq.next()).await {
                    Err(_) => dropped += 1,
                    Ok(r) => {
                        let c = r.expect("read b's queue").expect("a successful receive");
                        let v = u64::from_le_bytes(c.bytes().try_into().expect("8 bytes"));
                        assert!(seen.insert(v), "{prov}: message {v} twice");
                        b.ep.recv(Buf::new(64), FiAddr::UNSPEC, c.context).expect("post recv again");
                    }
                }
            }
            // Serve the sender's last acknowledgements until it is done.
            while !t.is_finished() {
                let _ = tokio::time::timeout(Duration::from_millis(5), b.cq.next()).await;
            }
            t.join().expect("sender thread").unwrap_or_else(|e| panic!("{prov}: {e}"));
            assert_eq!(seen, (0..N).collect::<BTreeSet<_>>(), "{prov}: every message once");
            assert!(dropped > 10, "{prov}: only {dropped} futures were dropped pending: the test tested little");
            eprintln!("{prov}: {N} messages, {dropped} futures dropped while pending");
        });
    }
}

/// Receive `n` messages on `b`, reposting each receive.
async fn serve(b: &Side<AsyncCq>, n: u64) -> Vec<u64> {
    let mut got = Vec::new();
    while (got.len() as u64) < n {
        let c = tokio::time::timeout(WATCHDOG, b.cq.next()).await.expect("watchdog").unwrap().unwrap();
        got.push(u64::from_le_bytes(c.bytes().try_into().unwrap()));
        b.ep.recv(Buf::new(64), FiAddr::UNSPEC, c.context).unwrap();
    }
    got
}

/// One task awaits several queues at once (two receivers, one `select`-free
/// loop per queue joined), without a thread per queue.
#[test]
fn one_task_awaits_several_queues() {
    for prov in providers() {
        let Some(info) = rdm(&prov) else { continue };
        let rt = runtime();
        rt.block_on(async {
            const N: u64 = 100;
            let mk = |d: &Domain| AsyncCq::open(d, CqAttr::default()).expect("async cq");
            let b1 = side(&info, mk, AsyncCq::queue);
            let b2 = side(&info, mk, AsyncCq::queue);
            let a1 = side(&info, |d| d.cq(CqAttr::default()).unwrap(), |q| q);
            let a2 = side(&info, |d| d.cq(CqAttr::default()).unwrap(), |q| q);
            let d1 = a1.av.insert_one(&b1.ep.name().unwrap()).unwrap();
            let d2 = a2.av.insert_one(&b2.ep.name().unwrap()).unwrap();
            b1.av.insert_one(&a1.ep.name().unwrap()).unwrap();
            b2.av.insert_one(&a2.ep.name().unwrap()).unwrap();
            let recv_all = |b: &Side<AsyncCq>| {
                for r in 0..8 {
                    b.ep.recv(Buf::new(64), FiAddr::UNSPEC, r).unwrap();
                }
            };
            recv_all(&b1);
            recv_all(&b2);
            let (t1, t2) = (sender(a1, d1, N), sender(a2, d2, N));
            let (g1, g2) = tokio::join!(serve(&b1, N), serve(&b2, N));
            for (t, b) in [(t1, &b1), (t2, &b2)] {
                while !t.is_finished() {
                    let _ = tokio::time::timeout(Duration::from_millis(5), b.cq.next()).await;
                }
                t.join().unwrap().unwrap_or_else(|e| panic!("{prov}: {e}"));
            }
            let mut g1s = g1.clone();
            g1s.sort();
            assert_eq!(g1s, (0..N).collect::<Vec<_>>(), "{prov}: queue 1 got every message");
            let mut g2s = g2;
            g2s.sort();
            assert_eq!(g2s, (0..N).collect::<Vec<_>>(), "{prov}: queue 2 got every message");
        });
    }
}

/// A counter's threshold is awaited: it counts b's receives, and the future
/// ends when the fifth has arrived, with the count then.
#[test]
fn counter_threshold_is_awaited() {
    for prov in providers() {
        let Some(info) = rdm(&prov) else { continue };
        let rt = runtime();
        rt.block_on(async {
            let a = side(&info, |d| d.cq(CqAttr::default()).unwrap(), |q| q);
            let b = side(&info, |d| d.cq(CqAttr::default()).unwrap(), |q| q);
            let cntr = match b.domain.counter() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("skipped: {prov} has no counters ({e})");
                    return;
                }
            };
            b.ep.bind_counter(&cntr, BindFlags::RECV).expect("bind counter");
            let counter = AsyncCounter::new(cntr).expect("async counter");
            let dest = a.av.insert_one(&b.ep.name().unwrap()).unwrap();
            b.av.insert_one(&a.ep.name().unwrap()).unwrap();
            for r in 0..5 {
                b.ep.recv(Buf::new(64), FiAddr::UNSPEC, r).unwrap();
            }
            // Nothing arrived: the wait does not end.
            let early = tokio::time::timeout(Duration::from_millis(50), counter.wait_for(5)).await;
            assert!(early.is_err(), "{prov}: the threshold was met before anything was sent: {early:?}");
            let t = sender(a, dest, 5);
            let n = tokio::time::timeout(WATCHDOG, counter.wait_for(5)).await.expect("watchdog").expect("wait_for");
            assert_eq!(n, 5, "{prov}: the count when the threshold was met");
            assert_eq!(counter.counter().readerr(), 0);
            let mut got = 0;
            while got < 5 {
                if b.cq.next().unwrap().is_some() {
                    got += 1;
                }
                tokio::task::yield_now().await;
            }
            while !t.is_finished() {
                let _ = b.cq.next();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            t.join().unwrap().unwrap_or_else(|e| panic!("{prov}: {e}"));
        });
    }
}

/// An event queue's connection request is awaited on tcp's MSG endpoints,
/// and so is the connection's establishment on both sides.
#[test]
fn eq_events_are_awaited() {
    let hints = Hints::new().provider("tcp").ep_type(EpType::Msg).node("127.0.0.1").source(true);
    let Some(info) = fabric::getinfo(&hints).ok().and_then(|mut v| (!v.is_empty()).then(|| v.remove(0))) else {
        eprintln!("skipped: tcp offers no MSG endpoint here (FI_PROVIDER?)");
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let fabric = Fabric::open(&info).unwrap();
        let eq = AsyncEq::open(&fabric, EqAttr::default()).expect("async eq");
        let pep = fabric.passive_ep(&info).unwrap();
        pep.bind_eq(eq.queue()).unwrap();
        pep.listen().unwrap();
        let addr = pep.name().unwrap();

        // Nothing yet: the wait goes on.
        assert!(tokio::time::timeout(Duration::from_millis(50), eq.next()).await.is_err());

        let cinfo = fabric::getinfo(&Hints::new().provider("tcp").ep_type(EpType::Msg)).unwrap().remove(0);
        let cfabric = Fabric::open(&cinfo).unwrap();
        let cdomain = cfabric.domain(&cinfo).unwrap();
        let ceq = AsyncEq::open(&cfabric, EqAttr::default()).unwrap();
        let ccq = cdomain.cq(CqAttr::default()).unwrap();
        let cep = cdomain.endpoint(&cinfo).unwrap();
        cep.bind_cq(&ccq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        cep.bind_eq(ceq.queue()).unwrap();
        cep.enable().unwrap();
        cep.connect(&addr, b"hi").unwrap();

        // The server's side and the client's, awaited together by this task:
        // awaiting the client's queue drives the client's side of the handshake.
        let server = async {
            let req = tokio::time::timeout(WATCHDOG, eq.next()).await.expect("watchdog").unwrap().expect("no error");
            let EqEvent::ConnReq { info: rinfo, data, .. } = req else {
                panic!("expected a connection request, got {req:?}")
            };
            assert_eq!(data, b"hi");
            let sdomain = fabric.domain(&rinfo).unwrap();
            let scq = sdomain.cq(CqAttr::default()).unwrap();
            let sep = sdomain.endpoint(&rinfo).unwrap();
            sep.bind_cq(&scq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
            sep.bind_eq(eq.queue()).unwrap();
            sep.enable().unwrap();
            sep.accept(b"").unwrap();
            let ev = tokio::time::timeout(WATCHDOG, eq.next()).await.expect("watchdog").unwrap().expect("no error");
            (ev, sep, scq, sdomain)
        };
        let client =
            async { tokio::time::timeout(WATCHDOG, ceq.next()).await.expect("watchdog").unwrap().expect("no error") };
        let ((s, _sep, _scq, _sdomain), c) = tokio::join!(server, client);
        assert!(matches!(s, EqEvent::Connected { .. }), "server side: {s:?}");
        assert!(matches!(c, EqEvent::Connected { .. }), "client side: {c:?}");
    });
}

/// Queues that cannot be awaited are refused, each error saying why.
#[test]
fn unawaitable_queues_are_refused_with_reasons() {
    let prov = &providers()[0];
    let Some(info) = rdm(prov) else { return };
    let fabric = Fabric::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    // Outside a runtime.
    let e = AsyncCq::open(&domain, CqAttr::default()).expect_err("no runtime");
    assert!(e.to_string().contains("outside a tokio runtime"), "{e}");
    let rt = runtime();
    rt.block_on(async {
        let none = CqAttr { wait_obj: WaitObj::None, ..Default::default() };
        let e = AsyncCq::open(&domain, none).expect_err("WaitObj::None asked");
        assert!(e.to_string().contains("WaitObj::Fd"), "{e}");
        let e = AsyncCq::new(domain.cq(none).unwrap()).expect_err("a queue without a descriptor");
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("no wait descriptor") && e.to_string().contains("WaitObj::Fd"), "{e}");
        let e = AsyncEq::open(&fabric, EqAttr { wait_obj: WaitObj::None, ..Default::default() }).expect_err("eq");
        assert!(e.to_string().contains("WaitObj::Fd"), "{e}");
        // One wrapper per queue.
        let cq = domain.cq(CqAttr { wait_obj: WaitObj::Fd, ..Default::default() }).unwrap();
        let first = AsyncCq::new(cq.clone()).expect("the first wrapper");
        let e = AsyncCq::new(cq.clone()).expect_err("a second wrapper of the same queue");
        assert!(e.to_string().contains("already registered"), "{e}");
        // Its queue back, the descriptor can be registered again.
        let cq = first.into_inner();
        AsyncCq::new(cq).expect("wrapped again once the first is gone");
    });
}

fn is_send_sync<T: Send + Sync>(_: &T) {}
fn is_send<T: Send>(_: &T) {}

/// The wrappers can be shared between tasks and their futures spawned on a
/// multi-threaded runtime (`Send`).
#[test]
fn wrappers_are_shareable_and_futures_send() {
    let prov = &providers()[0];
    let Some(info) = rdm(prov) else { return };
    let rt = runtime();
    rt.block_on(async {
        let fabric = Fabric::open(&info).unwrap();
        let domain = fabric.domain(&info).unwrap();
        let cq = AsyncCq::open(&domain, CqAttr::default()).unwrap();
        let eq = AsyncEq::open(&fabric, EqAttr::default()).unwrap();
        let cntr = AsyncCounter::new(domain.counter().unwrap()).unwrap();
        is_send_sync(&cq);
        is_send_sync(&eq);
        is_send_sync(&cntr);
        let (f1, f2, f3) = (cq.next(), eq.next(), cntr.wait_for(1));
        is_send(&f1);
        is_send(&f2);
        is_send(&f3);
        // Nothing is there: each is still pending after a while.
        assert!(tokio::time::timeout(Duration::from_millis(20), f1).await.is_err());
        assert!(tokio::time::timeout(Duration::from_millis(20), f2).await.is_err());
        assert!(tokio::time::timeout(Duration::from_millis(20), f3).await.is_err());
        // An application's count change ends a counter's wait.
        cntr.counter().add(1);
        assert_eq!(tokio::time::timeout(WATCHDOG, cntr.wait_for(1)).await.expect("watchdog").unwrap(), 1);
    });
}

//! Provider-level smoke tests of tcp, through the raw provider traits (the safe API
//! and the conformance suite live in the `fabric` crate).

mod common;

use common::wait;
use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, Op};
use fabric_core::*;
use std::sync::Arc;
use std::time::Duration;

struct Side {
    _dom: Arc<dyn DomainOps>,
    cq: Arc<dyn CqOps>,
    _av: Arc<dyn AvOps>,
    ep: Arc<dyn EndpointOps>,
    me: FiAddr,
    peer: FiAddr,
}

fn rdm_pair() -> (Side, Side) {
    let p = fabric_tcp::provider();
    let infos = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap();
    let info = infos[0].clone();
    let fabric = p.fabric(&info).unwrap();
    let mk = || {
        let dom = fabric.domain(&info).unwrap();
        let r = common::rdm_endpoint(&dom, &info);
        (dom, r.cq, r.av, r.ep)
    };
    let (d1, c1, a1, e1) = mk();
    let (d2, c2, a2, e2) = mk();
    let n1 = e1.getname().unwrap();
    let n2 = e2.getname().unwrap();
    let me1 = a1.insert(std::slice::from_ref(&n1)).unwrap()[0];
    let p1 = a1.insert(std::slice::from_ref(&n2)).unwrap()[0];
    let p2 = a2.insert(&[n1]).unwrap()[0];
    let me2 = a2.insert(&[n2]).unwrap()[0];
    (
        Side { _dom: d1, cq: c1, _av: a1, ep: e1, me: me1, peer: p1 },
        Side { _dom: d2, cq: c2, _av: a2, ep: e2, me: me2, peer: p2 },
    )
}

fn op(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Op<'_> {
    Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 }
}

#[test]
fn rdm_send_recv_sizes() {
    let (a, b) = rdm_pair();
    let _ = a.me;
    let _ = b.me;
    for &size in &[0usize, 1, 64, 4095, 65536, 131073, 1 << 20, 3 << 20] {
        let mut src: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        let mut dst = vec![0u8; size + 16];
        let siov = [IoVec { base: src.as_mut_ptr(), len: size }];
        let riov = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
        // SAFETY: buffers live until both completions are read below.
        unsafe {
            b.ep.post_recv(&op(&riov, FiAddr::UNSPEC, 2), OpFlags::empty()).unwrap();
            a.ep.post_send(&op(&siov, a.peer, 1), OpFlags::empty()).unwrap();
        }
        let r = wait(&b.cq, &a.cq).unwrap();
        let s = wait(&a.cq, &b.cq).unwrap();
        assert_eq!(s.op_context, 1);
        assert_eq!(r.op_context, 2);
        assert_eq!(r.len, size, "size {size}");
        assert_eq!(r.src, b.peer);
        assert_eq!(&dst[..size], &src[..], "size {size}");
    }
}

#[test]
fn rdm_unexpected_tagged_and_truncation() {
    let (a, b) = rdm_pair();
    // Unexpected: sends first (eager and rendezvous), receives later, out of tag order.
    let mut m1 = vec![1u8; 100];
    let mut m2 = vec![2u8; 300_000];
    let i1 = [IoVec { base: m1.as_mut_ptr(), len: m1.len() }];
    let i2 = [IoVec { base: m2.as_mut_ptr(), len: m2.len() }];
    let t = |iov, tag, ctx| Op { iov, addr: a.peer, context: ctx, user_context: ctx, data: 0, tag, ignore: 0 };
    // SAFETY: buffers outlive the completions.
    unsafe {
        a.ep.post_send(&t(&i1, 11, 1), OpFlags::TAGGED).unwrap();
        a.ep.post_send(&t(&i2, 22, 2), OpFlags::TAGGED).unwrap();
    }
    // Let the frames arrive unexpected.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        let _ = a.cq.read(&mut []);
        let _ = b.cq.read(&mut []);
    }
    let mut r2 = vec![0u8; 300_000];
    let mut r1 = vec![0u8; 50]; // too small: truncation
    let j2 = [IoVec { base: r2.as_mut_ptr(), len: r2.len() }];
    let j1 = [IoVec { base: r1.as_mut_ptr(), len: r1.len() }];
    let rt = |iov, tag, ctx| Op { iov, addr: FiAddr::UNSPEC, context: ctx, user_context: ctx, data: 0, tag, ignore: 0 };
    // SAFETY: as above.
    unsafe {
        b.ep.post_recv(&rt(&j2, 22, 20), OpFlags::TAGGED).unwrap();
        b.ep.post_recv(&rt(&j1, 11, 10), OpFlags::TAGGED).unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(wait(&b.cq, &a.cq));
    }
    let ok = got.iter().find_map(|r| r.as_ref().ok()).expect("one success");
    assert_eq!(ok.op_context, 20);
    assert_eq!(ok.tag, 22);
    assert!(r2.iter().all(|&x| x == 2));
    let err = got.iter().find_map(|r| r.as_ref().err()).expect("one truncation");
    assert_eq!(err.err, Error::Trunc);
    assert_eq!(err.entry.len, 50);
    assert_eq!(err.olen, 50);
    assert!(r1.iter().all(|&x| x == 1));
    for _ in 0..2 {
        wait(&a.cq, &b.cq).unwrap();
    }
}

#[test]
fn msg_connect_accept_send() {
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Msg).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    let eq_s = fabric.eq_open(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq_open(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let addr = pep.getname().unwrap();
    let dom = fabric.domain(&info).unwrap();
    let cq_c = dom.cq_open(&CqAttr::default()).unwrap();
    let cq_s = dom.cq_open(&CqAttr::default()).unwrap();
    let cli = dom.endpoint(&info).unwrap();
    cli.bind_cq(&cq_c, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    cli.bind_eq(&eq_c).unwrap();
    cli.enable().unwrap();
    cli.connect(&addr, b"hello-data").unwrap();
    // One thread plays both sides: drive the client while waiting on the server.
    let ev = loop {
        let _ = eq_c.peek();
        if let Ok(ev) = eq_s.sread(Some(Duration::from_millis(10))) {
            break ev;
        }
    };
    let EqEvent::ConnReq { info: req, data, .. } = ev else { panic!("{ev:?}") };
    assert_eq!(data, b"hello-data");
    let srv = dom.endpoint(&req).unwrap();
    srv.bind_cq(&cq_s, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    srv.bind_eq(&eq_s).unwrap();
    srv.enable().unwrap();
    srv.accept(b"ok").unwrap();
    let ev = loop {
        let _ = eq_s.peek();
        if let Ok(ev) = eq_c.sread(Some(Duration::from_millis(10))) {
            break ev;
        }
    };
    assert!(matches!(&ev, EqEvent::Connected { data, .. } if data == b"ok"), "{ev:?}");
    let mut buf = vec![0u8; 64];
    let mut msg = b"ping".to_vec();
    let ri = [IoVec { base: buf.as_mut_ptr(), len: 64 }];
    let si = [IoVec { base: msg.as_mut_ptr(), len: 4 }];
    // SAFETY: buffers outlive the completions.
    unsafe {
        srv.post_recv(&op(&ri, FiAddr::UNSPEC, 5), OpFlags::empty()).unwrap();
        cli.post_send(&op(&si, FiAddr::UNSPEC, 6), OpFlags::empty()).unwrap();
    }
    let r = wait(&cq_s, &cq_c).unwrap();
    assert_eq!(r.len, 4);
    assert_eq!(&buf[..4], b"ping");
    wait(&cq_c, &cq_s).unwrap();
    // Shutdown from the client: the server hears FI_SHUTDOWN.
    cli.shutdown().unwrap();
    let ev = loop {
        match eq_s.sread(Some(Duration::from_millis(10))) {
            Ok(EqEvent::Connected { .. }) => continue,
            Ok(ev) => break ev,
            Err(_) => continue,
        }
    };
    assert!(matches!(ev, EqEvent::Shutdown { .. }), "{ev:?}");
}

#[test]
fn rdm_send_to_self() {
    let (a, _b) = rdm_pair();
    let mut src = b"to myself".to_vec();
    let mut dst = vec![0u8; 32];
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: buffers outlive the completions.
    unsafe {
        a.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
        a.ep.post_send(&op(&si, a.me, 2), OpFlags::empty()).unwrap();
    }
    let mut got = [wait(&a.cq, &a.cq).unwrap(), wait(&a.cq, &a.cq).unwrap()];
    got.sort_by_key(|e| e.op_context);
    assert_eq!(got[0].len, 9);
    assert_eq!(got[0].src, a.me);
    assert_eq!(&dst[..9], b"to myself");
}

#[test]
fn auto_progress_completes_without_reads() {
    let p = fabric_tcp::provider();
    let hints =
        Hints { data_progress: Progress::Auto, ..Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true) };
    let info = p.getinfo(&hints).unwrap()[0].clone();
    assert_eq!(info.domain_attr.data_progress, Progress::Auto);
    let fabric = p.fabric(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let common::Rdm { cq: c1, av: a1, ep: e1 } = common::rdm_endpoint(&dom, &info);
    let common::Rdm { cq: c2, ep: e2, .. } = common::rdm_endpoint(&dom, &info);
    let to2 = a1.insert(&[e2.getname().unwrap()]).unwrap()[0];
    let mut src = vec![9u8; 300_000]; // rendezvous: needs several exchanges
    let mut dst = vec![0u8; 300_000];
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: buffers outlive the completions.
    unsafe {
        e2.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
        e1.post_send(&op(&si, to2, 2), OpFlags::empty()).unwrap();
    }
    // Only the receiver's queue is read, which drives only the receiver. The
    // rendezvous needs the sender to answer the receiver's clear-to-send, so the
    // receive completes only if the progress thread drives the sender.
    let start = std::time::Instant::now();
    let mut out = [CqEntry::new(0, Caps::empty())];
    loop {
        match c2.read(&mut out) {
            Ok(1) => break,
            Err(Error::Again) | Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no automatic progress");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(out[0].len, 300_000);
    assert!(dst.iter().all(|&b| b == 9));
    let _ = (c1, c2);
}

#[test]
fn malformed_peer_is_dropped_and_endpoint_keeps_working() {
    use std::io::Write;
    let (a, b) = rdm_pair();
    let target = a.ep.getname().unwrap().sockaddr().unwrap();
    // Garbage, a header of a future version, a hello claiming a huge name, a data
    // frame before any hello: each connection is closed by the endpoint.
    let mut bad_version = fabric_util::wire::Header::new(fabric_util::wire::OpCode::Msg).encode();
    bad_version[1] = 99;
    let mut huge = fabric_util::wire::Header::new(fabric_util::wire::OpCode::Hello);
    huge.len = u64::MAX;
    let early = fabric_util::wire::Header { len: 4, ..fabric_util::wire::Header::new(fabric_util::wire::OpCode::Msg) };
    let frames: Vec<Vec<u8>> =
        vec![vec![0xAB; 100], bad_version.to_vec(), huge.encode().to_vec(), early.encode().to_vec()];
    let mut socks = Vec::new();
    for f in &frames {
        let mut s = std::net::TcpStream::connect(target).unwrap();
        s.write_all(f).unwrap();
        socks.push(s);
    }
    // Drive the endpoint until every hostile connection is closed by it.
    let start = std::time::Instant::now();
    for s in &mut socks {
        s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        loop {
            let _ = a.cq.read(&mut []);
            let mut byte = [0u8; 1];
            match std::io::Read::read(s, &mut byte) {
                Ok(0) => break,                                                     // closed by the endpoint
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break, // likewise
                _ => {}
            }
            assert!(start.elapsed() < Duration::from_secs(20), "hostile connection not closed");
        }
    }
    // The endpoint still talks to a well-behaved peer.
    let mut src = b"still fine".to_vec();
    let mut dst = vec![0u8; 16];
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: buffers outlive the completions.
    unsafe {
        a.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
        b.ep.post_send(&op(&si, b.peer, 2), OpFlags::empty()).unwrap();
    }
    let r = wait(&a.cq, &b.cq).unwrap();
    assert_eq!(&dst[..r.len], b"still fine");
}

#[test]
fn a_closed_endpoint_takes_nothing_more() {
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let cq = dom.cq_open(&CqAttr::default()).unwrap();
    let av = dom.av_open(&AvAttr::default()).unwrap();
    let mut buf = [0u8; 8];
    let iov = [IoVec { base: buf.as_mut_ptr(), len: buf.len() }];
    // Closed before it was ever enabled: it is not enabled (nor renamed) after.
    let idle = dom.endpoint(&info).unwrap();
    idle.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    idle.bind_av(&av).unwrap();
    idle.close().unwrap();
    assert_eq!(idle.enable(), Err(Error::OpBadState));
    assert_eq!(idle.setname(&Address::Sockaddr("127.0.0.1:0".parse().unwrap())), Err(Error::OpBadState));
    // Closed once enabled: sends, injects and receives are refused.
    let r = common::rdm_endpoint(&dom, &info);
    let me = r.av.insert(&[r.ep.getname().unwrap()]).unwrap()[0];
    r.ep.close().unwrap();
    // SAFETY: the buffer outlives the calls (nothing is posted: they fail).
    unsafe {
        assert_eq!(r.ep.post_send(&op(&iov, me, 1), OpFlags::empty()), Err(Error::OpBadState));
        assert_eq!(r.ep.post_recv(&op(&iov, FiAddr::UNSPEC, 2), OpFlags::empty()), Err(Error::OpBadState));
    }
    assert_eq!(r.ep.inject(&[1, 2, 3], &op(&[], me, 3), OpFlags::empty()), Err(Error::OpBadState));
    // Closing again is harmless.
    r.ep.close().unwrap();
}

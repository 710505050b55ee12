//! A hello that waited in its socket while the endpoint made no progress (the
//! application computing for longer than `FI_TCP_HANDSHAKE_TIMEOUT`) is read, not
//! dropped as if the peer had never said who it is. Before: the endpoint dropped
//! the expired connection before reading it, and the peer's message was lost.
//! The same for a passive endpoint's connection request. (One test in this
//! binary: the time-out is read once per process.)

mod common;

use common::{rdm_endpoint, wait};
use fabric_core::prov::{IoVec, Op};
use fabric_core::*;
use std::time::Duration;

fn op(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Op<'_> {
    Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 }
}

#[test]
fn a_hello_that_waited_while_the_endpoint_computed_is_read() {
    // SAFETY of set_var: this binary's only test sets it before any thread of
    // the provider reads the environment.
    std::env::set_var("FI_TCP_HANDSHAKE_TIMEOUT", "200");
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap().remove(0);
    let dom = p.fabric(&info).unwrap().domain(&info).unwrap();
    let server = rdm_endpoint(&dom, &info);
    let client = rdm_endpoint(&dom, &info);
    let to_server = client.av.insert(&[server.ep.getname().unwrap()]).unwrap()[0];
    let mut src = b"said while the server computed".to_vec();
    let mut dst = vec![0u8; 64];
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: both buffers outlive the completions awaited below.
    unsafe {
        server.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
        client.ep.post_send(&op(&si, to_server, 2), OpFlags::empty()).unwrap();
    }
    // The client connects and sends its hello (its own progress only).
    for _ in 0..100 {
        let _ = client.cq.read(&mut []);
        std::thread::sleep(Duration::from_millis(1));
    }
    // The server accepts once, then computes for three handshake time-outs.
    let _ = server.cq.read(&mut []);
    std::thread::sleep(Duration::from_millis(600));
    let got = wait(&server.cq, &client.cq).expect("the message arrives");
    assert_eq!(&dst[..got.len], &src[..]);
    wait(&client.cq, &server.cq).expect("the send completes");

    // A passive endpoint: the request is read, after the pause, with its data.
    let minfo = p.getinfo(&Hints::new().ep_type(EpType::Msg).node("127.0.0.1").source(true)).unwrap().remove(0);
    let fabric = p.fabric(&minfo).unwrap();
    let eq_s = fabric.eq_open(&EqAttr::default()).unwrap();
    let eq_c = fabric.eq_open(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&minfo).unwrap();
    pep.bind_eq(&eq_s).unwrap();
    pep.listen().unwrap();
    let mdom = fabric.domain(&minfo).unwrap();
    let cq_c = mdom.cq_open(&CqAttr::default()).unwrap();
    let cli = mdom.endpoint(&minfo).unwrap();
    cli.bind_cq(&cq_c, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    cli.bind_eq(&eq_c).unwrap();
    cli.enable().unwrap();
    cli.connect(&pep.getname().unwrap(), b"after a pause").unwrap();
    for _ in 0..100 {
        let _ = eq_c.peek();
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = eq_s.peek();
    std::thread::sleep(Duration::from_millis(600));
    let start = std::time::Instant::now();
    let ev = loop {
        let _ = eq_c.peek();
        if let Ok(ev) = eq_s.sread(Some(Duration::from_millis(10))) {
            break ev;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no connection request");
    };
    let EqEvent::ConnReq { data, .. } = ev else { panic!("{ev:?}") };
    assert_eq!(data, b"after a pause");
}

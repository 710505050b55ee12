//! What posting a receive checks, as the endpoint's bindings and life change: no
//! receive queue (`NoCq`), one bound after `enable` (receives then work), and a
//! closed endpoint (`OpBadState`). Through the provider's own traits.

use fabric_core::prov::{DomainOps, IoVec, Op};
use fabric_core::{AvAttr, BindFlags, Caps, CqAttr, CqEntry, EpType, Error, FiAddr, Hints, OpFlags};
use std::time::{Duration, Instant};

mod common;

/// How long a wait may take.
const LIMIT: Duration = Duration::from_secs(20);

fn op(iov: &[IoVec], addr: FiAddr, context: u64) -> Op<'_> {
    Op { iov, addr, context, user_context: 0, data: 0, tag: 0, ignore: 0 }
}

#[test]
fn a_receive_queue_bound_after_enable_takes_receives() {
    let prov = fabric_shm::provider();
    let hints = Hints { ep_type: EpType::Rdm, ..Hints::default() };
    let info = prov.getinfo(&hints).expect("shm getinfo").remove(0);
    let dom: std::sync::Arc<dyn DomainOps> = prov.fabric(&info).expect("fabric").domain(&info).expect("domain");
    let txq = dom.cq_open(&CqAttr { size: 16, ..CqAttr::default() }).expect("cq");
    let av = dom.av_open(&AvAttr::default()).expect("av");
    let ep = dom.endpoint(&info).expect("endpoint");
    ep.bind_cq(&txq, BindFlags::TRANSMIT).expect("bind cq");
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");

    let mut buf = [0u8; 8];
    let iov = [IoVec { base: buf.as_mut_ptr(), len: buf.len() }];
    // SAFETY: refused, so nothing writes `buf`.
    assert_eq!(unsafe { ep.post_recv(&op(&iov, FiAddr::UNSPEC, 1), OpFlags::empty()) }, Err(Error::NoCq));

    // A receive queue bound now: the receive is taken, and a message lands in it.
    let rxq = dom.cq_open(&CqAttr { size: 16, ..CqAttr::default() }).expect("cq");
    ep.bind_cq(&rxq, BindFlags::RECV).expect("bind cq after enable");
    // SAFETY: `buf` outlives the receive: it completes below, before `buf` goes.
    unsafe { ep.post_recv(&op(&iov, FiAddr::UNSPEC, 2), OpFlags::empty()) }.expect("recv");
    let peer = common::node(16);
    let to = peer.av.insert(&[ep.getname().expect("getname")]).expect("av insert")[0];
    let msg = 7u64.to_le_bytes();
    let siov = [IoVec { base: msg.as_ptr() as *mut u8, len: msg.len() }];
    // SAFETY: an inline send: the payload is copied before it returns.
    unsafe { peer.ep.post_send(&op(&siov, to, 3), OpFlags::empty()) }.expect("send");
    let mut out = [CqEntry::new(0, Caps::empty()); 1];
    let start = Instant::now();
    loop {
        match rxq.read(&mut out) {
            Ok(1) => break,
            Err(Error::Again) => assert!(start.elapsed() < LIMIT, "no receive completion"),
            other => panic!("cq read: {other:?}"),
        }
    }
    assert_eq!(out[0].op_context, 2);
    assert_eq!(u64::from_le_bytes(buf), 7);
    // The send completed at the sender when its entry went into the ring.
    assert_eq!(peer.cq.read(&mut out), Ok(1));
    assert_eq!(out[0].op_context, 3);

    // Closed: refused as such.
    ep.close().expect("close");
    // SAFETY: refused, so nothing writes `buf`.
    assert_eq!(unsafe { ep.post_recv(&op(&iov, FiAddr::UNSPEC, 4), OpFlags::empty()) }, Err(Error::OpBadState));
}

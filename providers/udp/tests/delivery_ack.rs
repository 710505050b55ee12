//! A hostile peer against the sender side of `FI_DELIVERY_COMPLETE` over udp RDM
//! endpoints: a delivery acknowledgement (`Ack`) the endpoint is not waiting for,
//! for an id it never announced or for a send whose data it has not yet been
//! cleared to send, is the peer's protocol error: it is dropped and told so
//! (`Shutdown`), the send in flight with it fails once, nothing panics.

mod common;

use common::{open_domain, rdm_endpoint, Driver, Hostile};

use fabric_core::prov::{IoVec, Op};
use fabric_core::{Address, OpFlags};
use fabric_util::wire::{HdrFlags, Header, OpCode};

fn ack(id: u64) -> Vec<u8> {
    Header { id, ..Header::new(OpCode::Ack) }.encode().to_vec()
}

#[test]
fn unasked_delivery_acknowledgements_drop_the_peer() {
    let (dom, info) = open_domain();
    let t = rdm_endpoint(&dom, &info);
    let target = t.ep.getname().unwrap().sockaddr().unwrap();
    let driver = Driver::start(t.cq.clone());
    // Acknowledgements of nothing.
    for id in [0, 1, 77, u64::MAX] {
        let mut h = Hostile::new(target);
        h.send(ack(id));
        let (r, _) = h.wait_for("an ack for nothing", &driver, |f| f.op == OpCode::Shutdown);
        assert_eq!(r.op, OpCode::Shutdown);
    }
    // An acknowledgement before the data was cleared to send.
    let mut h = Hostile::new(target);
    let to_h = t.av.insert(&[Address::Sockaddr(h.sock.local_addr().unwrap())]).unwrap()[0];
    let mut data = [7u8; 64];
    let iov = [IoVec { base: data.as_mut_ptr(), len: data.len() }];
    let op = Op { iov: &iov, addr: to_h, context: 5, user_context: 5, data: 0, tag: 0, ignore: 0 };
    // SAFETY: `data` outlives the send's completion, which `driver.finish` waits
    // for below (the send fails when the peer is dropped).
    unsafe { t.ep.post_send(&op, OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE) }.unwrap();
    let (rts, _) = h.wait_for("the announcement", &driver, |f| f.op == OpCode::Rts);
    assert!(rts.flags.has(HdrFlags::DC), "a delivery-complete send is announced with DC: {rts:?}");
    assert_eq!(rts.len, 64);
    h.send(ack(rts.id));
    let (r, _) = h.wait_for("an ack before the clear to send", &driver, |f| f.op == OpCode::Shutdown);
    assert_eq!(r.op, OpCode::Shutdown);
    // The send fails, once (a driver keeps what completes on the queue).
    let mut seen = driver.finish();
    let start = std::time::Instant::now();
    while seen.is_empty() && start.elapsed() < common::STEP_LIMIT {
        let d = Driver::start(t.cq.clone());
        std::thread::sleep(std::time::Duration::from_millis(20));
        seen.extend(d.finish());
    }
    let d = Driver::start(t.cq.clone());
    std::thread::sleep(std::time::Duration::from_millis(50));
    seen.extend(d.finish());
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("CqErrEntry") && seen[0].contains("op_context: 5"), "{seen:?}");
}

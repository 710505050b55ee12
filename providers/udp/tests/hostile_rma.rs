//! A hostile peer against the target side of RMA of udp RDM endpoints (issue 15):
//! a peer that opens RMA operations without end (requests without `LAST`) is cut
//! off once it holds more than the shared cap (`fabric_util::rma_target::OPS_MAX`)
//! open, and the endpoint goes on serving a well-behaved peer.
//!
//! The hostile peer is a raw `UdpSocket` that speaks the shared reliability
//! protocol through its own `reliable::Channel`, and the `wire` frames on top. It
//! works in lockstep (one request, then its answer), so every step waits for
//! something positive: an answer, or the endpoint's `Shutdown` when it drops the
//! peer. The only time limit is a guard against a hang.

mod common;

use common::{open_domain, rdm_endpoint, wait, Driver, Hostile, Rdm};

use fabric_core::prov::{DomainOps, IoVec, RmaOp};
use fabric_core::*;
use fabric_util::rma_target::OPS_MAX;
use fabric_util::wire::{HdrFlags, Header, OpCode, RmaDesc};
use std::sync::Arc;

/// The target region's length.
const REGION: usize = 4096;

/// A write request of one byte at `addr` of region `key`, of operation `id`,
/// without `LAST`: the operation stays open at the target.
fn open_write(id: u64, addr: u64, key: u64) -> Vec<u8> {
    let h = Header { len: RmaDesc::LEN as u64 + 1, tag: 1, id, flags: HdrFlags(0), ..Header::new(OpCode::WriteReq) };
    let mut f = h.encode().to_vec();
    f.extend_from_slice(&RmaDesc { addr, key }.encode());
    f.push(0xAB);
    f
}

/// A well-behaved peer writes then reads back the region through the endpoint.
fn well_behaved_rma(dom: &Arc<dyn DomainOps>, info: &Info, t: &Rdm, addr: u64, key: u64) {
    let good = rdm_endpoint(dom, info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut src: Vec<u8> = (0..REGION).map(|i| (i * 31 + 7) as u8).collect();
    let mut seen = vec![0u8; REGION];
    let rma = [RmaIov { addr, len: REGION, key }];
    let wi = [IoVec { base: src.as_mut_ptr(), len: REGION }];
    let ri = [IoVec { base: seen.as_mut_ptr(), len: REGION }];
    let wop = RmaOp { iov: &wi, addr: to_t, rma: &rma, context: 1, user_context: 1, data: 0 };
    let rop = RmaOp { iov: &ri, addr: to_t, rma: &rma, context: 2, user_context: 2, data: 0 };
    // SAFETY: `src` and `seen` outlive the completions waited for below.
    unsafe { good.ep.post_write(&wop, OpFlags::empty()) }.unwrap();
    let w = wait(&good.cq, &t.cq).expect("the well-behaved write");
    assert_eq!(w.op_context, 1);
    // SAFETY: as above.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    let r = wait(&good.cq, &t.cq).expect("the well-behaved read");
    assert_eq!(r.op_context, 2);
    assert!(seen == src, "the well-behaved read does not see the well-behaved write");
}

#[test]
fn a_peer_opening_operations_without_end_is_cut_off() {
    // The memory first, so it is freed after the domain.
    let mut mem = vec![0u8; REGION];
    let (dom, info) = open_domain();
    let t = rdm_endpoint(&dom, &info);
    // SAFETY: `mem` outlives the domain and the test makes no reference to it
    // until the region is closed.
    let mr =
        unsafe { dom.mr_reg(mem.as_mut_ptr(), REGION, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());
    let mut h = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    // Up to the cap, every request is served (and its operation stays open).
    for id in 1..=OPS_MAX as u64 {
        h.send(open_write(id, addr, key));
        let what = format!("request {id} of {OPS_MAX}");
        let (r, payload) = h.wait_for(&what, &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
        assert_eq!((r.op, r.id, r.data), (OpCode::RmaResp, id, 0), "{what}: {r:?}");
        assert!(payload.is_empty(), "{what}: a write answered with bytes");
    }
    // One more operation, and the endpoint drops the peer and tells it so.
    h.send(open_write(u64::MAX, addr, key));
    let (r, _) =
        h.wait_for("the request over the cap", &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
    assert_eq!(
        r.op,
        OpCode::Shutdown,
        "the endpoint answered operation {} of a peer holding {OPS_MAX} open ({r:?}): it is never cut off",
        OPS_MAX + 1
    );
    let odd = driver.finish();
    assert!(odd.is_empty(), "the hostile peer completed something on the target's queue: {odd:?}");

    // The endpoint still serves a well-behaved peer.
    well_behaved_rma(&dom, &info, &t, addr, key);
    mr.close().unwrap();
    drop(t);
    drop(dom);
    assert!(mem.iter().enumerate().all(|(i, &b)| b == (i * 31 + 7) as u8), "the region is not what was written");
}

/// A peer breaking the protocol (here: a write request whose header says it is
/// shorter than the target it carries) is dropped and told so (`Shutdown`), as
/// tcp closes the connection; the endpoint goes on serving others.
#[test]
fn a_peer_breaking_the_protocol_is_told_it_was_dropped() {
    let mut mem = vec![0u8; REGION];
    let (dom, info) = open_domain();
    let t = rdm_endpoint(&dom, &info);
    // SAFETY: as in the test above.
    let mr =
        unsafe { dom.mr_reg(mem.as_mut_ptr(), REGION, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());
    let mut h = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    for len in [0u64, RmaDesc::LEN as u64 - 1] {
        let hd = Header { len, tag: 1, id: 1, flags: HdrFlags(HdrFlags::LAST), ..Header::new(OpCode::WriteReq) };
        let mut f = hd.encode().to_vec();
        f.extend_from_slice(&RmaDesc { addr, key }.encode());
        h.send(f);
        let what = format!("a write request of {len} bytes carrying {}", RmaDesc::LEN);
        let (r, _) = h.wait_for(&what, &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
        assert_eq!(r.op, OpCode::Shutdown, "{what}: {r:?}");
        h = Hostile::new(h.target);
    }
    assert!(driver.finish().is_empty());
    well_behaved_rma(&dom, &info, &t, addr, key);
    mr.close().unwrap();
}

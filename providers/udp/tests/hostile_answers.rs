//! A peer that asks for RMA answers and never acknowledges them (issue 15): over
//! its own `reliable::Channel` it sends read requests of `RMA_CHUNK` bytes each,
//! then goes silent. The target must not queue their answers without bound
//! (before the fix it queued all of them, hundreds of MiB): it keeps at most
//! `rma_target::ANSWER_BYTES_MAX` of answers unacknowledged for the peer and
//! answers the rest as the peer acknowledges; meanwhile a well-behaved peer is
//! served.

mod common;

use common::{open_domain, rdm_endpoint, read_request, well_behaved_read, Driver, Hostile};

use fabric_core::*;
use fabric_util::reliable::Nanos;
use fabric_util::rma_target::{answer_bytes_high_water, ANSWER_BYTES_MAX};
use fabric_util::wire::{OpCode, RMA_CHUNK};
use std::time::Duration;

/// Read requests the hostile peer sends.
const REQUESTS: u64 = 200;

#[test]
fn answers_a_peer_does_not_acknowledge_stay_bounded() {
    // The memory first, so it is freed after the domain.
    let mut mem: Vec<u8> = (0..RMA_CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let expect = mem.clone();
    let (dom, info) = open_domain();
    let t = rdm_endpoint(&dom, &info);
    // SAFETY: `mem` outlives the domain; the test reads it only through `expect`.
    let mr = unsafe { dom.mr_reg(mem.as_mut_ptr(), RMA_CHUNK, MrAccess::REMOTE_READ, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());

    // The hostile peer sends its requests, and from then on neither reads nor
    // acknowledges anything.
    let mut bad = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    for id in 1..=REQUESTS {
        bad.send(read_request(id, RMA_CHUNK as u64, addr, key).encode().to_vec());
    }
    bad.transmit(Nanos::now());

    // Meanwhile a well-behaved peer reads the same region.
    let what = "a well-behaved read next to a peer that acknowledges nothing";
    let seen = well_behaved_read(&dom, &info, &t, (addr, key, RMA_CHUNK), what);
    assert!(seen == expect, "the well-behaved read got other bytes");

    // Give the target time to take every request it is willing to take (before
    // the fix: all of them, 800 MiB of answers), well within the time after which
    // it gives a silent peer up.
    std::thread::sleep(Duration::from_secs(2));
    let high = answer_bytes_high_water();
    assert!(high <= ANSWER_BYTES_MAX, "{high} bytes of answers queued for one peer (bound {ANSWER_BYTES_MAX})");

    // Once the peer acknowledges, every request is answered, in order, with the
    // bytes.
    for id in 1..=REQUESTS {
        let (h, payload) = bad.wait_for("an answer", &driver, |_| true);
        assert_eq!((h.op, h.id, h.data), (OpCode::RmaResp, id, 0), "answer {id}");
        assert!(payload == expect, "answer {id} carries other bytes");
    }
    assert!(answer_bytes_high_water() <= ANSWER_BYTES_MAX);
    assert!(driver.finish().is_empty(), "the hostile peer completed something on the target's queue");
    mr.close().unwrap();
}

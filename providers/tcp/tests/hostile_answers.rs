//! A peer that asks for RMA answers and never takes them (issue 15): it sends
//! read requests of `RMA_CHUNK` bytes each and never reads its socket. The target
//! must not queue their answers without bound (before the fix it queued all of
//! them, hundreds of MiB): it keeps at most `rma_target::ANSWER_BYTES_MAX` of
//! answers queued for the peer and answers the rest as the peer takes what it was
//! sent; meanwhile a well-behaved peer is served.

mod common;

use common::{read_request, well_behaved_read};

use fabric_core::*;
use fabric_util::rma_target::{answer_bytes_high_water, ANSWER_BYTES_MAX};
use fabric_util::wire::{Header, OpCode, HDR_LEN, RMA_CHUNK};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Read requests the hostile peer sends.
const REQUESTS: u64 = 200;

fn read_frame(s: &mut TcpStream) -> (Header, Vec<u8>) {
    let mut hb = [0u8; HDR_LEN];
    s.read_exact(&mut hb).expect("a frame from the endpoint");
    let h = Header::decode(&hb, u64::MAX).expect("a valid frame");
    let mut payload = vec![0u8; h.payload_len() as usize];
    s.read_exact(&mut payload).expect("the frame's payload");
    (h, payload)
}

#[test]
fn answers_a_peer_does_not_take_stay_bounded() {
    // The memory first, so it is freed after the domain.
    let mut mem: Vec<u8> = (0..RMA_CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let expect = mem.clone();
    let (dom, info) = common::open_rdm_domain(&fabric_tcp::provider());
    let t = common::rdm_endpoint(&dom, &info);
    // SAFETY: `mem` outlives the domain; the test reads it only through `expect`.
    let mr = unsafe { dom.mr_reg(mem.as_mut_ptr(), RMA_CHUNK, MrAccess::REMOTE_READ, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let target = t.ep.getname().unwrap().sockaddr().unwrap();

    // The target's progress, from a thread.
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (stop, cq) = (stop.clone(), t.cq.clone());
        std::thread::spawn(move || {
            let mut out = [CqEntry::new(0, Caps::empty())];
            while !stop.load(Ordering::Acquire) {
                let _ = cq.sread(&mut out, Some(Duration::from_millis(5)));
            }
        })
    };

    // The hostile peer: a hello under a made-up name, then the requests, and it
    // never reads.
    let hold = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("127.0.0.1:{}", hold.local_addr().unwrap().port());
    let mut bad = TcpStream::connect(target).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let hello = Header { len: name.len() as u64, tag: name.len() as u64, id: 1, ..Header::new(OpCode::Hello) };
    bad.write_all(&hello.encode()).unwrap();
    bad.write_all(name.as_bytes()).unwrap();
    assert_eq!(read_frame(&mut bad).0.op, OpCode::HelloAck);
    for id in 1..=REQUESTS {
        bad.write_all(&read_request(id, RMA_CHUNK as u64, addr, key).encode()).unwrap();
    }

    // Meanwhile a well-behaved peer reads the same region.
    let what = "a well-behaved read next to a peer that takes no answers";
    let seen = well_behaved_read(&dom, &info, &t, (addr, key, RMA_CHUNK), what);
    assert!(seen == expect, "the well-behaved read got other bytes");

    // Give the target time to take every request it is willing to take (before
    // the fix: all of them, 800 MiB of answers).
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let high = answer_bytes_high_water();
    assert!(high <= ANSWER_BYTES_MAX, "{high} bytes of answers queued for one peer (bound {ANSWER_BYTES_MAX})");

    // Once the peer reads, every request is answered, in order, with the bytes.
    for id in 1..=REQUESTS {
        let (h, payload) = read_frame(&mut bad);
        assert_eq!((h.op, h.id, h.data), (OpCode::RmaResp, id, 0), "answer {id}");
        assert!(payload == expect, "answer {id} carries other bytes");
    }
    assert!(answer_bytes_high_water() <= ANSWER_BYTES_MAX);
    stop.store(true, Ordering::Release);
    driver.join().expect("the target's progress panicked");
    drop(bad);
    mr.close().unwrap();
}

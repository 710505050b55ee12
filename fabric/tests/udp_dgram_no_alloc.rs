//! The udp provider's DGRAM data path allocates nothing: after a warm-up,
//! ping-pongs of datagrams (sends, receives, injects, and the completions read with
//! their senders named through the AV) make no heap allocation on the thread that
//! drives them. Its own test binary, because it installs a counting global
//! allocator.

#![cfg(feature = "udp")]

use fabric::{AvAttr, BindFlags, Buf, CompletionQueue, CqAttr, EpType, Error, Fabric, FiAddr, Hints};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: fabric_testkit::alloc::Counting = fabric_testkit::alloc::Counting;

/// How long one completion may take before the test fails instead of hanging
/// (loopback does not drop a datagram whose receive is posted first).
const WAIT: Duration = Duration::from_secs(30);

/// Read both queues until the operation with `ctx` has completed, putting its
/// buffer back in its slot; a received one must come from `from`, with `len` bytes.
fn until(cqs: [&CompletionQueue; 2], slots: &mut [Option<Buf>; 4], ctx: usize, from: FiAddr, len: usize) {
    let start = Instant::now();
    while slots[ctx].is_none() {
        for cq in cqs {
            match cq.read_one() {
                Ok(c) => {
                    let i = c.context as usize;
                    if i == ctx && i < 2 {
                        assert_eq!((c.src, c.len), (from, len), "the receive of {i}");
                    }
                    let mut b = c.buffers.into_buf().unwrap_or_else(|| panic!("buffer of {i} comes back"));
                    let cap = b.capacity();
                    b.set_len(cap).unwrap();
                    slots[i] = Some(b);
                }
                Err(Error::Again) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(start.elapsed() < WAIT, "operation {ctx} did not complete within {WAIT:?}");
    }
}

#[test]
fn steady_state_dgram_ping_pong_allocates_nothing() {
    let h = Hints::new().provider("udp").ep_type(EpType::Dgram).node("127.0.0.1").source(true);
    let info = fabric::getinfo(&h).expect("udp offers DGRAM on loopback").remove(0);
    let fab = Fabric::open(&info).unwrap();
    let mk = || {
        let dom = fab.domain(&info).unwrap();
        let cq = dom.cq(CqAttr::default()).unwrap();
        let av = dom.av(AvAttr::default()).unwrap();
        let ep = dom.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq, av, dom)
    };
    let (a, acq, aav, _ad) = mk();
    let (b, bcq, bav, _bd) = mk();
    let to_b = aav.insert_one(&b.name().unwrap()).unwrap();
    let to_a = bav.insert_one(&a.name().unwrap()).unwrap();
    for size in [64, 4096] {
        // Slots: 0 and 1 are a's and b's receive buffers, 2 and 3 their send buffers.
        let mut slots: [Option<Buf>; 4] = std::array::from_fn(|_| Some(Buf::new(size)));
        let small = vec![7u8; 32];
        let mut round = |inject: bool| {
            let take = |s: &mut [Option<Buf>; 4], i: usize| s[i].take().unwrap();
            b.recv(take(&mut slots, 1), FiAddr::UNSPEC, 1).unwrap();
            a.send(take(&mut slots, 2), to_b, 2).unwrap();
            until([&bcq, &acq], &mut slots, 1, to_a, size);
            until([&acq, &bcq], &mut slots, 2, to_b, size);
            a.recv(take(&mut slots, 0), FiAddr::UNSPEC, 0).unwrap();
            if inject {
                b.inject(&small, to_a).unwrap();
                until([&acq, &bcq], &mut slots, 0, to_b, small.len());
            } else {
                b.send(take(&mut slots, 3), to_a, 3).unwrap();
                until([&acq, &bcq], &mut slots, 0, to_b, size);
                until([&bcq, &acq], &mut slots, 3, to_a, size);
            }
        };
        for i in 0..300 {
            round(i % 2 == 1);
        }
        let ((), n) = fabric_testkit::alloc::count(|| {
            for i in 0..1500 {
                round(i % 2 == 1);
            }
        });
        assert_eq!(n, 0, "{n} allocations in 1500 steady-state DGRAM rounds of {size} bytes");
    }
}

//! The data path allocates nothing: after a warm-up, ping-pongs of messages and
//! tagged messages (RDM, eager sizes, inject included) and messages that arrive
//! before their receive (buffered unexpected) make no heap allocation on the
//! thread that drives them; over tcp, over shm, and over verbs where a device is
//! (the Soft-RoCE guest of `providers/verbs/guest/ci.sh`). Its own test binary,
//! because it installs a counting global allocator.

#![cfg(any(feature = "tcp", feature = "shm", feature = "verbs"))]

use fabric::{AvAttr, BindFlags, Buf, CompletionQueue, CqAttr, EpType, Error, Fabric, FiAddr, Hints, Info};

#[global_allocator]
static GLOBAL: fabric_testkit::alloc::Counting = fabric_testkit::alloc::Counting;

/// Read both queues until the operation with `ctx` has completed; its buffer.
fn until(cqs: [&CompletionQueue; 2], slots: &mut [Option<Buf>; 4], ctx: usize) {
    while slots[ctx].is_none() {
        for cq in cqs {
            match cq.read_one() {
                Ok(c) => {
                    let i = c.context as usize;
                    let mut b = c.buffers.into_buf().unwrap_or_else(|| panic!("buffer of {i} comes back"));
                    let cap = b.capacity();
                    b.set_len(cap).unwrap();
                    slots[i] = Some(b);
                }
                Err(Error::Again) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
}

#[cfg(feature = "tcp")]
#[test]
fn steady_state_ping_pong_allocates_nothing() {
    let info = fabric::getinfo(&Hints::new().provider("tcp").ep_type(EpType::Rdm).node("127.0.0.1").source(true))
        .unwrap()
        .remove(0);
    steady_state(&info, &[64, 4096, 65536]);
}

/// Over shm: a payload in the ring entry and one in a bounce buffer. (A larger
/// send completes only once its receive has taken it, so the unexpected round,
/// which waits for the send before posting the receive, cannot run at that size;
/// `providers/shm/tests/no_alloc.rs` covers it with its own rounds.)
#[cfg(feature = "shm")]
#[test]
fn shm_steady_state_ping_pong_allocates_nothing() {
    let info = fabric::getinfo(&Hints::new().provider("shm").ep_type(EpType::Rdm)).unwrap().remove(0);
    steady_state(&info, &[64, 4096]);
}

/// Over verbs: eager sizes (larger messages register and read per operation).
#[cfg(feature = "verbs")]
#[test]
fn verbs_steady_state_ping_pong_allocates_nothing() {
    let info = match fabric::getinfo(&Hints::new().provider("verbs").ep_type(EpType::Rdm)) {
        Ok(mut v) => v.remove(0),
        Err(e) => {
            fabric_testkit::skip(
                "verbs",
                format!("no verbs device here ({e}); providers/verbs/guest/ci.sh runs this in a guest"),
            );
            return;
        }
    };
    steady_state(&info, &[64, 4096]);
}

/// Ping-pong rounds (plain, tagged with an inject back, unexpected) at each of
/// `sizes` between two endpoints of `info`: none may allocate once warm.
fn steady_state(info: &Info, sizes: &[usize]) {
    let info = info.clone();
    let fab = Fabric::open(&info).unwrap();
    let mk = || {
        let dom = fab.domain(&info).unwrap();
        let cq = dom.cq(CqAttr::default()).unwrap();
        let av = dom.av(AvAttr::default()).unwrap();
        let ep = dom.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq, av)
    };
    let (a, acq, aav) = mk();
    let (b, bcq, bav) = mk();
    let to_b = aav.insert_one(&b.name().unwrap()).unwrap();
    let to_a = bav.insert_one(&a.name().unwrap()).unwrap();
    for &size in sizes {
        let mut slots: [Option<Buf>; 4] = std::array::from_fn(|_| Some(Buf::new(size)));
        let small = vec![7u8; 64];
        let mut round = |mode: usize| {
            let take = |s: &mut [Option<Buf>; 4], i: usize| s[i].take().unwrap();
            let tagged = mode == 1;
            if mode == 2 {
                // Unexpected: the message is buffered by b before its receive exists.
                a.send(take(&mut slots, 2), to_b, 2).unwrap();
                until([&acq, &bcq], &mut slots, 2);
                for _ in 0..50 {
                    assert!(matches!(bcq.read_one(), Err(Error::Again)));
                }
                b.recv(take(&mut slots, 1), FiAddr::UNSPEC, 1).unwrap();
                until([&bcq, &acq], &mut slots, 1);
                return;
            }
            if tagged {
                b.trecv(take(&mut slots, 1), FiAddr::UNSPEC, 9, 0, 1).unwrap();
                a.trecv(take(&mut slots, 0), FiAddr::UNSPEC, 9, 0, 0).unwrap();
                a.tsend(take(&mut slots, 2), to_b, 9, 2).unwrap();
            } else {
                b.recv(take(&mut slots, 1), FiAddr::UNSPEC, 1).unwrap();
                a.recv(take(&mut slots, 0), FiAddr::UNSPEC, 0).unwrap();
                a.send(take(&mut slots, 2), to_b, 2).unwrap();
            }
            until([&bcq, &acq], &mut slots, 1);
            if tagged {
                b.tinject(&small, to_a, 9).unwrap();
                until([&acq, &bcq], &mut slots, 0);
            } else {
                b.send(take(&mut slots, 3), to_a, 3).unwrap();
                until([&acq, &bcq], &mut slots, 0);
                until([&bcq, &acq], &mut slots, 3);
            }
            until([&acq, &bcq], &mut slots, 2);
        };
        for i in 0..300 {
            round(i % 3);
        }
        let ((), n) = fabric_testkit::alloc::count(|| {
            for i in 0..1500 {
                round(i % 3);
            }
        });
        assert_eq!(n, 0, "{n} allocations in 1500 steady-state rounds of {size} bytes");
    }
}

//! The shm data path allocates nothing: after a warm-up, ping-pongs between two
//! endpoints of one process (messages and tagged messages, an inject back, and a
//! message that arrives before its receive) make no heap allocation on the thread
//! that drives them, at an inline size, a bounce-buffer size and a size copied across
//! (or streamed). Its own test binary, because it installs a counting global
//! allocator.

use fabric_core::prov::{CqOps, IoVec, Op};
use fabric_core::{Caps, CqEntry, Error, FiAddr, OpFlags};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: fabric_testkit::alloc::Counting = fabric_testkit::alloc::Counting;

/// How long one wait for a completion may take.
const LIMIT: Duration = Duration::from_secs(20);

mod common;

use common::Node;

/// An endpoint in a domain of its own.
fn node() -> Node {
    common::node(64)
}

fn op(iov: &[IoVec], addr: FiAddr, context: u64, tag: u64) -> Op<'_> {
    Op { iov, addr, context, user_context: 0, data: 0, tag, ignore: 0 }
}

/// Read both queues until the operation with context `ctx` completed on `cqs[0]`
/// (the other queue's completions are counted into `seen`).
fn until(cqs: [&Arc<dyn CqOps>; 2], ctx: u64, seen: &mut [u32; 4]) {
    let start = Instant::now();
    let mut out = [CqEntry::new(0, Caps::empty()); 1];
    while seen[ctx as usize] == 0 {
        for cq in cqs {
            match cq.read(&mut out) {
                Ok(1) => seen[out[0].op_context as usize] += 1,
                Ok(_) | Err(Error::Again) => {}
                Err(e) => panic!("cq read: {e:?}"),
            }
        }
        assert!(start.elapsed() < LIMIT, "operation {ctx} did not complete");
    }
    seen[ctx as usize] -= 1;
}

/// Ping-pong rounds at `size` bytes between `a` and `b`: none may allocate once warm.
fn steady_state(a: &Node, b: &Node, to_b: FiAddr, to_a: FiAddr, size: usize) {
    let mut bufs: [Vec<u8>; 4] = std::array::from_fn(|i| vec![i as u8; size]);
    let small = [7u8; 64];
    let mut seen = [0u32; 4];
    let mut round = |mode: usize| {
        let [b0, b1, b2, b3] = &mut bufs;
        let iov = |v: &mut Vec<u8>| [IoVec { base: v.as_mut_ptr(), len: v.len() }];
        let (i0, i1, i2, i3) = (iov(b0), iov(b1), iov(b2), iov(b3));
        let tagged = mode == 1;
        let f = if tagged { OpFlags::TAGGED | OpFlags::COMPLETION } else { OpFlags::COMPLETION };
        if mode == 2 {
            // Unexpected: b holds the message before its receive exists.
            // (A large send completes only once b has taken it: after the receive.)
            // SAFETY: the buffer stays alive and untouched until the operation's
            // completion is read, before the round returns.
            unsafe { a.ep.post_send(&op(&i2, to_b, 2, 0), f) }.expect("send");
            // Reads of b's empty queue drive its progress: the message arrives
            // and is held.
            let mut out = [CqEntry::new(0, Caps::empty()); 1];
            for _ in 0..50 {
                assert!(matches!(b.cq.read(&mut out), Err(Error::Again)));
            }
            // SAFETY: the buffer stays alive and untouched until the operation's
            // completion is read, before the round returns.
            unsafe { b.ep.post_recv(&op(&i1, FiAddr::UNSPEC, 1, 0), f) }.expect("recv");
            until([&b.cq, &a.cq], 1, &mut seen);
            until([&a.cq, &b.cq], 2, &mut seen);
            return;
        }
        // SAFETY: the buffer stays alive and untouched until the operation's
        // completion is read, before the round returns.
        unsafe { b.ep.post_recv(&op(&i1, FiAddr::UNSPEC, 1, 9), f) }.expect("recv b");
        // SAFETY: the buffer stays alive and untouched until the operation's
        // completion is read, before the round returns.
        unsafe { a.ep.post_recv(&op(&i0, FiAddr::UNSPEC, 0, 9), f) }.expect("recv a");
        // SAFETY: the buffer stays alive and untouched until the operation's
        // completion is read, before the round returns.
        unsafe { a.ep.post_send(&op(&i2, to_b, 2, 9), f) }.expect("send a");
        until([&b.cq, &a.cq], 1, &mut seen);
        if tagged {
            b.ep.inject(&small, &op(&[], to_a, 3, 9), f).expect("inject b");
            until([&a.cq, &b.cq], 0, &mut seen);
        } else {
            // SAFETY: the buffer stays alive and untouched until the operation's
            // completion is read, before the round returns.
            unsafe { b.ep.post_send(&op(&i3, to_a, 3, 0), f) }.expect("send b");
            until([&a.cq, &b.cq], 0, &mut seen);
            until([&b.cq, &a.cq], 3, &mut seen);
        }
        until([&a.cq, &b.cq], 2, &mut seen);
    };
    for i in 0..300 {
        round(i % 3);
    }
    // At least 1500 rounds, and long enough for progress's liveness check of the
    // peers (every 50 ms) to run inside.
    let (rounds, n) = fabric_testkit::alloc::count(|| {
        let t = Instant::now();
        let mut rounds = 0;
        while rounds < 1500 || t.elapsed() < Duration::from_millis(150) {
            round(rounds % 3);
            rounds += 1;
        }
        rounds
    });
    assert_eq!(n, 0, "{n} allocations in {rounds} steady-state rounds of {size} bytes");
}

#[test]
fn steady_state_ping_pong_allocates_nothing() {
    let (a, b) = (node(), node());
    let to_b = a.av.insert(&[b.ep.getname().expect("name b")]).expect("insert b")[0];
    let to_a = b.av.insert(&[a.ep.getname().expect("name a")]).expect("insert a")[0];
    // Inline, a bounce buffer, and copied across (or streamed) by the receiver.
    for size in [64, 4096, 65536] {
        steady_state(&a, &b, to_b, to_a, size);
    }
}

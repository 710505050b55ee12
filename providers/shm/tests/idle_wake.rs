//! Stress test of progress's lock-free idle check against concurrent senders: every
//! wait here is a blocking `sread` without a time-out, so a wake-up lost between the
//! idle check and a sender's entry hangs the test instead of passing it.
//!
//! - `ping_pong_blocking`: two endpoints, each on its own thread, answer each other,
//!   sleeping for every message.
//! - `many_senders_one_sleeper`: several senders stream messages at one receiver that
//!   sleeps whenever its queue is empty, while another thread keeps reading the
//!   receiver's queue (progress from two threads: the idle check sees consumer
//!   positions another thread moves).

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, Op};
use fabric_core::{AvAttr, BindFlags, Caps, CqAttr, CqEntry, EpType, Error, FiAddr, Hints, OpFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

struct Node {
    ep: Arc<dyn EndpointOps>,
    /// Receive completions (and transmit ones, unless `txcq` is separate).
    cq: Arc<dyn CqOps>,
    /// Transmit completions.
    txcq: Arc<dyn CqOps>,
    av: Arc<dyn AvOps>,
}

fn domain() -> Arc<dyn DomainOps> {
    let prov = fabric_shm::provider();
    let hints = Hints { ep_type: EpType::Rdm, ..Hints::default() };
    let info = prov.getinfo(&hints).expect("shm getinfo").remove(0);
    let fabric = prov.fabric(&info).expect("fabric");
    fabric.domain(&info).expect("domain")
}

/// An endpoint with its queues: one for both directions, or one each (`split`).
fn node(dom: &Arc<dyn DomainOps>, split: bool) -> Node {
    let info = dom.info().clone();
    let attr = CqAttr { size: 4096, ..CqAttr::default() };
    let cq = dom.cq_open(&attr).expect("cq");
    let av = dom.av_open(&AvAttr::default()).expect("av");
    let ep = dom.endpoint(&info).expect("endpoint");
    let txcq = if split {
        let txcq = dom.cq_open(&attr).expect("cq");
        ep.bind_cq(&cq, BindFlags::RECV).expect("bind cq");
        ep.bind_cq(&txcq, BindFlags::TRANSMIT).expect("bind cq");
        txcq
    } else {
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
        cq.clone()
    };
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    Node { ep, cq, txcq, av }
}

/// Drive `n`'s progress through its transmit queue (which injects leave empty).
fn poke(n: &Node) {
    let _ = n.txcq.read(&mut [CqEntry::new(0, Caps::empty())]);
}

/// `peer`'s handle in `n`'s AV.
fn insert(n: &Node, peer: &Node) -> FiAddr {
    n.av.insert(&[peer.ep.getname().expect("name")]).expect("insert")[0]
}

fn op(iov: &[IoVec], addr: FiAddr, tag: u64) -> Op<'_> {
    Op { iov, addr, context: tag, user_context: 0, data: 0, tag, ignore: 0 }
}

fn send(n: &Node, to: FiAddr, tag: u64) {
    let data = tag.to_le_bytes();
    loop {
        match n.ep.inject(&data, &op(&[], to, tag), OpFlags::TAGGED) {
            Ok(()) => return,
            Err(Error::Again) => poke(n),
            Err(e) => panic!("inject: {e:?}"),
        }
    }
}

/// Post a receive for `tag` into `buf`.
fn post_recv(n: &Node, buf: &mut [u8; 8], tag: u64) {
    let iov = [IoVec { base: buf.as_mut_ptr(), len: buf.len() }];
    // SAFETY: `buf` outlives the receive: the caller waits for its completion before
    // touching or dropping it.
    unsafe { n.ep.post_recv(&op(&iov, FiAddr::UNSPEC, tag), OpFlags::TAGGED) }.expect("post_recv");
}

/// Block until one completion arrives.
fn wait_one(n: &Node) -> CqEntry {
    let mut out = [CqEntry::new(0, Caps::empty())];
    loop {
        match n.cq.sread(&mut out, None) {
            Ok(1) => return out[0],
            Ok(_) | Err(Error::Again) => {}
            Err(e) => panic!("sread: {e:?}"),
        }
    }
}

#[test]
fn ping_pong_blocking() {
    const ROUNDS: u64 = 5000;
    let dom = domain();
    let (a, b) = (node(&dom, false), node(&dom, false));
    let (ab, ba) = (insert(&a, &b), insert(&b, &a));
    thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 8];
            for i in 0..ROUNDS {
                post_recv(&b, &mut buf, i);
                let c = wait_one(&b);
                assert_eq!(c.op_context, i);
                assert_eq!(u64::from_le_bytes(buf), i);
                send(&b, ba, i);
            }
        });
        let mut buf = [0u8; 8];
        for i in 0..ROUNDS {
            post_recv(&a, &mut buf, i);
            send(&a, ab, i);
            let c = wait_one(&a);
            assert_eq!(c.op_context, i);
            assert_eq!(u64::from_le_bytes(buf), i);
        }
    });
}

#[test]
fn many_senders_one_sleeper() {
    const SENDERS: usize = 3;
    const EACH: u64 = 4000;
    let dom = domain();
    let rx = node(&dom, true);
    let senders: Vec<Node> = (0..SENDERS).map(|_| node(&dom, false)).collect();
    let dests: Vec<FiAddr> = senders.iter().map(|n| insert(n, &rx)).collect();
    let done = AtomicBool::new(false);
    let done = &done;
    thread::scope(|s| {
        for (n, &to) in senders.iter().zip(&dests) {
            s.spawn(move || {
                for i in 0..EACH {
                    send(n, to, 1);
                    poke(n);
                    if i % 64 == 0 {
                        thread::yield_now();
                    }
                }
                // Entries queued while the ring was full go out as progress runs.
                while !done.load(Ordering::Relaxed) {
                    poke(n);
                    thread::yield_now();
                }
            });
        }
        // Progress of the receiver from a second thread, through its (empty)
        // transmit queue: it moves the consumer positions the sleeper's idle
        // check reads.
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                poke(&rx);
            }
        });
        let mut buf = [0u8; 8];
        for _ in 0..SENDERS as u64 * EACH {
            post_recv(&rx, &mut buf, 1);
            wait_one(&rx);
        }
        done.store(true, Ordering::Relaxed);
    });
}

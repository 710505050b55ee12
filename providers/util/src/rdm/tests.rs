//! Two engines driven against each other in memory, as quinn-proto tests its
//! connection (`Pair`): frames are serialized to bytes, carried in order, and fed
//! to the other end in pieces a seeded fault injector chooses (split anywhere,
//! through `write` or straight into memory through `pieces`), with a frame's
//! "sent" report coming at once (a stream) or late (a channel's acknowledgement).
//! No sockets, no threads, no time.

use super::*;
use crate::cntr::UtilCntr;
use crate::cq::UtilCq;
use crate::wire::HdrFlags;
use crate::wire::{Header, OpCode, RMA_CHUNK};
use fabric_core::prov::{AtomicDesc, CntrOps, CqOps, MrOps, Op, RmaOp};
use fabric_core::{AtomicKind, AtomicOp, CqAttr, CqEntry, Datatype, MrAccess, MrMode, OpFlags, RmaIov};
use fabric_testkit::Rng;
use std::sync::Arc;

const EAGER: usize = 4096;

fn cfg() -> Config {
    Config { name: "test", eager_max: EAGER, unexp_max_one: 1 << 20, unexp_max_count: 64 }
}

/// One end: its engine, its state about the other end, its queues and domain.
struct End {
    eng: Engine<u8>,
    pr: PeerRx,
    b: Bindings,
    objs: DomainObjects,
    tx: Arc<UtilCq>,
    rx: Arc<UtilCq>,
    wcntr: Arc<UtilCntr>,
    /// Frames sent and not yet reported done (a channel waiting for its ack).
    unacked: VecDeque<Frame>,
    /// Why the other end broke the protocol, once it did.
    violation: Option<Violation>,
    /// The peer id this end gives the other.
    other: u8,
    /// Fetch mode: frames go whole through `frame`, and this end fetches
    /// rendezvous data by copying from the other end's memory.
    whole: bool,
    /// The error the next fetches report (a fetch that fails).
    fetch_fail: Option<Error>,
    /// Fetches done.
    fetches: usize,
}

impl End {
    fn fetching(other: u8) -> End {
        let mut e = End::new(other, false);
        e.eng = Engine::new(cfg()).with_fetch();
        e.whole = true;
        e
    }

    /// Fetch what the engine matched: copy the sender's pieces (named by the
    /// `Rts` payload) into the receive's, as an RDMA READ would.
    fn fetch_all(&mut self) -> bool {
        let mut moved = false;
        while let Some(f) = self.eng.poll_fetch() {
            moved = true;
            self.fetches += 1;
            let remote = crate::verbs_wire::decode_rts(&f.payload, f.hdr.len, IOV_LIMIT).expect("our announcement");
            if self.fetch_fail.is_none() {
                let want = IoVec::total(f.pieces());
                let mut at = 0usize;
                for r in remote {
                    let n = (r.len as usize).min(want - at);
                    // SAFETY: (test) the sender's pieces stay alive until the test ends.
                    let bytes = unsafe { std::slice::from_raw_parts(r.addr as *const u8, n) };
                    crate::iov::copy_into(f.pieces(), want, at as u64, bytes);
                    at += n;
                }
            }
            assert!(self.eng.fetched(&self.b, f.peer, f.id, self.fetch_fail));
        }
        moved
    }

    fn new(other: u8, hold: bool) -> End {
        let attr = CqAttr::default();
        let tx = UtilCq::new(&attr).unwrap();
        let rx = UtilCq::new(&attr).unwrap();
        let wcntr = UtilCntr::new().unwrap();
        let b = Bindings {
            tx_cq: Some(tx.clone()),
            rx_cq: Some(rx.clone()),
            rma_write_cntr: Some(wcntr.clone()),
            ..Bindings::default()
        };
        End {
            eng: Engine::new(cfg()),
            pr: if hold { PeerRx::holding() } else { PeerRx::new() },
            b,
            objs: DomainObjects::new("test", MrMode::empty(), |_| true),
            tx,
            rx,
            wcntr,
            unacked: VecDeque::new(),
            violation: None,
            other,
            whole: false,
            fetch_fail: None,
            fetches: 0,
        }
    }

    fn reg(&self, buf: &mut [u8], key: u64) -> Arc<dyn MrOps> {
        // SAFETY: (test) every buffer registered outlives the pair.
        unsafe { self.objs.mr_reg(buf.as_mut_ptr(), buf.len(), MrAccess::all(), key) }.unwrap()
    }

    fn comps(cq: &UtilCq) -> Vec<CqEntry> {
        let mut out = [CqEntry::new(0, Caps::empty()); 16];
        let mut v = Vec::new();
        while let Ok(n) = cq.read(&mut out) {
            v.extend_from_slice(&out[..n]);
        }
        v
    }

    fn errs(cq: &UtilCq) -> Vec<Error> {
        let mut v = Vec::new();
        while let Ok(e) = cq.readerr() {
            v.push(e.err);
        }
        v
    }
}

/// Serialize a frame: its head, then its payload gathered.
fn bytes_of(f: &Frame) -> Vec<u8> {
    let mut v = f.head[..f.head_len].to_vec();
    for p in f.payload().iter().filter(|p| p.len > 0) {
        // SAFETY: (test) payload pieces point at live buffers of the test or the frame.
        v.extend_from_slice(unsafe { std::slice::from_raw_parts(p.base, p.len) });
    }
    v
}

struct Pair {
    a: End,
    b: End,
    rng: Rng,
    /// Bytes in flight A to B and B to A, one frame per entry, in order.
    ab: VecDeque<Vec<u8>>,
    ba: VecDeque<Vec<u8>>,
    /// Report sent frames late (a channel) rather than at once (a stream).
    late_done: bool,
}

impl Pair {
    fn new(seed: u64) -> Pair {
        Pair::with(seed, false)
    }

    fn with(seed: u64, hold: bool) -> Pair {
        let mut rng = Rng::new(seed);
        let late_done = rng.chance(0.5);
        Pair { a: End::new(1, hold), b: End::new(0, hold), rng, ab: VecDeque::new(), ba: VecDeque::new(), late_done }
    }

    /// Two fetch-mode engines, whose frames arrive whole (as verbs' do).
    fn fetching(seed: u64) -> Pair {
        let mut p = Pair::new(seed);
        p.a = End::fetching(1);
        p.b = End::fetching(0);
        p
    }

    /// Move frames until nothing moves.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let mut moved = Self::transmit(&mut self.a, &mut self.ab, &mut self.rng, self.late_done);
            moved |= Self::transmit(&mut self.b, &mut self.ba, &mut self.rng, self.late_done);
            moved |= Self::deliver(&mut self.b, &mut self.ab, &mut self.rng);
            moved |= Self::deliver(&mut self.a, &mut self.ba, &mut self.rng);
            moved |= self.a.fetch_all();
            moved |= self.b.fetch_all();
            // A channel's acknowledgements come back some time later.
            for e in [&mut self.a, &mut self.b] {
                while !e.unacked.is_empty() && (!moved || self.rng.chance(0.3)) {
                    let f = e.unacked.pop_front().unwrap();
                    let cx = Ctx { b: &e.b, objs: &e.objs };
                    e.eng.frame_done(cx, e.other, Some(&mut e.pr), f);
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the pair did not settle");
    }

    fn transmit(e: &mut End, wire: &mut VecDeque<Vec<u8>>, rng: &mut Rng, late: bool) -> bool {
        let mut moved = false;
        while let Some((peer, f)) = e.eng.poll_transmit() {
            assert_eq!(peer, e.other);
            moved = true;
            wire.push_back(bytes_of(&f));
            if late && rng.chance(0.7) {
                e.unacked.push_back(f);
            } else {
                let cx = Ctx { b: &e.b, objs: &e.objs };
                e.eng.frame_done(cx, peer, Some(&mut e.pr), f);
            }
        }
        moved
    }

    /// Feed the frames on `wire` to `e`, each cut in random pieces.
    fn deliver(e: &mut End, wire: &mut VecDeque<Vec<u8>>, rng: &mut Rng) -> bool {
        let mut moved = false;
        while let Some(bytes) = wire.front() {
            if e.violation.is_some() {
                wire.clear();
                return moved;
            }
            let hb: [u8; HDR_LEN] = bytes[..HDR_LEN].try_into().unwrap();
            let hdr = Header::decode(&hb, u64::MAX >> 1).expect("our frames decode");
            let src = FiAddr(e.other as u64);
            let cx = Ctx { b: &e.b, objs: &e.objs };
            if e.whole {
                match e.eng.frame(cx, &mut e.pr, e.other, src, hdr, &bytes[HDR_LEN..]) {
                    Ok(Begin::Hold) => return moved,
                    Ok(Begin::Done) => {}
                    Ok(b) => panic!("{b:?} from a whole frame"),
                    Err(v) => e.violation = Some(v),
                }
                wire.pop_front();
                moved = true;
                continue;
            }
            let r = e.eng.begin(cx, &mut e.pr, e.other, src, hdr);
            match r {
                Ok(Begin::Hold) => return moved,
                Ok(Begin::Control) => panic!("no control frames here"),
                Ok(Begin::Done) => {}
                Ok(Begin::Payload) => {
                    let mut rest = &bytes[HDR_LEN..];
                    let mut res = Ok(());
                    while !rest.is_empty() && res.is_ok() {
                        let k = 1 + rng.index(rest.len());
                        let mut out = [NULL_IOV; IOV_LIMIT];
                        let n = if rng.chance(0.5) { e.eng.pieces(&mut e.pr, &mut out) } else { 0 };
                        if n > 0 {
                            // Straight into memory, as a socket read would.
                            let mut done = 0;
                            for p in &out[..n] {
                                let m = p.len.min(k - done);
                                // SAFETY: (test) the piece is memory the engine offered, m bytes fit.
                                unsafe { std::ptr::copy_nonoverlapping(rest[done..].as_ptr(), p.base, m) };
                                done += m;
                                if done == k {
                                    break;
                                }
                            }
                            // SAFETY: `done` bytes were written from the first piece on.
                            unsafe { e.eng.advance(&mut e.pr, done) };
                            rest = &rest[done..];
                        } else {
                            res = e.eng.write(cx, &mut e.pr, &rest[..k]);
                            rest = &rest[k..];
                        }
                    }
                    if res.is_ok() {
                        res = e.eng.end(cx, &mut e.pr, e.other);
                    }
                    if let Err(v) = res {
                        e.violation = Some(v);
                    }
                }
                Err(v) => e.violation = Some(v),
            }
            wire.pop_front();
            moved = true;
        }
        moved
    }
}

fn op(iov: &[IoVec], context: u64, tag: u64) -> Op<'_> {
    Op { iov, addr: FiAddr(0), context, user_context: context, data: 0, tag, ignore: 0 }
}

fn piece(b: &mut [u8]) -> IoVec {
    IoVec { base: b.as_mut_ptr(), len: b.len() }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// A delivery-complete send goes by rendezvous whatever its size and completes
/// only once the receiver acknowledged the data in its receive.
#[test]
fn delivery_complete_waits_for_the_ack() {
    let mut p = Pair::new(7);
    let mut s = pattern(10, 1);
    let v = [piece(&mut s)];
    let flags = OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE;
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 0), flags, None, false).unwrap();
    p.run();
    // Announced, unmatched: not complete.
    assert!(End::comps(&p.a.tx).is_empty());
    let mut d = vec![0u8; 10];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 2, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(d, s);
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    assert_eq!(p.a.eng.in_flight(), 0);
}

/// A rendezvous message the receiver discards (peek with discard) completes the
/// send without its data moving (`Nack`).
#[test]
fn discarded_rendezvous_is_nacked() {
    let mut p = Pair::new(3);
    let mut s = pattern(EAGER * 3, 9);
    let v = [piece(&mut s)];
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 5), OpFlags::TAGGED | OpFlags::COMPLETION, None, false).unwrap();
    p.run();
    let flags = OpFlags::TAGGED | OpFlags::PEEK | OpFlags::DISCARD;
    p.b.eng.post_recv(&p.b.b, &op(&[], 9, 5), flags, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    assert_eq!(p.a.eng.in_flight(), 0);
    assert_eq!(p.b.eng.rx.unexpected_len(), 0);
}

/// RMA writes (one request, and several: longer than `RMA_CHUNK`) with remote CQ
/// data, and reads back, land where asked; the target counts operations.
#[test]
fn rma_write_read_and_cq_data() {
    for seed in 0..4 {
        let mut p = Pair::new(seed);
        let n = RMA_CHUNK * 2 + 123;
        let mut region = vec![0u8; n];
        let _mr = p.b.reg(&mut region, 77);
        let mut src = pattern(n, 4);
        let v = [piece(&mut src)];
        let rma = [RmaIov { addr: 0, len: n, key: 77 }];
        let o = RmaOp { iov: &v, addr: FiAddr(1), rma: &rma, context: 5, user_context: 5, data: 0xcafe };
        let flags = OpFlags::COMPLETION | OpFlags::REMOTE_CQ_DATA;
        p.a.eng.post_rma(&p.a.b, 1, &o, flags, false, None).unwrap();
        // The remote CQ data takes a posted receive (the Rust API's rule).
        p.b.eng.post_recv(&p.b.b, &op(&[], 40, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
        p.run();
        assert_eq!(region, src, "seed {seed}");
        let tx = End::comps(&p.a.tx);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].op_context, 5);
        let rx = End::comps(&p.b.rx);
        assert_eq!(rx.len(), 1);
        assert_eq!(rx[0].data, 0xcafe);
        assert_eq!(p.b.wcntr.read(), 1, "one operation of three requests counts once");
        // Read a slice back.
        let mut back = vec![0u8; RMA_CHUNK + 10];
        let bv = [piece(&mut back)];
        let rma = [RmaIov { addr: 100, len: back.len(), key: 77 }];
        let o = RmaOp { iov: &bv, addr: FiAddr(1), rma: &rma, context: 6, user_context: 6, data: 0 };
        p.a.eng.post_rma(&p.a.b, 1, &o, OpFlags::COMPLETION, true, None).unwrap();
        p.run();
        assert_eq!(back[..], region[100..100 + back.len()]);
        assert_eq!(End::comps(&p.a.tx).len(), 1);
        assert_eq!(p.a.eng.in_flight(), 0);
    }
}

/// RMA to a key that does not exist, or past a region's end, fails at the
/// initiator with `FI_EACCES` and leaves the target's memory untouched; the
/// peer stays usable.
#[test]
fn rma_refused_touches_nothing() {
    let mut p = Pair::new(11);
    let mut region = vec![0u8; 64];
    let _mr = p.b.reg(&mut region, 1);
    let mut src = pattern(128, 1);
    let v = [piece(&mut src)];
    for (key, addr, len, ctx) in [(2u64, 0u64, 16usize, 1u64), (1, 32, 64, 2), (1, 0, 128, 3)] {
        let rma = [RmaIov { addr, len, key }];
        let o = RmaOp { iov: &v[..], addr: FiAddr(1), rma: &rma, context: ctx, user_context: ctx, data: 0 };
        let iov = [IoVec { base: src.as_mut_ptr(), len }];
        let o = RmaOp { iov: &iov, ..o };
        p.a.eng.post_rma(&p.a.b, 1, &o, OpFlags::COMPLETION, false, None).unwrap();
    }
    p.run();
    assert!(region.iter().all(|&x| x == 0));
    assert_eq!(End::errs(&p.a.tx), vec![Error::Access; 3]);
    assert_eq!(p.b.wcntr.read(), 0);
    assert!(p.b.violation.is_none());
    // Still usable.
    let rma = [RmaIov { addr: 0, len: 8, key: 1 }];
    let iov = [IoVec { base: src.as_mut_ptr(), len: 8 }];
    let o = RmaOp { iov: &iov, addr: FiAddr(1), rma: &rma, context: 9, user_context: 9, data: 0 };
    p.a.eng.post_rma(&p.a.b, 1, &o, OpFlags::COMPLETION, false, None).unwrap();
    p.run();
    assert_eq!(region[..8], src[..8]);
}

/// Atomics are applied at the target and their prior values come back.
#[test]
fn atomics_fetch_and_compare() {
    let mut p = Pair::new(5);
    let mut target = 40u64.to_ne_bytes().to_vec();
    let _mr = p.b.reg(&mut target, 3);
    let mut operand = 2u64.to_ne_bytes();
    let mut result = [0u8; 8];
    let a = AtomicDesc {
        kind: AtomicKind::Fetch,
        op: AtomicOp::Sum,
        datatype: Datatype::Uint64,
        count: 1,
        operand: IoVec { base: operand.as_mut_ptr(), len: 8 },
        compare: NULL_IOV,
        result: IoVec { base: result.as_mut_ptr(), len: 8 },
        addr: FiAddr(1),
        rma: RmaIov { addr: 0, len: 8, key: 3 },
        context: 1,
        user_context: 1,
    };
    p.a.eng.post_atomic(1, &a, false, OpFlags::COMPLETION).unwrap();
    p.run();
    assert_eq!(u64::from_ne_bytes(result), 40);
    assert_eq!(u64::from_ne_bytes(target[..8].try_into().unwrap()), 42);
    let mut cmp = 42u64.to_ne_bytes();
    let mut swap = 7u64.to_ne_bytes();
    let c = AtomicDesc {
        kind: AtomicKind::Compare,
        op: AtomicOp::Cswap,
        operand: IoVec { base: swap.as_mut_ptr(), len: 8 },
        compare: IoVec { base: cmp.as_mut_ptr(), len: 8 },
        context: 2,
        ..a
    };
    // Injected: its operands are copied during the call.
    p.a.eng.post_atomic(1, &c, true, OpFlags::COMPLETION | OpFlags::INJECT).unwrap();
    swap.fill(0);
    cmp.fill(0);
    p.run();
    assert_eq!(u64::from_ne_bytes(target[..8].try_into().unwrap()), 7);
    assert_eq!(End::comps(&p.a.tx).len(), 2);
    assert_eq!(p.b.wcntr.read(), 2);
}

/// A peer lost mid-operation fails everything in flight with it: an announced
/// send, an RMA read, and (on the other side) a receive whose data was arriving.
#[test]
fn peer_lost_fails_what_is_in_flight() {
    let mut p = Pair::new(1);
    let mut big = pattern(EAGER * 4, 2);
    let v = [piece(&mut big)];
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false).unwrap();
    let mut back = vec![0u8; 16];
    let bv = [piece(&mut back)];
    let rma = [RmaIov { addr: 0, len: 16, key: 9 }];
    let o = RmaOp { iov: &bv, addr: FiAddr(1), rma: &rma, context: 2, user_context: 2, data: 0 };
    p.a.eng.post_rma(&p.a.b, 1, &o, OpFlags::COMPLETION, true, None).unwrap();
    // Only A's frames go out; B hears nothing back in time.
    let mut rng = Rng::new(1);
    Pair::transmit(&mut p.a, &mut p.ab, &mut rng, false);
    let mut d = vec![0u8; EAGER * 4];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 3, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    Pair::deliver(&mut p.b, &mut p.ab, &mut rng);
    // B cleared the message (its Cts is queued): then A vanishes.
    let cx = Ctx { b: &p.b.b, objs: &p.b.objs };
    p.b.eng.peer_lost(cx, &mut p.b.pr, 0, Error::ConnReset);
    let cx = Ctx { b: &p.a.b, objs: &p.a.objs };
    p.a.eng.peer_lost(cx, &mut p.a.pr, 1, Error::ConnReset);
    assert_eq!(End::errs(&p.a.tx), vec![Error::ConnReset; 2]);
    assert_eq!(End::errs(&p.b.rx), vec![Error::ConnReset]);
    assert_eq!(p.a.eng.in_flight(), 0);
    assert!(!p.a.eng.wants_transmit() && !p.b.eng.wants_transmit());
    // A frame cut short by the loss: its receive fails too.
    let mut q = Pair::new(2);
    let mut s = pattern(100, 3);
    let sv = [piece(&mut s)];
    let mut d = vec![0u8; 100];
    let dv = [piece(&mut d)];
    q.b.eng.post_recv(&q.b.b, &op(&dv, 4, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    q.a.eng.post_send(&q.a.b, 1, &op(&sv, 5, 0), OpFlags::COMPLETION, None, false).unwrap();
    let (_, f) = q.a.eng.poll_transmit().unwrap();
    let bytes = bytes_of(&f);
    let hdr = Header::decode(bytes[..HDR_LEN].try_into().unwrap(), u64::MAX).unwrap();
    let cx = Ctx { b: &q.b.b, objs: &q.b.objs };
    assert_eq!(q.b.eng.begin(cx, &mut q.b.pr, 0, FiAddr(0), hdr), Ok(Begin::Payload));
    q.b.eng.write(cx, &mut q.b.pr, &bytes[HDR_LEN..HDR_LEN + 10]).unwrap();
    q.b.eng.peer_lost(cx, &mut q.b.pr, 0, Error::ConnReset);
    assert_eq!(End::errs(&q.b.rx), vec![Error::ConnReset]);
    assert!(!q.b.pr.arriving());
    q.a.eng.frame_failed(&q.a.b, 1, f, Error::ConnReset);
    assert_eq!(End::errs(&q.a.tx), vec![Error::ConnReset]);
}

/// A `Cts` that cannot be sent fails the receive waiting for the data.
#[test]
fn unsendable_clear_fails_its_receive() {
    let mut p = Pair::new(4);
    let mut big = pattern(EAGER * 2, 2);
    let v = [piece(&mut big)];
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false).unwrap();
    let mut rng = Rng::new(4);
    Pair::transmit(&mut p.a, &mut p.ab, &mut rng, false);
    Pair::deliver(&mut p.b, &mut p.ab, &mut rng);
    let mut d = vec![0u8; EAGER * 2];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 3, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    let (peer, cts) = p.b.eng.poll_transmit().unwrap();
    assert!(matches!(cts.done, Done::Cleared(_)));
    p.b.eng.frame_failed(&p.b.b, peer, cts, Error::NotConn);
    assert_eq!(End::errs(&p.b.rx), vec![Error::NotConn]);
}

/// Hostile frames: ids never issued, answers and data nobody asked for, lengths
/// past what was announced or asked, a frame inside another. Each is a
/// violation of that peer, and nothing is written anywhere.
#[test]
fn hostile_frames_are_violations() {
    let mk = |op, len, id| Header { len, id, ..Header::new(op) };
    let cases = [
        mk(OpCode::Cts, 0, 12345),
        mk(OpCode::Nack, 0, 1),
        mk(OpCode::Ack, 0, 1),
        mk(OpCode::Data, 10, 99),
        mk(OpCode::RmaResp, 8, 4242),
    ];
    for hdr in cases {
        let mut e = End::new(0, false);
        let cx = Ctx { b: &e.b, objs: &e.objs };
        let r = e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), hdr);
        assert!(r.is_err(), "{hdr:?} accepted: {r:?}");
    }
    // An answer longer than the read asked for.
    let mut e = End::new(1, false);
    let mut back = [0u8; 8];
    let bv = [piece(&mut back)];
    let rma = [RmaIov { addr: 0, len: 8, key: 1 }];
    let o = RmaOp { iov: &bv, addr: FiAddr(1), rma: &rma, context: 1, user_context: 1, data: 0 };
    e.eng.post_rma(&e.b, 1, &o, OpFlags::COMPLETION, true, None).unwrap();
    let (_, f) = e.eng.poll_transmit().unwrap();
    let req = Header::decode(f.head[..HDR_LEN].try_into().unwrap(), u64::MAX).unwrap();
    let cx = Ctx { b: &e.b, objs: &e.objs };
    let resp = Header { len: 9, id: req.id, ..Header::new(OpCode::RmaResp) };
    assert!(e.eng.begin(cx, &mut e.pr, 1, FiAddr(1), resp).is_err());
    // The same id from another peer is unknown there.
    let resp = Header { len: 8, id: req.id, ..Header::new(OpCode::RmaResp) };
    assert!(e.eng.begin(cx, &mut e.pr, 2, FiAddr(2), resp).is_err());
    // A payload longer than its header, and a frame inside another.
    let mut e = End::new(0, false);
    let cx = Ctx { b: &e.b, objs: &e.objs };
    let m = Header { len: 4, ..Header::new(OpCode::Msg) };
    assert_eq!(e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), m), Ok(Begin::Payload));
    assert!(e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), m).is_err());
    assert!(e.eng.write(cx, &mut e.pr, &[0; 5]).is_err());
    // A payload shorter than its header.
    e.eng.write(cx, &mut e.pr, &[0; 2]).unwrap();
    assert!(e.eng.end(cx, &mut e.pr, 0).is_err());
    assert_eq!(e.eng.rx.unexpected_len(), 0);
    // An unexpected message past the limit of a stream transport.
    let big = Header { len: (1 << 20) + 1, ..Header::new(OpCode::Msg) };
    let v = e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), big).unwrap_err();
    assert_eq!(v.err, Error::MsgSize);
}

/// A peer opening more RMA operations than the cap is a violation; one that does
/// not take its answers has its requests held (and none lost).
#[test]
fn rma_caps_and_back_pressure() {
    let mut e = End::new(0, false);
    let cx = Ctx { b: &e.b, objs: &e.objs };
    for id in 0..crate::rma_target::OPS_MAX as u64 {
        let w = Header { len: 16 + 1, id: id + 1, tag: 100, ..Header::new(OpCode::WriteReq) };
        assert_eq!(e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), w), Ok(Begin::Payload));
        e.eng.write(cx, &mut e.pr, &[0; 17]).unwrap();
        e.eng.end(cx, &mut e.pr, 0).unwrap();
        // Its answer is taken at once.
        let (_, f) = e.eng.poll_transmit().unwrap();
        e.eng.frame_done(cx, 0, Some(&mut e.pr), f);
    }
    let w = Header { len: 17, id: 1 << 40, tag: 100, ..Header::new(OpCode::WriteReq) };
    assert_eq!(e.eng.begin(cx, &mut e.pr, 0, FiAddr(0), w), Ok(Begin::Payload));
    assert!(e.eng.write(cx, &mut e.pr, &[0; 17]).is_err());

    // Reads: answers not taken pile up to the cap, then requests are held.
    let mut p = Pair::new(0);
    let mut region = vec![5u8; 1024];
    let _mr = p.b.reg(&mut region, 1);
    let cx = Ctx { b: &p.b.b, objs: &p.b.objs };
    let mut held = 0;
    for id in 1..=(crate::rma_target::ANSWERS_MAX as u64 + 5) {
        let r = Header { len: 8, tag: 0, data: 1, id, flags: HdrFlags(HdrFlags::LAST), ..Header::new(OpCode::ReadReq) };
        match p.b.eng.begin(cx, &mut p.b.pr, 0, FiAddr(0), r).unwrap() {
            Begin::Hold => held += 1,
            b => assert_eq!(b, Begin::Done),
        }
    }
    assert_eq!(held, 5);
    let mut answers = Vec::new();
    while let Some((_, f)) = p.b.eng.poll_transmit() {
        answers.push(f);
    }
    assert_eq!(answers.len(), crate::rma_target::ANSWERS_MAX);
    for f in answers {
        p.b.eng.frame_done(cx, 0, Some(&mut p.b.pr), f);
    }
    assert!(!p.b.pr.answers.full());
}

/// A channel transport holds unexpected messages past its limits instead of
/// failing the peer, and takes them once a receive is posted.
#[test]
fn holding_transport_waits_for_a_receive() {
    let mut p = Pair::with(9, true);
    let n = 70;
    let mut srcs: Vec<Vec<u8>> = (0..n).map(|i| pattern(10, i as u8)).collect();
    for (i, s) in srcs.iter_mut().enumerate() {
        let v = [piece(s)];
        p.a.eng.post_send(&p.a.b, 1, &op(&v, i as u64, 0), OpFlags::COMPLETION, None, false).unwrap();
    }
    p.run();
    assert_eq!(p.b.eng.rx.unexpected_len(), 64);
    assert_eq!(p.ab.len(), n - 64);
    let mut dsts: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 10]).collect();
    for (i, d) in dsts.iter_mut().enumerate() {
        let v = [piece(d)];
        p.b.eng.post_recv(&p.b.b, &op(&v, i as u64, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
        p.run();
    }
    assert_eq!(dsts, srcs);
    assert_eq!(End::comps(&p.b.rx).len(), n);
}

/// Injects and copied sends complete at once; their copies are sent later, and
/// the counters count them.
#[test]
fn inject_and_copy_complete_when_posted() {
    let mut p = Pair::new(6);
    let cntr = UtilCntr::new().unwrap();
    p.a.b.tx_cntr = Some(cntr.clone());
    let mut s = pattern(32, 1);
    let v = [piece(&mut s)];
    p.a.eng.post_send(&p.a.b, 1, &op(&[], 1, 0), OpFlags::INJECT, Some(&s[..8]), false).unwrap();
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 2, 0), OpFlags::COMPLETION, None, true).unwrap();
    assert_eq!(cntr.read(), 2);
    assert_eq!(p.a.eng.copied(), 32);
    s.fill(0);
    let mut d1 = vec![0u8; 8];
    let mut d2 = vec![0u8; 32];
    for (i, d) in [&mut d1, &mut d2].into_iter().enumerate() {
        let dv = [piece(d)];
        p.b.eng.post_recv(&p.b.b, &op(&dv, i as u64, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    }
    p.run();
    assert_eq!(d1, pattern(8, 1));
    assert_eq!(d2, pattern(32, 1));
    assert_eq!(p.a.eng.copied(), 0);
}

/// Random traffic both ways, every kind at once, over seeds: everything
/// completes, every byte lands, no violation.
#[test]
fn random_traffic_settles() {
    for seed in 100..140u64 {
        let mut p = Pair::new(seed);
        let mut rng = Rng::new(seed);
        let mut keep: Vec<Vec<u8>> = Vec::new();
        let mut want: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut region = vec![0u8; 1 << 16];
        let _mr = p.b.reg(&mut region, 8);
        let n = 20;
        let mut dsts: Vec<Vec<u8>> = Vec::new();
        for i in 0..n {
            let len = [0, 7, EAGER, EAGER + 9, 20_000][rng.index(5)];
            let mut s = pattern(len, i as u8);
            want.push((i, s.clone()));
            let v = [piece(&mut s)];
            let flags = if rng.chance(0.2) { OpFlags::DELIVERY_COMPLETE } else { OpFlags::empty() };
            p.a.eng.post_send(&p.a.b, 1, &op(&v, i as u64, 0), flags | OpFlags::COMPLETION, None, false).unwrap();
            keep.push(s);
            if rng.chance(0.3) {
                let w = pattern(100, i as u8);
                let at = rng.index(1000) as u64;
                let rma = [RmaIov { addr: at, len: 100, key: 8 }];
                let o =
                    RmaOp { iov: &[], addr: FiAddr(1), rma: &rma, context: 1000 + i as u64, user_context: 0, data: 0 };
                p.a.eng.post_rma(&p.a.b, 1, &o, OpFlags::INJECT, false, Some(&w)).unwrap();
            }
            if rng.chance(0.5) {
                p.run();
            }
        }
        for i in 0..n {
            dsts.push(vec![0u8; 20_000]);
            let d = dsts.last_mut().unwrap();
            let v = [piece(d)];
            p.b.eng.post_recv(&p.b.b, &op(&v, i as u64, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
            if rng.chance(0.5) {
                p.run();
            }
        }
        p.run();
        assert!(p.a.violation.is_none() && p.b.violation.is_none(), "seed {seed}");
        let rx = End::comps(&p.b.rx);
        assert_eq!(rx.len(), n, "seed {seed}");
        // Messages arrive in order: the k-th receive has the k-th message.
        for e in rx {
            let (_, w) = &want[e.op_context as usize];
            assert_eq!(e.len, w.len());
            assert_eq!(&dsts[e.op_context as usize][..w.len()], &w[..], "seed {seed}");
        }
        assert_eq!(End::comps(&p.a.tx).len(), n, "seed {seed}");
        assert_eq!(p.a.eng.in_flight(), 0, "seed {seed}");
        assert_eq!(p.b.pr.answers.owed(), 0);
    }
}

/// Closing fails every operation and posted receive with the error given.
#[test]
fn close_fails_everything() {
    let mut p = Pair::new(8);
    let mut big = pattern(EAGER * 2, 1);
    let v = [piece(&mut big)];
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false).unwrap();
    p.a.eng.post_send(&p.a.b, 1, &op(&v[..], 2, 0), OpFlags::COMPLETION, None, false).unwrap();
    let mut d = vec![0u8; 8];
    let dv = [piece(&mut d)];
    p.a.eng.post_recv(&p.a.b, &op(&dv, 3, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.a.eng.close(&p.a.b, Error::Canceled);
    assert_eq!(End::errs(&p.a.tx), vec![Error::Canceled; 2]);
    assert_eq!(End::errs(&p.a.rx), vec![Error::Canceled]);
    assert_eq!(p.a.eng.in_flight(), 0);
}

/// What a fetch-mode sender announces: its pieces (address, length; no key
/// here), and something kept until the send completes.
fn announce(iov: &[IoVec], keep: &Arc<()>) -> fabric_core::Result<RtsPayload> {
    let pieces: Vec<crate::verbs_wire::RtsPiece> = iov
        .iter()
        .filter(|p| p.len > 0)
        .map(|p| crate::verbs_wire::RtsPiece { addr: p.base as u64, len: p.len as u64, rkey: 0 })
        .collect();
    Ok(RtsPayload { bytes: crate::verbs_wire::encode_rts(&pieces), keep: Some(Box::new(keep.clone())) })
}

/// Messages of every size class, expected or unexpected, from one piece or
/// two, arrive whole, in order, with their tags and CQ data; in fetch mode the
/// large ones are fetched by the receiver (no `Data` frame) and their sends
/// complete at `Cts`, with what the transport kept for them dropped first.
fn messages_of_every_size(fetch: bool) {
    for seed in 0..24u64 {
        let mut p = if fetch { Pair::fetching(seed) } else { Pair::new(seed) };
        let keep = Arc::new(());
        let sizes = [0usize, 1, 100, EAGER, EAGER + 1, 70_000];
        let srcs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
        let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let expected = seed % 2 == 0;
        let post_recvs = |p: &mut Pair, dsts: &mut Vec<Vec<u8>>| {
            for (i, d) in dsts.iter_mut().enumerate() {
                let third = d.len() / 3;
                let (x, y) = d.split_at_mut(third);
                let v = [piece(x), piece(y)];
                let flags = OpFlags::TAGGED | OpFlags::COMPLETION;
                p.b.eng.post_recv(&p.b.b, &op(&v, 100 + i as u64, i as u64), flags, FiAddr::UNSPEC).unwrap();
            }
        };
        if expected {
            post_recvs(&mut p, &mut dsts);
        }
        for (i, s) in srcs.iter().enumerate() {
            let mut s = s.clone();
            let half = i % 2 * s.len() / 2;
            let (x, y) = s.split_at_mut(half);
            let v = [piece(x), piece(y)];
            let mut o = op(&v, i as u64, i as u64);
            o.data = 0xd0 + i as u64;
            let flags = OpFlags::TAGGED | OpFlags::COMPLETION | OpFlags::REMOTE_CQ_DATA;
            p.a.eng.post_send_with(&p.a.b, 1, &o, flags, None, false, |iov| announce(iov, &keep)).unwrap();
            // The pieces stay valid: the source is kept until the end of the test.
            std::mem::forget(s);
        }
        p.run();
        let mut sent = 0;
        if !expected {
            // The eager sends are complete; the announced ones wait.
            sent = End::comps(&p.a.tx).len();
            assert_eq!(sent, 4, "seed {seed}");
            assert_eq!(Arc::strong_count(&keep), if fetch { 3 } else { 1 });
            post_recvs(&mut p, &mut dsts);
            p.run();
        }
        assert!(p.b.violation.is_none() && p.a.violation.is_none(), "seed {seed}");
        let rx = End::comps(&p.b.rx);
        assert_eq!(rx.len(), sizes.len(), "seed {seed}: {rx:?}");
        for e in &rx {
            let i = (e.op_context - 100) as usize;
            assert_eq!(e.len, sizes[i]);
            assert_eq!(e.tag, i as u64);
            assert_eq!(e.data, 0xd0 + i as u64);
            assert_eq!(dsts[i], srcs[i], "seed {seed} message {i}");
        }
        assert_eq!(p.b.fetches, if fetch { 2 } else { 0 }, "seed {seed}");
        assert_eq!(sent + End::comps(&p.a.tx).len(), sizes.len(), "seed {seed}");
        assert_eq!(Arc::strong_count(&keep), 1, "kept until the sends completed, then dropped");
        assert_eq!(p.a.eng.in_flight(), 0);
        assert_eq!(p.b.eng.rndv_in.len(), 0);
    }
}

#[test]
fn messages_eager_and_rendezvous_expected_and_unexpected() {
    messages_of_every_size(false);
}

#[test]
fn fetch_mode_expected_and_unexpected() {
    messages_of_every_size(true);
}

/// Fetch mode: a delivery-complete send goes by rendezvous and completes at the
/// `Cts`, sent once the data is in the receive; a receive shorter than the
/// message gets what fits and `FI_ETRUNC`.
#[test]
fn fetch_mode_delivery_complete_and_truncation() {
    let mut p = Pair::fetching(5);
    let keep = Arc::new(());
    let mut s = pattern(10, 1);
    let v = [piece(&mut s)];
    let flags = OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE;
    p.a.eng.post_send_with(&p.a.b, 1, &op(&v, 1, 0), flags, None, false, |iov| announce(iov, &keep)).unwrap();
    p.run();
    assert!(End::comps(&p.a.tx).is_empty());
    let mut d = vec![0u8; 10];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 2, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(d, s);
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    assert_eq!(End::comps(&p.b.rx).len(), 1);
    // Truncated.
    let mut big = pattern(EAGER * 2, 3);
    let v = [piece(&mut big)];
    p.a.eng
        .post_send_with(&p.a.b, 1, &op(&v, 3, 0), OpFlags::COMPLETION, None, false, |iov| announce(iov, &keep))
        .unwrap();
    let mut d = vec![0u8; 100];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 4, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(d[..], big[..100]);
    assert_eq!(End::errs(&p.b.rx), vec![Error::Trunc]);
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    assert_eq!(Arc::strong_count(&keep), 1);
}

/// Fetch mode: a fetch that fails fails the receive with its error, and the
/// send with the same (the errno of the `Cts`); the peers stay usable.
#[test]
fn fetch_mode_failed_fetch() {
    let mut p = Pair::fetching(2);
    let keep = Arc::new(());
    p.b.fetch_fail = Some(Error::Access);
    let mut s = pattern(EAGER * 3, 4);
    let v = [piece(&mut s)];
    p.a.eng
        .post_send_with(&p.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false, |iov| announce(iov, &keep))
        .unwrap();
    let mut d = vec![0u8; EAGER * 3];
    let dv = [piece(&mut d)];
    p.b.eng.post_recv(&p.b.b, &op(&dv, 2, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(End::errs(&p.b.rx), vec![Error::Access]);
    assert_eq!(End::errs(&p.a.tx), vec![Error::Access]);
    assert!(d.iter().all(|&x| x == 0));
    assert_eq!(Arc::strong_count(&keep), 1);
    assert!(p.a.violation.is_none() && p.b.violation.is_none());
    // Still usable.
    p.b.fetch_fail = None;
    p.a.eng
        .post_send_with(&p.a.b, 1, &op(&v, 3, 0), OpFlags::COMPLETION, None, false, |iov| announce(iov, &keep))
        .unwrap();
    p.b.eng.post_recv(&p.b.b, &op(&dv, 4, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(d, s);
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    // A transport's own refusal (say, a registration that failed) fails the
    // post, with nothing queued.
    let r = p.a.eng.post_send_with(&p.a.b, 1, &op(&v, 5, 0), OpFlags::COMPLETION, None, false, |_| Err(Error::NoMem));
    assert_eq!(r, Err(Error::NoMem));
    assert!(!p.a.eng.wants_transmit());
    assert_eq!(p.a.eng.in_flight(), 0);
}

/// Fetch mode: a rendezvous message discarded (peek with discard) is never
/// fetched; `Nack` completes the send. A fetch still out when its peer is lost
/// finds nothing to report to; a `Data` frame for a fetched message is a
/// violation.
#[test]
fn fetch_mode_discard_and_loss() {
    let mut p = Pair::fetching(3);
    let keep = Arc::new(());
    let mut s = pattern(EAGER * 3, 9);
    let v = [piece(&mut s)];
    let flags = OpFlags::TAGGED | OpFlags::COMPLETION;
    p.a.eng.post_send_with(&p.a.b, 1, &op(&v, 1, 5), flags, None, false, |iov| announce(iov, &keep)).unwrap();
    p.run();
    let flags = OpFlags::TAGGED | OpFlags::PEEK | OpFlags::DISCARD;
    p.b.eng.post_recv(&p.b.b, &op(&[], 9, 5), flags, FiAddr::UNSPEC).unwrap();
    p.run();
    assert_eq!(p.b.fetches, 0);
    assert_eq!(End::comps(&p.a.tx).len(), 1);
    assert_eq!(Arc::strong_count(&keep), 1);
    assert_eq!(p.a.eng.in_flight(), 0);
    assert_eq!(p.b.eng.rx.unexpected_len(), 0);

    // Matched, its fetch taken by the transport, then the peer is lost.
    let mut q = Pair::fetching(4);
    q.a.eng
        .post_send_with(&q.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false, |iov| announce(iov, &keep))
        .unwrap();
    let mut d = vec![0u8; EAGER * 3];
    let dv = [piece(&mut d)];
    q.b.eng.post_recv(&q.b.b, &op(&dv, 2, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    let mut rng = Rng::new(4);
    Pair::transmit(&mut q.a, &mut q.ab, &mut rng, false);
    Pair::deliver(&mut q.b, &mut q.ab, &mut rng);
    let f = q.b.eng.poll_fetch().expect("matched");
    let cx = Ctx { b: &q.b.b, objs: &q.b.objs };
    q.b.eng.peer_lost(cx, &mut q.b.pr, 0, Error::ConnReset);
    assert_eq!(End::errs(&q.b.rx), vec![Error::ConnReset]);
    assert!(!q.b.eng.fetched(&q.b.b, f.peer, f.id, None));
    assert!(!q.b.eng.wants_transmit());
    let cx = Ctx { b: &q.a.b, objs: &q.a.objs };
    q.a.eng.peer_lost(cx, &mut q.a.pr, 1, Error::ConnReset);
    assert_eq!(End::errs(&q.a.tx), vec![Error::ConnReset]);
    assert_eq!(Arc::strong_count(&keep), 1);

    // Data for a message being fetched.
    let mut r = Pair::fetching(6);
    r.a.eng
        .post_send_with(&r.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false, |iov| announce(iov, &keep))
        .unwrap();
    r.b.eng.post_recv(&r.b.b, &op(&dv, 2, 0), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
    let mut rng = Rng::new(6);
    Pair::transmit(&mut r.a, &mut r.ab, &mut rng, false);
    Pair::deliver(&mut r.b, &mut r.ab, &mut rng);
    let f = r.b.eng.poll_fetch().expect("matched");
    let data = Header { len: f.hdr.len, id: f.id, ..Header::new(OpCode::Data) };
    let cx = Ctx { b: &r.b.b, objs: &r.b.objs };
    assert!(r.b.eng.frame(cx, &mut r.b.pr, 0, FiAddr(0), data, &vec![0; f.hdr.len as usize]).is_err());
    // A whole frame whose body is not its header's length.
    let m = Header { len: 4, ..Header::new(OpCode::Msg) };
    assert!(r.b.eng.frame(cx, &mut r.b.pr, 0, FiAddr(0), m, &[0; 3]).is_err());
}

/// A transport's own error number (verbs: a work completion's status) rides
/// with the error completions of what it fails: a send whose frame failed, an
/// operation failed with its lost peer.
#[test]
fn transport_error_numbers_reach_the_completions() {
    let mut p = Pair::new(12);
    let mut s = pattern(100, 1);
    let v = [piece(&mut s)];
    let mut big = pattern(EAGER * 2, 2);
    let bv = [piece(&mut big)];
    p.a.eng.post_send(&p.a.b, 1, &op(&v, 1, 0), OpFlags::COMPLETION, None, false).unwrap();
    p.a.eng.post_send(&p.a.b, 1, &op(&bv, 2, 0), OpFlags::COMPLETION, None, false).unwrap();
    let (peer, f) = p.a.eng.poll_transmit().unwrap();
    p.a.eng.frame_failed_prov(&p.a.b, peer, f, Error::TimedOut, 12);
    let cx = Ctx { b: &p.a.b, objs: &p.a.objs };
    p.a.eng.peer_lost_prov(cx, &mut p.a.pr, 1, Error::TimedOut, 12);
    let mut got = Vec::new();
    while let Ok(e) = p.a.tx.readerr() {
        got.push((e.entry.op_context, e.err, e.prov_errno));
    }
    assert_eq!(got, vec![(1, Error::TimedOut, 12), (2, Error::TimedOut, 12)]);
    assert_eq!(p.a.eng.in_flight(), 0);
}

/// Random frames from a hostile peer (every op code, random flags, lengths, ids
/// near and far from real ones, payloads cut anywhere, whole frames with bodies
/// of the wrong length): the engine answers each with a frame, a hold or a
/// violation, never a panic; a peer it drops leaves nothing behind; and the
/// endpoint keeps working with a well-behaved peer afterwards.
#[test]
fn hostile_random_frames_never_break_the_endpoint() {
    use crate::wire::{HdrFlags, CONTROL_MAX};
    let ops = [
        OpCode::Msg,
        OpCode::Rts,
        OpCode::Cts,
        OpCode::Data,
        OpCode::Nack,
        OpCode::WriteReq,
        OpCode::ReadReq,
        OpCode::AtomicReq,
        OpCode::RmaResp,
        OpCode::Ack,
    ];
    for seed in 0..60u64 {
        let mut p = Pair::new(seed);
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut region = vec![0u8; 4096];
        let _mr = p.b.reg(&mut region, 5);
        // Something in flight on B, so that some hostile ids are real ones.
        let mut back = vec![0u8; 64];
        let bv = [piece(&mut back)];
        let rma = [RmaIov { addr: 0, len: 64, key: 5 }];
        let o = RmaOp { iov: &bv, addr: FiAddr(0), rma: &rma, context: 1, user_context: 1, data: 0 };
        p.b.eng.post_rma(&p.b.b, 0, &o, OpFlags::COMPLETION, true, None).unwrap();
        let real = p.b.eng.ops.ids(|_| true);
        let mut dropped = 0;
        for _ in 0..200 {
            let op = ops[rng.index(ops.len())];
            let mut h = Header::new(op);
            h.flags = HdrFlags(rng.below(HdrFlags::ALL as u64 + 1) as u32 & !HdrFlags::DC);
            h.len = match rng.below(4) {
                0 => 0,
                1 => rng.below(64),
                2 => 16 + rng.below(CONTROL_MAX),
                _ => rng.below(1 << 20),
            };
            h.id = if rng.chance(0.3) && !real.is_empty() { real[0] } else { rng.next() };
            h.tag = rng.below(8192);
            h.data = if rng.chance(0.5) { 5 } else { rng.next() };
            let cx = Ctx { b: &p.b.b, objs: &p.b.objs };
            let mut body = vec![0u8; h.payload_len().min(1 << 16) as usize];
            rng.fill(&mut body);
            let r = if rng.chance(0.3) {
                p.b.eng.frame(cx, &mut p.b.pr, 0, FiAddr(0), h, &body).map(|_| Begin::Done)
            } else {
                match p.b.eng.begin(cx, &mut p.b.pr, 0, FiAddr(0), h) {
                    Ok(Begin::Payload) => {
                        let mut r = Ok(Begin::Payload);
                        let mut rest = &body[..];
                        while r.is_ok() && !rest.is_empty() {
                            let k = 1 + rng.index(rest.len());
                            r = p.b.eng.write(cx, &mut p.b.pr, &rest[..k]).map(|_| Begin::Payload);
                            rest = &rest[k..];
                        }
                        r.and_then(|_| p.b.eng.end(cx, &mut p.b.pr, 0).map(|_| Begin::Done))
                    }
                    r => r,
                }
            };
            if r.is_err() {
                dropped += 1;
                p.b.eng.peer_lost(cx, &mut p.b.pr, 0, Error::Io);
                assert!(!p.b.pr.arriving());
                assert_eq!(p.b.pr.answers.owed(), 0);
            } else if r == Ok(Begin::Hold) {
                // Answers owed: the transport sends them, then retries.
                while let Some((peer, f)) = p.b.eng.poll_transmit() {
                    p.b.eng.frame_done(cx, peer, Some(&mut p.b.pr), f);
                }
            }
            // Whatever it queued goes nowhere (the hostile peer does not read).
            while let Some((peer, f)) = p.b.eng.poll_transmit() {
                p.b.eng.frame_failed(&p.b.b, peer, f, Error::Io);
            }
        }
        assert!(dropped > 0, "seed {seed}: the hostile peer was never caught");
        assert_eq!(p.b.eng.in_flight(), 0, "seed {seed}: what the lost peer had in flight failed");
        // A well-behaved peer (another id) still gets its message through.
        let mut q = End::new(0, false);
        let mut s = pattern(300, 7);
        let sv = [piece(&mut s)];
        q.eng.post_send(&q.b, 9, &op(&sv, 1, 3), OpFlags::TAGGED | OpFlags::COMPLETION, None, false).unwrap();
        let (_, f) = q.eng.poll_transmit().unwrap();
        let bytes = bytes_of(&f);
        let mut d = vec![0u8; 300];
        let dv = [piece(&mut d)];
        p.b.eng.post_recv(&p.b.b, &op(&dv, 77, 3), OpFlags::TAGGED | OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
        let mut pr = PeerRx::new();
        let hdr = Header::decode(bytes[..HDR_LEN].try_into().unwrap(), u64::MAX).unwrap();
        let cx = Ctx { b: &p.b.b, objs: &p.b.objs };
        p.b.eng.frame(cx, &mut pr, 9, FiAddr(9), hdr, &bytes[HDR_LEN..]).unwrap();
        assert_eq!(d, s, "seed {seed}");
        assert!(End::comps(&p.b.rx).iter().any(|e| e.op_context == 77), "seed {seed}");
    }
}

/// One engine fed by two transports at once, behind one endpoint and one
/// matching engine (the step to same-host peers over shm and the rest over the
/// network): a stream peer (frames reported sent at once, unexpected overflow
/// is its error) and a channel peer (its state holds what the engine does not
/// take yet). Messages of both, eager and rendezvous, match tagged receives by
/// source, each source's in order, with the right source address.
#[test]
fn one_engine_fed_by_two_transports() {
    for seed in 0..10u64 {
        let mut rng = Rng::new(seed);
        let mut e = End::new(1, false);
        let mut pr2 = PeerRx::holding();
        let mut s1 = End::new(0, false);
        let mut s2 = End::new(0, true);
        let (n1, n2) = (20usize, 60usize);
        let mut keep = Vec::new();
        for (s, n, tag) in [(&mut s1, n1, 1u64), (&mut s2, n2, 2u64)] {
            for i in 0..n {
                let len = [10, 100, EAGER + 5][rng.index(3)];
                let mut m = pattern(len, (tag as u8).wrapping_mul(100).wrapping_add(i as u8));
                let v = [piece(&mut m)];
                s.eng
                    .post_send(&s.b, 0, &op(&v, i as u64, tag), OpFlags::TAGGED | OpFlags::COMPLETION, None, false)
                    .unwrap();
                keep.push((tag, i, m));
            }
        }
        let (mut q1, mut q2) = (VecDeque::new(), VecDeque::new());
        let (mut b1, mut b2) = (VecDeque::new(), VecDeque::new());
        let mut posted = false;
        let mut dsts: Vec<(u64, usize, Vec<u8>)> = Vec::new();
        for round in 0..10_000 {
            let mut moved = Pair::transmit(&mut s1, &mut q1, &mut rng, false);
            // The stream's peer goes first (its whole backlog fits the limits);
            // the channel's later, so that its excess is held.
            if round > 3 || q1.is_empty() {
                moved |= Pair::transmit(&mut s2, &mut q2, &mut rng, false);
            }
            moved |= Pair::deliver(&mut e, &mut q1, &mut rng);
            std::mem::swap(&mut e.pr, &mut pr2);
            e.other = 2;
            moved |= Pair::deliver(&mut e, &mut q2, &mut rng);
            std::mem::swap(&mut e.pr, &mut pr2);
            e.other = 1;
            while let Some((peer, f)) = e.eng.poll_transmit() {
                moved = true;
                let bytes = bytes_of(&f);
                let pr = if peer == 1 { &mut e.pr } else { &mut pr2 };
                e.eng.frame_done(Ctx { b: &e.b, objs: &e.objs }, peer, Some(pr), f);
                if peer == 1 { &mut b1 } else { &mut b2 }.push_back(bytes);
            }
            moved |= Pair::deliver(&mut s1, &mut b1, &mut rng);
            moved |= Pair::deliver(&mut s2, &mut b2, &mut rng);
            if !moved && !posted {
                // Everything is unexpected or held now: post the receives.
                assert!(e.violation.is_none(), "seed {seed}: {:?}", e.violation);
                // Eager messages up to the limit (announcements cost a header
                // and are not counted against it); the channel holds the rest.
                assert!(e.eng.rx.unexpected_len() >= 64, "seed {seed}");
                assert!(!q2.is_empty(), "seed {seed}: the channel's excess is held");
                for (tag, n) in [(1u64, n1), (2u64, n2)] {
                    for i in 0..n {
                        dsts.push((tag, i, vec![0u8; EAGER + 5]));
                    }
                }
                for (k, (tag, _, d)) in dsts.iter_mut().enumerate() {
                    let v = [piece(d)];
                    let flags = OpFlags::TAGGED | OpFlags::COMPLETION;
                    e.eng.post_recv(&e.b, &op(&v, k as u64, *tag), flags, FiAddr::UNSPEC).unwrap();
                }
                posted = true;
            } else if !moved {
                break;
            }
        }
        assert!(e.violation.is_none() && s1.violation.is_none() && s2.violation.is_none(), "seed {seed}");
        let rx = End::comps(&e.rx);
        assert_eq!(rx.len(), n1 + n2, "seed {seed}");
        for c in rx {
            let (tag, i, d) = &dsts[c.op_context as usize];
            let (_, _, m) = keep.iter().find(|(t, j, _)| t == tag && j == i).unwrap();
            assert_eq!(c.len, m.len(), "seed {seed}: tag {tag} #{i}: each source's messages in order");
            assert_eq!(&d[..m.len()], &m[..], "seed {seed}");
            assert_eq!(c.src, FiAddr(*tag), "seed {seed}: the source is the transport's peer");
        }
        assert_eq!(End::comps(&s1.tx).len(), n1);
        assert_eq!(End::comps(&s2.tx).len(), n2);
    }
}

#[test]
fn begin_reads_as_words_in_a_log_line() {
    // A transport's protocol-error text names what became of a frame without
    // Rust debug text.
    let words: Vec<String> =
        [Begin::Payload, Begin::Done, Begin::Hold, Begin::Control].iter().map(|b| b.to_string()).collect();
    assert_eq!(words[1], "handled");
    assert!(words[2].starts_with("held"), "{}", words[2]);
    for (w, b) in words.iter().zip([Begin::Payload, Begin::Done, Begin::Hold, Begin::Control]) {
        assert_ne!(*w, format!("{b:?}"), "Display must not be the debug name");
    }
}

/// `send_now` as a stream transport uses it: an eager message the stream takes
/// whole completes at once with no frame; one it takes in part (or refuses: an
/// error counts as nothing written) goes to `park` as the frame of the same
/// bytes with the count written, and completes once that frame is sent; a
/// message past the eager limit is queued. What the receiver gets is the
/// message sent, tag and CQ data included, in every case.
#[test]
fn send_now_writes_whole_in_part_or_queues() {
    // (bytes the stream takes, of a frame of HDR_LEN + 100; None: an error)
    for (take, inject) in [(Some(usize::MAX), false), (Some(17), false), (Some(HDR_LEN + 3), true), (None, false)] {
        let mut p = Pair::new(11);
        let mut s = pattern(100, 3);
        let v = [piece(&mut s)];
        let mut o = op(&v, 1, 0x77);
        o.data = 0xDA7A;
        let flags = OpFlags::TAGGED | OpFlags::COMPLETION | OpFlags::REMOTE_CQ_DATA;
        let data = s.clone();
        let mut wire = Vec::new();
        let mut parked = None;
        let now = p.a.eng.send_now(
            &p.a.b,
            1,
            &o,
            flags,
            inject.then_some(&data[..]),
            |head, pieces| {
                let mut all = head.to_vec();
                for q in pieces {
                    // SAFETY: (test) the pieces are the test's buffer or the inject's data.
                    all.extend_from_slice(unsafe { std::slice::from_raw_parts(q.base, q.len) });
                }
                assert_eq!(all.len(), HDR_LEN + 100);
                let Some(n) = take else { return Err(Error::Again) };
                let n = n.min(all.len());
                wire.extend_from_slice(&all[..n]);
                Ok(n)
            },
            |f, written| parked = Some((f, written)),
        );
        let what = format!("take {take:?}, inject {inject}");
        match take {
            Some(usize::MAX) => {
                assert!(matches!(now, Ok(SendNow::Done)), "{what}");
                assert!(parked.is_none(), "{what}");
            }
            _ => {
                assert!(matches!(now, Ok(SendNow::Partial)), "{what}");
                let (f, written) = parked.take().expect("the rest is parked");
                assert_eq!(written, wire.len(), "{what}");
                // The parked frame is the whole message: the bytes already
                // written are its first ones.
                let all = bytes_of(&f);
                assert_eq!(&all[..written], &wire[..], "{what}");
                wire = all;
                assert!(End::comps(&p.a.tx).is_empty(), "{what}: not complete before the rest is sent");
                let cx = Ctx { b: &p.a.b, objs: &p.a.objs };
                p.a.eng.frame_done(cx, 1, Some(&mut p.a.pr), f);
            }
        }
        // An inject completes nothing; a send completes once, whole.
        let tx = End::comps(&p.a.tx);
        assert_eq!(tx.len(), usize::from(!inject), "{what}");
        if let Some(c) = tx.first() {
            assert_eq!((c.op_context, c.len), (1, 100), "{what}");
        }
        let mut d = vec![0u8; 100];
        let dv = [piece(&mut d)];
        p.b.eng.post_recv(&p.b.b, &op(&dv, 2, 0x77), OpFlags::TAGGED | OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
        p.ab.push_back(wire);
        p.run();
        assert!(p.b.violation.is_none(), "{what}");
        assert_eq!(d, data, "{what}");
        let rx = End::comps(&p.b.rx);
        assert_eq!(rx.len(), 1, "{what}");
        assert_eq!((rx[0].tag, rx[0].data, rx[0].len), (0x77, 0xDA7A, 100), "{what}");
    }
    // Past the eager limit: queued (an announcement), nothing written.
    let mut p = Pair::new(12);
    let mut s = pattern(EAGER + 1, 5);
    let v = [piece(&mut s)];
    let now = p.a.eng.send_now(
        &p.a.b,
        1,
        &op(&v, 1, 0),
        OpFlags::COMPLETION,
        None,
        |_, _| panic!("a rendezvous message is not written at once"),
        |_, _| panic!("nor parked"),
    );
    assert!(matches!(now, Ok(SendNow::Queued)));
    assert!(matches!(p.a.eng.poll_transmit(), Some((1, f)) if f.op == OpCode::Rts));
}

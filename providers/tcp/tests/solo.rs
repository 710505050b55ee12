//! An endpoint whose only connection is up and quiet reads that connection alone,
//! without `epoll_wait` (`progress_solo`): messages still arrive whole and in
//! order, whatever the mix of sizes one `recv` stages, and a new peer's connection
//! is still accepted while the one connection keeps the endpoint busy.

mod common;

use common::{open_rdm_domain, rdm_endpoint, wait, Rdm};
use fabric_core::prov::{DomainOps, IoVec, Op};
use fabric_core::*;
use fabric_util::wire::{Header, OpCode, HDR_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn op(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Op<'_> {
    Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 }
}

/// Send `msg` from `from` to `peer` (its handle in `from`'s AV) into a fresh
/// receive on `to`, and return what arrived.
fn exchange(from: &Rdm, peer: FiAddr, to: &Rdm, msg: &[u8], ctx: u64) -> Vec<u8> {
    let mut src = msg.to_vec();
    let mut dst = vec![0u8; msg.len() + 8];
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: both buffers outlive the completions waited for below.
    unsafe {
        to.ep.post_recv(&op(&ri, FiAddr::UNSPEC, ctx), OpFlags::empty()).unwrap();
        from.ep.post_send(&op(&si, peer, ctx + 1), OpFlags::empty()).unwrap();
    }
    let r = wait(&to.cq, &from.cq).unwrap();
    assert_eq!(r.op_context, ctx);
    let s = wait(&from.cq, &to.cq).unwrap();
    assert_eq!(s.op_context, ctx + 1);
    dst.truncate(r.len);
    dst
}

#[test]
fn a_new_peer_is_accepted_by_an_endpoint_busy_with_one_connection() {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let (a, b, c) = (rdm_endpoint(&dom, &info), rdm_endpoint(&dom, &info), rdm_endpoint(&dom, &info));
    let to_b = a.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
    let c_to_b = c.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
    // b has one connection (from a), up: its progress reads that one alone.
    for i in 0..40u64 {
        assert_eq!(exchange(&a, to_b, &b, &i.to_le_bytes(), 10 * i), i.to_le_bytes());
    }
    // c connects; only b's listener hears of it, and b's progress must look.
    assert_eq!(exchange(&c, c_to_b, &b, b"from c", 1000), b"from c");
    assert_eq!(exchange(&a, to_b, &b, b"from a again", 2000), b"from a again");
}

#[test]
fn messages_staged_together_arrive_whole_and_in_order() {
    burst(false);
}

#[test]
fn messages_staged_together_arrive_whole_and_in_order_among_several_connections() {
    burst(true);
}

/// Endpoints `a` and `b` of one domain, `a` connected to `b` (its handle for `b`
/// given) by a first exchange, and a third endpoint `c`; with `others`, `c` is
/// connected to `b` too, so that `b` has another connection (its full progress
/// pass reads them). The domain is given too, to outlive the endpoints.
fn peers(others: bool) -> (Arc<dyn DomainOps>, Rdm, Rdm, FiAddr, Rdm) {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let (a, b) = (rdm_endpoint(&dom, &info), rdm_endpoint(&dom, &info));
    let to_b = a.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
    let c = rdm_endpoint(&dom, &info);
    if others {
        let c_to_b = c.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
        assert_eq!(exchange(&c, c_to_b, &b, b"another", 50), b"another");
    }
    assert_eq!(exchange(&a, to_b, &b, b"hello", 1), b"hello");
    (dom, a, b, to_b, c)
}

/// A burst of messages of many sizes from one peer; with `others`, the receiver
/// has another connection too (its full progress pass reads them).
fn burst(others: bool) {
    let (_dom, a, b, to_b, _c) = peers(others);
    // Sizes from none to past the 64 KiB stage, sent before b reads anything, so
    // that one receive of b's stages several (some whole, some cut).
    let sizes = [0usize, 1, 64, 39, 40, 41, 1000, 30_000, 64, 70_000, 0, 5, 65_536, 3];
    let mut srcs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| vec![k as u8 + 1; n]).collect();
    let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n + 8]).collect();
    for (k, s) in srcs.iter_mut().enumerate() {
        let si = [IoVec { base: s.as_mut_ptr(), len: s.len() }];
        // SAFETY: `srcs` outlives every completion waited for below.
        unsafe { a.ep.post_send(&op(&si, to_b, 100 + k as u64), OpFlags::empty()) }.unwrap();
    }
    for (k, d) in dsts.iter_mut().enumerate() {
        let ri = [IoVec { base: d.as_mut_ptr(), len: d.len() }];
        // SAFETY: `dsts` outlives every completion waited for below.
        unsafe { b.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 200 + k as u64), OpFlags::empty()) }.unwrap();
    }
    for (k, &n) in sizes.iter().enumerate() {
        let r = wait(&b.cq, &a.cq).unwrap();
        assert_eq!(r.op_context, 200 + k as u64, "message {k} out of order");
        assert_eq!(r.len, n, "message {k}");
    }
    let mut sent = 0;
    while sent < sizes.len() {
        wait(&a.cq, &b.cq).unwrap();
        sent += 1;
    }
    for (k, &n) in sizes.iter().enumerate() {
        assert!(dsts[k][..n].iter().all(|&x| x == k as u8 + 1), "message {k} corrupt");
    }
}

#[test]
fn a_peer_sending_garbage_after_a_whole_message_is_dropped() {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let t = rdm_endpoint(&dom, &info);
    let mut dst = [0u8; 16];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: `dst` outlives the completion waited for below.
    unsafe { t.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 7), OpFlags::empty()) }.unwrap();
    let limit = Instant::now() + Duration::from_secs(20);

    let mut bad = raw_peer(&t, limit);
    // A whole message, then a header of no version the endpoint knows, in one
    // segment: the message is delivered, then the connection is dropped.
    let msg = Header { len: 5, ..Header::new(OpCode::Msg) };
    let mut garbage = Header::new(OpCode::Msg).encode();
    garbage[1] = 99;
    let mut bytes = msg.encode().to_vec();
    bytes.extend_from_slice(b"hello");
    bytes.extend_from_slice(&garbage);
    bad.write_all(&bytes).unwrap();
    let mut out = [CqEntry::new(0, Caps::empty())];
    let mut closed = false;
    let mut got = None;
    while !(closed && got.is_some()) {
        if got.is_none() {
            match t.cq.read(&mut out) {
                Ok(1) => got = Some(out[0]),
                Err(Error::Avail) => panic!("the message failed: {:?}", t.cq.readerr()),
                _ => {}
            }
        } else {
            let _ = t.cq.read(&mut []);
        }
        let mut b = [0u8; 64];
        match bad.read(&mut b) {
            Ok(0) => closed = true,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => closed = true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            r => panic!("unexpected bytes from the endpoint: {r:?}"),
        }
        assert!(Instant::now() < limit, "message {got:?}, connection closed {closed}");
    }
    let r = got.unwrap();
    assert_eq!((r.op_context, r.len), (7, 5));
    assert_eq!(&dst[..5], b"hello");
    // The endpoint still talks to a well-behaved peer.
    let a = rdm_endpoint(&dom, &info);
    let to_t = a.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    assert_eq!(exchange(&a, to_t, &t, b"still fine", 100), b"still fine");
}

/// A peer speaking the wire protocol by hand: a hello under a made-up name, and
/// the endpoint's acceptance (read before `limit`); the socket is left
/// non-blocking, and the endpoint's one connection up and quiet.
fn raw_peer(t: &Rdm, limit: Instant) -> TcpStream {
    let hold = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("127.0.0.1:{}", hold.local_addr().unwrap().port());
    let mut bad = TcpStream::connect(t.ep.getname().unwrap().sockaddr().unwrap()).unwrap();
    let hello = Header { len: name.len() as u64, tag: name.len() as u64, id: 1, ..Header::new(OpCode::Hello) };
    bad.write_all(&hello.encode()).unwrap();
    bad.write_all(name.as_bytes()).unwrap();
    bad.set_nonblocking(true).unwrap();
    let mut ack = Vec::new();
    while ack.len() < HDR_LEN {
        let _ = t.cq.read(&mut []);
        let mut b = [0u8; HDR_LEN];
        match bad.read(&mut b[..HDR_LEN - ack.len()]) {
            Ok(n) => ack.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("no acceptance: {e}"),
        }
        assert!(Instant::now() < limit, "no acceptance");
    }
    assert_eq!(Header::decode(ack[..].try_into().unwrap(), u64::MAX).unwrap().op, OpCode::HelloAck);
    // The endpoint's one connection is up and quiet: its progress reads it alone.
    for _ in 0..4 {
        let _ = t.cq.read(&mut []);
    }
    bad
}

/// Big messages whose bytes come a few at a time (as over a real network, where
/// a read returns what has arrived): each is read straight into its receive
/// however little of it is left after a short read, and arrives whole and in
/// order; a big message cut short by a small receive has its tail read through
/// and dropped, and the stream stays in step (the message after it arrives).
/// Sizes on both sides of one loopback segment (64 KiB), where the first read
/// of a big message asks for a header alone or a first chunk.
#[test]
fn big_messages_arriving_a_few_bytes_at_a_time_arrive_whole() {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let t = rdm_endpoint(&dom, &info);
    let limit = Instant::now() + Duration::from_secs(30);
    let bad = raw_peer(&t, limit);
    // Message k: its length, and the receive's.
    let plan: [(usize, usize); 6] =
        [(40_000, 40_000), (300_000, 300_008), (7, 64), (200_000, 1_000), (66_000, 66_000), (3, 3)];
    let msgs: Vec<Vec<u8>> =
        plan.iter().enumerate().map(|(k, &(n, _))| (0..n).map(|i| (i * 7 + k) as u8).collect()).collect();
    let mut dsts: Vec<Vec<u8>> = plan.iter().map(|&(_, cap)| vec![0u8; cap]).collect();
    for (k, d) in dsts.iter_mut().enumerate() {
        let ri = [IoVec { base: d.as_mut_ptr(), len: d.len() }];
        // SAFETY: `dsts` outlives every completion waited for below.
        unsafe { t.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 10 + k as u64), OpFlags::empty()) }.unwrap();
    }
    // The peer writes every frame in pieces of uneven lengths, pausing between
    // them, from a thread, while this one drives the endpoint.
    let mut stream = Vec::new();
    for m in &msgs {
        stream.extend_from_slice(&Header { len: m.len() as u64, ..Header::new(OpCode::Msg) }.encode());
        stream.extend_from_slice(m);
    }
    let writer = std::thread::spawn(move || {
        let mut bad = bad;
        bad.set_nonblocking(false).unwrap();
        let cuts = [1usize, 39, 4096, 70_000, 17, 30_000, 3, 9000, 65_536, 500];
        let (mut at, mut k) = (0, 0);
        while at < stream.len() {
            let n = cuts[k % cuts.len()].min(stream.len() - at);
            bad.write_all(&stream[at..at + n]).unwrap();
            at += n;
            k += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        bad
    });
    let mut out = [CqEntry::new(0, Caps::empty())];
    for (k, &(n, cap)) in plan.iter().enumerate() {
        let (ctx, len) = loop {
            match t.cq.read(&mut out) {
                Ok(1) => break (out[0].op_context, out[0].len),
                Err(Error::Avail) => {
                    let e = t.cq.readerr().unwrap();
                    assert_eq!(e.err, Error::Trunc, "message {k}: {e:?}");
                    assert_eq!(e.olen, n - cap, "message {k}");
                    break (e.entry.op_context, e.entry.len);
                }
                _ => {}
            }
            assert!(Instant::now() < limit, "message {k} did not arrive");
        };
        assert_eq!(ctx, 10 + k as u64, "message {k} out of order");
        assert_eq!(len, n.min(cap), "message {k}");
        assert!(dsts[k][..len] == msgs[k][..len], "message {k} corrupt");
    }
    let _bad = writer.join().expect("the peer's writer panicked");
}

/// An endpoint closed while its one connection is up fails the receive it had
/// posted, and its progress (driven by reads of its queue, past the periodic
/// look at the listener) finds nothing more to do; the peer sees the
/// connection go.
#[test]
fn progress_of_an_endpoint_closed_with_its_one_connection_up_does_nothing() {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let (a, b) = (rdm_endpoint(&dom, &info), rdm_endpoint(&dom, &info));
    let to_b = a.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
    for i in 0..3u64 {
        assert_eq!(exchange(&a, to_b, &b, &i.to_le_bytes(), 10 * i), i.to_le_bytes());
    }
    let mut dst = vec![0u8; 16];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: `dst` outlives the receive, which the close below fails.
    unsafe { b.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 77), OpFlags::empty()).unwrap() };
    b.ep.close().unwrap();
    assert_eq!(b.cq.read_one().err(), Some(Error::Avail), "the receive's failure waits on the queue");
    let e = b.cq.readerr().unwrap();
    assert_eq!((e.entry.op_context, e.err), (77, Error::Canceled));
    // Past SOLO_FULL_EVERY progress calls: nothing completes, nothing fails.
    for _ in 0..300 {
        assert_eq!(b.cq.read_one().err(), Some(Error::Again));
    }
    assert_eq!(b.cq.readerr().err(), Some(Error::Again));
    // a's send to the closed endpoint does not complete as delivered into b: it
    // completes (written before the reset was seen) or fails, and a's
    // connection is found gone.
    let mut src = *b"after close";
    let si = [IoVec { base: src.as_mut_ptr(), len: src.len() }];
    // SAFETY: `src` outlives the send's completion, waited for below.
    let posted = unsafe { a.ep.post_send(&op(&si, to_b, 5), OpFlags::empty()) };
    if posted.is_ok() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match a.cq.read_one() {
                Ok(c) => break assert_eq!(c.op_context, 5),
                Err(Error::Avail) => break assert_eq!(a.cq.readerr().unwrap().entry.op_context, 5),
                Err(Error::Again) => assert!(Instant::now() < deadline, "the send neither completed nor failed"),
                Err(e) => panic!("reading a's queue: {e}"),
            }
        }
    }
    assert_eq!(b.cq.read_one().err(), Some(Error::Again));
}

/// A send with more pieces than the endpoint takes is refused (`FI_EINVAL`) on
/// the straight path to the last destination too (its connection up and
/// idle), and leaves no trace: nothing completes on either side, and the next
/// message arrives as usual.
#[test]
fn too_many_pieces_are_refused_on_the_way_to_the_last_destination() {
    let (dom, info) = open_rdm_domain(&fabric_tcp::provider());
    let (a, b) = (rdm_endpoint(&dom, &info), rdm_endpoint(&dom, &info));
    let to_b = a.av.insert(&[b.ep.getname().unwrap()]).unwrap()[0];
    assert_eq!(exchange(&a, to_b, &b, b"first", 1), b"first");
    let limit = info.tx_attr.iov_limit;
    let mut bytes = vec![7u8; limit + 1];
    let pieces: Vec<IoVec> = bytes.chunks_mut(1).map(|c| IoVec { base: c.as_mut_ptr(), len: 1 }).collect();
    let mut dst = vec![0u8; 64];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: dst.len() }];
    // SAFETY: the buffers outlive the operations (the receive completes below).
    unsafe {
        b.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 20), OpFlags::empty()).unwrap();
        assert_eq!(a.ep.post_send(&op(&pieces, to_b, 21), OpFlags::empty()), Err(Error::Inval));
        assert_eq!(a.ep.post_send(&op(&pieces[..limit], to_b, 22), OpFlags::empty()), Ok(()));
    }
    let r = wait(&b.cq, &a.cq).unwrap();
    assert_eq!((r.op_context, r.len), (20, limit), "the send at the limit arrives, not the refused one");
    assert_eq!(&dst[..limit], &bytes[..limit]);
    assert_eq!(wait(&a.cq, &b.cq).unwrap().op_context, 22);
    for _ in 0..100 {
        assert_eq!(a.cq.read_one().err(), Some(Error::Again));
        assert_eq!(b.cq.read_one().err(), Some(Error::Again));
    }
}

/// Large messages back to back, each read straight into its receive together with
/// what follows it (the next header, staged by the same `recvmsg`): every one
/// arrives whole in its own receive (matched in order), with one endpoint's
/// connection alone and among several.
#[test]
fn large_messages_back_to_back_arrive_whole_and_in_order() {
    for others in [false, true] {
        let (_dom, a, b, to_b, _c) = peers(others);
        let sizes = [40_000usize, 65_536, 100_000, 0, 70_000, 33_000, 65_536, 1, 200_000, 600_000, 32_768, 64];
        let byte = |k: usize, i: usize| (k * 31 + i * 7 + i / 251) as u8;
        let mut srcs: Vec<Vec<u8>> =
            sizes.iter().enumerate().map(|(k, &n)| (0..n).map(|i| byte(k, i)).collect()).collect();
        let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xeeu8; n + 8]).collect();
        for (k, d) in dsts.iter_mut().enumerate() {
            let ri = [IoVec { base: d.as_mut_ptr(), len: d.len() }];
            // SAFETY: `dsts` outlives every completion waited for below.
            unsafe { b.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 200 + k as u64), OpFlags::empty()) }.unwrap();
        }
        for (k, s) in srcs.iter_mut().enumerate() {
            let si = [IoVec { base: s.as_mut_ptr(), len: s.len() }];
            // SAFETY: `srcs` outlives every completion waited for below.
            unsafe { a.ep.post_send(&op(&si, to_b, 100 + k as u64), OpFlags::empty()) }.unwrap();
        }
        // Receives match in order; a rendezvous message (past eager_max, 512 KiB)
        // completes after the eager ones behind it, so completions are counted.
        let mut got = vec![false; sizes.len()];
        for _ in 0..sizes.len() {
            let r = wait(&b.cq, &a.cq).unwrap();
            let k = (r.op_context - 200) as usize;
            assert!(!std::mem::replace(&mut got[k], true), "receive {k} completed twice");
            assert_eq!(r.len, sizes[k], "message {k}");
        }
        let mut sent = 0;
        while sent < sizes.len() {
            wait(&a.cq, &b.cq).unwrap();
            sent += 1;
        }
        for (k, &n) in sizes.iter().enumerate() {
            // Each in its own receive: message k matched receive k.
            assert!(dsts[k][..n].iter().enumerate().all(|(i, &x)| x == byte(k, i)), "message {k} corrupt");
            assert!(dsts[k][n..].iter().all(|&x| x == 0xee), "message {k} wrote past its end");
        }
        // And the connection still carries small messages.
        assert_eq!(exchange(&a, to_b, &b, b"after", 900), b"after");
    }
}

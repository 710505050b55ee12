//! Untagged messages over RDM and MSG endpoints: sizes through the eager and
//! rendezvous protocols, vectored I/O, remote CQ data, inject, ordering,
//! unexpected messages, truncation, cancel, multi-receive buffers, directed
//! receives.

use super::PROV;
use crate::common::*;
use fabric::*;

/// Message sizes: empty, tiny, odd, page, 64 KiB, at and just above eager limits
/// of 128 KiB and 512 KiB (tcp's), 1 MiB and 8 MiB (rendezvous).
const SIZES: &[usize] = &[0, 1, 3, 255, 1023, 4096, 65_536, 131_072, 131_073, 524_288, 524_289, 1 << 20, 8 << 20];

fn sizes(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let max = p.info.ep_attr.max_msg_size;
    for (i, &size) in SIZES.iter().enumerate() {
        if size > max {
            skip(format!("{size}-byte message: above max_msg_size {max}"));
            continue;
        }
        let want = pattern(size, i as u64 + 1);
        let (rctx, sctx) = (1000 + i as u64, 2000 + i as u64);
        p.b.ep.recv(Buf::from(vec![FILL; size + 16]), FiAddr::UNSPEC, rctx).expect("post recv");
        p.a.ep.send(Buf::from(want.clone()), p.a_to_b, sctx).expect("post send");

        let r = p.ok_b();
        assert_eq!(r.context, rctx, "{size} bytes: receive context");
        assert_eq!(r.len, size, "{size} bytes: received length");
        assert!(r.flags.contains(Caps::RECV | Caps::MSG), "{size} bytes: receive flags {:?}", r.flags);
        assert!(!r.flags.intersects(Caps::REMOTE_CQ_DATA | Caps::TAGGED), "receive flags {:?}", r.flags);
        assert!(r.recv.is_none(), "no multi-receive view for a plain receive");
        p.check_src_at_b(&r);
        let mut got = r.buffers.into_buf().expect("receive buffer given back");
        assert_eq!(got.capacity(), size + 16, "the posted buffer itself comes back");
        assert_bytes(&got, &want, &format!("{t} message of {size} bytes"));
        got.set_len(size + 16).expect("within capacity");
        assert!(got[size..].iter().all(|&x| x == FILL), "{size} bytes: bytes written past the message");

        let s = p.ok_a();
        assert_eq!(s.context, sctx, "{size} bytes: send context");
        assert!(s.flags.contains(Caps::SEND | Caps::MSG), "{size} bytes: send flags {:?}", s.flags);
        assert_bytes(&s.buffers.into_buf().expect("send buffer given back"), &want, "send buffer given back");
    }
    assert_eq!(p.a.cq.cq.in_flight() + p.b.cq.cq.in_flight(), 0, "every operation completed once");
}

rdm_and_msg!(sizes: rdm_sizes, msg_sizes);

/// Buffers registered for local use (`Domain::register_buf`): posted with the
/// `*msg` calls, untagged and (where the endpoint has tagged messages) tagged,
/// eager and rendezvous sizes; each completion
/// gives the registered buffer itself back (its length the bytes received), it
/// is posted again, and deregistered at the end, giving the `Buf` back.
fn registered_buffers(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let can_tag = p.info.caps.contains(Caps::TAGGED);
    let max = p.info.ep_attr.max_msg_size;
    let cap = (1usize << 20).min(max);
    let mut tx = p.a.domain.register_buf(Buf::new(cap)).expect("register the send buffer");
    let mut rx = Some(p.b.domain.register_buf(Buf::new(cap + 8)).expect("register the receive buffer"));
    assert_eq!((tx.capacity(), tx.len()), (cap, cap));
    for (i, &size) in [0usize, 1, 64, 4096, 65_536, cap].iter().enumerate() {
        let tagged = can_tag && i % 2 == 1;
        let want = pattern(size, 70 + i as u64);
        tx.set_len(size).expect("within capacity");
        tx.copy_from_slice(&want);
        let mut r = RecvMsg::new(rx.take().expect("receive buffer back"), 300 + i as u64);
        let mut s = SendMsg::new(tx, p.a_to_b, 400 + i as u64);
        if tagged {
            (r.tag, s.tag) = (9, 9);
            p.b.ep.trecvmsg(r, OpFlags::empty()).expect("post trecvmsg");
            p.a.ep.tsendmsg(s, OpFlags::empty()).expect("post tsendmsg");
        } else {
            p.b.ep.recvmsg(r, OpFlags::empty()).expect("post recvmsg");
            p.a.ep.sendmsg(s, OpFlags::empty()).expect("post sendmsg");
        }
        let c = p.ok_b();
        assert_eq!((c.context, c.len), (300 + i as u64, size), "{size} bytes: receive");
        assert_bytes(c.bytes(), &want, &format!("{t} registered receive of {size} bytes"));
        let got = c.buffers.into_registered().expect("the registered receive buffer given back");
        assert_eq!((got.len(), got.capacity()), (size, cap + 8), "{size} bytes: the receive's length");
        rx = Some(got);
        let c = p.ok_a();
        assert_eq!(c.context, 400 + i as u64);
        tx = c.buffers.into_registered().expect("the registered send buffer given back");
        assert_bytes(&tx, &want, "send buffer given back");
    }
    let b = tx.into_buf().expect("deregister");
    assert_eq!(b.capacity(), cap);
    drop(rx);
    assert_eq!(p.a.cq.cq.in_flight() + p.b.cq.cq.in_flight(), 0, "every operation completed once");
}

rdm_and_msg!(registered_buffers: rdm_registered_buffers, msg_registered_buffers);

/// Cut `data` into pieces of the given sizes (cycled), at most `n` pieces, the
/// last taking the rest.
fn split(data: &[u8], sizes: &[usize], n: usize) -> Vec<Buf> {
    let mut out = Vec::new();
    let mut off = 0;
    for i in 0..n {
        let take = if i + 1 == n { data.len() - off } else { sizes[i % sizes.len()].min(data.len() - off) };
        out.push(Buf::from(&data[off..off + take]));
        off += take;
    }
    out
}

fn vectored(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let (tx_lim, rx_lim) = (p.info.tx_attr.iov_limit.min(64), p.info.rx_attr.iov_limit.min(64));
    if tx_lim < 2 || rx_lim < 2 {
        skip(format!("iov_limit tx {tx_lim} rx {rx_lim}: no vectored operations"));
        return;
    }
    // Small (eager) and large (rendezvous) totals.
    for (k, piece_sizes) in [&[1usize, 7, 100, 4096, 3][..], &[100_000, 1, 300_000, 65_536][..]].iter().enumerate() {
        let total: usize = (0..tx_lim).map(|i| piece_sizes[i % piece_sizes.len()]).sum();
        let want = pattern(total, 40 + k as u64);
        let sbufs = split(&want, piece_sizes, tx_lim);
        // Receive pieces cut differently, with room to spare in the last.
        let chunk = total / rx_lim + 5;
        let rbufs: Vec<Buf> = (0..rx_lim).map(|i| Buf::new(if i + 1 == rx_lim { chunk + 64 } else { chunk })).collect();
        let rcap: usize = rbufs.iter().map(|b| b.capacity()).sum();
        assert!(rcap >= total);
        p.b.ep.recvv(rbufs, FiAddr::UNSPEC, 1).expect("post recvv");
        p.a.ep.sendv(sbufs, p.a_to_b, 2).expect("post sendv");
        let r = p.ok_b();
        assert_eq!((r.context, r.len), (1, total), "vectored receive of {total} bytes");
        let pieces = r.buffers.into_vec();
        assert_eq!(pieces.len(), rx_lim, "every receive piece comes back");
        let got: Vec<u8> = pieces.iter().flat_map(|b| b.as_slice().iter().copied()).collect();
        assert_bytes(&got[..total], &want, &format!("{t} vectored message of {total} bytes"));
        let s = p.ok_a();
        assert_eq!(s.context, 2);
        let back = s.buffers.into_vec();
        assert_eq!(back.len(), tx_lim, "every send piece comes back");
        let sent: Vec<u8> = back.iter().flat_map(|b| b.as_slice().iter().copied()).collect();
        assert_bytes(&sent, &want, "send pieces given back");
    }
    // Gather into one buffer, and one buffer scattered.
    let want = pattern(10_000, 7);
    p.b.ep.recv(Buf::new(10_000), FiAddr::UNSPEC, 3).expect("post recv");
    p.a.ep.sendv(split(&want, &[1, 999, 4000], tx_lim), p.a_to_b, 4).expect("post sendv");
    assert_bytes(p.ok_b().bytes(), &want, "gathered send into one buffer");
    p.ok_a();
    p.b.ep.recvv(vec![Buf::new(3), Buf::new(4997), Buf::new(5000)], FiAddr::UNSPEC, 5).expect("post recvv");
    p.a.ep.send(Buf::from(want.clone()), p.a_to_b, 6).expect("post send");
    let r = p.ok_b();
    assert_eq!(r.len, 10_000);
    let got: Vec<u8> = r.buffers.into_vec().iter().flat_map(|b| b.as_slice().iter().copied()).collect();
    assert_bytes(&got, &want, "one buffer scattered into three");
    p.ok_a();
}

rdm_and_msg!(vectored: rdm_vectored, msg_vectored);

fn iov_limit(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let (tx_lim, rx_lim) = (p.info.tx_attr.iov_limit, p.info.rx_attr.iov_limit);
    if tx_lim > 1024 || rx_lim > 1024 {
        skip(format!("iov_limit tx {tx_lim} rx {rx_lim}: too large to exceed in a test"));
        return;
    }
    // One piece more than the limit: refused, every buffer given back untouched.
    let bufs: Vec<Buf> = (0..tx_lim + 1).map(|i| Buf::from(pattern(10 + i, i as u64))).collect();
    let e = p.a.ep.sendv(bufs, p.a_to_b, 1).expect_err("sendv above tx iov_limit must fail");
    let back = e.buffers.into_vec();
    assert_eq!(back.len(), tx_lim + 1, "sendv: every buffer given back ({})", e.error);
    for (i, b) in back.iter().enumerate() {
        assert_bytes(b, &pattern(10 + i, i as u64), "sendv buffer given back");
    }
    let bufs: Vec<Buf> = (0..rx_lim + 1).map(|i| Buf::new(16 + i)).collect();
    let e = p.b.ep.recvv(bufs, FiAddr::UNSPEC, 2).expect_err("recvv above rx iov_limit must fail");
    let back = e.buffers.into_vec();
    assert_eq!(back.len(), rx_lim + 1, "recvv: every buffer given back ({})", e.error);
    for (i, b) in back.iter().enumerate() {
        assert_eq!(b.capacity(), 16 + i);
    }
    assert_eq!(p.a.cq.cq.in_flight() + p.b.cq.cq.in_flight(), 0, "failed posts leave nothing in flight");
    // Exactly the limit works, and nothing of the refused operations arrives.
    p.b.ep.recv(Buf::new(4096), FiAddr::UNSPEC, 3).expect("post recv");
    let want = pattern(tx_lim * 10, 99);
    p.a.ep.sendv(split(&want, &[10], tx_lim), p.a_to_b, 4).expect("sendv at the limit");
    let r = p.ok_b();
    assert_eq!(r.context, 3);
    assert_bytes(r.bytes(), &want, "the message after the refused ones");
    assert_eq!(p.ok_a().context, 4);
    assert_quiet(&p.b.cq, &p.drivers(), "refused operations must leave no trace");
}

rdm_and_msg!(iov_limit: rdm_iov_limit, msg_iov_limit);

fn remote_cq_data(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG | Caps::REMOTE_CQ_DATA) else { return };
    let size = p.info.domain_attr.cq_data_size;
    if size == 0 {
        skip("cq_data_size is 0");
        return;
    }
    let mask = if size >= 8 { u64::MAX } else { (1u64 << (8 * size)) - 1 };
    let d = [0xDEAD_BEEF_CAFE_F00D & mask, 0x0123_4567_89AB_CDEF & mask, 0x5A5A_A5A5_1234_8765 & mask];
    for ctx in 0..5 {
        p.b.ep.recv(Buf::new(2 << 20), FiAddr::UNSPEC, ctx).expect("post recv");
    }
    let small = pattern(100, 1);
    let large = pattern(1 << 20, 2);
    p.a.ep.senddata(Buf::from(small.clone()), d[0], p.a_to_b, 10).expect("senddata");
    p.a.ep.send(Buf::from(small.clone()), p.a_to_b, 11).expect("send without data");
    p.a.ep.senddata(Buf::from(large.clone()), d[1], p.a_to_b, 12).expect("senddata, rendezvous size");
    let mut msg = SendMsg::new(Buf::from(small.clone()), p.a_to_b, 13);
    msg.data = d[2];
    p.a.ep.sendmsg(msg, OpFlags::REMOTE_CQ_DATA).expect("sendmsg with REMOTE_CQ_DATA");
    let inject = p.info.tx_attr.inject_size >= 8;
    if inject {
        p.a.ep.injectdata(b"injected", d[0] ^ 1, p.a_to_b).expect("injectdata");
    }
    let n = if inject { 5 } else { 4 };
    let mut got: Vec<Completion> = (0..n).map(|_| p.ok_b()).collect();
    got.sort_by_key(|c| c.context);
    let flag = |c: &Completion| c.flags.contains(Caps::REMOTE_CQ_DATA);
    assert!(flag(&got[0]) && got[0].data == d[0], "senddata: flags {:?} data {:#x}", got[0].flags, got[0].data);
    assert_bytes(got[0].bytes(), &small, "senddata payload");
    assert!(!flag(&got[1]), "a plain send carries no remote CQ data: flags {:?}", got[1].flags);
    assert_bytes(got[1].bytes(), &small, "send payload");
    assert!(flag(&got[2]) && got[2].data == d[1], "large senddata: flags {:?} data {:#x}", got[2].flags, got[2].data);
    assert_bytes(got[2].bytes(), &large, "large senddata payload");
    assert!(flag(&got[3]) && got[3].data == d[2], "sendmsg: flags {:?} data {:#x}", got[3].flags, got[3].data);
    if inject {
        assert!(flag(&got[4]) && got[4].data == d[0] ^ 1, "injectdata: {:?} {:#x}", got[4].flags, got[4].data);
        assert_eq!(got[4].bytes(), b"injected");
    }
    let mut sent: Vec<u64> = (0..4).map(|_| p.ok_a().context).collect();
    sent.sort_unstable();
    assert_eq!(sent, [10, 11, 12, 13]);
    assert_quiet(&p.a.cq, &p.drivers(), "injectdata has no completion");
    // Unexpected (sent before the receive), eager and rendezvous: the data waits
    // with the message.
    p.a.ep.senddata(Buf::from(small.clone()), d[1], p.a_to_b, 20).expect("senddata");
    p.a.ep.senddata(Buf::from(large.clone()), d[2], p.a_to_b, 21).expect("large senddata");
    p.settle(QUIET);
    for (ctx, want, payload) in [(30u64, d[1], &small), (31, d[2], &large)] {
        p.b.ep.recv(Buf::new(2 << 20), FiAddr::UNSPEC, ctx).expect("post recv");
        let c = p.ok_b();
        assert_eq!(c.context, ctx);
        assert!(flag(&c) && c.data == want, "unexpected senddata: flags {:?} data {:#x}", c.flags, c.data);
        assert_bytes(c.bytes(), payload, "unexpected senddata payload");
    }
    p.ok_a();
    p.ok_a();
}

rdm_and_msg!(remote_cq_data: rdm_remote_cq_data, msg_remote_cq_data);

fn inject(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let max = p.info.tx_attr.inject_size;
    if max == 0 {
        skip("inject_size is 0");
        return;
    }
    let big = max.min(64 << 10);
    for ctx in 0..4 {
        p.b.ep.recv(Buf::new(big.max(64)), FiAddr::UNSPEC, ctx).expect("post recv");
    }
    // The buffer is the caller's again as soon as inject returns.
    let mut buf = pattern(big, 1);
    p.a.ep.inject(&buf[..1], p.a_to_b).expect("inject 1 byte");
    let first = buf[0];
    buf.copy_from_slice(&pattern(big, 2));
    p.a.ep.inject(&buf, p.a_to_b).expect("inject at inject_size");
    buf.copy_from_slice(&pattern(big, 3));
    drop(buf);
    p.a.ep.inject(&[], p.a_to_b).expect("inject 0 bytes");
    let mut got: Vec<Completion> = (0..3).map(|_| p.ok_b()).collect();
    got.sort_by_key(|c| c.context);
    assert_eq!(got[0].bytes(), &[first][..], "first inject");
    assert_bytes(got[1].bytes(), &pattern(big, 2), "inject of inject_size bytes");
    assert_eq!(got[2].len, 0, "empty inject");
    p.check_src_at_b(&got[0]);
    // No completion, nothing in flight for injects.
    assert_eq!(p.a.cq.cq.in_flight(), 0, "inject needs no operation record");
    assert_quiet(&p.a.cq, &p.drivers(), "inject generates no completion");
    // Above the limit: refused at once.
    if max < (64 << 20) {
        let e = p.a.ep.inject(&vec![0u8; max + 1], p.a_to_b).expect_err("inject above inject_size must fail");
        assert_ne!(e, Error::Again, "an oversized inject is not back-pressure");
    }
    if cancels_posted_receives(&p) {
        p.b.ep.cancel(3).expect("cancel the last receive");
        assert_eq!(p.err_b().err, Error::Canceled);
    } else {
        // A receive on the QP stays there: a message takes it.
        assert!(p.b.ep.cancel(3).is_err(), "a receive on the QP cannot be taken back");
        p.a.ep.inject(b"last", p.a_to_b).expect("inject to the last receive");
        let r = p.ok_b();
        assert_eq!((r.context, r.bytes()), (3, &b"last"[..]));
    }
}

rdm_and_msg!(inject: rdm_inject, msg_inject);

/// Whether the pair's receiving side can cancel a receive it has posted: every
/// endpoint can, but verbs MSG endpoints on the direct path (the default over RoCE
/// and InfiniBand; `FI_VERBS_MSG_DIRECT=0` turns it off), whose receives are on
/// the QP, which has no way to take one back (as libfabric's verbs MSG endpoints,
/// which do not cancel).
fn cancels_posted_receives(p: &Pair) -> bool {
    // The provider's own setting, read as it reads it (its default included).
    let direct = params().iter().find(|q| q.prov == "verbs" && q.name == "msg_direct").is_some_and(|q| q.get_bool());
    PROV != "verbs" || p.ep_type != EpType::Msg || !direct || is_iwarp(&p.info)
}

/// 100 messages of mixed sizes (every 25th a rendezvous) match receives in order:
/// with receives posted first, and with all of them unexpected.
fn send_after_send(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    if !p.info.tx_attr.msg_order.contains(MsgOrder::SAS) || !p.info.rx_attr.msg_order.contains(MsgOrder::SAS) {
        skip("no FI_ORDER_SAS");
        return;
    }
    const N: usize = 100;
    let size = |i: usize| if i % 25 == 24 { 200_000 } else { 4 + (i * 37) % 3000 };
    let msg = |i: usize| {
        let mut m = pattern(size(i), i as u64);
        m[..4].copy_from_slice(&(i as u32).to_le_bytes());
        m
    };
    let inject_size = p.info.tx_attr.inject_size;
    let via_inject = |i: usize| i % 10 == 5 && size(i) <= inject_size;
    for unexpected in [false, true] {
        let post = |p: &Pair| {
            for i in 0..N {
                p.b.ep.recv(Buf::new(256 << 10), FiAddr::UNSPEC, i as u64).expect("post recv");
            }
        };
        if !unexpected {
            post(&p);
        }
        // Every 10th message (when small enough) is injected: inject is ordered
        // with the sends too.
        let mut sends = 0;
        for i in 0..N {
            if via_inject(i) {
                p.a.ep.inject(&msg(i), p.a_to_b).expect("inject");
            } else {
                p.a.ep.send(Buf::from(msg(i)), p.a_to_b, 1000 + i as u64).expect("post send");
                sends += 1;
            }
        }
        if unexpected {
            p.settle(QUIET);
            post(&p);
        }
        let mut seen = [false; N];
        for _ in 0..N {
            let c = p.ok_b();
            let i = c.context as usize;
            assert!(i < N && !seen[i], "receive {i} completed twice or unknown");
            seen[i] = true;
            let seq = u32::from_le_bytes(c.bytes()[..4].try_into().expect("4 bytes")) as usize;
            assert_eq!(seq, i, "receive {i} (unexpected: {unexpected}) matched message {seq}");
            assert_bytes(c.bytes(), &msg(i), &format!("message {i}"));
        }
        let mut sent = [false; N];
        for _ in 0..sends {
            let c = p.ok_a();
            let i = (c.context - 1000) as usize;
            assert!(!sent[i], "send {i} completed twice");
            sent[i] = true;
        }
    }
}

rdm_and_msg!(send_after_send: rdm_send_after_send_order, msg_send_after_send_order);

/// Messages sent before their receive is posted: eager, and large (rendezvous).
fn unexpected(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let sizes = [1000usize, 300_000, 8 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        p.a.ep.send(Buf::from(pattern(n, i as u64)), p.a_to_b, 10 + i as u64).expect("post send");
    }
    p.settle(QUIET);
    for (i, &n) in sizes.iter().enumerate() {
        p.b.ep.recv(Buf::new(n), FiAddr::UNSPEC, i as u64).expect("post recv");
        let r = p.ok_b();
        assert_eq!((r.context, r.len), (i as u64, n), "unexpected message {i}");
        p.check_src_at_b(&r);
        assert_bytes(r.bytes(), &pattern(n, i as u64), &format!("unexpected message of {n} bytes"));
    }
    let mut sent: Vec<u64> = (0..sizes.len()).map(|_| p.ok_a().context).collect();
    sent.sort_unstable();
    assert_eq!(sent, [10, 11, 12]);
}

rdm_and_msg!(unexpected: rdm_unexpected, msg_unexpected);

/// A receive buffer too small: `FI_ETRUNC` with the bytes placed and the rest;
/// the send itself succeeds and the connection stays usable.
fn truncation(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let cases = [(100usize, 1000usize, false), (65_536, 1 << 20, false), (100, 1000, true), (65_536, 1 << 20, true)];
    for (i, (cap, n, unexpected)) in cases.into_iter().enumerate() {
        let want = pattern(n, i as u64);
        if unexpected {
            p.a.ep.send(Buf::from(want.clone()), p.a_to_b, 6).expect("post send");
            p.settle(QUIET);
        }
        p.b.ep.recv(Buf::from(vec![FILL; cap]), FiAddr::UNSPEC, 5).expect("post recv");
        if !unexpected {
            p.a.ep.send(Buf::from(want.clone()), p.a_to_b, 6).expect("post send");
        }
        let e = p.err_b();
        assert_eq!(e.err, Error::Trunc, "{n} bytes into {cap} (unexpected: {unexpected}): {e}");
        assert_eq!(e.context, 5);
        assert_eq!(e.len, cap, "len: the bytes placed");
        assert_eq!(e.olen, n - cap, "olen: the bytes that did not fit");
        let b = e.buffers.into_buf().expect("truncated receive gives its buffer back");
        assert_eq!(b.capacity(), cap);
        assert_bytes(&b, &want[..cap], "the part that fit");
        let s = p.ok_a();
        assert_eq!(s.context, 6, "the send of a truncated message completes normally");
        // The next message goes through.
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 7).expect("post recv");
        p.a.ep.send(Buf::from(b"after"), p.a_to_b, 8).expect("post send");
        assert_eq!(p.ok_b().bytes(), b"after");
        p.ok_a();
    }
}

rdm_and_msg!(truncation: rdm_truncation, msg_truncation);

fn cancel_recv(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    p.b.ep.recv(Buf::new(333), FiAddr::UNSPEC, 7).expect("post recv");
    if !cancels_posted_receives(&p) {
        // On the QP: not canceled, and the next message lands in it.
        assert!(p.b.ep.cancel(7).is_err(), "a receive on the QP cannot be taken back");
        p.a.ep.send(Buf::from(b"to 7"), p.a_to_b, 9).expect("post send");
        let r = p.ok_b();
        assert_eq!((r.context, r.bytes()), (7, &b"to 7"[..]));
        p.ok_a();
        assert_quiet(&p.b.cq, &p.drivers(), "one completion per receive");
        return;
    }
    p.b.ep.cancel(7).expect("cancel a posted receive");
    let e = p.err_b();
    assert_eq!((e.err, e.context), (Error::Canceled, 7), "canceled receive: {e}");
    assert_eq!(e.buffers.into_buf().expect("canceled receive gives its buffer back").capacity(), 333);
    assert!(p.b.ep.cancel(7).is_err(), "nothing left to cancel under that context");
    assert_eq!(p.b.cq.cq.in_flight(), 0);
    // A message now goes to the next receive, not the canceled one.
    p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 8).expect("post recv");
    p.a.ep.send(Buf::from(b"to 8"), p.a_to_b, 9).expect("post send");
    let r = p.ok_b();
    assert_eq!((r.context, r.bytes()), (8, &b"to 8"[..]));
    p.ok_a();
    assert_quiet(&p.b.cq, &p.drivers(), "one completion per receive");
}

rdm_and_msg!(cancel_recv: rdm_cancel_recv, msg_cancel_recv);

/// Read a multi-receive buffer's completions until the one that gives it back:
/// `(offset, bytes)` of each message, and the buffer.
fn collect_multi(p: &Pair, ctx: u64) -> (Vec<(usize, Vec<u8>)>, Buf) {
    let mut msgs = Vec::new();
    loop {
        let c = p.ok_b();
        assert_eq!(c.context, ctx, "multi-receive completion context");
        if let Some(v) = &c.recv {
            assert_eq!(v.len(), c.len, "view length is the completion length");
            msgs.push((v.offset(), v.to_vec()));
        }
        if c.flags.contains(Caps::MULTI_RECV) {
            assert!(c.recv.is_none() || c.len > 0);
            let buf = c.buffers.into_buf().expect("the release gives the multi-receive buffer back");
            return (msgs, buf);
        }
        assert!(c.buffers.is_none(), "a message completion does not give the buffer back");
        assert!(c.recv.is_some(), "a multi-receive message completion has a view: {c:?}");
    }
}

fn multi_recv(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG | Caps::MULTI_RECV) else { return };
    const CAP: usize = 1024;
    const MIN: usize = 200;
    const LEN: usize = 150;
    p.b.ep.set_min_multi_recv(MIN).expect("set_min_multi_recv");
    let msg = RecvMsg::new(Buf::from(vec![FILL; CAP]), 50);
    p.b.ep.recvmsg(msg, OpFlags::MULTI_RECV).expect("post multi-receive buffer");
    p.b.ep.recv(Buf::new(LEN), FiAddr::UNSPEC, 51).expect("post the receive after it");
    // 6 messages fit before less than MIN bytes are left (1024 - 6 * 150 = 124);
    // the 7th goes to the next receive.
    for i in 0..7 {
        p.a.ep.send(Buf::from(pattern(LEN, i)), p.a_to_b, 100 + i).expect("post send");
    }
    let (msgs, buf) = collect_multi(&p, 50);
    assert_eq!(msgs.len(), 6, "messages placed in a {CAP}-byte buffer with min_multi_recv {MIN}");
    assert_eq!(buf.capacity(), CAP);
    let mut end = 0;
    for (i, (off, bytes)) in msgs.iter().enumerate() {
        assert_bytes(bytes, &pattern(LEN, i as u64), &format!("multi-receive message {i}"));
        assert!(*off >= end, "message {i} at {off} overlaps the previous one ending at {end}");
        end = off + bytes.len();
        assert!(end <= CAP);
        assert_bytes(&buf[*off..end], bytes, "the returned buffer holds the message where the view was");
    }
    let r = p.ok_b();
    assert_eq!(r.context, 51, "the message after the release goes to the next receive");
    assert_bytes(r.bytes(), &pattern(LEN, 6), "7th message");
    let mut sent: Vec<u64> = (0..7).map(|_| p.ok_a().context).collect();
    sent.sort_unstable();
    assert_eq!(sent, (100..107).collect::<Vec<_>>());
}

rdm_and_msg!(multi_recv: rdm_multi_recv, msg_multi_recv);

/// Messages that arrived before the multi-receive buffer land in it, in order;
/// canceling the buffer gives it back.
#[test]
fn rdm_multi_recv_unexpected() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::MULTI_RECV) else { return };
        let data = p.info.caps.contains(Caps::REMOTE_CQ_DATA);
        for i in 0..3 {
            let b = Buf::from(pattern(100 + i, i as u64));
            if data && i == 1 {
                p.a.ep.senddata(b, 0xDA7A, p.a_to_b, i as u64).expect("post senddata");
            } else {
                p.a.ep.send(b, p.a_to_b, i as u64).expect("post send");
            }
        }
        p.settle(QUIET);
        p.b.ep.set_min_multi_recv(16).expect("set_min_multi_recv");
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(64 << 10), 9), OpFlags::MULTI_RECV).expect("post multi-receive buffer");
        for i in 0..3 {
            let c = p.ok_b();
            assert_eq!(c.context, 9);
            if data && i == 1 {
                assert!(c.flags.contains(Caps::REMOTE_CQ_DATA) && c.data == 0xDA7A, "data: {c:?}");
            }
            let v = c.recv.expect("message view");
            assert_bytes(&v, &pattern(100 + i, i as u64), &format!("unexpected message {i} in a multi-receive buffer"));
        }
        for _ in 0..3 {
            p.ok_a();
        }
        p.b.ep.cancel(9).expect("cancel the multi-receive buffer");
        let e = p.err_b();
        assert_eq!((e.err, e.context), (Error::Canceled, 9));
        let b = e.buffers.into_buf().expect("canceled multi-receive buffer comes back");
        assert_eq!(b.capacity(), 64 << 10);
        assert_eq!(p.b.cq.cq.in_flight(), 0);
    });
}

/// A receive directed at B does not take A's message; an undirected one does.
#[test]
fn rdm_directed_recv() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG | Caps::DIRECTED_RECV, &[Opts::default(); 3]) else { return };
        let (a, b, c) = (&g.sides[0], &g.sides[1], &g.sides[2]);
        let d = g.drivers();
        c.ep.recv(Buf::new(64), g.addr[2][1], 1).expect("post receive directed at b");
        a.ep.send(Buf::from(b"from a"), g.addr[0][2], 10).expect("a sends");
        settle(&d, QUIET);
        assert!(!c.cq.has_entry(), "a receive directed at b took a's message");
        b.ep.send(Buf::from(b"from b"), g.addr[1][2], 20).expect("b sends");
        let r = ok(wait_for(&c.cq, &d, WAIT), "directed receive");
        assert_eq!((r.context, r.bytes()), (1, &b"from b"[..]));
        assert_eq!(r.src, g.addr[2][1], "source is b");
        c.ep.recv(Buf::new(64), FiAddr::UNSPEC, 2).expect("post an undirected receive");
        let r = ok(wait_for(&c.cq, &d, WAIT), "undirected receive");
        assert_eq!((r.context, r.bytes()), (2, &b"from a"[..]));
        if g.info.caps.contains(Caps::SOURCE) {
            assert_eq!(r.src, g.addr[2][0], "source is a");
        }
        ok(wait_for(&a.cq, &d, WAIT), "a's send");
        ok(wait_for(&b.cq, &d, WAIT), "b's send");
    });
}

/// An RDM endpoint sends to its own address.
#[test]
fn rdm_send_to_self() {
    run(PROV, |prov| {
        let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default()]) else { return };
        let a = &g.sides[0];
        let me = g.addr[0][0];
        let d = g.drivers();
        for (i, n) in [9usize, 1 << 20].into_iter().enumerate() {
            a.ep.recv(Buf::new(n), FiAddr::UNSPEC, 1).expect("post recv");
            a.ep.send(Buf::from(pattern(n, i as u64)), me, 2).expect("send to self");
            let mut got = [ok(wait_for(&a.cq, &d, WAIT), "self"), ok(wait_for(&a.cq, &d, WAIT), "self")];
            got.sort_by_key(|c| c.context);
            assert_bytes(got[0].bytes(), &pattern(n, i as u64), "message to self");
            if g.info.caps.contains(Caps::SOURCE) {
                assert_eq!(got[0].src, me);
            }
        }
    });
}

/// A send transmits the contents (`..len`) of its buffer; a receive offers the
/// whole capacity and comes back with its length set to the bytes received.
#[test]
fn rdm_buf_len_and_capacity() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        let mut s = Buf::from(pattern(100, 1));
        s.set_len(10).expect("shorter length");
        p.b.ep.recv(Buf::from(Vec::with_capacity(64)), FiAddr::UNSPEC, 1).expect("post an empty buffer with capacity");
        p.a.ep.send(s, p.a_to_b, 2).expect("post send");
        let r = p.ok_b();
        assert_eq!(r.len, 10, "only the contents are sent");
        let b = r.buffers.into_buf().expect("buffer back");
        assert!(b.capacity() >= 64);
        assert_bytes(&b, &pattern(10, 1), "received contents");
        let s = p.ok_a().buffers.into_buf().expect("send buffer back");
        assert_eq!((s.len(), s.capacity()), (10, 100), "the send buffer comes back as posted");
    });
}

/// Both sides of a new RDM pair send first, at once (simultaneous connects), with
/// a mix of eager and rendezvous messages: all arrive, in order, once.
#[test]
fn rdm_simultaneous_first_sends() {
    run(PROV, |prov| {
        const N: usize = 10;
        let size = |i: usize| if i % 4 == 3 { 200_000 } else { 8 + i * 100 };
        let msg = |i: usize, seed: u64| {
            let mut m = pattern(size(i), seed + i as u64);
            m[..4].copy_from_slice(&(i as u32).to_le_bytes());
            m
        };
        for round in 0..5 {
            let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
            let ordered = p.info.tx_attr.msg_order.contains(MsgOrder::SAS);
            for side in [&p.a, &p.b] {
                for i in 0..N {
                    side.ep.recv(Buf::new(256 << 10), FiAddr::UNSPEC, i as u64).expect("post recv");
                }
            }
            for i in 0..N {
                p.a.ep.send(Buf::from(msg(i, 100)), p.a_to_b, 100 + i as u64).expect("a sends");
                p.b.ep.send(Buf::from(msg(i, 200)), p.b_to_a, 200 + i as u64).expect("b sends");
            }
            let d = p.drivers();
            // Each side's CQ carries its receives (contexts < N) and its sends.
            for (side, seed, name) in [(&p.b, 100, "a to b"), (&p.a, 200, "b to a")] {
                let (mut seen, mut recvs, mut sends) = ([false; N], 0, 0);
                while recvs < N || sends < N {
                    let c = ok(wait_for(&side.cq, &d, WAIT), name);
                    if c.context >= 100 {
                        sends += 1;
                        continue;
                    }
                    recvs += 1;
                    let seq = u32::from_le_bytes(c.bytes()[..4].try_into().expect("4 bytes")) as usize;
                    assert!(seq < N && !seen[seq], "round {round}, {name}: message {seq} twice or unknown");
                    seen[seq] = true;
                    if ordered {
                        assert_eq!(seq, c.context as usize, "round {round}, {name}: out of order");
                    }
                    assert_bytes(c.bytes(), &msg(seq, seed), &format!("round {round}, {name}, message {seq}"));
                }
            }
        }
    });
}

/// Three senders to one receiver at once: every message arrives once, in order
/// per sender, with its sender as the source.
#[test]
fn rdm_many_to_one() {
    run(PROV, |prov| {
        const N: usize = 30;
        let Some(g) = Group::new(prov, Caps::MSG, &[Opts::default(); 4]) else { return };
        let d = g.drivers();
        let rx = &g.sides[3];
        for i in 0..3 * N {
            rx.ep.recv(Buf::new(200_000), FiAddr::UNSPEC, i as u64).expect("post recv");
        }
        let msg = |s: usize, i: usize| {
            let mut m = pattern(if i % 10 == 9 { 150_000 } else { 16 + i }, (s * 1000 + i) as u64);
            m[..2].copy_from_slice(&[s as u8, i as u8]);
            m
        };
        for i in 0..N {
            for s in 0..3 {
                g.sides[s].ep.send(Buf::from(msg(s, i)), g.addr[s][3], i as u64).expect("send");
            }
        }
        // matched[s][i]: the receive (in posting order) that message i of sender s
        // matched. Completions may come in any order; matching follows send order.
        let mut matched = vec![vec![None; N]; 3];
        for _ in 0..3 * N {
            let c = ok(wait_for(&rx.cq, &d, WAIT), "many to one");
            let (s, i) = (c.bytes()[0] as usize, c.bytes()[1] as usize);
            assert!(s < 3 && i < N, "unknown message {s}/{i}");
            if g.info.caps.contains(Caps::SOURCE) {
                assert_eq!(c.src, g.addr[3][s], "source of a message from sender {s}");
            }
            assert!(matched[s][i].replace(c.context).is_none(), "message {i} of sender {s} twice");
            assert_bytes(c.bytes(), &msg(s, i), &format!("message {i} of sender {s}"));
        }
        if g.info.tx_attr.msg_order.contains(MsgOrder::SAS) {
            for (s, m) in matched.iter().enumerate() {
                let ctx: Vec<u64> = m.iter().map(|c| c.expect("every message arrived")).collect();
                assert!(ctx.windows(2).all(|w| w[0] < w[1]), "sender {s}: matched out of order: {ctx:?}");
            }
        }
        for s in 0..3 {
            for _ in 0..N {
                ok(wait_for(&g.sides[s].cq, &d, WAIT), "send");
            }
        }
    });
}

/// Large (rendezvous) and small messages interleaved into one multi-receive
/// buffer.
#[test]
fn rdm_multi_recv_rendezvous() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::MULTI_RECV) else { return };
        const CAP: usize = 1 << 20;
        p.b.ep.set_min_multi_recv(300_000).expect("set_min_multi_recv");
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(CAP), 7), OpFlags::MULTI_RECV).expect("post multi-receive buffer");
        let sizes = [200_000usize, 10, 200_000, 7, 200_000];
        for (i, &n) in sizes.iter().enumerate() {
            p.a.ep.send(Buf::from(pattern(n, i as u64)), p.a_to_b, i as u64).expect("post send");
        }
        // 448_559 bytes are left after the five, above the minimum: the buffer stays
        // posted, and canceling it gives it back.
        let mut got = Vec::new();
        for _ in 0..sizes.len() {
            let c = p.ok_b();
            assert_eq!(c.context, 7);
            let v = c.recv.expect("view");
            got.push((v.offset(), v.to_vec()));
        }
        got.sort_by_key(|(_, b)| (b.len(), b.first().copied()));
        let mut want: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u64)).collect();
        want.sort_by_key(|b| (b.len(), b.first().copied()));
        for ((_, g), w) in got.iter().zip(&want) {
            assert_bytes(g, w, "message in a multi-receive buffer");
        }
        let mut ranges: Vec<(usize, usize)> = got.iter().map(|(o, b)| (*o, o + b.len())).collect();
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "messages overlap: {ranges:?}");
        assert!(ranges.last().is_some_and(|r| r.1 <= CAP));
        for _ in 0..sizes.len() {
            p.ok_a();
        }
        p.b.ep.cancel(7).expect("cancel the multi-receive buffer");
        let e = p.err_b();
        assert_eq!(e.err, Error::Canceled);
        let buf = e.buffers.into_buf().expect("buffer back");
        assert_eq!(buf.capacity(), CAP);
        for (off, bytes) in &got {
            assert_bytes(
                &buf[*off..off + bytes.len()],
                bytes,
                "the returned buffer holds the message where the view was",
            );
        }
    });
}

/// A vectored receive too small: `FI_ETRUNC`, pieces given back holding what fit.
#[test]
fn rdm_truncation_vectored() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        if p.info.rx_attr.iov_limit < 2 {
            skip("rx iov_limit below 2");
            return;
        }
        let want = pattern(100, 3);
        p.b.ep.recvv(vec![Buf::new(10), Buf::new(20)], FiAddr::UNSPEC, 1).expect("post recvv");
        p.a.ep.send(Buf::from(want.clone()), p.a_to_b, 2).expect("post send");
        let e = p.err_b();
        assert_eq!((e.err, e.len, e.olen), (Error::Trunc, 30, 70), "{e}");
        let got: Vec<u8> = e.buffers.into_vec().iter().flat_map(|b| b.as_slice().iter().copied()).collect();
        assert_bytes(&got, &want[..30], "the part that fit in the pieces");
        p.ok_a();
    });
}

/// Several threads post sends on one endpoint at once (FI_THREAD_SAFE) while
/// this thread drives progress: every message arrives intact, once.
#[test]
fn rdm_concurrent_senders() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        if p.info.domain_attr.threading != Threading::Safe {
            skip(format!("threading {}", p.info.domain_attr.threading));
            return;
        }
        const T: usize = 4;
        const N: usize = 50;
        for i in 0..T * N {
            p.b.ep.recv(Buf::new(200_000), FiAddr::UNSPEC, i as u64).expect("post recv");
        }
        let msg = |t: usize, i: usize| {
            let mut m = pattern(if i % 10 == 9 { 150_000 } else { 2 + i * 13 }, (t * 100 + i) as u64);
            m[..2].copy_from_slice(&[t as u8, i as u8]);
            m
        };
        let mut seen = vec![vec![false; N]; T];
        std::thread::scope(|s| {
            for t in 0..T {
                let p = &p;
                s.spawn(move || {
                    for i in 0..N {
                        p.a.ep.send(Buf::from(msg(t, i)), p.a_to_b, (t * N + i) as u64).expect("send from a thread");
                    }
                });
            }
            for _ in 0..T * N {
                let c = p.ok_b();
                let (t, i) = (c.bytes()[0] as usize, c.bytes()[1] as usize);
                assert!(t < T && i < N && !seen[t][i], "message {t}/{i} unknown or twice");
                seen[t][i] = true;
                assert_bytes(c.bytes(), &msg(t, i), &format!("message {i} of thread {t}"));
            }
        });
        for _ in 0..T * N {
            p.ok_a();
        }
        assert_eq!(p.a.cq.cq.in_flight() + p.b.cq.cq.in_flight(), 0);
    });
}

/// Canceling a receive that already matched a large message either fails (the
/// receive completes normally) or cancels it (its buffer comes back and is
/// never written again); the sender always gets its completion.
#[test]
fn rdm_cancel_after_match() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        const N: usize = 8 << 20;
        p.a.ep.send(Buf::from(pattern(N, 4)), p.a_to_b, 1).expect("post send");
        p.settle(QUIET);
        p.b.ep.recv(Buf::new(N), FiAddr::UNSPEC, 2).expect("post recv: matches the waiting message");
        match p.b.ep.cancel(2) {
            Err(e) => {
                println!("cancel of a matched receive: {e}");
                let r = p.ok_b();
                assert_eq!(r.context, 2);
                assert_bytes(r.bytes(), &pattern(N, 4), "matched receive");
            }
            Ok(()) => {
                let e = p.err_b();
                assert_eq!((e.err, e.context), (Error::Canceled, 2));
                let b = e.buffers.into_buf().expect("buffer back");
                assert_eq!(b.capacity(), N);
            }
        }
        let s = p.next_a();
        assert_eq!(s.as_ref().map(|c| c.context).unwrap_or_else(|e| e.context), 1, "{s:?}");
        // The pair still works.
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 3).expect("post recv");
        p.a.ep.send(Buf::from(b"still here"), p.a_to_b, 4).expect("post send");
        assert_eq!(p.ok_b().bytes(), b"still here");
        p.ok_a();
    });
}

/// Views of a multi-receive buffer may outlive its release: the release then
/// gives no buffer, and the views stay readable.
#[test]
fn rdm_multi_recv_view_outlives_release() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::MULTI_RECV) else { return };
        p.b.ep.set_min_multi_recv(100).expect("set_min_multi_recv");
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(256), 3), OpFlags::MULTI_RECV).expect("post multi-receive buffer");
        // Two messages of 100 bytes leave 56 < 100: the second releases the buffer.
        for i in 0..2 {
            p.a.ep.send(Buf::from(pattern(100, i)), p.a_to_b, 10 + i).expect("post send");
        }
        let mut views = Vec::new();
        let start = std::time::Instant::now();
        // Batch reads, keeping every view alive.
        let released = 'outer: loop {
            let mut batch = Vec::new();
            match p.b.cq.cq.read(&mut batch, 16) {
                Ok(_) => {}
                Err(Error::Again) => {
                    p.a.cq.drive();
                    assert!(start.elapsed() < WAIT, "watchdog: multi-receive completions");
                    continue;
                }
                Err(e) => panic!("read: {e}"),
            }
            for c in batch {
                if c.flags.contains(Caps::MULTI_RECV) {
                    break 'outer c;
                }
                views.push(c.recv.expect("message view"));
            }
        };
        assert_eq!(views.len(), 2);
        assert_eq!(released.context, 3);
        assert!(released.buffers.is_none(), "the buffer cannot come back while views are alive");
        for (i, v) in views.iter().enumerate() {
            assert_bytes(v, &pattern(100, i as u64), "a view read after the release");
        }
        drop(views);
        for _ in 0..2 {
            p.ok_a();
        }
        assert_eq!(p.b.cq.cq.in_flight(), 0);
    });
}

/// A message larger than what is left of a multi-receive buffer is not lost:
/// it is truncated into the buffer (`FI_ETRUNC`) or goes to the next receive,
/// and the buffer comes back either way.
#[test]
fn rdm_multi_recv_overflow() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::MULTI_RECV) else { return };
        p.b.ep.set_min_multi_recv(16).expect("set_min_multi_recv");
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(1024), 3), OpFlags::MULTI_RECV).expect("post multi-receive buffer");
        p.b.ep.recv(Buf::new(4096), FiAddr::UNSPEC, 4).expect("post the next receive");
        p.a.ep.send(Buf::from(pattern(100, 1)), p.a_to_b, 10).expect("post send");
        p.a.ep.send(Buf::from(pattern(2000, 2)), p.a_to_b, 11).expect("post send");
        let (mut first, mut big, mut buf) = (false, false, false);
        while !(first && big && buf) {
            match p.next_b() {
                Ok(c) if c.context == 4 => {
                    assert!(!big, "the large message arrived twice");
                    assert_bytes(c.bytes(), &pattern(2000, 2), "large message in the next receive");
                    big = true;
                }
                Ok(c) => {
                    assert_eq!(c.context, 3);
                    if let Some(v) = &c.recv {
                        assert!(!first && v.len() == 100, "unexpected message of {} bytes in the buffer", v.len());
                        assert_bytes(v, &pattern(100, 1), "first message");
                        first = true;
                    }
                    if c.flags.contains(Caps::MULTI_RECV) {
                        drop(c.recv);
                        buf |= c.buffers.into_buf().is_some();
                    }
                }
                Err(e) => {
                    assert_eq!((e.err, e.context), (Error::Trunc, 3), "{e}");
                    assert_eq!(e.len + e.olen, 2000, "truncation accounts for the whole message");
                    big = true;
                    println!("large message truncated into the multi-receive buffer: {e}");
                    buf |= e.buffers.into_buf().is_some();
                }
            }
            if big && first && !buf {
                // The buffer may still be posted (room left above the minimum).
                if p.b.ep.cancel(3).is_ok() {
                    let e = p.err_b();
                    assert_eq!(e.err, Error::Canceled);
                    buf = e.buffers.into_buf().is_some();
                }
            }
        }
        if p.b.cq.cq.in_flight() > 0 {
            p.b.ep.cancel(4).expect("cancel the unused receive");
            assert_eq!(p.err_b().context, 4);
        }
        for _ in 0..2 {
            p.ok_a();
        }
    });
}

/// `FI_DELIVERY_COMPLETE` (fi_cq(3)): a send so flagged completes only once its
/// data is in the receive. With no receive posted, the sender's queue stays empty
/// however often both sides are driven; once a receive is posted the send
/// completes, and the receive has completed by then (its outcome is readable
/// without waiting). Empty, eager and rendezvous sizes, and a truncating
/// receive (the send still succeeds); then a receive posted first.
fn delivery_complete(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::MSG) else { return };
    let max = p.info.ep_attr.max_msg_size;
    let cases = [(0usize, 16usize), (1, 16), (64, 64), (4096, 8192), (200_000, 200_000), (1 << 20, 1000)];
    for (i, (size, cap)) in cases.into_iter().enumerate() {
        if size > max {
            skip(format!("{size}-byte message: above max_msg_size {max}"));
            continue;
        }
        let i = i as u64;
        let want = pattern(size, i + 7);
        let m = SendMsg::new(Buf::from(want.clone()), p.a_to_b, 100 + i);
        p.a.ep.sendmsg(m, OpFlags::DELIVERY_COMPLETE).expect("sendmsg with DELIVERY_COMPLETE");
        let drivers = p.drivers();
        for round in 0..2000 {
            for d in &drivers {
                d.drive();
            }
            assert!(!p.a.cq.has_entry(), "{size} bytes: the send completed (poll {round}) with no receive posted");
            std::thread::yield_now();
        }
        p.b.ep.recv(Buf::from(vec![FILL; cap]), FiAddr::UNSPEC, 200 + i).expect("post recv");
        let s = p.ok_a();
        assert_eq!(s.context, 100 + i, "{size} bytes: send context");
        assert!(p.b.cq.has_entry(), "{size} bytes: the send completed before its receive");
        if size > cap {
            let e = p.err_b();
            assert_eq!((e.err, e.context, e.len), (Error::Trunc, 200 + i, cap), "{size} bytes into {cap}: {e}");
            let b = e.buffers.into_buf().expect("truncated receive gives its buffer back");
            assert_bytes(&b, &want[..cap], "the part that fit");
        } else {
            let r = p.ok_b();
            assert_eq!((r.context, r.len), (200 + i, size), "{size} bytes: receive");
            assert_bytes(r.bytes(), &want, &format!("{size}-byte message sent with DELIVERY_COMPLETE"));
        }
    }
    // The receive posted first.
    p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 300).expect("post recv");
    let m = SendMsg::new(Buf::from(b"posted first"), p.a_to_b, 301);
    p.a.ep.sendmsg(m, OpFlags::DELIVERY_COMPLETE).expect("sendmsg with DELIVERY_COMPLETE");
    assert_eq!(p.ok_a().context, 301);
    assert!(p.b.cq.has_entry(), "the send completed before its receive");
    assert_eq!(p.ok_b().bytes(), b"posted first");
    assert_eq!(p.a.cq.cq.in_flight() + p.b.cq.cq.in_flight(), 0, "every operation completed once");
}

rdm_and_msg!(delivery_complete: rdm_delivery_complete, msg_delivery_complete);

/// `FI_DELIVERY_COMPLETE` into a multi-receive buffer posted after the sends
/// (unexpected eager-sized and rendezvous-sized messages): no send completes
/// before the buffer is posted, and each completes with its message in it.
#[test]
fn rdm_delivery_complete_multi_recv() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::MULTI_RECV) else { return };
        let sizes = [10usize, 5000, 200_000];
        for (i, &n) in sizes.iter().enumerate() {
            let m = SendMsg::new(Buf::from(pattern(n, i as u64)), p.a_to_b, i as u64);
            p.a.ep.sendmsg(m, OpFlags::DELIVERY_COMPLETE).expect("sendmsg with DELIVERY_COMPLETE");
        }
        let drivers = p.drivers();
        for round in 0..2000 {
            for d in &drivers {
                d.drive();
            }
            assert!(!p.a.cq.has_entry(), "a send completed (poll {round}) with no receive posted");
            std::thread::yield_now();
        }
        p.b.ep.set_min_multi_recv(1).expect("set_min_multi_recv");
        p.b.ep.recvmsg(RecvMsg::new(Buf::new(1 << 20), 7), OpFlags::MULTI_RECV).expect("post multi-receive buffer");
        let mut sent: Vec<u64> = Vec::new();
        for _ in 0..sizes.len() {
            sent.push(p.ok_a().context);
            assert!(p.b.cq.has_entry(), "a send completed before its receive");
        }
        sent.sort_unstable();
        assert_eq!(sent, [0, 1, 2]);
        let mut got: Vec<Vec<u8>> = (0..sizes.len())
            .map(|_| {
                let c = p.ok_b();
                assert_eq!(c.context, 7);
                c.recv.expect("a view into the multi-receive buffer").to_vec()
            })
            .collect();
        got.sort_by_key(|b| b.len());
        for (i, &n) in sizes.iter().enumerate() {
            assert_bytes(&got[i], &pattern(n, i as u64), "message in a multi-receive buffer");
        }
        p.b.ep.cancel(7).expect("cancel the multi-receive buffer");
        assert_eq!(p.err_b().err, Error::Canceled);
    });
}

/// MSG: receives posted once the endpoint is enabled but before its connection
/// exists (the client's before `connect`, the server's before `accept`) take
/// the first messages; one canceled before the connection comes back canceled
/// and takes none.
#[test]
fn msg_recv_before_connect() {
    run(PROV, |prov| {
        let Some(info) = find_info(prov, EpType::Msg, Caps::MSG) else { return };
        let l = listen(&info);
        let addr = l.pep.name().expect("listener name");
        let a = msg_side("a", None, &info, Opts::default());
        a.ep.recv(Buf::new(5), FiAddr::UNSPEC, 9).expect("client recv before connect, to cancel");
        a.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("client recv before connect");
        a.ep.cancel(9).expect("cancel a receive posted before connect");
        let e = err(wait_for(&a.cq, &[], WAIT), "receive canceled before connect");
        assert_eq!((e.err, e.context), (Error::Canceled, 9), "{e}");
        assert_eq!(e.buffers.into_buf().expect("buffer back").capacity(), 5);
        a.ep.connect(&addr, b"").expect("connect");
        let (req, _) = expect_connreq(&l, &a.drivers());
        let b = msg_side("b", Some(&l.fabric), &req, Opts::default());
        b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 2).expect("server recv before accept");
        b.ep.accept(b"").expect("accept");
        let mut d = a.drivers();
        d.extend(b.drivers());
        d.push(&l.eq);
        expect_connected(a.eq.as_ref().expect("eq"), &d, a.ep.id());
        expect_connected(b.eq.as_ref().expect("eq"), &d, b.ep.id());
        a.ep.send(Buf::from(b"to b"), FiAddr::UNSPEC, 3).expect("send a to b");
        b.ep.send(Buf::from(pattern(40, 7)), FiAddr::UNSPEC, 4).expect("send b to a");
        for (side, recv_ctx, send_ctx, want) in [(&a, 1u64, 3u64, pattern(40, 7)), (&b, 2, 4, b"to b".to_vec())] {
            let mut got: Vec<Completion> = (0..2).map(|_| ok(wait_for(&side.cq, &d, WAIT), "completion")).collect();
            got.sort_by_key(|c| c.context);
            assert_eq!(got[0].context, recv_ctx.min(send_ctx));
            let r = got.iter().find(|c| c.context == recv_ctx).expect("the receive posted before the connection");
            assert!(r.flags.contains(Caps::RECV | Caps::MSG), "receive flags {:?}", r.flags);
            assert_bytes(r.bytes(), &want, "message into a receive posted before the connection");
            assert!(got.iter().any(|c| c.context == send_ctx && c.flags.contains(Caps::SEND)), "send completion");
        }
        assert_quiet(&a.cq, &d, "the canceled receive took no message");
    });
}

/// MSG: a message far longer than its receive (4 MiB into 8 bytes). A
/// provider that truncates in software fails the receive with `FI_ETRUNC` (the
/// bytes that fit, the rest as `olen`), completes the send and keeps the
/// connection. One that posts receives to the hardware with a bounded spill
/// area (verbs' direct path) loses the connection instead: the receive and the
/// send fail, and both sides report `FI_SHUTDOWN` (an error entry may come
/// first, such as the device's report of the broken QP).
#[test]
fn msg_truncation_far_beyond() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Msg, Caps::MSG) else { return };
        let n = 4 << 20;
        if n > p.info.ep_attr.max_msg_size {
            skip("4 MiB above max_msg_size");
            return;
        }
        let want = pattern(n, 3);
        p.b.ep.recv(Buf::from(vec![FILL; 8]), FiAddr::UNSPEC, 5).expect("post recv");
        p.a.ep.send(Buf::from(want.clone()), FiAddr::UNSPEC, 6).expect("post send");
        let e = p.err_b();
        assert_eq!(e.context, 5, "4 MiB into 8 bytes: {e}");
        assert!(e.len <= 8, "len {} above the receive", e.len);
        match p.next_a() {
            Ok(s) => {
                assert_eq!(s.context, 6);
                assert_eq!(e.err, Error::Trunc, "the send completed: the receive is truncated ({e})");
                assert_eq!((e.len, e.olen), (8, n - 8), "the bytes placed and the rest");
                let b = e.buffers.into_buf().expect("truncated receive gives its buffer back");
                assert_bytes(&b, &want[..8], "the part that fit");
                p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 7).expect("post recv");
                p.a.ep.send(Buf::from(b"after"), FiAddr::UNSPEC, 8).expect("post send");
                assert_eq!(p.ok_b().bytes(), b"after");
                p.ok_a();
            }
            Err(s) => {
                assert_eq!(s.context, 6, "the send fails: {s}");
                assert_ne!(e.err, Error::Canceled, "the receive fails with the message's error: {e}");
                let d = p.drivers();
                for (name, side) in [("a", &p.a), ("b", &p.b)] {
                    let eq = side.eq.as_ref().expect("eq");
                    let mut shut = false;
                    for _ in 0..4 {
                        match wait_event(eq, &d, WAIT) {
                            Ok(EqEvent::Shutdown { .. }) => {
                                shut = true;
                                break;
                            }
                            Ok(other) => panic!("{name}: expected FI_SHUTDOWN after the lost connection, got {other:?}"),
                            Err(_) => continue,
                        }
                    }
                    assert!(shut, "{name}: FI_SHUTDOWN after the lost connection");
                }
            }
        }
    });
}

/// verbs: the MSG tests again in a child process with `FI_VERBS_MSG_DIRECT=0`,
/// so that MSG endpoints on the RDM engine's protocol (the direct data path, the
/// default, turned off) pass them too, canceling receives included. (The setting
/// is read once per process, hence the child.)
#[test]
fn msg_engine_path_in_child() {
    if PROV != "verbs" || std::env::var_os("FI_VERBS_MSG_DIRECT").is_some() {
        return;
    }
    // (MSG endpoints use no shared receive queue: the suite's run without one
    // adds nothing here.)
    if std::env::var_os("FI_VERBS_USE_SRQ").is_some() {
        return;
    }
    let Some(info) = find_info(PROV, EpType::Msg, Caps::MSG) else { return };
    if is_iwarp(&info) {
        // iWARP keeps the engine (no receiver-not-ready retry).
        return;
    }
    let tests = ["verbs::msg::msg_", "verbs::errors::msg_", "verbs::cm::", "verbs::rma::msg_"];
    let skips = ["--skip", "msg_engine_path_in_child"];
    let args: Vec<&str> = tests.iter().chain(&skips).copied().collect();
    crate::common::rerun_in_child(&args, ("FI_VERBS_MSG_DIRECT", "0"), 20, "verbs MSG on the engine's protocol");
}

//! Tagged messages: tag and ignore masks, matching in posting order, unexpected
//! tagged messages, peek / claim / discard, directed tagged receives.

use super::PROV;
use crate::common::*;
use fabric::*;

fn tag_and_ignore(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::TAGGED) else { return };
    p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 0x1234, 0, 1).expect("trecv exact tag");
    p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 0x5600, 0xff, 2).expect("trecv with ignore mask");
    // Matches the masked receive only (the exact one wants 0x1234).
    p.a.ep.tsend(Buf::from(b"56ab"), p.a_to_b, 0x56ab, 10).expect("tsend 0x56ab");
    let r = p.ok_b();
    assert_eq!((r.context, r.tag, r.bytes()), (2, 0x56ab, &b"56ab"[..]), "masked receive");
    assert!(r.flags.contains(Caps::RECV | Caps::TAGGED), "flags {:?}", r.flags);
    assert!(!r.flags.contains(Caps::MSG), "a tagged receive is not flagged FI_MSG: {:?}", r.flags);
    // Matches nothing posted: stays unexpected until a receive for it comes.
    p.a.ep.tsend(Buf::from(b"9999"), p.a_to_b, 0x9999, 11).expect("tsend 0x9999");
    p.a.ep.tsend(Buf::from(b"1234"), p.a_to_b, 0x1234, 12).expect("tsend 0x1234");
    let r = p.ok_b();
    assert_eq!((r.context, r.tag, r.bytes()), (1, 0x1234, &b"1234"[..]), "exact receive");
    assert_quiet(&p.b.cq, &p.drivers(), "tag 0x9999 matches no posted receive");
    p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 0x9999, 0, 3).expect("trecv 0x9999");
    let r = p.ok_b();
    assert_eq!((r.context, r.tag, r.bytes()), (3, 0x9999, &b"9999"[..]));
    // A wide tag, all bits used, ignoring all but the top.
    let wide = (0xFEDC_BA98_7654_3210u64 & !(1 << 63)) | (1 << 62);
    p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 1 << 62, !(3u64 << 62), 4).expect("trecv wide");
    p.a.ep.tsend(Buf::from(b"wide"), p.a_to_b, wide, 13).expect("tsend wide");
    let r = p.ok_b();
    assert_eq!((r.context, r.tag), (4, wide), "the completion reports the message's tag, not the receive's");
    let mut sent: Vec<u64> = (0..4).map(|_| p.ok_a().context).collect();
    sent.sort_unstable();
    assert_eq!(sent, [10, 11, 12, 13]);
}

rdm_and_msg!(tag_and_ignore: rdm_tag_and_ignore, msg_tag_and_ignore);

/// Receives that match the same messages take them in posting order.
#[test]
fn rdm_posting_order() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::TAGGED) else { return };
        p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 7, 0, 1).expect("trecv");
        p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 0, u64::MAX, 2).expect("trecv any tag");
        p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 7, 0, 3).expect("trecv");
        for i in 0..3u8 {
            p.a.ep.tsend(Buf::from(&[i][..]), p.a_to_b, 7, 10 + i as u64).expect("tsend");
        }
        let mut got: Vec<Completion> = (0..3).map(|_| p.ok_b()).collect();
        got.sort_by_key(|c| c.context);
        for (i, c) in got.iter().enumerate() {
            assert_eq!(c.bytes(), &[i as u8][..], "receive {} (posted {i}th) got message {:?}", c.context, c.bytes());
            assert_eq!(c.tag, 7);
        }
        for _ in 0..3 {
            p.ok_a();
        }
    });
}

/// Untagged sends do not match tagged receives, and the other way round.
#[test]
fn rdm_tagged_and_untagged_are_separate() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::TAGGED) else { return };
        p.b.ep.trecv(Buf::new(64), FiAddr::UNSPEC, 0, u64::MAX, 1).expect("trecv any tag");
        p.a.ep.send(Buf::from(b"untagged"), p.a_to_b, 10).expect("send");
        assert_quiet(&p.b.cq, &p.drivers(), "an untagged message matched a tagged receive");
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 2).expect("recv");
        let r = p.ok_b();
        assert_eq!((r.context, r.bytes()), (2, &b"untagged"[..]));
        assert!(r.flags.contains(Caps::MSG) && !r.flags.contains(Caps::TAGGED), "flags {:?}", r.flags);
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 3).expect("recv");
        p.a.ep.tsend(Buf::from(b"tagged"), p.a_to_b, 5, 11).expect("tsend");
        let r = p.ok_b();
        assert_eq!(
            (r.context, r.bytes(), r.tag),
            (1, &b"tagged"[..], 5),
            "the tagged message took the untagged receive"
        );
        p.b.ep.cancel(3).expect("cancel the untagged receive");
        assert_eq!(p.err_b().context, 3);
        p.ok_a();
        p.ok_a();
    });
}

fn unexpected_tagged(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::TAGGED) else { return };
    let sizes = [10usize, 100_000, 2 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        p.a.ep.tsend(Buf::from(pattern(n, i as u64)), p.a_to_b, 100 + i as u64, i as u64).expect("tsend");
    }
    p.settle(QUIET);
    // Received in another order than sent.
    for i in [2usize, 0, 1] {
        p.b.ep.trecv(Buf::new(sizes[i]), FiAddr::UNSPEC, 100 + i as u64, 0, 50 + i as u64).expect("trecv");
        let r = p.ok_b();
        assert_eq!((r.context, r.tag, r.len), (50 + i as u64, 100 + i as u64, sizes[i]));
        assert_bytes(r.bytes(), &pattern(sizes[i], i as u64), &format!("unexpected tagged message {i}"));
    }
    for _ in 0..3 {
        p.ok_a();
    }
}

rdm_and_msg!(unexpected_tagged: rdm_unexpected_tagged, msg_unexpected_tagged);

fn peek_msg(tag: u64, context: u64) -> RecvMsg {
    let mut m = RecvMsg::new(OpBuffers::None, context);
    m.tag = tag;
    m
}

/// Peek until the message is there (it may still be on its way): the completion.
fn peek_until_found(p: &Pair, tag: u64, context: u64, flags: OpFlags) -> Completion {
    let start = std::time::Instant::now();
    loop {
        p.b.ep.trecvmsg(peek_msg(tag, context), OpFlags::PEEK | flags).expect("post peek");
        match p.next_b() {
            Ok(c) => return c,
            Err(e) if e.err == Error::NoMsg => {
                assert!(start.elapsed() < WAIT, "watchdog: peek never found the message");
                p.settle(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("peek failed: {e}"),
        }
    }
}

#[test]
fn rdm_peek() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::TAGGED) else { return };
        // Nothing there: FI_ENOMSG, no buffer.
        p.b.ep.trecvmsg(peek_msg(42, 1), OpFlags::PEEK).expect("post peek");
        let e = p.err_b();
        assert_eq!((e.err, e.context), (Error::NoMsg, 1), "peek of nothing: {e}");
        assert!(e.buffers.is_none());
        // Found (eager and rendezvous sizes): length and tag, and it stays there.
        let data = p.info.caps.contains(Caps::REMOTE_CQ_DATA);
        for (i, n) in [500usize, 1 << 20].into_iter().enumerate() {
            let tag = 42 + i as u64;
            if data {
                p.a.ep.tsenddata(Buf::from(pattern(n, tag)), 0xD0 + i as u64, p.a_to_b, tag, 10).expect("tsenddata");
            } else {
                p.a.ep.tsend(Buf::from(pattern(n, tag)), p.a_to_b, tag, 10).expect("tsend");
            }
            let c = peek_until_found(&p, tag, 2, OpFlags::empty());
            assert_eq!((c.context, c.len, c.tag), (2, n, tag), "peek reports the message");
            assert!(c.buffers.is_none());
            if data {
                assert!(c.flags.contains(Caps::REMOTE_CQ_DATA) && c.data == 0xD0 + i as u64, "peek data: {c:?}");
            }
            // A peek of another tag finds nothing.
            p.b.ep.trecvmsg(peek_msg(7777, 3), OpFlags::PEEK).expect("post peek");
            assert_eq!(p.err_b().err, Error::NoMsg);
            p.b.ep.trecv(Buf::new(n), FiAddr::UNSPEC, tag, 0, 4).expect("trecv");
            let r = p.ok_b();
            assert_eq!((r.context, r.len), (4, n), "a peeked message is still received");
            assert_bytes(r.bytes(), &pattern(n, tag), "peeked message");
            p.ok_a();
        }
    });
}

#[test]
fn rdm_peek_claim() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::TAGGED) else { return };
        for (i, n) in [300usize, 1 << 20].into_iter().enumerate() {
            let tag = 60 + i as u64;
            p.a.ep.tsend(Buf::from(pattern(n, tag)), p.a_to_b, tag, 10).expect("tsend");
            let c = peek_until_found(&p, tag, 9, OpFlags::CLAIM);
            assert_eq!((c.context, c.len, c.tag), (9, n, tag));
            // Claimed: a plain receive for the tag no longer gets it.
            p.b.ep.trecv(Buf::new(n), FiAddr::UNSPEC, tag, 0, 20).expect("trecv");
            assert_quiet(&p.b.cq, &p.drivers(), "a claimed message went to another receive");
            // The claiming receive (same context) does.
            let mut m = RecvMsg::new(Buf::new(n), 9);
            m.tag = tag;
            p.b.ep.trecvmsg(m, OpFlags::CLAIM).expect("trecvmsg CLAIM");
            let r = p.ok_b();
            assert_eq!((r.context, r.len, r.tag), (9, n, tag), "the claim receives the message");
            assert_bytes(r.bytes(), &pattern(n, tag), "claimed message");
            p.ok_a();
            p.b.ep.cancel(20).expect("cancel the receive that did not get it");
            assert_eq!(p.err_b().err, Error::Canceled);
        }
    });
}

#[test]
fn rdm_peek_discard() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::TAGGED) else { return };
        for (i, n) in [300usize, 1 << 20].into_iter().enumerate() {
            let tag = 80 + i as u64;
            p.a.ep.tsend(Buf::from(pattern(n, 1)), p.a_to_b, tag, 10).expect("tsend");
            let c = peek_until_found(&p, tag, 5, OpFlags::DISCARD);
            assert_eq!((c.context, c.len, c.tag), (5, n, tag));
            // The sender is not left waiting on a discarded message.
            let s = p.next_a();
            assert_eq!(s.as_ref().map(|c| c.context).unwrap_or_else(|e| e.context), 10, "{s:?}");
            // Dropped: the next message of that tag is the one received.
            p.b.ep.trecv(Buf::new(n), FiAddr::UNSPEC, tag, 0, 6).expect("trecv");
            p.a.ep.tsend(Buf::from(pattern(n, 2)), p.a_to_b, tag, 11).expect("tsend");
            let r = p.ok_b();
            assert_eq!(r.context, 6);
            assert_bytes(r.bytes(), &pattern(n, 2), "the message after the discarded one");
            p.ok_a();
        }
    });
}

/// A directed tagged receive matches on source and tag together.
#[test]
fn rdm_directed_tagged() {
    run(PROV, |prov| {
        let caps = Caps::TAGGED | Caps::DIRECTED_RECV;
        let Some(g) = Group::new(prov, caps, &[Opts::default(); 3]) else { return };
        let (a, b, c) = (&g.sides[0], &g.sides[1], &g.sides[2]);
        let d = g.drivers();
        c.ep.trecv(Buf::new(64), g.addr[2][1], 5, 0, 1).expect("trecv directed at b");
        a.ep.tsend(Buf::from(b"a5"), g.addr[0][2], 5, 10).expect("a sends tag 5");
        b.ep.tsend(Buf::from(b"b6"), g.addr[1][2], 6, 20).expect("b sends tag 6");
        settle(&d, QUIET);
        assert!(!c.cq.has_entry(), "directed tagged receive matched the wrong source or tag");
        b.ep.tsend(Buf::from(b"b5"), g.addr[1][2], 5, 21).expect("b sends tag 5");
        let r = ok(wait_for(&c.cq, &d, WAIT), "directed tagged receive");
        assert_eq!((r.context, r.bytes(), r.src), (1, &b"b5"[..], g.addr[2][1]));
        for (ctx, tag, want) in [(2u64, 5, &b"a5"[..]), (3, 6, &b"b6"[..])] {
            c.ep.trecv(Buf::new(64), FiAddr::UNSPEC, tag, 0, ctx).expect("trecv undirected");
            let r = ok(wait_for(&c.cq, &d, WAIT), "undirected tagged receive");
            assert_eq!((r.context, r.bytes()), (ctx, want), "the unmatched messages remain");
        }
        ok(wait_for(&a.cq, &d, WAIT), "a's send");
        ok(wait_for(&b.cq, &d, WAIT), "b's send");
        ok(wait_for(&b.cq, &d, WAIT), "b's send");
    });
}

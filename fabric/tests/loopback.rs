//! The safe API against the in-memory "loop" provider: buffers come back through
//! completions, failed posts give them back, error completions, multi-receive
//! views, peek/claim/discard, the registry.

#![allow(missing_docs)]

mod loop_provider;

use fabric::*;
use loop_provider::{setup, NAME};
use std::time::Duration;

struct Side {
    cq: CompletionQueue,
    av: AddressVector,
    ep: Endpoint,
}

struct Pair {
    domain: Domain,
    a: Side,
    b: Side,
    /// `b` in `a`'s AV, `a` in `b`'s AV.
    a_to_b: FiAddr,
    b_to_a: FiAddr,
}

fn info() -> Info {
    setup();
    let mut v = getinfo(&Hints::new().provider(NAME).ep_type(EpType::Rdm).caps(Caps::MSG | Caps::TAGGED)).unwrap();
    v.remove(0)
}

fn side(domain: &Domain, info: &Info) -> Side {
    let cq = domain.cq(CqAttr { format: CqFormat::Tagged, ..Default::default() }).unwrap();
    let av = domain.av(AvAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Side { cq, av, ep }
}

fn pair() -> Pair {
    let info = info();
    let fabric = Fabric::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let a = side(&domain, &info);
    let b = side(&domain, &info);
    let a_to_b = a.av.insert_one(&b.ep.name().unwrap()).unwrap();
    let b_to_a = b.av.insert_one(&a.ep.name().unwrap()).unwrap();
    Pair { domain, a, b, a_to_b, b_to_a }
}

#[test]
fn getinfo_finds_loop_and_filters() {
    setup();
    let v = getinfo(&Hints::new().provider(NAME)).unwrap();
    assert!(!v.is_empty());
    assert!(v.iter().all(|i| i.fabric_attr.prov_name == NAME));
    // Narrowed to the caps asked for.
    let v = getinfo(&Hints::new().provider(NAME).caps(Caps::TAGGED)).unwrap();
    assert!(v[0].caps.contains(Caps::TAGGED) && !v[0].caps.contains(Caps::MSG));
    // Excluded by name.
    if let Ok(v) = getinfo(&Hints::new().provider(&format!("^{NAME}"))) {
        assert!(v.iter().all(|i| i.fabric_attr.prov_name != NAME));
    }
    // Refused by the generic check.
    assert_eq!(getinfo(&Hints::new().provider(NAME).ep_type(EpType::Msg)).unwrap_err(), Error::NoData);
    assert_eq!(getinfo(&Hints::new().provider("no-such-provider")).unwrap_err(), Error::NoData);
    assert!(all_providers().iter().any(|p| p.name() == NAME));
    assert!(params().iter().any(|p| p.env_name() == "FI_LOOP_DEPTH"));
    // Opening an entry of an unknown provider.
    let mut i = info();
    i.fabric_attr.prov_name = "no-such-provider".into();
    assert_eq!(Fabric::open(&i).unwrap_err(), Error::NoData);
}

#[test]
fn buffers_come_back_through_completions() {
    let p = pair();
    p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).unwrap();
    assert_eq!(p.b.cq.in_flight(), 1);
    p.a.ep.send(Buf::from(&b"hello"[..]), p.a_to_b, 2).unwrap();

    let c = p.a.cq.read_one().unwrap();
    assert_eq!(c.context, 2);
    assert!(c.flags.contains(Caps::SEND | Caps::MSG));
    assert_eq!(c.len, 5);
    let sent = c.buffers.into_buf().unwrap();
    assert_eq!(&sent[..], b"hello");

    let c = p.b.cq.read_one().unwrap();
    assert_eq!(c.context, 1);
    assert!(c.flags.contains(Caps::RECV | Caps::MSG));
    assert_eq!(c.len, 5);
    assert_eq!(c.src, p.b_to_a);
    assert!(c.recv.is_none());
    assert_eq!(c.bytes(), b"hello");
    let got = c.buffers.into_buf().unwrap();
    assert_eq!(got.capacity(), 64);
    assert_eq!(&got[..], b"hello");

    assert_eq!(p.a.cq.read_one().unwrap_err(), Error::Again);
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    assert_eq!(p.a.cq.in_flight() + p.b.cq.in_flight(), 0);
}

#[test]
fn unexpected_messages_and_data() {
    let p = pair();
    // Sent before the receive is posted.
    p.a.ep.senddata(Buf::from(&b"early"[..]), 0xdada, p.a_to_b, 1).unwrap();
    p.a.ep.injectdata(b"inj", 7, p.a_to_b).unwrap();
    assert_eq!(p.a.cq.in_flight(), 1, "inject needs no record");
    p.b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 10).unwrap();
    p.b.ep.recv(Buf::new(16), p.b_to_a, 11).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.data, c.bytes()), (10, 0xdada, &b"early"[..]));
    assert!(c.flags.contains(Caps::REMOTE_CQ_DATA));
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.data, c.bytes()), (11, 7, &b"inj"[..]));
    assert_eq!(p.a.cq.read_one().unwrap().context, 1);
}

#[test]
fn vectored_send_and_receive() {
    let p = pair();
    p.b.ep.recvv(vec![Buf::new(4), Buf::new(4)], FiAddr::UNSPEC, 1).unwrap();
    p.a.ep.sendv(vec![Buf::from(&b"abc"[..]), Buf::from(&b"defg"[..])], p.a_to_b, 2).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!(c.len, 7);
    let bufs = c.buffers.into_vec();
    assert_eq!(bufs.len(), 2);
    // Lengths as posted; the completion's len says how much arrived.
    assert_eq!(&bufs[0][..], b"abcd");
    assert_eq!(&bufs[1][..], b"efg\0");
    let c = p.a.cq.read_one().unwrap();
    assert_eq!(c.buffers.into_vec().len(), 2);
    // Larger vectors than the stack list holds.
    let many: Vec<Buf> = (0..10u8).map(|i| Buf::from(&[i][..])).collect();
    p.b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 3).unwrap();
    p.a.ep.sendv(many, p.a_to_b, 4).unwrap();
    assert_eq!(p.b.cq.read_one().unwrap().bytes(), &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(p.a.cq.read_one().unwrap().buffers.count(), 10);
}

#[test]
fn tagged_matching() {
    let p = pair();
    p.b.ep.trecv(Buf::new(8), FiAddr::UNSPEC, 0x10, 0x0f, 1).unwrap();
    p.b.ep.trecv(Buf::new(8), FiAddr::UNSPEC, 0x20, 0, 2).unwrap();
    p.a.ep.tsend(Buf::from(&b"x"[..]), p.a_to_b, 0x21, 3).unwrap(); // matches neither
    p.a.ep.tsend(Buf::from(&b"y"[..]), p.a_to_b, 0x20, 4).unwrap();
    p.a.ep.tsenddata(Buf::from(&b"z"[..]), 99, p.a_to_b, 0x1f, 5).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.tag, c.bytes()), (2, 0x20, &b"y"[..]));
    assert!(c.flags.contains(Caps::TAGGED | Caps::RECV));
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.tag, c.data, c.bytes()), (1, 0x1f, 99, &b"z"[..]));
    // An untagged receive does not take the tagged message.
    p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 6).unwrap();
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    p.b.ep.tinject(b"t", p.b_to_a, 0x21).unwrap(); // to a: noise
    p.b.ep.trecv(Buf::new(8), FiAddr::UNSPEC, 0x21, 0, 7).unwrap();
    assert_eq!(p.b.cq.read_one().unwrap().bytes(), b"x");
    let msg = SendMsg { tag: 0x30, ..SendMsg::new(Buf::from(&b"msg"[..]), p.a_to_b, 8) };
    p.a.ep.tsendmsg(msg, OpFlags::empty()).unwrap();
    let r = RecvMsg { tag: 0x30, ..RecvMsg::new(Buf::new(8), 9) };
    p.b.ep.trecvmsg(r, OpFlags::empty()).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.bytes()), (9, &b"msg"[..]));
}

#[test]
fn failed_posts_give_buffers_back() {
    let p = pair();
    // Not in the AV: the provider refuses the post.
    let e = p.a.ep.send(Buf::from(&b"lost?"[..]), FiAddr(999), 1).unwrap_err();
    assert_eq!(e.error, Error::NoEnt);
    assert_eq!(&e.buffers.into_buf().unwrap()[..], b"lost?");
    assert_eq!(p.a.cq.in_flight(), 0);
    let e = p.a.ep.sendv(vec![Buf::new(1), Buf::new(2)], FiAddr(999), 1).unwrap_err();
    assert_eq!(e.buffers.count(), 2);
    assert_eq!(e.to_string(), "No such file or directory");
    let as_error: Error = e.into();
    assert_eq!(as_error, Error::NoEnt);

    // No CQ bound.
    let info = info();
    let ep = p.domain.endpoint(&info).unwrap();
    let e = ep.recv(Buf::new(3), FiAddr::UNSPEC, 1).unwrap_err();
    assert_eq!(e.error, Error::NoCq);
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 3);
    let e = ep.send(Buf::new(3), FiAddr(0), 1).unwrap_err();
    assert_eq!(e.error, Error::NoCq);

    // Multi-receive needs exactly one buffer.
    let msg = RecvMsg::new(vec![Buf::new(1), Buf::new(1)], 1);
    let e = p.b.ep.recvmsg(msg, OpFlags::MULTI_RECV).unwrap_err();
    assert_eq!((e.error, e.buffers.count()), (Error::Inval, 2));
    // A refused multi-receive post gives its buffer back too.
    let cq = p.domain.cq(CqAttr::default()).unwrap();
    ep.bind_cq(&cq, BindFlags::RECV).unwrap(); // not enabled: the provider refuses
    let e = ep.recvmsg(RecvMsg::new(Buf::new(32), 1), OpFlags::MULTI_RECV).unwrap_err();
    assert_eq!(e.error, Error::OpBadState);
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 32);
    assert_eq!(cq.in_flight(), 0);
}

#[test]
fn binding_rules() {
    let p = pair();
    let cq = p.domain.cq(CqAttr::default()).unwrap();
    assert_eq!(p.a.ep.bind_cq(&cq, BindFlags::TRANSMIT).unwrap_err(), Error::Inval);
    let ep = p.domain.endpoint(&info()).unwrap();
    assert_eq!(ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::SELECTIVE_COMPLETION).unwrap_err(), Error::BadFlags);
    assert_eq!(ep.bind_cq(&cq, BindFlags::empty()).unwrap_err(), Error::BadFlags);
    ep.bind_cq(&cq, BindFlags::TRANSMIT).unwrap();
    ep.bind_cq(&p.a.cq, BindFlags::RECV).unwrap();
    let cntr = p.domain.counter().unwrap();
    ep.bind_counter(&cntr, BindFlags::TRANSMIT).unwrap();
    let eq = p.domain.fabric().eq(EqAttr::default()).unwrap();
    ep.bind_eq(&eq).unwrap();
    assert_eq!(eq.read().unwrap_err(), Error::Again);
    assert_eq!(p.domain.fabric().passive_ep(&info()).unwrap_err(), Error::NoSys);
}

#[test]
fn errors_read_avail_and_readerr() {
    let p = pair();
    p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 1).unwrap();
    p.a.ep.send(Buf::from(&b"0123456789"[..]), p.a_to_b, 2).unwrap();
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Avail);
    let mut out = Vec::with_capacity(4);
    assert_eq!(p.b.cq.read(&mut out, 4).unwrap_err(), Error::Avail);
    let e = p.b.cq.readerr().unwrap();
    assert_eq!((e.context, e.err, e.len, e.olen), (1, Error::Trunc, 4, 6));
    assert_eq!(e.to_string(), "Truncation error (olen 6)");
    let b = e.buffers.into_buf().unwrap();
    assert_eq!(&b[..], b"0123", "length set to the bytes placed");
    assert_eq!(p.b.cq.readerr().unwrap_err(), Error::Again);
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    assert_eq!(p.b.cq.in_flight(), 0);
}

#[test]
fn next_gives_completions_and_error_entries_in_queue_order() {
    let p = pair();
    assert!(p.b.cq.next().unwrap().is_none(), "empty queue");
    assert!(p.b.cq.wait_next(Some(Duration::ZERO)).unwrap().is_none(), "empty queue, no wait");
    p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 1).unwrap();
    p.b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 3).unwrap();
    p.b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 5).unwrap();
    p.a.ep.send(Buf::from(&b"0123456789"[..]), p.a_to_b, 2).unwrap();
    p.a.ep.send(Buf::from(&b"hi"[..]), p.a_to_b, 4).unwrap();
    p.a.ep.send(Buf::from(&b"there"[..]), p.a_to_b, 6).unwrap();
    // The truncated receive first, as an error entry with its buffer...
    let e = p.b.cq.next().unwrap().expect("an entry").expect_err("the truncated receive");
    assert_eq!((e.context, e.err, e.len, e.olen), (1, Error::Trunc, 4, 6));
    assert_eq!(&e.buffers.into_buf().unwrap()[..], b"0123");
    // ...then the completions behind it, from either call.
    let c = p.b.cq.next().unwrap().expect("an entry").expect("a completion");
    assert_eq!((c.context, c.bytes()), (3, &b"hi"[..]));
    let c = p.b.cq.wait_next(None).unwrap().expect("an entry").expect("a completion");
    assert_eq!((c.context, c.bytes()), (5, &b"there"[..]));
    assert!(p.b.cq.next().unwrap().is_none(), "drained");
    assert_eq!(p.b.cq.in_flight(), 0);
    let mut sent = vec![];
    while let Some(entry) = p.a.cq.next().unwrap() {
        sent.push(entry.expect("sends complete").context);
    }
    assert_eq!(sent, [2, 4, 6]);
}

#[test]
fn wait_next_returns_an_error_entry_and_converts_with_question_mark() {
    let p = pair();
    p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 7).unwrap();
    p.b.ep.cancel(7).unwrap();
    let e = p.b.cq.wait_next(Some(Duration::from_secs(10))).unwrap().expect("an entry").expect_err("canceled");
    assert_eq!((e.context, e.err), (7, Error::Canceled));
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 8);
    assert!(p.b.cq.wait_next(Some(Duration::ZERO)).unwrap().is_none());
    // `?` turns an error entry into its `Error`.
    p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 8).unwrap();
    p.b.ep.cancel(8).unwrap();
    let first = |cq: &CompletionQueue| -> Result<Option<u64>> { Ok(cq.next()?.transpose()?.map(|c| c.context)) };
    assert_eq!(first(&p.b.cq), Err(Error::Canceled));
    assert_eq!(first(&p.b.cq), Ok(None));
}

#[test]
fn batch_reads_do_not_allocate() {
    let p = pair();
    for i in 0..40 {
        p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, i).unwrap();
    }
    for i in 0..40u8 {
        p.a.ep.send(Buf::from(&[i][..]), p.a_to_b, 100 + i as u64).unwrap();
    }
    let mut out = Vec::with_capacity(64);
    let cap = out.capacity();
    assert_eq!(p.b.cq.read(&mut out, 25).unwrap(), 25);
    assert_eq!(p.b.cq.read(&mut out, 25).unwrap(), 15);
    assert_eq!(out.capacity(), cap);
    for (i, c) in out.iter().enumerate() {
        assert_eq!(c.context, i as u64);
        assert_eq!(c.bytes(), &[i as u8]);
    }
    assert_eq!(p.b.cq.read(&mut out, 25).unwrap_err(), Error::Again);
    assert_eq!(p.b.cq.read(&mut out, 0).unwrap(), 0);
    out.clear();
    assert_eq!(p.a.cq.read(&mut out, 100).unwrap(), 40);
}

#[test]
fn cancel_and_close_flush_buffers_back() {
    let p = pair();
    p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 7).unwrap();
    p.b.ep.recv(Buf::new(9), FiAddr::UNSPEC, 8).unwrap();
    p.b.ep.cancel(7).unwrap();
    let e = p.b.cq.readerr().unwrap();
    assert_eq!((e.context, e.err), (7, Error::Canceled));
    assert_eq!(e.to_string(), "Operation canceled");
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 8);

    // Closing flushes what is still posted; the queue outlives the endpoint.
    let Pair { a, b, .. } = p;
    let Side { cq, ep, .. } = b;
    ep.trecv(Buf::new(10), FiAddr::UNSPEC, 1, 0, 9).unwrap();
    assert_eq!(cq.in_flight(), 2);
    ep.close().unwrap();
    let mut caps = vec![];
    while let Ok(e) = cq.readerr() {
        assert_eq!(e.err, Error::Canceled);
        caps.push(e.buffers.into_buf().unwrap().capacity());
    }
    caps.sort();
    assert_eq!(caps, [9, 10]);
    assert_eq!(cq.in_flight(), 0);

    // Dropping an endpoint does the same.
    let Side { cq, ep, .. } = a;
    ep.recv(Buf::new(5), FiAddr::UNSPEC, 1).unwrap();
    drop(ep);
    let e = cq.readerr().unwrap();
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 5);
}

#[test]
fn buffers_outlive_dropped_handles() {
    // Drop every handle but the queue while a receive is posted: the queue's table
    // keeps the buffer, and the close on drop gives it back.
    let info = info();
    let fabric = Fabric::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let s = side(&domain, &info);
    s.ep.recv(Buf::from(vec![7u8; 12]), FiAddr::UNSPEC, 3).unwrap();
    let Side { cq, av, ep } = s;
    drop((fabric, domain, av, ep));
    let e = cq.readerr().unwrap();
    assert_eq!(e.err, Error::Canceled);
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 12);
}

#[test]
fn multi_receive_views_and_release() {
    let p = pair();
    p.b.ep.set_min_multi_recv(16).unwrap();
    p.b.ep.recvmsg(RecvMsg::new(Buf::new(64), 9), OpFlags::MULTI_RECV).unwrap();
    p.a.ep.send(Buf::from(vec![b'a'; 20]), p.a_to_b, 0).unwrap();
    let c1 = p.b.cq.read_one().unwrap();
    // The provider writes the later messages while the first one's view is alive.
    for i in 1..3u8 {
        p.a.ep.send(Buf::from(vec![b'a' + i; 20]), p.a_to_b, i as u64).unwrap();
    }
    let c2 = p.b.cq.read_one().unwrap();
    for (i, c) in [&c1, &c2].into_iter().enumerate() {
        assert_eq!(c.context, 9);
        assert!(!c.flags.contains(Caps::MULTI_RECV));
        assert!(c.buffers.is_none());
        let v = c.recv.as_ref().unwrap();
        assert_eq!(&v[..], &[b'a' + i as u8; 20][..]);
        assert_eq!(v.offset(), 20 * i);
    }
    // The third message leaves less than 16 bytes: the provider releases the buffer
    // with it, and the safe API delivers the message, then the release.
    let c3 = p.b.cq.read_one().unwrap();
    assert!(!c3.flags.contains(Caps::MULTI_RECV));
    assert_eq!(c3.bytes(), &[b'c'; 20][..]);
    assert_eq!(p.b.cq.in_flight(), 0);
    drop((c1, c2, c3));
    let r = p.b.cq.read_one().unwrap();
    assert!(r.flags.contains(Caps::MULTI_RECV));
    assert_eq!(r.context, 9);
    let buf = r.buffers.into_buf().unwrap();
    assert_eq!(buf.capacity(), 64);
    assert_eq!(&buf[40..60], &[b'c'; 20][..]);
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
}

#[test]
fn multi_receive_with_live_views_and_cancel() {
    let p = pair();
    p.b.ep.set_min_multi_recv(8).unwrap();
    p.b.ep.recvmsg(RecvMsg::new(Buf::new(16), 1), OpFlags::MULTI_RECV).unwrap();
    p.a.ep.send(Buf::from(vec![1u8; 10]), p.a_to_b, 0).unwrap();
    let c = p.b.cq.read_one().unwrap();
    let view = c.recv.unwrap();
    // The release while a view is alive cannot hand the buffer out.
    let r = p.b.cq.read_one().unwrap();
    assert!(r.flags.contains(Caps::MULTI_RECV));
    assert!(r.buffers.is_none());
    assert_eq!(&view[..], &[1u8; 10][..]);
    drop(view);

    // Cancel releases a multi-receive buffer through an error completion.
    p.b.ep.recvmsg(RecvMsg::new(Buf::new(32), 2), OpFlags::MULTI_RECV).unwrap();
    p.a.ep.send(Buf::from(&b"hi"[..]), p.a_to_b, 0).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!(c.recv.as_deref(), Some(&b"hi"[..]));
    drop(c);
    p.b.ep.cancel(2).unwrap();
    let e = p.b.cq.readerr().unwrap();
    assert_eq!(e.err, Error::Canceled);
    assert_eq!(e.buffers.into_buf().unwrap().capacity(), 32);
    assert_eq!(p.b.cq.in_flight(), 0);
}

#[test]
fn peek_claim_discard() {
    let p = pair();
    p.a.ep.tsend(Buf::from(&b"five"[..]), p.a_to_b, 5, 1).unwrap();
    p.a.ep.tsend(Buf::from(&b"seven"[..]), p.a_to_b, 7, 2).unwrap();
    let peek = |tag, ctx, flags| {
        let m = RecvMsg { tag, ..RecvMsg::new(OpBuffers::None, ctx) };
        p.b.ep.trecvmsg(m, OpFlags::PEEK | flags).unwrap();
    };
    // Nothing with tag 6.
    peek(6, 10, OpFlags::empty());
    let e = p.b.cq.readerr().unwrap();
    assert_eq!((e.context, e.err), (10, Error::NoMsg));
    // A plain peek says what is there.
    peek(5, 11, OpFlags::empty());
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.len, c.tag), (11, 4, 5));
    assert!(c.buffers.is_none());
    // Peek and claim, then receive the claimed message.
    peek(5, 12, OpFlags::CLAIM);
    assert_eq!(p.b.cq.read_one().unwrap().context, 12);
    p.b.ep.trecvmsg(RecvMsg::new(Buf::new(8), 12), OpFlags::CLAIM).unwrap();
    let c = p.b.cq.read_one().unwrap();
    assert_eq!((c.context, c.bytes()), (12, &b"five"[..]));
    // Peek and claim, then discard.
    peek(7, 13, OpFlags::CLAIM);
    assert_eq!(p.b.cq.read_one().unwrap().len, 5);
    p.b.ep.trecvmsg(RecvMsg::new(OpBuffers::None, 13), OpFlags::CLAIM | OpFlags::DISCARD).unwrap();
    assert_eq!(p.b.cq.read_one().unwrap().context, 13);
    peek(7, 14, OpFlags::empty());
    assert_eq!(p.b.cq.readerr().unwrap().err, Error::NoMsg);
    assert_eq!(p.b.cq.in_flight(), 0);
}

#[test]
fn unknown_contexts_are_skipped() {
    let p = pair();
    let raw = loop_provider::cq_by_fid(p.b.cq.id()).unwrap();
    raw.push(CqEntry::new(0xdead_beef, Caps::RECV));
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    raw.push(CqEntry::new(0, Caps::RECV));
    p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 5).unwrap();
    p.a.ep.send(Buf::from(&b"ok"[..]), p.a_to_b, 6).unwrap();
    raw.push(CqEntry::new(u64::MAX, Caps::RECV));
    assert_eq!(p.b.cq.read_one().unwrap().context, 5);
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    raw.push_err(CqErrEntry { entry: CqEntry::new(42, Caps::RECV), olen: 0, err: Error::Io, prov_errno: 0 });
    assert_eq!(p.b.cq.readerr().unwrap_err(), Error::Again);
    // A completion replayed for an operation already completed is not taken for
    // the slot's next operation (generation check).
    p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 7).unwrap();
    p.a.ep.send(Buf::from(&b"1"[..]), p.a_to_b, 8).unwrap();
    let mut raw_entry = [CqEntry::new(0, Caps::empty())];
    assert_eq!(fabric::prov::CqOps::read(&*raw, &mut raw_entry).unwrap(), 1);
    raw.push(raw_entry[0]);
    raw.push(raw_entry[0]);
    let mut out = Vec::new();
    assert_eq!(p.b.cq.read(&mut out, 4).unwrap(), 1);
    assert_eq!(out[0].context, 7);
    p.b.ep.recv(Buf::new(4), FiAddr::UNSPEC, 9).unwrap(); // reuses the slot
    raw.push(raw_entry[0]);
    assert_eq!(p.b.cq.read_one().unwrap_err(), Error::Again);
    assert_eq!(p.b.cq.in_flight(), 1);
}

#[test]
fn blocking_reads_across_threads() {
    let p = pair();
    assert_eq!(p.b.cq.sread(Some(Duration::from_millis(10))).unwrap_err(), Error::WaitTimedOut);
    let cq = p.b.cq.clone();
    let t = std::thread::spawn(move || {
        let c = cq.sread(Some(Duration::from_secs(20))).unwrap();
        (c.context, c.buffers.into_buf().unwrap().into_vec())
    });
    p.b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 3).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    p.a.ep.send(Buf::from(&b"wake"[..]), p.a_to_b, 4).unwrap();
    assert_eq!(t.join().unwrap(), (3, b"wake".to_vec()));
    // signal wakes a waiter.
    let cq = p.b.cq.clone();
    let t = std::thread::spawn(move || cq.sread(None).map(|c| c.context));
    std::thread::sleep(Duration::from_millis(20));
    p.b.cq.signal();
    assert_eq!(t.join().unwrap().unwrap_err(), Error::Again);
}

/// Posts and reads from several threads at once on the same two queues: each
/// queue's table (one lock, taken by every post and every read) gives every
/// buffer back exactly once, to the completion of its own operation.
#[test]
fn concurrent_posts_and_reads_share_the_tables() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const THREADS: u64 = 4;
    const OPS: u64 = 2000;
    let total = (2 * THREADS * OPS) as usize;
    let p = Arc::new(pair());
    let done = Arc::new(AtomicUsize::new(0));
    let sends = Arc::new(Mutex::new(Vec::new()));
    let recvs = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(std::sync::Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (p, done, sends, recvs) = (Arc::clone(&p), Arc::clone(&done), Arc::clone(&sends), Arc::clone(&recvs));
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                let drain = |p: &Pair| {
                    if let Ok(c) = p.a.cq.read_one() {
                        let b = c.buffers.into_buf().unwrap();
                        sends.lock().unwrap().push((c.context, b.into_vec()));
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(c) = p.b.cq.read_one() {
                        let b = c.buffers.into_buf().unwrap();
                        assert_eq!(b.capacity(), 16);
                        recvs.lock().unwrap().push((c.context, b.into_vec()));
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                };
                for i in 0..OPS {
                    let ctx = 1 + t * OPS + i;
                    p.b.ep.recv(Buf::new(16), FiAddr::UNSPEC, ctx).unwrap();
                    p.a.ep.send(Buf::from(&ctx.to_le_bytes()), p.a_to_b, ctx).unwrap();
                    drain(&p);
                }
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while done.load(Ordering::Relaxed) < total {
                    assert!(std::time::Instant::now() < deadline, "completions lost");
                    drain(&p);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let all: Vec<u64> = (1..=THREADS * OPS).collect();
    let mut sends = std::mem::take(&mut *sends.lock().unwrap());
    sends.sort();
    // Each send's own buffer comes back with its own completion.
    assert_eq!(sends, all.iter().map(|&c| (c, c.to_le_bytes().to_vec())).collect::<Vec<_>>());
    let mut recvs = std::mem::take(&mut *recvs.lock().unwrap());
    recvs.sort();
    assert_eq!(recvs.iter().map(|r| r.0).collect::<Vec<_>>(), all, "every receive completes once");
    let mut payloads: Vec<Vec<u8>> = recvs.into_iter().map(|r| r.1).collect();
    payloads.sort_by_key(|v| u64::from_le_bytes(v[..].try_into().unwrap()));
    assert_eq!(payloads, all.iter().map(|c| c.to_le_bytes().to_vec()).collect::<Vec<_>>());
    assert_eq!(p.a.cq.in_flight() + p.b.cq.in_flight(), 0);
}

#[test]
fn counters_regions_and_addresses() {
    let p = pair();
    let c = p.domain.counter().unwrap();
    c.add(3);
    c.adderr(1);
    assert_eq!((c.read(), c.readerr()), (3, 1));
    c.set(10);
    c.seterr(0);
    assert_eq!((c.read(), c.readerr()), (10, 0));
    c.wait(10, Some(Duration::from_millis(10))).unwrap();
    assert_eq!(c.wait(11, Some(Duration::from_millis(5))).unwrap_err(), Error::WaitTimedOut);

    let mr = p.domain.register(Buf::from(&b"registered"[..]), MrAccess::REMOTE_READ).unwrap();
    assert_eq!((mr.len(), mr.access()), (10, MrAccess::REMOTE_READ));
    assert_ne!(mr.key(), 0);
    mr.refresh().unwrap();
    // SAFETY: no operation uses the region; reading through the pointer here races
    // with nothing.
    let first = unsafe { *mr.as_ptr() };
    assert_eq!(first, b'r');
    assert_eq!(&mr.close().unwrap()[..], b"registered");
    let mr = p.domain.register_with_key(Buf::new(4), MrAccess::REMOTE_WRITE, 77).unwrap();
    assert_eq!(mr.key(), 77);
    drop(mr);

    let name = p.b.ep.name().unwrap();
    assert_eq!(p.a.av.lookup(p.a_to_b).unwrap(), name);
    assert_eq!(p.a.av.straddr(&name), name.to_uri());
    let bad = Address::parse("fi_sockaddr_in://127.0.0.1:1").unwrap();
    assert_eq!(p.a.av.insert(&[name.clone(), bad]).unwrap_err(), Error::Inval);
    let v = p.a.av.insert(&[name.clone(), name]).unwrap();
    p.a.av.remove(&v).unwrap();
    assert!(p.a.av.lookup(v[0]).is_err());
}

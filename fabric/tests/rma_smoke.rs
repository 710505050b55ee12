//! RMA and atomics over tcp through the safe API: data lands where asked, and
//! every access outside what a region grants fails with FI_EACCES on the
//! initiator's queue, leaving the target's memory untouched.

#![cfg(feature = "tcp")]

use fabric::{
    AtomicKind, AtomicOp, AvAttr, BindFlags, Buf, Caps, CompletionQueue, CqAttr, Datatype, Endpoint, EpType, Error,
    Fabric, FiAddr, Hints, MrAccess, Remote,
};
use std::time::{Duration, Instant};

struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    peer: FiAddr,
    domain: fabric::Domain,
    _av: fabric::AddressVector,
}

fn pair() -> (Side, Side) {
    pair_with(Hints::new())
}

/// Two RDM endpoints of tcp on loopback, each in its own domain, with `hints`'
/// other wishes (such as an mr_mode).
fn pair_with(hints: Hints) -> (Side, Side) {
    let hints = Hints { prov_name: Some("tcp".into()), ep_type: EpType::Rdm, ..hints }.node("127.0.0.1").source(true);
    let info = fabric::getinfo(&hints).unwrap().remove(0);
    let fab = Fabric::open(&info).unwrap();
    let mk = || {
        let domain = fab.domain(&info).unwrap();
        let cq = domain.cq(CqAttr::default()).unwrap();
        let av = domain.av(AvAttr::default()).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq, av, domain)
    };
    let (a, acq, aav, ad) = mk();
    let (b, bcq, bav, bd) = mk();
    let pa = aav.insert_one(&b.name().unwrap()).unwrap();
    let pb = bav.insert_one(&a.name().unwrap()).unwrap();
    (Side { ep: a, cq: acq, peer: pa, domain: ad, _av: aav }, Side { ep: b, cq: bcq, peer: pb, domain: bd, _av: bav })
}

/// Wait for one completion on `cq` (Ok) or error (Err), driving `other` too.
fn wait(cq: &CompletionQueue, other: &CompletionQueue) -> Result<fabric::Completion, fabric::CompletionError> {
    let start = Instant::now();
    loop {
        if let Some(r) = cq.next().unwrap() {
            return r;
        }
        let _ = other.read_one().map(|c| panic!("unexpected completion on the other side: {c:?}"));
        assert!(start.elapsed() < Duration::from_secs(30), "no completion");
    }
}

/// One completion from each queue, in whatever order they come.
fn both(x: &CompletionQueue, y: &CompletionQueue) -> (fabric::Completion, fabric::Completion) {
    let (mut cx, mut cy) = (None, None);
    let start = Instant::now();
    while cx.is_none() || cy.is_none() {
        if cx.is_none() {
            cx = x.read_one().ok();
        }
        if cy.is_none() {
            cy = y.read_one().ok();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no completion");
    }
    (cx.unwrap(), cy.unwrap())
}

#[test]
fn write_read_and_protection() {
    let (a, b) = pair();
    let region = b.domain.register(Buf::new(1 << 20), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE).unwrap();
    let base = region.remote().addr;
    let at = |off: u64| Remote { addr: base + off, key: region.key() };
    // Write 3000 bytes at offset 100, read them back.
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    a.ep.write(Buf::from(&data[..]), a.peer, at(100), 1).unwrap();
    let c = wait(&a.cq, &b.cq).unwrap();
    assert_eq!(c.context, 1);
    assert!(c.flags.contains(Caps::RMA | Caps::WRITE));
    a.ep.read(Buf::new(3000), a.peer, at(100), 2).unwrap();
    let c = wait(&a.cq, &b.cq).unwrap();
    assert_eq!(c.bytes(), &data[..]);
    // Hostile accesses: unknown key, out of bounds, across the end, wrapped address.
    for (addr, key, len) in [
        (base, region.key() ^ 1, 8usize),
        (base + (1 << 20), region.key(), 1),
        (base + (1 << 20) - 4, region.key(), 8),
        (u64::MAX - 2, region.key(), 8),
    ] {
        a.ep.write(Buf::from(&[0xFFu8; 8][..len]), a.peer, Remote { addr, key }, 3).unwrap();
        let e = wait(&a.cq, &b.cq).unwrap_err();
        assert_eq!(e.err, Error::Access, "write at {addr:#x}");
        a.ep.read(Buf::new(len), a.peer, Remote { addr, key }, 4).unwrap();
        let e = wait(&a.cq, &b.cq).unwrap_err();
        assert_eq!(e.err, Error::Access, "read at {addr:#x}");
    }
    // The connection still works, and the target is untouched where refused.
    a.ep.read(Buf::new(4), a.peer, at((1 << 20) - 4), 5).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap().bytes(), &[0, 0, 0, 0]);
    // A read-only region refuses writes.
    let ro = b.domain.register(Buf::from(&[9u8; 64][..]), MrAccess::REMOTE_READ).unwrap();
    let ro_base = ro.remote().addr;
    a.ep.write(Buf::from(&[1u8; 8][..]), a.peer, Remote { addr: ro_base, key: ro.key() }, 6).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap_err().err, Error::Access);
    a.ep.read(Buf::new(64), a.peer, Remote { addr: ro_base, key: ro.key() }, 7).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap().bytes(), &[9u8; 64]);
    // A closed region refuses everything.
    let key = ro.key();
    let back = ro.close().unwrap();
    assert_eq!(&back[..], &[9u8; 64]);
    a.ep.read(Buf::new(8), a.peer, Remote { addr: ro_base, key }, 8).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap_err().err, Error::Access);
    let buf = region.close().unwrap();
    assert_eq!(&buf[100..3100], &data[..]);
}

#[test]
fn large_write_and_read_in_chunks() {
    let (a, b) = pair();
    let n = (10 << 20) + 12345;
    let region = b.domain.register(Buf::new(n), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE).unwrap();
    let base = region.remote().addr;
    let at = Remote { addr: base, key: region.key() };
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    a.ep.write(Buf::from(&data[..]), a.peer, at, 1).unwrap();
    wait(&a.cq, &b.cq).unwrap();
    a.ep.readv(vec![Buf::new(n / 2), Buf::new(n - n / 2)], a.peer, at, 2).unwrap();
    let c = wait(&a.cq, &b.cq).unwrap();
    let parts = c.buffers.into_vec();
    assert_eq!(&parts[0][..], &data[..n / 2]);
    assert_eq!(&parts[1][..], &data[n / 2..]);
}

#[test]
fn write_with_data_consumes_a_receive() {
    let (a, b) = pair();
    let region = b.domain.register(Buf::new(64), MrAccess::REMOTE_WRITE).unwrap();
    let base = region.remote().addr;
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 9).unwrap();
    a.ep.writedata(Buf::from(&[5u8; 32][..]), 0xABCD, a.peer, Remote { addr: base, key: region.key() }, 1).unwrap();
    let (done, c) = both(&a.cq, &b.cq);
    assert_eq!(done.context, 1);
    assert_eq!(c.context, 9);
    assert!(c.flags.contains(Caps::REMOTE_CQ_DATA | Caps::RMA | Caps::REMOTE_WRITE), "{:?}", c.flags);
    assert_eq!(c.data, 0xABCD);
    // Unexpected: the data waits for the next receive.
    a.ep.writedata(Buf::from(&[6u8; 8][..]), 0x77, a.peer, Remote { addr: base, key: region.key() }, 2).unwrap();
    wait(&a.cq, &b.cq).unwrap();
    b.ep.recv(Buf::new(16), FiAddr::UNSPEC, 10).unwrap();
    let c = wait(&b.cq, &a.cq).unwrap();
    assert_eq!((c.context, c.data), (10, 0x77));
    assert_eq!(&region.close().unwrap()[..8], &[6u8; 8]);
}

#[test]
fn atomics_apply_at_the_target() {
    let (a, b) = pair();
    assert!(b.domain.atomic_valid(AtomicOp::Sum, Datatype::Uint64, AtomicKind::Fetch).unwrap() >= 1);
    assert_eq!(b.domain.atomic_valid(AtomicOp::Bor, Datatype::Double, AtomicKind::Plain), Err(Error::OpNotSupp));
    let region = b.domain.register(Buf::new(64), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE).unwrap();
    let base = region.remote().addr;
    let at = Remote { addr: base, key: region.key() };
    for _ in 0..10 {
        a.ep.atomic(Buf::from(&5u64.to_le_bytes()[..]), AtomicOp::Sum, Datatype::Uint64, a.peer, at, 1).unwrap();
        wait(&a.cq, &b.cq).unwrap();
    }
    a.ep.fetch_atomic(Buf::from(&1u64.to_le_bytes()[..]), Buf::new(8), AtomicOp::Sum, Datatype::Uint64, a.peer, at, 2)
        .unwrap();
    let c = wait(&a.cq, &b.cq).unwrap();
    let bufs = c.buffers.into_vec();
    assert_eq!(u64::from_le_bytes(bufs[1][..8].try_into().unwrap()), 50);
    a.ep.compare_atomic(
        Buf::from(&99u64.to_le_bytes()[..]),
        Buf::from(&51u64.to_le_bytes()[..]),
        Buf::new(8),
        AtomicOp::Cswap,
        Datatype::Uint64,
        a.peer,
        at,
        3,
    )
    .unwrap();
    let c = wait(&a.cq, &b.cq).unwrap();
    assert_eq!(u64::from_le_bytes(c.buffers.into_vec()[2][..8].try_into().unwrap()), 51);
    // Out of bounds: refused, target untouched.
    let bad = Remote { addr: base + 60, key: region.key() };
    a.ep.atomic(Buf::from(&5u64.to_le_bytes()[..]), AtomicOp::Sum, Datatype::Uint64, a.peer, bad, 4).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap_err().err, Error::Access);
    assert_eq!(u64::from_le_bytes(region.close().unwrap()[..8].try_into().unwrap()), 99);
}

#[test]
fn msg_forms_take_flags() {
    use fabric::{OpBuffers, OpFlags, RmaMsg};
    let (a, b) = pair();
    let region = b.domain.register(Buf::new(64), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE).unwrap();
    let remote = region.remote();
    b.ep.recv(Buf::new(8), FiAddr::UNSPEC, 5).unwrap();
    let msg = RmaMsg { buffers: OpBuffers::One(Buf::from(&[3u8; 16][..])), addr: a.peer, remote, data: 42, context: 1 };
    a.ep.writemsg(msg, OpFlags::REMOTE_CQ_DATA | OpFlags::DELIVERY_COMPLETE).unwrap();
    let (_, c) = both(&a.cq, &b.cq);
    assert_eq!(c.data, 42);
    let msg = RmaMsg { buffers: OpBuffers::One(Buf::new(16)), addr: a.peer, remote, data: 0, context: 2 };
    a.ep.readmsg(msg, OpFlags::empty()).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap().bytes(), &[3u8; 16]);
    // Flags that make no sense come back with the buffers.
    let msg = RmaMsg { buffers: OpBuffers::One(Buf::new(16)), addr: a.peer, remote, data: 0, context: 3 };
    let e = a.ep.readmsg(msg, OpFlags::REMOTE_CQ_DATA).unwrap_err();
    assert_eq!(e.error, Error::BadFlags);
    assert_eq!(e.buffers.count(), 1);
    let msg = RmaMsg { buffers: OpBuffers::One(Buf::new(16)), addr: a.peer, remote, data: 0, context: 4 };
    assert_eq!(a.ep.writemsg(msg, OpFlags::PEEK).unwrap_err().error, Error::BadFlags);
}

#[test]
fn offset_addressing_and_chosen_keys() {
    use fabric::MrMode;
    let (a, b) = pair_with(Hints { mr_mode: Some(MrMode::empty()), ..Hints::new() });
    assert!(b.domain.info().domain_attr.mr_mode.is_empty());
    let region =
        b.domain.register_with_key(Buf::new(256), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0x1234).unwrap();
    assert_eq!(region.key(), 0x1234);
    // Offsets, not addresses.
    assert_eq!(region.remote(), Remote { addr: 0, key: 0x1234 });
    assert_eq!(region.remote_at(240, 16), Ok(Remote { addr: 240, key: 0x1234 }));
    a.ep.write(Buf::from(&[8u8; 16][..]), a.peer, Remote { addr: 240, key: 0x1234 }, 1).unwrap();
    wait(&a.cq, &b.cq).unwrap();
    a.ep.write(Buf::from(&[8u8; 16][..]), a.peer, Remote { addr: 241, key: 0x1234 }, 2).unwrap();
    assert_eq!(wait(&a.cq, &b.cq).unwrap_err().err, Error::Access);
    assert_eq!(&region.close().unwrap()[240..], &[8u8; 16]);
}

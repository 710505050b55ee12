//! `CompletionQueue::next`/`wait_next` and `MemoryRegion::remote`/`remote_at` on
//! every provider built in that offers RDM endpoints with messages and RMA: the
//! next entry is a completion, an error completion or nothing; a peer's RMA lands
//! where `remote_at` says, with and without `FI_MR_VIRT_ADDR` in the domain's
//! mr_mode.

#![allow(missing_docs)]

use fabric::{
    AvAttr, BindFlags, Buf, Caps, Completion, CompletionError, CompletionQueue, CqAttr, Domain, Endpoint, EpType,
    Error, Fabric, FiAddr, Hints, Info, MrAccess, MrMode,
};
use std::time::{Duration, Instant};

/// How long one wait may take before the test fails (a watchdog, not a timing
/// assertion).
const WATCHDOG: Duration = Duration::from_secs(30);

struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    peer: FiAddr,
    domain: Domain,
    _av: fabric::AddressVector,
    _fabric: Fabric,
}

/// The providers to run against: those built in and allowed by `FI_PROVIDER`.
fn provider_names() -> Vec<String> {
    fabric::providers().iter().map(|p| p.name().to_string()).collect()
}

/// The first RDM entry of `prov` with `caps` and `mr_mode` (when given): on the
/// loopback interface for the providers that take a node, else the first.
fn find(prov: &str, caps: Caps, mr_mode: Option<MrMode>) -> Option<Info> {
    let base = Hints { mr_mode, ..Hints::new().provider(prov).ep_type(EpType::Rdm).caps(caps) };
    for h in [base.clone().node("127.0.0.1").source(true), base] {
        if let Ok(mut v) = fabric::getinfo(&h) {
            if !v.is_empty() {
                return Some(v.remove(0));
            }
        }
    }
    eprintln!("skipped: {prov} offers no RDM endpoint with {caps:?} and mr_mode {mr_mode:?}");
    None
}

/// Two endpoints of `info`, each in its own domain, each knowing the other.
fn pair(info: &Info) -> (Side, Side) {
    let mk = || {
        let fabric = Fabric::open(info).unwrap();
        let domain = fabric.domain(info).unwrap();
        let cq = domain.cq(CqAttr::default()).unwrap();
        let av = domain.av(AvAttr::default()).unwrap();
        let ep = domain.endpoint(info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq, av, domain, fabric)
    };
    let (a, acq, aav, ad, af) = mk();
    let (b, bcq, bav, bd, bf) = mk();
    let pa = aav.insert_one(&b.name().unwrap()).unwrap();
    let pb = bav.insert_one(&a.name().unwrap()).unwrap();
    (
        Side { ep: a, cq: acq, peer: pa, domain: ad, _av: aav, _fabric: af },
        Side { ep: b, cq: bcq, peer: pb, domain: bd, _av: bav, _fabric: bf },
    )
}

/// The next entry of `cq`, driving `other` meanwhile (its progress may be what
/// `cq` waits for); fails the test if none comes before the watchdog.
fn entry(cq: &CompletionQueue, other: &CompletionQueue, what: &str) -> Result<Completion, CompletionError> {
    let start = Instant::now();
    loop {
        if let Some(e) = cq.wait_next(Some(Duration::from_millis(1))).unwrap() {
            return e;
        }
        if let Some(e) = other.next().unwrap() {
            panic!("{what}: unexpected entry on the other side: {e:?}");
        }
        assert!(start.elapsed() < WATCHDOG, "{what}: no entry");
    }
}

#[test]
fn next_on_every_provider() {
    let mut ran = 0;
    for prov in provider_names() {
        let Some(info) = find(&prov, Caps::MSG, None) else { continue };
        let (a, b) = pair(&info);
        // Empty.
        assert!(b.cq.next().unwrap().is_none(), "{prov}: empty queue");
        assert!(b.cq.wait_next(Some(Duration::ZERO)).unwrap().is_none(), "{prov}: empty queue");
        // A completion.
        b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).unwrap();
        a.ep.send(Buf::from(&b"hello"[..]), a.peer, 2).unwrap();
        let (mut recv, mut send) = (None, None);
        let start = Instant::now();
        while recv.is_none() || send.is_none() {
            if recv.is_none() {
                recv = b.cq.next().unwrap();
            }
            if send.is_none() {
                send = a.cq.next().unwrap();
            }
            assert!(start.elapsed() < WATCHDOG, "{prov}: no completion");
        }
        let c = recv.unwrap().expect("the receive completes");
        assert_eq!((c.context, c.bytes()), (1, &b"hello"[..]), "{prov}");
        let c = send.unwrap().expect("the send completes");
        assert_eq!(c.context, 2, "{prov}");
        // An error entry: a canceled receive, with its buffer.
        b.ep.recv(Buf::new(48), FiAddr::UNSPEC, 3).unwrap();
        b.ep.cancel(3).unwrap();
        let e = entry(&b.cq, &a.cq, &prov).expect_err("the canceled receive");
        assert_eq!((e.context, e.err), (3, Error::Canceled), "{prov}");
        assert_eq!(e.buffers.into_buf().map(|b| b.capacity()), Some(48), "{prov}");
        // Nothing left on either side.
        assert!(b.cq.next().unwrap().is_none(), "{prov}: drained");
        assert!(a.cq.next().unwrap().is_none(), "{prov}: drained");
        assert_eq!((a.cq.in_flight(), b.cq.in_flight()), (0, 0), "{prov}");
        ran += 1;
    }
    assert!(ran > 0 || !cfg!(feature = "tcp"), "no provider ran the test");
}

/// Register `len` bytes of `init` for remote reads and writes on `side`.
fn register(side: &Side, init: Vec<u8>) -> fabric::MemoryRegion {
    let access = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    if side.domain.info().domain_attr.mr_mode.contains(MrMode::PROV_KEY) {
        side.domain.register(Buf::from(init), access)
    } else {
        side.domain.register_with_key(Buf::from(init), access, 0x5EED_0017)
    }
    .unwrap()
}

/// `remote_at` of `b`'s region is where `a`'s write lands and `a`'s read reads, in
/// the addressing the domain's mr_mode says; whether it was `FI_MR_VIRT_ADDR`.
fn remote_round_trip(prov: &str, info: &Info) -> bool {
    let (a, b) = pair(info);
    let virt = b.domain.info().domain_attr.mr_mode.contains(MrMode::VIRT_ADDR);
    let mr = register(&b, vec![0u8; 4096]);
    let whole = mr.remote();
    assert_eq!(whole.key, mr.key(), "{prov}");
    if virt {
        // SAFETY: only the address is taken, to compare; nothing is accessed.
        let base = unsafe { mr.as_ptr() } as u64;
        assert_eq!(whole.addr, base, "{prov}: VIRT_ADDR addresses by virtual address");
    } else {
        assert_eq!(whole.addr, 0, "{prov}: without VIRT_ADDR, by offset");
    }
    // Bounds.
    assert_eq!(mr.remote_at(0, 4096), Ok(whole), "{prov}");
    assert_eq!(mr.remote_at(4096, 0).map(|r| r.addr), Ok(whole.addr + 4096), "{prov}");
    assert_eq!(mr.remote_at(4000, 97), Err(Error::Inval), "{prov}");
    assert_eq!(mr.remote_at(4097, 0), Err(Error::Inval), "{prov}");
    assert_eq!(mr.remote_at(usize::MAX, 2), Err(Error::Inval), "{prov}");
    // A write at an offset lands there; a read of the whole region sees it there.
    let data: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7).wrapping_add(1)).collect();
    let at = mr.remote_at(1000, data.len()).unwrap();
    assert_eq!(at.addr, whole.addr + 1000, "{prov}");
    a.ep.write(Buf::from(&data[..]), a.peer, at, 1).unwrap();
    let c = entry(&a.cq, &b.cq, prov).expect("the write completes");
    assert_eq!(c.context, 1, "{prov}");
    a.ep.read(Buf::new(4096), a.peer, whole, 2).unwrap();
    let c = entry(&a.cq, &b.cq, prov).expect("the read completes");
    let seen = c.bytes();
    assert_eq!(&seen[1000..1100], &data[..], "{prov}: the write landed at offset 1000");
    assert!(seen[..1000].iter().chain(&seen[1100..]).all(|&x| x == 0), "{prov}: and nowhere else");
    // The address of the other mode is refused: the remote is the only right one.
    let wrong = fabric::Remote { addr: if virt { 1000 } else { whole.addr + (1 << 40) }, key: whole.key };
    a.ep.read(Buf::new(8), a.peer, wrong, 3).unwrap();
    let e = entry(&a.cq, &b.cq, prov).expect_err("a read outside the region");
    assert_eq!((e.context, e.err), (3, Error::Access), "{prov}");
    let back = mr.close().unwrap();
    assert_eq!(&back[1000..1100], &data[..], "{prov}");
    virt
}

#[test]
fn remote_on_every_provider_in_both_addressings() {
    let mut modes = vec![];
    for prov in provider_names() {
        for mode in [MrMode::PROV_KEY | MrMode::VIRT_ADDR, MrMode::PROV_KEY] {
            let Some(info) = find(&prov, Caps::MSG | Caps::RMA, Some(mode)) else { continue };
            let virt = remote_round_trip(&prov, &info);
            modes.push((prov.clone(), virt));
        }
    }
    eprintln!("ran (provider, VIRT_ADDR): {modes:?}");
    if cfg!(feature = "tcp") && provider_names().iter().any(|p| p == "tcp") {
        assert!(modes.contains(&("tcp".into(), true)), "tcp ran with VIRT_ADDR: {modes:?}");
        assert!(modes.contains(&("tcp".into(), false)), "tcp ran with offsets: {modes:?}");
    }
}

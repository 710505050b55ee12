//! A message larger than 1 GiB (odd length) over an RDM pair, byte-checked at
//! every page and at both ends.

mod common;

use fabric_core::prov::{IoVec, Op};
use fabric_core::*;
use std::time::{Duration, Instant};

#[test]
fn one_gibibyte_and_some() {
    const LEN: usize = (1 << 30) + 4099;
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let common::Rdm { cq: c1, av: a1, ep: e1 } = common::rdm_endpoint(&dom, &info);
    let common::Rdm { cq: c2, ep: e2, .. } = common::rdm_endpoint(&dom, &info);
    let to2 = a1.insert(&[e2.getname().unwrap()]).unwrap()[0];
    let mut src = vec![0u8; LEN];
    for (i, chunk) in src.chunks_mut(4096).enumerate() {
        chunk.fill((i % 251) as u8);
    }
    *src.last_mut().unwrap() = 0xEE;
    let mut dst = vec![0u8; LEN];
    let si = [IoVec { base: src.as_mut_ptr(), len: LEN }];
    let ri = [IoVec { base: dst.as_mut_ptr(), len: LEN }];
    let op = |iov, addr, ctx| Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 };
    // SAFETY: both buffers outlive the completions read below.
    unsafe {
        e2.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
        e1.post_send(&op(&si, to2, 2), OpFlags::empty()).unwrap();
    }
    let mut got = (None, None);
    let start = Instant::now();
    let mut out = [CqEntry::new(0, Caps::empty())];
    while got.0.is_none() || got.1.is_none() {
        if let Ok(1) = c1.read(&mut out) {
            got.0 = Some(out[0]);
        }
        if let Ok(1) = c2.read(&mut out) {
            got.1 = Some(out[0]);
        }
        assert!(start.elapsed() < Duration::from_secs(600), "1 GiB transfer stalled");
    }
    assert_eq!(got.1.unwrap().len, LEN);
    for (i, chunk) in dst[..LEN - 1].chunks(4096).enumerate() {
        assert_eq!(chunk[0], (i % 251) as u8, "page {i}");
        assert_eq!(chunk[chunk.len() - 1], (i % 251) as u8, "page {i}");
    }
    assert_eq!(dst[LEN - 1], 0xEE);
    drop((e1, e2));
}

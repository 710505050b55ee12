//! Address vectors: insert, lookup, straddr, remove, for table and map types;
//! sending to an address that was removed or never inserted.

use super::PROV;
use crate::common::*;
use fabric::*;

/// Three endpoint names to insert, and an AV of `av_type` on the first side's
/// domain (`None`: skipped).
fn names_and_av(prov: &str, av_type: AvType) -> Option<(Group, Vec<Address>, AddressVector)> {
    let g = Group::new(prov, Caps::MSG, &[Opts::default(); 3])?;
    let offered = g.info.domain_attr.av_type;
    if offered != AvType::Unspec && offered != av_type {
        skip(format!("the domain offers {offered}, not {av_type}"));
        return None;
    }
    let names: Vec<Address> = g.sides.iter().map(|s| s.ep.name().expect("name")).collect();
    let av = g.sides[0].domain.av(AvAttr { av_type, count: 8 }).expect("open av");
    Some((g, names, av))
}

fn common_checks(av: &AddressVector, names: &[Address], h: &[FiAddr]) {
    assert_eq!(h.len(), names.len(), "one handle per address");
    for (i, (a, n)) in h.iter().zip(names).enumerate() {
        assert!(!a.is_unspec(), "handle {i} is FI_ADDR_NOTAVAIL");
        assert_eq!(&av.lookup(*a).expect("lookup"), n, "lookup of handle {i}");
        let s = av.straddr(n);
        assert!(!s.is_empty(), "straddr of {n:?} is empty");
        assert_eq!(Address::parse(&s).as_ref(), Ok(n), "straddr {s:?} parses back to the address");
    }
    let mut sorted = h.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), h.len(), "distinct addresses get distinct handles");
    // Remove the middle one: it no longer resolves, the others still do.
    av.remove(&h[1..2]).expect("remove");
    assert!(av.lookup(h[1]).is_err(), "a removed handle must not resolve");
    assert!(av.remove(&h[1..2]).is_err(), "removing twice must fail");
    assert_eq!(av.lookup(h[0]).as_ref(), Ok(&names[0]));
    assert_eq!(av.lookup(h[2]).as_ref(), Ok(&names[2]));
    // Inserted again: resolves again.
    let again = av.insert_one(&names[1]).expect("insert again");
    assert_eq!(av.lookup(again).as_ref(), Ok(&names[1]));
    assert!(av.lookup(FiAddr(0x7fff_fff0)).is_err(), "a handle never issued must not resolve");
    assert!(av.lookup(FiAddr::UNSPEC).is_err(), "FI_ADDR_UNSPEC must not resolve");
}

#[test]
fn table() {
    run(PROV, |prov| {
        let Some((_g, names, av)) = names_and_av(prov, AvType::Table) else { return };
        let h = av.insert(&names).expect("insert");
        // FI_AV_TABLE: consecutive indices from 0, in insertion order.
        assert_eq!(h, [FiAddr(0), FiAddr(1), FiAddr(2)], "table handles are consecutive indices from 0");
        let h3 = av.insert_one(&names[0]).expect("insert one more");
        assert_eq!(h3, FiAddr(3), "the next table index");
        av.remove(&[h3]).expect("remove");
        common_checks(&av, &names, &h);
    });
}

#[test]
fn map() {
    run(PROV, |prov| {
        let Some((_g, names, av)) = names_and_av(prov, AvType::Map) else { return };
        let h = av.insert(&names).expect("insert");
        common_checks(&av, &names, &h);
    });
}

/// An address of the wrong format fails the insert with `FI_EINVAL` and inserts
/// nothing.
#[test]
fn bad_address_format() {
    run(PROV, |prov| {
        let Some((_g, names, av)) = names_and_av(prov, AvType::Table) else { return };
        let bad = match &names[0] {
            Address::Sockaddr(_) => Address::Str("fi_bogus://nowhere/0".into()),
            _ => Address::Sockaddr("127.0.0.1:1".parse().expect("literal")),
        };
        assert_eq!(av.insert(&[names[0].clone(), bad.clone()]), Err(Error::Inval), "insert of a wrong format");
        assert_eq!(av.insert_one(&bad), Err(Error::Inval));
        // Nothing was inserted: the first handle is still index 0.
        assert_eq!(av.insert_one(&names[1]), Ok(FiAddr(0)), "a failed insert inserts nothing");
        assert!(av.lookup(FiAddr(1)).is_err());
    });
}

/// Sending to a removed address fails (at once, or as an error completion) and
/// gives the buffer back; nothing arrives.
#[test]
fn send_to_removed_address() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        p.warm_up();
        p.a.av.as_ref().expect("rdm side has an av").remove(&[p.a_to_b]).expect("remove the peer");
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        check_send_fails(&p, p.a_to_b, "a removed address");
        assert_quiet(&p.b.cq, &p.drivers(), "a message to a removed address arrived");
    });
}

/// Sending to a handle that was never issued fails and gives the buffer back.
#[test]
fn send_to_unknown_address() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG) else { return };
        check_send_fails(&p, FiAddr(0x00ff_0000_0123), "a handle never issued");
    });
}

fn check_send_fails(p: &Pair, dest: FiAddr, what: &str) {
    let want = pattern(100, 5);
    let back = match p.a.ep.send(Buf::from(want.clone()), dest, 9) {
        Err(e) => {
            assert_ne!(e.error, Error::Again, "send to {what}: not back-pressure");
            e.buffers
        }
        Ok(()) => {
            let e = p.err_a();
            assert_eq!(e.context, 9, "send to {what}: error completion {e}");
            e.buffers
        }
    };
    assert_bytes(&back.into_buf().expect("the send buffer comes back"), &want, "buffer of the failed send");
    assert!(p.a.ep.inject(b"x", dest).is_err(), "inject to {what} must fail");
}

/// A message from a peer not in the receiver's AV reports `FI_ADDR_NOTAVAIL` as
/// its source; once inserted, the peer's new handle.
#[test]
fn rdm_source_not_in_av() {
    run(PROV, |prov| {
        let Some(p) = Pair::new(prov, EpType::Rdm, Caps::MSG | Caps::SOURCE) else { return };
        let bav = p.b.av.as_ref().expect("rdm side has an av");
        bav.remove(&[p.b_to_a]).expect("b forgets a");
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 1).expect("post recv");
        p.a.ep.send(Buf::from(b"who am i"), p.a_to_b, 2).expect("post send");
        let r = p.ok_b();
        assert_eq!(r.bytes(), b"who am i");
        assert_eq!(r.src, FiAddr::NOTAVAIL, "source of a peer not in the AV");
        p.ok_a();
        let again = bav.insert_one(&p.a.ep.name().expect("name")).expect("insert a again");
        p.b.ep.recv(Buf::new(64), FiAddr::UNSPEC, 3).expect("post recv");
        p.a.ep.send(Buf::from(b"me again"), p.a_to_b, 4).expect("post send");
        let r = p.ok_b();
        assert_eq!(r.src, again, "source once the peer is in the AV again");
        p.ok_a();
    });
}

//! Discovery: `getinfo` by provider name, endpoint type, caps, node and service
//! (numeric and by name), source address, domain and fabric names; impossible
//! hints give `FI_ENODATA`. (`FI_PROVIDER` filtering is unit-tested in the
//! registry.)

use super::PROV;
use crate::common::*;
use fabric::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const PRIMARY: [Caps; 5] = [Caps::MSG, Caps::TAGGED, Caps::RMA, Caps::ATOMIC, Caps::MULTICAST];

/// Every entry of the provider (fails the test when there is none: the suite is
/// instantiated for providers that exist).
fn all(prov: &str) -> Vec<Info> {
    match getinfo(&Hints::new().provider(prov)) {
        Ok(v) => {
            assert!(!v.is_empty(), "getinfo returned Ok with no entry");
            v
        }
        Err(e) => {
            panic!("provider {prov} offers nothing ({e}): feature off, not registered, or FI_PROVIDER excludes it")
        }
    }
}

/// `Some(entries)` for a sockets provider; `None` (skipped) otherwise.
fn sockaddr_entries(prov: &str) -> Option<Vec<Info>> {
    let v = all(prov);
    if v.iter().all(is_sockaddr) {
        Some(v)
    } else {
        skip(format!("{prov} does not use socket addresses"));
        None
    }
}

#[track_caller]
fn nodata(h: &Hints, what: &str) {
    match getinfo(h) {
        Err(Error::NoData) => {}
        Err(e) => panic!("{what}: expected FI_ENODATA, got {e}"),
        Ok(v) => panic!("{what}: expected FI_ENODATA, got {} entries, first {:?}", v.len(), v[0]),
    }
}

#[test]
fn by_provider_name() {
    run(PROV, |prov| {
        let v = all(prov);
        for i in &v {
            assert_eq!(i.fabric_attr.prov_name, prov, "entry of another provider");
        }
        assert!(providers().iter().any(|p| p.name() == prov), "{prov} is among the enabled providers");
        let f = Fabric::open(&v[0]).expect("open the fabric of the first entry");
        assert_eq!(f.provider().name(), prov);
        assert_eq!(f.info().fabric_attr.prov_name, prov);
        f.domain(&v[0]).expect("open its domain");
    });
}

#[test]
fn ep_types() {
    run(PROV, |prov| {
        let mut offered = Vec::new();
        for t in [EpType::Msg, EpType::Rdm, EpType::Dgram] {
            match getinfo(&Hints::new().provider(prov).ep_type(t)) {
                Ok(v) => {
                    assert!(v.iter().all(|i| i.ep_attr.ep_type == t), "asked for {t}, got other types");
                    offered.push(t);
                }
                Err(Error::NoData) => skip(format!("{prov} offers no {t}")),
                Err(e) => panic!("getinfo for {t}: {e}"),
            }
        }
        assert!(!offered.is_empty(), "{prov} offers no endpoint type");
        let mut any: Vec<EpType> = all(prov).iter().map(|i| i.ep_attr.ep_type).collect();
        any.sort_by_key(|t| t.name());
        any.dedup();
        offered.sort_by_key(|t| t.name());
        assert_eq!(any, offered, "unspecified type gives the union of the types offered");
    });
}

#[test]
fn info_attributes_are_consistent() {
    run(PROV, |prov| {
        for i in all(prov) {
            let what = format!("{} {} {}", i.domain_attr.name, i.ep_attr.ep_type, i.addr_format.name());
            assert_eq!(i.fabric_attr.prov_name, prov);
            assert!(!i.fabric_attr.name.is_empty(), "{what}: fabric name");
            assert!(!i.domain_attr.name.is_empty(), "{what}: domain name");
            assert_ne!(i.ep_attr.ep_type, EpType::Unspec, "{what}: endpoint type");
            assert_ne!(i.addr_format, AddrFormat::Unspec, "{what}: address format");
            if let Some(a) = &i.src_addr {
                assert!(a.format().satisfies(i.addr_format), "{what}: source {a} of another format");
            }
            assert!(i.handle.is_none(), "{what}: only connection requests carry a handle");
            assert!(PRIMARY.iter().any(|c| i.caps.contains(*c)), "{what}: no primary capability in {:?}", i.caps);
            assert!(i.caps.contains(i.tx_attr.caps), "{what}: tx caps {:?} not in {:?}", i.tx_attr.caps, i.caps);
            assert!(i.caps.contains(i.rx_attr.caps), "{what}: rx caps {:?} not in {:?}", i.rx_attr.caps, i.caps);
            assert!(i.tx_attr.iov_limit >= 1 && i.rx_attr.iov_limit >= 1, "{what}: iov limits");
            assert!(i.tx_attr.size >= 1 && i.rx_attr.size >= 1, "{what}: queue sizes");
            assert!(i.ep_attr.max_msg_size > 0, "{what}: max_msg_size");
            assert!(i.tx_attr.inject_size <= i.ep_attr.max_msg_size, "{what}: inject_size above max_msg_size");
            if i.caps.contains(Caps::TAGGED) {
                assert_ne!(i.ep_attr.mem_tag_format, 0, "{what}: tagged without a tag format");
            }
            if i.caps.contains(Caps::REMOTE_CQ_DATA) {
                assert!(i.domain_attr.cq_data_size > 0, "{what}: remote CQ data of 0 bytes");
            }
            assert!(fabric::info::version_major(i.fabric_attr.api_version) >= 1, "{what}: api version");
        }
    });
}

#[test]
fn caps_filter_and_narrow() {
    run(PROV, |prov| {
        let entries = all(prov);
        let union = entries.iter().fold(Caps::empty(), |c, i| c | i.caps);
        for c in PRIMARY {
            let h = Hints::new().provider(prov).caps(c);
            if !union.contains(c) {
                nodata(&h, &format!("caps {c:?} not offered"));
                continue;
            }
            let v = getinfo(&h).unwrap_or_else(|e| panic!("caps {c:?}: {e}"));
            for i in &v {
                assert!(i.caps.contains(c), "asked for {c:?}, entry has {:?}", i.caps);
                for other in PRIMARY.iter().filter(|o| **o != c) {
                    assert!(!i.caps.contains(*other), "asked for {c:?} only, entry also has {other:?}: not narrowed");
                }
            }
        }
        let both = Caps::MSG | Caps::REMOTE_CQ_DATA;
        if union.contains(both) {
            for i in getinfo(&Hints::new().provider(prov).caps(both)).expect("msg with remote cq data") {
                assert!(i.caps.contains(both));
            }
        }
    });
}

#[test]
fn numeric_node_and_service() {
    run(PROV, |prov| {
        if sockaddr_entries(prov).is_none() {
            return;
        }
        let want: SocketAddr = "127.0.0.1:4567".parse().expect("literal");
        let v =
            getinfo(&Hints::new().provider(prov).node("127.0.0.1").service("4567")).expect("getinfo 127.0.0.1:4567");
        for i in &v {
            assert_eq!(i.dest_addr, Some(Address::Sockaddr(want)), "destination of {}", i.domain_attr.name);
        }
    });
}

#[test]
fn node_by_name() {
    run(PROV, |prov| {
        if sockaddr_entries(prov).is_none() {
            return;
        }
        let v = getinfo(&Hints::new().provider(prov).node("localhost").service("4567")).expect("getinfo localhost");
        for i in &v {
            let d = i.dest_addr.as_ref().and_then(|a| a.sockaddr()).expect("a socket destination");
            assert!(d.ip().is_loopback(), "localhost resolved to {d}");
            assert_eq!(d.port(), 4567);
        }
    });
}

#[test]
fn service_by_name() {
    run(PROV, |prov| {
        if sockaddr_entries(prov).is_none() {
            return;
        }
        // SAFETY: two NUL-terminated literals; the result is null or points to static
        // storage read at once, before any other call.
        let port = unsafe {
            let s = libc::getservbyname(c"http".as_ptr(), c"tcp".as_ptr());
            if s.is_null() {
                None
            } else {
                Some(u16::from_be((*s).s_port as u16))
            }
        };
        let Some(port) = port else {
            skip("no \"http\" in the services database");
            return;
        };
        let v = getinfo(&Hints::new().provider(prov).node("127.0.0.1").service("http")).expect("getinfo service http");
        for i in &v {
            let d = i.dest_addr.as_ref().and_then(|a| a.sockaddr()).expect("a socket destination");
            assert_eq!(d.port(), port, "service http");
        }
        nodata(
            &Hints::new().provider(prov).node("127.0.0.1").service("no-such-service-xyz"),
            "an unknown service name",
        );
    });
}

/// `FI_SOURCE`: node and service name the local address, which an endpoint then
/// takes.
#[test]
fn source_node_and_service() {
    run(PROV, |prov| {
        if sockaddr_entries(prov).is_none() {
            return;
        }
        let port = fabric_testkit::port();
        let want: SocketAddr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        let h =
            Hints::new().provider(prov).ep_type(EpType::Rdm).node("127.0.0.1").service(&port.to_string()).source(true);
        let v = match getinfo(&h) {
            Ok(v) => v,
            Err(Error::NoData) => {
                skip(format!("{prov} offers no RDM endpoint"));
                return;
            }
            Err(e) => panic!("getinfo with FI_SOURCE: {e}"),
        };
        for i in &v {
            assert_eq!(i.src_addr, Some(Address::Sockaddr(want)), "source address");
            assert_eq!(i.dest_addr, None, "no destination with FI_SOURCE");
        }
        let s = rdm_side("a", &v[0], Opts::default());
        assert_eq!(s.ep.name().expect("name"), Address::Sockaddr(want), "the endpoint takes the source address");
    });
}

#[test]
fn source_address_hint() {
    run(PROV, |prov| {
        if sockaddr_entries(prov).is_none() {
            return;
        }
        let lo = Address::Sockaddr(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0));
        let h = Hints { src_addr: Some(lo), ..Hints::new().provider(prov).ep_type(EpType::Rdm) };
        let v = match getinfo(&h) {
            Ok(v) => v,
            Err(Error::NoData) => {
                skip(format!("{prov} offers no RDM endpoint"));
                return;
            }
            Err(e) => panic!("getinfo with a source address: {e}"),
        };
        for i in &v {
            let s = i.src_addr.as_ref().and_then(|a| a.sockaddr()).expect("a socket source");
            assert_eq!(s.ip(), IpAddr::from(Ipv4Addr::LOCALHOST), "source address");
        }
        let s = rdm_side("a", &v[0], Opts::default());
        let name = s.ep.name().expect("name").sockaddr().expect("socket address");
        assert_eq!(name.ip(), IpAddr::from(Ipv4Addr::LOCALHOST), "the endpoint is bound to the source address");
        let far = Address::Sockaddr("198.51.100.77:0".parse().expect("literal"));
        nodata(&Hints { src_addr: Some(far), ..Hints::new().provider(prov) }, "a source address of no interface");
    });
}

#[test]
fn domain_and_fabric_names() {
    run(PROV, |prov| {
        let entries = all(prov);
        let mut domains: Vec<String> = entries.iter().map(|i| i.domain_attr.name.clone()).collect();
        domains.sort();
        domains.dedup();
        for d in &domains {
            let v = getinfo(&Hints::new().provider(prov).domain(d)).unwrap_or_else(|e| panic!("domain {d}: {e}"));
            assert!(v.iter().all(|i| &i.domain_attr.name == d), "asked for domain {d}");
            let want = entries.iter().filter(|i| &i.domain_attr.name == d).count();
            assert_eq!(v.len(), want, "every entry of domain {d}");
        }
        let mut fabrics: Vec<String> = entries.iter().map(|i| i.fabric_attr.name.clone()).collect();
        fabrics.sort();
        fabrics.dedup();
        for f in &fabrics {
            let v = getinfo(&Hints::new().provider(prov).fabric(f)).unwrap_or_else(|e| panic!("fabric {f}: {e}"));
            assert!(v.iter().all(|i| &i.fabric_attr.name == f), "asked for fabric {f}");
        }
    });
}

#[test]
fn impossible_hints_give_nodata() {
    run(PROV, |prov| {
        let entries = all(prov);
        let union = entries.iter().fold(Caps::empty(), |c, i| c | i.caps);
        let p = || Hints::new().provider(prov);
        nodata(&Hints::new().provider("no-such-provider-xyz"), "an unknown provider");
        nodata(&p().domain("no-such-domain0"), "an unknown domain");
        nodata(&p().fabric("no-such-fabric"), "an unknown fabric");
        if let Some(c) =
            [Caps::RMA, Caps::ATOMIC, Caps::MULTICAST, Caps::COLLECTIVE].into_iter().find(|c| !union.contains(*c))
        {
            nodata(&p().caps(c), &format!("caps {c:?} not offered"));
        }
        nodata(&Hints { tx_size: usize::MAX, ..p() }, "a transmit queue deeper than offered");
        nodata(&Hints { rx_size: usize::MAX, ..p() }, "a receive queue deeper than offered");
        let formats: Vec<AddrFormat> = entries.iter().map(|i| i.addr_format).collect();
        if let Some(f) = [AddrFormat::Str, AddrFormat::SockaddrIn6, AddrFormat::SockaddrIn]
            .into_iter()
            .find(|f| formats.iter().all(|g| !g.satisfies(*f)))
        {
            nodata(&p().addr_format(f), &format!("address format {} not offered", f.name()));
        }
        if entries.iter().all(is_sockaddr) {
            nodata(&p().node("198.51.100.77").source(true), "a source node that is no local address");
            nodata(&p().node("no-such-host.invalid"), "a node that does not resolve");
        }
    });
}

/// Hints' mode bits: an entry needing a mode the application does not support is
/// not returned.
#[test]
fn mode_hints() {
    run(PROV, |prov| {
        let entries = all(prov);
        match getinfo(&Hints { mode: Some(Mode::empty()), ..Hints::new().provider(prov) }) {
            Ok(v) => {
                assert!(v.iter().all(|i| i.mode.is_empty()), "an entry needing mode bits was returned");
                assert_eq!(v.len(), entries.iter().filter(|i| i.mode.is_empty()).count());
            }
            Err(Error::NoData) => assert!(entries.iter().all(|i| !i.mode.is_empty()), "entries without modes exist"),
            Err(e) => panic!("getinfo with no mode bits: {e}"),
        }
    });
}

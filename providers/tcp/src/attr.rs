//! What the tcp provider offers: one domain per interface address, named after the
//! interface, in a fabric named after its subnet; MSG and RDM endpoints on each.

use crate::{config, NAME, VERSION};
use fabric_core::log::Level;
use fabric_core::{
    fi_log, AddrFormat, Address, AvType, Caps, DomainAttr, EpAttr, EpType, Error, FabricAttr, Hints, Info, Mode,
    MrMode, MsgOrder, Progress, Protocol, ResourceMgmt, Result, RxAttr, Threading, TxAttr,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// Most iov entries in one operation.
pub(crate) const IOV_LIMIT: usize = fabric_util::rx::IOV_LIMIT;
/// Queue depths reported (operations are queued in software without a hard limit;
/// these are the sizes the queues are pre-allocated for).
pub(crate) const QUEUE_SIZE: usize = 1024;
/// The generic tag format (libfabric's `FI_TAG_GENERIC`).
pub(crate) const TAG_GENERIC: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Iface {
    pub name: String,
    pub addr: IpAddr,
    pub prefix: u8,
    pub loopback: bool,
}

impl Iface {
    /// The subnet, `127.0.0.0/8`, as the fabric name.
    pub fn subnet(&self) -> String {
        match self.addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix.min(32)) };
                format!("{}/{}", Ipv4Addr::from(bits & mask), self.prefix)
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix.min(128) as u32) };
                format!("{}/{}", Ipv6Addr::from(bits & mask), self.prefix)
            }
        }
    }

    fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix.min(32)) };
                u32::from(a) & mask == u32::from(*b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix.min(128) as u32) };
                u128::from(a) & mask == u128::from(*b) & mask
            }
            _ => false,
        }
    }
}

/// The machine's interface addresses, through `getifaddrs`.
pub(crate) fn interfaces() -> Result<Vec<Iface>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until
        // freeifaddrs; its pointers are null or valid C data of the right types.
        unsafe {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            let fam = (*ifa.ifa_addr).sa_family as i32;
            let (addr, prefix) = if fam == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let prefix = if ifa.ifa_netmask.is_null() {
                    32
                } else {
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                    u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                };
                (IpAddr::V4(ip), prefix)
            } else if fam == libc::AF_INET6 {
                let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if ip.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // link-local needs a scope id: not offered
                }
                let prefix = if ifa.ifa_netmask.is_null() {
                    128
                } else {
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                    m.sin6_addr.s6_addr.iter().map(|b| b.count_ones()).sum::<u32>() as u8
                };
                (IpAddr::V6(ip), prefix)
            } else {
                continue;
            };
            out.push(Iface { name, addr, prefix, loopback });
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    // Best first: real interfaces before loopback, IPv4 before IPv6.
    out.sort_by_key(|i| (i.loopback, i.addr.is_ipv6()));
    Ok(out)
}

/// The entry offered on one interface address for one endpoint type.
pub(crate) fn base_info(iface: &Iface, ep_type: EpType) -> Info {
    let cfg = config();
    let caps_common = Caps::MSG
        | Caps::TAGGED
        | Caps::RMA
        | Caps::ATOMIC
        | Caps::READ
        | Caps::WRITE
        | Caps::SEND
        | Caps::RECV
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::RMA_EVENT
        | Caps::REMOTE_CQ_DATA
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM;
    let caps = match ep_type {
        EpType::Rdm => caps_common | Caps::MULTI_RECV | Caps::DIRECTED_RECV | Caps::SOURCE,
        _ => caps_common | Caps::MULTI_RECV,
    };
    let order = MsgOrder::SAS;
    // Transmit: initiating; receive: being a target.
    let rx_caps = caps & !(Caps::SEND | Caps::READ | Caps::WRITE);
    let tx_caps = caps
        & !(Caps::RECV
            | Caps::MULTI_RECV
            | Caps::DIRECTED_RECV
            | Caps::SOURCE
            | Caps::REMOTE_READ
            | Caps::REMOTE_WRITE
            | Caps::RMA_EVENT);
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: if iface.addr.is_ipv4() { AddrFormat::SockaddrIn } else { AddrFormat::SockaddrIn6 },
        src_addr: Some(Address::Sockaddr(SocketAddr::new(iface.addr, 0))),
        dest_addr: None,
        handle: None,
        tx_attr: TxAttr {
            caps: tx_caps,
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            inject_size: cfg.inject_size,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: 1,
        },
        rx_attr: RxAttr {
            caps: rx_caps,
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            total_buffered_recv: cfg.eager_max,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
        },
        ep_attr: EpAttr {
            ep_type,
            protocol: if ep_type == EpType::Rdm { Protocol::Rxm } else { Protocol::SockTcp },
            protocol_version: fabric_util::wire::WIRE_VERSION as u32,
            max_msg_size: isize::MAX as usize,
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: TAG_GENERIC,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            auth_key_size: 0,
        },
        domain_attr: DomainAttr {
            name: iface.name.clone(),
            threading: Threading::Safe,
            control_progress: Progress::Manual,
            data_progress: Progress::Manual,
            resource_mgmt: ResourceMgmt::Enabled,
            av_type: AvType::Unspec,
            mr_mode: MrMode::PROV_KEY | MrMode::VIRT_ADDR,
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 256,
            ep_cnt: 8192,
            tx_ctx_cnt: 256,
            rx_ctx_cnt: 256,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 0,
            max_ep_srx_ctx: 0,
            cntr_cnt: 256,
            mr_iov_limit: 1,
            caps: Caps::LOCAL_COMM | Caps::REMOTE_COMM,
            mode: Mode::empty(),
            auth_key_size: 0,
            max_err_data: 0,
            mr_cnt: 1 << 16,
        },
        fabric_attr: FabricAttr {
            name: iface.subnet(),
            prov_name: NAME.to_string(),
            prov_version: VERSION,
            api_version: fabric_core::info::API_VERSION,
        },
    }
}

/// Resolve `node:service` to socket addresses (numeric or by name).
pub(crate) fn resolve(node: Option<&str>, service: Option<&str>) -> Result<Vec<SocketAddr>> {
    let port: u16 = match service {
        None => 0,
        Some(s) => match s.parse::<u16>() {
            Ok(p) => p,
            Err(_) => service_port(s).ok_or_else(|| {
                fi_log!(Level::Info, NAME, "core", "unknown service {s:?}");
                Error::NoData
            })?,
        },
    };
    let node = node.unwrap_or("localhost");
    let host = node.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(node);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match (host, port).to_socket_addrs() {
        Ok(it) => {
            let v: Vec<_> = it.collect();
            if v.is_empty() {
                Err(Error::NoData)
            } else {
                Ok(v)
            }
        }
        Err(e) => {
            fi_log!(Level::Info, NAME, "core", "cannot resolve {host:?}: {e}");
            Err(Error::NoData)
        }
    }
}

/// A service name's TCP port, from the system's services database.
fn service_port(name: &str) -> Option<u16> {
    let c = std::ffi::CString::new(name).ok()?;
    let proto = c"tcp";
    // SAFETY: both arguments are valid NUL-terminated strings; the result is null or
    // points to static storage that we read at once.
    unsafe {
        let s = libc::getservbyname(c.as_ptr(), proto.as_ptr());
        if s.is_null() {
            None
        } else {
            Some(u16::from_be((*s).s_port as u16))
        }
    }
}

/// `getinfo` for the tcp provider.
pub(crate) fn getinfo(h: &Hints) -> Result<Vec<Info>> {
    let cfg = config();
    let refuse = |why: String| {
        fi_log!(Level::Info, NAME, "core", "no entry: {why}");
        Error::NoData
    };
    if matches!(h.ep_type, EpType::Dgram) {
        return Err(refuse("FI_EP_DGRAM is not offered by tcp (see the udp provider)".into()));
    }
    if matches!(h.addr_format, AddrFormat::Str) {
        return Err(refuse("FI_ADDR_STR is not an address format of tcp".into()));
    }
    let mut ifaces = interfaces()?;
    if let Some(want) = &cfg.iface {
        ifaces.retain(|i| &i.name == want);
        if ifaces.is_empty() {
            return Err(refuse(format!("FI_TCP_IFACE={want} names no interface that is up with an address")));
        }
    }
    // Source: from hints.src_addr, or node/service with FI_SOURCE.
    let mut src: Option<SocketAddr> = h.src_addr.as_ref().and_then(|a| a.sockaddr());
    if h.src_addr.is_some() && src.is_none() {
        return Err(refuse("source address is not a socket address".into()));
    }
    let mut dest: Option<SocketAddr> = h.dest_addr.as_ref().and_then(|a| a.sockaddr());
    if h.source {
        if h.node.is_some() || h.service.is_some() {
            let node = h.node.as_deref().unwrap_or("0.0.0.0");
            src = Some(resolve(Some(node), h.service.as_deref())?[0]);
        }
    } else if h.node.is_some() {
        let addrs = resolve(h.node.as_deref(), h.service.as_deref())?;
        dest = Some(addrs[0]);
    } else if let Some(s) = &h.service {
        // A service alone names the local port to listen on (libfabric's
        // behaviour for passive endpoints).
        let port = resolve(Some("0.0.0.0"), Some(s))?[0].port();
        src = Some(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port));
    }
    if let Some(s) = src {
        if !s.ip().is_unspecified() {
            ifaces.retain(|i| i.addr == s.ip());
            if ifaces.is_empty() {
                return Err(refuse(format!("source address {} is not an address of an interface", s.ip())));
            }
        } else {
            ifaces.retain(|i| i.addr.is_ipv4() == s.is_ipv4());
        }
    }
    if let Some(d) = dest {
        let family: Vec<Iface> = ifaces.iter().filter(|i| i.addr.is_ipv4() == d.is_ipv4()).cloned().collect();
        let reach: Vec<Iface> = if d.ip().is_loopback() {
            family.iter().filter(|i| i.loopback).cloned().collect()
        } else if family.iter().any(|i| i.addr == d.ip()) {
            family.iter().filter(|i| i.addr == d.ip()).cloned().collect()
        } else {
            let mut v: Vec<Iface> = family.iter().filter(|i| i.contains(&d.ip()) && !i.loopback).cloned().collect();
            v.extend(family.iter().filter(|i| !i.contains(&d.ip()) && !i.loopback).cloned());
            v
        };
        if reach.is_empty() {
            return Err(refuse(format!("no interface can reach {d}")));
        }
        ifaces = reach;
    }
    let types: &[EpType] = match h.ep_type {
        EpType::Unspec => &[EpType::Msg, EpType::Rdm],
        EpType::Msg => &[EpType::Msg],
        _ => &[EpType::Rdm],
    };
    let mut out = Vec::new();
    let mut reasons = Vec::new();
    for iface in &ifaces {
        for t in types {
            let mut info = base_info(iface, *t);
            if let Some(s) = src {
                let ip = if s.ip().is_unspecified() { iface.addr } else { s.ip() };
                info.src_addr = Some(Address::Sockaddr(SocketAddr::new(ip, s.port())));
            }
            if let Some(d) = dest {
                info.dest_addr = Some(Address::Sockaddr(d));
            }
            // Data progress is manual unless automatic is asked for: then the
            // domain runs a progress thread.
            if h.data_progress == Progress::Auto {
                info.domain_attr.data_progress = Progress::Auto;
            }
            // Regions are addressed by virtual address and keyed by the provider,
            // unless the application supports neither: then by offset, and with
            // the keys it asks for.
            if let Some(m) = h.mr_mode {
                info.domain_attr.mr_mode &= m | !(MrMode::VIRT_ADDR | MrMode::PROV_KEY);
            }
            match info.check(h) {
                Ok(()) => out.push(info),
                Err(why) => reasons.push(format!("{} {}: {why}", iface.name, t)),
            }
        }
    }
    if out.is_empty() {
        let why = if reasons.is_empty() { "no interface up".to_string() } else { reasons.join("; ") };
        return Err(refuse(why));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_offered_with_its_subnet() {
        let v = getinfo(&Hints::new().node("127.0.0.1").service("4000")).unwrap();
        assert!(!v.is_empty());
        for i in &v {
            assert_eq!(i.domain_attr.name, "lo");
            assert_eq!(i.fabric_attr.name, "127.0.0.0/8");
            assert_eq!(i.dest_addr, Some(Address::Sockaddr("127.0.0.1:4000".parse().unwrap())));
        }
        assert!(v.iter().any(|i| i.ep_attr.ep_type == EpType::Msg));
        assert!(v.iter().any(|i| i.ep_attr.ep_type == EpType::Rdm));
    }

    #[test]
    fn impossible_hints_give_nodata() {
        assert_eq!(getinfo(&Hints::new().ep_type(EpType::Dgram)).unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new().caps(Caps::MULTICAST)).unwrap_err(), Error::NoData);
        assert_eq!(
            getinfo(&Hints::new().node("127.0.0.1").source(true).domain("nonexistent0")).unwrap_err(),
            Error::NoData
        );
        assert_eq!(getinfo(&Hints::new().node("192.0.2.77").source(true)).unwrap_err(), Error::NoData);
    }

    #[test]
    fn source_and_services_resolve() {
        let v = getinfo(&Hints::new().node("127.0.0.1").service("5555").source(true).ep_type(EpType::Rdm)).unwrap();
        assert_eq!(v[0].src_addr, Some(Address::Sockaddr("127.0.0.1:5555".parse().unwrap())));
        assert_eq!(resolve(Some("localhost"), Some("80")).unwrap()[0].port(), 80);
        assert!(resolve(Some("127.0.0.1"), Some("no-such-service-xyz")).is_err());
    }

    #[test]
    fn offset_addressing_when_asked() {
        let h = Hints { mr_mode: Some(MrMode::empty()), ..Hints::new().node("127.0.0.1").source(true) };
        let v = getinfo(&h).unwrap();
        assert!(v.iter().all(|i| i.domain_attr.mr_mode.is_empty()));
        let h = Hints { mr_mode: Some(MrMode::VIRT_ADDR | MrMode::PROV_KEY), ..Hints::new().node("127.0.0.1") };
        let v = getinfo(&h).unwrap();
        assert!(v.iter().all(|i| i.domain_attr.mr_mode == MrMode::VIRT_ADDR | MrMode::PROV_KEY));
    }

    #[test]
    fn subnet_names() {
        let i = Iface { name: "x".into(), addr: "10.1.2.3".parse().unwrap(), prefix: 16, loopback: false };
        assert_eq!(i.subnet(), "10.1.0.0/16");
        assert!(i.contains(&"10.1.200.1".parse().unwrap()));
        assert!(!i.contains(&"10.2.0.1".parse().unwrap()));
    }
}

//! What the udp provider offers: one domain per interface address, named after the
//! interface, in a fabric named after its subnet; DGRAM and RDM endpoints on each.
//!
//! A DGRAM message is one datagram that is never fragmented, so its largest size
//! (`max_msg_size`, and `inject_size`, since a send leaves at once) is the
//! interface's MTU less the IP and UDP headers: 1472 bytes on an Ethernet link
//! (1500), 65507 on loopback (the most an IPv4 datagram carries).

use crate::{config, NAME, VERSION};
use fabric_core::log::Level;
use fabric_core::{
    fi_log, AddrFormat, Address, AvType, Caps, DomainAttr, EpAttr, EpType, Error, FabricAttr, Hints, Info, Mode,
    MrMode, MsgOrder, Progress, Protocol, ResourceMgmt, Result, RxAttr, Threading, TxAttr,
};
use fabric_util::iface::{self, Iface, SelectOpts};
use std::net::SocketAddr;

/// Most iov entries in one operation.
pub(crate) const IOV_LIMIT: usize = fabric_util::rx::IOV_LIMIT;
/// Queue depths: a DGRAM endpoint holds at most this many posted receives
/// (more: `FI_EAGAIN`), allocated when it opens.
pub(crate) const QUEUE_SIZE: usize = 1024;

/// The capabilities of a DGRAM endpoint on an interface address (multicast
/// groups are IPv4 only).
fn dgram_caps(ipv6: bool) -> Caps {
    let caps = Caps::MSG | Caps::SEND | Caps::RECV | Caps::SOURCE | Caps::LOCAL_COMM | Caps::REMOTE_COMM;
    if ipv6 {
        caps
    } else {
        caps | Caps::MULTICAST
    }
}

/// The capabilities of an RDM endpoint (tcp's RDM set).
fn rdm_caps() -> Caps {
    Caps::MSG
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
        | Caps::MULTI_RECV
        | Caps::DIRECTED_RECV
        | Caps::SOURCE
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM
}

/// The entry offered on one interface address for one endpoint type, whose
/// datagrams carry at most `max_dgram` bytes.
pub(crate) fn base_info(iface: &Iface, ep_type: EpType, max_dgram: usize) -> Info {
    let dgram = ep_type == EpType::Dgram;
    let caps = if dgram { dgram_caps(iface.addr.is_ipv6()) } else { rdm_caps() };
    // Datagrams are neither ordered nor reliable; the RDM protocol orders sends.
    let order = if dgram { MsgOrder::empty() } else { MsgOrder::SAS };
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: if iface.addr.is_ipv4() { AddrFormat::SockaddrIn } else { AddrFormat::SockaddrIn6 },
        src_addr: Some(Address::Sockaddr(SocketAddr::new(iface.addr, 0))),
        dest_addr: None,
        handle: None,
        tx_attr: TxAttr {
            caps: caps.tx_part(),
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            inject_size: if dgram { max_dgram } else { crate::rdm::RDM_INJECT },
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: if dgram { 0 } else { 1 },
        },
        rx_attr: RxAttr {
            caps: caps.rx_part(),
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            total_buffered_recv: 0,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
        },
        ep_attr: EpAttr {
            ep_type,
            protocol: if dgram { Protocol::Udp } else { Protocol::Rxd },
            protocol_version: if dgram { 0 } else { 1 },
            max_msg_size: if dgram { max_dgram } else { crate::rdm::MAX_MSG },
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: if dgram { 0 } else { fabric_core::info::TAG_GENERIC },
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
            cq_data_size: if dgram { 0 } else { 8 },
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

/// Whether the udp provider takes `a` (into an address vector, as a name).
pub(crate) fn is_udp_addr(a: &Address) -> bool {
    a.sockaddr().is_some()
}

/// `getinfo` for the udp provider.
pub(crate) fn getinfo(h: &Hints) -> Result<Vec<Info>> {
    let cfg = config();
    let refuse = |why: String| {
        fi_log!(Level::Info, NAME, "core", "no entry: {why}");
        Error::NoData
    };
    if matches!(h.ep_type, EpType::Msg) {
        return Err(refuse("FI_EP_MSG is not offered by udp (see the tcp provider)".into()));
    }
    if matches!(h.addr_format, AddrFormat::Str) {
        return Err(refuse("FI_ADDR_STR is not an address format of udp".into()));
    }
    let opts =
        SelectOpts { prov: NAME, proto: "udp", only_iface: cfg.iface.as_deref(), only_iface_var: "FI_UDP_IFACE" };
    let sel = iface::select(h, &opts)?;
    let types: &[EpType] = match h.ep_type {
        EpType::Dgram => &[EpType::Dgram],
        EpType::Rdm => &[EpType::Rdm],
        _ => &[EpType::Dgram, EpType::Rdm],
    };
    iface::entries(h, NAME, &sel, types, |i, t| base_info(i, t, i.max_udp_payload()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lo() -> Option<Iface> {
        iface::interfaces().unwrap().into_iter().find(|i| i.loopback && i.addr.is_ipv4())
    }

    #[test]
    fn dgram_sizes_follow_the_mtu() {
        let v = getinfo(&Hints::new().ep_type(EpType::Dgram)).unwrap();
        assert!(!v.is_empty());
        for i in &v {
            let mtu = iface::mtu(&i.domain_attr.name).unwrap();
            let v6 = i.addr_format == AddrFormat::SockaddrIn6;
            let want = mtu.saturating_sub(if v6 { 48 } else { 28 });
            let want = want.min(if v6 { 65527 } else { 65507 });
            assert_eq!(i.ep_attr.max_msg_size, want, "{} mtu {mtu}", i.domain_attr.name);
            assert_eq!(i.tx_attr.inject_size, want, "{}", i.domain_attr.name);
            assert_eq!(i.ep_attr.protocol, Protocol::Udp);
            assert!(i.caps.contains(Caps::MSG | Caps::SEND | Caps::RECV | Caps::SOURCE));
            assert_eq!(i.caps.contains(Caps::MULTICAST), !v6);
            assert!(!i.caps.intersects(Caps::TAGGED | Caps::RMA | Caps::ATOMIC));
        }
    }

    #[test]
    fn sizes_of_typical_links() {
        let eth =
            Iface { name: "eth9".into(), addr: "10.0.0.1".parse().unwrap(), prefix: 24, loopback: false, index: 9 };
        let i = base_info(&eth, EpType::Dgram, iface::max_udp_payload(1500, false));
        assert_eq!((i.ep_attr.max_msg_size, i.tx_attr.inject_size), (1472, 1472));
        let i = base_info(&eth, EpType::Dgram, iface::max_udp_payload(9000, false));
        assert_eq!(i.ep_attr.max_msg_size, 8972);
        let i = base_info(&eth, EpType::Dgram, iface::max_udp_payload(65536, false));
        assert_eq!(i.ep_attr.max_msg_size, 65507);
        let i = base_info(&eth, EpType::Rdm, 1472);
        assert_eq!(i.ep_attr.protocol, Protocol::Rxd);
        assert!(i.caps.contains(Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::DIRECTED_RECV));
        assert!(!i.caps.contains(Caps::MULTICAST));
    }

    #[test]
    fn loopback_is_offered_with_its_subnet() {
        if lo().is_none() {
            println!("skipped: no IPv4 loopback");
            return;
        }
        let v = getinfo(&Hints::new().node("127.0.0.1").service("4000")).unwrap();
        for i in &v {
            assert_eq!(i.domain_attr.name, "lo");
            assert_eq!(i.fabric_attr.name, "127.0.0.0/8");
            assert_eq!(i.dest_addr, Some(Address::Sockaddr("127.0.0.1:4000".parse().unwrap())));
        }
        assert!(v.iter().any(|i| i.ep_attr.ep_type == EpType::Dgram));
        assert!(v.iter().any(|i| i.ep_attr.ep_type == EpType::Rdm));
        let v = getinfo(&Hints::new().node("127.0.0.1").service("5555").source(true)).unwrap();
        assert_eq!(v[0].src_addr, Some(Address::Sockaddr("127.0.0.1:5555".parse().unwrap())));
    }

    #[test]
    fn impossible_hints_give_nodata() {
        assert_eq!(getinfo(&Hints::new().ep_type(EpType::Msg)).unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new().addr_format(AddrFormat::Str)).unwrap_err(), Error::NoData);
        let h = Hints::new().ep_type(EpType::Dgram).caps(Caps::TAGGED);
        assert_eq!(getinfo(&h).unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new().node("192.0.2.77").source(true)).unwrap_err(), Error::NoData);
        assert_eq!(
            getinfo(&Hints::new().node("127.0.0.1").source(true).domain("nonexistent0")).unwrap_err(),
            Error::NoData
        );
    }

    #[test]
    fn multicast_narrows_to_dgram() {
        let v = getinfo(&Hints::new().caps(Caps::MULTICAST)).unwrap();
        assert!(v.iter().all(|i| i.ep_attr.ep_type == EpType::Dgram && i.addr_format == AddrFormat::SockaddrIn));
    }
}

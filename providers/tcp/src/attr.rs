//! What the tcp provider offers: one domain per interface address, named after the
//! interface, in a fabric named after its subnet; MSG and RDM endpoints on each.

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
/// Queue depths reported (operations are queued in software without a hard limit;
/// these are the sizes the queues are pre-allocated for).
pub(crate) const QUEUE_SIZE: usize = 1024;

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
            inject_size: cfg.inject_size,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: 1,
        },
        rx_attr: RxAttr {
            caps: caps.rx_part(),
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
            mem_tag_format: fabric_core::info::TAG_GENERIC,
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
    let opts =
        SelectOpts { prov: NAME, proto: "tcp", only_iface: cfg.iface.as_deref(), only_iface_var: "FI_TCP_IFACE" };
    let sel = iface::select(h, &opts)?;
    let types: &[EpType] = match h.ep_type {
        EpType::Unspec => &[EpType::Msg, EpType::Rdm],
        EpType::Msg => &[EpType::Msg],
        _ => &[EpType::Rdm],
    };
    iface::entries(h, NAME, &sel, types, base_info)
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
        assert_eq!(iface::resolve(NAME, "tcp", Some("localhost"), Some("80")).unwrap()[0].port(), 80);
        assert!(iface::resolve(NAME, "tcp", Some("127.0.0.1"), Some("no-such-service-xyz")).is_err());
    }

    #[test]
    fn automatic_control_progress_comes_with_automatic_data_progress_for_rdm() {
        let lo = || Hints::new().node("127.0.0.1").source(true);
        let both = Hints { data_progress: Progress::Auto, control_progress: Progress::Auto, ..lo() };
        let v = getinfo(&Hints { ep_type: EpType::Rdm, ..both.clone() }).unwrap();
        for i in &v {
            assert_eq!(i.domain_attr.data_progress, Progress::Auto);
            assert_eq!(i.domain_attr.control_progress, Progress::Auto);
        }
        // MSG endpoints' connection requests reach passive endpoints, which the
        // progress thread does not drive.
        assert_eq!(getinfo(&Hints { ep_type: EpType::Msg, ..both }).unwrap_err(), Error::NoData);
        // Control alone would need the thread that only data progress starts.
        let control = Hints { control_progress: Progress::Auto, ep_type: EpType::Rdm, ..lo() };
        assert_eq!(getinfo(&control).unwrap_err(), Error::NoData);
        // Data alone leaves control manual.
        let data = Hints { data_progress: Progress::Auto, ep_type: EpType::Rdm, ..lo() };
        assert!(getinfo(&data).unwrap().iter().all(|i| i.domain_attr.control_progress == Progress::Manual));
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
}

//! What the shm provider offers: one fabric and one domain (this host), RDM
//! endpoints addressed by name (`FI_ADDR_STR`, `fi_shm://<name>`).

use crate::proto::INLINE_MAX;
use crate::segment::BOUNCE_SIZE;
use crate::{NAME, VERSION};
use fabric_core::info::{
    AvType, DomainAttr, EpAttr, FabricAttr, Progress, Protocol, ResourceMgmt, RxAttr, Threading, TxAttr,
};
use fabric_core::log::Level;
use fabric_core::{fi_log, AddrFormat, Address, Caps, EpType, Error, Hints, Info, Mode, MrMode, MsgOrder, Result};

/// Pieces in one operation's buffer list.
pub(crate) const IOV_LIMIT: usize = fabric_util::rx::IOV_LIMIT;
/// Operations an endpoint keeps in flight per direction (advisory).
pub(crate) const QUEUE_SIZE: usize = 1024;
/// libfabric's generic tag format: all 64 bits usable.
/// The scheme of an shm address.
pub(crate) const SCHEME: &str = "fi_shm://";

/// The one entry shm offers.
pub(crate) fn base_info() -> Info {
    let caps = Caps::MSG
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
        | Caps::LOCAL_COMM;
    let order = MsgOrder::SAS;
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: AddrFormat::Str,
        src_addr: None,
        dest_addr: None,
        handle: None,
        tx_attr: TxAttr {
            caps: caps.tx_part(),
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            inject_size: BOUNCE_SIZE.max(INLINE_MAX),
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
            total_buffered_recv: BOUNCE_SIZE,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
        },
        ep_attr: EpAttr {
            ep_type: EpType::Rdm,
            protocol: Protocol::Shm,
            protocol_version: crate::proto::VERSION as u32,
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
            name: NAME.to_string(),
            threading: Threading::Safe,
            control_progress: Progress::Manual,
            data_progress: Progress::Manual,
            resource_mgmt: ResourceMgmt::Enabled,
            av_type: AvType::Unspec,
            mr_mode: MrMode::PROV_KEY | MrMode::VIRT_ADDR,
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 256,
            ep_cnt: 256,
            tx_ctx_cnt: 256,
            rx_ctx_cnt: 256,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 0,
            max_ep_srx_ctx: 0,
            cntr_cnt: 256,
            mr_iov_limit: 1,
            caps: Caps::LOCAL_COMM,
            mode: Mode::empty(),
            auth_key_size: 0,
            max_err_data: 0,
            mr_cnt: 1 << 16,
        },
        fabric_attr: FabricAttr {
            name: NAME.to_string(),
            prov_name: NAME.to_string(),
            prov_version: VERSION,
            api_version: fabric_core::info::API_VERSION,
        },
    }
}

/// Whether `a` is an shm address.
pub(crate) fn is_shm_addr(a: &Address) -> bool {
    matches!(a, Address::Str(s) if s.starts_with(SCHEME) && s.len() > SCHEME.len())
}

pub(crate) fn getinfo(h: &Hints) -> Result<Vec<Info>> {
    // The parameters are read (and bad settings reported) when shm is first asked,
    // not when its first endpoint opens.
    crate::config();
    let refuse = |why: String| {
        fi_log!(Level::Info, NAME, "core", "no entry: {why}");
        Error::NoData
    };
    if !matches!(h.ep_type, EpType::Unspec | EpType::Rdm) {
        return Err(refuse(format!("{} is not offered by shm (RDM only)", h.ep_type)));
    }
    if !matches!(h.addr_format, AddrFormat::Unspec | AddrFormat::Str) {
        return Err(refuse(format!("{} is not an address format of shm (FI_ADDR_STR)", h.addr_format.name())));
    }
    let mut info = base_info();
    for (what, a) in [("source", &h.src_addr), ("destination", &h.dest_addr)] {
        if let Some(a) = a {
            if !is_shm_addr(a) {
                return Err(refuse(format!("{what} address {a} is not an shm address ({SCHEME}<name>)")));
            }
        }
    }
    info.src_addr = h.src_addr.clone();
    info.dest_addr = h.dest_addr.clone();
    if h.node.is_some() && !h.source {
        // A node names a peer: only ours (shm reaches this host alone).
        let node = h.node.as_deref().unwrap_or_default();
        if node.starts_with(SCHEME) {
            info.dest_addr = Some(Address::Str(node.to_string()));
        } else if !matches!(node, "localhost" | "127.0.0.1" | "::1") {
            return Err(refuse(format!("node {node} is not this host")));
        }
    }
    if h.data_progress == Progress::Auto {
        info.domain_attr.data_progress = Progress::Auto;
    }
    if let Some(m) = h.mr_mode {
        info.domain_attr.mr_mode &= m | !(MrMode::VIRT_ADDR | MrMode::PROV_KEY);
    }
    match info.check(h) {
        Ok(()) => Ok(vec![info]),
        Err(why) => Err(refuse(why.to_string())),
    }
}

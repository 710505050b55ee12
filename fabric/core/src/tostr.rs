//! `fi_tostr` for fabric's types: the text libfabric 1.17 prints for `struct fi_info`
//! and its attributes (`fi_info -v`, `fi_pingpong -v`), field for field, with the
//! same names, order, indentation and value spellings (`[ FI_MSG, FI_RMA ]`, `[  ]`
//! for no bits, `(null)` for no address, `117.0` for a version).

use crate::flags::{CAP_NAMES, MODE_NAMES, MR_MODE_NAMES, OP_FLAG_NAMES, ORDER_NAMES};
use crate::info::{version_major, version_minor};
use crate::{Address, Caps, DomainAttr, EpAttr, FabricAttr, Info, Mode, MrMode, MsgOrder, OpFlags, RxAttr, TxAttr};
use std::fmt::Write;

const TAB: &str = "    ";

/// The capability names in the order `fi_tostr` prints them (libfabric's
/// `ofi_tostr_caps`, which is not bit order: `FI_HMEM` comes last). Names fabric
/// knows and this list lacks are printed after, in bit order.
const CAP_ORDER: &[&str] = &[
    "FI_MSG",
    "FI_RMA",
    "FI_TAGGED",
    "FI_ATOMIC",
    "FI_MULTICAST",
    "FI_COLLECTIVE",
    "FI_READ",
    "FI_WRITE",
    "FI_RECV",
    "FI_SEND",
    "FI_REMOTE_READ",
    "FI_REMOTE_WRITE",
    "FI_MULTI_RECV",
    "FI_REMOTE_CQ_DATA",
    "FI_PEEK",
    "FI_TRIGGER",
    "FI_FENCE",
    "FI_VARIABLE_MSG",
    "FI_RMA_PMEM",
    "FI_SOURCE_ERR",
    "FI_LOCAL_COMM",
    "FI_REMOTE_COMM",
    "FI_SHARED_AV",
    "FI_RMA_EVENT",
    "FI_SOURCE",
    "FI_NAMED_RX_CTX",
    "FI_DIRECTED_RECV",
    "FI_HMEM",
];

/// `[ A, B ]` from names, `[  ]` for none.
fn bracket<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    format!("[ {} ]", names.join(", "))
}

/// The names of the set bits of `bits`, in the order of `table`.
fn names_in_table(bits: u64, table: &'static [(u64, &'static str)]) -> impl Iterator<Item = &'static str> {
    table.iter().filter(move |(b, _)| *b != 0 && bits & b == *b).map(|(_, n)| *n)
}

/// Capabilities as `fi_tostr(FI_TYPE_CAPS)` prints them: `[ FI_MSG, FI_RMA ]`.
pub fn caps_str(caps: Caps) -> String {
    let bits = caps.bits();
    let bit_of = |name: &str| CAP_NAMES.iter().find(|(_, n)| *n == name).map(|(b, _)| *b);
    let ordered = CAP_ORDER.iter().copied().filter(|n| bit_of(n).is_some_and(|b| bits & b == b));
    let rest = names_in_table(bits, CAP_NAMES).filter(|n| !CAP_ORDER.contains(n));
    bracket(ordered.chain(rest))
}

/// Mode bits: `[ FI_CONTEXT ]`.
pub fn mode_str(mode: Mode) -> String {
    bracket(names_in_table(mode.bits(), MODE_NAMES))
}

/// Operation flags: `[ FI_COMPLETION ]`.
pub fn op_flags_str(flags: OpFlags) -> String {
    bracket(names_in_table(flags.bits(), OP_FLAG_NAMES))
}

/// Message ordering: every `FI_ORDER_*` bit by name.
pub fn msg_order_str(order: MsgOrder) -> String {
    bracket(names_in_table(order.bits(), ORDER_NAMES))
}

/// Completion ordering as libfabric prints it: `FI_ORDER_NONE` or `FI_ORDER_STRICT`
/// (or nothing for a partial set), then `FI_ORDER_DATA` if set.
pub fn comp_order_str(order: MsgOrder) -> String {
    let strict = MsgOrder::STRICT.bits();
    let mut names = Vec::new();
    match order.bits() & strict {
        0 => names.push("FI_ORDER_NONE"),
        s if s == strict => names.push("FI_ORDER_STRICT"),
        _ => {}
    }
    if order.contains(MsgOrder::DATA) {
        names.push("FI_ORDER_DATA");
    }
    bracket(names)
}

/// Memory registration mode: `[ FI_MR_LOCAL, FI_MR_VIRT_ADDR ]`.
pub fn mr_mode_str(mode: MrMode) -> String {
    bracket(names_in_table(u64::from(mode.bits()), MR_MODE_NAMES))
}

/// `FI_VERSION` as `fi_tostr` prints it: `major.minor`.
pub fn version_str(v: u32) -> String {
    format!("{}.{}", version_major(v), version_minor(v))
}

/// The length libfabric reports for an address (`src_addrlen`): the size of the
/// `sockaddr` structure, or the string's length with its terminating NUL.
pub fn addr_len(addr: Option<&Address>) -> usize {
    match addr {
        None => 0,
        Some(a) => match a.sockaddr() {
            Some(std::net::SocketAddr::V4(_)) => 16,
            Some(std::net::SocketAddr::V6(_)) => 28,
            None => a.to_uri().len() + 1,
        },
    }
}

/// An address as `fi_tostr` prints it: the URI, or `(null)`.
pub fn addr_str(addr: Option<&Address>) -> String {
    match addr {
        None => "(null)".to_string(),
        Some(Address::Sockaddr(std::net::SocketAddr::V6(s))) => {
            // libfabric prints no scope id.
            format!("fi_sockaddr_in6://[{}]:{}", s.ip(), s.port())
        }
        Some(a) => a.to_uri(),
    }
}

/// `fi_tostr(tx_attr, FI_TYPE_TX_ATTR)` at `prefix`.
pub fn tx_attr_str(out: &mut String, a: &TxAttr, prefix: &str) {
    let p = format!("{prefix}{TAB}");
    let _ = writeln!(out, "{prefix}fi_tx_attr:");
    let _ = writeln!(out, "{p}caps: {}", caps_str(a.caps));
    let _ = writeln!(out, "{p}mode: {}", mode_str(a.mode));
    let _ = writeln!(out, "{p}op_flags: {}", op_flags_str(a.op_flags));
    let _ = writeln!(out, "{p}msg_order: {}", msg_order_str(a.msg_order));
    let _ = writeln!(out, "{p}comp_order: {}", comp_order_str(a.comp_order));
    let _ = writeln!(out, "{p}inject_size: {}", a.inject_size);
    let _ = writeln!(out, "{p}size: {}", a.size);
    let _ = writeln!(out, "{p}iov_limit: {}", a.iov_limit);
    let _ = writeln!(out, "{p}rma_iov_limit: {}", a.rma_iov_limit);
    let _ = writeln!(out, "{p}tclass: 0x0");
}

/// `fi_tostr(rx_attr, FI_TYPE_RX_ATTR)` at `prefix`.
pub fn rx_attr_str(out: &mut String, a: &RxAttr, prefix: &str) {
    let p = format!("{prefix}{TAB}");
    let _ = writeln!(out, "{prefix}fi_rx_attr:");
    let _ = writeln!(out, "{p}caps: {}", caps_str(a.caps));
    let _ = writeln!(out, "{p}mode: {}", mode_str(a.mode));
    let _ = writeln!(out, "{p}op_flags: {}", op_flags_str(a.op_flags));
    let _ = writeln!(out, "{p}msg_order: {}", msg_order_str(a.msg_order));
    let _ = writeln!(out, "{p}comp_order: {}", comp_order_str(a.comp_order));
    let _ = writeln!(out, "{p}total_buffered_recv: {}", a.total_buffered_recv);
    let _ = writeln!(out, "{p}size: {}", a.size);
    let _ = writeln!(out, "{p}iov_limit: {}", a.iov_limit);
}

/// `fi_tostr(ep_attr, FI_TYPE_EP_ATTR)` at `prefix`.
pub fn ep_attr_str(out: &mut String, a: &EpAttr, prefix: &str) {
    let p = format!("{prefix}{TAB}");
    let _ = writeln!(out, "{prefix}fi_ep_attr:");
    let _ = writeln!(out, "{p}type: {}", a.ep_type);
    let _ = writeln!(out, "{p}protocol: {}", a.protocol);
    let _ = writeln!(out, "{p}protocol_version: {}", a.protocol_version);
    let _ = writeln!(out, "{p}max_msg_size: {}", a.max_msg_size);
    let _ = writeln!(out, "{p}msg_prefix_size: {}", a.msg_prefix_size);
    let _ = writeln!(out, "{p}max_order_raw_size: {}", a.max_order_raw_size);
    let _ = writeln!(out, "{p}max_order_war_size: {}", a.max_order_war_size);
    let _ = writeln!(out, "{p}max_order_waw_size: {}", a.max_order_waw_size);
    let _ = writeln!(out, "{p}mem_tag_format: 0x{:016x}", a.mem_tag_format);
    let _ = writeln!(out, "{p}tx_ctx_cnt: {}", a.tx_ctx_cnt);
    let _ = writeln!(out, "{p}rx_ctx_cnt: {}", a.rx_ctx_cnt);
    let _ = writeln!(out, "{p}auth_key_size: {}", a.auth_key_size);
}

/// `fi_tostr(domain_attr, FI_TYPE_DOMAIN_ATTR)` at `prefix`.
pub fn domain_attr_str(out: &mut String, a: &DomainAttr, prefix: &str) {
    let p = format!("{prefix}{TAB}");
    let _ = writeln!(out, "{prefix}fi_domain_attr:");
    let _ = writeln!(out, "{p}domain: 0x0");
    let _ = writeln!(out, "{p}name: {}", a.name);
    let _ = writeln!(out, "{p}threading: {}", a.threading);
    let _ = writeln!(out, "{p}control_progress: {}", a.control_progress);
    let _ = writeln!(out, "{p}data_progress: {}", a.data_progress);
    let _ = writeln!(out, "{p}resource_mgmt: {}", a.resource_mgmt);
    let _ = writeln!(out, "{p}av_type: {}", a.av_type);
    let _ = writeln!(out, "{p}mr_mode: {}", mr_mode_str(a.mr_mode));
    let _ = writeln!(out, "{p}mr_key_size: {}", a.mr_key_size);
    let _ = writeln!(out, "{p}cq_data_size: {}", a.cq_data_size);
    let _ = writeln!(out, "{p}cq_cnt: {}", a.cq_cnt);
    let _ = writeln!(out, "{p}ep_cnt: {}", a.ep_cnt);
    let _ = writeln!(out, "{p}tx_ctx_cnt: {}", a.tx_ctx_cnt);
    let _ = writeln!(out, "{p}rx_ctx_cnt: {}", a.rx_ctx_cnt);
    let _ = writeln!(out, "{p}max_ep_tx_ctx: {}", a.max_ep_tx_ctx);
    let _ = writeln!(out, "{p}max_ep_rx_ctx: {}", a.max_ep_rx_ctx);
    let _ = writeln!(out, "{p}max_ep_stx_ctx: {}", a.max_ep_stx_ctx);
    let _ = writeln!(out, "{p}max_ep_srx_ctx: {}", a.max_ep_srx_ctx);
    let _ = writeln!(out, "{p}cntr_cnt: {}", a.cntr_cnt);
    let _ = writeln!(out, "{p}mr_iov_limit: {}", a.mr_iov_limit);
    let _ = writeln!(out, "{p}caps: {}", caps_str(a.caps));
    let _ = writeln!(out, "{p}mode: {}", mode_str(a.mode));
    let _ = writeln!(out, "{p}auth_key_size: {}", a.auth_key_size);
    let _ = writeln!(out, "{p}max_err_data: {}", a.max_err_data);
    let _ = writeln!(out, "{p}mr_cnt: {}", a.mr_cnt);
    let _ = writeln!(out, "{p}tclass: 0x0");
}

/// `fi_tostr(fabric_attr, FI_TYPE_FABRIC_ATTR)` at `prefix`.
pub fn fabric_attr_str(out: &mut String, a: &FabricAttr, prefix: &str) {
    let p = format!("{prefix}{TAB}");
    let _ = writeln!(out, "{prefix}fi_fabric_attr:");
    let _ = writeln!(out, "{p}name: {}", a.name);
    let _ = writeln!(out, "{p}prov_name: {}", a.prov_name);
    let _ = writeln!(out, "{p}prov_version: {}", version_str(a.prov_version));
    let _ = writeln!(out, "{p}api_version: {}", version_str(a.api_version));
}

/// `fi_tostr(info, FI_TYPE_INFO)`: the `fi_info:` block that `fi_info -v` prints
/// after each `---`, every line ending in a newline.
pub fn info_str(info: &Info) -> String {
    let handle = match &info.handle {
        None => "(nil)".to_string(),
        Some(h) => format!("{:p}", std::sync::Arc::as_ptr(&h.0) as *const u8),
    };
    let lens = (addr_len(info.src_addr.as_ref()), addr_len(info.dest_addr.as_ref()));
    info_str_with(info, lens, &handle)
}

/// [`info_str`] with the address lengths and the `handle` line's value given:
/// for a C `struct fi_info`, whose own fields they are (`fabric-capi`).
pub fn info_str_with(info: &Info, (src_addrlen, dest_addrlen): (usize, usize), handle: &str) -> String {
    let mut out = String::with_capacity(4096);
    let _ = writeln!(out, "fi_info:");
    let _ = writeln!(out, "{TAB}caps: {}", caps_str(info.caps));
    let _ = writeln!(out, "{TAB}mode: {}", mode_str(info.mode));
    let _ = writeln!(out, "{TAB}addr_format: {}", info.addr_format.name());
    let _ = writeln!(out, "{TAB}src_addrlen: {src_addrlen}");
    let _ = writeln!(out, "{TAB}dest_addrlen: {dest_addrlen}");
    let _ = writeln!(out, "{TAB}src_addr: {}", addr_str(info.src_addr.as_ref()));
    let _ = writeln!(out, "{TAB}dest_addr: {}", addr_str(info.dest_addr.as_ref()));
    let _ = writeln!(out, "{TAB}handle: {handle}");
    tx_attr_str(&mut out, &info.tx_attr, TAB);
    rx_attr_str(&mut out, &info.rx_attr, TAB);
    ep_attr_str(&mut out, &info.ep_attr, TAB);
    domain_attr_str(&mut out, &info.domain_attr, TAB);
    fabric_attr_str(&mut out, &info.fabric_attr, TAB);
    let _ = writeln!(out, "{TAB}nic: (nil)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::version;
    use crate::{AddrFormat, AvType, EpType, Progress, Protocol, ResourceMgmt, Threading};

    /// What libfabric 1.17's `fi_pingpong -p udp -v` printed for its udp entry on this
    /// machine (server side), copied verbatim.
    const LIBFABRIC_UDP: &str = "fi_info:
    caps: [ FI_MSG, FI_RECV, FI_SEND, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SOURCE ]
    mode: [  ]
    addr_format: FI_SOCKADDR_IN
    src_addrlen: 16
    dest_addrlen: 0
    src_addr: fi_sockaddr_in://192.0.2.2:0
    dest_addr: (null)
    handle: (nil)
    fi_tx_attr:
        caps: [ FI_MSG, FI_SEND ]
        mode: [  ]
        op_flags: [  ]
        msg_order: [  ]
        comp_order: [ FI_ORDER_STRICT ]
        inject_size: 1472
        size: 1024
        iov_limit: 4
        rma_iov_limit: 0
        tclass: 0x0
    fi_rx_attr:
        caps: [ FI_MSG, FI_RECV, FI_SOURCE ]
        mode: [  ]
        op_flags: [  ]
        msg_order: [  ]
        comp_order: [ FI_ORDER_STRICT ]
        total_buffered_recv: 0
        size: 1024
        iov_limit: 4
    fi_ep_attr:
        type: FI_EP_DGRAM
        protocol: FI_PROTO_UDP
        protocol_version: 0
        max_msg_size: 1472
        msg_prefix_size: 0
        max_order_raw_size: 0
        max_order_war_size: 0
        max_order_waw_size: 0
        mem_tag_format: 0x0000000000000000
        tx_ctx_cnt: 1
        rx_ctx_cnt: 1
        auth_key_size: 0
    fi_domain_attr:
        domain: 0x0
        name: eth0
        threading: FI_THREAD_SAFE
        control_progress: FI_PROGRESS_AUTO
        data_progress: FI_PROGRESS_AUTO
        resource_mgmt: FI_RM_ENABLED
        av_type: FI_AV_UNSPEC
        mr_mode: [  ]
        mr_key_size: 8
        cq_data_size: 0
        cq_cnt: 256
        ep_cnt: 256
        tx_ctx_cnt: 256
        rx_ctx_cnt: 256
        max_ep_tx_ctx: 1
        max_ep_rx_ctx: 1
        max_ep_stx_ctx: 0
        max_ep_srx_ctx: 0
        cntr_cnt: 0
        mr_iov_limit: 0
        caps: [  ]
        mode: [  ]
        auth_key_size: 0
        max_err_data: 0
        mr_cnt: 0
        tclass: 0x0
    fi_fabric_attr:
        name: 192.0.2.0/24
        prov_name: udp
        prov_version: 117.0
        api_version: 1.17
    nic: (nil)
";

    fn udp_info() -> Info {
        let mut i = Info {
            caps: Caps::MSG | Caps::RECV | Caps::SEND | Caps::LOCAL_COMM | Caps::REMOTE_COMM | Caps::SOURCE,
            addr_format: AddrFormat::SockaddrIn,
            src_addr: Some(Address::parse("192.0.2.2:0").unwrap()),
            ..Default::default()
        };
        i.tx_attr = TxAttr {
            caps: Caps::MSG | Caps::SEND,
            comp_order: MsgOrder::STRICT,
            inject_size: 1472,
            size: 1024,
            iov_limit: 4,
            ..Default::default()
        };
        i.rx_attr = RxAttr {
            caps: Caps::MSG | Caps::RECV | Caps::SOURCE,
            comp_order: MsgOrder::STRICT,
            size: 1024,
            iov_limit: 4,
            ..Default::default()
        };
        i.ep_attr = EpAttr {
            ep_type: EpType::Dgram,
            protocol: Protocol::Udp,
            max_msg_size: 1472,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        };
        i.domain_attr = DomainAttr {
            name: "eth0".into(),
            threading: Threading::Safe,
            control_progress: Progress::Auto,
            data_progress: Progress::Auto,
            resource_mgmt: ResourceMgmt::Enabled,
            av_type: AvType::Unspec,
            mr_key_size: 8,
            cq_cnt: 256,
            ep_cnt: 256,
            tx_ctx_cnt: 256,
            rx_ctx_cnt: 256,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            ..Default::default()
        };
        i.fabric_attr = FabricAttr {
            name: "192.0.2.0/24".into(),
            prov_name: "udp".into(),
            prov_version: version(117, 0),
            api_version: version(1, 17),
        };
        i
    }

    #[test]
    fn info_matches_libfabric_byte_for_byte() {
        let got = info_str(&udp_info());
        for (n, (g, w)) in got.lines().zip(LIBFABRIC_UDP.lines()).enumerate() {
            assert_eq!(g, w, "line {}", n + 1);
        }
        assert_eq!(got, LIBFABRIC_UDP);
    }

    #[test]
    fn flag_words_as_libfabric_spells_them() {
        // tcp's and shm's lines from libfabric 1.17's `fi_info -v`.
        assert_eq!(
            caps_str(
                Caps::MSG
                    | Caps::RMA
                    | Caps::TAGGED
                    | Caps::ATOMIC
                    | Caps::READ
                    | Caps::WRITE
                    | Caps::RECV
                    | Caps::SEND
                    | Caps::REMOTE_READ
                    | Caps::REMOTE_WRITE
                    | Caps::MULTI_RECV
                    | Caps::RMA_EVENT
                    | Caps::SOURCE
                    | Caps::DIRECTED_RECV
                    | Caps::HMEM
            ),
            "[ FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_READ, FI_WRITE, FI_RECV, FI_SEND, FI_REMOTE_READ, \
             FI_REMOTE_WRITE, FI_MULTI_RECV, FI_RMA_EVENT, FI_SOURCE, FI_DIRECTED_RECV, FI_HMEM ]"
        );
        let order = MsgOrder::RAR
            | MsgOrder::RAW
            | MsgOrder::RAS
            | MsgOrder::WAW
            | MsgOrder::WAS
            | MsgOrder::SAW
            | MsgOrder::SAS
            | MsgOrder::RMA_RAR
            | MsgOrder::RMA_RAW
            | MsgOrder::RMA_WAW
            | MsgOrder::ATOMIC_RAR
            | MsgOrder::ATOMIC_RAW
            | MsgOrder::ATOMIC_WAW;
        assert_eq!(
            msg_order_str(order),
            "[ FI_ORDER_RAR, FI_ORDER_RAW, FI_ORDER_RAS, FI_ORDER_WAW, FI_ORDER_WAS, FI_ORDER_SAW, FI_ORDER_SAS, \
             FI_ORDER_RMA_RAR, FI_ORDER_RMA_RAW, FI_ORDER_RMA_WAW, FI_ORDER_ATOMIC_RAR, FI_ORDER_ATOMIC_RAW, \
             FI_ORDER_ATOMIC_WAW ]"
        );
        assert_eq!(comp_order_str(MsgOrder::empty()), "[ FI_ORDER_NONE ]");
        assert_eq!(comp_order_str(MsgOrder::STRICT), "[ FI_ORDER_STRICT ]");
        assert_eq!(comp_order_str(MsgOrder::STRICT | MsgOrder::DATA), "[ FI_ORDER_STRICT, FI_ORDER_DATA ]");
        assert_eq!(comp_order_str(MsgOrder::SAS), "[  ]");
        assert_eq!(mr_mode_str(MrMode::VIRT_ADDR), "[ FI_MR_VIRT_ADDR ]");
        assert_eq!(mode_str(Mode::empty()), "[  ]");
        assert_eq!(mode_str(Mode::CONTEXT | Mode::MSG_PREFIX), "[ FI_CONTEXT, FI_MSG_PREFIX ]");
        assert_eq!(op_flags_str(OpFlags::COMPLETION), "[ FI_COMPLETION ]");
        assert_eq!(version_str(version(117, 0)), "117.0");
    }

    #[test]
    fn every_capability_is_printed() {
        for (bit, name) in CAP_NAMES {
            assert_eq!(caps_str(Caps::from_bits_retain(*bit)), format!("[ {name} ]"));
        }
    }

    #[test]
    fn addresses_as_libfabric_prints_them() {
        let shm = Address::parse("fi_shm://4705").unwrap();
        assert_eq!(addr_len(Some(&shm)), 14);
        assert_eq!(addr_str(Some(&shm)), "fi_shm://4705");
        let v6 = Address::parse("[fe80::fc:ff:fe00:1]:0").unwrap();
        assert_eq!(addr_len(Some(&v6)), 28);
        assert_eq!(addr_str(Some(&v6)), "fi_sockaddr_in6://[fe80::fc:ff:fe00:1]:0");
        assert_eq!(addr_len(None), 0);
        assert_eq!(addr_str(None), "(null)");
    }
}

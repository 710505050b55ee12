//! What the verbs provider offers: one domain per RDMA device port that is active
//! and has an IP interface address, named after the device (`mlx5_0`, or
//! `mlx5_0-2` for a port other than the first), in a fabric named after the
//! port's GID subnet prefix (`IB-0xfe80000000000000`, as libfabric's verbs names
//! its fabrics); a MSG entry (native RC) and an RDM entry (over RC connections)
//! on each.
//!
//! Discovery (`ibv_get_device_list`, `ibv_query_device`, `ibv_query_port`, the
//! GID table) runs once per process: the devices and their ports do not change
//! under a running application. A port's IP address is the one its GID encodes
//! (RoCE v2: the GID of the interface's address, IPv4 preferred) or, on
//! InfiniBand, the address of the port's IPoIB interface. When nothing is usable
//! the reason (no kernel support, no device, a port down, no address, a filter
//! that matches nothing) is logged at info level on every query.

use crate::ibv::{self, Context, Cq, DeviceList, GidEntry, Pd};
use crate::{config, NAME, VERSION};
use fabric_core::log::Level;
use fabric_core::{
    fi_log, AddrFormat, Address, AvType, Caps, DomainAttr, EpAttr, EpType, Error, FabricAttr, Hints, Info, Mode,
    MrMode, MsgOrder, Progress, Protocol, ResourceMgmt, Result, RxAttr, Threading, TxAttr,
};
use fabric_util::iface::{self, Iface, SelectOpts};
use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// Most iov entries in one operation (the shared layer's limit).
const IOV_LIMIT: usize = fabric_util::rx::IOV_LIMIT;
/// Queue depths offered: at most this, and at most the device's `max_qp_wr`.
const QUEUE_SIZE: u32 = 1024;
/// The largest message of an RDM endpoint (libfabric's rxm offers 1 GiB too).
const RDM_MAX_MSG: usize = 1 << 30;
/// The inline size the probe starts from and halves (above what devices accept
/// for an RC QP; libfabric's verbs doubles from 2 while the device accepts and
/// then bisects, finding the exact limit where halving finds the largest power
/// of two below it).
const INLINE_PROBE_START: u32 = 1024;
/// `IBV_GID_TYPE_ROCE_V2`.
const GID_TYPE_ROCE_V2: u32 = rdma_sys::IBV_GID_TYPE_ROCE_V2;

/// The largest message an RDM endpoint sends with `inject` (copied into a
/// bounce buffer of the provider's).
pub(crate) const RDM_INJECT: usize = 8192;

/// The most RDMA reads and atomics a connection asks to have in flight each way
/// (libfabric's verbs provider asks for the device's limits; more than 16 buys
/// nothing for one endpoint's traffic).
pub(crate) const RD_ATOMIC_MAX: u8 = 16;

/// A device's read/atomic depth limit, within `0..=RD_ATOMIC_MAX`.
fn rd_atomic(device_max: i32) -> u8 {
    device_max.clamp(0, RD_ATOMIC_MAX as i32) as u8
}

/// One usable RDMA device port, as discovered.
#[derive(Debug, Clone)]
pub(crate) struct Port {
    /// The device's name (`rxe0`, `mlx5_0`).
    pub dev: String,
    /// The port number (1-based).
    pub port: u8,
    /// The GID index used: `FI_VERBS_GID_IDX`; else on RoCE the RoCE v2 GID of the
    /// interface's address (IPv4 preferred); else (InfiniBand) 0.
    pub gid_index: u32,
    /// The port's IP interface address (RoCE: the netdev of the chosen GID, with
    /// the address it encodes; InfiniBand: the IPoIB interface's address).
    pub iface: Iface,
    /// The fabric name: `IB-0x` and the subnet prefix (the first 8 bytes) of the
    /// port's GID at index `FI_VERBS_GID_IDX` or 0, as libfabric names it.
    pub fabric: String,
    /// The active MTU in bytes.
    pub mtu: usize,
    /// The largest message of one operation (`max_msg_sz` of the port).
    pub max_msg: usize,
    /// Most work requests of a queue pair.
    pub max_qp_wr: u32,
    /// Most scatter-gather entries of a work request.
    pub max_sge: u32,
    /// Most local scatter-gather entries of an RDMA READ (siw: 1).
    pub max_sge_rd: u32,
    /// Most entries of a completion queue.
    pub max_cqe: u32,
    /// Most queue pairs of the device.
    pub max_qp: u32,
    /// Most completion queues of the device.
    pub max_cq: u32,
    /// Most memory regions of the device.
    pub max_mr: u32,
    /// Whether the device does atomics (`atomic_cap` is not `IBV_ATOMIC_NONE`).
    pub atomics: bool,
    /// Whether the port is InfiniBand (else Ethernet: RoCE or iWARP).
    pub infiniband: bool,
    /// Whether the device is iWARP (`FI_PROTO_IWARP`; no immediate data, so no
    /// remote CQ data on MSG endpoints).
    pub iwarp: bool,
    /// Most receives a shared receive queue holds (0: the device has none).
    pub max_srq_wr: u32,
    /// RDMA reads and atomics a QP answers at once (`max_qp_rd_atom`, at most
    /// [`RD_ATOMIC_MAX`]).
    pub max_rd_atomic: u8,
    /// RDMA reads and atomics a QP has outstanding at once
    /// (`max_qp_init_rd_atom`, at most [`RD_ATOMIC_MAX`]).
    pub max_init_rd_atomic: u8,
    /// The largest inline size an RC QP of the device accepts (probed), at most
    /// `FI_VERBS_INLINE_SIZE` when set.
    pub max_inline: usize,
}

/// What discovery found: every device, the usable ports, and why the others are
/// not.
#[derive(Debug, Clone, Default)]
struct Discovery {
    /// Every device's name, in the library's order.
    devices: Vec<String>,
    /// The usable ports.
    ports: Vec<Port>,
    /// Why each unusable port (or device) is not: `(device, reason)`, the reason
    /// starting with the device's name.
    skipped: Vec<(String, String)>,
}

/// The text and the name of an OS error: `Function not implemented (ENOSYS)`.
fn os_err(e: &io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match e.raw_os_error() {
        Some(n) => match Error::from_errno(n) {
            Error::Other(_) => format!("{text} (errno {n})"),
            known => format!("{text} ({})", known.name().trim_start_matches("FI_")),
        },
        None => text,
    }
}

/// The name of a port state, as `ibv_port_state_str` gives it.
fn port_state_str(state: u32) -> &'static str {
    match state {
        0 => "PORT_NOP",
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        5 => "PORT_ACTIVE_DEFER",
        _ => "in an invalid state",
    }
}

/// The bytes of an `enum ibv_mtu` value (`IBV_MTU_256` = 1 ... `IBV_MTU_4096` =
/// 5); `None` for any other value.
pub(crate) fn mtu_bytes(mtu: u32) -> Option<usize> {
    (1..=5).contains(&mtu).then(|| 128usize << mtu)
}

/// The fabric name of a GID: `IB-0x` and its subnet prefix (the first 8 bytes)
/// in hex, as libfabric's verbs prints it (`PRIx64`: lower case, no padding).
pub(crate) fn fabric_name(gid: &[u8; 16]) -> String {
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&gid[..8]);
    format!("IB-0x{:x}", u64::from_be_bytes(prefix))
}

/// The domain name of a device port: the device's name for port 1, `<dev>-<port>`
/// for the others.
pub(crate) fn domain_name(dev: &str, port: u8) -> String {
    if port == 1 {
        dev.to_string()
    } else {
        format!("{dev}-{port}")
    }
}

/// The GID a port uses and the interface address that goes with it, from the
/// port's GID table `gids` and the machine's interface addresses `ifaces` (best
/// first, as [`iface::interfaces`] gives them). `ib_netdevs` are the IPoIB
/// interfaces of the port (InfiniBand), `gid_idx` the `FI_VERBS_GID_IDX`
/// override.
///
/// RoCE: the override's GID if set (with the address it encodes when that is an
/// address of its interface, else the interface's best address); otherwise the
/// RoCE v2 GID that encodes an address of the interface it belongs to, IPv4
/// first (so not RoCE v1 GIDs, nor the link-local `fe80::` ones, which are no
/// interface address that can be offered). InfiniBand: the override's GID or
/// GID 0, with the best address of the port's IPoIB interface (or of GID 0's
/// interface).
///
/// `Err` completes the sentence "`<dev> port <n>` ...", for the log.
pub(crate) fn choose_gid(
    link_layer: u8,
    gids: &[GidEntry],
    ifaces: &[Iface],
    ib_netdevs: &[String],
    gid_idx: Option<u32>,
) -> std::result::Result<(GidEntry, Iface), String> {
    let at = |i: u32| gids.iter().find(|g| g.index == i).copied();
    if link_layer == ibv::LINK_LAYER_ETHERNET {
        if let Some(i) = gid_idx {
            let g = at(i).ok_or_else(|| format!("has no GID at index {i} (FI_VERBS_GID_IDX)"))?;
            let own = ifaces.iter().filter(|f| g.ndev_ifindex != 0 && f.index == g.ndev_ifindex);
            let exact = own.clone().find(|f| f.addr == g.ip());
            return match exact.or_else(|| own.clone().next()) {
                Some(f) => Ok((g, f.clone())),
                None => Err(format!("has its GID {i} (FI_VERBS_GID_IDX) on no interface with an IP address")),
            };
        }
        return gids
            .iter()
            .filter(|g| g.gid_type == GID_TYPE_ROCE_V2 && g.ndev_ifindex != 0)
            .filter_map(|g| {
                let ip = g.ip();
                ifaces.iter().position(|f| f.index == g.ndev_ifindex && f.addr == ip).map(|p| (g, p))
            })
            .min_by_key(|(g, p)| (g.ip().is_ipv6(), *p, g.index))
            .map(|(g, p)| (*g, ifaces[p].clone()))
            .ok_or_else(|| "has no RoCE v2 GID with an IP address".to_string());
    }
    let i = gid_idx.unwrap_or(0);
    let g = at(i).ok_or_else(|| match gid_idx {
        Some(_) => format!("has no GID at index {i} (FI_VERBS_GID_IDX)"),
        None => "has no GID at index 0".to_string(),
    })?;
    let gid0_dev = at(0).map_or(0, |g| g.ndev_ifindex);
    ifaces
        .iter()
        .find(|f| ib_netdevs.contains(&f.name) || (gid0_dev != 0 && f.index == gid0_dev))
        .map(|f| (g, f.clone()))
        .ok_or_else(|| "has no IPoIB interface with an IP address".to_string())
}

/// The GID and interface of an iWARP port. An iWARP GID holds no IP address:
/// it is the MAC of the device's network interface padded with zeros (siw,
/// cxgb4, irdma), so the interface is the one whose MAC (`macs`: name and
/// hardware address, from `/sys/class/net/*/address`) GID 0 begins with, and
/// its best address (the first of `ifaces`) is the port's. `gid_idx` is the
/// `FI_VERBS_GID_IDX` override (the GID used for the fabric name only).
///
/// `Err` completes the sentence "`<dev> port <n>` ...", for the log.
pub(crate) fn choose_iwarp(
    gids: &[GidEntry],
    ifaces: &[Iface],
    macs: &[(String, [u8; 6])],
    gid_idx: Option<u32>,
) -> std::result::Result<(GidEntry, Iface), String> {
    let i = gid_idx.unwrap_or(0);
    let g = gids.iter().find(|g| g.index == i).copied().ok_or_else(|| match gid_idx {
        Some(_) => format!("has no GID at index {i} (FI_VERBS_GID_IDX)"),
        None => "has no GID at index 0".to_string(),
    })?;
    let g0 = gids.iter().find(|g| g.index == 0).ok_or_else(|| "has no GID at index 0".to_string())?;
    let mac: [u8; 6] = g0.gid[..6].try_into().expect("six bytes");
    let names: Vec<&str> = macs.iter().filter(|(_, m)| *m == mac).map(|(n, _)| n.as_str()).collect();
    if names.is_empty() {
        return Err(format!("has GID 0 with MAC {} of no network interface", mac_str(&mac)));
    }
    ifaces
        .iter()
        .find(|f| names.contains(&f.name.as_str()))
        .map(|f| (g, f.clone()))
        .ok_or_else(|| format!("is on {} which has no IP address", names.join(", ")))
}

/// A MAC address as `aa:bb:cc:dd:ee:ff`.
fn mac_str(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Every network interface's hardware address of six bytes, from
/// `/sys/class/net/<name>/address`.
fn interface_macs() -> Vec<(String, [u8; 6])> {
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
            let bytes: Vec<u8> = text
                .trim()
                .split(':')
                .map(|h| u8::from_str_radix(h, 16))
                .collect::<std::result::Result<_, _>>()
                .ok()?;
            let mac: [u8; 6] = bytes.try_into().ok()?;
            Some((name, mac))
        })
        .collect()
}

/// The network interfaces of an InfiniBand port, from
/// `/sys/class/infiniband/<dev>/device/net/*` (those whose `dev_port` names
/// another port left out).
fn ib_netdevs(dev: &str, port: u8) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/sys/class/infiniband/{dev}/device/net")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let dev_port = std::fs::read_to_string(format!("/sys/class/net/{n}/dev_port"));
            match dev_port.ok().and_then(|s| s.trim().parse::<u32>().ok()) {
                Some(p) => p + 1 == u32::from(port),
                None => true,
            }
        })
        .collect()
}

/// The largest inline size an RC QP of the device accepts: an RC QP is created
/// (and destroyed) with `max_inline_data` halved from 1024 until the device
/// accepts it; 0 if it accepts none.
fn probe_max_inline(ctx: &Context) -> usize {
    let (pd, cq) = match (Pd::new(ctx), Cq::new(ctx, 1)) {
        (Ok(pd), Ok(cq)) => (pd, cq),
        (Err(e), _) | (_, Err(e)) => {
            fi_log!(Level::Warn, NAME, "core", "{}: cannot probe the inline size: {}", ctx.name(), os_err(&e));
            return 0;
        }
    };
    let mut n = INLINE_PROBE_START;
    while n > 0 {
        if pd.rc_qp_accepts_inline(&cq, n) {
            return n as usize;
        }
        n /= 2;
    }
    0
}

/// A non-negative device limit as `u32`.
fn limit(v: i32) -> u32 {
    v.max(0) as u32
}

/// Discover every device and port (once per process).
fn discover() -> std::result::Result<Discovery, String> {
    // Read (and report bad settings) whether or not there are devices.
    let cfg = config();
    let list = DeviceList::get().map_err(|e| {
        let mut why = format!("ibv_get_device_list failed: {}", os_err(&e));
        if e.raw_os_error() == Some(libc::ENOSYS) {
            why.push_str(": this kernel has no RDMA support (CONFIG_INFINIBAND) or the ib_uverbs module is not loaded");
        }
        why
    })?;
    let ifaces = iface::interfaces().map_err(|e| format!("cannot list the network interfaces: {e}"))?;
    let mut d = Discovery { devices: list.names(), ..Default::default() };
    // Why active ports had no GID to use: said if FI_VERBS_GID_IDX leaves none.
    let mut gid_refusals: Vec<String> = Vec::new();
    for (i, dev) in d.devices.clone().into_iter().enumerate() {
        let mut skip = |why: String| d.skipped.push((dev.clone(), why));
        let ctx = match list.open(i) {
            Ok(c) => c,
            Err(e) => {
                skip(format!("{dev}: ibv_open_device failed: {}", os_err(&e)));
                continue;
            }
        };
        let da = match ctx.query_device() {
            Ok(a) => a,
            Err(e) => {
                skip(format!("{dev}: ibv_query_device failed: {}", os_err(&e)));
                continue;
            }
        };
        let mut max_inline: Option<usize> = None;
        let iwarp = ctx.iwarp();
        let macs = if iwarp { interface_macs() } else { Vec::new() };
        for port in 1..=da.phys_port_cnt {
            let mut skip = |why: String| d.skipped.push((dev.clone(), format!("{dev} port {port} {why}")));
            let pa = match ctx.query_port(port) {
                Ok(a) => a,
                Err(e) => {
                    skip(format!("cannot be queried: ibv_query_port failed: {}", os_err(&e)));
                    continue;
                }
            };
            if pa.state != rdma_sys::ibv_port_state::IBV_PORT_ACTIVE {
                skip(format!("is {}", port_state_str(pa.state)));
                continue;
            }
            // IBV_LINK_LAYER_UNSPECIFIED (0) is InfiniBand, as libibverbs says.
            let link_layer = if pa.link_layer == ibv::LINK_LAYER_ETHERNET {
                ibv::LINK_LAYER_ETHERNET
            } else {
                ibv::LINK_LAYER_INFINIBAND
            };
            let gids: Vec<GidEntry> = (0..limit(pa.gid_tbl_len)).filter_map(|gi| ctx.gid(port, gi)).collect();
            let netdevs = if link_layer == ibv::LINK_LAYER_INFINIBAND { ib_netdevs(&dev, port) } else { Vec::new() };
            let chosen = if iwarp {
                choose_iwarp(&gids, &ifaces, &macs, cfg.gid_idx)
            } else {
                choose_gid(link_layer, &gids, &ifaces, &netdevs, cfg.gid_idx)
            };
            let (g, ifc) = match chosen {
                Ok(x) => x,
                Err(why) => {
                    gid_refusals.push(format!("{dev} port {port} {why}"));
                    skip(why);
                    continue;
                }
            };
            let naming = gids.iter().find(|e| e.index == cfg.gid_idx.unwrap_or(0)).unwrap_or(&g);
            let mtu = mtu_bytes(pa.active_mtu).unwrap_or_else(|| {
                fi_log!(
                    Level::Warn,
                    NAME,
                    "core",
                    "{dev} port {port}: unknown active MTU {}; using 1024",
                    pa.active_mtu
                );
                1024
            });
            let probed = *max_inline.get_or_insert_with(|| probe_max_inline(&ctx));
            if let Some(want) = cfg.inline_size.filter(|c| *c > probed) {
                fabric_core::log::config_warn(
                    NAME,
                    "FI_VERBS_INLINE_SIZE",
                    &want.to_string(),
                    format_args!("is more than {dev} sends inline ({probed}); using {probed}"),
                );
            }
            d.ports.push(Port {
                dev: dev.clone(),
                port,
                gid_index: g.index,
                iface: ifc,
                fabric: fabric_name(&naming.gid),
                mtu,
                max_msg: pa.max_msg_sz as usize,
                max_qp_wr: limit(da.max_qp_wr),
                max_sge: limit(da.max_sge),
                max_sge_rd: limit(da.max_sge_rd),
                max_cqe: limit(da.max_cqe),
                max_qp: limit(da.max_qp),
                max_cq: limit(da.max_cq),
                max_mr: limit(da.max_mr),
                atomics: da.atomic_cap != rdma_sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
                infiniband: !iwarp && link_layer == ibv::LINK_LAYER_INFINIBAND,
                iwarp,
                max_srq_wr: if da.max_srq > 0 { limit(da.max_srq_wr) } else { 0 },
                max_rd_atomic: rd_atomic(da.max_qp_rd_atom),
                max_init_rd_atomic: rd_atomic(da.max_qp_init_rd_atom),
                max_inline: cfg.inline_size.map_or(probed, |c| c.min(probed)),
            });
        }
    }
    if let (Some(i), true, false) = (cfg.gid_idx, d.ports.is_empty(), gid_refusals.is_empty()) {
        fabric_core::log::config_warn(
            NAME,
            "FI_VERBS_GID_IDX",
            &i.to_string(),
            format_args!("leaves no active port usable ({}); verbs offers nothing", gid_refusals.join("; ")),
        );
    }
    for p in &d.ports {
        fi_log!(
            Level::Debug,
            NAME,
            "core",
            "{} port {}: GID {} on {} ({}), fabric {}, MTU {}, inline {}",
            p.dev,
            p.port,
            p.gid_index,
            p.iface.name,
            p.iface.addr,
            p.fabric,
            p.mtu,
            p.max_inline
        );
    }
    for (_, why) in &d.skipped {
        fi_log!(Level::Debug, NAME, "core", "not usable: {why}");
    }
    Ok(d)
}

/// The discovery, made once.
fn discovery() -> &'static std::result::Result<Discovery, String> {
    static D: OnceLock<std::result::Result<Discovery, String>> = OnceLock::new();
    D.get_or_init(discover)
}

/// The ports of a discovery that `FI_VERBS_DEVICE_NAME` (`device`: the exact
/// device name) and `FI_VERBS_IFACE` (`iface`: an interface name or prefix)
/// leave; `Err` says why there are none.
fn usable(d: &Discovery, device: Option<&str>, iface: Option<&str>) -> std::result::Result<Vec<Port>, String> {
    if d.devices.is_empty() {
        return Err("no RDMA devices found".into());
    }
    let mut ports = d.ports.clone();
    let mut skipped: Vec<&str> = d.skipped.iter().map(|(_, w)| w.as_str()).collect();
    if let Some(want) = device {
        if !d.devices.iter().any(|n| n == want) {
            let why = format!("matches none of the RDMA devices: {}", d.devices.join(", "));
            fabric_core::log::config_warn(
                NAME,
                "FI_VERBS_DEVICE_NAME",
                want,
                format_args!("{why}; verbs offers nothing"),
            );
            return Err(format!("FI_VERBS_DEVICE_NAME={want} {why}"));
        }
        ports.retain(|p| p.dev == want);
        skipped = d.skipped.iter().filter(|(dev, _)| dev == want).map(|(_, w)| w.as_str()).collect();
    }
    if let Some(want) = iface {
        let before: Vec<String> =
            ports.iter().map(|p| format!("{} port {} ({})", p.dev, p.port, p.iface.name)).collect();
        ports.retain(|p| p.iface.name.starts_with(want));
        if ports.is_empty() && !before.is_empty() {
            let why = format!("matches none of the ports' interfaces: {}", before.join(", "));
            fabric_core::log::config_warn(NAME, "FI_VERBS_IFACE", want, format_args!("{why}; verbs offers nothing"));
            return Err(format!("FI_VERBS_IFACE={want} {why}"));
        }
    }
    if ports.is_empty() {
        return Err(if skipped.is_empty() { "no usable RDMA port".to_string() } else { skipped.join("; ") });
    }
    Ok(ports)
}

/// The usable ports: each device and port that is `PORT_ACTIVE` and has an IP
/// interface address, filtered by `FI_VERBS_DEVICE_NAME` (the exact device name)
/// and `FI_VERBS_IFACE` (an interface name or prefix). `Err(NoData)`, the reason
/// logged at info level, when there are none.
pub(crate) fn ports() -> Result<Vec<Port>> {
    let cfg = config();
    let r = match discovery() {
        Ok(d) => usable(d, cfg.device_name.as_deref(), cfg.iface.as_deref()),
        Err(why) => Err(why.clone()),
    };
    r.map_err(|why| {
        fi_log!(Level::Info, NAME, "core", "no entry: {why}");
        Error::NoData
    })
}

/// The port an entry (from [`getinfo`]) names, by its domain name.
/// `Err(NoData)` (logged) when no usable port has that name.
pub(crate) fn port_of(info: &Info) -> Result<Port> {
    let name = &info.domain_attr.name;
    let ports = ports()?;
    ports.iter().find(|p| domain_name(&p.dev, p.port) == *name).cloned().ok_or_else(|| {
        let have: Vec<String> = ports.iter().map(|p| domain_name(&p.dev, p.port)).collect();
        fi_log!(Level::Info, NAME, "core", "domain {name} is none of the verbs domains: {}", have.join(", "));
        Error::NoData
    })
}

/// The capabilities of a MSG endpoint (native RC; remote CQ data by write with
/// immediate data, or on iWARP, which has none, by a SEND after the write;
/// atomics native where the device has them and the operation is one it does,
/// else emulated by the engine's atomic requests, as on RDM: a device without
/// atomics, such as siw, offers them all the same).
fn msg_caps() -> Caps {
    Caps::MSG
        | Caps::RMA
        | Caps::READ
        | Caps::WRITE
        | Caps::SEND
        | Caps::RECV
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::REMOTE_CQ_DATA
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM
        | Caps::ATOMIC
}

/// The capabilities of an RDM endpoint (atomics emulated where the device has
/// none; no `FI_RMA_EVENT`: native RDMA does not tell the target).
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
        | Caps::REMOTE_CQ_DATA
        | Caps::MULTI_RECV
        | Caps::DIRECTED_RECV
        | Caps::SOURCE
        | Caps::LOCAL_COMM
        | Caps::REMOTE_COMM
}

/// The entry offered on one port for one endpoint type (`FI_EP_MSG` or
/// `FI_EP_RDM`).
pub(crate) fn base_info(p: &Port, ep_type: EpType) -> Info {
    let rdm = ep_type == EpType::Rdm;
    let caps = if rdm { rdm_caps() } else { msg_caps() };
    let order = MsgOrder::SAS;
    let queue = p.max_qp_wr.min(QUEUE_SIZE) as usize;
    let iov_limit = if rdm { IOV_LIMIT } else { (p.max_sge as usize).min(IOV_LIMIT) };
    let ctx_cnt = p.max_qp.min(QUEUE_SIZE) as usize;
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: if p.iface.addr.is_ipv4() { AddrFormat::SockaddrIn } else { AddrFormat::SockaddrIn6 },
        src_addr: Some(Address::Sockaddr(SocketAddr::new(p.iface.addr, 0))),
        dest_addr: None,
        handle: None,
        tx_attr: TxAttr {
            caps: caps.tx_part(),
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            inject_size: if rdm { RDM_INJECT } else { p.max_inline },
            size: queue,
            iov_limit,
            rma_iov_limit: 1,
        },
        rx_attr: RxAttr {
            caps: caps.rx_part(),
            mode: Mode::empty(),
            op_flags: Default::default(),
            msg_order: order,
            comp_order: MsgOrder::empty(),
            total_buffered_recv: 0,
            size: queue,
            iov_limit,
        },
        ep_attr: EpAttr {
            ep_type,
            protocol: match (rdm, p.iwarp) {
                (true, _) => Protocol::Rxm,
                (false, true) => Protocol::Iwarp,
                (false, false) => Protocol::RdmaCmIbRc,
            },
            protocol_version: if rdm { u32::from(fabric_util::wire::WIRE_VERSION) } else { 1 },
            max_msg_size: if rdm { p.max_msg.min(RDM_MAX_MSG) } else { p.max_msg },
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: if rdm { fabric_core::info::TAG_GENERIC } else { 0 },
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            auth_key_size: 0,
        },
        domain_attr: DomainAttr {
            name: domain_name(&p.dev, p.port),
            threading: Threading::Safe,
            control_progress: Progress::Manual,
            data_progress: Progress::Manual,
            resource_mgmt: ResourceMgmt::Enabled,
            av_type: AvType::Unspec,
            mr_mode: MrMode::PROV_KEY | MrMode::VIRT_ADDR,
            mr_key_size: 4,
            // RoCE/IB: the 32 bits of immediate data; iWARP: the 64 bits of
            // the SEND that follows a write (`ep/rma.rs`).
            cq_data_size: if p.iwarp { 8 } else { 4 },
            cq_cnt: p.max_cq as usize,
            ep_cnt: p.max_qp as usize,
            tx_ctx_cnt: ctx_cnt,
            rx_ctx_cnt: ctx_cnt,
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
            mr_cnt: p.max_mr as usize,
        },
        fabric_attr: FabricAttr {
            name: p.fabric.clone(),
            prov_name: NAME.to_string(),
            prov_version: VERSION,
            api_version: fabric_core::info::API_VERSION,
        },
    }
}

/// `getinfo` for the verbs provider: a MSG and an RDM entry for every usable
/// port whose interface address the hints select (node, service and source
/// resolved as the sockets providers do), kept where they satisfy the hints.
/// `Err(NoData)`, the reasons logged at info level, when nothing fits.
pub(crate) fn getinfo(h: &Hints) -> Result<Vec<Info>> {
    let refuse = |why: String| {
        fi_log!(Level::Info, NAME, "core", "no entry: {why}");
        Error::NoData
    };
    if matches!(h.ep_type, EpType::Dgram) {
        return Err(refuse("FI_EP_DGRAM is not offered by verbs (see the udp provider)".into()));
    }
    if matches!(h.addr_format, AddrFormat::Str) {
        return Err(refuse("FI_ADDR_STR is not an address format of verbs".into()));
    }
    let ports = ports()?;
    // FI_VERBS_IFACE (a prefix) was applied to the ports already.
    let opts = SelectOpts { prov: NAME, proto: "tcp", only_iface: None, only_iface_var: "FI_VERBS_IFACE" };
    let sel = iface::select(h, &opts)?;
    let types: &[EpType] = match h.ep_type {
        EpType::Msg => &[EpType::Msg],
        EpType::Rdm => &[EpType::Rdm],
        _ => &[EpType::Msg, EpType::Rdm],
    };
    let mut out = Vec::new();
    let mut reasons = Vec::new();
    let mut any_port = false;
    // In the selection's order (best interface first). A loopback destination
    // (no source asked for) is reached through any device: librdmacm loops it
    // back on the device it binds to.
    let loopback_dest = sel.src.is_none() && sel.dest.is_some_and(|d| d.ip().is_loopback());
    let on_selected = |p: &&Port| sel.ifaces.iter().any(|i| p.iface.name == i.name && p.iface.addr == i.addr);
    let chosen: Vec<&Port> = if loopback_dest && !ports.iter().any(|p| on_selected(&p)) {
        ports.iter().collect()
    } else {
        sel.ifaces
            .iter()
            .flat_map(|ifc| ports.iter().filter(move |p| p.iface.name == ifc.name && p.iface.addr == ifc.addr))
            .collect()
    };
    {
        for p in chosen {
            any_port = true;
            for &t in types {
                let mut info = base_info(p, t);
                if let Some(s) = sel.src {
                    let ip = if s.ip().is_unspecified() { p.iface.addr } else { s.ip() };
                    info.src_addr = Some(Address::Sockaddr(SocketAddr::new(ip, s.port())));
                }
                if let Some(d) = sel.dest {
                    info.dest_addr = Some(Address::Sockaddr(d));
                }
                // Data progress is manual unless automatic is asked for: then the
                // domain runs a progress thread.
                if h.data_progress == Progress::Auto {
                    info.domain_attr.data_progress = Progress::Auto;
                }
                match info.check(h) {
                    Ok(()) => out.push(info),
                    Err(why) => reasons.push(format!("{} {t}: {why}", domain_name(&p.dev, p.port))),
                }
            }
        }
    }
    if !any_port {
        let selected: Vec<String> = sel.ifaces.iter().map(|i| format!("{} ({})", i.name, i.addr)).collect();
        let have: Vec<String> = ports
            .iter()
            .map(|p| format!("{} on {} ({})", domain_name(&p.dev, p.port), p.iface.name, p.iface.addr))
            .collect();
        reasons.push(format!(
            "the hints select the interface addresses [{}], and no RDMA port has one: {}",
            selected.join(", "),
            have.join(", ")
        ));
    }
    if out.is_empty() {
        return Err(refuse(reasons.join("; ")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv6Addr};

    const GID_TYPE_ROCE_V1: u32 = rdma_sys::IBV_GID_TYPE_ROCE_V1;
    const GID_TYPE_IB: u32 = rdma_sys::IBV_GID_TYPE_IB;

    fn eth(addr: &str, index: u32) -> Iface {
        Iface { name: "eth1".into(), addr: addr.parse().unwrap(), prefix: 24, loopback: false, index }
    }

    fn gid(index: u32, ip: &str, gid_type: u32, ndev_ifindex: u32) -> GidEntry {
        let ip: IpAddr = ip.parse().unwrap();
        let v6 = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        GidEntry { index, gid: v6.octets(), gid_type, ndev_ifindex }
    }

    /// An rxe-like GID table on interface 3 (10.0.0.5, fd00::5): link-local v1 and
    /// v2, then v1 and v2 of each address.
    fn roce_table() -> Vec<GidEntry> {
        vec![
            gid(0, "fe80::1", GID_TYPE_ROCE_V1, 3),
            gid(1, "fe80::1", GID_TYPE_ROCE_V2, 3),
            gid(2, "fd00::5", GID_TYPE_ROCE_V1, 3),
            gid(3, "fd00::5", GID_TYPE_ROCE_V2, 3),
            gid(4, "10.0.0.5", GID_TYPE_ROCE_V1, 3),
            gid(5, "10.0.0.5", GID_TYPE_ROCE_V2, 3),
        ]
    }

    fn port(dev: &str, n: u8, addr: &str) -> Port {
        Port {
            dev: dev.into(),
            port: n,
            gid_index: 5,
            iface: eth(addr, 3),
            fabric: "IB-0xfe80000000000000".into(),
            mtu: 1024,
            max_msg: 1 << 31,
            max_qp_wr: 16384,
            max_sge: 32,
            max_sge_rd: 30,
            max_cqe: 65536,
            max_qp: 4096,
            max_cq: 8192,
            max_mr: 1 << 20,
            atomics: false,
            infiniband: false,
            iwarp: false,
            max_srq_wr: 16384,
            max_rd_atomic: 16,
            max_init_rd_atomic: 16,
            max_inline: 220,
        }
    }

    /// Whether this host has no RDMA support in its kernel (no uverbs class).
    fn no_rdma_kernel() -> bool {
        !std::path::Path::new("/sys/class/infiniband_verbs").exists()
    }

    #[test]
    fn no_rdma_means_nodata() {
        if !no_rdma_kernel() {
            println!("skipped: this host has RDMA support");
            return;
        }
        assert_eq!(ports().unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new()).unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1")).unwrap_err(), Error::NoData);
        let why = discovery().as_ref().unwrap_err();
        assert!(why.starts_with("ibv_get_device_list failed: Function not implemented (ENOSYS)"), "{why}");
        assert!(why.contains("CONFIG_INFINIBAND"), "{why}");
    }

    #[test]
    fn refusals_give_nodata() {
        assert_eq!(getinfo(&Hints::new().ep_type(EpType::Dgram)).unwrap_err(), Error::NoData);
        assert_eq!(getinfo(&Hints::new().addr_format(AddrFormat::Str)).unwrap_err(), Error::NoData);
    }

    #[test]
    fn roce_v2_ipv4_gid_is_chosen() {
        let ifaces = vec![eth("10.0.0.5", 3), eth("fd00::5", 3)];
        let (g, f) = choose_gid(ibv::LINK_LAYER_ETHERNET, &roce_table(), &ifaces, &[], None).unwrap();
        assert_eq!(g.index, 5);
        assert_eq!(g.ip(), "10.0.0.5".parse::<IpAddr>().unwrap());
        assert_eq!(f, ifaces[0]);
        // Without the IPv4 address: the IPv6 one's v2 GID.
        let (g, f) = choose_gid(ibv::LINK_LAYER_ETHERNET, &roce_table(), &ifaces[1..], &[], None).unwrap();
        assert_eq!((g.index, f.addr), (3, "fd00::5".parse::<IpAddr>().unwrap()));
        // The GID's interface must be the address's.
        let other = vec![eth("10.0.0.5", 4)];
        let e = choose_gid(ibv::LINK_LAYER_ETHERNET, &roce_table(), &other, &[], None).unwrap_err();
        assert_eq!(e, "has no RoCE v2 GID with an IP address");
    }

    #[test]
    fn no_roce_v2_gid_of_an_address_is_none() {
        let ifaces = vec![eth("10.0.0.5", 3)];
        // Only RoCE v1 and link-local GIDs.
        let v1: Vec<GidEntry> = roce_table().into_iter().filter(|g| g.gid_type == GID_TYPE_ROCE_V1).collect();
        assert!(choose_gid(ibv::LINK_LAYER_ETHERNET, &v1, &ifaces, &[], None).is_err());
        let ll: Vec<GidEntry> = roce_table().into_iter().filter(|g| g.gid[..2] == [0xfe, 0x80]).collect();
        assert!(choose_gid(ibv::LINK_LAYER_ETHERNET, &ll, &ifaces, &[], None).is_err());
        // The interface has another address than the GIDs encode.
        let e = choose_gid(ibv::LINK_LAYER_ETHERNET, &roce_table(), &[eth("10.0.0.9", 3)], &[], None).unwrap_err();
        assert_eq!(e, "has no RoCE v2 GID with an IP address");
        assert!(choose_gid(ibv::LINK_LAYER_ETHERNET, &[], &ifaces, &[], None).is_err());
    }

    #[test]
    fn gid_index_override_is_honoured() {
        let ifaces = vec![eth("10.0.0.5", 3), eth("fd00::5", 3)];
        let t = roce_table();
        let (g, f) = choose_gid(ibv::LINK_LAYER_ETHERNET, &t, &ifaces, &[], Some(3)).unwrap();
        assert_eq!((g.index, f.addr), (3, "fd00::5".parse::<IpAddr>().unwrap()));
        // A RoCE v1 GID: its address.
        let (g, f) = choose_gid(ibv::LINK_LAYER_ETHERNET, &t, &ifaces, &[], Some(4)).unwrap();
        assert_eq!((g.index, g.gid_type, f.addr), (4, GID_TYPE_ROCE_V1, "10.0.0.5".parse::<IpAddr>().unwrap()));
        // A link-local GID: the interface's best address.
        let (g, f) = choose_gid(ibv::LINK_LAYER_ETHERNET, &t, &ifaces, &[], Some(1)).unwrap();
        assert_eq!((g.index, f.addr), (1, "10.0.0.5".parse::<IpAddr>().unwrap()));
        // An index the table lacks.
        let e = choose_gid(ibv::LINK_LAYER_ETHERNET, &t, &ifaces, &[], Some(9)).unwrap_err();
        assert_eq!(e, "has no GID at index 9 (FI_VERBS_GID_IDX)");
    }

    /// The read/atomic depths asked of a connection stay within the device's
    /// limits (librdmacm refuses more with EINVAL) and at most RD_ATOMIC_MAX.
    #[test]
    fn rd_atomic_depths_follow_the_device() {
        assert_eq!(rd_atomic(4), 4);
        assert_eq!(rd_atomic(16), 16);
        assert_eq!(rd_atomic(128), RD_ATOMIC_MAX);
        assert_eq!(rd_atomic(0), 0);
        assert_eq!(rd_atomic(-1), 0);
    }

    #[test]
    fn iwarp_finds_the_interface_by_the_mac_in_gid_0() {
        // Soft-iWARP's GID 0: the netdev's MAC, then zeros; its type reads as IB.
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        let mut raw = [0u8; 16];
        raw[..6].copy_from_slice(&mac);
        let g0 = GidEntry { index: 0, gid: raw, gid_type: GID_TYPE_IB, ndev_ifindex: 0 };
        let eth0 =
            Iface { name: "eth0".into(), addr: "10.0.2.15".parse().unwrap(), prefix: 24, loopback: false, index: 2 };
        let ifaces = vec![eth("10.0.0.5", 3), eth0.clone()];
        let macs = vec![("eth1".to_string(), [2, 0, 0, 0, 0, 1]), ("eth0".to_string(), mac)];
        assert_eq!(choose_iwarp(&[g0], &ifaces, &macs, None).unwrap(), (g0, eth0.clone()));
        // The RoCE rule finds nothing in such a table: the reason siw was skipped.
        assert!(choose_gid(ibv::LINK_LAYER_ETHERNET, &[g0], &ifaces, &[], None).is_err());
        let e = choose_iwarp(&[g0], &ifaces, &macs[..1], None).unwrap_err();
        assert_eq!(e, "has GID 0 with MAC 52:54:00:12:34:56 of no network interface");
        let e = choose_iwarp(&[g0], &ifaces[..1], &macs, None).unwrap_err();
        assert_eq!(e, "is on eth0 which has no IP address");
        assert_eq!(choose_iwarp(&[], &ifaces, &macs, None).unwrap_err(), "has no GID at index 0");
        let e = choose_iwarp(&[g0], &ifaces, &macs, Some(2)).unwrap_err();
        assert_eq!(e, "has no GID at index 2 (FI_VERBS_GID_IDX)");
    }

    #[test]
    fn iwarp_offers_remote_cq_data_of_64_bits() {
        let p = Port { dev: "siw0".into(), iwarp: true, ..port("siw0", 1, "10.0.2.15") };
        let m = base_info(&p, EpType::Msg);
        assert_eq!(m.ep_attr.protocol, Protocol::Iwarp);
        assert!(m.caps.contains(Caps::REMOTE_CQ_DATA));
        assert!(m.caps.contains(Caps::MSG | Caps::RMA | Caps::READ | Caps::WRITE));
        assert_eq!(m.domain_attr.cq_data_size, 8);
        let r = base_info(&p, EpType::Rdm);
        assert_eq!(r.ep_attr.protocol, Protocol::Rxm);
        assert!(r.caps.contains(Caps::REMOTE_CQ_DATA));
        // Atomics stay: RDM emulates them where the device has none.
        assert!(r.caps.contains(Caps::ATOMIC | Caps::TAGGED));
        assert_eq!(r.domain_attr.cq_data_size, 8);
        let roce = base_info(&Port { iwarp: false, ..p }, EpType::Msg);
        assert!(roce.caps.contains(Caps::REMOTE_CQ_DATA));
        assert_eq!((roce.ep_attr.protocol, roce.domain_attr.cq_data_size), (Protocol::RdmaCmIbRc, 4));
    }

    #[test]
    fn infiniband_uses_gid_0_and_ipoib() {
        let g0 = GidEntry {
            index: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x6b, 0x4b, 3, 0, 0x12, 0x34, 0x56],
            gid_type: GID_TYPE_IB,
            ndev_ifindex: 0,
        };
        let ib0 =
            Iface { name: "ib0".into(), addr: "192.168.7.1".parse().unwrap(), prefix: 24, loopback: false, index: 5 };
        let ifaces = vec![eth("10.0.0.5", 3), ib0.clone()];
        let (g, f) = choose_gid(ibv::LINK_LAYER_INFINIBAND, &[g0], &ifaces, &["ib0".into()], None).unwrap();
        assert_eq!((g, f), (g0, ib0));
        let e = choose_gid(ibv::LINK_LAYER_INFINIBAND, &[g0], &ifaces, &[], None).unwrap_err();
        assert_eq!(e, "has no IPoIB interface with an IP address");
        assert!(choose_gid(ibv::LINK_LAYER_INFINIBAND, &[g0], &ifaces, &["ib0".into()], Some(1)).is_err());
        assert_eq!(fabric_name(&g0.gid), "IB-0xfe80000000000000");
    }

    #[test]
    fn mtu_enum_converts() {
        assert_eq!(mtu_bytes(1), Some(256));
        assert_eq!(mtu_bytes(2), Some(512));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(4), Some(2048));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
    }

    #[test]
    fn names_follow_libfabric() {
        let ll: [u8; 16] = "fe80::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(fabric_name(&ll), "IB-0xfe80000000000000");
        let v4 = gid(0, "10.0.0.5", GID_TYPE_ROCE_V2, 3);
        assert_eq!(fabric_name(&v4.gid), "IB-0x0");
        let mut sub = [0u8; 16];
        sub[6] = 0x12;
        sub[7] = 0xab;
        assert_eq!(fabric_name(&sub), "IB-0x12ab");
        assert_eq!(domain_name("mlx5_0", 1), "mlx5_0");
        assert_eq!(domain_name("mlx5_0", 2), "mlx5_0-2");
        assert_eq!(port_state_str(1), "PORT_DOWN");
        assert_eq!(port_state_str(4), "PORT_ACTIVE");
        assert_eq!(os_err(&io::Error::from_raw_os_error(libc::ENOSYS)), "Function not implemented (ENOSYS)");
    }

    #[test]
    fn filters_say_why_nothing_is_left() {
        let none = Discovery::default();
        assert_eq!(usable(&none, None, None).unwrap_err(), "no RDMA devices found");
        let down = Discovery {
            devices: vec!["rxe0".into()],
            ports: vec![],
            skipped: vec![("rxe0".into(), "rxe0 port 1 is PORT_DOWN".into())],
        };
        assert_eq!(usable(&down, None, None).unwrap_err(), "rxe0 port 1 is PORT_DOWN");
        assert_eq!(
            usable(&down, Some("x"), None).unwrap_err(),
            "FI_VERBS_DEVICE_NAME=x matches none of the RDMA devices: rxe0"
        );
        let two = Discovery {
            devices: vec!["rxe0".into(), "rxe1".into()],
            ports: vec![port("rxe1", 1, "10.0.0.5")],
            skipped: vec![("rxe0".into(), "rxe0 port 1 has no RoCE v2 GID with an IP address".into())],
        };
        assert_eq!(usable(&two, None, None).unwrap().len(), 1);
        assert_eq!(usable(&two, Some("rxe0"), None).unwrap_err(), "rxe0 port 1 has no RoCE v2 GID with an IP address");
        assert_eq!(usable(&two, Some("rxe1"), Some("eth")).unwrap()[0].dev, "rxe1");
        assert_eq!(usable(&two, None, Some("eth1")).unwrap().len(), 1);
        assert_eq!(
            usable(&two, None, Some("ib")).unwrap_err(),
            "FI_VERBS_IFACE=ib matches none of the ports' interfaces: rxe1 port 1 (eth1)"
        );
    }

    #[test]
    fn entries_carry_the_port_limits() {
        let p = port("rxe0", 1, "10.0.0.5");
        let m = base_info(&p, EpType::Msg);
        assert_eq!(m.domain_attr.name, "rxe0");
        assert_eq!(m.fabric_attr.name, "IB-0xfe80000000000000");
        assert_eq!(m.fabric_attr.prov_name, "verbs");
        assert_eq!(m.ep_attr.protocol, Protocol::RdmaCmIbRc);
        assert_eq!(m.addr_format, AddrFormat::SockaddrIn);
        assert_eq!(m.src_addr, Some(Address::Sockaddr("10.0.0.5:0".parse().unwrap())));
        // A device without atomics (this port's): MSG emulates them.
        assert!(!p.atomics && m.caps.contains(Caps::ATOMIC));
        assert!(!m.caps.intersects(Caps::TAGGED | Caps::RMA_EVENT));
        assert_eq!((m.tx_attr.inject_size, m.tx_attr.size, m.rx_attr.size), (220, 1024, 1024));
        assert_eq!((m.tx_attr.iov_limit, m.ep_attr.max_msg_size), (IOV_LIMIT, 1 << 31));
        assert_eq!(m.ep_attr.mem_tag_format, 0);
        assert_eq!((m.domain_attr.mr_key_size, m.domain_attr.cq_data_size), (4, 4));
        assert_eq!((m.domain_attr.ep_cnt, m.domain_attr.cq_cnt, m.domain_attr.mr_cnt), (4096, 8192, 1 << 20));
        assert_eq!(m.domain_attr.mr_mode, MrMode::PROV_KEY | MrMode::VIRT_ADDR);
        assert!(m.tx_attr.caps.contains(Caps::SEND | Caps::READ | Caps::WRITE));
        assert!(!m.tx_attr.caps.intersects(Caps::RECV | Caps::REMOTE_READ));
        assert!(m.rx_attr.caps.contains(Caps::RECV | Caps::REMOTE_READ | Caps::REMOTE_WRITE));
        let small = Port { max_qp_wr: 256, max_sge: 2, atomics: true, ..p.clone() };
        let m = base_info(&small, EpType::Msg);
        assert!(m.caps.contains(Caps::ATOMIC));
        assert_eq!((m.tx_attr.size, m.tx_attr.iov_limit, m.rx_attr.iov_limit), (256, 2, 2));
        let r = base_info(&p, EpType::Rdm);
        assert_eq!(r.ep_attr.protocol, Protocol::Rxm);
        assert!(r.caps.contains(rdm_caps()));
        assert!(!r.caps.contains(Caps::RMA_EVENT));
        assert_eq!((r.tx_attr.inject_size, r.ep_attr.max_msg_size), (RDM_INJECT, RDM_MAX_MSG));
        assert_eq!(r.ep_attr.mem_tag_format, fabric_core::info::TAG_GENERIC);
        assert!(r.tx_attr.msg_order.contains(MsgOrder::SAS));
        let p2 = Port { port: 2, iface: eth("fd00::5", 3), ..p };
        let r = base_info(&p2, EpType::Rdm);
        assert_eq!(r.domain_attr.name, "rxe0-2");
        assert_eq!(r.addr_format, AddrFormat::SockaddrIn6);
        // Hints that do not take provider keys and virtual addresses refuse it.
        let h = Hints { mr_mode: Some(MrMode::empty()), ..Hints::new() };
        assert!(r.check(&h).is_err());
        let h = Hints { mr_mode: Some(MrMode::PROV_KEY | MrMode::VIRT_ADDR | MrMode::LOCAL), ..Hints::new() };
        assert!(r.check(&h).is_ok());
    }
}

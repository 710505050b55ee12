//! The verbs provider of fabric: RDMA devices (InfiniBand, RoCE, iWARP) through
//! libibverbs and librdmacm, as libfabric's verbs provider (MSG endpoints on RC
//! queue pairs) together with its rxm utility provider (RDM endpoints over RC
//! connections made on demand).
//!
//! One domain per RDMA device port that has an IP address (RoCE: the address of
//! the Ethernet interface the port's GIDs belong to; InfiniBand: IPoIB), named
//! after the device; addresses are socket addresses (`FI_SOCKADDR_IN`,
//! `FI_SOCKADDR_IN6`), resolved to the device by librdmacm, as users of RoCE and
//! IPoIB expect.
//!
//! Files are named after the objects they implement, as in libfabric's
//! `prov/<name>/src` (and as in the tcp, udp and shm providers): `attr` (what
//! `getinfo` offers: discovery through `ibv_query_device` and `ibv_query_port`),
//! `fabric`, `domain` (protection domain, memory registration), `pep` (passive
//! endpoints), `ep` (MSG and RDM endpoints), `conn` (one RC connection and its
//! data path), plus `ibv` (the thin layer over the C libraries).
//!
//! Building needs rdma-core's development packages (Debian: `libibverbs-dev
//! librdmacm-dev`, and `libclang-dev clang pkg-config` for the bindings); running
//! needs only the libraries (`libibverbs1 librdmacm1`, plus the device's user-space
//! driver, `ibverbs-providers`). A binary built with the provider runs on a node
//! without RDMA devices: `getinfo` finds none and says why at `FI_LOG_LEVEL=info`.

mod attr;
mod ibv;

use fabric_core::param::{Param, ParamType};
use std::sync::OnceLock;

/// The provider's name.
pub const NAME: &str = "verbs";
/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = fabric_core::info::version(0, 1);

/// Parameters, read once from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// `FI_VERBS_IFACE`: only devices whose port belongs to this interface (a
    /// name, or a prefix of names).
    pub iface: Option<String>,
    /// `FI_VERBS_DEVICE_NAME`: only the device with this name.
    pub device_name: Option<String>,
    /// `FI_VERBS_GID_IDX`: the GID index to use; `None` chooses (the RoCE v2 GID
    /// of the interface's address).
    pub gid_idx: Option<u32>,
    /// `FI_VERBS_INLINE_SIZE`: the inline data size asked of each QP; `None`
    /// uses the device's largest.
    pub inline_size: Option<usize>,
    /// `FI_VERBS_USE_SRQ`: whether an RDM endpoint's connections share one
    /// receive queue (where the device has them).
    pub use_srq: bool,
    /// `FI_VERBS_MSG_DIRECT`: MSG endpoints that can (RoCE or InfiniBand; no
    /// tagged messages, atomics, multi-receive buffers or directed receives)
    /// post the application's buffers to their QP, when the peer does too
    /// (`ep/direct.rs`); their receives cannot be canceled. On by default.
    pub msg_direct: bool,
}

pub(crate) fn params() -> Vec<Param> {
    vec![
        Param {
            prov: NAME,
            name: "iface",
            kind: ParamType::Str,
            help: "The prefix or the full name of the network interface whose RDMA device ports to use",
            default: "",
        },
        Param {
            prov: NAME,
            name: "device_name",
            kind: ParamType::Str,
            help: "The name of the RDMA device to use (as ibv_devices lists it)",
            default: "",
        },
        Param {
            prov: NAME,
            name: "gid_idx",
            kind: ParamType::Int,
            help: "The GID index (0-255) of every QP's source GID, and of the address offered; by default the RoCE v2 GID of the interface's address (GID 0 on InfiniBand)",
            default: "-1",
        },
        Param {
            prov: NAME,
            name: "inline_size",
            kind: ParamType::Size,
            help: "The most bytes sent inline (copied into the work request); 0 uses the device's largest",
            default: "0",
        },
        Param {
            prov: NAME,
            name: "use_srq",
            kind: ParamType::Bool,
            help: "Let every connection of an RDM endpoint receive through one shared receive queue (where the device has them); 0 gives each connection its own buffers (always so on iWARP)",
            default: "1",
        },
        Param {
            prov: NAME,
            name: "msg_direct",
            kind: ParamType::Bool,
            help: "Let MSG endpoints over RoCE or InfiniBand that ask for no tagged messages, atomics, multi-receive buffers or directed receives post the application's buffers straight to their QP (as libfabric's verbs does), when the peer does too; such an endpoint cannot cancel a receive once its connection is chosen (0: every MSG endpoint runs the RDM engine's protocol, which can)",
            default: "1",
        },
    ]
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let p = params();
        let get = |n: &str| p.iter().find(|x| x.name == n).expect("declared parameter");
        let s = |n: &str| get(n).setting();
        Config {
            iface: s("iface"),
            device_name: s("device_name"),
            gid_idx: gid_idx(get("gid_idx").get_int(GID_IDX_RANGE)),
            inline_size: get("inline_size").get_size(0..=usize::MAX).filter(|v| *v > 0),
            use_srq: get("use_srq").get_bool(),
            msg_direct: get("msg_direct").get_bool(),
        }
    })
}

/// The values `FI_VERBS_GID_IDX` takes: an index of 0 to 255 (a QP's
/// `sgid_index` is one byte), or -1 (the default) to choose.
const GID_IDX_RANGE: std::ops::RangeInclusive<i64> = -1..=255;

/// A checked `FI_VERBS_GID_IDX` value as an index (`None`: choose).
fn gid_idx(v: Option<i64>) -> Option<u32> {
    v.and_then(|n| u32::try_from(n).ok())
}

mod domain;
mod ep;
mod fabric;
mod pep;

use fabric_core::prov::Provider;
use std::sync::Arc;

/// The verbs provider.
pub fn provider() -> Arc<dyn Provider> {
    Arc::new(VerbsProvider)
}

struct VerbsProvider;

fabric_util::provider_ops!(VerbsProvider {
    name: NAME,
    version: VERSION,
    params: params(),
    getinfo: attr::getinfo,
    fabric: fabric::VerbsFabric::new,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_idx_settings() {
        let p = params();
        let g = p.iter().find(|x| x.name == "gid_idx").unwrap();
        let idx = |v: &str| gid_idx(g.check_int(Some(v), GID_IDX_RANGE).value);
        assert_eq!(idx("3"), Some(3));
        assert_eq!(idx(" 0 "), Some(0));
        assert_eq!(idx("255"), Some(255));
        assert_eq!(idx("-1"), None);
        for bad in ["256", "-2", "x", "", "1.5"] {
            assert_eq!(idx(bad), None, "{bad}");
        }
        for bad in ["256", "-2", "x", "1.5"] {
            assert!(g.check_int(Some(bad), GID_IDX_RANGE).complaint.is_some(), "{bad} is reported");
        }
    }
}

//! What a provider offers (`struct fi_info` and its attributes) and what an
//! application asks for (hints).

use crate::addr::{AddrFormat, Address};
use crate::flags::{Caps, Mode, MrMode, MsgOrder, OpFlags};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vd:meta])* $v:ident = $s:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vd])* $v, )*
        }
        impl $name {
            /// libfabric's name of the value.
            pub fn name(self) -> &'static str {
                match self { $( $name::$v => $s, )* }
            }
            /// Parse libfabric's name (with or without `FI_`, any case).
            pub fn parse(s: &str) -> Option<$name> {
                let u = s.trim().to_ascii_uppercase();
                if u.is_empty() { return None; }
                let suffix = format!("_{u}");
                $( if u == $s || $s.ends_with(&suffix) { return Some($name::$v); } )*
                None
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
    };
}

named_enum!(
    /// Endpoint type (`enum fi_ep_type`).
    EpType {
        /// Any.
        #[default]
        Unspec = "FI_EP_UNSPEC",
        /// Connected, reliable.
        Msg = "FI_EP_MSG",
        /// Unconnected, unreliable.
        Dgram = "FI_EP_DGRAM",
        /// Unconnected, reliable.
        Rdm = "FI_EP_RDM",
    }
);

named_enum!(
    /// Wire protocol of an endpoint (`FI_PROTO_*`).
    Protocol {
        /// Any.
        #[default]
        Unspec = "FI_PROTO_UNSPEC",
        /// RC over RDMA CM.
        RdmaCmIbRc = "FI_PROTO_RDMA_CM_IB_RC",
        /// iWARP.
        Iwarp = "FI_PROTO_IWARP",
        /// InfiniBand UD.
        IbUd = "FI_PROTO_IB_UD",
        /// UDP.
        Udp = "FI_PROTO_UDP",
        /// TCP sockets.
        SockTcp = "FI_PROTO_SOCK_TCP",
        /// Reliable datagram over connected endpoints.
        Rxm = "FI_PROTO_RXM",
        /// Reliable datagram over datagram endpoints.
        Rxd = "FI_PROTO_RXD",
        /// Shared memory.
        Shm = "FI_PROTO_SHM",
    }
);

named_enum!(
    /// Threading model (`enum fi_threading`).
    Threading {
        /// Any.
        #[default]
        Unspec = "FI_THREAD_UNSPEC",
        /// Every object may be used from any thread at once.
        Safe = "FI_THREAD_SAFE",
        /// One thread per object at a time.
        Fid = "FI_THREAD_FID",
        /// One thread per domain at a time.
        Domain = "FI_THREAD_DOMAIN",
        /// One thread per completion context at a time.
        Completion = "FI_THREAD_COMPLETION",
        /// One thread per endpoint at a time.
        Endpoint = "FI_THREAD_ENDPOINT",
    }
);

named_enum!(
    /// Progress model (`enum fi_progress`).
    Progress {
        /// Any.
        #[default]
        Unspec = "FI_PROGRESS_UNSPEC",
        /// The provider makes progress by itself.
        Auto = "FI_PROGRESS_AUTO",
        /// The application's calls make progress.
        Manual = "FI_PROGRESS_MANUAL",
    }
);

named_enum!(
    /// Resource management (`enum fi_resource_mgmt`).
    ResourceMgmt {
        /// Any.
        #[default]
        Unspec = "FI_RM_UNSPEC",
        /// Disabled.
        Disabled = "FI_RM_DISABLED",
        /// Enabled: the provider protects against queue overruns.
        Enabled = "FI_RM_ENABLED",
    }
);

named_enum!(
    /// Address vector type (`enum fi_av_type`).
    AvType {
        /// Any.
        #[default]
        Unspec = "FI_AV_UNSPEC",
        /// Opaque handles.
        Map = "FI_AV_MAP",
        /// Consecutive indices.
        Table = "FI_AV_TABLE",
    }
);

/// A provider's handle on a pending connection request, carried in the `Info` of a
/// connection-request event and consumed by `accept` or `reject`.
#[derive(Clone)]
pub struct ConnHandle(pub Arc<dyn Any + Send + Sync>);

impl fmt::Debug for ConnHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnHandle")
    }
}

/// Transmit attributes (`struct fi_tx_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxAttr {
    /// Capabilities of the transmit context.
    pub caps: Caps,
    /// Mode bits.
    pub mode: Mode,
    /// Default operation flags.
    pub op_flags: OpFlags,
    /// Message ordering guaranteed.
    pub msg_order: MsgOrder,
    /// Completion ordering guaranteed.
    pub comp_order: MsgOrder,
    /// Largest message that `inject` accepts.
    pub inject_size: usize,
    /// Depth of the transmit queue.
    pub size: usize,
    /// Most iov entries of one operation.
    pub iov_limit: usize,
    /// Most remote iov entries of one RMA operation.
    pub rma_iov_limit: usize,
}

/// Receive attributes (`struct fi_rx_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RxAttr {
    /// Capabilities of the receive context.
    pub caps: Caps,
    /// Mode bits.
    pub mode: Mode,
    /// Default operation flags.
    pub op_flags: OpFlags,
    /// Message ordering guaranteed.
    pub msg_order: MsgOrder,
    /// Completion ordering guaranteed.
    pub comp_order: MsgOrder,
    /// Bytes the provider buffers for unexpected messages.
    pub total_buffered_recv: usize,
    /// Depth of the receive queue.
    pub size: usize,
    /// Most iov entries of one operation.
    pub iov_limit: usize,
}

/// Endpoint attributes (`struct fi_ep_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpAttr {
    /// Endpoint type.
    pub ep_type: EpType,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Version of the wire protocol.
    pub protocol_version: u32,
    /// Largest message.
    pub max_msg_size: usize,
    /// Size of a message prefix (`FI_MSG_PREFIX`).
    pub msg_prefix_size: usize,
    /// Largest RMA with read-after-write ordering.
    pub max_order_raw_size: usize,
    /// Largest RMA with write-after-read ordering.
    pub max_order_war_size: usize,
    /// Largest RMA with write-after-write ordering.
    pub max_order_waw_size: usize,
    /// Tag bits the application may use (libfabric's `mem_tag_format`).
    pub mem_tag_format: u64,
    /// Transmit contexts.
    pub tx_ctx_cnt: usize,
    /// Receive contexts.
    pub rx_ctx_cnt: usize,
    /// Size of an authorization key.
    pub auth_key_size: usize,
}

/// Domain attributes (`struct fi_domain_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainAttr {
    /// Domain name: for sockets providers, the interface.
    pub name: String,
    /// Threading model.
    pub threading: Threading,
    /// Control progress model.
    pub control_progress: Progress,
    /// Data progress model.
    pub data_progress: Progress,
    /// Resource management.
    pub resource_mgmt: ResourceMgmt,
    /// Address vector type.
    pub av_type: AvType,
    /// Memory registration mode.
    pub mr_mode: MrMode,
    /// Size of a memory key in bytes.
    pub mr_key_size: usize,
    /// Bytes of remote CQ data.
    pub cq_data_size: usize,
    /// Completion queues.
    pub cq_cnt: usize,
    /// Endpoints.
    pub ep_cnt: usize,
    /// Transmit contexts.
    pub tx_ctx_cnt: usize,
    /// Receive contexts.
    pub rx_ctx_cnt: usize,
    /// Transmit contexts per endpoint.
    pub max_ep_tx_ctx: usize,
    /// Receive contexts per endpoint.
    pub max_ep_rx_ctx: usize,
    /// Shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: usize,
    /// Shared receive contexts per endpoint.
    pub max_ep_srx_ctx: usize,
    /// Counters.
    pub cntr_cnt: usize,
    /// Most iov entries of one registration.
    pub mr_iov_limit: usize,
    /// Domain capabilities.
    pub caps: Caps,
    /// Domain mode bits.
    pub mode: Mode,
    /// Size of an authorization key.
    pub auth_key_size: usize,
    /// Bytes of provider-specific error data.
    pub max_err_data: usize,
    /// Memory regions.
    pub mr_cnt: usize,
}

/// Fabric attributes (`struct fi_fabric_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FabricAttr {
    /// Fabric name: for sockets providers, the subnet (`127.0.0.0/8`).
    pub name: String,
    /// Provider name.
    pub prov_name: String,
    /// Provider version (`FI_VERSION(major, minor)`).
    pub prov_version: u32,
    /// Interface version the provider implements.
    pub api_version: u32,
}

/// `FI_VERSION(major, minor)`.
pub const fn version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The major part of a `FI_VERSION`.
pub const fn version_major(v: u32) -> u32 {
    v >> 16
}

/// The minor part of a `FI_VERSION`.
pub const fn version_minor(v: u32) -> u32 {
    v & 0xffff
}

/// The generic tag format (libfabric's `FI_TAG_GENERIC`), the `mem_tag_format`
/// of providers that match every tag bit.
pub const TAG_GENERIC: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// The interface version fabric implements (libfabric's API it follows).
pub const API_VERSION: u32 = version(1, 17);

/// What a provider offers on one domain for one endpoint type (`struct fi_info`).
#[derive(Debug, Clone, Default)]
pub struct Info {
    /// Capabilities.
    pub caps: Caps,
    /// Mode bits the application must honour.
    pub mode: Mode,
    /// Address format.
    pub addr_format: AddrFormat,
    /// Source address, where one was resolved.
    pub src_addr: Option<Address>,
    /// Destination address, where one was resolved.
    pub dest_addr: Option<Address>,
    /// Pending connection (connection-request events only).
    pub handle: Option<ConnHandle>,
    /// Transmit attributes.
    pub tx_attr: TxAttr,
    /// Receive attributes.
    pub rx_attr: RxAttr,
    /// Endpoint attributes.
    pub ep_attr: EpAttr,
    /// Domain attributes.
    pub domain_attr: DomainAttr,
    /// Fabric attributes.
    pub fabric_attr: FabricAttr,
}

/// What an application asks `getinfo` for. Every field left at its default means
/// "any". `node` and `service` name the peer (or, with `source`, the local address).
///
/// Every field has a builder method of its name (`prov_name` is
/// [`Hints::provider`], `domain_name` [`Hints::domain`], `fabric_name`
/// [`Hints::fabric`]; [`Hints::progress`] sets both progress models):
///
/// ```
/// use fabric_core::{AvType, Caps, EpType, Hints, Mode, MrMode, Progress, Threading};
///
/// let hints = Hints::new()
///     .provider("tcp")
///     .ep_type(EpType::Rdm)
///     .caps(Caps::MSG | Caps::TAGGED)
///     .mode(Mode::CONTEXT)
///     .threading(Threading::Domain)
///     .progress(Progress::Manual)
///     .av_type(AvType::Table)
///     .mr_mode(MrMode::LOCAL | MrMode::VIRT_ADDR)
///     .tx_size(256)
///     .rx_size(256);
/// assert_eq!(hints.data_progress, Progress::Manual);
/// assert_eq!(hints.control_progress, Progress::Manual);
/// assert_eq!(hints.mr_mode, Some(MrMode::LOCAL | MrMode::VIRT_ADDR));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// Provider name(s), comma-separated; `^` excludes (as `FI_PROVIDER`).
    pub prov_name: Option<String>,
    /// Endpoint type.
    pub ep_type: EpType,
    /// Capabilities every entry must offer.
    pub caps: Caps,
    /// Mode bits the application supports; an entry needing others is refused.
    /// `None` means the application supports every mode.
    pub mode: Option<Mode>,
    /// Address format.
    pub addr_format: AddrFormat,
    /// Node: a host name or numeric address.
    pub node: Option<String>,
    /// Service: a port number or service name.
    pub service: Option<String>,
    /// `FI_SOURCE`: node and service name the local address, not the peer.
    pub source: bool,
    /// Source address to bind.
    pub src_addr: Option<Address>,
    /// Destination address.
    pub dest_addr: Option<Address>,
    /// Domain name.
    pub domain_name: Option<String>,
    /// Fabric name.
    pub fabric_name: Option<String>,
    /// Threading model wanted.
    pub threading: Threading,
    /// Data progress model wanted.
    pub data_progress: Progress,
    /// Control progress model wanted.
    pub control_progress: Progress,
    /// Address vector type wanted.
    pub av_type: AvType,
    /// Memory registration modes the application supports (`None`: all).
    pub mr_mode: Option<MrMode>,
    /// Wanted transmit queue depth (0: any).
    pub tx_size: usize,
    /// Wanted receive queue depth (0: any).
    pub rx_size: usize,
    /// Wanted message ordering.
    pub msg_order: MsgOrder,
}

impl Hints {
    /// Hints that ask for nothing in particular.
    pub fn new() -> Hints {
        Hints::default()
    }

    /// Ask for a provider by name.
    pub fn provider(mut self, name: &str) -> Hints {
        self.prov_name = Some(name.to_string());
        self
    }

    /// Ask for an endpoint type.
    pub fn ep_type(mut self, t: EpType) -> Hints {
        self.ep_type = t;
        self
    }

    /// Ask for capabilities.
    pub fn caps(mut self, c: Caps) -> Hints {
        self.caps = c;
        self
    }

    /// Name the peer (or with [`Hints::source`], the local address).
    pub fn node(mut self, node: &str) -> Hints {
        self.node = Some(node.to_string());
        self
    }

    /// Name the service (port).
    pub fn service(mut self, service: &str) -> Hints {
        self.service = Some(service.to_string());
        self
    }

    /// Take node and service as the local address (`FI_SOURCE`).
    pub fn source(mut self, yes: bool) -> Hints {
        self.source = yes;
        self
    }

    /// Ask for a domain by name.
    pub fn domain(mut self, name: &str) -> Hints {
        self.domain_name = Some(name.to_string());
        self
    }

    /// Ask for a fabric by name.
    pub fn fabric(mut self, name: &str) -> Hints {
        self.fabric_name = Some(name.to_string());
        self
    }

    /// Ask for an address format.
    pub fn addr_format(mut self, f: AddrFormat) -> Hints {
        self.addr_format = f;
        self
    }

    /// Say which mode bits the application supports (`hints->mode`); an entry
    /// needing others is refused. Without it every mode is supported.
    pub fn mode(mut self, m: Mode) -> Hints {
        self.mode = Some(m);
        self
    }

    /// Give the local address to bind (`hints->src_addr`).
    pub fn src_addr(mut self, a: Address) -> Hints {
        self.src_addr = Some(a);
        self
    }

    /// Give the peer's address (`hints->dest_addr`).
    pub fn dest_addr(mut self, a: Address) -> Hints {
        self.dest_addr = Some(a);
        self
    }

    /// Ask for a threading model (`domain_attr->threading`).
    pub fn threading(mut self, t: Threading) -> Hints {
        self.threading = t;
        self
    }

    /// Ask for a data progress model (`domain_attr->data_progress`).
    pub fn data_progress(mut self, p: Progress) -> Hints {
        self.data_progress = p;
        self
    }

    /// Ask for a control progress model (`domain_attr->control_progress`).
    pub fn control_progress(mut self, p: Progress) -> Hints {
        self.control_progress = p;
        self
    }

    /// Ask for one progress model for both data and control (what most
    /// applications mean: [`Hints::data_progress`] and [`Hints::control_progress`]).
    pub fn progress(self, p: Progress) -> Hints {
        self.data_progress(p).control_progress(p)
    }

    /// Ask for an address vector type (`domain_attr->av_type`).
    pub fn av_type(mut self, t: AvType) -> Hints {
        self.av_type = t;
        self
    }

    /// Say which memory registration modes the application supports
    /// (`domain_attr->mr_mode`). Without it every mode is supported.
    pub fn mr_mode(mut self, m: MrMode) -> Hints {
        self.mr_mode = Some(m);
        self
    }

    /// Ask for a transmit queue at least this deep (`tx_attr->size`; 0: any).
    pub fn tx_size(mut self, n: usize) -> Hints {
        self.tx_size = n;
        self
    }

    /// Ask for a receive queue at least this deep (`rx_attr->size`; 0: any).
    pub fn rx_size(mut self, n: usize) -> Hints {
        self.rx_size = n;
        self
    }

    /// Ask for a message ordering (`tx_attr->msg_order`, `rx_attr->msg_order`).
    pub fn msg_order(mut self, o: MsgOrder) -> Hints {
        self.msg_order = o;
        self
    }
}

impl Info {
    /// Whether this entry satisfies the hints' generic attributes (everything but
    /// node, service and addresses, which the provider resolves). `Err` says why not,
    /// for the log.
    pub fn check(&self, h: &Hints) -> Result<(), String> {
        if h.ep_type != EpType::Unspec && h.ep_type != self.ep_attr.ep_type {
            return Err(format!("endpoint type {} not {}", self.ep_attr.ep_type, h.ep_type));
        }
        if !self.caps.contains(h.caps) {
            let missing = h.caps - self.caps;
            return Err(format!(
                "caps not offered: {}",
                crate::flags::bits_to_names(missing.bits(), crate::flags::CAP_NAMES)
            ));
        }
        if let Some(m) = h.mode {
            if !m.contains(self.mode) {
                return Err("application does not support the mode bits required".into());
            }
        }
        if !self.addr_format.satisfies(h.addr_format) {
            return Err(format!("address format {} not {}", self.addr_format.name(), h.addr_format.name()));
        }
        if let Some(d) = &h.domain_name {
            if d != &self.domain_attr.name {
                return Err(format!("domain {} not {d}", self.domain_attr.name));
            }
        }
        if let Some(f) = &h.fabric_name {
            if f != &self.fabric_attr.name {
                return Err(format!("fabric {} not {f}", self.fabric_attr.name));
            }
        }
        if h.threading != Threading::Unspec
            && self.domain_attr.threading != Threading::Safe
            && h.threading != self.domain_attr.threading
        {
            return Err(format!("threading {} not {}", self.domain_attr.threading, h.threading));
        }
        for (want, have, what) in [
            (h.data_progress, self.domain_attr.data_progress, "data progress"),
            (h.control_progress, self.domain_attr.control_progress, "control progress"),
        ] {
            if want != Progress::Unspec && want != have {
                return Err(format!("{what} {have} not {want}"));
            }
        }
        if h.av_type != AvType::Unspec
            && self.domain_attr.av_type != AvType::Unspec
            && h.av_type != self.domain_attr.av_type
        {
            return Err(format!("av type {} not {}", self.domain_attr.av_type, h.av_type));
        }
        if let Some(m) = h.mr_mode {
            if !m.contains(self.domain_attr.mr_mode) {
                return Err("application does not support the mr_mode required".into());
            }
        }
        if h.tx_size > self.tx_attr.size {
            return Err(format!("tx size {} above {}", h.tx_size, self.tx_attr.size));
        }
        if h.rx_size > self.rx_attr.size {
            return Err(format!("rx size {} above {}", h.rx_size, self.rx_attr.size));
        }
        if !self.tx_attr.msg_order.contains(h.msg_order) {
            return Err("message ordering not offered".into());
        }
        Ok(())
    }

    /// Narrow an offered entry to what the hints asked for, as libfabric does: the
    /// caps become those asked for (plus the secondary ones offered) when some were
    /// asked, and the AV type the one asked for.
    pub fn narrow(&mut self, h: &Hints) {
        if !h.caps.is_empty() {
            let primary = Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::MULTICAST;
            let secondary = self.caps
                - primary
                - Caps::READ
                - Caps::WRITE
                - Caps::SEND
                - Caps::RECV
                - Caps::REMOTE_READ
                - Caps::REMOTE_WRITE;
            let mut caps = h.caps | (self.caps & secondary);
            let dirs = Caps::SEND | Caps::RECV | Caps::READ | Caps::WRITE | Caps::REMOTE_READ | Caps::REMOTE_WRITE;
            if (h.caps & dirs).is_empty() {
                caps |= self.caps & dirs;
            }
            self.caps = caps & self.caps;
            self.tx_attr.caps &= self.caps;
            self.rx_attr.caps &= self.caps;
        }
        if h.av_type != AvType::Unspec {
            self.domain_attr.av_type = h.av_type;
        }
        if h.threading != Threading::Unspec {
            self.domain_attr.threading = h.threading;
        }
        if h.tx_size > 0 {
            self.tx_attr.size = h.tx_size;
        }
        if h.rx_size > 0 {
            self.rx_attr.size = h.rx_size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Info {
        let mut i =
            Info { caps: Caps::MSG | Caps::TAGGED | Caps::SEND | Caps::RECV | Caps::SOURCE, ..Default::default() };
        i.ep_attr.ep_type = EpType::Rdm;
        i.addr_format = AddrFormat::SockaddrIn;
        i.domain_attr.name = "lo".into();
        i.fabric_attr.name = "127.0.0.0/8".into();
        i.tx_attr.size = 1024;
        i.rx_attr.size = 1024;
        i.domain_attr.threading = Threading::Safe;
        i
    }

    #[test]
    fn hints_filter_and_say_why() {
        let i = entry();
        assert!(i.check(&Hints::new()).is_ok());
        assert!(i.check(&Hints::new().ep_type(EpType::Rdm).caps(Caps::TAGGED)).is_ok());
        let e = i.check(&Hints::new().caps(Caps::RMA)).unwrap_err();
        assert!(e.contains("FI_RMA"), "{e}");
        assert!(i.check(&Hints::new().ep_type(EpType::Msg)).is_err());
        assert!(i.check(&Hints::new().domain("eth0")).is_err());
        assert!(i.check(&Hints::new().fabric("127.0.0.0/8")).is_ok());
        assert!(i.check(&Hints::new().addr_format(AddrFormat::Sockaddr)).is_ok());
        assert!(i.check(&Hints::new().addr_format(AddrFormat::SockaddrIn6)).is_err());
        let h = Hints { tx_size: 4096, ..Hints::new() };
        assert!(i.check(&h).is_err());
    }

    #[test]
    fn every_hint_has_a_builder() {
        let a = Address::parse("127.0.0.1:7000").unwrap();
        let b = Address::parse("127.0.0.1:7001").unwrap();
        let h = Hints::new()
            .provider("tcp")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG)
            .mode(Mode::CONTEXT)
            .addr_format(AddrFormat::SockaddrIn)
            .node("127.0.0.1")
            .service("7000")
            .source(true)
            .src_addr(a.clone())
            .dest_addr(b.clone())
            .domain("lo")
            .fabric("127.0.0.0/8")
            .threading(Threading::Domain)
            .progress(Progress::Manual)
            .control_progress(Progress::Auto)
            .av_type(AvType::Table)
            .mr_mode(MrMode::LOCAL)
            .tx_size(64)
            .rx_size(128)
            .msg_order(MsgOrder::SAS);
        assert_eq!(h.prov_name.as_deref(), Some("tcp"));
        assert_eq!((h.ep_type, h.caps, h.mode), (EpType::Rdm, Caps::MSG, Some(Mode::CONTEXT)));
        assert_eq!(h.addr_format, AddrFormat::SockaddrIn);
        assert_eq!((h.node.as_deref(), h.service.as_deref(), h.source), (Some("127.0.0.1"), Some("7000"), true));
        assert_eq!((h.src_addr, h.dest_addr), (Some(a), Some(b)));
        assert_eq!((h.domain_name.as_deref(), h.fabric_name.as_deref()), (Some("lo"), Some("127.0.0.0/8")));
        assert_eq!(h.threading, Threading::Domain);
        assert_eq!((h.data_progress, h.control_progress), (Progress::Manual, Progress::Auto));
        assert_eq!((h.av_type, h.mr_mode), (AvType::Table, Some(MrMode::LOCAL)));
        assert_eq!((h.tx_size, h.rx_size, h.msg_order), (64, 128, MsgOrder::SAS));

        // And they select as the fields do.
        let i = entry();
        assert!(i.check(&Hints::new().tx_size(1024).rx_size(512)).is_ok());
        assert!(i.check(&Hints::new().rx_size(4096)).is_err());
        assert!(i.check(&Hints::new().threading(Threading::Safe)).is_ok());
        let mut narrowed = entry();
        narrowed.narrow(&Hints::new().threading(Threading::Domain).tx_size(64));
        assert_eq!((narrowed.domain_attr.threading, narrowed.tx_attr.size), (Threading::Domain, 64));
    }

    #[test]
    fn narrowing_keeps_secondary_caps() {
        let mut i = entry();
        i.narrow(&Hints::new().caps(Caps::TAGGED));
        assert!(i.caps.contains(Caps::TAGGED | Caps::SOURCE | Caps::SEND | Caps::RECV));
        assert!(!i.caps.contains(Caps::MSG));
    }

    #[test]
    fn enum_names_parse() {
        assert_eq!(EpType::parse("rdm"), Some(EpType::Rdm));
        assert_eq!(EpType::parse("FI_EP_MSG"), Some(EpType::Msg));
        assert_eq!(EpType::Dgram.to_string(), "FI_EP_DGRAM");
        assert_eq!(AvType::parse("fi_av_table"), Some(AvType::Table));
        assert_eq!(version_major(version(1, 17)), 1);
    }
}

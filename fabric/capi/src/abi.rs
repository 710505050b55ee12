//! libfabric 1.17's C ABI: its structs as `#[repr(C)]` Rust structs and its
//! constants, named exactly as in the C headers (`<rdma/fabric.h>`, `fi_domain.h`,
//! `fi_endpoint.h`, `fi_eq.h`, `fi_cm.h`, `fi_tagged.h`, `fi_rma.h`,
//! `fi_atomic.h`, `fi_errno.h`, `fi_collective.h`, `fi_trigger.h`,
//! `providers/fi_log.h`, `providers/fi_prov.h`).
//!
//! Conventions:
//! - a struct and each of its fields carry the C name; an anonymous C union
//!   becomes a Rust union named `<struct>_<field>` (`fi_mr_attr_device`);
//! - a named C enum is a `pub type fi_xxx = c_int` and its values are `c_int`
//!   constants; the values of an anonymous enum take the type of the field that
//!   holds them (`FI_CLASS_*` are `usize` like `fid.fclass`, `FI_FORMAT_*` and
//!   `FI_PROTO_*` `u32`, the EQ events `u32`), the other ones are `c_int`;
//! - flag and capability bits are `u64`, like the fields that hold them, except
//!   the `FI_MR_*` mode bits, which are `c_int` like `fi_domain_attr.mr_mode`;
//! - a function pointer is an `Option<unsafe extern "C" fn(..)>` with the C
//!   signature, so that a NULL entry of an operations table is representable;
//! - a flexible array member (`fi_eq_cm_entry.data[]`) is a zero-length array.
//!
//! `tests/layout.rs` compares every size, alignment and field offset here with
//! the system's headers, compiled by the C compiler.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
// The operation tables are the C signatures, however long.
#![allow(clippy::type_complexity)]

use core::ffi::{c_char, c_int, c_void};

pub use libc::iovec;

// ---------------------------------------------------------------------------
// fabric.h: versions
// ---------------------------------------------------------------------------

/// The major version of the headers this ABI follows.
pub const FI_MAJOR_VERSION: u32 = 1;
/// The minor version of the headers this ABI follows.
pub const FI_MINOR_VERSION: u32 = 17;
/// The revision of the headers this ABI follows.
pub const FI_REVISION_VERSION: u32 = 0;

/// Longest path libfabric handles.
pub const FI_PATH_MAX: usize = 256;
/// Longest name libfabric handles.
pub const FI_NAME_MAX: usize = 64;
/// Longest version string libfabric handles.
pub const FI_VERSION_MAX: usize = 64;

/// `FI_VERSION(major, minor)`: an API version number as `fi_getinfo` takes it.
pub const fn FI_VERSION(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// `FI_MAJOR(version)`: the major part of a version number.
pub const fn FI_MAJOR(version: u32) -> u32 {
    version >> 16
}

/// `FI_MINOR(version)`: the minor part of a version number.
pub const fn FI_MINOR(version: u32) -> u32 {
    version & 0xFFFF
}

/// `fid_t`: a pointer to any fabric object's `struct fid`.
pub type fid_t = *mut fid;

/// `fi_addr_t`: an address vector index or handle.
pub type fi_addr_t = u64;

// ---------------------------------------------------------------------------
// fabric.h: capability and operation flags
// ---------------------------------------------------------------------------

/// Bit reserved for provider-specific values.
pub const FI_PROV_SPECIFIC: u32 = 1 << 31;
/// Capability: messages.
pub const FI_MSG: u64 = 1 << 1;
/// Capability: remote memory access.
pub const FI_RMA: u64 = 1 << 2;
/// Capability: tagged messages.
pub const FI_TAGGED: u64 = 1 << 3;
/// Capability: atomic operations.
pub const FI_ATOMIC: u64 = 1 << 4;
/// Older spelling of `FI_ATOMIC`.
pub const FI_ATOMICS: u64 = FI_ATOMIC;
/// Capability: multicast.
pub const FI_MULTICAST: u64 = 1 << 5;
/// Capability: collectives.
pub const FI_COLLECTIVE: u64 = 1 << 6;
/// Initiates reads / memory readable by local reads.
pub const FI_READ: u64 = 1 << 8;
/// Initiates writes / memory writable by local writes.
pub const FI_WRITE: u64 = 1 << 9;
/// Receive side.
pub const FI_RECV: u64 = 1 << 10;
/// Send side.
pub const FI_SEND: u64 = 1 << 11;
/// Transmit side (same bit as `FI_SEND`).
pub const FI_TRANSMIT: u64 = FI_SEND;
/// Target of remote reads.
pub const FI_REMOTE_READ: u64 = 1 << 12;
/// Target of remote writes.
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
/// Multi-receive buffers.
pub const FI_MULTI_RECV: u64 = 1 << 16;
/// Remote CQ data.
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
/// More operations follow.
pub const FI_MORE: u64 = 1 << 18;
/// Peek at a matching message.
pub const FI_PEEK: u64 = 1 << 19;
/// Triggered operations.
pub const FI_TRIGGER: u64 = 1 << 20;
/// Fence the operation behind earlier ones.
pub const FI_FENCE: u64 = 1 << 21;
/// Priority (reserved).
pub const FI_PRIORITY: u64 = 1 << 22;
/// Generate a completion.
pub const FI_COMPLETION: u64 = 1 << 24;
/// Same bit as `FI_COMPLETION`.
pub const FI_EVENT: u64 = FI_COMPLETION;
/// Inject: the buffer may be reused on return.
pub const FI_INJECT: u64 = 1 << 25;
/// Complete once the buffer may be reused.
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
/// Complete once the data left the local side.
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
/// Complete once the data was delivered to the target.
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
/// Affinity.
pub const FI_AFFINITY: u64 = 1 << 29;
/// Complete once the data is persistent at the target.
pub const FI_COMMIT_COMPLETE: u64 = 1 << 30;
/// Complete once the message was matched at the target.
pub const FI_MATCH_COMPLETE: u64 = 1 << 31;
/// Peer transfer.
pub const FI_PEER_TRANSFER: u64 = 1 << 36;
/// User-supplied AV ids.
pub const FI_AV_USER_ID: u64 = 1 << 41;
/// Peer provider.
pub const FI_PEER: u64 = 1 << 43;
/// XPU-triggered operations.
pub const FI_XPU_TRIGGER: u64 = 1 << 44;
/// Heterogeneous memory: host allocation.
pub const FI_HMEM_HOST_ALLOC: u64 = 1 << 45;
/// Heterogeneous memory: device only.
pub const FI_HMEM_DEVICE_ONLY: u64 = 1 << 46;
/// Capability: heterogeneous memory.
pub const FI_HMEM: u64 = 1 << 47;
/// Capability: variable-length messages.
pub const FI_VARIABLE_MSG: u64 = 1 << 48;
/// Capability: persistent memory RMA.
pub const FI_RMA_PMEM: u64 = 1 << 49;
/// Capability: source address on errors.
pub const FI_SOURCE_ERR: u64 = 1 << 50;
/// Capability: communication within the node.
pub const FI_LOCAL_COMM: u64 = 1 << 51;
/// Capability: communication between nodes.
pub const FI_REMOTE_COMM: u64 = 1 << 52;
/// Capability: shared address vectors.
pub const FI_SHARED_AV: u64 = 1 << 53;
/// `fi_getinfo` flag: provider attributes only.
pub const FI_PROV_ATTR_ONLY: u64 = 1 << 54;
/// `fi_getinfo` flag: the node is a numeric host address.
pub const FI_NUMERICHOST: u64 = 1 << 55;
/// Capability: RMA events.
pub const FI_RMA_EVENT: u64 = 1 << 56;
/// Capability / `fi_getinfo` flag: source addresses.
pub const FI_SOURCE: u64 = 1 << 57;
/// Capability: named receive contexts.
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
/// Capability: receives directed at a source address.
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
/// Tagged receive flag: claim a peeked message.
pub const FI_CLAIM: u64 = 1 << 59;
/// Tagged receive flag: discard a peeked message.
pub const FI_DISCARD: u64 = 1 << 58;
/// Bind flag: completions only for operations with `FI_COMPLETION`.
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;

// ---------------------------------------------------------------------------
// fabric.h: address formats and special values
// ---------------------------------------------------------------------------

/// Address format: unspecified.
pub const FI_FORMAT_UNSPEC: u32 = 0;
/// Address format: `struct sockaddr`.
pub const FI_SOCKADDR: u32 = 1;
/// Address format: `struct sockaddr_in`.
pub const FI_SOCKADDR_IN: u32 = 2;
/// Address format: `struct sockaddr_in6`.
pub const FI_SOCKADDR_IN6: u32 = 3;
/// Address format: `struct sockaddr_ib`.
pub const FI_SOCKADDR_IB: u32 = 4;
/// Address format: PSM.
pub const FI_ADDR_PSMX: u32 = 5;
/// Address format: GNI.
pub const FI_ADDR_GNI: u32 = 6;
/// Address format: BG/Q.
pub const FI_ADDR_BGQ: u32 = 7;
/// Address format: MLX.
pub const FI_ADDR_MLX: u32 = 8;
/// Address format: a formatted string.
pub const FI_ADDR_STR: u32 = 9;
/// Address format: PSM2.
pub const FI_ADDR_PSMX2: u32 = 10;
/// Address format: InfiniBand UD.
pub const FI_ADDR_IB_UD: u32 = 11;
/// Address format: EFA.
pub const FI_ADDR_EFA: u32 = 12;
/// Address format: PSM3.
pub const FI_ADDR_PSMX3: u32 = 13;
/// Address format: OPX.
pub const FI_ADDR_OPX: u32 = 14;
/// Address format: CXI.
pub const FI_ADDR_CXI: u32 = 15;

/// No address given.
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
/// The address is not available.
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
/// The key is not available.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;
/// A shared context (`tx_ctx_cnt`/`rx_ctx_cnt`).
pub const FI_SHARED_CONTEXT: usize = usize::MAX;

// ---------------------------------------------------------------------------
// fabric.h: enums
// ---------------------------------------------------------------------------

/// `enum fi_av_type`.
pub type fi_av_type = c_int;
/// Address vector type: unspecified.
pub const FI_AV_UNSPEC: fi_av_type = 0;
/// Address vector type: map.
pub const FI_AV_MAP: fi_av_type = 1;
/// Address vector type: table.
pub const FI_AV_TABLE: fi_av_type = 2;

/// `enum fi_mr_mode` (the basic values; the mode bits follow).
pub type fi_mr_mode = c_int;
/// Memory registration mode: unspecified.
pub const FI_MR_UNSPEC: fi_mr_mode = 0;
/// Memory registration mode: basic (old).
pub const FI_MR_BASIC: fi_mr_mode = 1;
/// Memory registration mode: scalable (old).
pub const FI_MR_SCALABLE: fi_mr_mode = 2;
/// MR mode bit: local buffers must be registered.
pub const FI_MR_LOCAL: c_int = 1 << 2;
/// MR mode bit: raw keys.
pub const FI_MR_RAW: c_int = 1 << 3;
/// MR mode bit: RMA addresses are virtual addresses.
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
/// MR mode bit: registered memory must be allocated.
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
/// MR mode bit: the provider chooses keys.
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
/// MR mode bit: MMU notification.
pub const FI_MR_MMU_NOTIFY: c_int = 1 << 7;
/// MR mode bit: RMA events need binding.
pub const FI_MR_RMA_EVENT: c_int = 1 << 8;
/// MR mode bit: registrations bind to endpoints.
pub const FI_MR_ENDPOINT: c_int = 1 << 9;
/// MR mode bit: device memory must be registered.
pub const FI_MR_HMEM: c_int = 1 << 10;
/// MR mode bit: collective registrations.
pub const FI_MR_COLLECTIVE: c_int = 1 << 11;

/// `enum fi_progress`.
pub type fi_progress = c_int;
/// Progress: unspecified.
pub const FI_PROGRESS_UNSPEC: fi_progress = 0;
/// Progress: automatic.
pub const FI_PROGRESS_AUTO: fi_progress = 1;
/// Progress: manual.
pub const FI_PROGRESS_MANUAL: fi_progress = 2;

/// `enum fi_threading`.
pub type fi_threading = c_int;
/// Threading: unspecified.
pub const FI_THREAD_UNSPEC: fi_threading = 0;
/// Threading: thread safe.
pub const FI_THREAD_SAFE: fi_threading = 1;
/// Threading: per object.
pub const FI_THREAD_FID: fi_threading = 2;
/// Threading: per domain.
pub const FI_THREAD_DOMAIN: fi_threading = 3;
/// Threading: per completion queue.
pub const FI_THREAD_COMPLETION: fi_threading = 4;
/// Threading: per endpoint.
pub const FI_THREAD_ENDPOINT: fi_threading = 5;

/// `enum fi_resource_mgmt`.
pub type fi_resource_mgmt = c_int;
/// Resource management: unspecified.
pub const FI_RM_UNSPEC: fi_resource_mgmt = 0;
/// Resource management: disabled.
pub const FI_RM_DISABLED: fi_resource_mgmt = 1;
/// Resource management: enabled.
pub const FI_RM_ENABLED: fi_resource_mgmt = 2;

/// Ordering: none.
pub const FI_ORDER_NONE: u64 = 0;
/// Ordering: read after read.
pub const FI_ORDER_RAR: u64 = 1 << 0;
/// Ordering: read after write.
pub const FI_ORDER_RAW: u64 = 1 << 1;
/// Ordering: read after send.
pub const FI_ORDER_RAS: u64 = 1 << 2;
/// Ordering: write after read.
pub const FI_ORDER_WAR: u64 = 1 << 3;
/// Ordering: write after write.
pub const FI_ORDER_WAW: u64 = 1 << 4;
/// Ordering: write after send.
pub const FI_ORDER_WAS: u64 = 1 << 5;
/// Ordering: send after read.
pub const FI_ORDER_SAR: u64 = 1 << 6;
/// Ordering: send after write.
pub const FI_ORDER_SAW: u64 = 1 << 7;
/// Ordering: send after send.
pub const FI_ORDER_SAS: u64 = 1 << 8;
/// Ordering: all of the nine above.
pub const FI_ORDER_STRICT: u64 = 0x1FF;
/// Ordering: RMA read after read.
pub const FI_ORDER_RMA_RAR: u64 = 1 << 32;
/// Ordering: RMA read after write.
pub const FI_ORDER_RMA_RAW: u64 = 1 << 33;
/// Ordering: RMA write after read.
pub const FI_ORDER_RMA_WAR: u64 = 1 << 34;
/// Ordering: RMA write after write.
pub const FI_ORDER_RMA_WAW: u64 = 1 << 35;
/// Ordering: atomic read after read.
pub const FI_ORDER_ATOMIC_RAR: u64 = 1 << 36;
/// Ordering: atomic read after write.
pub const FI_ORDER_ATOMIC_RAW: u64 = 1 << 37;
/// Ordering: atomic write after read.
pub const FI_ORDER_ATOMIC_WAR: u64 = 1 << 38;
/// Ordering: atomic write after write.
pub const FI_ORDER_ATOMIC_WAW: u64 = 1 << 39;
/// Ordering: data placement.
pub const FI_ORDER_DATA: u64 = 1 << 16;

/// `enum fi_ep_type`.
pub type fi_ep_type = c_int;
/// Endpoint type: unspecified.
pub const FI_EP_UNSPEC: fi_ep_type = 0;
/// Endpoint type: connected messages.
pub const FI_EP_MSG: fi_ep_type = 1;
/// Endpoint type: unreliable datagrams.
pub const FI_EP_DGRAM: fi_ep_type = 2;
/// Endpoint type: reliable datagrams.
pub const FI_EP_RDM: fi_ep_type = 3;
/// Endpoint type: stream socket.
pub const FI_EP_SOCK_STREAM: fi_ep_type = 4;
/// Endpoint type: datagram socket.
pub const FI_EP_SOCK_DGRAM: fi_ep_type = 5;

/// Protocol: unspecified.
pub const FI_PROTO_UNSPEC: u32 = 0;
/// Protocol: RDMA CM over InfiniBand RC.
pub const FI_PROTO_RDMA_CM_IB_RC: u32 = 1;
/// Protocol: iWARP.
pub const FI_PROTO_IWARP: u32 = 2;
/// Protocol: InfiniBand UD.
pub const FI_PROTO_IB_UD: u32 = 3;
/// Protocol: PSM.
pub const FI_PROTO_PSMX: u32 = 4;
/// Protocol: UDP.
pub const FI_PROTO_UDP: u32 = 5;
/// Protocol: TCP sockets.
pub const FI_PROTO_SOCK_TCP: u32 = 6;
/// Protocol: MXM (deprecated).
pub const FI_PROTO_MXM: u32 = 7;
/// Protocol: iWARP RDM.
pub const FI_PROTO_IWARP_RDM: u32 = 8;
/// Protocol: InfiniBand RDM.
pub const FI_PROTO_IB_RDM: u32 = 9;
/// Protocol: GNI.
pub const FI_PROTO_GNI: u32 = 10;
/// Protocol: RxM.
pub const FI_PROTO_RXM: u32 = 11;
/// Protocol: RxD.
pub const FI_PROTO_RXD: u32 = 12;
/// Protocol: MLX.
pub const FI_PROTO_MLX: u32 = 13;
/// Protocol: NetworkDirect.
pub const FI_PROTO_NETWORKDIRECT: u32 = 14;
/// Protocol: PSM2.
pub const FI_PROTO_PSMX2: u32 = 15;
/// Protocol: shared memory.
pub const FI_PROTO_SHM: u32 = 16;
/// Protocol: multi-rail.
pub const FI_PROTO_MRAIL: u32 = 17;
/// Protocol: rstream.
pub const FI_PROTO_RSTREAM: u32 = 18;
/// Protocol: RDMA CM over InfiniBand XRC.
pub const FI_PROTO_RDMA_CM_IB_XRC: u32 = 19;
/// Protocol: EFA.
pub const FI_PROTO_EFA: u32 = 20;
/// Protocol: PSM3.
pub const FI_PROTO_PSMX3: u32 = 21;
/// Protocol: RxM over TCP.
pub const FI_PROTO_RXM_TCP: u32 = 22;
/// Protocol: OPX.
pub const FI_PROTO_OPX: u32 = 23;
/// Protocol: CXI.
pub const FI_PROTO_CXI: u32 = 24;
/// Protocol: xnet.
pub const FI_PROTO_XNET: u32 = 25;

/// Traffic class: unspecified.
pub const FI_TC_UNSPEC: u32 = 0;
/// Traffic class: a DSCP value in the low bits.
pub const FI_TC_DSCP: u32 = 0x100;
/// Traffic class: a label.
pub const FI_TC_LABEL: u32 = 0x200;
/// Traffic class: best effort.
pub const FI_TC_BEST_EFFORT: u32 = FI_TC_LABEL;
/// Traffic class: low latency.
pub const FI_TC_LOW_LATENCY: u32 = 0x201;
/// Traffic class: dedicated access.
pub const FI_TC_DEDICATED_ACCESS: u32 = 0x202;
/// Traffic class: bulk data.
pub const FI_TC_BULK_DATA: u32 = 0x203;
/// Traffic class: scavenger.
pub const FI_TC_SCAVENGER: u32 = 0x204;
/// Traffic class: network control.
pub const FI_TC_NETWORK_CTRL: u32 = 0x205;

/// Mode: operations carry a `struct fi_context`.
pub const FI_CONTEXT: u64 = 1 << 59;
/// Mode: messages carry a prefix.
pub const FI_MSG_PREFIX: u64 = 1 << 58;
/// Mode: iovecs must stay valid until completion.
pub const FI_ASYNC_IOV: u64 = 1 << 57;
/// Mode: remote CQ data needs a posted receive.
pub const FI_RX_CQ_DATA: u64 = 1 << 56;
/// Mode: local buffers must be registered (old).
pub const FI_LOCAL_MR: u64 = 1 << 55;
/// Mode: completions report only notification flags.
pub const FI_NOTIFY_FLAGS_ONLY: u64 = 1 << 54;
/// Mode: restricted completions.
pub const FI_RESTRICTED_COMP: u64 = 1 << 53;
/// Mode: operations carry a `struct fi_context2`.
pub const FI_CONTEXT2: u64 = 1 << 52;
/// Mode: buffered receives.
pub const FI_BUFFERED_RECV: u64 = 1 << 51;

// ---------------------------------------------------------------------------
// fabric.h: fi_info and its attributes
// ---------------------------------------------------------------------------

/// `struct fi_ioc`: a buffer counted in datatype elements.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ioc {
    /// `addr`: the buffer.
    pub addr: *mut c_void,
    /// `count`: how many elements.
    pub count: usize,
}

/// `struct fi_tx_attr`: transmit context attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_tx_attr {
    /// `caps`: capabilities.
    pub caps: u64,
    /// `mode`: mode bits.
    pub mode: u64,
    /// `op_flags`: default operation flags.
    pub op_flags: u64,
    /// `msg_order`: message ordering.
    pub msg_order: u64,
    /// `comp_order`: completion ordering.
    pub comp_order: u64,
    /// `inject_size`: largest inject.
    pub inject_size: usize,
    /// `size`: queue depth.
    pub size: usize,
    /// `iov_limit`: most iovecs per operation.
    pub iov_limit: usize,
    /// `rma_iov_limit`: most RMA iovecs per operation.
    pub rma_iov_limit: usize,
    /// `tclass`: traffic class.
    pub tclass: u32,
}

/// `struct fi_rx_attr`: receive context attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_rx_attr {
    /// `caps`: capabilities.
    pub caps: u64,
    /// `mode`: mode bits.
    pub mode: u64,
    /// `op_flags`: default operation flags.
    pub op_flags: u64,
    /// `msg_order`: message ordering.
    pub msg_order: u64,
    /// `comp_order`: completion ordering.
    pub comp_order: u64,
    /// `total_buffered_recv`: buffered receive space.
    pub total_buffered_recv: usize,
    /// `size`: queue depth.
    pub size: usize,
    /// `iov_limit`: most iovecs per operation.
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`: endpoint attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ep_attr {
    /// `type`: the endpoint type.
    pub r#type: fi_ep_type,
    /// `protocol`: the wire protocol (`FI_PROTO_*`).
    pub protocol: u32,
    /// `protocol_version`: its version.
    pub protocol_version: u32,
    /// `max_msg_size`: largest message.
    pub max_msg_size: usize,
    /// `msg_prefix_size`: prefix size under `FI_MSG_PREFIX`.
    pub msg_prefix_size: usize,
    /// `max_order_raw_size`: read-after-write ordering limit.
    pub max_order_raw_size: usize,
    /// `max_order_war_size`: write-after-read ordering limit.
    pub max_order_war_size: usize,
    /// `max_order_waw_size`: write-after-write ordering limit.
    pub max_order_waw_size: usize,
    /// `mem_tag_format`: tag format.
    pub mem_tag_format: u64,
    /// `tx_ctx_cnt`: transmit contexts.
    pub tx_ctx_cnt: usize,
    /// `rx_ctx_cnt`: receive contexts.
    pub rx_ctx_cnt: usize,
    /// `auth_key_size`: authorization key length.
    pub auth_key_size: usize,
    /// `auth_key`: authorization key.
    pub auth_key: *mut u8,
}

/// `struct fi_domain_attr`: domain attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_domain_attr {
    /// `domain`: an open domain, or NULL.
    pub domain: *mut fid_domain,
    /// `name`: the domain's name.
    pub name: *mut c_char,
    /// `threading`: threading model.
    pub threading: fi_threading,
    /// `control_progress`: control progress model.
    pub control_progress: fi_progress,
    /// `data_progress`: data progress model.
    pub data_progress: fi_progress,
    /// `resource_mgmt`: resource management.
    pub resource_mgmt: fi_resource_mgmt,
    /// `av_type`: address vector type.
    pub av_type: fi_av_type,
    /// `mr_mode`: memory registration mode bits.
    pub mr_mode: c_int,
    /// `mr_key_size`: key size.
    pub mr_key_size: usize,
    /// `cq_data_size`: remote CQ data bytes.
    pub cq_data_size: usize,
    /// `cq_cnt`: completion queues.
    pub cq_cnt: usize,
    /// `ep_cnt`: endpoints.
    pub ep_cnt: usize,
    /// `tx_ctx_cnt`: transmit contexts.
    pub tx_ctx_cnt: usize,
    /// `rx_ctx_cnt`: receive contexts.
    pub rx_ctx_cnt: usize,
    /// `max_ep_tx_ctx`: transmit contexts per endpoint.
    pub max_ep_tx_ctx: usize,
    /// `max_ep_rx_ctx`: receive contexts per endpoint.
    pub max_ep_rx_ctx: usize,
    /// `max_ep_stx_ctx`: shared transmit contexts per endpoint.
    pub max_ep_stx_ctx: usize,
    /// `max_ep_srx_ctx`: shared receive contexts per endpoint.
    pub max_ep_srx_ctx: usize,
    /// `cntr_cnt`: counters.
    pub cntr_cnt: usize,
    /// `mr_iov_limit`: most iovecs per registration.
    pub mr_iov_limit: usize,
    /// `caps`: domain capabilities.
    pub caps: u64,
    /// `mode`: domain mode bits.
    pub mode: u64,
    /// `auth_key`: authorization key.
    pub auth_key: *mut u8,
    /// `auth_key_size`: its length.
    pub auth_key_size: usize,
    /// `max_err_data`: largest error data.
    pub max_err_data: usize,
    /// `mr_cnt`: memory registrations.
    pub mr_cnt: usize,
    /// `tclass`: traffic class.
    pub tclass: u32,
}

/// `struct fi_fabric_attr`: fabric attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_fabric_attr {
    /// `fabric`: an open fabric, or NULL.
    pub fabric: *mut fid_fabric,
    /// `name`: the fabric's name.
    pub name: *mut c_char,
    /// `prov_name`: the provider's name.
    pub prov_name: *mut c_char,
    /// `prov_version`: the provider's version.
    pub prov_version: u32,
    /// `api_version`: the API version.
    pub api_version: u32,
}

/// `struct fi_info`: a fabric interface description (`fi_getinfo`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_info {
    /// `next`: the next entry of the list.
    pub next: *mut fi_info,
    /// `caps`: capabilities.
    pub caps: u64,
    /// `mode`: mode bits.
    pub mode: u64,
    /// `addr_format`: address format (`FI_FORMAT_*`, `FI_SOCKADDR*`, `FI_ADDR_*`).
    pub addr_format: u32,
    /// `src_addrlen`: source address length.
    pub src_addrlen: usize,
    /// `dest_addrlen`: destination address length.
    pub dest_addrlen: usize,
    /// `src_addr`: source address.
    pub src_addr: *mut c_void,
    /// `dest_addr`: destination address.
    pub dest_addr: *mut c_void,
    /// `handle`: a connection request or passive endpoint.
    pub handle: fid_t,
    /// `tx_attr`: transmit attributes.
    pub tx_attr: *mut fi_tx_attr,
    /// `rx_attr`: receive attributes.
    pub rx_attr: *mut fi_rx_attr,
    /// `ep_attr`: endpoint attributes.
    pub ep_attr: *mut fi_ep_attr,
    /// `domain_attr`: domain attributes.
    pub domain_attr: *mut fi_domain_attr,
    /// `fabric_attr`: fabric attributes.
    pub fabric_attr: *mut fi_fabric_attr,
    /// `nic`: NIC description.
    pub nic: *mut fid_nic,
}

/// `struct fi_device_attr`: a NIC's device attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_device_attr {
    /// `name`: device name.
    pub name: *mut c_char,
    /// `device_id`: device id.
    pub device_id: *mut c_char,
    /// `device_version`: device version.
    pub device_version: *mut c_char,
    /// `vendor_id`: vendor id.
    pub vendor_id: *mut c_char,
    /// `driver`: driver name.
    pub driver: *mut c_char,
    /// `firmware`: firmware version.
    pub firmware: *mut c_char,
}

/// `enum fi_bus_type`.
pub type fi_bus_type = c_int;
/// Bus: unspecified.
pub const FI_BUS_UNSPEC: fi_bus_type = 0;
/// Bus: unknown (same as unspecified).
pub const FI_BUS_UNKNOWN: fi_bus_type = FI_BUS_UNSPEC;
/// Bus: PCI.
pub const FI_BUS_PCI: fi_bus_type = 1;

/// `struct fi_pci_attr`: a PCI address.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_pci_attr {
    /// `domain_id`: PCI domain.
    pub domain_id: u16,
    /// `bus_id`: PCI bus.
    pub bus_id: u8,
    /// `device_id`: PCI device.
    pub device_id: u8,
    /// `function_id`: PCI function.
    pub function_id: u8,
}

/// The anonymous union `fi_bus_attr.attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_bus_attr_attr {
    /// `pci`: the PCI address.
    pub pci: fi_pci_attr,
}

/// `struct fi_bus_attr`: a NIC's bus attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_bus_attr {
    /// `bus_type`: the bus.
    pub bus_type: fi_bus_type,
    /// `attr`: its address.
    pub attr: fi_bus_attr_attr,
}

/// `enum fi_link_state`.
pub type fi_link_state = c_int;
/// Link state: unknown.
pub const FI_LINK_UNKNOWN: fi_link_state = 0;
/// Link state: down.
pub const FI_LINK_DOWN: fi_link_state = 1;
/// Link state: up.
pub const FI_LINK_UP: fi_link_state = 2;

/// `struct fi_link_attr`: a NIC's link attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_link_attr {
    /// `address`: link address.
    pub address: *mut c_char,
    /// `mtu`: MTU.
    pub mtu: usize,
    /// `speed`: speed in bits per second.
    pub speed: usize,
    /// `state`: link state.
    pub state: fi_link_state,
    /// `network_type`: network type.
    pub network_type: *mut c_char,
}

// ---------------------------------------------------------------------------
// fabric.h: object classes, fid, control commands
// ---------------------------------------------------------------------------

/// Object class: unspecified.
pub const FI_CLASS_UNSPEC: usize = 0;
/// Object class: fabric.
pub const FI_CLASS_FABRIC: usize = 1;
/// Object class: domain.
pub const FI_CLASS_DOMAIN: usize = 2;
/// Object class: endpoint.
pub const FI_CLASS_EP: usize = 3;
/// Object class: scalable endpoint.
pub const FI_CLASS_SEP: usize = 4;
/// Object class: receive context.
pub const FI_CLASS_RX_CTX: usize = 5;
/// Object class: shared receive context.
pub const FI_CLASS_SRX_CTX: usize = 6;
/// Object class: transmit context.
pub const FI_CLASS_TX_CTX: usize = 7;
/// Object class: shared transmit context.
pub const FI_CLASS_STX_CTX: usize = 8;
/// Object class: passive endpoint.
pub const FI_CLASS_PEP: usize = 9;
/// Object class: interface.
pub const FI_CLASS_INTERFACE: usize = 10;
/// Object class: address vector.
pub const FI_CLASS_AV: usize = 11;
/// Object class: memory region.
pub const FI_CLASS_MR: usize = 12;
/// Object class: event queue.
pub const FI_CLASS_EQ: usize = 13;
/// Object class: completion queue.
pub const FI_CLASS_CQ: usize = 14;
/// Object class: counter.
pub const FI_CLASS_CNTR: usize = 15;
/// Object class: wait set.
pub const FI_CLASS_WAIT: usize = 16;
/// Object class: poll set.
pub const FI_CLASS_POLL: usize = 17;
/// Object class: connection request.
pub const FI_CLASS_CONNREQ: usize = 18;
/// Object class: multicast group.
pub const FI_CLASS_MC: usize = 19;
/// Object class: NIC.
pub const FI_CLASS_NIC: usize = 20;
/// Object class: address vector set.
pub const FI_CLASS_AV_SET: usize = 21;
/// Object class: MR cache.
pub const FI_CLASS_MR_CACHE: usize = 22;
/// Object class: memory monitor.
pub const FI_CLASS_MEM_MONITOR: usize = 23;
/// Object class: peer CQ.
pub const FI_CLASS_PEER_CQ: usize = 24;
/// Object class: peer shared receive context.
pub const FI_CLASS_PEER_SRX: usize = 25;
/// Object class: log.
pub const FI_CLASS_LOG: usize = 26;
/// Object class: peer AV.
pub const FI_CLASS_PEER_AV: usize = 27;
/// Object class: peer AV set.
pub const FI_CLASS_PEER_AV_SET: usize = 28;

/// `struct fi_ops`: the operations every object has.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `close`: `fi_close`.
    pub close: Option<unsafe extern "C" fn(fid: *mut fid) -> c_int>,
    /// `bind`: `fi_*_bind`.
    pub bind: Option<unsafe extern "C" fn(fid: *mut fid, bfid: *mut fid, flags: u64) -> c_int>,
    /// `control`: `fi_control`.
    pub control: Option<unsafe extern "C" fn(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int>,
    /// `ops_open`: `fi_open_ops`.
    pub ops_open: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            name: *const c_char,
            flags: u64,
            ops: *mut *mut c_void,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `tostr`: describes the object.
    pub tostr: Option<unsafe extern "C" fn(fid: *const fid, buf: *mut c_char, len: usize) -> c_int>,
    /// `ops_set`: `fi_set_ops`.
    pub ops_set: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            name: *const c_char,
            flags: u64,
            ops: *mut c_void,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fid`: the header of every fabric object.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid {
    /// `fclass`: the object's class (`FI_CLASS_*`).
    pub fclass: usize,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `ops`: the common operations.
    pub ops: *mut fi_ops,
}

/// `struct fi_ops_fabric`: a fabric's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_fabric {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `domain`: `fi_domain`.
    pub domain: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            dom: *mut *mut fid_domain,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `passive_ep`: `fi_passive_ep`.
    pub passive_ep: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            pep: *mut *mut fid_pep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `eq_open`: `fi_eq_open`.
    pub eq_open: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            attr: *mut fi_eq_attr,
            eq: *mut *mut fid_eq,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `wait_open`: `fi_wait_open`.
    pub wait_open: Option<
        unsafe extern "C" fn(fabric: *mut fid_fabric, attr: *mut fi_wait_attr, waitset: *mut *mut fid_wait) -> c_int,
    >,
    /// `trywait`: `fi_trywait`.
    pub trywait: Option<unsafe extern "C" fn(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int>,
    /// `domain2`: `fi_domain2`.
    pub domain2: Option<
        unsafe extern "C" fn(
            fabric: *mut fid_fabric,
            info: *mut fi_info,
            dom: *mut *mut fid_domain,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fid_fabric`: a fabric.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_fabric {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the fabric's operations.
    pub ops: *mut fi_ops_fabric,
    /// `api_version`: the API version it was opened with.
    pub api_version: u32,
}

/// `struct fid_nic`: a NIC description.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_nic {
    /// `fid`: the object header.
    pub fid: fid,
    /// `device_attr`: device attributes.
    pub device_attr: *mut fi_device_attr,
    /// `bus_attr`: bus attributes.
    pub bus_attr: *mut fi_bus_attr,
    /// `link_attr`: link attributes.
    pub link_attr: *mut fi_link_attr,
    /// `prov_attr`: provider-specific attributes.
    pub prov_attr: *mut c_void,
}

/// `struct fi_alias`: the argument of `FI_ALIAS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_alias {
    /// `fid`: where the alias goes.
    pub fid: *mut *mut fid,
    /// `flags`: the alias's operation flags.
    pub flags: u64,
}

/// `struct fi_fid_var`: the argument of `FI_GET_VAL`/`FI_SET_VAL`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_fid_var {
    /// `name`: the variable.
    pub name: c_int,
    /// `val`: its value.
    pub val: *mut c_void,
}

/// `struct fi_mr_raw_attr`: the argument of `FI_GET_RAW_MR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_raw_attr {
    /// `flags`: flags.
    pub flags: u64,
    /// `base_addr`: receives the base address.
    pub base_addr: *mut u64,
    /// `raw_key`: receives the raw key.
    pub raw_key: *mut u8,
    /// `key_size`: the key buffer's size, in and out.
    pub key_size: *mut usize,
}

/// `struct fi_mr_map_raw`: the argument of `FI_MAP_RAW_MR`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_map_raw {
    /// `flags`: flags.
    pub flags: u64,
    /// `base_addr`: the base address.
    pub base_addr: u64,
    /// `raw_key`: the raw key.
    pub raw_key: *mut u8,
    /// `key_size`: its size.
    pub key_size: usize,
    /// `key`: receives the mapped key.
    pub key: *mut u64,
}

/// Control command: get the object's operation flags.
pub const FI_GETFIDFLAG: c_int = 0;
/// Control command: set the object's operation flags.
pub const FI_SETFIDFLAG: c_int = 1;
/// Control command: get the default operation flags.
pub const FI_GETOPSFLAG: c_int = 2;
/// Control command: set the default operation flags.
pub const FI_SETOPSFLAG: c_int = 3;
/// Control command: create an alias (`struct fi_alias`).
pub const FI_ALIAS: c_int = 4;
/// Control command: get the wait object.
pub const FI_GETWAIT: c_int = 5;
/// Control command: enable an endpoint.
pub const FI_ENABLE: c_int = 6;
/// Control command: set the listen backlog.
pub const FI_BACKLOG: c_int = 7;
/// Control command: get a raw MR key (`struct fi_mr_raw_attr`).
pub const FI_GET_RAW_MR: c_int = 8;
/// Control command: map a raw MR key (`struct fi_mr_map_raw`).
pub const FI_MAP_RAW_MR: c_int = 9;
/// Control command: unmap a key.
pub const FI_UNMAP_KEY: c_int = 10;
/// Control command: queue deferred work (`struct fi_deferred_work`).
pub const FI_QUEUE_WORK: c_int = 11;
/// Control command: cancel deferred work.
pub const FI_CANCEL_WORK: c_int = 12;
/// Control command: flush deferred work.
pub const FI_FLUSH_WORK: c_int = 13;
/// Control command: refresh a registration (`struct fi_mr_modify`).
pub const FI_REFRESH: c_int = 14;
/// Control command: duplicate the object.
pub const FI_DUP: c_int = 15;
/// Control command: get the wait object's type.
pub const FI_GETWAITOBJ: c_int = 16;
/// Control command: get a variable (`struct fi_fid_var`).
pub const FI_GET_VAL: c_int = 17;
/// Control command: set a variable (`struct fi_fid_var`).
pub const FI_SET_VAL: c_int = 18;
/// Control command: export the object.
pub const FI_EXPORT_FID: c_int = 19;

/// `enum fi_type`: what `fi_tostr` formats.
pub type fi_type = c_int;
/// `fi_tostr`: `struct fi_info`.
pub const FI_TYPE_INFO: fi_type = 0;
/// `fi_tostr`: `enum fi_ep_type`.
pub const FI_TYPE_EP_TYPE: fi_type = 1;
/// `fi_tostr`: capabilities.
pub const FI_TYPE_CAPS: fi_type = 2;
/// `fi_tostr`: operation flags.
pub const FI_TYPE_OP_FLAGS: fi_type = 3;
/// `fi_tostr`: address format.
pub const FI_TYPE_ADDR_FORMAT: fi_type = 4;
/// `fi_tostr`: `struct fi_tx_attr`.
pub const FI_TYPE_TX_ATTR: fi_type = 5;
/// `fi_tostr`: `struct fi_rx_attr`.
pub const FI_TYPE_RX_ATTR: fi_type = 6;
/// `fi_tostr`: `struct fi_ep_attr`.
pub const FI_TYPE_EP_ATTR: fi_type = 7;
/// `fi_tostr`: `struct fi_domain_attr`.
pub const FI_TYPE_DOMAIN_ATTR: fi_type = 8;
/// `fi_tostr`: `struct fi_fabric_attr`.
pub const FI_TYPE_FABRIC_ATTR: fi_type = 9;
/// `fi_tostr`: `enum fi_threading`.
pub const FI_TYPE_THREADING: fi_type = 10;
/// `fi_tostr`: `enum fi_progress`.
pub const FI_TYPE_PROGRESS: fi_type = 11;
/// `fi_tostr`: protocol.
pub const FI_TYPE_PROTOCOL: fi_type = 12;
/// `fi_tostr`: message ordering.
pub const FI_TYPE_MSG_ORDER: fi_type = 13;
/// `fi_tostr`: mode bits.
pub const FI_TYPE_MODE: fi_type = 14;
/// `fi_tostr`: `enum fi_av_type`.
pub const FI_TYPE_AV_TYPE: fi_type = 15;
/// `fi_tostr`: `enum fi_datatype`.
pub const FI_TYPE_ATOMIC_TYPE: fi_type = 16;
/// `fi_tostr`: `enum fi_op`.
pub const FI_TYPE_ATOMIC_OP: fi_type = 17;
/// `fi_tostr`: a version number.
pub const FI_TYPE_VERSION: fi_type = 18;
/// `fi_tostr`: an EQ event.
pub const FI_TYPE_EQ_EVENT: fi_type = 19;
/// `fi_tostr`: CQ event flags.
pub const FI_TYPE_CQ_EVENT_FLAGS: fi_type = 20;
/// `fi_tostr`: MR mode bits.
pub const FI_TYPE_MR_MODE: fi_type = 21;
/// `fi_tostr`: `enum fi_op_type`.
pub const FI_TYPE_OP_TYPE: fi_type = 22;
/// `fi_tostr`: a `struct fid`.
pub const FI_TYPE_FID: fi_type = 23;
/// `fi_tostr`: `enum fi_collective_op`.
pub const FI_TYPE_COLLECTIVE_OP: fi_type = 24;
/// `fi_tostr`: `enum fi_hmem_iface`.
pub const FI_TYPE_HMEM_IFACE: fi_type = 25;
/// `fi_tostr`: `enum fi_cq_format`.
pub const FI_TYPE_CQ_FORMAT: fi_type = 26;
/// `fi_tostr`: `enum fi_log_level`.
pub const FI_TYPE_LOG_LEVEL: fi_type = 27;
/// `fi_tostr`: `enum fi_log_subsys`.
pub const FI_TYPE_LOG_SUBSYS: fi_type = 28;

/// `enum fi_param_type`.
pub type fi_param_type = c_int;
/// Parameter type: string.
pub const FI_PARAM_STRING: fi_param_type = 0;
/// Parameter type: int.
pub const FI_PARAM_INT: fi_param_type = 1;
/// Parameter type: bool.
pub const FI_PARAM_BOOL: fi_param_type = 2;
/// Parameter type: size_t.
pub const FI_PARAM_SIZE_T: fi_param_type = 3;

/// `struct fi_param`: a parameter (`fi_getparams`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_param {
    /// `name`: the name.
    pub name: *const c_char,
    /// `type`: its type.
    pub r#type: fi_param_type,
    /// `help_string`: its description.
    pub help_string: *const c_char,
    /// `value`: its value from the environment, or NULL.
    pub value: *const c_char,
}

/// `struct fi_context`: provider space in an operation (`FI_CONTEXT`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_context {
    /// `internal`: the provider's words.
    pub internal: [*mut c_void; 4],
}

/// `struct fi_context2`: provider space in an operation (`FI_CONTEXT2`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_context2 {
    /// `internal`: the provider's words.
    pub internal: [*mut c_void; 8],
}

/// `struct fi_recv_context`: a receive's context under `FI_CONTEXT`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_recv_context {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `context`: the user's context.
    pub context: *mut c_void,
}

// ---------------------------------------------------------------------------
// fi_errno.h
// ---------------------------------------------------------------------------

/// Success.
pub const FI_SUCCESS: c_int = 0;
/// Operation not permitted.
pub const FI_EPERM: c_int = libc::EPERM;
/// No such file or directory.
pub const FI_ENOENT: c_int = libc::ENOENT;
/// Interrupted system call.
pub const FI_EINTR: c_int = libc::EINTR;
/// I/O error.
pub const FI_EIO: c_int = libc::EIO;
/// Argument list too long.
pub const FI_E2BIG: c_int = libc::E2BIG;
/// Bad file number.
pub const FI_EBADF: c_int = libc::EBADF;
/// Try again.
pub const FI_EAGAIN: c_int = libc::EAGAIN;
/// Out of memory.
pub const FI_ENOMEM: c_int = libc::ENOMEM;
/// Permission denied.
pub const FI_EACCES: c_int = libc::EACCES;
/// Bad address.
pub const FI_EFAULT: c_int = libc::EFAULT;
/// Device or resource busy.
pub const FI_EBUSY: c_int = libc::EBUSY;
/// No such device.
pub const FI_ENODEV: c_int = libc::ENODEV;
/// Invalid argument.
pub const FI_EINVAL: c_int = libc::EINVAL;
/// Too many open files.
pub const FI_EMFILE: c_int = libc::EMFILE;
/// No space left on device.
pub const FI_ENOSPC: c_int = libc::ENOSPC;
/// Function not implemented.
pub const FI_ENOSYS: c_int = libc::ENOSYS;
/// Operation would block.
pub const FI_EWOULDBLOCK: c_int = libc::EWOULDBLOCK;
/// No message of desired type.
pub const FI_ENOMSG: c_int = libc::ENOMSG;
/// No data available.
pub const FI_ENODATA: c_int = libc::ENODATA;
/// Value too large for defined data type.
pub const FI_EOVERFLOW: c_int = libc::EOVERFLOW;
/// Message too long.
pub const FI_EMSGSIZE: c_int = libc::EMSGSIZE;
/// Protocol not available.
pub const FI_ENOPROTOOPT: c_int = libc::ENOPROTOOPT;
/// Operation not supported on transport endpoint.
pub const FI_EOPNOTSUPP: c_int = libc::EOPNOTSUPP;
/// Address already in use.
pub const FI_EADDRINUSE: c_int = libc::EADDRINUSE;
/// Cannot assign requested address.
pub const FI_EADDRNOTAVAIL: c_int = libc::EADDRNOTAVAIL;
/// Network is down.
pub const FI_ENETDOWN: c_int = libc::ENETDOWN;
/// Network is unreachable.
pub const FI_ENETUNREACH: c_int = libc::ENETUNREACH;
/// Software caused connection abort.
pub const FI_ECONNABORTED: c_int = libc::ECONNABORTED;
/// Connection reset by peer.
pub const FI_ECONNRESET: c_int = libc::ECONNRESET;
/// No buffer space available.
pub const FI_ENOBUFS: c_int = libc::ENOBUFS;
/// Transport endpoint is already connected.
pub const FI_EISCONN: c_int = libc::EISCONN;
/// Transport endpoint is not connected.
pub const FI_ENOTCONN: c_int = libc::ENOTCONN;
/// Cannot send after transport endpoint shutdown.
pub const FI_ESHUTDOWN: c_int = libc::ESHUTDOWN;
/// Connection timed out.
pub const FI_ETIMEDOUT: c_int = libc::ETIMEDOUT;
/// Connection refused.
pub const FI_ECONNREFUSED: c_int = libc::ECONNREFUSED;
/// Host is down.
pub const FI_EHOSTDOWN: c_int = libc::EHOSTDOWN;
/// No route to host.
pub const FI_EHOSTUNREACH: c_int = libc::EHOSTUNREACH;
/// Operation already in progress.
pub const FI_EALREADY: c_int = libc::EALREADY;
/// Operation now in progress.
pub const FI_EINPROGRESS: c_int = libc::EINPROGRESS;
/// Remote I/O error.
pub const FI_EREMOTEIO: c_int = libc::EREMOTEIO;
/// Operation canceled.
pub const FI_ECANCELED: c_int = libc::ECANCELED;
/// Key was rejected by service.
pub const FI_EKEYREJECTED: c_int = libc::EKEYREJECTED;

/// Where libfabric's own error numbers start.
pub const FI_ERRNO_OFFSET: c_int = 256;
/// Unspecified error.
pub const FI_EOTHER: c_int = FI_ERRNO_OFFSET;
/// Provided buffer is too small.
pub const FI_ETOOSMALL: c_int = 257;
/// Operation not permitted in current state.
pub const FI_EOPBADSTATE: c_int = 258;
/// Error available (read it with `fi_cq_readerr`/`fi_eq_readerr`).
pub const FI_EAVAIL: c_int = 259;
/// Flags not supported.
pub const FI_EBADFLAGS: c_int = 260;
/// Missing or unavailable event queue.
pub const FI_ENOEQ: c_int = 261;
/// Invalid resource domain.
pub const FI_EDOMAIN: c_int = 262;
/// Missing or unavailable completion queue.
pub const FI_ENOCQ: c_int = 263;
/// CRC error.
pub const FI_ECRC: c_int = 264;
/// Truncation error.
pub const FI_ETRUNC: c_int = 265;
/// Required key not available.
pub const FI_ENOKEY: c_int = 266;
/// Missing or unavailable address vector.
pub const FI_ENOAV: c_int = 267;
/// Queue has been overrun.
pub const FI_EOVERRUN: c_int = 268;
/// Receiver not ready, no receive buffers available.
pub const FI_ENORX: c_int = 269;
/// One past the last libfabric error number.
pub const FI_ERRNO_MAX: c_int = 270;

// ---------------------------------------------------------------------------
// fi_domain.h
// ---------------------------------------------------------------------------

/// AV flag: symmetric addressing.
pub const FI_SYMMETRIC: u64 = 1 << 59;
/// AV flag: report errors synchronously.
pub const FI_SYNC_ERR: u64 = 1 << 58;
/// AV set flag: every address of the AV.
pub const FI_UNIVERSE: u64 = 1 << 57;
/// AV set flag: barrier.
pub const FI_BARRIER_SET: u64 = 1 << 40;
/// AV set flag: broadcast.
pub const FI_BROADCAST_SET: u64 = 1 << 41;
/// AV set flag: all-to-all.
pub const FI_ALLTOALL_SET: u64 = 1 << 42;
/// AV set flag: all-reduce.
pub const FI_ALLREDUCE_SET: u64 = 1 << 43;
/// AV set flag: all-gather.
pub const FI_ALLGATHER_SET: u64 = 1 << 44;
/// AV set flag: reduce-scatter.
pub const FI_REDUCE_SCATTER_SET: u64 = 1 << 45;
/// AV set flag: reduce.
pub const FI_REDUCE_SET: u64 = 1 << 46;
/// AV set flag: scatter.
pub const FI_SCATTER_SET: u64 = 1 << 47;
/// AV set flag: gather.
pub const FI_GATHER_SET: u64 = 1 << 48;

/// `struct fi_av_attr`: address vector attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_av_attr {
    /// `type`: the AV type.
    pub r#type: fi_av_type,
    /// `rx_ctx_bits`: bits of an address naming a receive context.
    pub rx_ctx_bits: c_int,
    /// `count`: expected addresses.
    pub count: usize,
    /// `ep_per_node`: endpoints per node.
    pub ep_per_node: usize,
    /// `name`: a shared AV's name.
    pub name: *const c_char,
    /// `map_addr`: a shared AV's base address.
    pub map_addr: *mut c_void,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_av_set_attr`: address vector set attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_av_set_attr {
    /// `count`: members.
    pub count: usize,
    /// `start_addr`: first address.
    pub start_addr: fi_addr_t,
    /// `end_addr`: last address.
    pub end_addr: fi_addr_t,
    /// `stride`: address stride.
    pub stride: u64,
    /// `comm_key_size`: communication key length.
    pub comm_key_size: usize,
    /// `comm_key`: communication key.
    pub comm_key: *mut u8,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_ops_av`: an address vector's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_av {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `insert`: `fi_av_insert`.
    pub insert: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            addr: *const c_void,
            count: usize,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `insertsvc`: `fi_av_insertsvc`.
    pub insertsvc: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            node: *const c_char,
            service: *const c_char,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `insertsym`: `fi_av_insertsym`.
    pub insertsym: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            node: *const c_char,
            nodecnt: usize,
            service: *const c_char,
            svccnt: usize,
            fi_addr: *mut fi_addr_t,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `remove`: `fi_av_remove`.
    pub remove:
        Option<unsafe extern "C" fn(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, flags: u64) -> c_int>,
    /// `lookup`: `fi_av_lookup`.
    pub lookup: Option<
        unsafe extern "C" fn(av: *mut fid_av, fi_addr: fi_addr_t, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    >,
    /// `straddr`: `fi_av_straddr`.
    pub straddr: Option<
        unsafe extern "C" fn(av: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char,
    >,
    /// `av_set`: `fi_av_set`.
    pub av_set: Option<
        unsafe extern "C" fn(
            av: *mut fid_av,
            attr: *mut fi_av_set_attr,
            av_set: *mut *mut fid_av_set,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fid_av`: an address vector.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_av {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the AV's operations.
    pub ops: *mut fi_ops_av,
}

/// `struct fid_mr`: a memory region.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_mr {
    /// `fid`: the object header.
    pub fid: fid,
    /// `mem_desc`: the local descriptor (`fi_mr_desc`).
    pub mem_desc: *mut c_void,
    /// `key`: the remote key (`fi_mr_key`).
    pub key: u64,
}

/// `enum fi_hmem_iface`.
pub type fi_hmem_iface = c_int;
/// Memory interface: system memory.
pub const FI_HMEM_SYSTEM: fi_hmem_iface = 0;
/// Memory interface: CUDA.
pub const FI_HMEM_CUDA: fi_hmem_iface = 1;
/// Memory interface: ROCr.
pub const FI_HMEM_ROCR: fi_hmem_iface = 2;
/// Memory interface: Level Zero.
pub const FI_HMEM_ZE: fi_hmem_iface = 3;
/// Memory interface: Neuron.
pub const FI_HMEM_NEURON: fi_hmem_iface = 4;
/// Memory interface: SynapseAI.
pub const FI_HMEM_SYNAPSEAI: fi_hmem_iface = 5;

/// The anonymous union `fi_mr_attr.device`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_mr_attr_device {
    /// `reserved`: sizes the union.
    pub reserved: u64,
    /// `cuda`: CUDA device.
    pub cuda: c_int,
    /// `ze`: Level Zero device.
    pub ze: c_int,
    /// `neuron`: Neuron device.
    pub neuron: c_int,
    /// `synapseai`: SynapseAI device.
    pub synapseai: c_int,
}

/// `struct fi_mr_attr`: a memory registration (`fi_mr_regattr`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_attr {
    /// `mr_iov`: the memory.
    pub mr_iov: *const iovec,
    /// `iov_count`: how many iovecs.
    pub iov_count: usize,
    /// `access`: access bits (`FI_READ`, `FI_REMOTE_WRITE`...).
    pub access: u64,
    /// `offset`: the offset RMA addresses start at.
    pub offset: u64,
    /// `requested_key`: the key asked for.
    pub requested_key: u64,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `auth_key_size`: authorization key length.
    pub auth_key_size: usize,
    /// `auth_key`: authorization key.
    pub auth_key: *mut u8,
    /// `iface`: the memory's interface.
    pub iface: fi_hmem_iface,
    /// `device`: the memory's device.
    pub device: fi_mr_attr_device,
}

/// `struct fi_mr_modify`: the argument of `FI_REFRESH`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mr_modify {
    /// `flags`: flags.
    pub flags: u64,
    /// `attr`: the new registration.
    pub attr: fi_mr_attr,
}

/// `fi_set_ops` name of `struct fi_hmem_override_ops`.
pub const FI_SET_OPS_HMEM_OVERRIDE: &core::ffi::CStr = c"hmem_override_ops";

/// `struct fi_hmem_override_ops`: device memory copy overrides.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_hmem_override_ops {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `copy_from_hmem_iov`: copies out of device memory.
    pub copy_from_hmem_iov: Option<
        unsafe extern "C" fn(
            dest: *mut c_void,
            size: usize,
            iface: fi_hmem_iface,
            device: u64,
            hmem_iov: *const iovec,
            hmem_iov_count: usize,
            hmem_iov_offset: u64,
        ) -> isize,
    >,
    /// `copy_to_hmem_iov`: copies into device memory.
    pub copy_to_hmem_iov: Option<
        unsafe extern "C" fn(
            iface: fi_hmem_iface,
            device: u64,
            hmem_iov: *const iovec,
            hmem_iov_count: usize,
            hmem_iov_offset: u64,
            src: *const c_void,
            size: usize,
        ) -> isize,
    >,
}

/// Where the collective-only datatypes and operations start.
pub const FI_COLLECTIVE_OFFSET: c_int = 256;

/// `enum fi_datatype`.
pub type fi_datatype = c_int;
/// Datatype: `int8_t`.
pub const FI_INT8: fi_datatype = 0;
/// Datatype: `uint8_t`.
pub const FI_UINT8: fi_datatype = 1;
/// Datatype: `int16_t`.
pub const FI_INT16: fi_datatype = 2;
/// Datatype: `uint16_t`.
pub const FI_UINT16: fi_datatype = 3;
/// Datatype: `int32_t`.
pub const FI_INT32: fi_datatype = 4;
/// Datatype: `uint32_t`.
pub const FI_UINT32: fi_datatype = 5;
/// Datatype: `int64_t`.
pub const FI_INT64: fi_datatype = 6;
/// Datatype: `uint64_t`.
pub const FI_UINT64: fi_datatype = 7;
/// Datatype: `float`.
pub const FI_FLOAT: fi_datatype = 8;
/// Datatype: `double`.
pub const FI_DOUBLE: fi_datatype = 9;
/// Datatype: `float complex`.
pub const FI_FLOAT_COMPLEX: fi_datatype = 10;
/// Datatype: `double complex`.
pub const FI_DOUBLE_COMPLEX: fi_datatype = 11;
/// Datatype: `long double`.
pub const FI_LONG_DOUBLE: fi_datatype = 12;
/// Datatype: `long double complex`.
pub const FI_LONG_DOUBLE_COMPLEX: fi_datatype = 13;
/// One past the last point-to-point datatype.
pub const FI_DATATYPE_LAST: fi_datatype = 14;
/// Datatype: 128-bit signed integer.
pub const FI_INT128: fi_datatype = FI_DATATYPE_LAST;
/// Datatype: 128-bit unsigned integer.
pub const FI_UINT128: fi_datatype = 15;
/// Datatype: none (collectives).
pub const FI_VOID: fi_datatype = FI_COLLECTIVE_OFFSET;

/// `enum fi_op`: atomic operations.
pub type fi_op = c_int;
/// Atomic: minimum.
pub const FI_MIN: fi_op = 0;
/// Atomic: maximum.
pub const FI_MAX: fi_op = 1;
/// Atomic: sum.
pub const FI_SUM: fi_op = 2;
/// Atomic: product.
pub const FI_PROD: fi_op = 3;
/// Atomic: logical or.
pub const FI_LOR: fi_op = 4;
/// Atomic: logical and.
pub const FI_LAND: fi_op = 5;
/// Atomic: bitwise or.
pub const FI_BOR: fi_op = 6;
/// Atomic: bitwise and.
pub const FI_BAND: fi_op = 7;
/// Atomic: logical exclusive or.
pub const FI_LXOR: fi_op = 8;
/// Atomic: bitwise exclusive or.
pub const FI_BXOR: fi_op = 9;
/// Atomic: read.
pub const FI_ATOMIC_READ: fi_op = 10;
/// Atomic: write.
pub const FI_ATOMIC_WRITE: fi_op = 11;
/// Atomic: compare and swap if equal.
pub const FI_CSWAP: fi_op = 12;
/// Atomic: compare and swap if not equal.
pub const FI_CSWAP_NE: fi_op = 13;
/// Atomic: compare and swap if less or equal.
pub const FI_CSWAP_LE: fi_op = 14;
/// Atomic: compare and swap if less.
pub const FI_CSWAP_LT: fi_op = 15;
/// Atomic: compare and swap if greater or equal.
pub const FI_CSWAP_GE: fi_op = 16;
/// Atomic: compare and swap if greater.
pub const FI_CSWAP_GT: fi_op = 17;
/// Atomic: masked swap.
pub const FI_MSWAP: fi_op = 18;
/// One past the last point-to-point atomic operation.
pub const FI_ATOMIC_OP_LAST: fi_op = 19;
/// No operation (collectives).
pub const FI_NOOP: fi_op = FI_COLLECTIVE_OFFSET;

/// `enum fi_collective_op`.
pub type fi_collective_op = c_int;
/// Collective: barrier.
pub const FI_BARRIER: fi_collective_op = 0;
/// Collective: broadcast.
pub const FI_BROADCAST: fi_collective_op = 1;
/// Collective: all-to-all.
pub const FI_ALLTOALL: fi_collective_op = 2;
/// Collective: all-reduce.
pub const FI_ALLREDUCE: fi_collective_op = 3;
/// Collective: all-gather.
pub const FI_ALLGATHER: fi_collective_op = 4;
/// Collective: reduce-scatter.
pub const FI_REDUCE_SCATTER: fi_collective_op = 5;
/// Collective: reduce.
pub const FI_REDUCE: fi_collective_op = 6;
/// Collective: scatter.
pub const FI_SCATTER: fi_collective_op = 7;
/// Collective: gather.
pub const FI_GATHER: fi_collective_op = 8;

/// `struct fi_ops_domain`: a domain's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_domain {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `av_open`: `fi_av_open`.
    pub av_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_av_attr,
            av: *mut *mut fid_av,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `cq_open`: `fi_cq_open`.
    pub cq_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_cq_attr,
            cq: *mut *mut fid_cq,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `endpoint`: `fi_endpoint`.
    pub endpoint: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `scalable_ep`: `fi_scalable_ep`.
    pub scalable_ep: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            sep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `cntr_open`: `fi_cntr_open`.
    pub cntr_open: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_cntr_attr,
            cntr: *mut *mut fid_cntr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `poll_open`: `fi_poll_open`.
    pub poll_open: Option<
        unsafe extern "C" fn(domain: *mut fid_domain, attr: *mut fi_poll_attr, pollset: *mut *mut fid_poll) -> c_int,
    >,
    /// `stx_ctx`: `fi_stx_context`.
    pub stx_ctx: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_tx_attr,
            stx: *mut *mut fid_stx,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `srx_ctx`: `fi_srx_context`.
    pub srx_ctx: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            attr: *mut fi_rx_attr,
            rx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `query_atomic`: `fi_query_atomic`.
    pub query_atomic: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            datatype: fi_datatype,
            op: fi_op,
            attr: *mut fi_atomic_attr,
            flags: u64,
        ) -> c_int,
    >,
    /// `query_collective`: `fi_query_collective`.
    pub query_collective: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            coll: fi_collective_op,
            attr: *mut fi_collective_attr,
            flags: u64,
        ) -> c_int,
    >,
    /// `endpoint2`: `fi_endpoint2`.
    pub endpoint2: Option<
        unsafe extern "C" fn(
            domain: *mut fid_domain,
            info: *mut fi_info,
            ep: *mut *mut fid_ep,
            flags: u64,
            context: *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fi_ops_mr`: a domain's memory registration operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_mr {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `reg`: `fi_mr_reg`.
    pub reg: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            buf: *const c_void,
            len: usize,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut fid_mr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `regv`: `fi_mr_regv`.
    pub regv: Option<
        unsafe extern "C" fn(
            fid: *mut fid,
            iov: *const iovec,
            count: usize,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut fid_mr,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `regattr`: `fi_mr_regattr`.
    pub regattr:
        Option<unsafe extern "C" fn(fid: *mut fid, attr: *const fi_mr_attr, flags: u64, mr: *mut *mut fid_mr) -> c_int>,
}

/// `fi_mr_reg` flag.
pub const FI_REG_MR: u64 = 1 << 59;

/// `struct fid_domain`: a domain.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_domain {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the domain's operations.
    pub ops: *mut fi_ops_domain,
    /// `mr`: its memory registration operations.
    pub mr: *mut fi_ops_mr,
}

// ---------------------------------------------------------------------------
// fi_endpoint.h
// ---------------------------------------------------------------------------

/// `struct fi_msg`: a message (`fi_sendmsg`, `fi_recvmsg`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg {
    /// `msg_iov`: the buffers.
    pub msg_iov: *const iovec,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many buffers.
    pub iov_count: usize,
    /// `addr`: the peer.
    pub addr: fi_addr_t,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
}

/// Option level: the endpoint.
pub const FI_OPT_ENDPOINT: c_int = 0;

/// Endpoint option: smallest multi-receive space left (`size_t`).
pub const FI_OPT_MIN_MULTI_RECV: c_int = 0;
/// Endpoint option: connection data size (`size_t`).
pub const FI_OPT_CM_DATA_SIZE: c_int = 1;
/// Endpoint option: buffered minimum (`size_t`).
pub const FI_OPT_BUFFERED_MIN: c_int = 2;
/// Endpoint option: buffered limit (`size_t`).
pub const FI_OPT_BUFFERED_LIMIT: c_int = 3;
/// Endpoint option: send buffer size.
pub const FI_OPT_SEND_BUF_SIZE: c_int = 4;
/// Endpoint option: receive buffer size.
pub const FI_OPT_RECV_BUF_SIZE: c_int = 5;
/// Endpoint option: transmit queue size.
pub const FI_OPT_TX_SIZE: c_int = 6;
/// Endpoint option: receive queue size.
pub const FI_OPT_RX_SIZE: c_int = 7;
/// Endpoint option: device memory peer-to-peer (`int`).
pub const FI_OPT_FI_HMEM_P2P: c_int = 8;
/// Endpoint option: XPU trigger (`struct fi_trigger_xpu`).
pub const FI_OPT_XPU_TRIGGER: c_int = 9;

/// Peer-to-peer: the provider decides.
pub const FI_HMEM_P2P_ENABLED: c_int = 0;
/// Peer-to-peer: required.
pub const FI_HMEM_P2P_REQUIRED: c_int = 1;
/// Peer-to-peer: preferred.
pub const FI_HMEM_P2P_PREFERRED: c_int = 2;
/// Peer-to-peer: disabled.
pub const FI_HMEM_P2P_DISABLED: c_int = 3;

/// `struct fi_ops_ep`: an endpoint's base operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_ep {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `cancel`: `fi_cancel`.
    pub cancel: Option<unsafe extern "C" fn(fid: fid_t, context: *mut c_void) -> isize>,
    /// `getopt`: `fi_getopt`.
    pub getopt: Option<
        unsafe extern "C" fn(
            fid: fid_t,
            level: c_int,
            optname: c_int,
            optval: *mut c_void,
            optlen: *mut usize,
        ) -> c_int,
    >,
    /// `setopt`: `fi_setopt`.
    pub setopt: Option<
        unsafe extern "C" fn(fid: fid_t, level: c_int, optname: c_int, optval: *const c_void, optlen: usize) -> c_int,
    >,
    /// `tx_ctx`: `fi_tx_context`.
    pub tx_ctx: Option<
        unsafe extern "C" fn(
            sep: *mut fid_ep,
            index: c_int,
            attr: *mut fi_tx_attr,
            tx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `rx_ctx`: `fi_rx_context`.
    pub rx_ctx: Option<
        unsafe extern "C" fn(
            sep: *mut fid_ep,
            index: c_int,
            attr: *mut fi_rx_attr,
            rx_ep: *mut *mut fid_ep,
            context: *mut c_void,
        ) -> c_int,
    >,
    /// `rx_size_left`: `fi_rx_size_left`.
    pub rx_size_left: Option<unsafe extern "C" fn(ep: *mut fid_ep) -> isize>,
    /// `tx_size_left`: `fi_tx_size_left`.
    pub tx_size_left: Option<unsafe extern "C" fn(ep: *mut fid_ep) -> isize>,
}

/// `struct fi_ops_msg`: an endpoint's message operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_msg {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `recv`: `fi_recv`.
    pub recv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: usize,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `recvv`: `fi_recvv`.
    pub recvv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            src_addr: fi_addr_t,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `recvmsg`: `fi_recvmsg`.
    pub recvmsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize>,
    /// `send`: `fi_send`.
    pub send: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `sendv`: `fi_sendv`.
    pub sendv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `sendmsg`: `fi_sendmsg`.
    pub sendmsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize>,
    /// `inject`: `fi_inject`.
    pub inject:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t) -> isize>,
    /// `senddata`: `fi_senddata`.
    pub senddata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `injectdata`: `fi_injectdata`.
    pub injectdata: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t) -> isize,
    >,
}

/// `struct fid_ep`: an endpoint (also a scalable endpoint or a context).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_ep {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: base operations.
    pub ops: *mut fi_ops_ep,
    /// `cm`: connection management.
    pub cm: *mut fi_ops_cm,
    /// `msg`: messages.
    pub msg: *mut fi_ops_msg,
    /// `rma`: remote memory access.
    pub rma: *mut fi_ops_rma,
    /// `tagged`: tagged messages.
    pub tagged: *mut fi_ops_tagged,
    /// `atomic`: atomics.
    pub atomic: *mut fi_ops_atomic,
    /// `collective`: collectives.
    pub collective: *mut fi_ops_collective,
}

/// `struct fid_pep`: a passive endpoint.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_pep {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: base operations.
    pub ops: *mut fi_ops_ep,
    /// `cm`: connection management.
    pub cm: *mut fi_ops_cm,
}

/// `struct fid_stx`: a shared transmit context.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_stx {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: base operations.
    pub ops: *mut fi_ops_ep,
}

// ---------------------------------------------------------------------------
// fi_eq.h
// ---------------------------------------------------------------------------

/// `enum fi_wait_obj`.
pub type fi_wait_obj = c_int;
/// Wait object: none.
pub const FI_WAIT_NONE: fi_wait_obj = 0;
/// Wait object: the provider's choice.
pub const FI_WAIT_UNSPEC: fi_wait_obj = 1;
/// Wait object: a wait set.
pub const FI_WAIT_SET: fi_wait_obj = 2;
/// Wait object: a file descriptor.
pub const FI_WAIT_FD: fi_wait_obj = 3;
/// Wait object: a mutex and condition variable.
pub const FI_WAIT_MUTEX_COND: fi_wait_obj = 4;
/// Wait object: yield.
pub const FI_WAIT_YIELD: fi_wait_obj = 5;
/// Wait object: a set of polled descriptors.
pub const FI_WAIT_POLLFD: fi_wait_obj = 6;

/// `struct fi_wait_attr`: wait set attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_wait_attr {
    /// `wait_obj`: the wait object.
    pub wait_obj: fi_wait_obj,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_ops_wait`: a wait set's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_wait {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `wait`: `fi_wait`.
    pub wait: Option<unsafe extern "C" fn(waitset: *mut fid_wait, timeout: c_int) -> c_int>,
}

/// `struct fid_wait`: a wait set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_wait {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the wait set's operations.
    pub ops: *mut fi_ops_wait,
}

/// `struct fi_mutex_cond`: the `FI_WAIT_MUTEX_COND` wait object.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_mutex_cond {
    /// `mutex`: the mutex.
    pub mutex: *mut libc::pthread_mutex_t,
    /// `cond`: the condition variable.
    pub cond: *mut libc::pthread_cond_t,
}

/// `struct fi_wait_pollfd`: the `FI_WAIT_POLLFD` wait object.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_wait_pollfd {
    /// `change_index`: changes when the set changes.
    pub change_index: u64,
    /// `nfds`: descriptors in `fd`.
    pub nfds: usize,
    /// `fd`: the descriptors.
    pub fd: *mut libc::pollfd,
}

/// `struct fi_poll_attr`: poll set attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_poll_attr {
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_ops_poll`: a poll set's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_poll {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `poll`: `fi_poll`.
    pub poll: Option<unsafe extern "C" fn(pollset: *mut fid_poll, context: *mut *mut c_void, count: c_int) -> c_int>,
    /// `poll_add`: `fi_poll_add`.
    pub poll_add: Option<unsafe extern "C" fn(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int>,
    /// `poll_del`: `fi_poll_del`.
    pub poll_del: Option<unsafe extern "C" fn(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int>,
}

/// `struct fid_poll`: a poll set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_poll {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the poll set's operations.
    pub ops: *mut fi_ops_poll,
}

/// `struct fi_eq_attr`: event queue attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_eq_attr {
    /// `size`: queue depth.
    pub size: usize,
    /// `flags`: flags.
    pub flags: u64,
    /// `wait_obj`: the wait object.
    pub wait_obj: fi_wait_obj,
    /// `signaling_vector`: interrupt affinity.
    pub signaling_vector: c_int,
    /// `wait_set`: the wait set under `FI_WAIT_SET`.
    pub wait_set: *mut fid_wait,
}

/// EQ event: notification.
pub const FI_NOTIFY: u32 = 0;
/// EQ event: connection request.
pub const FI_CONNREQ: u32 = 1;
/// EQ event: connected.
pub const FI_CONNECTED: u32 = 2;
/// EQ event: shut down.
pub const FI_SHUTDOWN: u32 = 3;
/// EQ event: memory registration complete.
pub const FI_MR_COMPLETE: u32 = 4;
/// EQ event: address vector insertion complete.
pub const FI_AV_COMPLETE: u32 = 5;
/// EQ event: multicast join complete.
pub const FI_JOIN_COMPLETE: u32 = 6;

/// `struct fi_eq_entry`: an event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_eq_entry {
    /// `fid`: the object concerned.
    pub fid: fid_t,
    /// `context`: its context.
    pub context: *mut c_void,
    /// `data`: event data.
    pub data: u64,
}

/// `struct fi_eq_err_entry`: an error event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_eq_err_entry {
    /// `fid`: the object concerned.
    pub fid: fid_t,
    /// `context`: its context.
    pub context: *mut c_void,
    /// `data`: event data.
    pub data: u64,
    /// `err`: the error (positive `FI_E*`).
    pub err: c_int,
    /// `prov_errno`: the provider's error.
    pub prov_errno: c_int,
    /// `err_data`: provider error data.
    pub err_data: *mut c_void,
    /// `err_data_size`: its size.
    pub err_data_size: usize,
}

/// `struct fi_eq_cm_entry`: a connection event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_eq_cm_entry {
    /// `fid`: the endpoint concerned.
    pub fid: fid_t,
    /// `info`: the connection's description (the user frees it).
    pub info: *mut fi_info,
    /// `data[]`: connection data, as much as the buffer holds.
    pub data: [u8; 0],
}

/// `struct fi_ops_eq`: an event queue's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_eq {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `read`: `fi_eq_read`.
    pub read: Option<
        unsafe extern "C" fn(eq: *mut fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize,
    >,
    /// `readerr`: `fi_eq_readerr`.
    pub readerr: Option<unsafe extern "C" fn(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, flags: u64) -> isize>,
    /// `write`: `fi_eq_write`.
    pub write:
        Option<unsafe extern "C" fn(eq: *mut fid_eq, event: u32, buf: *const c_void, len: usize, flags: u64) -> isize>,
    /// `sread`: `fi_eq_sread`.
    pub sread: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            event: *mut u32,
            buf: *mut c_void,
            len: usize,
            timeout: c_int,
            flags: u64,
        ) -> isize,
    >,
    /// `strerror`: `fi_eq_strerror`.
    pub strerror: Option<
        unsafe extern "C" fn(
            eq: *mut fid_eq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: usize,
        ) -> *const c_char,
    >,
}

/// `struct fid_eq`: an event queue.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_eq {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the event queue's operations.
    pub ops: *mut fi_ops_eq,
}

/// `enum fi_cq_format`.
pub type fi_cq_format = c_int;
/// CQ format: the provider's choice.
pub const FI_CQ_FORMAT_UNSPEC: fi_cq_format = 0;
/// CQ format: `struct fi_cq_entry`.
pub const FI_CQ_FORMAT_CONTEXT: fi_cq_format = 1;
/// CQ format: `struct fi_cq_msg_entry`.
pub const FI_CQ_FORMAT_MSG: fi_cq_format = 2;
/// CQ format: `struct fi_cq_data_entry`.
pub const FI_CQ_FORMAT_DATA: fi_cq_format = 3;
/// CQ format: `struct fi_cq_tagged_entry`.
pub const FI_CQ_FORMAT_TAGGED: fi_cq_format = 4;

/// `struct fi_cq_entry`: a context-only completion.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_entry {
    /// `op_context`: the operation's context.
    pub op_context: *mut c_void,
}

/// `struct fi_cq_msg_entry`: a message completion.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_msg_entry {
    /// `op_context`: the operation's context.
    pub op_context: *mut c_void,
    /// `flags`: completion flags.
    pub flags: u64,
    /// `len`: bytes received.
    pub len: usize,
}

/// `struct fi_cq_data_entry`: a completion with data.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_data_entry {
    /// `op_context`: the operation's context.
    pub op_context: *mut c_void,
    /// `flags`: completion flags.
    pub flags: u64,
    /// `len`: bytes received.
    pub len: usize,
    /// `buf`: where they were placed (multi-receive).
    pub buf: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
}

/// `struct fi_cq_tagged_entry`: a tagged completion.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_tagged_entry {
    /// `op_context`: the operation's context.
    pub op_context: *mut c_void,
    /// `flags`: completion flags.
    pub flags: u64,
    /// `len`: bytes received.
    pub len: usize,
    /// `buf`: where they were placed (multi-receive).
    pub buf: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
    /// `tag`: the message's tag.
    pub tag: u64,
}

/// `struct fi_cq_err_entry`: an error completion.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_err_entry {
    /// `op_context`: the operation's context.
    pub op_context: *mut c_void,
    /// `flags`: completion flags.
    pub flags: u64,
    /// `len`: bytes received.
    pub len: usize,
    /// `buf`: where they were placed.
    pub buf: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
    /// `tag`: the message's tag.
    pub tag: u64,
    /// `olen`: bytes that did not fit.
    pub olen: usize,
    /// `err`: the error (positive `FI_E*`).
    pub err: c_int,
    /// `prov_errno`: the provider's error.
    pub prov_errno: c_int,
    /// `err_data`: provider error data.
    pub err_data: *mut c_void,
    /// `err_data_size`: its size.
    pub err_data_size: usize,
}

/// `enum fi_cq_wait_cond`.
pub type fi_cq_wait_cond = c_int;
/// CQ wait condition: none.
pub const FI_CQ_COND_NONE: fi_cq_wait_cond = 0;
/// CQ wait condition: a threshold (`size_t`).
pub const FI_CQ_COND_THRESHOLD: fi_cq_wait_cond = 1;

/// `struct fi_cq_attr`: completion queue attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cq_attr {
    /// `size`: queue depth.
    pub size: usize,
    /// `flags`: flags.
    pub flags: u64,
    /// `format`: entry format.
    pub format: fi_cq_format,
    /// `wait_obj`: the wait object.
    pub wait_obj: fi_wait_obj,
    /// `signaling_vector`: interrupt affinity.
    pub signaling_vector: c_int,
    /// `wait_cond`: the wait condition.
    pub wait_cond: fi_cq_wait_cond,
    /// `wait_set`: the wait set under `FI_WAIT_SET`.
    pub wait_set: *mut fid_wait,
}

/// `struct fi_ops_cq`: a completion queue's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_cq {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `read`: `fi_cq_read`.
    pub read: Option<unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize>,
    /// `readfrom`: `fi_cq_readfrom`.
    pub readfrom: Option<
        unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut c_void, count: usize, src_addr: *mut fi_addr_t) -> isize,
    >,
    /// `readerr`: `fi_cq_readerr`.
    pub readerr: Option<unsafe extern "C" fn(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize>,
    /// `sread`: `fi_cq_sread`.
    pub sread: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: usize,
            cond: *const c_void,
            timeout: c_int,
        ) -> isize,
    >,
    /// `sreadfrom`: `fi_cq_sreadfrom`.
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            buf: *mut c_void,
            count: usize,
            src_addr: *mut fi_addr_t,
            cond: *const c_void,
            timeout: c_int,
        ) -> isize,
    >,
    /// `signal`: `fi_cq_signal`.
    pub signal: Option<unsafe extern "C" fn(cq: *mut fid_cq) -> c_int>,
    /// `strerror`: `fi_cq_strerror`.
    pub strerror: Option<
        unsafe extern "C" fn(
            cq: *mut fid_cq,
            prov_errno: c_int,
            err_data: *const c_void,
            buf: *mut c_char,
            len: usize,
        ) -> *const c_char,
    >,
}

/// `struct fid_cq`: a completion queue.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_cq {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the completion queue's operations.
    pub ops: *mut fi_ops_cq,
}

/// `enum fi_cntr_events`.
pub type fi_cntr_events = c_int;
/// Counter events: completions.
pub const FI_CNTR_EVENTS_COMP: fi_cntr_events = 0;

/// `struct fi_cntr_attr`: counter attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_cntr_attr {
    /// `events`: what the counter counts.
    pub events: fi_cntr_events,
    /// `wait_obj`: the wait object.
    pub wait_obj: fi_wait_obj,
    /// `wait_set`: the wait set under `FI_WAIT_SET`.
    pub wait_set: *mut fid_wait,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_ops_cntr`: a counter's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_cntr {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `read`: `fi_cntr_read`.
    pub read: Option<unsafe extern "C" fn(cntr: *mut fid_cntr) -> u64>,
    /// `readerr`: `fi_cntr_readerr`.
    pub readerr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr) -> u64>,
    /// `add`: `fi_cntr_add`.
    pub add: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `set`: `fi_cntr_set`.
    pub set: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `wait`: `fi_cntr_wait`.
    pub wait: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int>,
    /// `adderr`: `fi_cntr_adderr`.
    pub adderr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
    /// `seterr`: `fi_cntr_seterr`.
    pub seterr: Option<unsafe extern "C" fn(cntr: *mut fid_cntr, value: u64) -> c_int>,
}

/// `struct fid_cntr`: a counter.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_cntr {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the counter's operations.
    pub ops: *mut fi_ops_cntr,
}

// ---------------------------------------------------------------------------
// fi_cm.h
// ---------------------------------------------------------------------------

/// `struct fid_mc`: a multicast group.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_mc {
    /// `fid`: the object header.
    pub fid: fid,
    /// `fi_addr`: the group's address.
    pub fi_addr: fi_addr_t,
}

/// `struct fi_ops_cm`: an endpoint's connection management operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_cm {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `setname`: `fi_setname`.
    pub setname: Option<unsafe extern "C" fn(fid: fid_t, addr: *mut c_void, addrlen: usize) -> c_int>,
    /// `getname`: `fi_getname`.
    pub getname: Option<unsafe extern "C" fn(fid: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int>,
    /// `getpeer`: `fi_getpeer`.
    pub getpeer: Option<unsafe extern "C" fn(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int>,
    /// `connect`: `fi_connect`.
    pub connect: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, addr: *const c_void, param: *const c_void, paramlen: usize) -> c_int,
    >,
    /// `listen`: `fi_listen`.
    pub listen: Option<unsafe extern "C" fn(pep: *mut fid_pep) -> c_int>,
    /// `accept`: `fi_accept`.
    pub accept: Option<unsafe extern "C" fn(ep: *mut fid_ep, param: *const c_void, paramlen: usize) -> c_int>,
    /// `reject`: `fi_reject`.
    pub reject:
        Option<unsafe extern "C" fn(pep: *mut fid_pep, handle: fid_t, param: *const c_void, paramlen: usize) -> c_int>,
    /// `shutdown`: `fi_shutdown`.
    pub shutdown: Option<unsafe extern "C" fn(ep: *mut fid_ep, flags: u64) -> c_int>,
    /// `join`: `fi_join`.
    pub join: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            addr: *const c_void,
            flags: u64,
            mc: *mut *mut fid_mc,
            context: *mut c_void,
        ) -> c_int,
    >,
}

// ---------------------------------------------------------------------------
// fi_tagged.h
// ---------------------------------------------------------------------------

/// `struct fi_msg_tagged`: a tagged message (`fi_tsendmsg`, `fi_trecvmsg`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_tagged {
    /// `msg_iov`: the buffers.
    pub msg_iov: *const iovec,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many buffers.
    pub iov_count: usize,
    /// `addr`: the peer.
    pub addr: fi_addr_t,
    /// `tag`: the tag.
    pub tag: u64,
    /// `ignore`: tag bits to ignore when matching.
    pub ignore: u64,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
}

/// `struct fi_ops_tagged`: an endpoint's tagged message operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_tagged {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `recv`: `fi_trecv`.
    pub recv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: usize,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            tag: u64,
            ignore: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `recvv`: `fi_trecvv`.
    pub recvv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            src_addr: fi_addr_t,
            tag: u64,
            ignore: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `recvmsg`: `fi_trecvmsg`.
    pub recvmsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize>,
    /// `send`: `fi_tsend`.
    pub send: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `sendv`: `fi_tsendv`.
    pub sendv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `sendmsg`: `fi_tsendmsg`.
    pub sendmsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize>,
    /// `inject`: `fi_tinject`.
    pub inject: Option<
        unsafe extern "C" fn(ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t, tag: u64) -> isize,
    >,
    /// `senddata`: `fi_tsenddata`.
    pub senddata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            tag: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `injectdata`: `fi_tinjectdata`.
    pub injectdata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            data: u64,
            dest_addr: fi_addr_t,
            tag: u64,
        ) -> isize,
    >,
}

// ---------------------------------------------------------------------------
// fi_rma.h
// ---------------------------------------------------------------------------

/// `struct fi_rma_iov`: a remote buffer in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_rma_iov {
    /// `addr`: the remote address (or offset).
    pub addr: u64,
    /// `len`: its length.
    pub len: usize,
    /// `key`: the remote key.
    pub key: u64,
}

/// `struct fi_rma_ioc`: a remote buffer in datatype elements.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_rma_ioc {
    /// `addr`: the remote address (or offset).
    pub addr: u64,
    /// `count`: how many elements.
    pub count: usize,
    /// `key`: the remote key.
    pub key: u64,
}

/// `struct fi_msg_rma`: an RMA operation (`fi_readmsg`, `fi_writemsg`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_rma {
    /// `msg_iov`: the local buffers.
    pub msg_iov: *const iovec,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many local buffers.
    pub iov_count: usize,
    /// `addr`: the peer.
    pub addr: fi_addr_t,
    /// `rma_iov`: the remote buffers.
    pub rma_iov: *const fi_rma_iov,
    /// `rma_iov_count`: how many remote buffers.
    pub rma_iov_count: usize,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
}

/// `struct fi_ops_rma`: an endpoint's RMA operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_rma {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `read`: `fi_read`.
    pub read: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            len: usize,
            desc: *mut c_void,
            src_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `readv`: `fi_readv`.
    pub readv: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            src_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `readmsg`: `fi_readmsg`.
    pub readmsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize>,
    /// `write`: `fi_write`.
    pub write: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `writev`: `fi_writev`.
    pub writev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const iovec,
            desc: *mut *mut c_void,
            count: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `writemsg`: `fi_writemsg`.
    pub writemsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize>,
    /// `inject`: `fi_inject_write`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
        ) -> isize,
    >,
    /// `writedata`: `fi_writedata`.
    pub writedata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            desc: *mut c_void,
            data: u64,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `injectdata`: `fi_inject_writedata`.
    pub injectdata: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            len: usize,
            data: u64,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
        ) -> isize,
    >,
}

// ---------------------------------------------------------------------------
// fi_atomic.h
// ---------------------------------------------------------------------------

/// `fi_query_atomic` flag: fetching atomics.
pub const FI_FETCH_ATOMIC: u64 = 1 << 58;
/// `fi_query_atomic` flag: compare atomics.
pub const FI_COMPARE_ATOMIC: u64 = 1 << 59;

/// `struct fi_atomic_attr`: what `fi_query_atomic` reports.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_atomic_attr {
    /// `count`: most elements per operation.
    pub count: usize,
    /// `size`: the datatype's size.
    pub size: usize,
}

/// `struct fi_msg_atomic`: an atomic operation (`fi_atomicmsg`...).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_atomic {
    /// `msg_iov`: the local operands.
    pub msg_iov: *const fi_ioc,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many local buffers.
    pub iov_count: usize,
    /// `addr`: the peer.
    pub addr: fi_addr_t,
    /// `rma_iov`: the remote buffers.
    pub rma_iov: *const fi_rma_ioc,
    /// `rma_iov_count`: how many remote buffers.
    pub rma_iov_count: usize,
    /// `datatype`: the elements' type.
    pub datatype: fi_datatype,
    /// `op`: the operation.
    pub op: fi_op,
    /// `context`: the user's context.
    pub context: *mut c_void,
    /// `data`: remote CQ data.
    pub data: u64,
}

/// `struct fi_msg_fetch`: the result buffers of a fetching atomic.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_fetch {
    /// `msg_iov`: the buffers.
    pub msg_iov: *mut fi_ioc,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many buffers.
    pub iov_count: usize,
}

/// `struct fi_msg_compare`: the compare buffers of a compare atomic.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_compare {
    /// `msg_iov`: the buffers.
    pub msg_iov: *const fi_ioc,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many buffers.
    pub iov_count: usize,
}

/// `struct fi_ops_atomic`: an endpoint's atomic operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_atomic {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `write`: `fi_atomic`.
    pub write: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `writev`: `fi_atomicv`.
    pub writev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `writemsg`: `fi_atomicmsg`.
    pub writemsg: Option<unsafe extern "C" fn(ep: *mut fid_ep, msg: *const fi_msg_atomic, flags: u64) -> isize>,
    /// `inject`: `fi_inject_atomic`.
    pub inject: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
        ) -> isize,
    >,
    /// `readwrite`: `fi_fetch_atomic`.
    pub readwrite: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `readwritev`: `fi_fetch_atomicv`.
    pub readwritev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: usize,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `readwritemsg`: `fi_fetch_atomicmsg`.
    pub readwritemsg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_atomic,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: usize,
            flags: u64,
        ) -> isize,
    >,
    /// `compwrite`: `fi_compare_atomic`.
    pub compwrite: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            compare: *const c_void,
            compare_desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `compwritev`: `fi_compare_atomicv`.
    pub compwritev: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            iov: *const fi_ioc,
            desc: *mut *mut c_void,
            count: usize,
            comparev: *const fi_ioc,
            compare_desc: *mut *mut c_void,
            compare_count: usize,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: usize,
            dest_addr: fi_addr_t,
            addr: u64,
            key: u64,
            datatype: fi_datatype,
            op: fi_op,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `compwritemsg`: `fi_compare_atomicmsg`.
    pub compwritemsg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_atomic,
            comparev: *const fi_ioc,
            compare_desc: *mut *mut c_void,
            compare_count: usize,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: usize,
            flags: u64,
        ) -> isize,
    >,
    /// `writevalid`: `fi_atomicvalid`.
    pub writevalid:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int>,
    /// `readwritevalid`: `fi_fetch_atomicvalid`.
    pub readwritevalid:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int>,
    /// `compwritevalid`: `fi_compare_atomicvalid`.
    pub compwritevalid:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, datatype: fi_datatype, op: fi_op, count: *mut usize) -> c_int>,
}

// ---------------------------------------------------------------------------
// fi_collective.h
// ---------------------------------------------------------------------------

/// `struct fi_ops_av_set`: an address vector set's operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_av_set {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `set_union`: `fi_av_set_union`.
    pub set_union: Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `intersect`: `fi_av_set_intersect`.
    pub intersect: Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `diff`: `fi_av_set_diff`.
    pub diff: Option<unsafe extern "C" fn(dst: *mut fid_av_set, src: *const fid_av_set) -> c_int>,
    /// `insert`: `fi_av_set_insert`.
    pub insert: Option<unsafe extern "C" fn(set: *mut fid_av_set, addr: fi_addr_t) -> c_int>,
    /// `remove`: `fi_av_set_remove`.
    pub remove: Option<unsafe extern "C" fn(set: *mut fid_av_set, addr: fi_addr_t) -> c_int>,
    /// `addr`: `fi_av_set_addr`.
    pub addr: Option<unsafe extern "C" fn(set: *mut fid_av_set, coll_addr: *mut fi_addr_t) -> c_int>,
}

/// `struct fid_av_set`: an address vector set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fid_av_set {
    /// `fid`: the object header.
    pub fid: fid,
    /// `ops`: the set's operations.
    pub ops: *mut fi_ops_av_set,
}

/// `struct fi_collective_attr`: what `fi_query_collective` reports.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_collective_attr {
    /// `op`: the reduction.
    pub op: fi_op,
    /// `datatype`: the elements' type.
    pub datatype: fi_datatype,
    /// `datatype_attr`: the datatype's limits.
    pub datatype_attr: fi_atomic_attr,
    /// `max_members`: most members.
    pub max_members: usize,
    /// `mode`: mode bits.
    pub mode: u64,
}

/// `struct fi_collective_addr`: the argument of a collective join.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_collective_addr {
    /// `set`: the members.
    pub set: *const fid_av_set,
    /// `coll_addr`: the collective address.
    pub coll_addr: fi_addr_t,
}

/// `struct fi_msg_collective`: a collective operation (`fi_collective_msg`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_collective {
    /// `msg_iov`: the local buffers.
    pub msg_iov: *const fi_ioc,
    /// `desc`: their descriptors.
    pub desc: *mut *mut c_void,
    /// `iov_count`: how many buffers.
    pub iov_count: usize,
    /// `coll_addr`: the collective address.
    pub coll_addr: fi_addr_t,
    /// `root_addr`: the root.
    pub root_addr: fi_addr_t,
    /// `coll`: the collective.
    pub coll: fi_collective_op,
    /// `datatype`: the elements' type.
    pub datatype: fi_datatype,
    /// `op`: the reduction.
    pub op: fi_op,
    /// `context`: the user's context.
    pub context: *mut c_void,
}

/// `struct fi_ops_collective`: an endpoint's collective operations.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ops_collective {
    /// `size`: the table's size in bytes.
    pub size: usize,
    /// `barrier`: `fi_barrier`.
    pub barrier: Option<unsafe extern "C" fn(ep: *mut fid_ep, coll_addr: fi_addr_t, context: *mut c_void) -> isize>,
    /// `broadcast`: `fi_broadcast`.
    pub broadcast: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *mut c_void,
            count: usize,
            desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `alltoall`: `fi_alltoall`.
    pub alltoall: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `allreduce`: `fi_allreduce`.
    pub allreduce: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            datatype: fi_datatype,
            op: fi_op,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `allgather`: `fi_allgather`.
    pub allgather: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `reduce_scatter`: `fi_reduce_scatter`.
    pub reduce_scatter: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            datatype: fi_datatype,
            op: fi_op,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `reduce`: `fi_reduce`.
    pub reduce: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            op: fi_op,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `scatter`: `fi_scatter`.
    pub scatter: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `gather`: `fi_gather`.
    pub gather: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            desc: *mut c_void,
            result: *mut c_void,
            result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            root_addr: fi_addr_t,
            datatype: fi_datatype,
            flags: u64,
            context: *mut c_void,
        ) -> isize,
    >,
    /// `msg`: `fi_collective_msg`.
    pub msg: Option<
        unsafe extern "C" fn(
            ep: *mut fid_ep,
            msg: *const fi_msg_collective,
            resultv: *mut fi_ioc,
            result_desc: *mut *mut c_void,
            result_count: usize,
            flags: u64,
        ) -> isize,
    >,
    /// `barrier2`: `fi_barrier2`.
    pub barrier2:
        Option<unsafe extern "C" fn(ep: *mut fid_ep, coll_addr: fi_addr_t, flags: u64, context: *mut c_void) -> isize>,
}

// ---------------------------------------------------------------------------
// fi_trigger.h
// ---------------------------------------------------------------------------

/// `enum fi_trigger_event`.
pub type fi_trigger_event = c_int;
/// Trigger: a counter threshold.
pub const FI_TRIGGER_THRESHOLD: fi_trigger_event = 0;
/// Trigger: a device (XPU).
pub const FI_TRIGGER_XPU: fi_trigger_event = 1;

/// `enum fi_op_type`: deferred operation kinds.
pub type fi_op_type = c_int;
/// Deferred operation: receive.
pub const FI_OP_RECV: fi_op_type = 0;
/// Deferred operation: send.
pub const FI_OP_SEND: fi_op_type = 1;
/// Deferred operation: tagged receive.
pub const FI_OP_TRECV: fi_op_type = 2;
/// Deferred operation: tagged send.
pub const FI_OP_TSEND: fi_op_type = 3;
/// Deferred operation: RMA read.
pub const FI_OP_READ: fi_op_type = 4;
/// Deferred operation: RMA write.
pub const FI_OP_WRITE: fi_op_type = 5;
/// Deferred operation: atomic.
pub const FI_OP_ATOMIC: fi_op_type = 6;
/// Deferred operation: fetching atomic.
pub const FI_OP_FETCH_ATOMIC: fi_op_type = 7;
/// Deferred operation: compare atomic.
pub const FI_OP_COMPARE_ATOMIC: fi_op_type = 8;
/// Deferred operation: set a counter.
pub const FI_OP_CNTR_SET: fi_op_type = 9;
/// Deferred operation: add to a counter.
pub const FI_OP_CNTR_ADD: fi_op_type = 10;

/// `struct fi_trigger_threshold`: a counter threshold trigger.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_trigger_threshold {
    /// `cntr`: the counter.
    pub cntr: *mut fid_cntr,
    /// `threshold`: the value that fires it.
    pub threshold: usize,
}

/// The anonymous union `fi_trigger_var.value`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_trigger_var_value {
    /// `val8`: an 8-bit value.
    pub val8: u8,
    /// `val16`: a 16-bit value.
    pub val16: u16,
    /// `val32`: a 32-bit value.
    pub val32: u32,
    /// `val64`: a 64-bit value.
    pub val64: u64,
    /// `data`: a longer value.
    pub data: *mut u8,
}

/// `struct fi_trigger_var`: a variable an XPU trigger writes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_trigger_var {
    /// `datatype`: its type.
    pub datatype: fi_datatype,
    /// `count`: how many elements.
    pub count: c_int,
    /// `addr`: where it lives.
    pub addr: *mut c_void,
    /// `value`: its value.
    pub value: fi_trigger_var_value,
}

/// The anonymous union `fi_trigger_xpu.device`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_trigger_xpu_device {
    /// `reserved`: sizes the union.
    pub reserved: u64,
    /// `cuda`: CUDA device.
    pub cuda: c_int,
    /// `ze`: Level Zero device.
    pub ze: c_int,
}

/// `struct fi_trigger_xpu`: a device trigger.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_trigger_xpu {
    /// `count`: entries in `var`.
    pub count: c_int,
    /// `iface`: the device's interface.
    pub iface: fi_hmem_iface,
    /// `device`: the device.
    pub device: fi_trigger_xpu_device,
    /// `var`: the variables.
    pub var: *mut fi_trigger_var,
}

/// `struct fi_op_msg`: a deferred message operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_msg {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the message.
    pub msg: fi_msg,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_tagged`: a deferred tagged operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_tagged {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the message.
    pub msg: fi_msg_tagged,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_rma`: a deferred RMA operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_rma {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the operation.
    pub msg: fi_msg_rma,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_atomic`: a deferred atomic operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_atomic {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the operation.
    pub msg: fi_msg_atomic,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_fetch_atomic`: a deferred fetching atomic.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_fetch_atomic {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the operation.
    pub msg: fi_msg_atomic,
    /// `fetch`: the result buffers.
    pub fetch: fi_msg_fetch,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_compare_atomic`: a deferred compare atomic.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_compare_atomic {
    /// `ep`: the endpoint.
    pub ep: *mut fid_ep,
    /// `msg`: the operation.
    pub msg: fi_msg_atomic,
    /// `fetch`: the result buffers.
    pub fetch: fi_msg_fetch,
    /// `compare`: the compare buffers.
    pub compare: fi_msg_compare,
    /// `flags`: flags.
    pub flags: u64,
}

/// `struct fi_op_cntr`: a deferred counter operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_op_cntr {
    /// `cntr`: the counter.
    pub cntr: *mut fid_cntr,
    /// `value`: the value.
    pub value: u64,
}

/// The anonymous union `fi_triggered_context.trigger`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_triggered_context_trigger {
    /// `threshold`: a counter threshold.
    pub threshold: fi_trigger_threshold,
    /// `xpu`: a device trigger.
    pub xpu: fi_trigger_xpu,
    /// `internal`: sizes the union.
    pub internal: [*mut c_void; 3],
}

/// `struct fi_triggered_context`: a triggered operation's context (`FI_TRIGGER`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_triggered_context {
    /// `event_type`: the trigger's kind.
    pub event_type: fi_trigger_event,
    /// `trigger`: the trigger.
    pub trigger: fi_triggered_context_trigger,
}

/// The anonymous union `fi_triggered_context2.trigger`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_triggered_context2_trigger {
    /// `threshold`: a counter threshold.
    pub threshold: fi_trigger_threshold,
    /// `xpu`: a device trigger.
    pub xpu: fi_trigger_xpu,
    /// `internal`: sizes the union.
    pub internal: [*mut c_void; 7],
}

/// `struct fi_triggered_context2`: the larger triggered context.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_triggered_context2 {
    /// `event_type`: the trigger's kind.
    pub event_type: fi_trigger_event,
    /// `trigger`: the trigger.
    pub trigger: fi_triggered_context2_trigger,
}

/// The anonymous union `fi_deferred_work.op`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union fi_deferred_work_op {
    /// `msg`: a message operation.
    pub msg: *mut fi_op_msg,
    /// `tagged`: a tagged operation.
    pub tagged: *mut fi_op_tagged,
    /// `rma`: an RMA operation.
    pub rma: *mut fi_op_rma,
    /// `atomic`: an atomic.
    pub atomic: *mut fi_op_atomic,
    /// `fetch_atomic`: a fetching atomic.
    pub fetch_atomic: *mut fi_op_fetch_atomic,
    /// `compare_atomic`: a compare atomic.
    pub compare_atomic: *mut fi_op_compare_atomic,
    /// `cntr`: a counter operation.
    pub cntr: *mut fi_op_cntr,
}

/// `struct fi_deferred_work`: the argument of `FI_QUEUE_WORK`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_deferred_work {
    /// `context`: provider space.
    pub context: fi_context2,
    /// `threshold`: the value that fires it.
    pub threshold: u64,
    /// `triggering_cntr`: the counter watched.
    pub triggering_cntr: *mut fid_cntr,
    /// `completion_cntr`: the counter bumped on completion.
    pub completion_cntr: *mut fid_cntr,
    /// `op_type`: the operation's kind.
    pub op_type: fi_op_type,
    /// `op`: the operation.
    pub op: fi_deferred_work_op,
}

// ---------------------------------------------------------------------------
// providers/fi_log.h
// ---------------------------------------------------------------------------

/// `enum fi_log_subsys`.
pub type fi_log_subsys = c_int;
/// Log subsystem: core.
pub const FI_LOG_CORE: fi_log_subsys = 0;
/// Log subsystem: fabric.
pub const FI_LOG_FABRIC: fi_log_subsys = 1;
/// Log subsystem: domain.
pub const FI_LOG_DOMAIN: fi_log_subsys = 2;
/// Log subsystem: endpoint control.
pub const FI_LOG_EP_CTRL: fi_log_subsys = 3;
/// Log subsystem: endpoint data.
pub const FI_LOG_EP_DATA: fi_log_subsys = 4;
/// Log subsystem: address vector.
pub const FI_LOG_AV: fi_log_subsys = 5;
/// Log subsystem: completion queue.
pub const FI_LOG_CQ: fi_log_subsys = 6;
/// Log subsystem: event queue.
pub const FI_LOG_EQ: fi_log_subsys = 7;
/// Log subsystem: memory registration.
pub const FI_LOG_MR: fi_log_subsys = 8;
/// Log subsystem: counter.
pub const FI_LOG_CNTR: fi_log_subsys = 9;
/// One past the last log subsystem.
pub const FI_LOG_SUBSYS_MAX: fi_log_subsys = 10;

/// `enum fi_log_level`.
pub type fi_log_level = c_int;
/// Log level: warnings.
pub const FI_LOG_WARN: fi_log_level = 0;
/// Log level: trace.
pub const FI_LOG_TRACE: fi_log_level = 1;
/// Log level: information.
pub const FI_LOG_INFO: fi_log_level = 2;
/// Log level: debug.
pub const FI_LOG_DEBUG: fi_log_level = 3;
/// One past the last log level.
pub const FI_LOG_MAX: fi_log_level = 4;

// ---------------------------------------------------------------------------
// providers/fi_prov.h
// ---------------------------------------------------------------------------

/// `struct fi_provider`: a provider's entry points (`fi_prov_ini`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_provider {
    /// `version`: the provider's version.
    pub version: u32,
    /// `fi_version`: the API version it implements.
    pub fi_version: u32,
    /// `context`: libfabric's space.
    pub context: fi_context,
    /// `name`: the provider's name.
    pub name: *const c_char,
    /// `getinfo`: its `fi_getinfo`.
    pub getinfo: Option<
        unsafe extern "C" fn(
            version: u32,
            node: *const c_char,
            service: *const c_char,
            flags: u64,
            hints: *const fi_info,
            info: *mut *mut fi_info,
        ) -> c_int,
    >,
    /// `fabric`: its `fi_fabric`.
    pub fabric: Option<
        unsafe extern "C" fn(attr: *mut fi_fabric_attr, fabric: *mut *mut fid_fabric, context: *mut c_void) -> c_int,
    >,
    /// `cleanup`: called at unload.
    pub cleanup: Option<unsafe extern "C" fn()>,
}

//! Capability, mode, operation and ordering bits, with libfabric's values.

use bitflags::bitflags;

bitflags! {
    /// Capabilities (`FI_MSG`, `FI_TAGGED`, ...) and completion flags: libfabric uses
    /// the same bit for a capability and for the completion flag of that kind of
    /// operation, and so does fabric.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Caps: u64 {
        /// Untagged messages.
        const MSG = 1 << 1;
        /// Remote memory access.
        const RMA = 1 << 2;
        /// Tagged messages.
        const TAGGED = 1 << 3;
        /// Atomic operations.
        const ATOMIC = 1 << 4;
        /// Multicast.
        const MULTICAST = 1 << 5;
        /// Collectives.
        const COLLECTIVE = 1 << 6;
        /// Initiate RMA reads / fetching atomics.
        const READ = 1 << 8;
        /// Initiate RMA writes / atomics.
        const WRITE = 1 << 9;
        /// Receive messages.
        const RECV = 1 << 10;
        /// Send messages.
        const SEND = 1 << 11;
        /// Target of remote reads.
        const REMOTE_READ = 1 << 12;
        /// Target of remote writes.
        const REMOTE_WRITE = 1 << 13;
        /// Multi-receive buffers.
        const MULTI_RECV = 1 << 16;
        /// Remote completion data.
        const REMOTE_CQ_DATA = 1 << 17;
        /// Message peeking (tagged).
        const PEEK = 1 << 19;
        /// Triggered operations.
        const TRIGGER = 1 << 20;
        /// Fenced operations.
        const FENCE = 1 << 21;
        /// Device memory.
        const HMEM = 1 << 47;
        /// Variable-length messages.
        const VARIABLE_MSG = 1 << 48;
        /// Source address reported on error.
        const SOURCE_ERR = 1 << 50;
        /// Communication within the node.
        const LOCAL_COMM = 1 << 51;
        /// Communication across nodes.
        const REMOTE_COMM = 1 << 52;
        /// Shared address vectors.
        const SHARED_AV = 1 << 53;
        /// Counting of remote RMA events.
        const RMA_EVENT = 1 << 56;
        /// Source address reported with received messages.
        const SOURCE = 1 << 57;
        /// Named receive contexts.
        const NAMED_RX_CTX = 1 << 58;
        /// Receives that match only a given source.
        const DIRECTED_RECV = 1 << 59;
    }
}

impl Caps {
    /// The capabilities of an endpoint's transmit context: those of initiating
    /// operations (everything but the target-side and receive-side bits).
    pub fn tx_part(self) -> Caps {
        self & !(Caps::RECV
            | Caps::MULTI_RECV
            | Caps::DIRECTED_RECV
            | Caps::SOURCE
            | Caps::REMOTE_READ
            | Caps::REMOTE_WRITE
            | Caps::RMA_EVENT)
    }

    /// The capabilities of an endpoint's receive context: those of being a
    /// target (everything but the initiating bits).
    pub fn rx_part(self) -> Caps {
        self & !(Caps::SEND | Caps::READ | Caps::WRITE)
    }
}

bitflags! {
    /// Operation flags (`fi_sendmsg`, `fi_trecvmsg`, ...), with libfabric's values.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OpFlags: u64 {
        /// The operation is tagged (set by the tagged calls; an internal marker on the
        /// provider interface, as libfabric's `FI_TAGGED` completion flag).
        const TAGGED = 1 << 3;
        /// The send goes to a multicast group: its address is the handle of a
        /// joined group (`fi_mc_addr`), not an address-vector handle.
        const MULTICAST = 1 << 5;
        /// The receive buffer is a multi-receive buffer.
        const MULTI_RECV = 1 << 16;
        /// The send carries remote completion data.
        const REMOTE_CQ_DATA = 1 << 17;
        /// More operations follow; the provider may defer.
        const MORE = 1 << 18;
        /// Peek for a matching message without receiving it.
        const PEEK = 1 << 19;
        /// Fence: complete earlier operations first.
        const FENCE = 1 << 21;
        /// Generate a completion for this operation.
        const COMPLETION = 1 << 24;
        /// The buffer may be reused as soon as the call returns.
        const INJECT = 1 << 25;
        /// Complete once the buffer may be reused.
        const INJECT_COMPLETE = 1 << 26;
        /// Complete once the data has left the initiator.
        const TRANSMIT_COMPLETE = 1 << 27;
        /// Complete once the data is at the target.
        const DELIVERY_COMPLETE = 1 << 28;
        /// Discard the peeked or claimed message.
        const DISCARD = 1 << 58;
        /// Claim the peeked message for a later receive.
        const CLAIM = 1 << 59;
    }
}

impl OpFlags {
    /// Whether an operation posted with these flags is never reported in a
    /// completion queue, whatever the binding: `INJECT` without `COMPLETION`
    /// (`fi_inject`, `fi_inject_atomic`). Counters still count it.
    pub fn silent(self) -> bool {
        self.contains(OpFlags::INJECT) && !self.contains(OpFlags::COMPLETION)
    }
}

bitflags! {
    /// Mode bits: requirements a provider puts on the application.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Mode: u64 {
        /// Operations need an `fi_context` of the application's.
        const CONTEXT = 1 << 59;
        /// Messages carry a prefix of the provider's.
        const MSG_PREFIX = 1 << 58;
        /// Remote CQ data needs a posted receive.
        const RX_CQ_DATA = 1 << 56;
        /// Local memory must be registered.
        const LOCAL_MR = 1 << 55;
        /// Needs two context words.
        const CONTEXT2 = 1 << 52;
        /// Buffered receives.
        const BUFFERED_RECV = 1 << 51;
    }
}

bitflags! {
    /// Message and completion ordering (`FI_ORDER_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MsgOrder: u64 {
        /// Read after read.
        const RAR = 1 << 0;
        /// Read after write.
        const RAW = 1 << 1;
        /// Read after send.
        const RAS = 1 << 2;
        /// Write after read.
        const WAR = 1 << 3;
        /// Write after write.
        const WAW = 1 << 4;
        /// Write after send.
        const WAS = 1 << 5;
        /// Send after read.
        const SAR = 1 << 6;
        /// Send after write.
        const SAW = 1 << 7;
        /// Send after send.
        const SAS = 1 << 8;
        /// All of read, write and send ordering (`FI_ORDER_STRICT`).
        const STRICT = 0x1FF;
        /// Data placement in order.
        const DATA = 1 << 16;
        /// RMA read after read.
        const RMA_RAR = 1 << 32;
        /// RMA read after write.
        const RMA_RAW = 1 << 33;
        /// RMA write after read.
        const RMA_WAR = 1 << 34;
        /// RMA write after write.
        const RMA_WAW = 1 << 35;
        /// Atomic read after read.
        const ATOMIC_RAR = 1 << 36;
        /// Atomic read after write.
        const ATOMIC_RAW = 1 << 37;
        /// Atomic write after read.
        const ATOMIC_WAR = 1 << 38;
        /// Atomic write after write.
        const ATOMIC_WAW = 1 << 39;
    }
}

bitflags! {
    /// Memory registration mode of a domain (`FI_MR_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MrMode: u32 {
        /// Local buffers must be registered.
        const LOCAL = 1 << 2;
        /// Keys are larger than 64 bits.
        const RAW = 1 << 3;
        /// Remote addresses are virtual addresses, not offsets.
        const VIRT_ADDR = 1 << 4;
        /// Registered memory must be allocated (backed).
        const ALLOCATED = 1 << 5;
        /// The provider chooses the keys.
        const PROV_KEY = 1 << 6;
        /// MMU notification needed.
        const MMU_NOTIFY = 1 << 7;
        /// Regions count RMA events.
        const RMA_EVENT = 1 << 8;
        /// Regions are bound to endpoints.
        const ENDPOINT = 1 << 9;
        /// Device memory must be registered.
        const HMEM = 1 << 10;
    }
}

bitflags! {
    /// Access rights of a memory region (`FI_SEND`, `FI_RECV`, `FI_READ`, `FI_WRITE`,
    /// `FI_REMOTE_READ`, `FI_REMOTE_WRITE`), with libfabric's values.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MrAccess: u64 {
        /// Local source of RMA reads' results / fetch buffers.
        const READ = 1 << 8;
        /// Local source of RMA writes.
        const WRITE = 1 << 9;
        /// Local receive buffer.
        const RECV = 1 << 10;
        /// Local send buffer.
        const SEND = 1 << 11;
        /// Peers may read it.
        const REMOTE_READ = 1 << 12;
        /// Peers may write it.
        const REMOTE_WRITE = 1 << 13;
    }
}

bitflags! {
    /// Flags of [`crate::prov::EndpointOps::bind_cq`] and counter binding.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct BindFlags: u64 {
        /// Transmit completions / counting.
        const TRANSMIT = 1 << 11;
        /// Receive completions / counting.
        const RECV = 1 << 10;
        /// Count RMA reads initiated.
        const READ = 1 << 8;
        /// Count RMA writes initiated.
        const WRITE = 1 << 9;
        /// Count remote reads at the target.
        const REMOTE_READ = 1 << 12;
        /// Count remote writes at the target.
        const REMOTE_WRITE = 1 << 13;
        /// Only operations posted with `FI_COMPLETION` generate completions.
        const SELECTIVE_COMPLETION = 1 << 59;
    }
}

/// Names of the set bits of a flag word, pipe-separated as `fi_tostr` prints them
/// (`FI_MSG | FI_TAGGED`), taken from a table of (bit, name).
pub fn bits_to_names(bits: u64, table: &[(u64, &str)]) -> String {
    let mut out = String::new();
    for (bit, name) in table {
        if bits & bit == *bit && *bit != 0 {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(name);
        }
    }
    out
}

/// The capability names of libfabric, in `fi_tostr`'s order.
pub const CAP_NAMES: &[(u64, &str)] = &[
    (1 << 1, "FI_MSG"),
    (1 << 2, "FI_RMA"),
    (1 << 3, "FI_TAGGED"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 6, "FI_COLLECTIVE"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 10, "FI_RECV"),
    (1 << 11, "FI_SEND"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 19, "FI_PEEK"),
    (1 << 20, "FI_TRIGGER"),
    (1 << 21, "FI_FENCE"),
    (1 << 47, "FI_HMEM"),
    (1 << 48, "FI_VARIABLE_MSG"),
    (1 << 50, "FI_SOURCE_ERR"),
    (1 << 51, "FI_LOCAL_COMM"),
    (1 << 52, "FI_REMOTE_COMM"),
    (1 << 53, "FI_SHARED_AV"),
    (1 << 56, "FI_RMA_EVENT"),
    (1 << 57, "FI_SOURCE"),
    (1 << 58, "FI_NAMED_RX_CTX"),
    (1 << 59, "FI_DIRECTED_RECV"),
];

/// Operation-flag names, in `fi_tostr`'s order.
pub const OP_FLAG_NAMES: &[(u64, &str)] = &[
    (1 << 3, "FI_TAGGED"),
    (1 << 5, "FI_MULTICAST"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 18, "FI_MORE"),
    (1 << 19, "FI_PEEK"),
    (1 << 21, "FI_FENCE"),
    (1 << 24, "FI_COMPLETION"),
    (1 << 25, "FI_INJECT"),
    (1 << 26, "FI_INJECT_COMPLETE"),
    (1 << 27, "FI_TRANSMIT_COMPLETE"),
    (1 << 28, "FI_DELIVERY_COMPLETE"),
    (1 << 58, "FI_DISCARD"),
    (1 << 59, "FI_CLAIM"),
];

/// Mode names.
pub const MODE_NAMES: &[(u64, &str)] = &[
    (1 << 59, "FI_CONTEXT"),
    (1 << 58, "FI_MSG_PREFIX"),
    (1 << 56, "FI_RX_CQ_DATA"),
    (1 << 55, "FI_LOCAL_MR"),
    (1 << 52, "FI_CONTEXT2"),
    (1 << 51, "FI_BUFFERED_RECV"),
];

/// Ordering names.
pub const ORDER_NAMES: &[(u64, &str)] = &[
    (1 << 0, "FI_ORDER_RAR"),
    (1 << 1, "FI_ORDER_RAW"),
    (1 << 2, "FI_ORDER_RAS"),
    (1 << 3, "FI_ORDER_WAR"),
    (1 << 4, "FI_ORDER_WAW"),
    (1 << 5, "FI_ORDER_WAS"),
    (1 << 6, "FI_ORDER_SAR"),
    (1 << 7, "FI_ORDER_SAW"),
    (1 << 8, "FI_ORDER_SAS"),
    (1 << 16, "FI_ORDER_DATA"),
    (1 << 32, "FI_ORDER_RMA_RAR"),
    (1 << 33, "FI_ORDER_RMA_RAW"),
    (1 << 34, "FI_ORDER_RMA_WAR"),
    (1 << 35, "FI_ORDER_RMA_WAW"),
    (1 << 36, "FI_ORDER_ATOMIC_RAR"),
    (1 << 37, "FI_ORDER_ATOMIC_RAW"),
    (1 << 38, "FI_ORDER_ATOMIC_WAR"),
    (1 << 39, "FI_ORDER_ATOMIC_WAW"),
];

/// Memory-registration-mode names.
pub const MR_MODE_NAMES: &[(u64, &str)] = &[
    (1 << 2, "FI_MR_LOCAL"),
    (1 << 3, "FI_MR_RAW"),
    (1 << 4, "FI_MR_VIRT_ADDR"),
    (1 << 5, "FI_MR_ALLOCATED"),
    (1 << 6, "FI_MR_PROV_KEY"),
    (1 << 7, "FI_MR_MMU_NOTIFY"),
    (1 << 8, "FI_MR_RMA_EVENT"),
    (1 << 9, "FI_MR_ENDPOINT"),
    (1 << 10, "FI_MR_HMEM"),
];

/// Parse one flag name (`FI_MSG` or `MSG`, any case) against a name table.
pub fn name_to_bit(name: &str, table: &[(u64, &str)]) -> Option<u64> {
    let n = name.trim().to_ascii_uppercase();
    let n = if n.starts_with("FI_") { n } else { format!("FI_{n}") };
    table.iter().find(|(_, s)| *s == n).map(|(b, _)| *b)
}

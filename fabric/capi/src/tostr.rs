//! `fi_tostr` and `fi_tostr_r`: libfabric's text for every `enum fi_type`, from
//! the C structs and values. Structs and flag sets are converted to fabric's
//! types and printed by `fabric_core::tostr` (the formats `fi_info` uses, so the
//! two never differ); enumerations print their C name, or `Unknown`, as
//! libfabric does. Inside a struct, an enumeration value fabric lacks prints as
//! the unspecified one.
//!
//! `fi_tostr`'s buffer is per thread (libfabric's is one static buffer), valid
//! until the thread's next `fi_tostr`; `fi_tostr_r` writes into the caller's,
//! truncating to fit (always NUL-terminated).

use crate::abi::{self, fi_domain_attr, fi_ep_attr, fi_fabric_attr, fi_info, fi_rx_attr, fi_tx_attr};
use crate::exports::guard;
use crate::info;
use fabric_core::tostr as fmt;
use fabric_core::{Caps, Info, Mode, MrMode, MsgOrder, OpFlags};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::fmt::Write;

/// libfabric's buffer size for `fi_tostr`.
const BUFSIZ: usize = 8192;

/// The text between `[ ` and ` ]` of a bracketed list (what the standalone
/// flag types print: `FI_MSG, FI_RMA`).
fn unbracket(s: String) -> String {
    s.strip_prefix("[ ").and_then(|t| t.strip_suffix(" ]")).map(str::to_string).unwrap_or(s)
}

/// The C name at `v` in `names` (index = value), or `Unknown`.
fn enum_name(v: c_int, names: &[&'static str]) -> &'static str {
    usize::try_from(v).ok().and_then(|i| names.get(i)).copied().unwrap_or("Unknown")
}

const EP_TYPES: &[&str] =
    &["FI_EP_UNSPEC", "FI_EP_MSG", "FI_EP_DGRAM", "FI_EP_RDM", "FI_EP_SOCK_STREAM", "FI_EP_SOCK_DGRAM"];
const ADDR_FORMATS: &[&str] = &[
    "FI_FORMAT_UNSPEC",
    "FI_SOCKADDR",
    "FI_SOCKADDR_IN",
    "FI_SOCKADDR_IN6",
    "FI_SOCKADDR_IB",
    "FI_ADDR_PSMX",
    "FI_ADDR_GNI",
    "FI_ADDR_BGQ",
    "FI_ADDR_MLX",
    "FI_ADDR_STR",
    "FI_ADDR_PSMX2",
    "FI_ADDR_IB_UD",
    "FI_ADDR_EFA",
    "FI_ADDR_PSMX3",
    "FI_ADDR_OPX",
    "FI_ADDR_CXI",
];
const PROTOCOLS: &[&str] = &[
    "FI_PROTO_UNSPEC",
    "FI_PROTO_RDMA_CM_IB_RC",
    "FI_PROTO_IWARP",
    "FI_PROTO_IB_UD",
    "FI_PROTO_PSMX",
    "FI_PROTO_UDP",
    "FI_PROTO_SOCK_TCP",
    "FI_PROTO_MXM",
    "FI_PROTO_IWARP_RDM",
    "FI_PROTO_IB_RDM",
    "FI_PROTO_GNI",
    "FI_PROTO_RXM",
    "FI_PROTO_RXD",
    "FI_PROTO_MLX",
    "FI_PROTO_NETWORKDIRECT",
    "FI_PROTO_PSMX2",
    "FI_PROTO_SHM",
    "FI_PROTO_MRAIL",
    "FI_PROTO_RSTREAM",
    "FI_PROTO_RDMA_CM_IB_XRC",
    "FI_PROTO_EFA",
    "FI_PROTO_PSMX3",
    "FI_PROTO_RXM_TCP",
    "FI_PROTO_OPX",
    "FI_PROTO_CXI",
    "FI_PROTO_XNET",
];
const THREADINGS: &[&str] = &[
    "FI_THREAD_UNSPEC",
    "FI_THREAD_SAFE",
    "FI_THREAD_FID",
    "FI_THREAD_DOMAIN",
    "FI_THREAD_COMPLETION",
    "FI_THREAD_ENDPOINT",
];
const PROGRESSES: &[&str] = &["FI_PROGRESS_UNSPEC", "FI_PROGRESS_AUTO", "FI_PROGRESS_MANUAL"];
const AV_TYPES: &[&str] = &["FI_AV_UNSPEC", "FI_AV_MAP", "FI_AV_TABLE"];
const DATATYPES: &[&str] = &[
    "FI_INT8",
    "FI_UINT8",
    "FI_INT16",
    "FI_UINT16",
    "FI_INT32",
    "FI_UINT32",
    "FI_INT64",
    "FI_UINT64",
    "FI_FLOAT",
    "FI_DOUBLE",
    "FI_FLOAT_COMPLEX",
    "FI_DOUBLE_COMPLEX",
    "FI_LONG_DOUBLE",
    "FI_LONG_DOUBLE_COMPLEX",
];
const ATOMIC_OPS: &[&str] = &[
    "FI_MIN",
    "FI_MAX",
    "FI_SUM",
    "FI_PROD",
    "FI_LOR",
    "FI_LAND",
    "FI_BOR",
    "FI_BAND",
    "FI_LXOR",
    "FI_BXOR",
    "FI_ATOMIC_READ",
    "FI_ATOMIC_WRITE",
    "FI_CSWAP",
    "FI_CSWAP_NE",
    "FI_CSWAP_LE",
    "FI_CSWAP_LT",
    "FI_CSWAP_GE",
    "FI_CSWAP_GT",
    "FI_MSWAP",
];
const EQ_EVENTS: &[&str] =
    &["FI_NOTIFY", "FI_CONNREQ", "FI_CONNECTED", "FI_SHUTDOWN", "FI_MR_COMPLETE", "FI_AV_COMPLETE", "FI_JOIN_COMPLETE"];
const OP_TYPES: &[&str] = &[
    "FI_OP_RECV",
    "FI_OP_SEND",
    "FI_OP_TRECV",
    "FI_OP_TSEND",
    "FI_OP_READ",
    "FI_OP_WRITE",
    "FI_OP_ATOMIC",
    "FI_OP_FETCH_ATOMIC",
    "FI_OP_COMPARE_ATOMIC",
    "FI_OP_CNTR_SET",
    "FI_OP_CNTR_ADD",
];
const COLLECTIVE_OPS: &[&str] = &[
    "FI_BARRIER",
    "FI_BROADCAST",
    "FI_ALLTOALL",
    "FI_ALLREDUCE",
    "FI_ALLGATHER",
    "FI_REDUCE_SCATTER",
    "FI_REDUCE",
    "FI_SCATTER",
    "FI_GATHER",
];
const HMEM_IFACES: &[&str] =
    &["FI_HMEM_SYSTEM", "FI_HMEM_CUDA", "FI_HMEM_ROCR", "FI_HMEM_ZE", "FI_HMEM_NEURON", "FI_HMEM_SYNAPSEAI"];
const CQ_FORMATS: &[&str] =
    &["FI_CQ_FORMAT_UNSPEC", "FI_CQ_FORMAT_CONTEXT", "FI_CQ_FORMAT_MSG", "FI_CQ_FORMAT_DATA", "FI_CQ_FORMAT_TAGGED"];
const LOG_LEVELS: &[&str] = &["FI_LOG_WARN", "FI_LOG_TRACE", "FI_LOG_INFO", "FI_LOG_DEBUG"];
const LOG_SUBSYS: &[&str] = &[
    "FI_LOG_CORE",
    "FI_LOG_FABRIC",
    "FI_LOG_DOMAIN",
    "FI_LOG_EP_CTRL",
    "FI_LOG_EP_DATA",
    "FI_LOG_AV",
    "FI_LOG_CQ",
    "FI_LOG_EQ",
    "FI_LOG_MR",
    "FI_LOG_CNTR",
];
/// The completion flags `FI_TYPE_CQ_EVENT_FLAGS` names, in libfabric's order.
const CQ_EVENT_FLAGS: &[(u64, &str)] = &[
    (1 << 11, "FI_SEND"),
    (1 << 10, "FI_RECV"),
    (1 << 2, "FI_RMA"),
    (1 << 4, "FI_ATOMIC"),
    (1 << 1, "FI_MSG"),
    (1 << 3, "FI_TAGGED"),
    (1 << 8, "FI_READ"),
    (1 << 9, "FI_WRITE"),
    (1 << 12, "FI_REMOTE_READ"),
    (1 << 13, "FI_REMOTE_WRITE"),
    (1 << 17, "FI_REMOTE_CQ_DATA"),
    (1 << 16, "FI_MULTI_RECV"),
    (1 << 18, "FI_MORE"),
    (1 << 59, "FI_CLAIM"),
];

/// The text of `data` as `datatype`.
///
/// # Safety
/// `data` is non-NULL and points to what `datatype` says (a `uint64_t` for flag
/// sets, an `int`/`uint32_t` for enumerations, the struct for struct types).
unsafe fn text(data: *const c_void, datatype: c_int) -> String {
    let u64v = || {
        // SAFETY: the caller's guarantee for this type; read_unaligned copes with
        // any alignment.
        unsafe { std::ptr::read_unaligned(data as *const u64) }
    };
    let intv = || {
        // SAFETY: as above, for an int.
        unsafe { std::ptr::read_unaligned(data as *const c_int) }
    };
    match datatype {
        abi::FI_TYPE_INFO => {
            // SAFETY: data is an fi_info.
            let c = unsafe { &*(data as *const fi_info) };
            // SAFETY: as above; its pointers are NULL or valid.
            unsafe { info_text(c) }
        }
        abi::FI_TYPE_EP_TYPE => enum_name(intv(), EP_TYPES).into(),
        abi::FI_TYPE_CAPS => unbracket(fmt::caps_str(Caps::from_bits_retain(u64v()))),
        abi::FI_TYPE_OP_FLAGS => unbracket(fmt::op_flags_str(OpFlags::from_bits_retain(u64v()))),
        abi::FI_TYPE_ADDR_FORMAT => addr_format_name(intv() as u32).into(),
        abi::FI_TYPE_TX_ATTR => {
            let mut s = String::new();
            // SAFETY: data is an fi_tx_attr.
            fmt::tx_attr_str(&mut s, &info::tx_attr_from_c(unsafe { &*(data as *const fi_tx_attr) }), "");
            s
        }
        abi::FI_TYPE_RX_ATTR => {
            let mut s = String::new();
            // SAFETY: data is an fi_rx_attr.
            fmt::rx_attr_str(&mut s, &info::rx_attr_from_c(unsafe { &*(data as *const fi_rx_attr) }), "");
            s
        }
        abi::FI_TYPE_EP_ATTR => {
            let mut s = String::new();
            // SAFETY: data is an fi_ep_attr.
            fmt::ep_attr_str(&mut s, &info::ep_attr_from_c(unsafe { &*(data as *const fi_ep_attr) }), "");
            s
        }
        abi::FI_TYPE_DOMAIN_ATTR => {
            let mut s = String::new();
            // SAFETY: data is an fi_domain_attr whose name is NULL or a string.
            let d = unsafe { info::domain_attr_from_c(&*(data as *const fi_domain_attr)) };
            fmt::domain_attr_str(&mut s, &d, "");
            s
        }
        abi::FI_TYPE_FABRIC_ATTR => {
            let mut s = String::new();
            // SAFETY: data is an fi_fabric_attr whose strings are NULL or strings.
            let f = unsafe { &*(data as *const fi_fabric_attr) };
            // SAFETY: as above.
            unsafe { fabric_attr_text(&mut s, f, "") };
            s
        }
        abi::FI_TYPE_THREADING => enum_name(intv(), THREADINGS).into(),
        abi::FI_TYPE_PROGRESS => enum_name(intv(), PROGRESSES).into(),
        abi::FI_TYPE_PROTOCOL => protocol_name(intv() as u32).into(),
        abi::FI_TYPE_MSG_ORDER => unbracket(fmt::msg_order_str(MsgOrder::from_bits_retain(u64v()))),
        abi::FI_TYPE_MODE => unbracket(fmt::mode_str(Mode::from_bits_retain(u64v()))),
        abi::FI_TYPE_AV_TYPE => enum_name(intv(), AV_TYPES).into(),
        abi::FI_TYPE_ATOMIC_TYPE => enum_name(intv(), DATATYPES).into(),
        abi::FI_TYPE_ATOMIC_OP => enum_name(intv(), ATOMIC_OPS).into(),
        abi::FI_TYPE_VERSION => format!("1.17.0-fabric-{}", env!("CARGO_PKG_VERSION")),
        abi::FI_TYPE_EQ_EVENT => enum_name(intv(), EQ_EVENTS).into(),
        abi::FI_TYPE_CQ_EVENT_FLAGS => {
            let v = u64v();
            let names: Vec<&str> = CQ_EVENT_FLAGS.iter().filter(|(b, _)| v & b != 0).map(|(_, n)| *n).collect();
            names.join(", ")
        }
        abi::FI_TYPE_MR_MODE => unbracket(fmt::mr_mode_str(MrMode::from_bits_retain(intv() as u32))),
        abi::FI_TYPE_OP_TYPE => enum_name(intv(), OP_TYPES).into(),
        abi::FI_TYPE_FID => format!("fid: {data:p}\n"),
        abi::FI_TYPE_COLLECTIVE_OP => enum_name(intv(), COLLECTIVE_OPS).into(),
        abi::FI_TYPE_HMEM_IFACE => enum_name(intv(), HMEM_IFACES).into(),
        abi::FI_TYPE_CQ_FORMAT => enum_name(intv(), CQ_FORMATS).into(),
        abi::FI_TYPE_LOG_LEVEL => enum_name(intv(), LOG_LEVELS).into(),
        abi::FI_TYPE_LOG_SUBSYS => enum_name(intv(), LOG_SUBSYS).into(),
        _ => "Unknown type".into(),
    }
}

/// An address format's C name (`Provider specific` above `FI_PROV_SPECIFIC`).
fn addr_format_name(v: u32) -> &'static str {
    if v & (1 << 31) != 0 {
        return "Provider specific";
    }
    enum_name(v as c_int, ADDR_FORMATS)
}

/// A protocol's C name (`Provider specific` above `FI_PROV_SPECIFIC`).
fn protocol_name(v: u32) -> &'static str {
    if v & (1 << 31) != 0 {
        return "Provider specific";
    }
    enum_name(v as c_int, PROTOCOLS)
}

/// `fi_tostr` of a C `fi_fabric_attr`: the C prov_name as it is
/// (`tcp;ofi_rxm`), not reduced to the provider's.
///
/// # Safety
/// `f`'s strings are NULL or NUL-terminated.
unsafe fn fabric_attr_text(out: &mut String, f: &fi_fabric_attr, prefix: &str) {
    // SAFETY: the caller's guarantee.
    let mut a = unsafe { info::fabric_attr_from_c(f) };
    // SAFETY: as above.
    a.prov_name = unsafe { info::c_str(f.prov_name) }.unwrap_or_else(|| "(null)".into());
    if f.name.is_null() {
        a.name = "(null)".into();
    }
    fmt::fabric_attr_str(out, &a, prefix);
}

/// `fi_tostr(info, FI_TYPE_INFO)` of a C `fi_info`: missing attribute structs
/// print as `fi_tx_attr: (null)` and so on, as libfabric's do.
///
/// # Safety
/// `c`'s pointers are NULL or valid.
unsafe fn info_text(c: &fi_info) -> String {
    // An address that cannot be read is left out rather than refused: fi_tostr
    // describes what it is given.
    let mut c_noaddr = *c;
    // SAFETY: the caller's guarantee.
    let rust = unsafe { info::info_from_c(c) }.or_else(|_| {
        c_noaddr.src_addr = std::ptr::null_mut();
        c_noaddr.dest_addr = std::ptr::null_mut();
        // SAFETY: as above, without the addresses.
        unsafe { info::info_from_c(&c_noaddr) }
    });
    let rust: Info = rust.unwrap_or_default();
    let handle = if c.handle.is_null() { "(nil)".to_string() } else { format!("{:p}", c.handle) };
    let mut s = fmt::info_str_with(&rust, (c.src_addrlen, c.dest_addrlen), &handle);
    // The attribute blocks a C fi_info may lack, and the C prov_name.
    let blocks: [(&str, bool); 5] = [
        ("fi_tx_attr", c.tx_attr.is_null()),
        ("fi_rx_attr", c.rx_attr.is_null()),
        ("fi_ep_attr", c.ep_attr.is_null()),
        ("fi_domain_attr", c.domain_attr.is_null()),
        ("fi_fabric_attr", c.fabric_attr.is_null()),
    ];
    for (name, missing) in blocks {
        if missing {
            s = drop_block(&s, name);
        }
    }
    // SAFETY: fabric_attr is NULL or valid.
    if let Some(f) = unsafe { c.fabric_attr.as_ref() } {
        let mut want = String::new();
        // SAFETY: its strings are NULL or strings.
        unsafe { fabric_attr_text(&mut want, f, "    ") };
        let mut have = String::new();
        fmt::fabric_attr_str(&mut have, &rust.fabric_attr, "    ");
        s = s.replacen(&have, &want, 1);
    }
    s
}

/// `s` with the block `    NAME:` and its deeper-indented lines replaced by
/// `    NAME: (null)`.
fn drop_block(s: &str, name: &str) -> String {
    let head = format!("    {name}:");
    let mut out = String::with_capacity(s.len());
    let mut skipping = false;
    for line in s.lines() {
        if line == head {
            let _ = writeln!(out, "{head} (null)");
            skipping = true;
            continue;
        }
        if skipping && line.starts_with("        ") {
            continue;
        }
        skipping = false;
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Copy `s` into `buf` (`len` bytes), truncated to fit, NUL-terminated.
///
/// # Safety
/// `buf` is valid for `len` (> 0) bytes.
unsafe fn copy_out(buf: *mut c_char, len: usize, s: &str) {
    let n = s.len().min(len - 1);
    // SAFETY: n < len bytes are written, then the NUL at n < len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

/// `fi_tostr_r` (FABRIC_1.4): the text of `data` as `datatype` in the caller's
/// buffer; returns `buf` (NULL when `buf` or `data` is NULL or `len` is 0).
///
/// # Safety
/// `buf` valid for `len` bytes; `data` NULL or what `datatype` says.
#[no_mangle]
pub unsafe extern "C" fn fi_tostr_r(buf: *mut c_char, len: usize, data: *const c_void, datatype: c_int) -> *mut c_char {
    if buf.is_null() || len == 0 || data.is_null() {
        return std::ptr::null_mut();
    }
    guard("fi_tostr_r", std::ptr::null_mut(), || {
        // SAFETY: the caller's guarantees.
        let s = unsafe { text(data, datatype) };
        // SAFETY: buf valid for len > 0 bytes.
        unsafe { copy_out(buf, len, &s) };
        buf
    })
}

/// `fi_tostr` (FABRIC_1.0): as [`fi_tostr_r`] into a per-thread buffer of
/// libfabric's size (8192 bytes), valid until this thread's next call. NULL
/// for NULL `data`.
///
/// # Safety
/// `data` NULL or what `datatype` says.
#[no_mangle]
pub unsafe extern "C" fn fi_tostr(data: *const c_void, datatype: c_int) -> *mut c_char {
    thread_local! {
        static BUF: RefCell<Box<[c_char; BUFSIZ]>> = RefCell::new(Box::new([0; BUFSIZ]));
    }
    if data.is_null() {
        return std::ptr::null_mut();
    }
    BUF.with(|b| {
        let p = b.borrow_mut().as_mut_ptr();
        // SAFETY: p is this thread's buffer of BUFSIZ bytes; data per the caller.
        unsafe { fi_tostr_r(p, BUFSIZ, data, datatype) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn show(data: *const c_void, t: c_int) -> String {
        let mut buf = [0 as c_char; 512];
        // SAFETY: buf is 512 bytes; data is what t says (the tests' values).
        let p = unsafe { fi_tostr_r(buf.as_mut_ptr(), buf.len(), data, t) };
        assert_eq!(p, buf.as_mut_ptr());
        // SAFETY: fi_tostr_r NUL-terminates.
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn enums_and_flags_as_libfabric_prints_them() {
        let rdm: c_int = 3;
        assert_eq!(show(&rdm as *const _ as *const c_void, abi::FI_TYPE_EP_TYPE), "FI_EP_RDM");
        let bad: c_int = 99;
        assert_eq!(show(&bad as *const _ as *const c_void, abi::FI_TYPE_EP_TYPE), "Unknown");
        let caps: u64 = Caps::MSG.bits() | Caps::TAGGED.bits();
        assert_eq!(show(&caps as *const _ as *const c_void, abi::FI_TYPE_CAPS), "FI_MSG, FI_TAGGED");
        let none: u64 = 0;
        assert_eq!(show(&none as *const _ as *const c_void, abi::FI_TYPE_MODE), "");
        let tcp: u32 = 6;
        assert_eq!(show(&tcp as *const _ as *const c_void, abi::FI_TYPE_PROTOCOL), "FI_PROTO_SOCK_TCP");
        let fmt: u32 = 1 << 31;
        assert_eq!(show(&fmt as *const _ as *const c_void, abi::FI_TYPE_ADDR_FORMAT), "Provider specific");
        let cswap: c_int = 12;
        assert_eq!(show(&cswap as *const _ as *const c_void, abi::FI_TYPE_ATOMIC_OP), "FI_CSWAP");
        assert_eq!(show(&none as *const _ as *const c_void, 1000), "Unknown type");
    }

    #[test]
    fn info_prints_as_fi_info_does_and_truncates() {
        // SAFETY: NULL asks for a fresh fi_info.
        let p = unsafe { info::fabric_capi_dupinfo(std::ptr::null()) };
        // SAFETY: p is ours, every attribute allocated.
        unsafe {
            (*(*p).ep_attr).r#type = 3;
            (*(*p).fabric_attr).prov_name = info::c_strdup("tcp;ofi_rxm");
            let s = CStr::from_ptr(fi_tostr(p as *const c_void, abi::FI_TYPE_INFO)).to_string_lossy().into_owned();
            assert!(s.starts_with("fi_info:\n    caps: [  ]\n"), "{s}");
            assert!(s.contains("        type: FI_EP_RDM\n"), "{s}");
            assert!(s.contains("        prov_name: tcp;ofi_rxm\n"), "{s}");
            assert!(s.contains("    handle: (nil)\n"), "{s}");
            libc::free((*p).tx_attr.cast());
            (*p).tx_attr = std::ptr::null_mut();
            let s = CStr::from_ptr(fi_tostr(p as *const c_void, abi::FI_TYPE_INFO)).to_string_lossy().into_owned();
            assert!(s.contains("    fi_tx_attr: (null)\n    fi_rx_attr:\n"), "{s}");
            let mut small = [0 as c_char; 8];
            fi_tostr_r(small.as_mut_ptr(), small.len(), p as *const c_void, abi::FI_TYPE_INFO);
            assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes(), b"fi_info");
            info::fabric_capi_freeinfo(p);
            assert!(fi_tostr(std::ptr::null(), 0).is_null());
        }
    }
}

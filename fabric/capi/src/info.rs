//! `fi_getinfo`, `fi_freeinfo`, `fi_dupinfo`: discovery through the C ABI, and
//! the conversions between libfabric's `struct fi_info` and fabric's [`Info`] and
//! [`Hints`].
//!
//! For the object layer (`fi_fabric`, `fi_domain`, `fi_endpoint`, ...):
//! [`info_from_c`] rebuilds the Rust [`Info`] from a C `fi_info` an application
//! passes back (usually one `fi_getinfo` returned, possibly edited, or a copy
//! `fi_dupinfo` made). Its `fabric_attr.prov_name` is the provider's own name
//! (`tcp` for the C side's `tcp;ofi_rxm`), which is what `fabric::Fabric::open`
//! looks up; addresses are parsed from the C bytes; `handle` is not carried
//! (a connection request's handle is the object layer's to resolve from the C
//! pointer). [`fabric_attr_from_c`] does the same for `fi_fabric`'s attribute.
//!
//! Memory: every `fi_info` handed to C, every attribute struct, string and
//! address in it comes from libc's allocator (`calloc`, `malloc`), so a program
//! may `free()` and `strdup()` over any of it, as libfabric allows
//! (`fi_freeinfo` frees with `free()` likewise).
//!
//! Provider names: the C side reports an RDM entry built over connected or
//! datagram endpoints under libfabric 1.x's layered name (`tcp;ofi_rxm`,
//! `udp;ofi_rxd`, `verbs;ofi_rxm`: [`fabric::layered_name`]). That keeps
//! existing configurations working unchanged: Open MPI excludes providers whose
//! name starts with `tcp`, `udp` or `shm` by default and selects them with
//! `mtl_ofi_provider_include tcp` (a prefix match, so `tcp;ofi_rxm` is excluded
//! and selected exactly as over libfabric); scripts that say
//! `FI_PROVIDER="tcp;ofi_rxm"` or `fi_info -p "tcp;ofi_rxm"` find the same
//! entries; and a program reading `prov_name` to decide about RDM sees what it
//! expects. Entries of other kinds keep the provider's name.
//!
//! One exception: a caller whose hints ask for `FI_DELIVERY_COMPLETE` in
//! `tx_attr->op_flags` gets tcp's RDM entries under the provider's own name,
//! `tcp` ([`c_prov_name`]). libfabric 1.17's `ofi_rxm` does not complete
//! operations at delivery, and Open MPI's ofi BTL (one-sided MPI through osc
//! rdma) asks for `FI_DELIVERY_COMPLETE` and refuses any provider whose name
//! contains `ofi_rxm` for that reason; fabric's tcp RDM endpoints do complete
//! writes, reads and atomics only once the target has answered, and libfabric
//! 1.18 and later name tcp's own RDM endpoints `tcp` too. Callers that do not
//! ask (Open MPI's MTL, `fi_info`, `fi_pingpong`) see `tcp;ofi_rxm` as before.

use crate::abi::{fi_domain_attr, fi_ep_attr, fi_fabric_attr, fi_info, fi_rx_attr, fi_tx_attr, FI_DELIVERY_COMPLETE};
use crate::exports::guard;
use fabric_core::{
    AddrFormat, Address, AvType, Caps, DomainAttr, EpAttr, EpType, Error, FabricAttr, Hints, Info, Mode, MrMode,
    MsgOrder, OpFlags, Progress, Protocol, ResourceMgmt, Result, RxAttr, Threading, TxAttr,
};
use std::ffi::{c_char, c_int, CStr};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr::{self, null_mut};

/// `FI_SOURCE`: node and service name the local address.
const FI_SOURCE: u64 = 1 << 57;
/// `FI_PROV_ATTR_ONLY`: only the provider attributes are wanted (`fi_info -l`).
const FI_PROV_ATTR_ONLY: u64 = 1 << 54;
/// `FI_MR_BASIC` and `FI_MR_SCALABLE`: the pre-1.5 modes (`FI_MR_BASIC` is
/// `FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY` since).
const FI_MR_BASIC: c_int = 1;
const FI_MR_SCALABLE: c_int = 2;
/// The longest address or string accepted from a C caller; longer means garbage.
const MAX_C_LEN: usize = 4096;

/// `-FI_EOTHER`: what an entry point returns when it caught a panic.
pub(crate) const EOTHER: c_int = -256;

/// `-errno` of an error, as the C ABI returns it.
pub(crate) fn neg(e: Error) -> c_int {
    -e.errno()
}

// ---------------------------------------------------------------------------
// libc memory.

/// A zeroed `T` from libc's `calloc` (NULL when out of memory).
pub(crate) fn calloc_one<T>() -> *mut T {
    // SAFETY: calloc with a non-zero size returns NULL or zeroed memory of that size,
    // suitably aligned for any type.
    unsafe { libc::calloc(1, size_of::<T>().max(1)) as *mut T }
}

/// `s` copied into libc memory, NUL-terminated (NULL when out of memory). A NUL
/// inside `s` ends the C string there.
pub(crate) fn c_strdup(s: &str) -> *mut c_char {
    let b = s.as_bytes();
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    // SAFETY: malloc of len+1 bytes; NULL is checked before writing.
    let p = unsafe { libc::malloc(b.len() + 1) as *mut u8 };
    if !p.is_null() {
        // SAFETY: p holds b.len()+1 bytes; b and p do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
            *p.add(b.len()) = 0;
        }
    }
    p as *mut c_char
}

/// `bytes` copied into libc memory (NULL for none, or when out of memory).
fn c_memdup(bytes: &[u8]) -> *mut libc::c_void {
    if bytes.is_empty() {
        return null_mut();
    }
    // SAFETY: malloc of bytes.len() (> 0) bytes; NULL is checked before writing.
    let p = unsafe { libc::malloc(bytes.len()) as *mut u8 };
    if !p.is_null() {
        // SAFETY: p holds bytes.len() bytes; no overlap.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }
    p as *mut libc::c_void
}

/// A C string as Rust text (`None` for NULL or longer than [`MAX_C_LEN`]).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    (s.to_bytes().len() <= MAX_C_LEN).then(|| s.to_string_lossy().into_owned())
}

// ---------------------------------------------------------------------------
// Enum values.

/// `enum fi_ep_type` of an endpoint type.
pub(crate) fn ep_type_to_c(t: EpType) -> c_int {
    match t {
        EpType::Msg => 1,
        EpType::Dgram => 2,
        EpType::Rdm => 3,
        _ => 0,
    }
}

/// The endpoint type of an `enum fi_ep_type` (`None`: one fabric lacks).
pub(crate) fn ep_type_from_c(v: c_int) -> Option<EpType> {
    Some(match v {
        0 => EpType::Unspec,
        1 => EpType::Msg,
        2 => EpType::Dgram,
        3 => EpType::Rdm,
        _ => return None,
    })
}

/// `FI_PROTO_*` of a protocol.
pub(crate) fn protocol_to_c(p: Protocol) -> u32 {
    match p {
        Protocol::RdmaCmIbRc => 1,
        Protocol::Iwarp => 2,
        Protocol::IbUd => 3,
        Protocol::Udp => 5,
        Protocol::SockTcp => 6,
        Protocol::Rxm => 11,
        Protocol::Rxd => 12,
        Protocol::Shm => 16,
        _ => 0,
    }
}

/// The protocol of a `FI_PROTO_*` value (`None`: one fabric lacks).
pub(crate) fn protocol_from_c(v: u32) -> Option<Protocol> {
    Some(match v {
        0 => Protocol::Unspec,
        1 => Protocol::RdmaCmIbRc,
        2 => Protocol::Iwarp,
        3 => Protocol::IbUd,
        5 => Protocol::Udp,
        6 => Protocol::SockTcp,
        11 => Protocol::Rxm,
        12 => Protocol::Rxd,
        16 => Protocol::Shm,
        _ => return None,
    })
}

/// `enum fi_threading` of a threading model.
pub(crate) fn threading_to_c(t: Threading) -> c_int {
    match t {
        Threading::Safe => 1,
        Threading::Fid => 2,
        Threading::Domain => 3,
        Threading::Completion => 4,
        Threading::Endpoint => 5,
        _ => 0,
    }
}

/// The threading model of an `enum fi_threading`.
pub(crate) fn threading_from_c(v: c_int) -> Option<Threading> {
    Some(match v {
        0 => Threading::Unspec,
        1 => Threading::Safe,
        2 => Threading::Fid,
        3 => Threading::Domain,
        4 => Threading::Completion,
        5 => Threading::Endpoint,
        _ => return None,
    })
}

/// `enum fi_progress` of a progress model.
pub(crate) fn progress_to_c(p: Progress) -> c_int {
    match p {
        Progress::Auto => 1,
        Progress::Manual => 2,
        _ => 0,
    }
}

/// The progress model of an `enum fi_progress`.
pub(crate) fn progress_from_c(v: c_int) -> Option<Progress> {
    Some(match v {
        0 => Progress::Unspec,
        1 => Progress::Auto,
        2 => Progress::Manual,
        _ => return None,
    })
}

/// `enum fi_resource_mgmt` of a resource management mode.
pub(crate) fn rm_to_c(r: ResourceMgmt) -> c_int {
    match r {
        ResourceMgmt::Disabled => 1,
        ResourceMgmt::Enabled => 2,
        _ => 0,
    }
}

/// The resource management mode of an `enum fi_resource_mgmt`.
pub(crate) fn rm_from_c(v: c_int) -> Option<ResourceMgmt> {
    Some(match v {
        0 => ResourceMgmt::Unspec,
        1 => ResourceMgmt::Disabled,
        2 => ResourceMgmt::Enabled,
        _ => return None,
    })
}

/// `enum fi_av_type` of an AV type.
pub(crate) fn av_type_to_c(t: AvType) -> c_int {
    match t {
        AvType::Map => 1,
        AvType::Table => 2,
        _ => 0,
    }
}

/// The AV type of an `enum fi_av_type`.
pub(crate) fn av_type_from_c(v: c_int) -> Option<AvType> {
    Some(match v {
        0 => AvType::Unspec,
        1 => AvType::Map,
        2 => AvType::Table,
        _ => return None,
    })
}

/// `FI_SOCKADDR*`/`FI_ADDR_STR` of an address format.
pub(crate) fn addr_format_to_c(f: AddrFormat) -> u32 {
    match f {
        AddrFormat::Sockaddr => 1,
        AddrFormat::SockaddrIn => 2,
        AddrFormat::SockaddrIn6 => 3,
        AddrFormat::Str => 9,
        _ => 0,
    }
}

/// The address format of a C value (`None`: one fabric lacks).
pub(crate) fn addr_format_from_c(v: u32) -> Option<AddrFormat> {
    Some(match v {
        0 => AddrFormat::Unspec,
        1 => AddrFormat::Sockaddr,
        2 => AddrFormat::SockaddrIn,
        3 => AddrFormat::SockaddrIn6,
        9 => AddrFormat::Str,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Addresses.

/// An address as libfabric passes it: a `struct sockaddr_in`/`sockaddr_in6`, or
/// for `FI_ADDR_STR` the NUL-terminated string.
pub(crate) fn addr_to_c_bytes(a: &Address) -> Vec<u8> {
    match a.sockaddr() {
        Some(SocketAddr::V4(s)) => {
            // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = s.port().to_be();
            sin.sin_addr.s_addr = u32::from(*s.ip()).to_be();
            // SAFETY: reading the bytes of a plain-data struct.
            unsafe { std::slice::from_raw_parts(&sin as *const _ as *const u8, size_of::<libc::sockaddr_in>()) }
                .to_vec()
        }
        Some(SocketAddr::V6(s)) => {
            // SAFETY: sockaddr_in6 is plain data; all-zero is a valid value.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = s.port().to_be();
            sin6.sin6_addr.s6_addr = s.ip().octets();
            sin6.sin6_flowinfo = s.flowinfo().to_be();
            sin6.sin6_scope_id = s.scope_id();
            // SAFETY: reading the bytes of a plain-data struct.
            unsafe { std::slice::from_raw_parts(&sin6 as *const _ as *const u8, size_of::<libc::sockaddr_in6>()) }
                .to_vec()
        }
        None => {
            let mut b = a.to_uri().into_bytes();
            b.push(0);
            b
        }
    }
}

/// The address at `p` (`len` bytes) in `format`. `Ok(None)` for NULL; `Err`
/// (`-FI_EINVAL` to the caller) for a length or content that cannot be one.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
pub(crate) unsafe fn addr_from_c(format: u32, p: *const libc::c_void, len: usize) -> Result<Option<Address>> {
    if p.is_null() {
        return Ok(None);
    }
    if len == 0 || len > MAX_C_LEN {
        return Err(Error::Inval);
    }
    // SAFETY: the caller guarantees len readable bytes at p.
    let b = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    if format == 9 {
        let s = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
        let s = std::str::from_utf8(s).map_err(|_| Error::Inval)?;
        return Address::parse(s).map(Some);
    }
    if len < size_of::<libc::sa_family_t>() {
        return Err(Error::Inval);
    }
    let family = c_int::from(u16::from_ne_bytes([b[0], b[1]]));
    if family == libc::AF_INET && len >= size_of::<libc::sockaddr_in>() {
        // SAFETY: len covers a sockaddr_in; read_unaligned copes with any alignment.
        let sin: libc::sockaddr_in = unsafe { ptr::read_unaligned(p as *const libc::sockaddr_in) };
        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        return Ok(Some(Address::Sockaddr(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))));
    }
    if family == libc::AF_INET6 && len >= size_of::<libc::sockaddr_in6>() {
        // SAFETY: len covers a sockaddr_in6; read_unaligned copes with any alignment.
        let s6: libc::sockaddr_in6 = unsafe { ptr::read_unaligned(p as *const libc::sockaddr_in6) };
        let ip = Ipv6Addr::from(s6.sin6_addr.s6_addr);
        let sa = SocketAddrV6::new(ip, u16::from_be(s6.sin6_port), u32::from_be(s6.sin6_flowinfo), s6.sin6_scope_id);
        return Ok(Some(Address::Sockaddr(SocketAddr::V6(sa))));
    }
    Err(Error::Inval)
}

// ---------------------------------------------------------------------------
// Rust -> C.

/// A `fi_info` with every attribute struct allocated and zeroed (what
/// `fi_allocinfo` gives), or NULL when out of memory.
pub(crate) fn alloc_info() -> *mut fi_info {
    let info = calloc_one::<fi_info>();
    if info.is_null() {
        return info;
    }
    // SAFETY: info is a valid, zeroed fi_info we own.
    let i = unsafe { &mut *info };
    i.tx_attr = calloc_one::<fi_tx_attr>();
    i.rx_attr = calloc_one::<fi_rx_attr>();
    i.ep_attr = calloc_one::<fi_ep_attr>();
    i.domain_attr = calloc_one::<fi_domain_attr>();
    i.fabric_attr = calloc_one::<fi_fabric_attr>();
    if i.tx_attr.is_null()
        || i.rx_attr.is_null()
        || i.ep_attr.is_null()
        || i.domain_attr.is_null()
        || i.fabric_attr.is_null()
    {
        // SAFETY: a list of one, every pointer in it NULL or ours.
        unsafe { free_info_list(info) };
        return null_mut();
    }
    info
}

/// Providers whose RDM endpoints over connections (reported as `PROV;ofi_rxm`)
/// complete every operation at delivery: a write, read or atomic completes once
/// the target has answered it (`providers/tcp/src/ep/rma.rs`).
const DELIVERY_COMPLETE_RDM: &[&str] = &["tcp"];

/// The `prov_name` the C side reports for `info`: libfabric 1.x's layered name
/// ([`fabric::layered_name`]), or, when the caller asked for
/// `FI_DELIVERY_COMPLETE` (`delivery_complete`) and the entry is an RDM one of
/// a provider in [`DELIVERY_COMPLETE_RDM`], the provider's own name (see the
/// module's documentation).
pub(crate) fn c_prov_name(info: &Info, delivery_complete: bool) -> String {
    let own = &info.fabric_attr.prov_name;
    if delivery_complete && info.ep_attr.ep_type == EpType::Rdm && DELIVERY_COMPLETE_RDM.contains(&own.as_str()) {
        own.clone()
    } else {
        fabric::layered_name(info)
    }
}

/// A libc-allocated `fi_info` of `info` (no `next`), or NULL when out of memory.
/// `prov_name` is the name the C side reports ([`fabric::layered_name`]).
pub(crate) fn info_to_c(info: &Info) -> *mut fi_info {
    info_to_c_named(info, false)
}

/// [`info_to_c`] with `prov_name` from [`c_prov_name`].
fn info_to_c_named(info: &Info, delivery_complete: bool) -> *mut fi_info {
    let p = alloc_info();
    if p.is_null() {
        return p;
    }
    // SAFETY: alloc_info gave a valid fi_info with every attribute struct allocated.
    let c = unsafe { &mut *p };
    c.caps = info.caps.bits();
    c.mode = info.mode.bits();
    c.addr_format = addr_format_to_c(info.addr_format);
    let mut ok = true;
    if let Some(a) = &info.src_addr {
        let b = addr_to_c_bytes(a);
        c.src_addr = c_memdup(&b);
        c.src_addrlen = b.len();
        ok &= !c.src_addr.is_null();
    }
    if let Some(a) = &info.dest_addr {
        let b = addr_to_c_bytes(a);
        c.dest_addr = c_memdup(&b);
        c.dest_addrlen = b.len();
        ok &= !c.dest_addr.is_null();
    }
    // SAFETY: the attribute structs alloc_info allocated (this and the four below).
    let tx = unsafe { &mut *c.tx_attr };
    tx.caps = info.tx_attr.caps.bits();
    tx.mode = info.tx_attr.mode.bits();
    tx.op_flags = info.tx_attr.op_flags.bits();
    tx.msg_order = info.tx_attr.msg_order.bits();
    tx.comp_order = info.tx_attr.comp_order.bits();
    tx.inject_size = info.tx_attr.inject_size;
    tx.size = info.tx_attr.size;
    tx.iov_limit = info.tx_attr.iov_limit;
    tx.rma_iov_limit = info.tx_attr.rma_iov_limit;
    // SAFETY: as above.
    let rx = unsafe { &mut *c.rx_attr };
    rx.caps = info.rx_attr.caps.bits();
    rx.mode = info.rx_attr.mode.bits();
    rx.op_flags = info.rx_attr.op_flags.bits();
    rx.msg_order = info.rx_attr.msg_order.bits();
    rx.comp_order = info.rx_attr.comp_order.bits();
    rx.total_buffered_recv = info.rx_attr.total_buffered_recv;
    rx.size = info.rx_attr.size;
    rx.iov_limit = info.rx_attr.iov_limit;
    // SAFETY: as above.
    let ep = unsafe { &mut *c.ep_attr };
    let e = &info.ep_attr;
    ep.r#type = ep_type_to_c(e.ep_type);
    ep.protocol = protocol_to_c(e.protocol);
    ep.protocol_version = e.protocol_version;
    ep.max_msg_size = e.max_msg_size;
    ep.msg_prefix_size = e.msg_prefix_size;
    ep.max_order_raw_size = e.max_order_raw_size;
    ep.max_order_war_size = e.max_order_war_size;
    ep.max_order_waw_size = e.max_order_waw_size;
    ep.mem_tag_format = e.mem_tag_format;
    ep.tx_ctx_cnt = e.tx_ctx_cnt;
    ep.rx_ctx_cnt = e.rx_ctx_cnt;
    // No authorization keys are handed out, so none has a size.
    ep.auth_key_size = 0;
    // SAFETY: as above.
    let d = unsafe { &mut *c.domain_attr };
    let a = &info.domain_attr;
    d.name = c_strdup(&a.name);
    ok &= !d.name.is_null();
    d.threading = threading_to_c(a.threading);
    d.control_progress = progress_to_c(a.control_progress);
    d.data_progress = progress_to_c(a.data_progress);
    d.resource_mgmt = rm_to_c(a.resource_mgmt);
    d.av_type = av_type_to_c(a.av_type);
    d.mr_mode = a.mr_mode.bits() as c_int;
    d.mr_key_size = a.mr_key_size;
    d.cq_data_size = a.cq_data_size;
    d.cq_cnt = a.cq_cnt;
    d.ep_cnt = a.ep_cnt;
    d.tx_ctx_cnt = a.tx_ctx_cnt;
    d.rx_ctx_cnt = a.rx_ctx_cnt;
    d.max_ep_tx_ctx = a.max_ep_tx_ctx;
    d.max_ep_rx_ctx = a.max_ep_rx_ctx;
    d.max_ep_stx_ctx = a.max_ep_stx_ctx;
    d.max_ep_srx_ctx = a.max_ep_srx_ctx;
    d.cntr_cnt = a.cntr_cnt;
    d.mr_iov_limit = a.mr_iov_limit;
    d.caps = a.caps.bits();
    d.mode = a.mode.bits();
    d.auth_key_size = 0;
    d.max_err_data = a.max_err_data;
    d.mr_cnt = a.mr_cnt;
    // SAFETY: as above.
    let f = unsafe { &mut *c.fabric_attr };
    f.name = c_strdup(&info.fabric_attr.name);
    f.prov_name = c_strdup(&c_prov_name(info, delivery_complete));
    f.prov_version = info.fabric_attr.prov_version;
    f.api_version = info.fabric_attr.api_version;
    ok &= !f.name.is_null() && !f.prov_name.is_null();
    if !ok {
        // SAFETY: a list of one we built; every pointer NULL or ours.
        unsafe { free_info_list(p) };
        return null_mut();
    }
    p
}

/// A C list of `infos`, in order (NULL for none or when out of memory);
/// `delivery_complete` as [`c_prov_name`]'s.
fn list_to_c(infos: &[Info], delivery_complete: bool) -> *mut fi_info {
    let mut head: *mut fi_info = null_mut();
    let mut tail: *mut fi_info = null_mut();
    for i in infos {
        let c = info_to_c_named(i, delivery_complete);
        if c.is_null() {
            // SAFETY: the list built so far is ours.
            unsafe { free_info_list(head) };
            return null_mut();
        }
        if tail.is_null() {
            head = c;
        } else {
            // SAFETY: tail is the last fi_info of our list.
            unsafe { (*tail).next = c };
        }
        tail = c;
    }
    head
}

// ---------------------------------------------------------------------------
// C -> Rust.

/// The transmit attributes of a C `fi_tx_attr`.
pub(crate) fn tx_attr_from_c(t: &fi_tx_attr) -> TxAttr {
    TxAttr {
        caps: Caps::from_bits_retain(t.caps),
        mode: Mode::from_bits_retain(t.mode),
        op_flags: OpFlags::from_bits_retain(t.op_flags),
        msg_order: MsgOrder::from_bits_retain(t.msg_order),
        comp_order: MsgOrder::from_bits_retain(t.comp_order),
        inject_size: t.inject_size,
        size: t.size,
        iov_limit: t.iov_limit,
        rma_iov_limit: t.rma_iov_limit,
    }
}

/// The receive attributes of a C `fi_rx_attr`.
pub(crate) fn rx_attr_from_c(r: &fi_rx_attr) -> RxAttr {
    RxAttr {
        caps: Caps::from_bits_retain(r.caps),
        mode: Mode::from_bits_retain(r.mode),
        op_flags: OpFlags::from_bits_retain(r.op_flags),
        msg_order: MsgOrder::from_bits_retain(r.msg_order),
        comp_order: MsgOrder::from_bits_retain(r.comp_order),
        total_buffered_recv: r.total_buffered_recv,
        size: r.size,
        iov_limit: r.iov_limit,
    }
}

/// The endpoint attributes of a C `fi_ep_attr` (an enum value fabric lacks
/// becomes unspecified).
pub(crate) fn ep_attr_from_c(e: &fi_ep_attr) -> EpAttr {
    EpAttr {
        ep_type: ep_type_from_c(e.r#type).unwrap_or_default(),
        protocol: protocol_from_c(e.protocol).unwrap_or_default(),
        protocol_version: e.protocol_version,
        max_msg_size: e.max_msg_size,
        msg_prefix_size: e.msg_prefix_size,
        max_order_raw_size: e.max_order_raw_size,
        max_order_war_size: e.max_order_war_size,
        max_order_waw_size: e.max_order_waw_size,
        mem_tag_format: e.mem_tag_format,
        tx_ctx_cnt: e.tx_ctx_cnt,
        rx_ctx_cnt: e.rx_ctx_cnt,
        auth_key_size: e.auth_key_size,
    }
}

/// The domain attributes of a C `fi_domain_attr`.
///
/// # Safety
/// `d.name` is NULL or a NUL-terminated string.
pub(crate) unsafe fn domain_attr_from_c(d: &fi_domain_attr) -> DomainAttr {
    DomainAttr {
        // SAFETY: the caller guarantees the string.
        name: unsafe { c_str(d.name) }.unwrap_or_default(),
        threading: threading_from_c(d.threading).unwrap_or_default(),
        control_progress: progress_from_c(d.control_progress).unwrap_or_default(),
        data_progress: progress_from_c(d.data_progress).unwrap_or_default(),
        resource_mgmt: rm_from_c(d.resource_mgmt).unwrap_or_default(),
        av_type: av_type_from_c(d.av_type).unwrap_or_default(),
        mr_mode: MrMode::from_bits_retain(d.mr_mode as u32),
        mr_key_size: d.mr_key_size,
        cq_data_size: d.cq_data_size,
        cq_cnt: d.cq_cnt,
        ep_cnt: d.ep_cnt,
        tx_ctx_cnt: d.tx_ctx_cnt,
        rx_ctx_cnt: d.rx_ctx_cnt,
        max_ep_tx_ctx: d.max_ep_tx_ctx,
        max_ep_rx_ctx: d.max_ep_rx_ctx,
        max_ep_stx_ctx: d.max_ep_stx_ctx,
        max_ep_srx_ctx: d.max_ep_srx_ctx,
        cntr_cnt: d.cntr_cnt,
        mr_iov_limit: d.mr_iov_limit,
        caps: Caps::from_bits_retain(d.caps),
        mode: Mode::from_bits_retain(d.mode),
        auth_key_size: d.auth_key_size,
        max_err_data: d.max_err_data,
        mr_cnt: d.mr_cnt,
    }
}

/// The fabric attributes of a C `fi_fabric_attr`, `prov_name` reduced to the
/// provider's own name (`tcp` of `tcp;ofi_rxm`), which is what
/// `fabric::Fabric::open` looks up.
///
/// # Safety
/// `f.name` and `f.prov_name` are NULL or NUL-terminated strings.
pub(crate) unsafe fn fabric_attr_from_c(f: &fi_fabric_attr) -> FabricAttr {
    // SAFETY: the caller guarantees the strings.
    let prov = unsafe { c_str(f.prov_name) }.unwrap_or_default();
    FabricAttr {
        // SAFETY: as above.
        name: unsafe { c_str(f.name) }.unwrap_or_default(),
        prov_name: fabric::core_name(&prov).to_string(),
        prov_version: f.prov_version,
        api_version: f.api_version,
    }
}

/// Rebuild fabric's [`Info`] from a C `fi_info` (see the module docs): for the
/// object layer's `fi_fabric`, `fi_domain`, `fi_endpoint`. Missing attribute
/// structs leave their defaults; an address that cannot be read is `Err(Inval)`.
///
/// # Safety
/// `c` is a valid `fi_info` whose pointers are NULL or valid (as `fi_getinfo`
/// or `fi_dupinfo` made them, or as a C program filled them).
pub(crate) unsafe fn info_from_c(c: &fi_info) -> Result<Info> {
    let mut i = Info {
        caps: Caps::from_bits_retain(c.caps),
        mode: Mode::from_bits_retain(c.mode),
        addr_format: addr_format_from_c(c.addr_format).unwrap_or_default(),
        ..Default::default()
    };
    // SAFETY: the caller guarantees the addresses and their lengths.
    i.src_addr = unsafe { addr_from_c(c.addr_format, c.src_addr, c.src_addrlen) }?;
    // SAFETY: as above.
    i.dest_addr = unsafe { addr_from_c(c.addr_format, c.dest_addr, c.dest_addrlen) }?;
    // SAFETY: each attribute pointer is NULL or valid (this and the four below).
    if let Some(t) = unsafe { c.tx_attr.as_ref() } {
        i.tx_attr = tx_attr_from_c(t);
    }
    // SAFETY: as above.
    if let Some(r) = unsafe { c.rx_attr.as_ref() } {
        i.rx_attr = rx_attr_from_c(r);
    }
    // SAFETY: as above.
    if let Some(e) = unsafe { c.ep_attr.as_ref() } {
        i.ep_attr = ep_attr_from_c(e);
    }
    // SAFETY: as above; its name is NULL or a string.
    if let Some(d) = unsafe { c.domain_attr.as_ref() } {
        // SAFETY: as above.
        i.domain_attr = unsafe { domain_attr_from_c(d) };
    }
    // SAFETY: as above.
    if let Some(f) = unsafe { c.fabric_attr.as_ref() } {
        // SAFETY: as above.
        i.fabric_attr = unsafe { fabric_attr_from_c(f) };
    }
    Ok(i)
}

/// The hints of a C `fi_getinfo` call: every field of `struct fi_info`
/// libfabric's fi_getinfo(3) honours that [`Hints`] has. Unknown caps bits are
/// kept (no provider offers them, so nothing fits: libfabric's answer too);
/// mode bits are what the application supports (0: none); a domain attribute's
/// `mr_mode` likewise (`FI_MR_BASIC` stands for its three modes and
/// `FI_MR_SCALABLE` for none, as libfabric reads them; before API 1.5 both, and
/// 0, mean any).
///
/// # Safety
/// `h` is NULL or a valid `fi_info` (see [`info_from_c`]); `node` and
/// `service` are NULL or NUL-terminated strings.
pub(crate) unsafe fn hints_from_c(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    h: *const fi_info,
) -> Result<Hints> {
    let mut hints = Hints::new();
    // SAFETY: the caller guarantees the strings.
    hints.node = unsafe { c_str(node) };
    // SAFETY: as above.
    hints.service = unsafe { c_str(service) };
    if (!node.is_null() && hints.node.is_none()) || (!service.is_null() && hints.service.is_none()) {
        return Err(Error::Inval);
    }
    hints.source = flags & FI_SOURCE != 0;
    // SAFETY: h is NULL or valid.
    let Some(h) = (unsafe { h.as_ref() }) else { return Ok(hints) };
    hints.caps = Caps::from_bits_retain(h.caps);
    hints.mode = Some(Mode::from_bits_retain(h.mode));
    hints.addr_format = addr_format_from_c(h.addr_format).ok_or(Error::Inval)?;
    // SAFETY: the caller guarantees the addresses and their lengths.
    hints.src_addr = unsafe { addr_from_c(h.addr_format, h.src_addr, h.src_addrlen) }?;
    // SAFETY: as above.
    hints.dest_addr = unsafe { addr_from_c(h.addr_format, h.dest_addr, h.dest_addrlen) }?;
    // SAFETY: each attribute pointer is NULL or valid (this and those below).
    if let Some(e) = unsafe { h.ep_attr.as_ref() } {
        hints.ep_type = ep_type_from_c(e.r#type).ok_or(Error::Inval)?;
    }
    // SAFETY: as above.
    if let Some(t) = unsafe { h.tx_attr.as_ref() } {
        hints.tx_size = t.size;
        hints.msg_order = MsgOrder::from_bits_retain(t.msg_order);
        hints.caps |= Caps::from_bits_retain(t.caps) & !(Caps::SEND | Caps::RECV);
    }
    // SAFETY: as above.
    if let Some(r) = unsafe { h.rx_attr.as_ref() } {
        hints.rx_size = r.size;
    }
    // SAFETY: as above.
    if let Some(d) = unsafe { h.domain_attr.as_ref() } {
        // SAFETY: its name is NULL or a string.
        hints.domain_name = unsafe { c_str(d.name) };
        if !d.name.is_null() && hints.domain_name.is_none() {
            return Err(Error::Inval);
        }
        hints.threading = threading_from_c(d.threading).ok_or(Error::Inval)?;
        hints.control_progress = progress_from_c(d.control_progress).ok_or(Error::Inval)?;
        hints.data_progress = progress_from_c(d.data_progress).ok_or(Error::Inval)?;
        hints.av_type = av_type_from_c(d.av_type).ok_or(Error::Inval)?;
        let old_api = version < fabric_core::info::version(1, 5);
        hints.mr_mode = match d.mr_mode {
            m if old_api && (m == 0 || m & (FI_MR_BASIC | FI_MR_SCALABLE) != 0) => None,
            m if m & FI_MR_BASIC != 0 => Some(
                MrMode::from_bits_retain((m & !(FI_MR_BASIC | FI_MR_SCALABLE)) as u32)
                    | MrMode::VIRT_ADDR
                    | MrMode::ALLOCATED
                    | MrMode::PROV_KEY,
            ),
            m => Some(MrMode::from_bits_retain((m & !FI_MR_SCALABLE) as u32)),
        };
    }
    // SAFETY: as above.
    if let Some(f) = unsafe { h.fabric_attr.as_ref() } {
        // SAFETY: its strings are NULL or strings.
        hints.fabric_name = unsafe { c_str(f.name) };
        // SAFETY: as above.
        hints.prov_name = unsafe { c_str(f.prov_name) };
    }
    Ok(hints)
}

// ---------------------------------------------------------------------------
// Freeing and copying.

/// Free a list of `fi_info` and everything in them with libc's `free`.
///
/// # Safety
/// `info` is NULL or a list whose every pointer is NULL or libc memory (as
/// this library hands out, or as a program replaced with `malloc`/`strdup`).
pub(crate) unsafe fn free_info_list(mut info: *mut fi_info) {
    while !info.is_null() {
        // SAFETY: info is a valid fi_info of the list.
        let i = unsafe { &mut *info };
        let next = i.next;
        // SAFETY: every pointer freed here is NULL or libc memory (the caller's
        // guarantee); free(NULL) does nothing.
        unsafe {
            libc::free(i.src_addr);
            libc::free(i.dest_addr);
            libc::free(i.tx_attr.cast());
            libc::free(i.rx_attr.cast());
            if let Some(e) = i.ep_attr.as_ref() {
                libc::free(e.auth_key.cast());
            }
            libc::free(i.ep_attr.cast());
            if let Some(d) = i.domain_attr.as_ref() {
                libc::free(d.name.cast());
                libc::free(d.auth_key.cast());
            }
            libc::free(i.domain_attr.cast());
            if let Some(f) = i.fabric_attr.as_ref() {
                libc::free(f.name.cast());
                libc::free(f.prov_name.cast());
            }
            libc::free(i.fabric_attr.cast());
            libc::free(info.cast());
        }
        info = next;
    }
}

/// A libc copy of `*src` (NULL when `src` is NULL or out of memory).
///
/// # Safety
/// `src` is NULL or a valid `T`.
unsafe fn dup_struct<T>(src: *const T) -> *mut T {
    if src.is_null() {
        return null_mut();
    }
    let p = calloc_one::<T>();
    if !p.is_null() {
        // SAFETY: src is valid, p fresh; no overlap.
        unsafe { ptr::copy_nonoverlapping(src, p, 1) };
    }
    p
}

/// A libc copy of `len` bytes at `p` (NULL for NULL, a zero or a garbage length).
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn dup_bytes(p: *const libc::c_void, len: usize) -> *mut libc::c_void {
    if p.is_null() || len == 0 || len > MAX_C_LEN {
        return null_mut();
    }
    // SAFETY: the caller guarantees len bytes.
    c_memdup(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// A libc copy of a C string (NULL for NULL).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn dup_cstr(s: *const c_char) -> *mut c_char {
    if s.is_null() {
        return null_mut();
    }
    // SAFETY: s is a NUL-terminated string; strdup returns libc memory or NULL.
    unsafe { libc::strdup(s) }
}

/// A deep copy of one `fi_info` (not its `next`); `nic` is not copied (this
/// library hands none out).
///
/// # Safety
/// As [`info_from_c`].
unsafe fn dup_one(src: &fi_info) -> *mut fi_info {
    // SAFETY: src is a valid fi_info.
    let p = unsafe { dup_struct(src as *const fi_info) };
    if p.is_null() {
        return p;
    }
    // SAFETY: p is our fresh copy; its pointers still alias src's and are all
    // replaced below before anything is freed.
    let c = unsafe { &mut *p };
    c.next = null_mut();
    c.nic = null_mut();
    // SAFETY: src's pointers are NULL or valid, with their lengths; c's are the
    // copies just made.
    unsafe {
        c.src_addr = dup_bytes(src.src_addr, src.src_addrlen);
        c.dest_addr = dup_bytes(src.dest_addr, src.dest_addrlen);
        c.tx_attr = dup_struct(src.tx_attr);
        c.rx_attr = dup_struct(src.rx_attr);
        c.ep_attr = dup_struct(src.ep_attr);
        if let Some(e) = c.ep_attr.as_mut() {
            e.auth_key = dup_bytes(e.auth_key.cast(), e.auth_key_size).cast();
        }
        c.domain_attr = dup_struct(src.domain_attr);
        if let Some(d) = c.domain_attr.as_mut() {
            d.name = dup_cstr(d.name);
            d.auth_key = dup_bytes(d.auth_key.cast(), d.auth_key_size).cast();
        }
        c.fabric_attr = dup_struct(src.fabric_attr);
        if let Some(f) = c.fabric_attr.as_mut() {
            f.name = dup_cstr(f.name);
            f.prov_name = dup_cstr(f.prov_name);
        }
    }
    let lost = |from: *const libc::c_void, to: *mut libc::c_void| !from.is_null() && to.is_null();
    // SAFETY: reading our copy's attribute structs, NULL or ours.
    let failed = unsafe {
        lost(src.src_addr, c.src_addr) && src.src_addrlen <= MAX_C_LEN
            || lost(src.dest_addr, c.dest_addr) && src.dest_addrlen <= MAX_C_LEN
            || lost(src.tx_attr.cast(), c.tx_attr.cast())
            || lost(src.rx_attr.cast(), c.rx_attr.cast())
            || lost(src.ep_attr.cast(), c.ep_attr.cast())
            || lost(src.domain_attr.cast(), c.domain_attr.cast())
            || lost(src.fabric_attr.cast(), c.fabric_attr.cast())
            || c.domain_attr.as_ref().is_some_and(|d| lost((*src.domain_attr).name.cast(), d.name.cast()))
            || c.fabric_attr.as_ref().is_some_and(|f| {
                lost((*src.fabric_attr).name.cast(), f.name.cast())
                    || lost((*src.fabric_attr).prov_name.cast(), f.prov_name.cast())
            })
    };
    if failed {
        // SAFETY: every pointer in our copy is NULL or a copy we made.
        unsafe { free_info_list(p) };
        return null_mut();
    }
    p
}

// ---------------------------------------------------------------------------
// The exports.

/// What `fi_getinfo` does, its result as a list in Rust order.
///
/// # Safety
/// As [`fabric_capi_getinfo`].
unsafe fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
) -> Result<Vec<Info>> {
    use fabric_core::info::{version_major, version_minor};
    if version_major(version) != 1 || version_minor(version) > version_minor(crate::exports::API_VERSION) {
        return Err(Error::NoSys);
    }
    // SAFETY: the caller's guarantees, passed on.
    let h = unsafe { hints_from_c(version, node, service, flags, hints) }?;
    if flags & FI_PROV_ATTR_ONLY != 0 {
        // One entry per provider, only its fabric attributes filled: `fi_info -l`.
        let v: Vec<Info> = fabric::providers()
            .iter()
            .filter(|p| h.prov_name.as_deref().map_or(true, |w| fabric::provider_allowed(w, p.name())))
            .map(|p| {
                let mut i = Info::default();
                i.fabric_attr.prov_name = p.name().to_string();
                i.fabric_attr.prov_version = p.version();
                i.fabric_attr.api_version = fabric_core::info::API_VERSION;
                i
            })
            .collect();
        return if v.is_empty() { Err(Error::NoData) } else { Ok(v) };
    }
    let mut v = fabric::getinfo(&h)?;
    // The default operation flags asked for come back as the entries' own, as
    // libfabric's `ofi_alter_info` does: an application asking for
    // `FI_COMPLETION` there (Open MPI's ofi MTL) binds its queues with
    // `FI_SELECTIVE_COMPLETION` and counts on completions of plain sends.
    // SAFETY: `hints` is NULL or a valid `fi_info` (as `hints_from_c` read it),
    // its attribute pointers NULL or valid.
    let (tx, rx) = unsafe {
        hints.as_ref().map_or((None, None), |hh| {
            (hh.tx_attr.as_ref().map(|t| t.op_flags), hh.rx_attr.as_ref().map(|r| r.op_flags))
        })
    };
    for i in &mut v {
        if let Some(f) = tx {
            i.tx_attr.op_flags = OpFlags::from_bits_retain(f);
        }
        if let Some(f) = rx {
            i.rx_attr.op_flags = OpFlags::from_bits_retain(f);
        }
    }
    Ok(v)
}

/// `fi_getinfo` (FABRIC_1.3): what the providers offer for the hints, as a list
/// of libc-allocated `fi_info` (free with `fi_freeinfo`). `-FI_ENODATA` when
/// nothing fits, `-FI_EINVAL` for unreadable arguments, `-FI_ENOSYS` for an API
/// version above 1.17.
///
/// # Safety
/// `node`, `service` NULL or strings; `hints` NULL or a valid `fi_info`; `info`
/// NULL (then `-FI_EINVAL`) or a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    if info.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: info is a valid out-pointer (checked non-NULL).
    unsafe { *info = null_mut() };
    guard("fi_getinfo", EOTHER, || {
        // SAFETY: the caller's guarantees, passed on.
        match unsafe { getinfo(version, node, service, flags, hints) } {
            Ok(v) => {
                // SAFETY: hints is NULL or a valid fi_info whose tx_attr is NULL
                // or valid (the caller's guarantee; getinfo read them already).
                let tx = unsafe { hints.as_ref().and_then(|h| h.tx_attr.as_ref()) };
                let delivery_complete = tx.is_some_and(|t| t.op_flags & FI_DELIVERY_COMPLETE != 0);
                let list = list_to_c(&v, delivery_complete);
                if list.is_null() {
                    return neg(Error::NoMem);
                }
                // SAFETY: as above.
                unsafe { *info = list };
                0
            }
            Err(e) => neg(e),
        }
    })
}

/// `fi_freeinfo` (FABRIC_1.3): free a list `fi_getinfo` or `fi_dupinfo` gave
/// (NULL: nothing).
///
/// # Safety
/// See [`free_info_list`].
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_freeinfo(info: *mut fi_info) {
    // SAFETY: the caller's guarantee.
    guard("fi_freeinfo", (), || unsafe { free_info_list(info) })
}

/// `fi_dupinfo` (FABRIC_1.3): a deep copy of one `fi_info` (not the rest of its
/// list); `fi_dupinfo(NULL)` allocates one with every attribute struct (what
/// `fi_allocinfo()` is). NULL when out of memory.
///
/// # Safety
/// `info` is NULL or a valid `fi_info`.
#[no_mangle]
pub unsafe extern "C" fn fabric_capi_dupinfo(info: *const fi_info) -> *mut fi_info {
    guard("fi_dupinfo", null_mut(), || {
        // SAFETY: info is NULL or valid.
        match unsafe { info.as_ref() } {
            None => alloc_info(),
            // SAFETY: as above.
            Some(i) => unsafe { dup_one(i) },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Info {
        let mut i = Info {
            caps: Caps::MSG | Caps::TAGGED | Caps::SEND | Caps::RECV,
            addr_format: AddrFormat::SockaddrIn,
            src_addr: Some(Address::parse("127.0.0.1:4711").unwrap()),
            ..Default::default()
        };
        i.ep_attr.ep_type = EpType::Rdm;
        i.ep_attr.protocol = Protocol::Rxm;
        i.ep_attr.mem_tag_format = fabric_core::info::TAG_GENERIC;
        i.tx_attr.size = 1024;
        i.tx_attr.msg_order = MsgOrder::SAS;
        i.rx_attr.size = 512;
        i.domain_attr.name = "lo".into();
        i.domain_attr.threading = Threading::Safe;
        i.domain_attr.av_type = AvType::Map;
        i.domain_attr.mr_mode = MrMode::PROV_KEY;
        i.domain_attr.cq_data_size = 8;
        i.fabric_attr.name = "127.0.0.0/8".into();
        i.fabric_attr.prov_name = "tcp".into();
        i.fabric_attr.api_version = fabric_core::info::API_VERSION;
        i
    }

    #[test]
    fn delivery_complete_callers_see_tcp_rdm_under_its_own_name() {
        let rdm = sample();
        assert_eq!(c_prov_name(&rdm, false), "tcp;ofi_rxm");
        assert_eq!(c_prov_name(&rdm, true), "tcp");
        // Only tcp's RDM entries: its MSG entries and other providers' RDM
        // entries keep their names whatever the caller asks.
        let mut msg = sample();
        msg.ep_attr.ep_type = EpType::Msg;
        msg.ep_attr.protocol = Protocol::SockTcp;
        assert_eq!(c_prov_name(&msg, true), "tcp");
        let mut verbs = sample();
        verbs.fabric_attr.prov_name = "verbs".into();
        assert_eq!(c_prov_name(&verbs, true), "verbs;ofi_rxm");
        let mut udp = sample();
        udp.fabric_attr.prov_name = "udp".into();
        udp.ep_attr.protocol = Protocol::Rxd;
        assert_eq!(c_prov_name(&udp, true), "udp;ofi_rxd");
        // What a C caller sees, and what comes back from it.
        let c = info_to_c_named(&rdm, true);
        assert!(!c.is_null());
        // SAFETY: c is a valid fi_info we built; freed below.
        let name = unsafe { c_str((*(*c).fabric_attr).prov_name) };
        assert_eq!(name.as_deref(), Some("tcp"));
        // SAFETY: as above.
        let back = unsafe { info_from_c(&*c) }.unwrap();
        assert_eq!(back.fabric_attr.prov_name, "tcp");
        // SAFETY: ours, freed once.
        unsafe { free_info_list(c) };
    }

    #[test]
    fn info_round_trips_through_c() {
        let rust = sample();
        let c = info_to_c(&rust);
        assert!(!c.is_null());
        // SAFETY: c is the list of one info_to_c made.
        let back = unsafe { info_from_c(&*c) }.unwrap();
        // SAFETY: as above.
        let prov = unsafe { c_str((*(*c).fabric_attr).prov_name) }.unwrap();
        assert_eq!(prov, "tcp;ofi_rxm");
        assert_eq!(back.fabric_attr, rust.fabric_attr);
        assert_eq!(back.domain_attr, rust.domain_attr);
        assert_eq!(back.ep_attr, rust.ep_attr);
        assert_eq!(back.tx_attr, rust.tx_attr);
        assert_eq!(back.rx_attr, rust.rx_attr);
        assert_eq!(back.src_addr, rust.src_addr);
        assert_eq!(back.caps, rust.caps);
        // SAFETY: c is valid; the copy is ours.
        let d = unsafe { fabric_capi_dupinfo(c) };
        // SAFETY: both lists are ours.
        unsafe {
            assert_ne!((*(*d).domain_attr).name, (*(*c).domain_attr).name);
            let again = info_from_c(&*d).unwrap();
            assert_eq!(again.domain_attr, rust.domain_attr);
            fabric_capi_freeinfo(c);
            fabric_capi_freeinfo(d);
        }
    }

    #[test]
    fn allocinfo_has_every_attribute() {
        // SAFETY: NULL asks for a fresh fi_info.
        let p = unsafe { fabric_capi_dupinfo(ptr::null()) };
        // SAFETY: p is ours.
        unsafe {
            let i = &*p;
            assert!(!i.tx_attr.is_null() && !i.rx_attr.is_null() && !i.ep_attr.is_null());
            assert!(!i.domain_attr.is_null() && !i.fabric_attr.is_null() && i.nic.is_null());
            fabric_capi_freeinfo(p);
        }
    }

    #[test]
    fn hints_from_c_read_what_libfabric_honours() {
        let p = alloc_info();
        // SAFETY: p is ours, every attribute allocated.
        unsafe {
            let i = &mut *p;
            i.caps = Caps::TAGGED.bits() | (1 << 3);
            i.mode = Mode::CONTEXT.bits();
            (*i.ep_attr).r#type = 3;
            (*i.domain_attr).mr_mode = FI_MR_BASIC;
            (*i.domain_attr).threading = 3;
            (*i.fabric_attr).prov_name = c_strdup("tcp;ofi_rxm");
            let h = hints_from_c(fabric_core::info::version(1, 5), c"10.0.0.1".as_ptr(), ptr::null(), FI_SOURCE, p)
                .unwrap();
            assert_eq!(h.ep_type, EpType::Rdm);
            assert_eq!(h.caps.bits(), Caps::TAGGED.bits() | (1 << 3));
            assert_eq!(h.mode, Some(Mode::CONTEXT));
            assert_eq!(h.mr_mode, Some(MrMode::VIRT_ADDR | MrMode::ALLOCATED | MrMode::PROV_KEY));
            assert_eq!(h.threading, Threading::Domain);
            assert_eq!(h.prov_name.as_deref(), Some("tcp;ofi_rxm"));
            assert_eq!(h.node.as_deref(), Some("10.0.0.1"));
            assert!(h.source);
            (*i.ep_attr).r#type = 77;
            assert_eq!(
                hints_from_c(fabric_core::info::API_VERSION, ptr::null(), ptr::null(), 0, p).unwrap_err(),
                Error::Inval
            );
            (*i.ep_attr).r#type = 0;
            i.src_addr = c_strdup("x").cast();
            i.src_addrlen = 1 << 40;
            assert_eq!(
                hints_from_c(fabric_core::info::API_VERSION, ptr::null(), ptr::null(), 0, p).unwrap_err(),
                Error::Inval
            );
            fabric_capi_freeinfo(p);
        }
    }

    #[test]
    fn getinfo_gives_back_the_default_op_flags_asked_for() {
        let p = alloc_info();
        // SAFETY: p is ours, every attribute allocated; what getinfo returns is
        // freed with fabric_capi_freeinfo.
        unsafe {
            let i = &mut *p;
            (*i.ep_attr).r#type = 3;
            (*i.fabric_attr).prov_name = c_strdup("tcp");
            (*i.tx_attr).op_flags = OpFlags::COMPLETION.bits();
            (*i.rx_attr).op_flags = (OpFlags::COMPLETION | OpFlags::MULTI_RECV).bits();
            let v = getinfo(API, c"127.0.0.1".as_ptr(), ptr::null(), FI_SOURCE, p).unwrap();
            assert!(!v.is_empty());
            for e in &v {
                assert_eq!(e.tx_attr.op_flags, OpFlags::COMPLETION);
                assert_eq!(e.rx_attr.op_flags, OpFlags::COMPLETION | OpFlags::MULTI_RECV);
            }
            fabric_capi_freeinfo(p);
        }
    }

    #[test]
    fn getinfo_refuses_bad_calls() {
        // SAFETY: a NULL out-pointer is refused before use.
        let r = unsafe { fabric_capi_getinfo(API, ptr::null(), ptr::null(), 0, ptr::null(), null_mut()) };
        assert_eq!(r, neg(Error::Inval));
        let mut out: *mut fi_info = null_mut();
        // SAFETY: out is a valid out-pointer.
        let r = unsafe {
            fabric_capi_getinfo(fabric_core::info::version(2, 0), ptr::null(), ptr::null(), 0, ptr::null(), &mut out)
        };
        assert_eq!(r, neg(Error::NoSys));
        assert!(out.is_null());
    }

    const API: u32 = fabric_core::info::API_VERSION;

    #[test]
    fn addresses_cross_as_sockaddrs() {
        for s in ["127.0.0.1:80", "[::1]:9", "fi_shm://12"] {
            let a = Address::parse(s).unwrap();
            let b = addr_to_c_bytes(&a);
            let fmt = addr_format_to_c(a.format());
            // SAFETY: b holds b.len() bytes.
            let back = unsafe { addr_from_c(fmt, b.as_ptr().cast(), b.len()) }.unwrap();
            assert_eq!(back, Some(a));
        }
        // SAFETY: 3 bytes are readable.
        assert!(unsafe { addr_from_c(2, b"abc".as_ptr().cast(), 3) }.is_err());
    }
}

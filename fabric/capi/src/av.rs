//! `fi_av_open` and the address vector (`struct fid_av`): addresses in their C
//! form (see `addr`) to `fi_addr_t` handles and back.

use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL, ENOSYS};
use crate::{abi, addr, exports::guard};
use fabric_core::prov::AvOps;
use fabric_core::{AddrFormat, Address, AvAttr, AvType, Error, FiAddr};
use std::ffi::{c_char, c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// An address vector as C holds it.
#[repr(C)]
pub(crate) struct Av {
    c: abi::fid_av,
    /// The provider's address vector.
    pub(crate) ops: Arc<dyn AvOps>,
    /// The domain's address format: what `insertsvc` and `insertsym` resolve to.
    format: AddrFormat,
    /// The endpoints bound to it.
    pub(crate) refs: fid::Refs,
    /// Its hold on the domain.
    _domain: fid::Hold,
}

// SAFETY: repr(C), first field `fid_av`, whose first field is `struct fid`.
unsafe impl CObject for Av {
    const CLASS: usize = abi::FI_CLASS_AV;
}

impl fid::Parent for Av {
    fn refs(&self) -> &fid::Refs {
        &self.refs
    }
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close);

static AV_OPS: abi::fi_ops_av = abi::fi_ops_av {
    size: std::mem::size_of::<abi::fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(av_set),
};

/// The most addresses one call may insert or remove.
const COUNT_MAX: usize = 1 << 24;

/// `fi_av_open` (`domain->ops->av_open`).
pub(crate) unsafe extern "C" fn fi_av_open(
    domain: *mut abi::fid_domain,
    attr: *mut abi::fi_av_attr,
    av: *mut *mut abi::fid_av,
    context: *mut c_void,
) -> c_int {
    guard("fi_av_open", EINVAL, || {
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's out-pointer and domain, class-checked.
        let d = match unsafe { fid::open_under::<Domain, _>(av, domain as *const c_void) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        let av_type = match a.r#type {
            abi::FI_AV_UNSPEC => AvType::Unspec,
            abi::FI_AV_MAP => AvType::Map,
            abi::FI_AV_TABLE => AvType::Table,
            _ => return EINVAL,
        };
        if !a.name.is_null() || a.flags != 0 {
            return fid::err(Error::NoSys);
        }
        let ops = match d.ops.av_open(&AvAttr { av_type, count: a.count }) {
            Ok(o) => o,
            Err(e) => return fid::err(e),
        };
        let obj = Av {
            c: abi::fid_av { fid: fid::fid(abi::FI_CLASS_AV, context, &FID_OPS), ops: &AV_OPS as *const _ as *mut _ },
            ops,
            format: d.info.addr_format,
            refs: fid::Refs::default(),
            _domain: d.refs.hold(),
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(av, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        unsafe { fid::close_parent::<Av>(f) }
    })
}

/// `fi_av_insert`: the addresses are packed one after the other; returns how
/// many were inserted. Those that fail get `FI_ADDR_NOTAVAIL`.
unsafe extern "C" fn insert(
    av: *mut abi::fid_av,
    addrs: *const c_void,
    count: usize,
    fi_addr: *mut abi::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard("fi_av_insert", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        if (addrs.is_null() && count > 0) || count > COUNT_MAX || flags != 0 {
            return EINVAL;
        }
        let mut p = addrs as *const u8;
        let mut done = 0usize;
        for i in 0..count {
            // SAFETY: the caller's packed addresses: each is readable in full.
            let r = unsafe { addr::from_c(p, usize::MAX) }.and_then(|(a, n)| Ok((v.ops.insert(&[a])?, n)));
            let out = match r {
                Ok((handles, n)) => {
                    // SAFETY: advancing within the caller's packed addresses.
                    p = unsafe { p.add(n) };
                    match handles.first() {
                        Some(h) => {
                            done += 1;
                            h.0
                        }
                        None => abi::FI_ADDR_NOTAVAIL,
                    }
                }
                Err(_) => {
                    if !fi_addr.is_null() {
                        for j in i..count {
                            // SAFETY: `fi_addr` has room for `count` handles.
                            unsafe { fi_addr.add(j).write_unaligned(abi::FI_ADDR_NOTAVAIL) };
                        }
                    }
                    break;
                }
            };
            if !fi_addr.is_null() {
                // SAFETY: `fi_addr` has room for `count` handles.
                unsafe { fi_addr.add(i).write_unaligned(out) };
            }
        }
        done as c_int
    })
}

/// `fi_av_insertsvc`: `insertsym` of one node and one service.
unsafe extern "C" fn insertsvc(
    av: *mut abi::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut abi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, forwarded.
    unsafe { insertsym(av, node, 1, service, 1, fi_addr, flags, context) }
}

/// The longest node or service name `insertsym` takes (libfabric's
/// `FI_NAME_MAX`, with its NUL).
const NAME_MAX: usize = 255;

/// `strtol(s, NULL, 0)` as a port: decimal, `0x` hexadecimal or `0` octal;
/// `None` unless the whole string is such a number below 65536.
fn port(s: &str) -> Option<u16> {
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None if s.len() > 1 && s.starts_with('0') => (&s[1..], 8),
        None => (s, 10),
    };
    u16::from_str_radix(digits, radix).ok()
}

/// `atoi` of a string of digits (0 when empty).
fn index(digits: &str) -> usize {
    digits.parse().unwrap_or(0)
}

/// `node:service` resolved by `getaddrinfo` for `format` (IPv4 for
/// `FI_SOCKADDR_IN`, IPv6 for `FI_SOCKADDR_IN6`, either for `FI_SOCKADDR`).
fn resolve(node: &str, service: &str, format: AddrFormat) -> Option<Address> {
    let family = match format {
        AddrFormat::SockaddrIn => libc::AF_INET,
        AddrFormat::SockaddrIn6 => libc::AF_INET6,
        _ => libc::AF_UNSPEC,
    };
    let (n, sv) = (std::ffi::CString::new(node).ok()?, std::ffi::CString::new(service).ok()?);
    // SAFETY: all-zero is a valid `struct addrinfo` (no pointers set).
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_DGRAM;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings, valid hints, an out-pointer.
    if unsafe { libc::getaddrinfo(n.as_ptr(), sv.as_ptr(), &hints, &mut res) } != 0 || res.is_null() {
        return None;
    }
    // SAFETY: a successful getaddrinfo's first entry; its address is
    // `ai_addrlen` readable bytes.
    let a = unsafe { addr::from_c((*res).ai_addr as *const u8, (*res).ai_addrlen as usize) }.ok().map(|(a, _)| a);
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(res) };
    a
}

/// The addresses `insertsym` names, as libfabric's `util_av` finds them, node
/// by node and for each node service by service: a numeric IPv4 or IPv6 node
/// counts up from its address and a numeric service up from its port; a host
/// name with more than one node counts up its trailing number (`node9`,
/// `node10`...), more than one service counts up from the service's number,
/// each pair resolved by `getaddrinfo`. `None` for an entry that does not
/// resolve; `Err(Inval)` for an address format other than a socket address.
fn sym_addrs(
    node: &str,
    nodecnt: usize,
    service: &str,
    svccnt: usize,
    format: AddrFormat,
) -> Result<Vec<Option<Address>>, Error> {
    if !matches!(format, AddrFormat::Sockaddr | AddrFormat::SockaddrIn | AddrFormat::SockaddrIn6) {
        return Err(Error::Inval);
    }
    let total = nodecnt.checked_mul(svccnt).filter(|&n| n <= COUNT_MAX).ok_or(Error::Inval)?;
    let mut out = Vec::with_capacity(total);
    let ip: Option<IpAddr> = node.parse().ok();
    if let (Some(ip), Some(p)) = (ip, port(service)) {
        for i in 0..nodecnt {
            let a = match ip {
                IpAddr::V4(v) => u32::try_from(i)
                    .ok()
                    .and_then(|i| u32::from(v).checked_add(i))
                    .map(|x| IpAddr::V4(Ipv4Addr::from(x))),
                IpAddr::V6(v) => u128::from(v).checked_add(i as u128).map(|x| IpAddr::V6(Ipv6Addr::from(x))),
            };
            for k in 0..svccnt {
                let port = u16::try_from(k).ok().and_then(|k| p.checked_add(k));
                out.push(a.zip(port).map(|(a, p)| Address::Sockaddr(SocketAddr::new(a, p))));
            }
        }
        return Ok(out);
    }
    let stem = node.trim_end_matches(|c: char| c.is_ascii_digit());
    let (first_node, first_svc) = (index(&node[stem.len()..]), index(service));
    for i in 0..nodecnt {
        let name = if nodecnt == 1 { node.to_string() } else { format!("{stem}{}", first_node + i) };
        for k in 0..svccnt {
            let svc = if svccnt == 1 { service.to_string() } else { (first_svc + k).to_string() };
            out.push(resolve(&name, &svc, format));
        }
    }
    Ok(out)
}

/// `fi_av_insertsym`: the `nodecnt * svccnt` addresses [`sym_addrs`] names,
/// inserted one by one into `fi_addr` (which, when non-NULL, has room for them
/// all); one that does not resolve or insert gets `FI_ADDR_NOTAVAIL`. Returns
/// how many were inserted; `-FI_EINVAL` for NULL or too long names, flags, or
/// an address vector of string addresses (shm).
unsafe extern "C" fn insertsym(
    av: *mut abi::fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut abi::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard("fi_av_insertsym", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        // SAFETY: NULL or the caller's NUL-terminated strings.
        let (Some(node), Some(service)) = (unsafe { fid::cstr(node) }, unsafe { fid::cstr(service) }) else {
            return EINVAL;
        };
        if flags != 0 || node.is_empty() || node.len() >= NAME_MAX || service.len() >= NAME_MAX {
            return EINVAL;
        }
        let addrs = match sym_addrs(node, nodecnt, service, svccnt, v.format) {
            Ok(a) => a,
            Err(e) => return fid::err(e),
        };
        let mut done = 0;
        for (i, a) in addrs.iter().enumerate() {
            let h = a.as_ref().and_then(|a| v.ops.insert(std::slice::from_ref(a)).ok()?.first().copied());
            done += usize::from(h.is_some());
            if !fi_addr.is_null() {
                // SAFETY: `fi_addr` has room for `nodecnt * svccnt` handles.
                unsafe { fi_addr.add(i).write_unaligned(h.map_or(abi::FI_ADDR_NOTAVAIL, |h| h.0)) };
            }
        }
        done as c_int
    })
}

unsafe extern "C" fn remove(av: *mut abi::fid_av, fi_addr: *mut abi::fi_addr_t, count: usize, _flags: u64) -> c_int {
    guard("fi_av_remove", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        if (fi_addr.is_null() && count > 0) || count > COUNT_MAX {
            return EINVAL;
        }
        let handles: Vec<FiAddr> = (0..count)
            // SAFETY: `fi_addr` holds `count` handles.
            .map(|i| FiAddr(unsafe { fi_addr.add(i).read_unaligned() }))
            .collect();
        fid::ret(v.ops.remove(&handles))
    })
}

unsafe extern "C" fn lookup(av: *mut abi::fid_av, fi_addr: abi::fi_addr_t, out: *mut c_void, len: *mut usize) -> c_int {
    guard("fi_av_lookup", EINVAL, || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return EINVAL;
        };
        match v.ops.lookup(FiAddr(fi_addr)) {
            // SAFETY: the caller's buffer and in/out length.
            Ok(a) => unsafe { addr::copy_out(&addr::to_c(&a), out as *mut u8, len) },
            Err(e) => fid::err(e),
        }
    })
}

/// `fi_av_straddr`: the address as text (`fi_sockaddr_in://...`), truncated to
/// `*len` with `*len` set to the full length plus the NUL.
unsafe extern "C" fn straddr(
    av: *mut abi::fid_av,
    a: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard("fi_av_straddr", std::ptr::null(), || {
        // SAFETY: the caller's address vector, class-checked.
        let Some(v) = (unsafe { fid::get::<Av>(av as *const c_void) }) else {
            return std::ptr::null();
        };
        if buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: the caller's address.
        let Ok((addr, _)) = (unsafe { addr::from_c(a as *const u8, usize::MAX) }) else {
            return std::ptr::null();
        };
        let s = v.ops.straddr(&addr);
        // SAFETY: the caller's in/out length.
        let room = unsafe { *len };
        // SAFETY: as above.
        unsafe { *len = s.len() + 1 };
        if room > 0 {
            let n = s.len().min(room - 1);
            // SAFETY: `buf` has room for `room` bytes; `n + 1 <= room`.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        buf
    })
}

unsafe extern "C" fn av_set(
    _av: *mut abi::fid_av,
    _attr: *mut abi::fi_av_set_attr,
    set: *mut *mut abi::fid_av_set,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or the caller's out-pointer.
    unsafe { fid::put(set, std::ptr::null_mut()) };
    ENOSYS
}

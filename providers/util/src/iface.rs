//! Network interfaces and name resolution, shared by the sockets providers (tcp,
//! udp): the machine's interface addresses (`getifaddrs`), each one's subnet (the
//! fabric name), index and MTU, the interfaces a query's hints select, and
//! `node:service` resolution.
//!
//! Unlike the rest of this crate this module asks the operating system (it reads
//! the interface list and resolves names), but it moves no data.

use fabric_core::log::{self, Level};
use fabric_core::{fi_log, Address, EpType, Error, Hints, Info, MrMode, Progress, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The largest UDP payload over IPv4: 65535 (the IP total length) − 20 (IP header)
/// − 8 (UDP header).
pub const UDP_MAX_PAYLOAD_V4: usize = 65507;
/// The largest UDP payload over IPv6 without jumbograms: 65535 (the IPv6 payload
/// length, which excludes its own header) − 8 (UDP header).
pub const UDP_MAX_PAYLOAD_V6: usize = 65527;
/// IPv4 header (without options) plus UDP header.
pub const UDP_V4_OVERHEAD: usize = 20 + 8;
/// IPv6 header (without extension headers) plus UDP header.
pub const UDP_V6_OVERHEAD: usize = 40 + 8;

/// One address of one interface that is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// The interface's name (`lo`, `eth0`): a sockets provider's domain name.
    pub name: String,
    /// The address.
    pub addr: IpAddr,
    /// The prefix length of the address's subnet.
    pub prefix: u8,
    /// Whether the interface is a loopback interface.
    pub loopback: bool,
    /// The interface index (`if_nametoindex`), 0 if unknown.
    pub index: u32,
}

impl Iface {
    /// The subnet, `127.0.0.0/8`: a sockets provider's fabric name.
    pub fn subnet(&self) -> String {
        match self.addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                format!("{}/{}", Ipv4Addr::from(bits & mask_v4(self.prefix)), self.prefix)
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                format!("{}/{}", Ipv6Addr::from(bits & mask_v6(self.prefix)), self.prefix)
            }
        }
    }

    /// Whether `ip` is in this address's subnet.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = mask_v4(self.prefix);
                u32::from(a) & mask == u32::from(*b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = mask_v6(self.prefix);
                u128::from(a) & mask == u128::from(*b) & mask
            }
            _ => false,
        }
    }

    /// The interface's MTU (see [`mtu`]).
    pub fn mtu(&self) -> Result<usize> {
        mtu(&self.name)
    }

    /// The largest UDP payload that leaves this interface in one IP packet,
    /// without fragmentation ([`max_udp_payload`] of its MTU). An MTU that cannot
    /// be read counts as 1500 (logged).
    pub fn max_udp_payload(&self) -> usize {
        let mtu = self.mtu().unwrap_or_else(|e| {
            fi_log!(Level::Warn, "core", "core", "cannot read the MTU of {}: {e}; assuming 1500", self.name);
            1500
        });
        max_udp_payload(mtu, self.addr.is_ipv6())
    }
}

fn mask_v4(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

fn mask_v6(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    }
}

/// The largest UDP payload that fits one IP packet on a link of this MTU: the MTU
/// less the IP and UDP headers (28 bytes over IPv4, 48 over IPv6), at most what
/// the IP length fields allow ([`UDP_MAX_PAYLOAD_V4`], [`UDP_MAX_PAYLOAD_V6`]).
pub fn max_udp_payload(mtu: usize, ipv6: bool) -> usize {
    if ipv6 {
        mtu.saturating_sub(UDP_V6_OVERHEAD).min(UDP_MAX_PAYLOAD_V6)
    } else {
        mtu.saturating_sub(UDP_V4_OVERHEAD).min(UDP_MAX_PAYLOAD_V4)
    }
}

/// The MTU of the interface named `name`: `ioctl(SIOCGIFMTU)`, or
/// `/sys/class/net/<name>/mtu` when the ioctl is refused. `Err(Inval)` for a name
/// that cannot be an interface's, `Err(NoDev)` for an interface that does not exist.
pub fn mtu(name: &str) -> Result<usize> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') || name == ".." {
        return Err(Error::Inval);
    }
    match mtu_ioctl(name) {
        Ok(m) => Ok(m),
        Err(e) => {
            let path = format!("/sys/class/net/{name}/mtu");
            match std::fs::read_to_string(&path) {
                Ok(s) => s.trim().parse::<usize>().map_err(|_| Error::Io),
                Err(_) if e == Error::NoDev || e == Error::NoEnt => Err(Error::NoDev),
                Err(_) => Err(e),
            }
        }
    }
}

fn mtu_ioctl(name: &str) -> Result<usize> {
    // SAFETY: socket takes no pointers; a valid descriptor is owned once by OwnedFd.
    let fd = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // The name is shorter than IFNAMSIZ (checked by the caller), so it stays
    // NUL-terminated.
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name from and writes the MTU into `req`, a valid
    // ifreq that lives across the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req as *mut libc::ifreq) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: the ioctl succeeded, so the union holds the MTU.
    let m = unsafe { req.ifr_ifru.ifru_mtu };
    usize::try_from(m).map_err(|_| Error::Io)
}

/// The machine's interface addresses, through `getifaddrs`: every address of an
/// interface that is up (IPv6 link-local ones excepted: they need a scope), best
/// first (real interfaces before loopback, IPv4 before IPv6).
pub fn interfaces() -> Result<Vec<Iface>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until
        // freeifaddrs; its pointers are null or valid C data of the right types.
        unsafe {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            let fam = i32::from((*ifa.ifa_addr).sa_family);
            let (addr, prefix) = if fam == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let prefix = if ifa.ifa_netmask.is_null() {
                    32
                } else {
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                    u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                };
                (IpAddr::V4(ip), prefix)
            } else if fam == libc::AF_INET6 {
                let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                if ip.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // link-local needs a scope id: not offered
                }
                let prefix = if ifa.ifa_netmask.is_null() {
                    128
                } else {
                    let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                    m.sin6_addr.s6_addr.iter().map(|b| b.count_ones()).sum::<u32>() as u8
                };
                (IpAddr::V6(ip), prefix)
            } else {
                continue;
            };
            let index = libc::if_nametoindex(ifa.ifa_name);
            out.push(Iface { name, addr, prefix, loopback, index });
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort_by_key(|i| (i.loopback, i.addr.is_ipv6()));
    Ok(out)
}

/// Resolve `node:service` to socket addresses (numeric, or by name through the
/// system's resolver and services database, `proto` being `"tcp"` or `"udp"`). No
/// node means `localhost`, no service port 0. `Err(NoData)` when either does not
/// resolve, the reason written under `prov` whatever the log level (once per
/// process each: a port out of range or a name that resolves to nothing is the
/// user's mistake, which a quiet refusal would hide).
pub fn resolve(prov: &'static str, proto: &str, node: Option<&str>, service: Option<&str>) -> Result<Vec<SocketAddr>> {
    let port: u16 = match service {
        None => 0,
        Some(s) => match s.parse::<u16>() {
            Ok(p) => p,
            Err(_) => service_port(s, proto).ok_or_else(|| {
                // The user's mistake (a port out of range, a misspelt service): a
                // quiet "no data" would hide it, so it is said whatever the log
                // level, once.
                let why = if s.trim().bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'+') {
                    format!("port {s} is out of range (0 to 65535)")
                } else {
                    format!("service {s} is neither a port number nor a {proto} service the system knows")
                };
                log::warn_once(&format!("{prov}\0service\0{s}"), prov, "core", format_args!("no entry: {why}"));
                Error::NoData
            })?,
        },
    };
    let node = node.unwrap_or("localhost");
    let host = node.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(node);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match (host, port).to_socket_addrs() {
        Ok(it) => {
            let v: Vec<_> = it.collect();
            if v.is_empty() {
                Err(Error::NoData)
            } else {
                Ok(v)
            }
        }
        Err(e) => {
            log::warn_once(
                &format!("{prov}\0node\0{host}"),
                prov,
                "core",
                format_args!("no entry: cannot resolve {host}: {e}"),
            );
            Err(Error::NoData)
        }
    }
}

/// A service name's port for `proto` (`"tcp"`, `"udp"`), from the system's
/// services database; a service listed only for another protocol gives that
/// port (IANA gives a service the same port on every protocol, and many systems
/// list only the tcp one: libfabric resolves with one socket type for every
/// provider).
pub fn service_port(name: &str, proto: &str) -> Option<u16> {
    let c = std::ffi::CString::new(name).ok()?;
    let p = std::ffi::CString::new(proto).ok()?;
    for proto in [p.as_ptr(), std::ptr::null()] {
        // SAFETY: the name is a valid NUL-terminated string and the protocol one or
        // null (any protocol); the result is null or points to static storage that
        // we read at once.
        unsafe {
            let s = libc::getservbyname(c.as_ptr(), proto);
            if !s.is_null() {
                return Some(u16::from_be((*s).s_port as u16));
            }
        }
    }
    None
}

/// What a query's hints select: the interface addresses to offer a domain on, and
/// the source and destination addresses they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The interface addresses, best first.
    pub ifaces: Vec<Iface>,
    /// The local address: the hints' source address, node and service with
    /// `FI_SOURCE`, or a service alone (the local port). Its IP may be
    /// unspecified (any address of the family).
    pub src: Option<SocketAddr>,
    /// The peer: the hints' destination address, or node (and service) without
    /// `FI_SOURCE`.
    pub dest: Option<SocketAddr>,
}

/// Which of a provider's knobs limit [`select`].
#[derive(Debug, Clone, Copy)]
pub struct SelectOpts<'a> {
    /// The provider's name, for the log.
    pub prov: &'static str,
    /// `"tcp"` or `"udp"`: the services database to look service names up in.
    pub proto: &'a str,
    /// Only this interface (the provider's `FI_<PROV>_IFACE`), if set.
    pub only_iface: Option<&'a str>,
    /// The variable that set `only_iface`, for the log.
    pub only_iface_var: &'a str,
}

/// The entries a query gets from a sockets provider: `base` made for each
/// selected interface address and endpoint type of `types`, with the selection's
/// source and destination, automatic progress and the memory-registration mode
/// as the hints ask, kept where they satisfy the hints. `FI_ENODATA` (the reasons
/// logged for `prov`) when none does.
pub fn entries(
    h: &Hints,
    prov: &'static str,
    sel: &Selection,
    types: &[EpType],
    base: impl Fn(&Iface, EpType) -> Info,
) -> Result<Vec<Info>> {
    let mut out = Vec::new();
    let mut reasons = Vec::new();
    for iface in &sel.ifaces {
        for &t in types {
            let mut info = base(iface, t);
            if let Some(s) = sel.src {
                let ip = if s.ip().is_unspecified() { iface.addr } else { s.ip() };
                info.src_addr = Some(Address::Sockaddr(SocketAddr::new(ip, s.port())));
            }
            if let Some(d) = sel.dest {
                info.dest_addr = Some(Address::Sockaddr(d));
            }
            // Data progress is manual unless automatic is asked for: then the
            // domain runs a progress thread. That thread drives each endpoint's
            // whole progress, an RDM endpoint's connection set-up included, so
            // control progress is automatic too when asked along with it (not for
            // MSG endpoints: their requests arrive at passive endpoints, which the
            // thread does not drive). Open MPI's ofi BTL asks both with
            // `btl_ofi_progress_mode auto`.
            if h.data_progress == Progress::Auto {
                info.domain_attr.data_progress = Progress::Auto;
                if h.control_progress == Progress::Auto && t == EpType::Rdm {
                    info.domain_attr.control_progress = Progress::Auto;
                }
            }
            // Regions are addressed by virtual address and keyed by the provider,
            // unless the application supports neither: then by offset, and with
            // the keys it asks for.
            if let Some(m) = h.mr_mode {
                info.domain_attr.mr_mode &= m | !(MrMode::VIRT_ADDR | MrMode::PROV_KEY);
            }
            match info.check(h) {
                Ok(()) => out.push(info),
                Err(why) => reasons.push(format!("{} {}: {why}", iface.name, t)),
            }
        }
    }
    if out.is_empty() {
        let why = if reasons.is_empty() { "no interface up".to_string() } else { reasons.join("; ") };
        fi_log!(Level::Info, prov, "core", "no entry: {why}");
        return Err(Error::NoData);
    }
    Ok(out)
}

/// The interfaces (and source and destination) a query selects, as libfabric's
/// sockets providers choose them: the source address narrows the interfaces to
/// the one that has it (or, unspecified, to its family); a destination to those
/// that reach it (loopback for a loopback peer, the one that has it, else those
/// on its subnet first). `Err(NoData)` with the reason logged at info level when
/// nothing is left; an `only_iface` that names no interface, a port out of range
/// and a name that does not resolve are the user's mistakes, reported whatever
/// the log level (once per process each).
pub fn select(h: &Hints, o: &SelectOpts<'_>) -> Result<Selection> {
    let refuse = |why: String| {
        fi_log!(Level::Info, o.prov, "core", "no entry: {why}");
        Error::NoData
    };
    let mut ifaces = interfaces()?;
    if let Some(want) = o.only_iface {
        let mut have: Vec<&str> = Vec::new();
        for i in &ifaces {
            if !have.contains(&i.name.as_str()) {
                have.push(&i.name);
            }
        }
        let have = if have.is_empty() { "none".to_string() } else { have.join(", ") };
        let why = format!("names no interface that is up with an address (those that are: {have})");
        if !ifaces.iter().any(|i| i.name == want) {
            // The user's mistake: said whatever the log level, once.
            log::config_warn(o.prov, o.only_iface_var, want, format_args!("{why}; {} offers nothing", o.prov));
            return Err(refuse(format!("{}={want} {why}", o.only_iface_var)));
        }
        ifaces.retain(|i| i.name == want);
    }
    // Source: from hints.src_addr, or node/service with FI_SOURCE.
    let mut src: Option<SocketAddr> = h.src_addr.as_ref().and_then(|a| a.sockaddr());
    if h.src_addr.is_some() && src.is_none() {
        return Err(refuse("source address is not a socket address".into()));
    }
    let mut dest: Option<SocketAddr> = h.dest_addr.as_ref().and_then(|a| a.sockaddr());
    if h.source {
        if h.node.is_some() || h.service.is_some() {
            let node = h.node.as_deref().unwrap_or("0.0.0.0");
            src = Some(resolve(o.prov, o.proto, Some(node), h.service.as_deref())?[0]);
        }
    } else if h.node.is_some() {
        let addrs = resolve(o.prov, o.proto, h.node.as_deref(), h.service.as_deref())?;
        dest = Some(addrs[0]);
    } else if let Some(s) = &h.service {
        // A service alone names the local port (libfabric's behaviour for passive
        // endpoints).
        let port = resolve(o.prov, o.proto, Some("0.0.0.0"), Some(s))?[0].port();
        src = Some(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port));
    }
    if let Some(s) = src {
        if !s.ip().is_unspecified() {
            ifaces.retain(|i| i.addr == s.ip());
            if ifaces.is_empty() {
                return Err(refuse(format!("source address {} is not an address of an interface", s.ip())));
            }
        } else {
            ifaces.retain(|i| i.addr.is_ipv4() == s.is_ipv4());
        }
    }
    if let Some(d) = dest {
        let family: Vec<Iface> = ifaces.iter().filter(|i| i.addr.is_ipv4() == d.is_ipv4()).cloned().collect();
        let reach: Vec<Iface> = if d.ip().is_loopback() {
            family.iter().filter(|i| i.loopback).cloned().collect()
        } else if family.iter().any(|i| i.addr == d.ip()) {
            family.iter().filter(|i| i.addr == d.ip()).cloned().collect()
        } else {
            let mut v: Vec<Iface> = family.iter().filter(|i| i.contains(&d.ip()) && !i.loopback).cloned().collect();
            v.extend(family.iter().filter(|i| !i.contains(&d.ip()) && !i.loopback).cloned());
            v
        };
        if reach.is_empty() {
            return Err(refuse(format!("no interface can reach {d}")));
        }
        ifaces = reach;
    }
    Ok(Selection { ifaces, src, dest })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SelectOpts<'static> {
        SelectOpts { prov: "test", proto: "tcp", only_iface: None, only_iface_var: "FI_TEST_IFACE" }
    }

    #[test]
    fn subnet_names() {
        let i = Iface { name: "x".into(), addr: "10.1.2.3".parse().unwrap(), prefix: 16, loopback: false, index: 0 };
        assert_eq!(i.subnet(), "10.1.0.0/16");
        assert!(i.contains(&"10.1.200.1".parse().unwrap()));
        assert!(!i.contains(&"10.2.0.1".parse().unwrap()));
        assert!(!i.contains(&"::1".parse().unwrap()));
        let i = Iface { name: "y".into(), addr: "fd00::1:2".parse().unwrap(), prefix: 64, loopback: false, index: 0 };
        assert_eq!(i.subnet(), "fd00::/64");
        let i = Iface { name: "z".into(), addr: "10.1.2.3".parse().unwrap(), prefix: 0, loopback: false, index: 0 };
        assert_eq!(i.subnet(), "0.0.0.0/0");
    }

    #[test]
    fn udp_payload_from_mtu() {
        assert_eq!(max_udp_payload(1500, false), 1472);
        assert_eq!(max_udp_payload(1500, true), 1452);
        assert_eq!(max_udp_payload(9000, false), 8972);
        assert_eq!(max_udp_payload(65536, false), UDP_MAX_PAYLOAD_V4);
        assert_eq!(max_udp_payload(65536, true), 65488);
        assert_eq!(max_udp_payload(1 << 20, true), UDP_MAX_PAYLOAD_V6);
        assert_eq!(max_udp_payload(10, false), 0);
    }

    #[test]
    fn loopback_mtu_is_read() {
        let lo = interfaces().unwrap().into_iter().find(|i| i.loopback);
        let Some(lo) = lo else {
            fabric_testkit::skip("loopback", "no loopback interface");
            return;
        };
        let m = lo.mtu().unwrap();
        assert!(m >= 1280, "{m}");
        assert!(lo.index > 0);
        if let Ok(s) = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", lo.name)) {
            assert_eq!(s.trim().parse::<usize>().unwrap(), m);
        }
        assert_eq!(mtu("no-such-if0"), Err(Error::NoDev));
        assert_eq!(mtu(""), Err(Error::Inval));
        assert_eq!(mtu("../../etc"), Err(Error::Inval));
        assert_eq!(mtu("averylonginterfacename0"), Err(Error::Inval));
    }

    #[test]
    fn names_and_services_resolve() {
        assert_eq!(resolve("test", "tcp", Some("localhost"), Some("80")).unwrap()[0].port(), 80);
        assert_eq!(resolve("test", "tcp", Some("[::1]"), Some("7")).unwrap()[0], "[::1]:7".parse().unwrap());
        assert!(resolve("test", "tcp", Some("127.0.0.1"), Some("no-such-service-xyz")).is_err());
        assert_eq!(resolve("test", "udp", None, None).unwrap()[0].port(), 0);
        if let Some(p) = service_port("http", "tcp") {
            assert_eq!(service_port("http", "udp"), Some(p), "a tcp-only service resolves for udp too");
        }
    }

    #[test]
    fn selection_follows_the_hints() {
        let s = select(&Hints::new().node("127.0.0.1").service("4000"), &opts()).unwrap();
        assert!(s.ifaces.iter().all(|i| i.loopback));
        assert_eq!(s.dest, Some("127.0.0.1:4000".parse().unwrap()));
        assert_eq!(s.src, None);
        let s = select(&Hints::new().node("127.0.0.1").service("4000").source(true), &opts()).unwrap();
        assert_eq!(s.src, Some("127.0.0.1:4000".parse().unwrap()));
        assert!(s.ifaces.iter().all(|i| i.addr == "127.0.0.1".parse::<IpAddr>().unwrap()));
        let s = select(&Hints::new().service("4001"), &opts()).unwrap();
        assert_eq!(s.src, Some("0.0.0.0:4001".parse().unwrap()));
        assert!(s.ifaces.iter().all(|i| i.addr.is_ipv4()));
        assert_eq!(select(&Hints::new().node("192.0.2.77").source(true), &opts()).unwrap_err(), Error::NoData);
        let o = SelectOpts { only_iface: Some("nonexistent0"), ..opts() };
        assert_eq!(select(&Hints::new(), &o).unwrap_err(), Error::NoData);
    }
}

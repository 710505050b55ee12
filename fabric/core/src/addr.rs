//! Endpoint addresses and the compact handles an address vector gives for them.

use crate::error::{Error, Result};
use std::fmt;
use std::net::SocketAddr;

/// A handle for a peer, given by an address vector (`fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiAddr(pub u64);

impl FiAddr {
    /// No address given: for a receive, any source (`FI_ADDR_UNSPEC`).
    pub const UNSPEC: FiAddr = FiAddr(u64::MAX);
    /// The source is not in the address vector (`FI_ADDR_NOTAVAIL`).
    pub const NOTAVAIL: FiAddr = FiAddr(u64::MAX);

    /// Whether this is `FI_ADDR_UNSPEC` / `FI_ADDR_NOTAVAIL`.
    pub fn is_unspec(self) -> bool {
        self.0 == u64::MAX
    }
}

impl fmt::Display for FiAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unspec() {
            f.write_str("FI_ADDR_UNSPEC")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// The format of an endpoint address (`enum fi_addr_format`, in libfabric's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AddrFormat {
    /// Not specified.
    #[default]
    Unspec,
    /// `struct sockaddr`: IPv4 or IPv6.
    Sockaddr,
    /// `struct sockaddr_in`: IPv4.
    SockaddrIn,
    /// `struct sockaddr_in6`: IPv6.
    SockaddrIn6,
    /// A formatted string (`FI_ADDR_STR`), as the shm provider uses.
    Str,
}

impl AddrFormat {
    /// libfabric's name, such as `FI_SOCKADDR_IN`.
    pub fn name(self) -> &'static str {
        match self {
            AddrFormat::Unspec => "FI_FORMAT_UNSPEC",
            AddrFormat::Sockaddr => "FI_SOCKADDR",
            AddrFormat::SockaddrIn => "FI_SOCKADDR_IN",
            AddrFormat::SockaddrIn6 => "FI_SOCKADDR_IN6",
            AddrFormat::Str => "FI_ADDR_STR",
        }
    }

    /// Parse a name as `fi_info -a` takes it (`FI_SOCKADDR_IN`, `sockaddr_in`).
    pub fn parse(s: &str) -> Option<AddrFormat> {
        let u = s.trim().to_ascii_uppercase();
        let u = u.strip_prefix("FI_").unwrap_or(&u).to_string();
        Some(match u.as_str() {
            "FORMAT_UNSPEC" | "UNSPEC" => AddrFormat::Unspec,
            "SOCKADDR" => AddrFormat::Sockaddr,
            "SOCKADDR_IN" => AddrFormat::SockaddrIn,
            "SOCKADDR_IN6" => AddrFormat::SockaddrIn6,
            "ADDR_STR" | "STR" => AddrFormat::Str,
            _ => return None,
        })
    }

    /// Whether an address of format `self` satisfies a request for `want`.
    pub fn satisfies(self, want: AddrFormat) -> bool {
        match want {
            AddrFormat::Unspec => true,
            AddrFormat::Sockaddr => {
                matches!(self, AddrFormat::Sockaddr | AddrFormat::SockaddrIn | AddrFormat::SockaddrIn6)
            }
            w => self == w,
        }
    }
}

/// An endpoint address, as `fi_getname` returns it and an address vector takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Address {
    /// An IPv4 or IPv6 socket address.
    Sockaddr(SocketAddr),
    /// A provider-defined string address (`FI_ADDR_STR`), such as `fi_shm://1234/0`.
    Str(String),
}

impl Address {
    /// The address format of this address.
    pub fn format(&self) -> AddrFormat {
        match self {
            Address::Sockaddr(SocketAddr::V4(_)) => AddrFormat::SockaddrIn,
            Address::Sockaddr(SocketAddr::V6(_)) => AddrFormat::SockaddrIn6,
            Address::Str(_) => AddrFormat::Str,
        }
    }

    /// The socket address, if this is one.
    pub fn sockaddr(&self) -> Option<SocketAddr> {
        match self {
            Address::Sockaddr(s) => Some(*s),
            Address::Str(_) => None,
        }
    }

    /// The address as `fi_av_straddr` prints it: `fi_sockaddr_in://127.0.0.1:4567`,
    /// `fi_sockaddr_in6://[::1]:4567`, or the string address itself.
    pub fn to_uri(&self) -> String {
        match self {
            Address::Sockaddr(s @ SocketAddr::V4(_)) => format!("fi_sockaddr_in://{s}"),
            Address::Sockaddr(s @ SocketAddr::V6(_)) => format!("fi_sockaddr_in6://{s}"),
            Address::Str(s) => s.clone(),
        }
    }

    /// Parse what [`Address::to_uri`] prints; a bare `ip:port` is taken as a socket
    /// address, and any other `scheme://...` as a string address.
    pub fn parse(s: &str) -> Result<Address> {
        let s = s.trim();
        if let Some(rest) = s
            .strip_prefix("fi_sockaddr_in://")
            .or_else(|| s.strip_prefix("fi_sockaddr_in6://"))
            .or_else(|| s.strip_prefix("fi_sockaddr://"))
        {
            return rest.parse::<SocketAddr>().map(Address::Sockaddr).map_err(|_| Error::Inval);
        }
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Ok(Address::Sockaddr(sa));
        }
        if s.contains("://") && s.len() < 4096 {
            return Ok(Address::Str(s.to_string()));
        }
        Err(Error::Inval)
    }

    /// Bytes for an out-of-band exchange (the `fi_getname` blob): the URI form.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_uri().into_bytes()
    }

    /// Parse the bytes [`Address::to_bytes`] gives.
    pub fn from_bytes(b: &[u8]) -> Result<Address> {
        let s = std::str::from_utf8(b).map_err(|_| Error::Inval)?;
        Address::parse(s.trim_end_matches('\0'))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_uri())
    }
}

impl From<SocketAddr> for Address {
    fn from(s: SocketAddr) -> Address {
        Address::Sockaddr(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_round_trip() {
        for s in ["fi_sockaddr_in://127.0.0.1:4567", "fi_sockaddr_in6://[::1]:9", "fi_shm://12/3"] {
            let a = Address::parse(s).unwrap();
            assert_eq!(a.to_uri(), s);
            assert_eq!(Address::from_bytes(&a.to_bytes()).unwrap(), a);
        }
        assert_eq!(Address::parse("10.0.0.1:80").unwrap().format(), AddrFormat::SockaddrIn);
        assert!(Address::parse("not an address").is_err());
        assert!(Address::from_bytes(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn format_matching() {
        assert!(AddrFormat::SockaddrIn.satisfies(AddrFormat::Sockaddr));
        assert!(!AddrFormat::Str.satisfies(AddrFormat::SockaddrIn));
        assert_eq!(AddrFormat::parse("fi_sockaddr_in6"), Some(AddrFormat::SockaddrIn6));
    }
}

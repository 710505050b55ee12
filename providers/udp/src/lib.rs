//! The udp provider of fabric: DGRAM (unreliable, unordered) endpoints over UDP
//! sockets, as libfabric's udp provider, and RDM (reliable, unconnected)
//! endpoints over the same sockets with the reliability protocol of the shared
//! layer.
//!
//! One domain per interface address, named after the interface, in a fabric named
//! after its subnet; the addresses are socket addresses (`FI_SOCKADDR_IN`,
//! `FI_SOCKADDR_IN6`), as tcp's. A DGRAM message is one datagram that never
//! fragments: the largest is the interface's MTU less the IP and UDP headers.
//!
//! Files are named after the objects they implement, as in libfabric's
//! `prov/<name>/src` (and as in the tcp and shm providers): `attr` (what `getinfo`
//! offers), `fabric`, `domain`, `dgram` (DGRAM endpoints and their progress),
//! `rdm` (RDM endpoints), plus `sock` (the socket glue both share).
//!
//! Data progress is manual: reading or waiting on a bound queue moves the bytes.

mod attr;
mod dgram;
mod domain;
mod fabric;
mod rdm;
mod sock;

pub use dgram::dropped_datagrams;

use fabric_core::param::{Param, ParamType};
use fabric_core::prov::Provider;
use std::sync::{Arc, OnceLock};

/// The provider's name.
pub const NAME: &str = "udp";
/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = fabric_core::info::version(0, 1);

/// The udp provider.
pub fn provider() -> Arc<dyn Provider> {
    Arc::new(UdpProvider)
}

struct UdpProvider;

/// Parameters, read once from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// `FI_UDP_IFACE`: only this interface.
    pub iface: Option<String>,
    /// `FI_UDP_RCVBUF`: `SO_RCVBUF` of every socket (0: the system's default).
    pub rcvbuf: usize,
    /// `FI_UDP_SNDBUF`: `SO_SNDBUF` of every socket (0: the system's default).
    pub sndbuf: usize,
}

pub(crate) fn params() -> Vec<Param> {
    vec![
        Param { prov: NAME, name: "iface", kind: ParamType::Str, help: "Specify interface name", default: "" },
        Param {
            prov: NAME,
            name: "rcvbuf",
            kind: ParamType::Size,
            help: "Receive buffer of each socket (SO_RCVBUF), bytes; datagrams arriving while it is full are lost. 0 keeps the system's default",
            default: "0",
        },
        Param {
            prov: NAME,
            name: "sndbuf",
            kind: ParamType::Size,
            help: "Send buffer of each socket (SO_SNDBUF), bytes. 0 keeps the system's default",
            default: "0",
        },
    ]
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let p = params();
        let get = |n: &str| p.iter().find(|x| x.name == n).expect("declared parameter");
        // The kernel doubles what it is given and caps it at net.core.*mem_max;
        // anything above 1 GiB is a typo.
        let buf = |n: &str| get(n).get_size(0..=1 << 30).unwrap_or(0);
        Config { iface: get("iface").setting(), rcvbuf: buf("rcvbuf"), sndbuf: buf("sndbuf") }
    })
}

fabric_util::provider_ops!(UdpProvider {
    name: NAME,
    version: VERSION,
    params: params(),
    getinfo: attr::getinfo,
    fabric: fabric::UdpFabric::new,
});

//! The tcp provider of fabric: MSG (connected) and RDM (reliable, unconnected)
//! endpoints over TCP sockets, with messages and tagged messages.
//!
//! The transport only opens, connects, frames and moves bytes; the wire header, tag
//! matching, queues, address vectors and counters come from `fabric-util`. Files are
//! named after the objects they implement, as in libfabric's `prov/<name>/src`:
//! `attr` (what `getinfo` offers), `fabric`, `domain`, `pep` (passive endpoint),
//! `ep` (active endpoints and their progress), `conn` (one connection's framing).
//!
//! Data progress is manual: reading or waiting on a bound queue moves the bytes,
//! busy-polling non-blocking sockets before sleeping in epoll.

mod accept;
mod attr;
mod conn;
mod domain;
mod ep;
mod fabric;
mod pep;

use fabric_core::param::{Param, ParamType};
use fabric_core::prov::Provider;
use std::sync::{Arc, OnceLock};

/// The provider's name.
pub const NAME: &str = "tcp";
/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = fabric_core::info::version(0, 1);

/// Calls to `accept` made so far by this process's tcp listeners (RDM endpoints
/// and passive endpoints), failed ones included. A diagnostic: a listener that
/// cannot accept (out of descriptors) must not be polled in a loop, which tests
/// check with this count.
pub fn accept_calls() -> u64 {
    accept::ACCEPT_CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The tcp provider.
pub fn provider() -> Arc<dyn Provider> {
    Arc::new(TcpProvider)
}

struct TcpProvider;

/// Parameters, read once from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// `FI_TCP_IFACE`: only this interface.
    pub iface: Option<String>,
    /// `FI_TCP_PORT_LOW_RANGE` / `FI_TCP_PORT_HIGH_RANGE`: listening ports.
    pub port_range: Option<(u16, u16)>,
    /// `FI_TCP_EAGER_MAX`: largest message sent eagerly; larger ones use rendezvous.
    pub eager_max: usize,
    /// `FI_TCP_INJECT_SIZE`: largest inject.
    pub inject_size: usize,
    /// `FI_TCP_NODELAY`: set `TCP_NODELAY`.
    pub nodelay: bool,
    /// `FI_TCP_HANDSHAKE_TIMEOUT`: how long an accepted connection may take to
    /// deliver its hello before it is dropped.
    pub handshake_timeout: std::time::Duration,
    /// `FI_TCP_HANDSHAKE_MAX`: accepted connections waiting for their hello, per
    /// listener; at the limit the oldest is dropped for a new one.
    pub handshake_max: usize,
}

/// `FI_TCP_EAGER_MAX`'s default. Over loopback, a message of 256-512 KiB took
/// 15-20 % less time eager than by rendezvous (the rendezvous's extra round trip;
/// 512 KiB: 50.9 against 64.1 us per message, libfabric 2.6.0 52.7), 1 MiB the
/// same either way, 4 MiB 10 % more eager (pinned `fi_pingpong` RDM and MSG,
/// medians of 5 alternating runs).
const EAGER_MAX_DEFAULT: usize = 512 << 10;

pub(crate) fn params() -> Vec<Param> {
    vec![
        Param { prov: NAME, name: "iface", kind: ParamType::Str, help: "Specify interface name", default: "" },
        Param {
            prov: NAME,
            name: "port_low_range",
            kind: ParamType::Int,
            help: "define port low range (listening ports of endpoints)",
            default: "",
        },
        Param {
            prov: NAME,
            name: "port_high_range",
            kind: ParamType::Int,
            help: "define port high range (listening ports of endpoints)",
            default: "",
        },
        Param {
            prov: NAME,
            name: "eager_max",
            kind: ParamType::Size,
            help: "Largest message sent eagerly; larger messages use a rendezvous so that unexpected large messages do not fill memory",
            default: "524288",
        },
        Param {
            prov: NAME,
            name: "inject_size",
            kind: ParamType::Size,
            help: "Largest message that inject accepts (copied at once)",
            default: "8192",
        },
        Param {
            prov: NAME,
            name: "nodelay",
            kind: ParamType::Bool,
            help: "Set TCP_NODELAY on every connection",
            default: "1",
        },
        Param {
            prov: NAME,
            name: "handshake_timeout",
            kind: ParamType::Int,
            help: "Milliseconds an accepted connection may take to send its first frame (hello) before it is closed",
            default: "10000",
        },
        Param {
            prov: NAME,
            name: "handshake_max",
            kind: ParamType::Size,
            help: "Accepted connections that have not sent their hello yet, per listener; beyond it the oldest is closed",
            default: "256",
        },
    ]
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let p = params();
        let get = |n: &str| p.iter().find(|x| x.name == n).expect("declared parameter");
        let port = |n: &str| get(n).get_int(1..=65535).map(|p| p as u16);
        // A bound that is valid alone but not with the other: reported as set.
        let refuse = |n: &str, why: &str| get(n).complain(&get(n).setting().unwrap_or_default(), why);
        let port_range = match (port("port_low_range"), port("port_high_range")) {
            (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
            (None, None) => None,
            (Some(_), Some(hi)) => {
                refuse("port_low_range", &format!("is above FI_TCP_PORT_HIGH_RANGE={hi}; the port range is ignored"));
                None
            }
            (Some(_), None) => {
                refuse("port_low_range", "needs a valid FI_TCP_PORT_HIGH_RANGE too; the port range is ignored");
                None
            }
            (None, Some(_)) => {
                refuse("port_high_range", "needs a valid FI_TCP_PORT_LOW_RANGE too; the port range is ignored");
                None
            }
        };
        Config {
            iface: get("iface").setting(),
            port_range,
            eager_max: get("eager_max").get_size(0..=usize::MAX).unwrap_or(EAGER_MAX_DEFAULT),
            inject_size: get("inject_size").get_size(0..=1 << 20).unwrap_or(8192),
            nodelay: get("nodelay").get_bool(),
            // At least a millisecond and one connection: 0 would refuse every
            // peer, so it is reported and the default used.
            handshake_timeout: std::time::Duration::from_millis(
                get("handshake_timeout").get_int(1..=3_600_000).unwrap_or(10_000) as u64,
            ),
            handshake_max: get("handshake_max").get_size(1..=1 << 16).unwrap_or(256),
        }
    })
}

fabric_util::provider_ops!(TcpProvider {
    name: NAME,
    version: VERSION,
    params: params(),
    getinfo: attr::getinfo,
    fabric: fabric::TcpFabric::new,
});

#[cfg(test)]
mod tests {
    use super::*;

    /// `fi_info -e` shows the default the provider uses.
    #[test]
    fn eager_max_default_is_the_one_listed() {
        let p = params().into_iter().find(|p| p.name == "eager_max").expect("eager_max listed");
        assert_eq!(p.default.parse::<usize>(), Ok(EAGER_MAX_DEFAULT));
    }
}

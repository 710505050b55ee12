//! The udp domain (one interface address): completion queues, counters, address
//! vectors, memory registration and endpoints, and what every endpoint of the
//! domain needs to know about its interface (address, index, MTU) and to open its
//! socket.

use crate::dgram::DgramEp;
use crate::fabric::UdpFabric;
use crate::{config, Config, NAME};
use fabric_core::log::Level;
use fabric_core::Progress as ProgressModel;
use fabric_core::{fi_log, EpType, Error, Info, Result};
use fabric_util::domain::DomainObjects;
use fabric_util::iface::{self, Iface};
use fabric_util::progress::{AutoProgress, Progress};
use socket2::Socket;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Weak};

/// The MTU assumed when the interface's cannot be read.
const FALLBACK_MTU: usize = 1500;

/// A udp domain.
pub(crate) struct UdpDomain {
    fid: u64,
    info: Info,
    fabric: Arc<UdpFabric>,
    /// Its queues, counters, AVs and memory registry.
    pub(crate) objs: DomainObjects,
    /// With `FI_PROGRESS_AUTO`: the progress thread.
    auto: Option<AutoProgress>,
    /// The interface address the domain is on.
    iface: Iface,
    /// The interface's MTU, read when the domain opened.
    mtu: usize,
    me: Weak<UdpDomain>,
}

impl UdpDomain {
    pub(crate) fn new(fabric: Arc<UdpFabric>, info: &Info) -> Result<Arc<UdpDomain>> {
        let iface = domain_iface(info)?;
        let mtu = iface.mtu().unwrap_or_else(|e| {
            fi_log!(Level::Warn, NAME, "domain", "cannot read the MTU of {}: {e}; assuming {FALLBACK_MTU}", iface.name);
            FALLBACK_MTU
        });
        let auto = match info.domain_attr.data_progress {
            ProgressModel::Auto => Some(AutoProgress::start("fabric-udp-progress")?),
            _ => None,
        };
        Ok(Arc::new_cyclic(|me| UdpDomain {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            objs: DomainObjects::new(NAME, info.domain_attr.mr_mode, crate::attr::is_udp_addr),
            auto,
            iface,
            mtu,
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<UdpFabric> {
        &self.fabric
    }

    /// The provider's parameters.
    pub(crate) fn config(&self) -> &'static Config {
        config()
    }

    /// The interface address the domain is on (name, address, index).
    pub(crate) fn iface(&self) -> &Iface {
        &self.iface
    }

    /// The interface's MTU.
    pub(crate) fn mtu(&self) -> usize {
        self.mtu
    }

    /// The largest datagram payload that leaves the interface unfragmented, over
    /// IPv6 (`ipv6`) or IPv4: the MTU less the IP and UDP headers.
    pub(crate) fn max_payload(&self, ipv6: bool) -> usize {
        iface::max_udp_payload(self.mtu(), ipv6)
    }

    /// The address an endpoint of the family of `ipv6` binds to when given none:
    /// the interface's address (any address of the family if the interface's is
    /// of the other one), with a free port.
    pub(crate) fn default_name(&self, ipv6: bool) -> SocketAddr {
        let ip = match self.iface.addr {
            a if a.is_ipv6() == ipv6 => a,
            _ if ipv6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        SocketAddr::new(ip, 0)
    }

    /// Open a socket for an endpoint of the family of `ipv6` ([`crate::sock::open`]),
    /// not bound yet.
    pub(crate) fn socket(&self, ipv6: bool) -> Result<Socket> {
        crate::sock::open(ipv6, self.config())
    }

    /// Bind an endpoint's socket to `name` (port 0: a free one) and have its
    /// multicast sends leave through the domain's interface: the address bound.
    pub(crate) fn bind_socket(&self, sock: &Socket, name: SocketAddr) -> Result<SocketAddr> {
        let bound = crate::sock::bind(sock, name)?;
        if let (SocketAddr::V4(_), IpAddr::V4(ip)) = (bound, self.iface.addr) {
            sock.set_multicast_if_v4(&ip)?;
        }
        Ok(bound)
    }

    /// Open and bind a socket ([`UdpDomain::socket`], [`UdpDomain::bind_socket`])
    /// to `name`, or to [`UdpDomain::default_name`] of the interface's family.
    pub(crate) fn open_socket(&self, name: Option<SocketAddr>) -> Result<(Socket, SocketAddr)> {
        let name = name.unwrap_or_else(|| self.default_name(self.iface.addr.is_ipv6()));
        let sock = self.socket(name.is_ipv6())?;
        let bound = self.bind_socket(&sock, name)?;
        Ok((sock, bound))
    }

    /// Have the domain's progress thread (`FI_PROGRESS_AUTO`) drive `ep`; nothing
    /// when progress is manual.
    pub(crate) fn bind_auto_progress(&self, ep: Weak<dyn Progress>) -> Result<()> {
        match &self.auto {
            Some(a) => a.bind(ep),
            None => Ok(()),
        }
    }
}

/// The interface address an entry names: its domain name and source address.
fn domain_iface(info: &Info) -> Result<Iface> {
    let name = &info.domain_attr.name;
    let ip = info.src_addr.as_ref().and_then(|a| a.sockaddr()).map(|s| s.ip());
    let all = iface::interfaces()?;
    let found = all
        .iter()
        .find(|i| &i.name == name && Some(i.addr) == ip)
        .or_else(|| all.iter().find(|i| &i.name == name && ip.map_or(true, |ip| ip.is_ipv6() == i.addr.is_ipv6())))
        .or_else(|| all.iter().find(|i| &i.name == name));
    match found {
        Some(i) => Ok(i.clone()),
        None => {
            fi_log!(Level::Warn, NAME, "domain", "interface {name} is not up with an address");
            Err(Error::NoDev)
        }
    }
}

fabric_util::domain_ops!(UdpDomain, endpoint: |d, info| {
    let me = d.me.upgrade().expect("a domain method runs while the domain lives");
    match info.ep_attr.ep_type {
        EpType::Dgram => {
            let ep = DgramEp::new(me, info)?;
            let w: Weak<dyn Progress> = Arc::downgrade(&ep) as Weak<dyn Progress>;
            d.bind_auto_progress(w)?;
            Ok(ep)
        }
        // The RDM endpoint binds itself to the progress thread
        // (`bind_auto_progress`).
        EpType::Rdm => crate::rdm::new_ep(me, info),
        t => {
            fi_log!(Level::Warn, NAME, "domain", "{t} endpoints are not offered by udp");
            Err(Error::Inval)
        }
    }
});

//! Benchmarks of fabric: criterion benches (`cargo bench -p fabric-benches`) and
//! `compare.sh`, which runs our `fi_pingpong` and libfabric's side by side and
//! prints the ratios.
//!
//! This library holds the set-up the benches share: an RDM pair in one process, and
//! the in-process round trip ([`inproc`]) that `../shared/tools/inproc/instr.sh` counts.

#![forbid(unsafe_code)]

pub mod inproc;

use fabric::{AddressVector, AvAttr, BindFlags, CompletionQueue, CqAttr, Domain, Endpoint, EpType, Fabric, FiAddr};
use fabric::{Hints, Info, Result};

/// One side of an in-process RDM pair.
pub struct Side {
    /// Its domain (to register memory).
    pub domain: fabric::Domain,
    /// The endpoint.
    pub ep: Endpoint,
    /// Its completion queue (transmit and receive).
    pub cq: CompletionQueue,
    /// The other side's address.
    pub peer: FiAddr,
}

/// An enabled endpoint of `dom` with its own CQ (transmit and receive) and AV.
pub fn bound_endpoint(dom: &Domain, info: &Info) -> Result<(Endpoint, CompletionQueue, AddressVector)> {
    let cq = dom.cq(CqAttr::default())?;
    let av = dom.av(AvAttr::default())?;
    let ep = dom.endpoint(info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    Ok((ep, cq, av))
}

/// Two RDM endpoints of `prov` on loopback, each with its own domain, CQ and AV.
pub fn rdm_pair(prov: &str) -> Result<(Side, Side)> {
    let hints = Hints::new().provider(prov).ep_type(EpType::Rdm).node("127.0.0.1").source(true);
    let info = fabric::getinfo(&hints)?.remove(0);
    let fab = Fabric::open(&info)?;
    let mk = || -> Result<_> {
        let dom = fab.domain(&info)?;
        let (ep, cq, av) = bound_endpoint(&dom, &info)?;
        Ok((ep, cq, av, dom))
    };
    let (e1, c1, a1, d1) = mk()?;
    let (e2, c2, a2, d2) = mk()?;
    let p1 = a1.insert_one(&e2.name()?)?;
    let p2 = a2.insert_one(&e1.name()?)?;
    Ok((Side { domain: d1, ep: e1, cq: c1, peer: p1 }, Side { domain: d2, ep: e2, cq: c2, peer: p2 }))
}

//! Set-up shared by the tcp provider's tests (each test binary uses part of it).

#![allow(dead_code)]

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps};
use fabric_core::{AvAttr, BindFlags, Caps, CqAttr, CqEntry, CqErrEntry, Error, Info};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An enabled RDM endpoint with its own CQ (transmit and receive) and AV.
pub struct Rdm {
    pub cq: Arc<dyn CqOps>,
    pub av: Arc<dyn AvOps>,
    pub ep: Arc<dyn EndpointOps>,
}

/// Open, bind and enable an RDM endpoint on `dom` for `info`.
pub fn rdm_endpoint(dom: &Arc<dyn DomainOps>, info: &Info) -> Rdm {
    let cq = dom.cq_open(&CqAttr::default()).unwrap();
    let av = dom.av_open(&AvAttr::default()).unwrap();
    let ep = dom.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Rdm { cq, av, ep }
}

/// Wait for one completion (or error completion) on `cq`, driving `other` too;
/// fails the test after 20 s.
pub fn wait(cq: &Arc<dyn CqOps>, other: &Arc<dyn CqOps>) -> Result<CqEntry, CqErrEntry> {
    let mut out = [CqEntry::new(0, Caps::empty())];
    let start = Instant::now();
    loop {
        let _ = other.read(&mut []);
        match cq.read(&mut out) {
            Ok(1) => return Ok(out[0]),
            Err(Error::Avail) => return Err(cq.readerr().unwrap()),
            _ => {}
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no completion");
    }
}

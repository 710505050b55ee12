//! What the shm provider's integration tests share: an RDM endpoint in a domain of
//! its own, bound to a completion queue and an address vector, through the
//! provider's own traits (no `fabric` layer in between).

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps};
use fabric_core::{AvAttr, BindFlags, CqAttr, EpType, Hints};
use std::sync::Arc;

/// An enabled RDM endpoint with its queue, address vector and domain.
#[allow(dead_code)]
pub struct Node {
    /// The endpoint.
    pub ep: Arc<dyn EndpointOps>,
    /// Its completion queue, for both directions.
    pub cq: Arc<dyn CqOps>,
    /// Its address vector.
    pub av: Arc<dyn AvOps>,
    /// Kept alive as long as the endpoint.
    pub _dom: Arc<dyn DomainOps>,
}

/// An endpoint in a domain of its own, its completion queue `cq_size` entries.
#[allow(dead_code)]
pub fn node(cq_size: usize) -> Node {
    let (ep, cq, av, _dom) = parts(cq_size);
    Node { ep, cq, av, _dom }
}

/// An endpoint, its queue, its address vector and its domain.
pub type Parts = (Arc<dyn EndpointOps>, Arc<dyn CqOps>, Arc<dyn AvOps>, Arc<dyn DomainOps>);

/// [`node`]'s objects as they are, for a test that closes the endpoint itself
/// (a [`Node`] closes it when dropped).
#[allow(dead_code)]
pub fn parts(cq_size: usize) -> Parts {
    let prov = fabric_shm::provider();
    let hints = Hints { ep_type: EpType::Rdm, ..Hints::default() };
    let info = prov.getinfo(&hints).expect("shm getinfo").remove(0);
    let dom = prov.fabric(&info).expect("fabric").domain(&info).expect("domain");
    let cq = dom.cq_open(&CqAttr { size: cq_size, ..CqAttr::default() }).expect("cq");
    let av = dom.av_open(&AvAttr::default()).expect("av");
    let ep = dom.endpoint(&info).expect("endpoint");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    (ep, cq, av, dom)
}

impl Drop for Node {
    /// Close the endpoint, as `fi_close` and `fabric::Endpoint`'s drop do: its
    /// completion queue holds it while it is bound, so dropping it is not enough.
    fn drop(&mut self) {
        let _ = self.ep.close();
    }
}

//! A completion queue holds the endpoints bound to it while they are bound (so
//! that its reads reach their progress without upgrading a weak handle), and an
//! endpoint's close lets go of it: an endpoint closed while its queue lives is
//! dropped once its last handle is, and nothing keeps either alive in a cycle.

use fabric_core::{Caps, CqEntry, Error};
use std::sync::Arc;

mod common;

#[test]
fn an_endpoint_closed_while_its_queue_lives_is_dropped() {
    let (ep, cq, av, _dom) = common::parts(16);
    let weak_ep = Arc::downgrade(&ep);
    let weak_cq = Arc::downgrade(&cq);
    let mut out = [CqEntry::new(0, Caps::empty())];
    // Reads drive the bound endpoint's progress.
    assert_eq!(cq.read(&mut out), Err(Error::Again));
    ep.close().expect("close");
    drop(ep);
    assert!(weak_ep.upgrade().is_none(), "the closed endpoint is still held (by its queue?)");
    // The queue outlives it and still reads (nothing is bound any more).
    assert_eq!(cq.read(&mut out), Err(Error::Again));
    drop((cq, av));
    assert!(weak_cq.upgrade().is_none(), "the queue is still held once every handle is gone");
}

#[test]
fn an_endpoint_bound_twice_to_its_queue_is_let_go_by_one_close() {
    let (ep, cq, av, _dom) = common::parts(16);
    // Bound again for one direction: still one binding to let go of.
    ep.bind_cq(&cq, fabric_core::BindFlags::RECV).expect("bind again");
    let weak_ep = Arc::downgrade(&ep);
    ep.close().expect("close");
    drop(ep);
    assert!(weak_ep.upgrade().is_none(), "the closed endpoint is still held");
    drop((cq, av));
}

#[test]
fn a_queue_replaced_in_both_directions_lets_go_of_the_endpoint() {
    let (ep, cq, av, _dom) = common::parts(16);
    let other = _dom.cq_open(&fabric_core::CqAttr::default()).expect("second queue");
    ep.bind_cq(&other, fabric_core::BindFlags::RECV).expect("receive queue replaced");
    ep.bind_cq(&other, fabric_core::BindFlags::TRANSMIT).expect("transmit queue replaced");
    let weak_ep = Arc::downgrade(&ep);
    // The first queue lives on; only `other` is the endpoint's now.
    ep.close().expect("close");
    drop(ep);
    assert!(weak_ep.upgrade().is_none(), "the replaced queue still holds the endpoint");
    let mut out = [CqEntry::new(0, Caps::empty())];
    assert_eq!(cq.read(&mut out), Err(Error::Again));
    drop((cq, other, av));
}

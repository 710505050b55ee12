//! `FI_TCP_PORT_LOW_RANGE` / `FI_TCP_PORT_HIGH_RANGE` bound the listening ports.
//! (Its own test binary: the provider reads its parameters once per process.)

mod common;

use fabric_core::*;

#[test]
fn listening_ports_stay_in_the_range() {
    // Eight ports outside the ephemeral range (where closed connections' ports
    // linger in TIME_WAIT and refuse a listener); three endpoints need three.
    let lo = fabric_testkit::port().min(u16::MAX - 7);
    std::env::set_var("FI_TCP_PORT_LOW_RANGE", lo.to_string());
    std::env::set_var("FI_TCP_PORT_HIGH_RANGE", (lo + 7).to_string());
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let mut eps = Vec::new();
    for _ in 0..3 {
        let r = common::rdm_endpoint(&dom, &info);
        let port = r.ep.getname().unwrap().sockaddr().unwrap().port();
        assert!((lo..=lo + 7).contains(&port), "port {port} outside {lo}..={}", lo + 7);
        eps.push(r);
    }
    // A passive endpoint too.
    let minfo = p.getinfo(&Hints::new().ep_type(EpType::Msg).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let eq = fabric.eq_open(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&minfo).unwrap();
    pep.bind_eq(&eq).unwrap();
    pep.listen().unwrap();
    let port = pep.getname().unwrap().sockaddr().unwrap().port();
    assert!((lo..=lo + 7).contains(&port), "passive port {port} outside the range");
}

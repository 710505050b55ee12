//! Teardown under automatic progress (`FI_PROGRESS_AUTO`), on every provider.
//!
//! A domain opened with automatic progress runs a thread that drives its
//! endpoints: it upgrades each endpoint's weak handle, makes progress, and drops
//! the strong one again. If the application drops its own handles meanwhile, the
//! last reference to the endpoint (and through it to the domain, whose drop stops
//! that very thread) ends on the progress thread. It must not then join itself:
//! before the fix the thread panicked with "failed to join thread: Resource
//! deadlock avoided" in a few runs out of ten.
//!
//! Each test tears down hundreds of busy pairs of endpoints in varying orders and
//! fails if any thread of the process panicked meanwhile (a panic hook counts
//! them: a panic on the progress thread is invisible to the test otherwise).

use fabric::{AvAttr, BindFlags, Buf, CqAttr, EpType, Error, Fabric, FiAddr, Hints, Info, Progress};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// Panics seen on any thread of this process since the hook was installed.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Count every panic on any thread (and still report it as usual).
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |p| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(p)
        }));
    });
}

/// Rounds per provider.
const ROUNDS: usize = 200;

/// The automatic-progress RDM entry of `prov` on this host, if it has one.
fn auto_info(prov: &str) -> Option<Info> {
    let mut hints = Hints::new().provider(prov).ep_type(EpType::Rdm);
    if prov != "verbs" && prov != "shm" {
        hints = hints.node("127.0.0.1").source(true);
    }
    hints.data_progress = Progress::Auto;
    match fabric::getinfo(&hints) {
        Ok(mut v) => Some(v.remove(0)),
        Err(e) => {
            fabric_testkit::skip(prov, format!("{prov} offers no RDM endpoint with automatic progress here: {e}"));
            None
        }
    }
}

/// `ROUNDS` times: two endpoints of one domain (and, every other round, of two
/// domains), messages in flight both ways, then every handle dropped in one of
/// several orders while the progress thread is busy with them.
fn teardown(prov: &str) {
    count_panics();
    let Some(info) = auto_info(prov) else { return };
    assert_eq!(info.domain_attr.data_progress, Progress::Auto);
    let before = PANICS.load(Ordering::SeqCst);
    for round in 0..ROUNDS {
        let fabric = Fabric::open(&info).unwrap();
        let d1 = fabric.domain(&info).unwrap();
        let d2 = if round % 2 == 0 { fabric.domain(&info).unwrap() } else { d1.clone() };
        let mk = |d: &fabric::Domain| {
            let cq = d.cq(CqAttr::default()).unwrap();
            let av = d.av(AvAttr::default()).unwrap();
            let ep = d.endpoint(&info).unwrap();
            ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
            ep.bind_av(&av).unwrap();
            ep.enable().unwrap();
            (ep, cq, av)
        };
        let (a, acq, aav) = mk(&d1);
        let (b, bcq, bav) = mk(&d2);
        let to_b = aav.insert_one(&b.name().unwrap()).unwrap();
        let to_a = bav.insert_one(&a.name().unwrap()).unwrap();
        for i in 0..4u64 {
            b.recv(Buf::new(256), FiAddr::UNSPEC, 100 + i).unwrap();
            a.recv(Buf::new(256), FiAddr::UNSPEC, 200 + i).unwrap();
            a.send(Buf::from(&b"ping"[..]), to_b, i).unwrap();
            b.send(Buf::from(&b"pong"[..]), to_a, 10 + i).unwrap();
        }
        // Some rounds wait for a completion, so the progress thread has been at
        // work for a while; others drop at once.
        if round % 3 == 0 {
            let got = bcq.sread(Some(std::time::Duration::from_secs(20)));
            assert!(!matches!(got, Err(ref e) if *e != Error::Again), "{prov}: {got:?}");
        }
        match round % 4 {
            0 => drop((a, b, acq, bcq, aav, bav, d1, d2, fabric)),
            1 => drop((fabric, d2, d1, bav, aav, bcq, acq, b, a)),
            2 => {
                drop((d1, d2, fabric));
                std::thread::yield_now();
                drop((acq, bcq, a, b, aav, bav));
            }
            _ => {
                drop((acq, aav, a, d1));
                drop((fabric, bav, bcq, b, d2));
            }
        }
    }
    // Progress threads detached in the last rounds may still be finishing: let
    // them, so a late panic counts too.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(PANICS.load(Ordering::SeqCst) - before, 0, "{prov}: a thread panicked during teardown (see above)");
}

#[cfg(feature = "tcp")]
#[test]
fn tcp_teardown_under_auto_progress() {
    teardown("tcp");
}

#[cfg(feature = "udp")]
#[test]
fn udp_teardown_under_auto_progress() {
    teardown("udp");
}

#[cfg(feature = "shm")]
#[test]
fn shm_teardown_under_auto_progress() {
    teardown("shm");
}

#[cfg(feature = "verbs")]
#[test]
fn verbs_teardown_under_auto_progress() {
    teardown("verbs");
}

//! The conformance suite: one set of tests of the public API, instantiated per
//! provider (as rustls instantiates its tests per crypto provider: a module per
//! provider that mounts the same test files).
//!
//! The tests are ordinary `#[test]` functions in `conformance/<area>.rs`.
//! `conformance_suite!(tcp, "tcp")` makes a module `tcp` that sets
//! `const PROV: &str = "tcp"` and mounts every area file in it as a submodule,
//! so each test exists once per provider, named as cargo shows it:
//! `tcp::msg::rdm_sizes`. A new `#[test]` in an area file runs on every provider
//! with nothing else to edit (a new area file is one line in
//! `conformance_suite!`).
//!
//! A test's body is `run(PROV, |prov| { ... })` (`common::run`): it runs against
//! the provider `prov` on a thread of its own, named after the test, under a
//! watchdog, and every wait has its own, so a hang fails the test instead of
//! blocking the run. A body written once for RDM and MSG endpoints,
//! `fn sizes(prov: &'static str, t: EpType)`, makes its two tests with
//! `rdm_and_msg!(sizes: rdm_sizes, msg_sizes)`. What more than one area uses
//! (set-up, waits, memory regions) is in `conformance/common.rs`, compiled once.
//!
//! A test first checks the provider's `Info` (caps, endpoint types, limits) and,
//! when a capability is absent, reports the skip (`fabric_testkit::absent`: a
//! `skipped (absent)` line on standard error and in `FABRIC_SKIP_LOG`) and returns:
//! every provider passes the same semantics, as far as it offers them. A provider
//! that offers nothing at all is a missing environment (`fabric_testkit::skip`),
//! which fails the test where `FABRIC_REQUIRE` names the provider.
//!
//! Tests marked `#[ignore = "bug: ..."]` in an area file (ignored on every
//! provider, as the attribute is in the one file all mount) expose a known bug of a
//! provider or of the fabric crate: run them with
//! `cargo test -p fabric --test conformance -- --ignored`.

#![allow(missing_docs)]
// Every provider's module mounts the same area files: that is the mechanism.
#![allow(clippy::duplicate_mod)]

#[path = "conformance/common.rs"]
mod common;

/// The whole suite for one provider: `conformance_suite!(tcp, "tcp")` makes
/// `mod tcp` with `PROV = "tcp"` and every area file of `conformance/` mounted
/// in it.
macro_rules! conformance_suite {
    ($name:ident, $prov:literal) => {
        #[path = "conformance"]
        mod $name {
            /// The provider every test of this module runs against.
            const PROV: &str = $prov;

            mod atomic;
            mod av;
            mod cm;
            mod cq;
            mod discovery;
            mod errors;
            mod msg;
            mod rma;
            mod tagged;
            mod waitset;
        }
    };
}

#[cfg(feature = "tcp")]
conformance_suite!(tcp, "tcp");

#[cfg(feature = "shm")]
conformance_suite!(shm, "shm");
#[cfg(feature = "udp")]
conformance_suite!(udp, "udp");
// verbs runs where a device exists: in the QEMU guest of
// `providers/verbs/guest/ci.sh` (Soft-RoCE); elsewhere every test skips, since
// `getinfo` finds no device.
#[cfg(feature = "verbs")]
conformance_suite!(verbs, "verbs");

/// The shm suite again in a child process with `FI_SHM_DISABLE_CMA=1`, so that the
/// fallback (large messages and RMA as chunks through the shared segment) passes
/// every test too. (The setting is read once per process, hence the child.)
#[cfg(feature = "shm")]
#[test]
fn shm_without_cross_memory_attach() {
    if std::env::var_os("FI_SHM_DISABLE_CMA").is_some() {
        // The child itself, or a run that chose the setting: nothing to add.
        return;
    }
    common::rerun_in_child(&["shm::"], ("FI_SHM_DISABLE_CMA", "1"), 100, "shm without CMA");
}

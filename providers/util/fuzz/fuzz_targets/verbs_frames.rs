//! Fuzz what the verbs provider decodes from a peer: connection private data,
//! the RDM name in it, frames and their rendezvous announcements. No panic,
//! accepted records re-encode to the same bytes, pieces add up.
//!
//! The body is `verbs_frames` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::verbs_frames(data));

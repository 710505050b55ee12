//! Fuzz `fabric_util::reliable::Header::decode` with arbitrary bytes: no panic,
//! and an accepted datagram re-encodes to the same bytes and fails on any
//! one-bit error in what its checksum covers.
//!
//! The body is `reliable_header` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::reliable_header(data));

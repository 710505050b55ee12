//! Fuzz `fabric_util::wire::Header::decode` (the header the datagram transport
//! carries) and the RMA and atomic descriptors: no panic, an accepted header
//! re-encodes to the same bytes and respects every limit.
//!
//! The body is `wire_header` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::wire_header(data));

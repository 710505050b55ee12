//! Fuzz what the tcp provider decodes from a socket: a stream of frames (wire
//! headers and their payloads: hellos with names and connection data, RMA
//! descriptors, atomic requests applied as the target does). No panic, accepted
//! frames and hellos re-encode to the same bytes, every length within its limit.
//!
//! The body is `tcp_frames` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::tcp_frames(data));

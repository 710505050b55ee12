//! Fuzz a `fabric_util::reliable::Channel` with arbitrary datagrams (through
//! `Header::decode`) and datagrams built from the input with a valid checksum,
//! interleaved with sends, timers, transmissions and delivery retries: no panic,
//! and the channel's invariants hold after every step.
//!
//! The body is `reliable_channel` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::reliable_channel(data));

//! Fuzz what fi_pingpong and fi_perf decode from their peer: the control
//! connection's frames and messages (words, fields, PLAN, numbers, fabric
//! addresses) and fi_perf's credit messages. No panic, no allocation a peer
//! sizes beyond the caps; frames, plans, numbers and addresses round-trip.
//!
//! The body is `fi_control` in `fi-tools/tests/fuzz_smoke.rs`, which the stable
//! test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../../../fi-tools/tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::fi_control(data));

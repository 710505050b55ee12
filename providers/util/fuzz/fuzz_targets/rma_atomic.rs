//! Fuzz an atomic request as its target applies it (`RmaDesc`, `AtomicHdr`,
//! operands, through `fabric_util::atomic::serve` on a registered region): no
//! panic, a refused or malformed request changes nothing, an applied one changes
//! exactly what `apply_slice` on a copy changes.
//!
//! The body is `rma_atomic` in `providers/util/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::rma_atomic(data));

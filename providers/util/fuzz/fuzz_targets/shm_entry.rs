//! Fuzz what the shm provider reads from shared memory that a peer process wrote:
//! a ring entry (`proto::Entry::decode` and the accessors of a decoded entry) and a
//! slot's sender name (`segment::valid_name`). No panic; accepted entries
//! re-encode to the same bytes and every length and index is within its range.
//!
//! The body is `shm_entry` in `providers/shm/tests/fuzz_smoke.rs`, which the
//! stable test suite runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../../shm/tests/fuzz_smoke.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::shm_entry(data));

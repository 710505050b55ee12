//! The in-process round trip the instruction counts and the criterion bench measure
//! runs on every default provider.

#![forbid(unsafe_code)]

use fabric_benches::inproc::InProc;

/// The program `inproc` (what `../shared/tools/inproc/instr.sh` counts) completes its
/// round trips on every default provider at 0 bytes, 64 and 64 KiB, and says so.
#[test]
fn inproc_program_round_trips_on_every_provider() {
    for prov in ["shm", "tcp", "udp"] {
        for size in ["0", "64", "65536"] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_inproc"))
                .args([prov, "200", size])
                .output()
                .expect("run inproc");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "inproc {prov} {size}: {text}{}", String::from_utf8_lossy(&out.stderr));
            assert!(text.contains(&format!("{prov} size {size}: ")) && text.contains("usec per round trip"), "{text}");
        }
    }
}

/// Many round trips in a row on one pair: every buffer comes back each time (a
/// lost completion would leave a slot empty and fail the next round trip).
#[test]
fn round_trips_recycle_every_buffer() {
    for prov in ["shm", "tcp", "udp"] {
        let mut pair = InProc::open(prov, 64).expect("an in-process RDM pair");
        for i in 0..1000 {
            pair.round_trip().unwrap_or_else(|e| panic!("{prov}: round trip {i}: {e}"));
        }
    }
}

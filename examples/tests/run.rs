//! The examples run and do what they say.

#![forbid(unsafe_code)]

#[test]
fn hello_receives_its_message() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hello")).output().expect("run hello");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("received \"hello\""), "{text}");
}

/// `inproc` (the round trip `../shared/tools/inproc/instr.sh` counts) completes
/// its round trips on every default provider, at 0 bytes, 64 and 64 KiB.
#[test]
fn inproc_round_trips_on_every_provider() {
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

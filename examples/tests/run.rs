//! The examples run and do what they say.

#![forbid(unsafe_code)]

#[test]
fn hello_receives_its_message() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hello")).output().expect("run hello");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("received \"hello\""), "{text}");
}

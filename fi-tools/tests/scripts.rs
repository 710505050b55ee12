//! The README's main job, `fi-tools/pingpong.sh`, as a user runs it: in a checkout
//! whose cargo target directory is elsewhere (`CARGO_TARGET_DIR`), twice at once
//! on one machine, and with a server that fails.
//!
//! Before: the script ran `target/release/fi_pingpong` by that fixed path (in a
//! fresh clone with `CARGO_TARGET_DIR` set, "No such file or directory"; in a used
//! checkout, whatever binary was there), on libfabric's fixed control port (two
//! runs collided), and sent the server's errors to nowhere.
//!
//! The scripts build into a target directory of this test's own (under cargo's
//! `CARGO_TARGET_TMPDIR`): the outer `cargo test` holds the lock of its own.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// A target directory no script has a fixed path to.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("scripts-target")
}

fn pingpong(args: &[&str]) -> Command {
    let mut c = Command::new(repo().join("fi-tools/pingpong.sh"));
    c.args(args).env("CARGO_TARGET_DIR", target_dir()).env_remove("FI_PROVIDER");
    c
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The data row of fi_pingpong's table for `size`.
fn has_row(o: &Output, size: &str) -> bool {
    String::from_utf8_lossy(&o.stdout).lines().any(|l| l.split_whitespace().next() == Some(size))
}

#[test]
fn main_job_builds_where_cargo_says_and_runs_twice_at_once() {
    // One build first (the two runs below would wait on each other's build lock
    // anyway), then two runs at the same time: each picks a free control port.
    let first = pingpong(&["-p", "tcp", "-e", "rdm", "-I", "20", "-S", "64"]).output().expect("run pingpong.sh");
    assert!(first.status.success() && has_row(&first, "64"), "{}", text(&first));
    assert!(target_dir().join("release").is_dir(), "nothing was built in CARGO_TARGET_DIR");
    let a = pingpong(&["-p", "tcp", "-e", "rdm", "-I", "200", "-S", "64"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run pingpong.sh");
    let b = pingpong(&["-p", "tcp", "-e", "msg", "-I", "200", "-S", "4096"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run pingpong.sh");
    let a = a.wait_with_output().unwrap();
    let b = b.wait_with_output().unwrap();
    assert!(a.status.success() && has_row(&a, "64"), "first of two concurrent runs: {}", text(&a));
    assert!(b.status.success() && has_row(&b, "4k"), "second of two concurrent runs: {}", text(&b));
}

#[test]
fn main_job_shows_the_servers_error() {
    // A provider nobody offers: both sides fail, and the server's reason is shown.
    let o = pingpong(&["-p", "nope", "-I", "10", "-S", "64"]).output().expect("run pingpong.sh");
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.lines().any(|l| l.starts_with("  server: ") && l.contains("fi_getinfo")), "{}", text(&o));
}

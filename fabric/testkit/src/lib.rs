//! Skips that can be seen and enforced.
//!
//! A test that cannot run here (no verbs device, a kernel that refuses multicast
//! on loopback, a provider whose `Info` says a capability is absent) returns
//! early and passes. libtest captures what a passing test prints, so a plain
//! `println!("skipped")` is invisible, and nothing stops a run where every test of
//! an area skipped from passing. Every skip goes through this crate instead:
//!
//! - [`skip`] writes `skipped [<area>] <test>: <why>` straight to the process's
//!   standard error (past libtest's capture), and appends the same line to the
//!   file named by `FABRIC_SKIP_LOG` when that is set, so a run can count and
//!   list its skips afterwards (`fabric/testkit/skips.sh`).
//! - An environment that must run an area says so in `FABRIC_REQUIRE`, a comma
//!   list of areas (`verbs`, `tcp,udp,shm`, or `all`): a [`skip`] in a required
//!   area fails the test instead. CI sets it for what it installs; the verbs
//!   guest sets `verbs`.
//! - [`absent`] is the other kind: the code under test itself says a feature is
//!   absent (a provider's `Info` lacks a capability). That is an answer, not a
//!   missing environment, so it is reported and counted the same way but never
//!   fails.
//!
//! Areas in use: a provider's name (`tcp`, `udp`, `shm`, `verbs`: the provider
//! offers nothing here), and what a test needs of the host (`multicast`, `ipv6`,
//! `root`, `pidfd`).
//!
//! The crate also holds what randomised tests share: [`Rng`], a seeded
//! SplitMix64 generator, and its mixing function [`mix`]; and the counting
//! global allocator of the tests that check a data path allocates nothing
//! ([`alloc`]); and [`port`], a port for a test's server that no outgoing
//! connection can be holding.

pub mod alloc;
mod port;
mod rng;

pub use port::port;
pub use rng::{mix, Rng};

use std::fmt::Display;
use std::io::Write;

/// The environment variable naming the required areas.
pub const REQUIRE_VAR: &str = "FABRIC_REQUIRE";
/// The environment variable naming the file skips are appended to.
pub const LOG_VAR: &str = "FABRIC_SKIP_LOG";

/// Whether `area` is among the areas `list` (a `FABRIC_REQUIRE` value) requires.
pub fn required_in(list: &str, area: &str) -> bool {
    list.split(',').map(str::trim).any(|a| a == "all" || (!a.is_empty() && a == area))
}

/// Whether this environment requires `area` (`FABRIC_REQUIRE`).
pub fn required(area: &str) -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|l| required_in(&l, area))
}

/// The running test's name: libtest names each test's thread after it (the
/// conformance suite's threads carry the test's name too).
fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// One skip line: `skipped [<area>] <test>: <why>`, or `skipped (absent) ...`
/// for [`absent`]. Newlines in the reason are folded so each skip is one line.
pub fn line(kind: Option<&str>, area: &str, test: &str, why: &str) -> String {
    let why = why.replace('\n', " ");
    match kind {
        Some(k) => format!("skipped ({k}) [{area}] {test}: {why}"),
        None => format!("skipped [{area}] {test}: {why}"),
    }
}

fn report(l: &str) {
    // Straight to the descriptor: `eprintln!` would be captured by libtest.
    let _ = writeln!(std::io::stderr().lock(), "{l}");
    if let Some(path) = std::env::var_os(LOG_VAR) {
        // One write per line in append mode: lines of tests running in parallel
        // (threads or processes) do not interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{l}\n").as_bytes()));
        if let Err(e) = written {
            let _ = writeln!(std::io::stderr().lock(), "fabric-testkit: cannot append to {path:?}: {e}");
        }
    }
}

/// This test (or part of it) cannot run in this environment: `area` names what
/// is missing. Reported; and when `FABRIC_REQUIRE` requires `area`, the test
/// fails here instead.
#[track_caller]
pub fn skip(area: &str, why: impl Display) {
    let why = why.to_string();
    let test = test_name();
    report(&line(None, area, &test, &why));
    if required(area) {
        panic!("{test}: required area `{area}` ({REQUIRE_VAR}) skipped: {why}");
    }
}

/// The code under test says what this test needs is absent (a provider's `Info`
/// lacks a capability): reported and counted, never a failure.
pub fn absent(area: &str, why: impl Display) {
    report(&line(Some("absent"), area, &test_name(), &why.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirement_lists() {
        assert!(required_in("verbs", "verbs"));
        assert!(required_in("tcp, udp,shm", "udp"));
        assert!(required_in("all", "multicast"));
        assert!(!required_in("", "verbs"));
        assert!(!required_in("tcp,,udp", ""));
        assert!(!required_in("verbs2", "verbs"));
    }

    #[test]
    fn lines_name_the_area_and_test() {
        assert_eq!(line(None, "verbs", "a::b", "no device\nhere"), "skipped [verbs] a::b: no device here");
        assert_eq!(line(Some("absent"), "udp", "t", "no MSG"), "skipped (absent) [udp] t: no MSG");
    }

    /// A required area's skip fails the test; anything else returns. Run in a
    /// child process: the environment is the process's.
    #[test]
    fn a_required_skip_fails_and_is_logged() {
        if std::env::var_os("TESTKIT_CHILD").is_some() {
            absent("verbs", "absent is never fatal");
            skip("multicast", "not required here");
            skip("verbs", "required here");
            unreachable!("a required skip returned");
        }
        let dir = std::env::temp_dir().join(format!("testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.log");
        let _ = std::fs::remove_file(&log);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["tests::a_required_skip_fails_and_is_logged", "--exact", "--test-threads=1"])
            .env("TESTKIT_CHILD", "1")
            .env(REQUIRE_VAR, "verbs")
            .env(LOG_VAR, &log)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "the required skip did not fail:\n{stdout}\n{stderr}");
        assert!(stdout.contains("required area `verbs`"), "{stdout}");
        let logged = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = logged.lines().collect();
        assert_eq!(lines.len(), 3, "{logged}");
        assert!(lines[0].starts_with("skipped (absent) [verbs] tests::a_required_skip"), "{logged}");
        assert!(lines[1].starts_with("skipped [multicast] "), "{logged}");
        assert!(lines[2].ends_with(": required here"), "{logged}");
        // Seen on standard error too, uncaptured.
        assert!(stderr.contains("skipped [multicast]"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Bad settings are said, not swallowed: the real `fi_info` run with one
//! environment variable set to a value that cannot be used, `FI_LOG_LEVEL` unset,
//! writes one warning naming the variable and the value; a good value writes none.

#![forbid(unsafe_code)]

use std::process::{Command, Output};

const FI_INFO: &str = env!("CARGO_BIN_EXE_fi_info");

/// `fi_info` with `args` and only `env` among the `FI_*` variables (whatever the
/// environment of the test run holds, `FI_LOG_LEVEL` included, is removed).
fn fi_info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(FI_INFO);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("FI_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args).envs(env.iter().copied()).output().expect("run fi_info")
}

/// The lines of `out`'s standard error that are warnings.
fn warnings(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.contains("<warn>")).map(str::to_string).collect()
}

/// `fi_info args` with `var=value` warns exactly once, naming both.
fn warns_once(args: &[&str], var: &str, value: &str) {
    let out = fi_info(args, &[(var, value)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = format!("{var}={value} ");
    let w: Vec<String> = warnings(&out).into_iter().filter(|l| l.contains(&named)).collect();
    assert_eq!(w.len(), 1, "{var}={value}: one warning naming it expected; stderr:\n{stderr}");
    assert_eq!(stderr.matches(&named).count(), 1, "{var}={value} said once; stderr:\n{stderr}");
}

#[test]
fn tcp_bad_settings_warn_once() {
    let args = ["-p", "tcp", "-n", "127.0.0.1"];
    warns_once(&args, "FI_TCP_IFACE", "nope");
    warns_once(&args, "FI_TCP_EAGER_MAX", "abc");
    warns_once(&args, "FI_TCP_NODELAY", "maybe");
    warns_once(&args, "FI_TCP_INJECT_SIZE", "99999999999");
    warns_once(&args, "FI_TCP_PORT_LOW_RANGE", "70000");
    warns_once(&args, "FI_TCP_PORT_HIGH_RANGE", "-3");
}

#[test]
fn tcp_warnings_say_what_is_used_instead() {
    let out = fi_info(&["-p", "tcp", "-n", "127.0.0.1"], &[("FI_TCP_INJECT_SIZE", "99999999999")]);
    let w = warnings(&out).join("\n");
    assert!(w.contains("out of range (0 to 1048576); using 1048576"), "{w}");
    assert!(out.status.success(), "a capped value still gives entries");
    let out = fi_info(&["-p", "tcp", "-n", "127.0.0.1"], &[("FI_TCP_IFACE", "nope")]);
    let w = warnings(&out).join("\n");
    assert!(w.contains("names no interface") && w.contains("lo"), "the interfaces that exist are listed: {w}");
    assert!(!out.status.success(), "no interface, no entry");
}

#[test]
fn tcp_port_range_needs_both_bounds() {
    let out = fi_info(&["-p", "tcp"], &[("FI_TCP_PORT_LOW_RANGE", "20000")]);
    let w = warnings(&out).join("\n");
    assert!(w.contains("FI_TCP_PORT_LOW_RANGE=20000 needs a valid FI_TCP_PORT_HIGH_RANGE"), "{w}");
    let out = fi_info(&["-p", "tcp"], &[("FI_TCP_PORT_LOW_RANGE", "20100"), ("FI_TCP_PORT_HIGH_RANGE", "20000")]);
    let w = warnings(&out).join("\n");
    assert!(w.contains("FI_TCP_PORT_LOW_RANGE=20100 is above FI_TCP_PORT_HIGH_RANGE=20000"), "{w}");
}

#[test]
fn udp_bad_settings_warn_once() {
    let args = ["-p", "udp", "-n", "127.0.0.1"];
    warns_once(&args, "FI_UDP_IFACE", "nope");
    warns_once(&args, "FI_UDP_RCVBUF", "lots");
    warns_once(&args, "FI_UDP_SNDBUF", "2g");
}

#[test]
fn shm_bad_settings_warn_once() {
    warns_once(&["-p", "shm"], "FI_SHM_DISABLE_CMA", "perhaps");
}

#[test]
fn core_bad_settings_warn_once() {
    warns_once(&[], "FI_PROVIDER", "nope");
    warns_once(&[], "FI_PROVIDER", "tcp,nope");
    warns_once(&[], "FI_LOG_LEVEL", "loud");
    warns_once(&[], "FI_LOG_PROV", "nope");
}

#[test]
fn good_settings_say_nothing() {
    let good = [
        ("FI_TCP_IFACE", "lo"),
        ("FI_TCP_EAGER_MAX", "64k"),
        ("FI_TCP_NODELAY", "off"),
        ("FI_TCP_INJECT_SIZE", "4096"),
        ("FI_TCP_PORT_LOW_RANGE", "20000"),
        ("FI_TCP_PORT_HIGH_RANGE", "20100"),
        ("FI_UDP_IFACE", "lo"),
        ("FI_UDP_RCVBUF", "1m"),
        ("FI_UDP_SNDBUF", "0x10000"),
        ("FI_SHM_DISABLE_CMA", "1"),
        ("FI_PROVIDER", "tcp,udp,shm"),
        ("FI_LOG_PROV", "tcp"),
    ];
    let out = fi_info(&["-n", "127.0.0.1"], &good);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(warnings(&out), Vec::<String>::new());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // An empty value counts as unset.
    let out = fi_info(&["-n", "127.0.0.1"], &[("FI_TCP_IFACE", ""), ("FI_TCP_EAGER_MAX", ""), ("FI_LOG_LEVEL", "")]);
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn port_out_of_range_says_why() {
    let out = fi_info(&["-n", "127.0.0.1", "-P", "99999", "-p", "tcp"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("fi_getinfo: -61 (No data available)"), "libfabric's line is kept: {stderr}");
    let why: Vec<&str> = stderr.lines().filter(|l| l.contains("<warn>") && l.contains("99999")).collect();
    assert_eq!(why.len(), 1, "one line says why: {stderr}");
    assert!(why[0].contains("::tcp:") && why[0].contains("port 99999 is out of range (0 to 65535)"), "{stderr}");
}

#[test]
fn quiet_refusals_point_to_the_log() {
    let out = fi_info(&["-p", "tcp", "-t", "FI_EP_DGRAM"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("FI_LOG_LEVEL=info says why"), "{stderr}");
    let out = fi_info(&["-p", "tcp", "-t", "FI_EP_DGRAM"], &[("FI_LOG_LEVEL", "info")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FI_EP_DGRAM is not offered by tcp"), "{stderr}");
    assert!(!stderr.contains("FI_LOG_LEVEL=info says why"), "{stderr}");
}

/// The verbs provider's settings are read (and bad ones said) whether or not
/// the machine has an RDMA device.
#[cfg(feature = "verbs")]
#[test]
fn verbs_bad_settings_warn_once() {
    let args = ["-p", "verbs"];
    warns_once(&args, "FI_VERBS_GID_IDX", "300");
    warns_once(&args, "FI_VERBS_INLINE_SIZE", "big");
    warns_once(&args, "FI_VERBS_USE_SRQ", "sometimes");
}

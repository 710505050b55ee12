//! Two-process tests: the real `fi_pingpong` and `fi_info` binaries run as a user
//! runs them, server and client on loopback.

#![forbid(unsafe_code)]

mod common;

use common::{port, show, wait_output};

use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PINGPONG: &str = env!("CARGO_BIN_EXE_fi_pingpong");
const FI_INFO: &str = env!("CARGO_BIN_EXE_fi_info");

fn run_pair(args: &[&str]) -> (Output, Output) {
    run_pair_env(args, &[])
}

/// [`run_pair`] with environment variables for both processes.
fn run_pair_env(args: &[&str], env: &[(&str, &str)]) -> (Output, Output) {
    let b = port().to_string();
    let mut sargs: Vec<&str> = args.to_vec();
    sargs.extend(["-B", &b]);
    let server = Command::new(PINGPONG)
        .args(&sargs)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let client = Command::new(PINGPONG)
        .args(&cargs)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let c = wait_output(client, Duration::from_secs(120));
    let s = wait_output(server, Duration::from_secs(30));
    show(&s, &c);
    (s, c)
}

fn check_table(out: &Output, sizes: &[&str]) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{text}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("bytes"))
        .unwrap_or_else(|| panic!("no table header in:\n{text}"));
    for col in ["#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"] {
        assert!(header.contains(col), "header lacks {col}: {header}");
    }
    for s in sizes {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(s)), "no row for size {s} in:\n{text}");
    }
}

#[test]
fn rdm_msg_mode_with_check() {
    let (s, c) = run_pair(&["-p", "tcp", "-e", "rdm", "-I", "200", "-S", "4096", "-c"]);
    check_table(&c, &["4k"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn rdm_tagged_mode_with_check_large() {
    let (s, c) = run_pair(&["-p", "tcp", "-e", "rdm", "-m", "tagged", "-I", "20", "-S", "1048576", "-c"]);
    check_table(&c, &["1m"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn msg_endpoint_with_check() {
    let (s, c) = run_pair(&["-p", "tcp", "-e", "msg", "-I", "200", "-S", "64", "-c"]);
    check_table(&c, &["64"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn msg_endpoint_tagged_all_sizes() {
    let (s, c) = run_pair(&["-p", "tcp", "-e", "msg", "-m", "tagged", "-I", "5", "-S", "all", "-c"]);
    check_table(&c, &["1", "64", "1k", "1m"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn absent_server_fails_cleanly() {
    let b = port().to_string();
    let child = Command::new(PINGPONG)
        .args(["-p", "tcp", "-e", "rdm", "-B", &b, "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = wait_output(child, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty(), "a failure says why");
}

#[test]
fn bad_option_fails_cleanly() {
    let out = Command::new(PINGPONG).args(["-e", "bogus"]).output().expect("run");
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty());
    let out = Command::new(PINGPONG).args(["-Z"]).output().expect("run");
    assert!(!out.status.success());
}

#[test]
fn fi_info_lists_tcp() {
    let out = Command::new(FI_INFO).args(["-p", "tcp", "-n", "127.0.0.1"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("provider: tcp"), "{text}");
    assert!(text.contains("127.0.0.0/8"), "{text}");
    assert!(text.contains("FI_EP_RDM") && text.contains("FI_EP_MSG"), "{text}");
    let out = Command::new(FI_INFO).args(["-p", "tcp", "-t", "FI_EP_DGRAM"]).output().expect("run");
    assert!(!out.status.success(), "no dgram on tcp");
    let out = Command::new(FI_INFO).args(["-e"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FI_TCP_IFACE") && text.contains("FI_PROVIDER"), "{text}");
    let out =
        Command::new(FI_INFO).args(["-v", "-p", "tcp", "-t", "FI_EP_RDM", "-n", "127.0.0.1"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    for field in
        ["fi_tx_attr", "fi_rx_attr", "fi_ep_attr", "fi_domain_attr", "fi_fabric_attr", "inject_size", "mem_tag_format"]
    {
        assert!(text.contains(field), "-v lacks {field}:\n{text}");
    }
}

#[test]
fn shm_rdm_every_size_with_check() {
    let (s, c) = run_pair(&["-p", "shm", "-e", "rdm", "-m", "tagged", "-I", "5", "-S", "all", "-c"]);
    check_table(&c, &["1", "64", "1k", "16k", "256k", "1m"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn shm_rdm_large_without_cross_memory_attach() {
    let (s, c) =
        run_pair_env(&["-p", "shm", "-e", "rdm", "-I", "10", "-S", "4194304", "-c"], &[("FI_SHM_DISABLE_CMA", "1")]);
    check_table(&c, &["4m"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn fi_info_lists_shm() {
    let out = Command::new(FI_INFO).args(["-p", "shm"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("provider: shm") && text.contains("FI_EP_RDM"), "{text}");
    assert!(!text.contains("FI_EP_MSG"), "shm offers RDM only:\n{text}");
    let out = Command::new(FI_INFO).args(["-v", "-p", "shm"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    for field in ["FI_PROTO_SHM", "FI_LOCAL_COMM", "FI_ATOMIC", "FI_TAGGED", "inject_size: 16384"] {
        assert!(text.contains(field), "-v lacks {field}:\n{text}");
    }
    let out = Command::new(FI_INFO).args(["-e"]).output().expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("FI_SHM_DISABLE_CMA"));
}

#[test]
fn udp_dgram_every_size_with_check() {
    // Every size up to the largest datagram loopback carries (65507 bytes), checked.
    let (s, c) = run_pair(&["-p", "udp", "-e", "dgram", "-I", "20", "-S", "all", "-c"]);
    check_table(&c, &["0", "1", "64", "1k", "16k", "48k"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
    let (s, c) = run_pair(&["-p", "udp", "-e", "dgram", "-I", "20", "-S", "65507", "-c"]);
    check_table(&c, &["63k"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn udp_rdm_every_size_tagged_with_check() {
    // RDM over UDP: eager sizes, segmented ones (above one datagram) and
    // rendezvous ones (above 64 KiB), checked, tagged.
    let (s, c) = run_pair(&["-p", "udp", "-e", "rdm", "-I", "20", "-S", "all", "-m", "tagged", "-c"]);
    check_table(&c, &["0", "64", "4k", "64k", "1m", "4m"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn udp_dgram_small_messages() {
    let (s, c) = run_pair(&["-p", "udp", "-e", "dgram", "-I", "1000", "-S", "64", "-c"]);
    check_table(&c, &["64"]);
    assert!(s.status.success(), "server: {}", String::from_utf8_lossy(&s.stderr));
}

#[test]
fn udp_dgram_above_max_msg_size_is_refused() {
    let (s, c) = run_pair(&["-p", "udp", "-e", "dgram", "-S", "65508"]);
    assert!(!c.status.success(), "65508 bytes do not fit one datagram");
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(err.contains("maximum message size 65507"), "{err}");
    assert!(!s.status.success());
}

#[test]
fn fi_info_lists_udp() {
    let out = Command::new(FI_INFO).args(["-p", "udp", "-n", "127.0.0.1"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("provider: udp") && text.contains("127.0.0.0/8"), "{text}");
    assert!(text.contains("FI_EP_DGRAM") && text.contains("FI_EP_RDM"), "{text}");
    assert!(!text.contains("FI_EP_MSG"), "udp offers no MSG endpoints:\n{text}");
    let out = Command::new(FI_INFO).args(["-p", "udp", "-t", "FI_EP_MSG"]).output().expect("run");
    assert!(!out.status.success(), "no msg on udp");
    let out =
        Command::new(FI_INFO).args(["-v", "-p", "udp", "-t", "FI_EP_DGRAM", "-n", "127.0.0.1"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for field in ["FI_PROTO_UDP", "FI_MULTICAST", "FI_SOURCE", "max_msg_size: 65507", "inject_size: 65507", "name: lo"]
    {
        assert!(text.contains(field), "-v lacks {field}:\n{text}");
    }
    let out = Command::new(FI_INFO).args(["-e"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FI_UDP_IFACE") && text.contains("FI_UDP_RCVBUF"), "{text}");
}

//! Two-process tests of `fi_perf`: the real binary as a user runs it, server and
//! client on loopback over tcp, RDM and MSG endpoints.

#![forbid(unsafe_code)]

mod common;

use common::{port, show, wait_output};

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PERF: &str = env!("CARGO_BIN_EXE_fi_perf");

const BW_COLUMNS: [&str; 5] = ["#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]"];
const LAT_COLUMNS: [&str; 9] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99% percentile[usec]",
    "99.9% percentile[usec]",
];

fn spawn(args: &[&str]) -> Child {
    Command::new(PERF).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn fi_perf")
}

/// Run a server and a client with the same arguments (plus `-p tcp` and a port).
fn run_pair(args: &[&str]) -> (Output, Output) {
    let b = port().to_string();
    let mut sargs: Vec<&str> = args.to_vec();
    sargs.extend(["-p", "tcp", "-B", &b]);
    let server = spawn(&sargs);
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let client = spawn(&cargs);
    let c = wait_output(client, Duration::from_secs(120));
    let s = wait_output(server, Duration::from_secs(30));
    show(&s, &c);
    (s, c)
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_success(out: &Output, who: &str) {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{who}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
}

/// The table: the header with every column, then one row per size, in order,
/// each with the expected number of fields, the size and the iterations.
fn check_table(out: &Output, columns: &[&str], sizes: &[usize], iters: u64) {
    let (stdout, _) = text(out);
    let header =
        stdout.lines().find(|l| l.starts_with(" #bytes")).unwrap_or_else(|| panic!("no table header in:\n{stdout}"));
    let mut at = 0;
    for col in columns {
        let i = header[at..].find(col).unwrap_or_else(|| panic!("header lacks {col} (in order): {header}"));
        at += i + col.len();
    }
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), sizes.len(), "one row per size expected in:\n{stdout}");
    let fields = if columns.len() == LAT_COLUMNS.len() { 9 } else { 5 };
    for (row, size) in rows.iter().zip(sizes) {
        assert_eq!(row.len(), fields, "row {row:?}");
        assert_eq!(row[0], size.to_string(), "row {row:?}");
        assert_eq!(row[1], iters.to_string(), "row {row:?}");
        for v in &row[2..] {
            let x: f64 = v.parse().unwrap_or_else(|_| panic!("not a number: {v} in {row:?}"));
            assert!(x.is_finite() && x >= 0.0, "row {row:?}");
        }
    }
    if fields == 9 {
        // min <= typical <= max, min <= 99% <= 99.9% <= max.
        for r in &rows {
            let v: Vec<f64> = r[2..].iter().map(|x| x.parse().unwrap()).collect();
            let (min, max, typ, p99, p999) = (v[0], v[1], v[2], v[5], v[6]);
            assert!(min <= typ && typ <= max && min <= p99 && p99 <= p999 && p999 <= max, "row {r:?}");
        }
    }
}

/// The JSON lines: one object per size, with the keys of the measure.
fn check_json(out: &Output, test: &str, side: &str, keys: &[&str], sizes: &[usize]) {
    let (stdout, _) = text(out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), sizes.len(), "one JSON object per size expected in:\n{stdout}");
    for (l, size) in lines.iter().zip(sizes) {
        assert!(l.starts_with('{') && l.ends_with('}'), "{l}");
        assert!(l.contains(&format!("\"test\":\"{test}\"")), "{l}");
        assert!(l.contains(&format!("\"side\":\"{side}\"")), "{l}");
        assert!(l.contains("\"provider\":\"tcp\""), "{l}");
        assert!(l.contains(&format!("\"bytes\":{size},")), "{l}");
        for k in keys {
            let key = format!("\"{k}\":");
            let at = l.find(&key).unwrap_or_else(|| panic!("{k} missing in {l}"));
            let v: String = l[at + key.len()..].chars().take_while(|c| *c != ',' && *c != '}').collect();
            let x: f64 = v.parse().unwrap_or_else(|_| panic!("{k} is not a number in {l}"));
            assert!(x.is_finite() && x >= 0.0, "{l}");
        }
    }
}

/// `-S all` on an endpoint whose maximum message size is above 6 MiB.
fn all_sizes() -> Vec<usize> {
    let mut v = vec![0, 1];
    let mut p = 2;
    while p <= 4 << 20 {
        v.push(p);
        v.push(p + p / 2);
        p *= 2;
    }
    v
}

#[test]
fn send_lat_rdm_all_sizes() {
    let (s, c) = run_pair(&["send", "lat", "-e", "rdm", "-S", "all", "-I", "10", "--warmup", "2"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    let sizes = all_sizes();
    assert_eq!(sizes.len(), 46);
    check_table(&c, &LAT_COLUMNS, &sizes, 10);
    check_table(&s, &LAT_COLUMNS, &sizes, 10);
    assert!(text(&c).0.contains("Send Latency Test"));
}

#[test]
fn send_lat_msg() {
    let (s, c) = run_pair(&["send", "lat", "-e", "msg", "-I", "300"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    check_table(&c, &LAT_COLUMNS, &[2], 300);
    check_table(&s, &LAT_COLUMNS, &[2], 300);
}

#[test]
fn send_lat_rdm_large_posted_sends() {
    // Above the inject size: posted sends with completions.
    let (s, c) = run_pair(&["send", "lat", "-e", "rdm", "-S", "64k", "-I", "50"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    check_table(&c, &LAT_COLUMNS, &[65536], 50);
}

#[test]
fn send_bw_rdm() {
    let (s, c) = run_pair(&["send", "bw", "-e", "rdm", "-I", "500"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    check_table(&c, &BW_COLUMNS, &[65536], 500);
    check_table(&s, &BW_COLUMNS, &[65536], 500);
    assert!(text(&c).0.contains("Send BW Test"));
}

#[test]
fn send_bw_msg_shallow_queues() {
    // A transmit depth and a receive depth smaller than the run: credits flow.
    let (s, c) = run_pair(&["send", "bw", "-e", "msg", "-S", "1000", "-I", "2000", "-t", "4", "-r", "8"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    check_table(&c, &BW_COLUMNS, &[1000], 2000);
    check_table(&s, &BW_COLUMNS, &[1000], 2000);
}

#[test]
fn send_bw_rdm_small_and_empty_messages() {
    for size in ["0", "1"] {
        let (s, c) = run_pair(&["send", "bw", "-e", "rdm", "-S", size, "-I", "1000", "-t", "64", "-r", "32"]);
        assert_success(&c, "client");
        assert_success(&s, "server");
        check_table(&c, &BW_COLUMNS, &[size.parse().unwrap()], 1000);
    }
}

#[test]
fn json_output() {
    let (s, c) = run_pair(&["send", "bw", "-e", "rdm", "-S", "4k", "-I", "300", "--json"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    let keys = ["bw_peak_mb_sec", "bw_avg_mb_sec", "msg_rate_mpps", "iterations"];
    check_json(&c, "send_bw", "client", &keys, &[4096]);
    check_json(&s, "send_bw", "server", &keys, &[4096]);
    let (s, c) = run_pair(&["send", "lat", "-e", "msg", "-S", "all", "-I", "5", "--warmup", "1", "--json"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    let keys = [
        "t_min_usec",
        "t_max_usec",
        "t_typical_usec",
        "t_avg_usec",
        "t_stdev_usec",
        "p99_usec",
        "p99_9_usec",
        "samples",
    ];
    check_json(&c, "send_lat", "client", &keys, &all_sizes());
    check_json(&s, "send_lat", "server", &keys, &all_sizes());
}

#[test]
fn one_sided_tests() {
    for (verb, ep, size) in [("write", "rdm", 4096), ("read", "msg", 4096), ("atomic", "rdm", 8), ("atomic", "msg", 8)]
    {
        let sz = size.to_string();
        let mut args = vec![verb, "lat", "-e", ep, "-I", "100"];
        if verb != "atomic" {
            args.extend(["-S", &sz]);
        }
        let (s, c) = run_pair(&args);
        assert_success(&c, &format!("{verb} lat client"));
        assert_success(&s, &format!("{verb} lat server"));
        check_table(&c, &LAT_COLUMNS, &[size], 100);
        assert!(text(&s).0.contains("target of the client's operations"), "{}", text(&s).0);
        args[1] = "bw";
        args.extend(["-t", "16"]);
        let (s, c) = run_pair(&args);
        assert_success(&c, &format!("{verb} bw client"));
        assert_success(&s, &format!("{verb} bw server"));
        check_table(&c, &BW_COLUMNS, &[size], 100);
    }
    let (s, c) = run_pair(&["write", "bw", "-e", "rdm", "-S", "64k", "-I", "200", "--json"]);
    assert_success(&c, "client");
    assert_success(&s, "server");
    check_json(&c, "write_bw", "client", &["bw_peak_mb_sec", "bw_avg_mb_sec", "msg_rate_mpps"], &[65536]);
    assert_eq!(text(&s).0, "", "a passive server prints no JSON");
}

#[test]
fn different_tests_are_refused_by_both() {
    let b = port().to_string();
    let server = spawn(&["send", "bw", "-p", "tcp", "-B", &b]);
    let client = spawn(&["send", "lat", "-p", "tcp", "-B", &b, "127.0.0.1"]);
    let c = wait_output(client, Duration::from_secs(30));
    let s = wait_output(server, Duration::from_secs(30));
    for (out, who) in [(&c, "client"), (&s, "server")] {
        let (_, stderr) = text(out);
        assert!(!out.status.success(), "{who} succeeded");
        assert!(stderr.contains("give both the same test"), "{who}: {stderr}");
    }
}

#[test]
fn bad_options_fail_cleanly() {
    for args in [
        &[][..],
        &["send"],
        &["sned", "bw"],
        &["send", "bw", "-Z"],
        &["send", "bw", "-e", "bogus"],
        &["send", "bw", "-e", "dgram"],
        &["send", "bw", "-t", "0"],
        &["send", "lat", "-I", "zero"],
        &["atomic", "lat", "-S", "64"],
    ] {
        let start = Instant::now();
        let child = Command::new(PERF).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let out = wait_output(child, Duration::from_secs(10));
        assert!(!out.status.success(), "{args:?} succeeded");
        let (stdout, stderr) = text(&out);
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.contains("Usage:"), "{args:?}: {stderr}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    let out = Command::new(PERF).arg("-h").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("fi_perf <send|write|read|atomic> <bw|lat>"));
}

#[test]
fn absent_server_fails_in_bounded_time() {
    let b = port().to_string();
    let start = Instant::now();
    let child = spawn(&["send", "lat", "-p", "tcp", "-B", &b, "--connect-timeout", "1", "127.0.0.1"]);
    let out = wait_output(child, Duration::from_secs(20));
    assert!(!out.status.success());
    let (_, stderr) = text(&out);
    assert!(stderr.contains("cannot reach the server"), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
}

#[test]
fn dying_server_fails_the_client_in_bounded_time() {
    for (test, iters) in [("lat", "10000000"), ("bw", "100000000")] {
        let b = port().to_string();
        let sargs = ["send", test, "-p", "tcp", "-e", "rdm", "-B", &b, "-S", "64"];
        let mut server = spawn(&sargs);
        let mut cargs = sargs.to_vec();
        cargs.extend(["-I", iters, "127.0.0.1"]);
        let client = spawn(&cargs);
        std::thread::sleep(Duration::from_millis(1500));
        let _ = server.kill();
        let _ = server.wait();
        let killed = Instant::now();
        let out = wait_output(client, Duration::from_secs(30));
        assert!(!out.status.success(), "{test}: the client succeeded");
        let (_, stderr) = text(&out);
        assert!(stderr.contains("[error] fi_perf:"), "{test}: {stderr}");
        assert!(killed.elapsed() < Duration::from_secs(15), "{test}: {:?}", killed.elapsed());
    }
}

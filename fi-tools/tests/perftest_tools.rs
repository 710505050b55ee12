//! The perftest-style tools (`fi_send_lat` & co.) as a perftest user runs them:
//! server without an address, client with one, perftest's options, two processes
//! on loopback over tcp, udp and shm; their output checked line by line against
//! perftest's format, and read by a perftest-parsing script
//! (`fi-tools/perftest-compare.sh`).

#![forbid(unsafe_code)]

mod common;

use common::wait_output;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";
/// perftest 6.06's headers (`RESULT_FMT`, `RESULT_FMT_G`, `RESULT_FMT_LAT`).
const HEADER_BW: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const HEADER_BW_G: &str = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const HEADER_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
                          t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

const TESTS: [&str; 8] =
    ["send_lat", "send_bw", "write_lat", "write_bw", "read_lat", "read_bw", "atomic_lat", "atomic_bw"];

fn exe(test: &str) -> &'static str {
    match test {
        "send_lat" => env!("CARGO_BIN_EXE_fi_send_lat"),
        "send_bw" => env!("CARGO_BIN_EXE_fi_send_bw"),
        "write_lat" => env!("CARGO_BIN_EXE_fi_write_lat"),
        "write_bw" => env!("CARGO_BIN_EXE_fi_write_bw"),
        "read_lat" => env!("CARGO_BIN_EXE_fi_read_lat"),
        "read_bw" => env!("CARGO_BIN_EXE_fi_read_bw"),
        "atomic_lat" => env!("CARGO_BIN_EXE_fi_atomic_lat"),
        "atomic_bw" => env!("CARGO_BIN_EXE_fi_atomic_bw"),
        _ => panic!("no tool for {test}"),
    }
}

/// A control port for one run, as a string for the command line.
fn port() -> String {
    common::port().to_string()
}

fn spawn(test: &str, args: &[&str]) -> Child {
    Command::new(exe(test)).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_success(out: &Output, who: &str) {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{who}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
}

/// Server `fi_<test> --provider <prov> -p <port> ARGS`, then the client with the
/// same arguments and `127.0.0.1`: (server, client).
fn run_pair(test: &str, prov: &str, args: &[&str]) -> (Output, Output) {
    let p = port();
    let mut sargs = vec!["--provider", prov, "-p", &p];
    sargs.extend_from_slice(args);
    let server = spawn(test, &sargs);
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let client = spawn(test, &cargs);
    let c = wait_output(client, Duration::from_secs(120));
    let s = wait_output(server, Duration::from_secs(30));
    common::show(&s, &c);
    assert_success(&c, &format!("{test} client"));
    assert_success(&s, &format!("{test} server"));
    (s, c)
}

/// perftest's banner, line by line: the rule, the title, the fields in
/// perftest's order with its spacing and tabs, the rule.
fn check_banner(lines: &[&str], title: &str, prov: &str, client: bool, send: bool, bw: bool) -> usize {
    check_banner_of(lines, title, prov, client, send, bw, false)
}

/// [`check_banner`], of a bidirectional run (`-b`) when `bidir`: both sides show
/// the TX depth, and the RX depth in send tests.
fn check_banner_of(lines: &[&str], title: &str, prov: &str, client: bool, send: bool, bw: bool, bidir: bool) -> usize {
    assert_eq!(lines[0], RESULT_LINE);
    assert_eq!(lines[1], format!("                    {title}"));
    assert!(lines[2].starts_with(" Dual-port       : OFF\t\tDevice         : "), "{:?}", lines[2]);
    assert_eq!(lines[3], format!(" Number of qps   : 1\t\tTransport type : {prov}"));
    assert!(
        lines[4].starts_with(" Connection type : ") && lines[4].ends_with("\t\tUsing SRQ      : OFF"),
        "{:?}",
        lines[4]
    );
    assert_eq!(lines[5..7], [" PCIe relax order: OFF", " ibv_wr* API     : OFF"]);
    let mut i = 7;
    let mut field = |name: &str, shown: bool| {
        if shown {
            assert!(lines[i].starts_with(&format!(" {name:<16}: ")), "line {i}: {:?} is not {name}", lines[i]);
            i += 1;
        }
    };
    field("TX depth", client || bidir);
    field("RX depth", send && (!client || bidir));
    field("CQ Moderation", bw);
    field("Mtu", true);
    field("Link type", true);
    field(
        if title.starts_with("Send") || title.starts_with("RDMA_Write") { "Max inline data" } else { "Outstand reads" },
        true,
    );
    if lines[i] == " rdma_cm QPs\t : ON" {
        // perftest's -R: the connection manager's exchange; the server waits.
        assert_eq!(lines[i + 1], " Data ex. method : rdma_cm");
        if !client {
            assert_eq!(lines[i + 2], RESULT_LINE);
            assert_eq!(lines[i + 3], " Waiting for client rdma_cm QP to connect");
            assert_eq!(lines[i + 4], " Please run the same command with the IB/RoCE interface IP");
            i += 3;
        }
    } else {
        assert_eq!(lines[i], " rdma_cm QPs\t : OFF");
        assert_eq!(lines[i + 1], " Data ex. method : Ethernet");
    }
    assert_eq!(lines[i + 2], RESULT_LINE);
    assert!(lines[i + 3].starts_with(" local address: "), "{:?}", lines[i + 3]);
    assert!(lines[i + 4].starts_with(" remote address: "), "{:?}", lines[i + 4]);
    assert_eq!(lines[i + 5], RESULT_LINE);
    i + 6
}

/// The table after the banner: perftest's header, one row per size with the
/// size, the iterations and numbers in every column, the closing rule.
fn check_table(lines: &[&str], header: &str, sizes: &[usize], iters: u64) {
    assert_eq!(lines[0], header);
    let fields = if header == HEADER_LAT { 9 } else { 5 };
    for (k, size) in sizes.iter().enumerate() {
        let row: Vec<&str> = lines[1 + k].split_whitespace().collect();
        assert_eq!(row.len(), fields, "row {row:?}");
        assert_eq!((row[0], row[1]), (size.to_string().as_str(), iters.to_string().as_str()), "row {row:?}");
        for v in &row[2..] {
            let x: f64 = v.parse().unwrap_or_else(|_| panic!("not a number: {v} in {row:?}"));
            assert!(x.is_finite() && x >= 0.0, "row {row:?}");
            // perftest's %-7.2f and %-7.6f: a fixed number of decimals.
            let decimals = v.split('.').nth(1).map_or(0, str::len);
            assert!(decimals == 2 || decimals == 6, "{v} in {row:?}");
        }
    }
    assert_eq!(lines[1 + sizes.len()], RESULT_LINE);
    assert_eq!(lines.len(), 2 + sizes.len(), "nothing after the table: {lines:?}");
}

fn title(test: &str) -> String {
    let (verb, measure) = test.split_once('_').unwrap();
    let verb = match verb {
        "send" => "Send",
        "write" => "RDMA_Write",
        "read" => "RDMA_Read",
        _ => "Atomic FETCH_AND_ADD",
    };
    format!("{verb} {} Test", if measure == "bw" { "BW" } else { "Latency" })
}

/// One tool over one provider: both sides' output as perftest prints it.
fn check_tool(test: &str, prov: &str) {
    let bw = test.ends_with("_bw");
    let send = test.starts_with("send");
    let (s, c) = run_pair(test, prov, &["-n", "50"]);
    let size = match (test.starts_with("atomic"), bw) {
        (true, _) => 8,
        (false, true) => 65536,
        (false, false) => 2,
    };
    let header = if bw { HEADER_BW } else { HEADER_LAT };
    let (out, _) = text(&c);
    let lines: Vec<&str> = out.lines().collect();
    let at = check_banner(&lines, &title(test), prov, true, send, bw);
    check_table(&lines[at..], header, &[size], 50);
    // The server: perftest's waiting box, its banner; the table where it
    // measures (send), nothing more where it is the target.
    let (out, _) = text(&s);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "",
            "************************************",
            "* Waiting for client to connect... *",
            "************************************"
        ]
    );
    let at = 4 + check_banner(&lines[4..], &title(test), prov, false, send, bw);
    // The table where the server measures (send), or the client's where it is
    // the target of a bandwidth test (as perftest's); nothing more for the
    // target of a latency test.
    if send || bw {
        check_table(&lines[at..], header, &[size], 50);
    } else {
        assert_eq!(lines.len(), at, "{out}");
    }
}

#[test]
fn every_tool_over_tcp() {
    for t in TESTS {
        check_tool(t, "tcp");
    }
}

#[test]
fn every_tool_over_udp() {
    for t in TESTS {
        check_tool(t, "udp");
    }
}

#[test]
fn every_tool_over_shm() {
    for t in TESTS {
        check_tool(t, "shm");
    }
}

#[test]
fn all_sizes_and_connected_endpoints() {
    // -a: 2 to 2^23; -R: MSG endpoints, shown as rdma_cm QPs.
    let (_, c) = run_pair("send_lat", "tcp", &["-a", "-n", "5", "-R"]);
    let (out, _) = text(&c);
    let lines: Vec<&str> = out.lines().collect();
    let at = check_banner(&lines, "Send Latency Test", "tcp", true, true, false);
    assert!(out.contains(" Connection type : MSG\t\t") && out.contains(" rdma_cm QPs\t : ON\n"), "{out}");
    let sizes: Vec<usize> = (1..=23).map(|i| 1 << i).collect();
    check_table(&lines[at..], HEADER_LAT, &sizes, 5);
    // -t 4: a warm-up of four operations per size, not 128 (8 MiB ones).
    let (_, c) = run_pair("write_bw", "tcp", &["--all", "-n", "5", "--rdma_cm", "-t", "4"]);
    let (out, _) = text(&c);
    let lines: Vec<&str> = out.lines().collect();
    let at = check_banner(&lines, "RDMA_Write BW Test", "tcp", true, false, true);
    check_table(&lines[at..], HEADER_BW, &sizes, 5);
}

#[test]
fn units_peak_and_terse_output() {
    // --report_gbits: Gb/sec, 10^9 bits; -N: no peak (0.00); sizes and iterations.
    let (_, c) = run_pair("send_bw", "tcp", &["--report_gbits", "-N", "-s", "4096", "-n", "300", "-t", "16"]);
    let (out, _) = text(&c);
    let lines: Vec<&str> = out.lines().collect();
    let at = check_banner(&lines, "Send BW Test", "tcp", true, true, true);
    assert_eq!(lines[7], " TX depth        : 16");
    check_table(&lines[at..], HEADER_BW_G, &[4096], 300);
    let row: Vec<&str> = lines[at + 1].split_whitespace().collect();
    assert_eq!(row[2], "0.00", "{row:?}");
    // Gb/sec are 10^9 bits: the average is the message rate times 4096 bytes
    // times 8 bits (to the rounding of the printed figures).
    let gb: f64 = row[3].parse().unwrap();
    let mpps: f64 = row[4].parse().unwrap();
    let want = mpps * 1e6 * 4096.0 * 8.0 / 1e9;
    assert!(gb > 0.0 && (gb - want).abs() <= 0.01 + want * 0.001, "Gb/sec {gb} against {mpps} Mpps");
    // The same in MB/sec (2^20 bytes).
    let (_, c) = run_pair("send_bw", "tcp", &["-s", "4096", "-n", "300", "-t", "16"]);
    let (out, _) = text(&c);
    let mb_row: Vec<f64> =
        out.lines().find(|l| l.starts_with(" 4096 ")).unwrap().split_whitespace().map(|w| w.parse().unwrap()).collect();
    let want = mb_row[4] * 1e6 * 4096.0 / 1048576.0;
    assert!(mb_row[3] > 0.0 && (mb_row[3] - want).abs() <= 0.01 + want * 0.001, "MB/sec row {mb_row:?}");
    // --output: one number per size, nothing else (perftest's "%lf").
    for (test, what) in [("send_lat", "latency"), ("send_bw", "bandwidth"), ("write_bw", "message_rate")] {
        let (s, c) = run_pair(test, "tcp", &[&format!("--output={what}"), "-n", "100"]);
        let (out, _) = text(&c);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: f64 = lines[0].parse().unwrap_or_else(|_| panic!("{out}"));
        assert!(v > 0.0 && lines[0].split('.').nth(1).map(str::len) == Some(6), "{out}");
        if test.starts_with("send") {
            assert_eq!(text(&s).0.lines().count(), 1, "{}", text(&s).0);
        }
    }
}

#[test]
fn duration_mode() {
    // -D: as many iterations as fit in the time; latency as t_avg and tps,
    // bandwidth without a peak; both sides report the same iterations.
    let (s, c) = run_pair("send_lat", "tcp", &["-D", "1", "-n", "20"]);
    let mut iterations = Vec::new();
    for (out, client) in [(&c, true), (&s, false)] {
        let (out, _) = text(out);
        let lines: Vec<&str> = out.lines().collect();
        let lines = if client { &lines[..] } else { &lines[4..] };
        let at = check_banner(lines, "Send Latency Test", "tcp", client, true, false);
        assert_eq!(lines[at], " #bytes        #iterations       t_avg[usec]    tps average");
        let row: Vec<&str> = lines[at + 1].split_whitespace().collect();
        assert_eq!((row.len(), row[0]), (4, "2"), "{row:?}");
        let iters: u64 = row[1].parse().unwrap();
        let (avg, tps): (f64, f64) = (row[2].parse().unwrap(), row[3].parse().unwrap());
        assert!(iters >= 5 && avg > 0.0 && tps > 0.0, "{row:?}");
        // One transaction is a round trip of two one-way latencies.
        assert!((tps * avg * 2.0 / 1e6 - 1.0).abs() < 0.02, "{row:?}");
        // How many fit depends on the machine's load during the probe and the
        // run (the arithmetic is unit-tested: fiperf's duration_mode_iterations).
        iterations.push(iters);
        assert_eq!(lines[at + 2], RESULT_LINE);
        assert_eq!(lines.len(), at + 3, "{out}");
    }
    assert_eq!(iterations[0], iterations[1], "both sides run the client's count");
    let (s, c) = run_pair("write_bw", "tcp", &["-D", "1", "-n", "20", "-s", "4096"]);
    let row = |o: &Output| -> Vec<String> {
        let (out, _) = text(o);
        let line = out.lines().find(|l| l.starts_with(" 4096 ")).unwrap_or_else(|| panic!("{out}")).to_string();
        line.split_whitespace().map(String::from).collect()
    };
    let (rc, rs) = (row(&c), row(&s));
    assert_eq!(rc, rs, "the target prints the client's results");
    assert_eq!(rc[2], "0.00", "{rc:?}");
    let iters: u64 = rc[1].parse().unwrap();
    assert!(iters >= 5, "{rc:?}");
}

#[test]
fn notes_and_refusals() {
    // An option with no meaning over a provider: a note on stderr, the run as usual.
    let (s, c) = run_pair("send_lat", "tcp", &["-n", "20", "-x", "3", "-F", "--ib-port=1"]);
    let (out, err) = text(&c);
    assert!(err.contains("fi_send_lat: note: -x (--gid-index) ignored: the domain (-d) selects the address"), "{err}");
    assert!(err.contains("fi_send_lat: note: -i (--ib-port) ignored"), "{err}");
    assert!(out.contains(HEADER_LAT), "{out}");
    assert!(text(&s).1.contains("-x (--gid-index) ignored"));
    // Refused: exit status 1, the reason and the usage on stderr, nothing run.
    for (test, args, why) in [
        ("send_lat", &["-b"][..], " Bidirectional is only available in BW test"),
        ("write_lat", &["--bidirectional", "-s", "64"][..], " Bidirectional is only available in BW test"),
        ("read_lat", &["-b"][..], " Bidirectional is only available in BW test"),
        ("atomic_lat", &["-b"][..], " Bidirectional is only available in BW test"),
        ("send_lat", &["-D", "x"][..], "Error parsing \"x\": not a number"),
        ("send_lat", &["-n", "2"][..], "Error parsing \"2\": must be between 5 and"),
        ("read_bw", &["-C"][..], "-C (--report-cycles) is not supported"),
        ("atomic_bw", &["-A", "CMP_AND_SWAP"][..], "CMP_AND_SWAP is not supported"),
    ] {
        let o = Command::new(exe(test)).args(args).output().unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{test} {args:?}: {out}{err}");
        assert!(err.contains(why) && err.contains("Usage:"), "{test} {args:?}: {err}");
        assert!(out.is_empty(), "{out}");
    }
    // Help and version, on stdout, status 0.
    let o = Command::new(exe("read_lat")).arg("--help").output().unwrap();
    assert!(o.status.success() && text(&o).0.starts_with("Usage:\n  fi_read_lat "), "{:?}", text(&o));
    let o = Command::new(exe("read_lat")).arg("-V").output().unwrap();
    assert!(o.status.success() && text(&o).0.starts_with("Version: "), "{:?}", text(&o));
}

/// The perftest-parsing script of `fi-tools/perftest-compare.sh` reads our tables
/// (it reads perftest's the same way: the figure under the header).
#[test]
fn a_perftest_script_reads_our_output() {
    let dir = Path::new(exe("send_lat")).parent().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perftest-compare.sh");
    let (p1, p2) = (port(), port());
    let o = Command::new("sh")
        .arg(&script)
        .args(["--ours", dir.to_str().unwrap(), "--provider", "tcp", "--only-ours", "--timeout", "60"])
        .arg(format!("send_lat -s 64 -n 200 -p {p1}"))
        .arg(format!("write_bw -n 200 -p {p2} --report_gbits"))
        .output()
        .expect("sh");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let compare: Vec<&str> = out.lines().filter(|l| l.starts_with("COMPARE ")).collect();
    assert_eq!(compare.len(), 2, "{out}");
    for (line, unit) in compare.iter().zip(["usec", "Gb/sec"]) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[words.len() - 1], unit, "{line}");
        let v: f64 = words[words.len() - 2].parse().unwrap_or_else(|_| panic!("{line}"));
        assert!(v > 0.0, "{line}");
    }
    assert!(compare[0].starts_with(&format!("COMPARE send_lat -s 64 -n 200 -p {p1} | fi_send_lat ")), "{}", compare[0]);
    // A failing run fails the script.
    let o = Command::new("sh")
        .arg(&script)
        .args(["--ours", dir.to_str().unwrap(), "--provider", "nosuch", "--only-ours", "--timeout", "20"])
        .arg(format!("send_lat -n 5 -p {}", port()))
        .output()
        .expect("sh");
    assert!(!o.status.success(), "{:?}", text(&o));
}

/// A run of perftest's that fails (as perftest does on a loaded machine) is
/// reported as perftest's and fails the script only with `--strict`; fabric's
/// runs still count.
#[test]
fn a_failed_perftest_run_is_reported_as_perftests() {
    let dir = Path::new(exe("send_lat")).parent().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perftest-compare.sh");
    // A stand-in for perftest's ib_send_lat that fails as it does when its
    // clock calibration gives up: a table of "inf".
    let fake = std::env::temp_dir().join(format!("fi-tools-fake-perftest-{}", std::process::id()));
    std::fs::create_dir_all(&fake).unwrap();
    let ib = fake.join("ib_send_lat");
    std::fs::write(&ib, "#!/bin/sh\necho ' #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]'\necho ' 2       1000          inf            inf          inf'\n").unwrap();
    std::fs::set_permissions(&ib, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for strict in [false, true] {
        let mut c = Command::new("sh");
        c.arg(&script).args(["--ours", dir.to_str().unwrap(), "--perftest", fake.to_str().unwrap()]);
        c.args(["--provider", "tcp", "--timeout", "60"]);
        if strict {
            c.arg("--strict");
        }
        let o = c.arg(format!("send_lat -s 64 -n 100 -p {}", port())).output().expect("sh");
        let (out, err) = text(&o);
        assert_eq!(o.status.success(), !strict, "strict {strict}: {out}\n{err}");
        assert!(out.contains("| ib_send_lat failed: perftest's run, not fabric's"), "{out}");
        let ours = out.lines().find(|l| l.starts_with("COMPARE ") && l.contains("| fi_send_lat "));
        assert!(ours.is_some_and(|l| l.ends_with(" usec")), "{out}");
    }
    let _ = std::fs::remove_dir_all(&fake);
}

/// The manual page of the eight tools renders without warnings, each name
/// reaching it (the seven others are `.so` stubs), and names every option the
/// tools take.
#[test]
fn manual_page() {
    let man_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    if Command::new("man").arg("--version").output().is_err() {
        fabric_testkit::skip("man", "man is not installed (Debian's man-db)");
        return;
    }
    for t in TESTS {
        let page = format!("man1/fi_{t}.1");
        let o = Command::new("man")
            .args(["--warnings", "-l", &page])
            .current_dir(&man_dir)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .expect("man");
        let (out, err) = text(&o);
        assert!(o.status.success() && err.is_empty(), "{page}: {err}");
        // Plain text: drop the overstrikes of bold and underlined characters
        // (c BS c, _ BS c) and read hyphens as hyphens.
        let mut plain = String::new();
        for c in out.chars() {
            match c {
                '\u{8}' => {
                    plain.pop();
                }
                '\u{2010}' | '\u{2212}' => plain.push('-'),
                c => plain.push(c),
            }
        }
        let out = plain;
        assert!(out.contains("FI_SEND_LAT(1)") && out.contains(&format!("fi_{t}")), "{page}:\n{out}");
        for opt in [
            "--all",
            "--ib-dev",
            "--iters",
            "--noPeak",
            "--port",
            "--rdma_cm",
            "--size",
            "--tx-depth",
            "--output",
            "--report_gbits",
            "--provider",
            "--gid-index",
            "--bidirectional",
            "--report-both",
        ] {
            assert!(out.contains(opt), "{page} lacks {opt}:\n{out}");
        }
    }
}

/// A line's shape: what a script may rely on. Rules, headers, the box and blank
/// lines as they are; banner fields with their values as `V` (names, spacing and
/// tabs kept); result rows as the kind of each field (`I` an integer, `D2` a
/// number with two decimals); a number alone as `N` and its decimals.
fn shape(line: &str) -> String {
    let num = |w: &str| -> Option<String> {
        if w.chars().all(|c| c.is_ascii_digit()) {
            Some("I".into())
        } else {
            let (a, b) = w.split_once('.')?;
            (a.chars().all(|c| c.is_ascii_digit()) && b.chars().all(|c| c.is_ascii_digit()))
                .then(|| format!("D{}", b.len()))
        }
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    if line == RESULT_LINE || line.starts_with(" #bytes") || words.is_empty() || line.starts_with('*') {
        return line.to_string();
    }
    if let Some(kinds) = words.iter().map(|w| num(w)).collect::<Option<Vec<String>>>() {
        return if words.len() == 1 { format!("N{}", kinds[0]) } else { format!("ROW {}", kinds.join(" ")) };
    }
    if line.starts_with(" local address:") || line.starts_with(" remote address:") {
        return line.split(':').next().unwrap().to_string() + ": V";
    }
    // Banner fields: "name : value" pairs, tab-separated.
    line.split("\t\t")
        .map(|f| f.split_once(": ").map_or(f.to_string(), |(k, _)| format!("{k}: V")))
        .collect::<Vec<_>>()
        .join("\t\t")
}

/// The shape of perftest's output, less what has no counterpart over a provider:
/// its `GID index` field and `GID:` address lines (RoCE), and the stray rule
/// perftest prints when it disables inline data before the server's box.
fn perftest_shape(text: &str) -> Vec<String> {
    let mut lines: Vec<&str> =
        text.lines().filter(|l| !l.starts_with(" GID index") && !l.starts_with(" GID:")).collect();
    if lines.len() > 1 && lines[0] == RESULT_LINE && lines[1].is_empty() {
        lines.remove(0);
    }
    lines.into_iter().map(shape).collect()
}

/// Debian's perftest 6.06 over Soft-RoCE (recorded in the verbs guest, standard
/// output) and ours over tcp, with the same options: line for line the same
/// shape, and the same figure read by the perftest-parsing script.
#[test]
fn same_shape_as_recorded_perftest() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/perftest-6.06-rxe");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("perftest-compare.sh");
    let cases: &[(&str, &str, &[&str], bool)] = &[
        ("ib_send_lat-R.client.txt", "send_lat", &["-R", "-n", "1000"], true),
        ("ib_send_bw-R.client.txt", "send_bw", &["-R", "-n", "1000"], true),
        ("ib_send_bw-R-report_gbits.client.txt", "send_bw", &["-R", "-n", "1000", "--report_gbits"], true),
        ("ib_send_lat-R-output_latency.client.txt", "send_lat", &["-R", "-n", "1000", "--output=latency"], true),
        ("ib_write_bw-R.server.txt", "write_bw", &["-R", "-n", "200"], false),
        ("ib_read_lat-R.server.txt", "read_lat", &["-R", "-n", "200"], false),
        ("ib_send_lat-R-D3.server.txt", "send_lat", &["-R", "-D", "1", "-n", "200"], false),
        // -b: both sides print the summed row; --report-both each side's too.
        ("ib_send_bw-b-R.client.txt", "send_bw", &["-b", "-R", "-n", "1000"], true),
        ("ib_write_bw-b-R.server.txt", "write_bw", &["-b", "-R", "-n", "200"], false),
        ("ib_atomic_bw-b-R.server.txt", "atomic_bw", &["-b", "-R", "-n", "200"], false),
        ("ib_send_bw-b-R-report-both.server.txt", "send_bw", &["-b", "-R", "-n", "500", "--report-both"], false),
        ("ib_write_bw-b-R-report-both.client.txt", "write_bw", &["-b", "-R", "-n", "200", "--report-both"], true),
        ("ib_write_bw-b-R-D2.client.txt", "write_bw", &["-b", "-R", "-D", "1", "-n", "100"], true),
        ("ib_send_bw-b-R-D2.server.txt", "send_bw", &["-b", "-R", "-D", "1", "-n", "100"], false),
    ];
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("perftest-shape-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (file, test, args, client) in cases {
        let theirs = std::fs::read_to_string(data.join(file)).unwrap();
        let (s, c) = run_pair(test, "tcp", args);
        let (ours, _) = text(if *client { &c } else { &s });
        let (a, b) = (perftest_shape(&theirs), ours.lines().map(shape).collect::<Vec<_>>());
        assert_eq!(a, b, "{file} against {test} {args:?}:\n{theirs}\n--- ours:\n{ours}");
        // The script's parser reads the same kind of figure from both.
        let ours_file = tmp.join(file);
        std::fs::write(&ours_file, &ours).unwrap();
        let o = Command::new("sh").arg(&script).arg("--parse").arg(data.join(file)).arg(&ours_file).output().unwrap();
        let (out, err) = text(&o);
        let units: Vec<&str> = out.lines().map(|l| l.split_once(' ').map_or("", |(_, u)| u)).collect();
        assert_eq!(units.len(), 2, "{out}{err}");
        assert_eq!(units[0], units[1], "{file}: {out}");
        assert_eq!(o.status.success(), !file.starts_with("ib_read_lat"), "{file}: {out}{err}");
    }
}

/// A result row's numbers: size, iterations, peak, average, message rate.
fn row_numbers(line: &str) -> Vec<f64> {
    let row: Vec<f64> = line.split_whitespace().map(|w| w.parse().unwrap_or_else(|_| panic!("{line:?}"))).collect();
    assert_eq!(row.len(), 5, "{line:?}");
    row
}

/// `-b` as perftest's: both sides post the operation and print the row of both
/// directions summed; with `--report-both`, each side's row too, the client's
/// local row the server's remote one and the other way round.
fn check_bidirectional(test: &str, prov: &str) {
    let send = test.starts_with("send");
    let size = if test.starts_with("atomic") { 8 } else { 4096 };
    let size_arg = size.to_string();
    let n = 200u64;
    let (s, c) = run_pair(test, prov, &["-b", "--report-both", "-n", "200", "-s", &size_arg, "-t", "32"]);
    let title = title(test).replace(" BW Test", " Bidirectional BW Test");
    let mut sides = Vec::new();
    for (o, client) in [(&c, true), (&s, false)] {
        let (out, _) = text(o);
        let lines: Vec<&str> = out.lines().collect();
        let lines = if client { &lines[..] } else { &lines[4..] };
        let at = check_banner_of(lines, &title, prov, client, send, true, true);
        let rest = &lines[at..];
        // perftest's --report-both, line for line.
        assert_eq!(rest.len(), 15, "{out}");
        for (k, want) in [(0, HEADER_BW), (2, RESULT_LINE), (3, ""), (4, " Local results: "), (5, RESULT_LINE)] {
            assert_eq!(rest[k], want, "line {k}: {out}");
        }
        for (k, want) in [(6, HEADER_BW), (8, RESULT_LINE), (9, ""), (10, " Remote results: "), (11, RESULT_LINE)] {
            assert_eq!(rest[k], want, "line {k}: {out}");
        }
        assert_eq!((rest[12], rest[14]), (HEADER_BW, RESULT_LINE), "{out}");
        let (sum, local, remote) = (row_numbers(rest[1]), row_numbers(rest[7]), row_numbers(rest[13]));
        for r in [&sum, &local, &remote] {
            assert_eq!((r[0], r[1]), (size as f64, n as f64), "{out}");
        }
        // Each direction carried its messages: a rate of its own, and an average
        // that is that rate's bytes (which can print as 0.00 MB/s when a loaded
        // machine runs 8-byte atomics at a few hundred a second).
        for r in [&local, &remote] {
            assert!(r[4] > 0.0, "{out}");
            let want = r[4] * 1e6 * size as f64 / 1048576.0;
            assert!((r[3] - want).abs() <= 0.01 + want * 0.001, "{out}");
        }
        // The summed row is the sum of the two (to the printed rounding) ...
        for k in 2..4 {
            assert!((sum[k] - local[k] - remote[k]).abs() <= 0.011, "column {k}: {out}");
        }
        assert!((sum[4] - local[4] - remote[4]).abs() <= 0.0000011, "{out}");
        // ... and its average the message rate's bytes (MB of 2^20 bytes).
        let want = sum[4] * 1e6 * size as f64 / 1048576.0;
        assert!((sum[3] - want).abs() <= 0.01 + want * 0.001, "{out}");
        sides.push((rest[1].to_string(), rest[7].to_string(), rest[13].to_string()));
    }
    // Both sides print the same sum; what one measured is the other's remote.
    assert_eq!(sides[0].0, sides[1].0);
    assert_eq!((&sides[0].1, &sides[0].2), (&sides[1].2, &sides[1].1));
}

#[test]
fn bidirectional_over_tcp() {
    for t in ["send_bw", "write_bw", "read_bw", "atomic_bw"] {
        check_bidirectional(t, "tcp");
    }
}

#[test]
fn bidirectional_over_udp() {
    for t in ["send_bw", "write_bw"] {
        check_bidirectional(t, "udp");
    }
}

#[test]
fn bidirectional_over_shm() {
    for t in ["send_bw", "write_bw", "read_bw", "atomic_bw"] {
        check_bidirectional(t, "shm");
    }
}

#[test]
fn bidirectional_sizes_duration_and_mismatch() {
    // -a -b: one summed row per size on both sides, the same.
    let (s, c) = run_pair("send_bw", "tcp", &["-b", "-a", "-n", "5", "-t", "4", "-r", "8"]);
    let sizes: Vec<usize> = (1..=23).map(|i| 1 << i).collect();
    let mut tables = Vec::new();
    for (o, client) in [(&c, true), (&s, false)] {
        let (out, _) = text(o);
        let lines: Vec<&str> = out.lines().collect();
        let lines = if client { &lines[..] } else { &lines[4..] };
        let at = check_banner_of(lines, "Send Bidirectional BW Test", "tcp", client, true, true, true);
        check_table(&lines[at..], HEADER_BW, &sizes, 5);
        tables.push(lines[at..].join("\n"));
    }
    assert_eq!(tables[0], tables[1]);
    // -D -b: write tests print the sum on both sides with the same iterations;
    // send tests each side's row, counting what it sent and received (perftest's
    // run_iter_bi), twice the client's count here.
    let (s, c) = run_pair("write_bw", "tcp", &["-b", "-D", "1", "-n", "20", "-s", "4096"]);
    let row = |o: &Output| -> Vec<String> {
        let (out, _) = text(o);
        let line = out.lines().find(|l| l.starts_with(" 4096 ")).unwrap_or_else(|| panic!("{out}")).to_string();
        line.split_whitespace().map(String::from).collect()
    };
    let (rc, rs) = (row(&c), row(&s));
    assert_eq!(rc, rs);
    assert_eq!(rc[2], "0.00", "no peak in duration mode: {rc:?}");
    let (s, c) = run_pair("send_bw", "tcp", &["-b", "-D", "1", "-n", "20", "-s", "4096"]);
    let (rc, rs) = (row(&c), row(&s));
    assert_eq!(rc, rs);
    let iters: u64 = rc[1].parse().unwrap();
    assert!(iters >= 10 && iters % 2 == 0, "{rc:?}");
    // One side with -b, the other without: both fail and say so.
    for (sb, cb) in [(true, false), (false, true)] {
        let p = port();
        let mut sargs = vec!["--provider", "tcp", "-p", &p, "-n", "20"];
        if sb {
            sargs.push("-b");
        }
        let server = spawn("write_bw", &sargs);
        let mut cargs = vec!["--provider", "tcp", "-p", &p, "-n", "20", "--connect-timeout", "10"];
        if cb {
            cargs.push("-b");
        }
        cargs.push("127.0.0.1");
        let c = wait_output(spawn("write_bw", &cargs), Duration::from_secs(60));
        let s = wait_output(server, Duration::from_secs(30));
        let want = if sb { "the server runs with -b" } else { "the client runs with -b" };
        for (o, who) in [(&c, "client"), (&s, "server")] {
            let (out, err) = text(o);
            assert_eq!(o.status.code(), Some(1), "{who}: {out}{err}");
            assert!(err.contains(want) && err.contains("give both the same options"), "{who}: {err}");
        }
    }
}

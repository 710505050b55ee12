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
use std::sync::atomic::{AtomicU16, Ordering};
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

/// A distinct control port per run (tests run in parallel), apart from the other
/// tests' ranges (30000-59999).
fn port() -> String {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    (60000 + (std::process::id() % 200) as u16 * 25 + NEXT.fetch_add(1, Ordering::SeqCst)).to_string()
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
    assert_success(&c, &format!("{test} client"));
    assert_success(&s, &format!("{test} server"));
    (s, c)
}

/// perftest's banner, line by line: the rule, the title, the fields in
/// perftest's order with its spacing and tabs, the rule.
fn check_banner(lines: &[&str], title: &str, prov: &str, client: bool, send: bool, bw: bool) -> usize {
    assert_eq!(lines[0], RESULT_LINE);
    assert_eq!(lines[1], format!("                    {title}"));
    assert!(lines[2].starts_with(" Dual-port       : OFF\t\tDevice         : "), "{:?}", lines[2]);
    assert_eq!(lines[3], format!(" Number of qps   : 1\t\tTransport type : {prov}"));
    assert!(
        lines[4].starts_with(" Connection type : ") && lines[4].ends_with("\t\tUsing SRQ      : OFF"),
        "{:?}",
        lines[4]
    );
    let mut i = 5;
    let mut field = |name: &str, shown: bool| {
        if shown {
            assert!(lines[i].starts_with(&format!(" {name:<16}: ")), "line {i}: {:?} is not {name}", lines[i]);
            i += 1;
        }
    };
    field("TX depth", client);
    field("RX depth", send && !client);
    field("CQ Moderation", bw);
    field("Mtu", true);
    field("Link type", true);
    field(
        if title.starts_with("Send") || title.starts_with("RDMA_Write") { "Max inline data" } else { "Outstand reads" },
        true,
    );
    assert!(lines[i] == " rdma_cm QPs\t : OFF" || lines[i] == " rdma_cm QPs\t : ON", "{:?}", lines[i]);
    assert_eq!(lines[i + 1], " Data ex. method : Ethernet");
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
    if send {
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
    let (_, c) = run_pair("write_bw", "tcp", &["--all", "-n", "5", "--rdma_cm"]);
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
    assert_eq!(lines[5], " TX depth        : 16");
    check_table(&lines[at..], HEADER_BW_G, &[4096], 300);
    let row: Vec<&str> = lines[at + 1].split_whitespace().collect();
    assert_eq!(row[2], "0.00", "{row:?}");
    // The same run in MB/sec: the same rate in the other unit (8 Gb/s is
    // 953.67 MB/s), within what two runs differ by.
    let (_, c) = run_pair("send_bw", "tcp", &["-s", "4096", "-n", "300", "-t", "16"]);
    let (out, _) = text(&c);
    let mb: f64 =
        out.lines().find(|l| l.starts_with(" 4096 ")).unwrap().split_whitespace().nth(3).unwrap().parse().unwrap();
    let gb: f64 = row[3].parse().unwrap();
    assert!(mb > 0.0 && gb > 0.0);
    let ratio = mb / (gb * 1e9 / 8.0 / 1048576.0);
    assert!((0.05..20.0).contains(&ratio), "MB/sec {mb} against Gb/sec {gb}");
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
        ("send_bw", &["-b"][..], "-b (--bidirectional) is not supported"),
        ("send_lat", &["-D", "5"][..], "-D (--duration) is not supported"),
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
        ] {
            assert!(out.contains(opt), "{page} lacks {opt}:\n{out}");
        }
    }
}

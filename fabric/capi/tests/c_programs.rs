//! C programs built for libfabric 1.17 run over this crate's `libfabric.so.1`
//! (found beside the test binary's directory, in `target/<profile>/`), unchanged:
//! Debian's `fi_pingpong` as two processes (server and client) for each provider
//! and endpoint type, messages and tagged, every size, data checked; and
//! `lf_inproc` (the team's `../shared/tools/inproc/lf_inproc.c`, beside the
//! checkout; area `shared` when it is not there), compiled against the system's `<rdma/*.h>`, one
//! thread driving two RDM endpoints; and `tests/c/objects.c`, the object calls
//! one by one (bad input, tagged with data, cancel, peek/claim, wait objects,
//! counters, MR, RMA, atomics, user EQ events, AV insertsvc/insertsym, close
//! order); and `tests/c/alltoall.c`, eight endpoints of
//! one process each sending to every other at once; and `tests/c/waitset.c`,
//! wait sets and poll sets over two endpoints of one thread; and `tests/c/cm.c`,
//! connection management over tcp's MSG endpoints. Each skips (`fabric_testkit::skip`, area
//! `libfabric`) when the program or the headers are missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PINGPONG: &str = "/usr/bin/fi_pingpong";

/// `target/<profile>/`, where the build leaves `libfabric.so.1`.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
    assert!(dir.join("libfabric.so.1").exists(), "no libfabric.so.1 in {}", dir.display());
    dir
}

/// Wait for `child` up to `limit`, killing it past that.
fn wait(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait_with_output")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Run `fi_pingpong ARGS -S all -c` as server and client over our library.
fn pingpong(args: &[&str]) {
    if !Path::new(PINGPONG).exists() {
        fabric_testkit::skip("libfabric", format!("{PINGPONG} is not installed (package libfabric-bin)"));
        return;
    }
    let lib = lib_dir();
    let run = |extra: &[String]| {
        Command::new(PINGPONG)
            .args(args)
            .args(["-S", "all", "-c"])
            .args(extra)
            .env("LD_LIBRARY_PATH", &lib)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fi_pingpong")
    };
    let port = fabric_testkit::port().to_string();
    let server = run(&["-B".into(), port.clone()]);
    // The client retries while the server is not listening yet.
    let mut client_out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let o = wait(run(&["-P".into(), port.clone(), "127.0.0.1".into()]), Duration::from_secs(120));
        let refused = String::from_utf8_lossy(&o.stderr).contains("failed to connect");
        client_out = Some(o);
        if !refused {
            break;
        }
    }
    let client = client_out.expect("client ran");
    let server = wait(server, Duration::from_secs(30));
    assert!(client.status.success(), "fi_pingpong {args:?} client:\n{}\nserver:\n{}", text(&client), text(&server));
    assert!(server.status.success(), "fi_pingpong {args:?} server:\n{}", text(&server));
    let out = String::from_utf8_lossy(&client.stdout);
    assert!(out.contains("usec/xfer") && out.lines().count() > 2, "no results: {}", text(&client));
}

#[test]
fn pingpong_tcp_rdm_msg() {
    pingpong(&["-p", "tcp", "-e", "rdm"]);
}

#[test]
fn pingpong_tcp_rdm_tagged() {
    pingpong(&["-p", "tcp", "-e", "rdm", "-m", "tagged"]);
}

#[test]
fn pingpong_tcp_msg_msg() {
    pingpong(&["-p", "tcp", "-e", "msg"]);
}

#[test]
fn pingpong_tcp_msg_tagged() {
    pingpong(&["-p", "tcp", "-e", "msg", "-m", "tagged"]);
}

#[test]
fn pingpong_udp_dgram_msg() {
    pingpong(&["-p", "udp", "-e", "dgram"]);
}

#[test]
fn pingpong_udp_rdm_msg() {
    pingpong(&["-p", "udp", "-e", "rdm"]);
}

#[test]
fn pingpong_udp_rdm_tagged() {
    pingpong(&["-p", "udp", "-e", "rdm", "-m", "tagged"]);
}

#[test]
fn pingpong_shm_rdm_msg() {
    pingpong(&["-p", "shm", "-e", "rdm"]);
}

#[test]
fn pingpong_shm_rdm_tagged() {
    pingpong(&["-p", "shm", "-e", "rdm", "-m", "tagged"]);
}

/// `tests/c/<src>` built against the system's headers and our library, as
/// `name` (one binary per test: tests run in parallel).
fn build(src: &str, name: &str) -> Option<PathBuf> {
    build_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(src), name)
}

/// [`build`] of a source anywhere.
fn build_from(src: &Path, name: &str) -> Option<PathBuf> {
    if !Path::new("/usr/include/rdma/fabric.h").exists() {
        fabric_testkit::skip("libfabric", "no <rdma/fabric.h> (package libfabric-dev)");
        return None;
    }
    let lib = lib_dir();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(src)
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libfabric.so.1")
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "{cc} {}: {}", src.display(), text(&o));
    Some(out)
}

fn inproc(prov: &str) {
    // The team's program, beside the checkout (as CI has it).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/inproc/lf_inproc.c");
    if !src.exists() {
        fabric_testkit::skip("shared", format!("no {} (../shared beside the checkout)", src.display()));
        return;
    }
    let Some(prog) = build_from(&src, &format!("lf_inproc_{prov}")) else { return };
    for size in ["0", "64", "65536"] {
        let child = Command::new(&prog)
            .args([prov, "300", size])
            .env("LD_LIBRARY_PATH", lib_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lf_inproc");
        let o = wait(child, Duration::from_secs(120));
        assert!(o.status.success(), "lf_inproc {prov} {size}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("usec per round trip"), "{}", text(&o));
    }
}

#[test]
fn lf_inproc_shm() {
    inproc("shm");
}

#[test]
fn lf_inproc_tcp() {
    inproc("tcp");
}

#[test]
fn lf_inproc_udp() {
    inproc("udp");
}

/// Run a program built by [`build`] over our library, with `args`, for up to
/// two minutes.
fn run_built(prog: &Path, args: &[&str]) -> Output {
    let child = Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", prog.display()));
    wait(child, Duration::from_secs(120))
}

/// `tests/c/objects.c` over `prov`: it prints `ok` when every check passed.
fn objects(prov: &str) {
    let Some(prog) = build("objects.c", &format!("objects_{prov}")) else { return };
    let o = run_built(&prog, &[prov]);
    assert!(o.status.success(), "objects {prov}: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "ok"), "{}", text(&o));
    if out.contains("rma: absent") {
        fabric_testkit::absent(prov, "no FI_RMA|FI_ATOMIC RDM entry: RMA and atomics not checked");
    }
}

#[test]
fn objects_shm() {
    objects("shm");
}

#[test]
fn objects_tcp() {
    objects("tcp");
}

#[test]
fn objects_udp() {
    objects("udp");
}

/// `tests/c/alltoall.c` over `prov`: 8 endpoints, 10 rounds.
fn alltoall(prov: &str) {
    let Some(prog) = build("alltoall.c", &format!("alltoall_{prov}")) else { return };
    let o = run_built(&prog, &[prov, "8", "10"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok"), "alltoall {prov}: {}", text(&o));
}

#[test]
fn alltoall_tcp() {
    alltoall("tcp");
}

#[test]
fn alltoall_udp() {
    alltoall("udp");
}

/// `tests/c/cm.c` over tcp's MSG endpoints: connection management and its
/// events (setname, connection data, reject, accept, getpeer, shutdown).
#[test]
fn cm_tcp() {
    let Some(prog) = build("cm.c", "cm_tcp") else { return };
    let o = run_built(&prog, &["tcp"]);
    assert!(o.status.success(), "cm tcp: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "ok") && !out.contains("absent"), "{}", text(&o));
}

/// `tests/c/waitset.c` over `prov`: wait sets and poll sets (`fi_wait_open`,
/// `FI_WAIT_SET` members, `fi_wait`, `FI_GETWAIT` after `fi_trywait`,
/// `fi_poll_open`, `fi_poll`), bad input and close ordering.
fn waitset(prov: &str) {
    let Some(prog) = build("waitset.c", &format!("waitset_{prov}")) else { return };
    let o = run_built(&prog, &[prov]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).lines().any(|l| l == "ok"),
        "waitset {prov}: {}",
        text(&o)
    );
}

#[test]
fn waitset_tcp() {
    waitset("tcp");
}

#[test]
fn waitset_shm() {
    waitset("shm");
}

#[test]
fn waitset_udp() {
    waitset("udp");
}

/// `tests/c/multicast.c` over udp's DGRAM endpoints: `fi_join` (and its
/// `FI_JOIN_COMPLETE`), sends to `fi_mc_addr` with `FI_MULTICAST` and by the
/// endpoint's default, leaving by `fi_close`.
#[test]
fn multicast_udp() {
    let Some(prog) = build("multicast.c", "multicast_udp") else { return };
    let o = run_built(&prog, &["udp"]);
    assert!(o.status.success(), "multicast udp: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "ok"), "{}", text(&o));
    if let Some(line) = out.lines().find(|l| l.starts_with("multicast: refused")) {
        fabric_testkit::skip("multicast", line.to_string());
    } else {
        assert!(!out.contains("absent") && out.contains("leave: ok"), "{}", text(&o));
    }
}

/// `tests/c/semantics.c` over `prov`: libfabric's man-page semantics, one
/// check after another (each prints `<check>: ok`, or `absent` where the
/// provider's entry lacks the capability), then `ok`.
fn semantics(prov: &str) {
    let Some(prog) = build("semantics.c", &format!("semantics_{prov}")) else { return };
    let o = run_built(&prog, &[prov]);
    assert!(o.status.success(), "semantics {prov}: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "ok"), "{}", text(&o));
    for line in out.lines().filter(|l| l.ends_with(": absent")) {
        fabric_testkit::absent(prov, format!("semantics.c {line}"));
    }
}

#[test]
fn semantics_shm() {
    semantics("shm");
}

#[test]
fn semantics_tcp() {
    semantics("tcp");
}

#[test]
fn semantics_udp() {
    semantics("udp");
}

//! Two hosts: Open MPI 4.1's ofi MTL over our `libfabric.so.1` and our tcp
//! provider, with the ranks in two network namespaces joined by a veth pair.
//!
//! The "hosts" are network namespaces `fabric-a-<pid>-<n>` and
//! `fabric-b-<pid>-<n>`, each with `lo` up and one end of a veth pair, named
//! [`IFACE`] in both, addressed 10.77.0.1/24 and 10.77.0.2/24 (private to the
//! namespaces: nothing else sees that subnet). mpirun itself runs in namespace a
//! (its daemons must reach it, and only the veth joins the namespaces); the
//! hostfile lists both namespaces by name, neither of them mpirun's host name,
//! so mpirun starts one `orted` per "host" through its rsh launch agent,
//! `tests/mpi/netns_agent.sh`, which runs the daemon inside the namespace of
//! that name (and a UTS namespace with that host name). Open MPI's own traffic
//! (oob, btl) is held to [`IFACE`]; our tcp provider to the same interface by
//! `FI_TCP_IFACE` (the ranks' `fi_getinfo` has no node or source address: the
//! provider offers an entry per interface, and that variable keeps only the
//! veth's).
//!
//! `mpi_check pt2pt` runs with four ranks mapped by node (0 and 2 in a, 1 and 3
//! in b) and must pass; every rank must report our library; and the veth's byte
//! counters in namespace a must have grown, both ways, by at least what the
//! ring of point-to-point messages moves between the namespaces: with that
//! mapping every ring step crosses, twice in each direction.

#[path = "mpi/common.rs"]
mod common;

use common::{open_mpi, profile_dir, program};
use std::fs::File;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The veth's name in both namespaces.
const IFACE: &str = "fabric0";
/// The namespaces' addresses on the veth, a's first.
const ADDRS: [&str; 2] = ["10.77.0.1/24", "10.77.0.2/24"];
/// Ranks per namespace.
const PER_HOST: usize = 2;
/// How long mpirun may take before it is killed and the test fails (a run
/// takes about a second; the machines are shared).
const WATCHDOG: Duration = Duration::from_secs(60);
/// What one step of `mpi_check pt2pt`'s ring moves from each rank to the next:
/// one message of each size 0, 1, 2, 4, ... 4 MiB (`pt2pt()` in
/// `tests/mpi/mpi_check.c`), 8 MiB - 1 in all.
const RING_BYTES: u64 = (8 << 20) - 1;

/// One job at a time, each in namespaces of its own.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `ip ARGS`, which must succeed.
fn ip(args: &[&str]) -> String {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(o.status.success(), "ip {}: {}", args.join(" "), text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Two network namespaces joined by a veth pair; dropped, it ends what still
/// runs in them and deletes them (and with them the veth).
struct Hosts {
    /// The namespaces (host names), a's first; those created so far.
    names: Vec<String>,
}

impl Hosts {
    /// Creates both namespaces and the veth between them, or says why this
    /// machine does not let us (`Err`: not root, namespaces refused).
    fn create() -> Result<Hosts, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        if Command::new("ip").arg("-V").output().map_or(true, |o| !o.status.success()) {
            return Err("no ip (apt-get install iproute2)".into());
        }
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut hosts = Hosts { names: Vec::new() };
        for side in ["a", "b"] {
            let name = format!("fabric-{side}-{}-{n}", std::process::id());
            let mut add = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip");
            if !add.status.success() && text(&add).contains("File exists") {
                // Left by a killed run whose pid we now have: ours to remove.
                let _ = Command::new("ip").args(["netns", "del", &name]).output();
                add = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip");
            }
            if !add.status.success() {
                let why = text(&add);
                if why.contains("Operation not permitted") || why.contains("Permission denied") {
                    return Err(format!("ip netns add refused: {}", why.trim()));
                }
                panic!("ip netns add {name}: {why}");
            }
            hosts.names.push(name);
        }
        let [a, b] = [hosts.names[0].as_str(), hosts.names[1].as_str()];
        ip(&["link", "add", IFACE, "netns", a, "type", "veth", "peer", "name", IFACE, "netns", b]);
        for (ns, addr) in [a, b].into_iter().zip(ADDRS) {
            ip(&["-n", ns, "addr", "add", addr, "dev", IFACE]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", IFACE, "up"]);
        }
        Ok(hosts)
    }

    /// The veth's received and sent byte counters in namespace `ns`.
    fn counters(&self, ns: &str) -> (u64, u64) {
        let read = |what: &str| -> u64 {
            let path = format!("/sys/class/net/{IFACE}/statistics/{what}_bytes");
            // `ip netns exec` mounts the namespace's own sysfs for the command.
            let out = ip(&["netns", "exec", ns, "cat", &path]);
            out.trim().parse().unwrap_or_else(|_| panic!("{path} in {ns}: {out:?}"))
        };
        (read("rx"), read("tx"))
    }

    /// Ends whatever still runs in the namespaces (a job killed by the
    /// watchdog leaves daemons and ranks there: all started by this test).
    fn kill_leftovers(&self) {
        for ns in &self.names {
            let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() else { continue };
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).output();
            }
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.kill_leftovers();
        for ns in &self.names {
            // Deleting a namespace deletes its end of the veth, and so the pair.
            let o = Command::new("ip").args(["netns", "del", ns]).output();
            if !o.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("could not delete network namespace {ns}: {o:?}");
            }
        }
    }
}

/// Runs `mpirun` in namespace a with `args`, killing it (and what it started)
/// if it outlives [`WATCHDOG`]; its output goes to files, so a daemon left
/// holding it cannot stall the test. Returns the exit success and the output.
fn run_watched(hosts: &Hosts, args: &[String]) -> (bool, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
    let base = dir.join(format!("mpirun-hosts-{}", std::process::id()));
    let (out_path, err_path) = (base.with_extension("out"), base.with_extension("err"));
    let mut child = Command::new("ip")
        .args(["netns", "exec", &hosts.names[0], "mpirun"])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(std::process::Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("run ip netns exec mpirun");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let _ = child.wait();
            hosts.kill_leftovers();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!(
        "--- stdout\n{}--- stderr\n{}",
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    match status {
        Some(s) => (s.success(), output),
        None => panic!("mpirun still running after {WATCHDOG:?}: killed\n{output}"),
    }
}

/// A `--tag-output` line, `[job,rank]<stdout>:text`: the rank and the text.
fn tagged(line: &str) -> Option<(usize, &str)> {
    let (tag, rest) = line.strip_prefix('[')?.split_once("]<stdout>:")?;
    Some((tag.rsplit(',').next()?.parse().ok()?, rest))
}

/// The first job map `--display-map` prints: each rank's node.
fn job_map(output: &str) -> Vec<(usize, String)> {
    let mut map = Vec::new();
    let mut node = None;
    for line in output.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Data for node:") {
            node = rest.split_whitespace().next().map(str::to_string);
        } else if let Some(rest) = line.split_once("Process rank:").map(|(_, r)| r) {
            let rank = rest.split_whitespace().next().and_then(|r| r.parse().ok()).expect("a rank number");
            map.push((rank, node.clone().expect("a node before its ranks")));
        } else if line.starts_with("=====") && !map.is_empty() {
            break;
        }
    }
    map
}

#[test]
fn ofi_mtl_over_tcp_between_two_namespaces() {
    if open_mpi().is_none() {
        return;
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let hosts = match Hosts::create() {
        Ok(h) => h,
        Err(why) => return fabric_testkit::skip("root", why),
    };
    let lib = profile_dir();
    assert!(lib.join("libfabric.so.1").is_file(), "libfabric.so.1 not built in {}", lib.display());
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/netns_agent.sh");
    // Open MPI splits the agent's value at blanks (it may carry arguments).
    assert!(!agent.to_string_lossy().contains(char::is_whitespace), "a blank in {}", agent.display());
    let hostfile = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi").join(format!("hosts-{}", std::process::id()));
    std::fs::create_dir_all(hostfile.parent().unwrap()).unwrap();
    std::fs::write(&hostfile, hosts.names.iter().map(|n| format!("{n} slots={PER_HOST}\n")).collect::<String>())
        .unwrap();
    let np = 2 * PER_HOST;
    let args: Vec<String> = [
        "--allow-run-as-root",
        "--hostfile",
        &hostfile.to_string_lossy(),
        "-np",
        &np.to_string(),
        "--map-by",
        "node",
        "--display-map",
        "--tag-output",
        "--mca",
        "plm_rsh_agent",
        &agent.to_string_lossy(),
        "--mca",
        "oob_tcp_if_include",
        IFACE,
        "--mca",
        "btl_tcp_if_include",
        IFACE,
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        "tcp",
        "-x",
        &format!("LD_LIBRARY_PATH={}", lib.display()),
        "-x",
        &format!("FI_TCP_IFACE={IFACE}"),
        &program().to_string_lossy(),
        "pt2pt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    let (rx0, tx0) = hosts.counters(&hosts.names[0]);
    let (ok, output) = run_watched(&hosts, &args);
    let (rx1, tx1) = hosts.counters(&hosts.names[0]);
    let _ = std::fs::remove_file(&hostfile);
    assert!(ok, "mpirun {}:\n{output}", args.join(" "));

    // Every rank passed and mapped our library.
    let mut passed = vec![false; np];
    let mut ours = vec![false; np];
    for (rank, text) in output.lines().filter_map(tagged) {
        assert!(rank < np, "rank {rank} of {np}:\n{output}");
        if text == format!("rank {rank}: ok") {
            passed[rank] = true;
        }
        if let Some(mapped) = text.strip_prefix("libfabric: ") {
            assert!(mapped.starts_with(&*lib.to_string_lossy()), "rank {rank} mapped {mapped}, not ours:\n{output}");
            ours[rank] = true;
        }
    }
    assert!(passed.iter().all(|&p| p), "not every rank passed:\n{output}");
    assert!(ours.iter().all(|&p| p), "not every rank reported its libfabric:\n{output}");

    // Ranks alternate between the namespaces.
    let map = job_map(&output);
    assert_eq!(map.len(), np, "job map:\n{output}");
    for (rank, node) in &map {
        assert_eq!(node, &hosts.names[rank % 2], "rank {rank}:\n{output}");
    }

    // Each ring step crossed the veth: rank r (in namespace r % 2) sends to
    // r + 1 (in the other), so two steps leave a and two enter it.
    let (rx, tx) = (rx1 - rx0, tx1 - tx0);
    println!("{np} ranks on 2 namespaces: {IFACE} in {} received {rx} B, sent {tx} B", hosts.names[0]);
    assert!(tx >= 2 * RING_BYTES, "{IFACE} in a sent only {tx} B, want >= {}", 2 * RING_BYTES);
    assert!(rx >= 2 * RING_BYTES, "{IFACE} in a received only {rx} B, want >= {}", 2 * RING_BYTES);
}

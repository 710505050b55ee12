//! Open MPI 4.1 (Debian's `openmpi-bin`, `libopenmpi-dev`) over our
//! `libfabric.so.1`: its ofi MTL runs `tests/mpi/mpi_check.c` with 2, 4 and 8
//! ranks (point-to-point 0 B to 4 MiB with data checks, wildcards, probe,
//! iprobe, mprobe, Ssend, cancel, collectives), and the program reports which
//! libfabric it mapped, which must be ours.
//!
//! One-sided MPI (`tests/mpi/osc_check.c`: Put, Get, Accumulate,
//! Fetch_and_op, Compare_and_swap under fences and locks, data checked) runs
//! through Open MPI's osc rdma over its ofi BTL ([`ONE_SIDED`]) with 2 and 4
//! ranks over tcp (and 2 over udp); with the BTL list cut to `self` the same
//! job must fail, so a pass cannot come from another component. Over libfabric
//! 1.17 tcp cannot carry it: its only tcp RDM entries are `tcp;ofi_rxm`, which
//! the ofi BTL refuses by name (`ofi_rxm` does not complete at delivery); its
//! `net` provider answers `fi_fetch_atomic` with `-FI_ENOSYS`; `sockets` passes.
//!
//! Over libfabric 1.17 itself the same program passes with the same command
//! (`mpirun --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp`), but
//! for one case: an `MPI_Ssend` found by `MPI_Probe` and then received makes Open
//! MPI segfault in `MPI_Recv` over libfabric 1.17's udp (`udp;ofi_rxd`); over ours
//! it passes.

#[path = "mpi/common.rs"]
mod common;

use common::{open_mpi, profile_dir, program};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One job at a time: up to eight ranks each already share two cores, and the
/// latency test compares two runs.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `mpirun -np N` of the program in `mode` over the ofi MTL and provider `prov`,
/// with our library first in the search path. Returns standard output.
fn mpirun(np: usize, prov: &str, mode: &[&str]) -> String {
    let lib = profile_dir();
    assert!(lib.join("libfabric.so.1").is_file(), "libfabric.so.1 not built in {}", lib.display());
    mpirun_with(Some(&lib), np, prov, mode)
}

/// [`mpirun`] with `lib` (ours) first in the search path, or the system's
/// libfabric (`None`).
fn mpirun_with(lib: Option<&Path>, np: usize, prov: &str, mode: &[&str]) -> String {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    // A hung job fails the test instead of stalling the run (coreutils' timeout
    // ends mpirun, which ends its ranks).
    let mut c = Command::new("timeout");
    c.args(["--kill-after=10", "300", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", prov])
        .args(["-x", "LD_LIBRARY_PATH"]);
    match lib {
        Some(l) => c.env("LD_LIBRARY_PATH", l),
        None => c.env("LD_LIBRARY_PATH", ""),
    };
    let out = c.arg(program()).args(mode).output().expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpirun -np {np} {mode:?} over {prov}:\n{stdout}\n{stderr}");
    let ok = stdout.lines().filter(|l| l.ends_with(": ok")).count();
    assert_eq!(ok, np, "{stdout}\n{stderr}");
    let mapped = stdout.lines().find_map(|l| l.strip_prefix("libfabric: ")).unwrap_or_default();
    if let Some(lib) = lib {
        assert!(
            mapped.starts_with(&*lib.to_string_lossy()),
            "the ranks mapped {mapped:?}, not ours in {}",
            lib.display()
        );
    }
    stdout
}

#[test]
fn ofi_mtl_point_to_point_over_tcp() {
    if open_mpi().is_none() {
        return;
    }
    for np in [2, 4, 8] {
        mpirun(np, "tcp", &["pt2pt"]);
    }
}

#[test]
fn ofi_mtl_point_to_point_over_udp() {
    if open_mpi().is_none() {
        return;
    }
    for np in [2, 4] {
        mpirun(np, "udp", &["pt2pt"]);
    }
    // What segfaults over libfabric 1.17's udp;ofi_rxd.
    mpirun(2, "udp", &["probe_ssend"]);
}

/// The 8-byte half round trip over ours and over the system's libfabric, same
/// MTL, same program (printed with `--nocapture`; timing is not asserted: the
/// machines are shared).
#[test]
fn ofi_mtl_latency_over_tcp_against_libfabric() {
    if open_mpi().is_none() {
        return;
    }
    let us = |out: &str| -> f64 {
        let line = out.lines().find(|l| l.starts_with("latency:")).expect("a latency line");
        line.split_whitespace().nth(6).and_then(|v| v.parse().ok()).expect("a number")
    };
    let ours = us(&mpirun(2, "tcp", &["lat", "5000"]));
    let system = Path::new("/usr/lib/x86_64-linux-gnu/libfabric.so.1");
    if system.exists() {
        let theirs = us(&mpirun_with(None, 2, "tcp", &["lat", "5000"]));
        println!(
            "MPI 8 B half round trip over tcp: ours {ours:.2} us, libfabric {theirs:.2} us, ratio {:.2}",
            ours / theirs
        );
    } else {
        println!("MPI 8 B half round trip over tcp: ours {ours:.2} us (no system libfabric to compare)");
    }
}

/// The MCA parameters for one-sided MPI over the ofi BTL: the ofi MTL for
/// point-to-point (the ofi BTL runs one-sided only), the BTLs `self` and `ofi`
/// and nothing else, osc rdma and nothing else, over the ofi BTL. The provider
/// comes with [`mpirun_osc`]'s `opal_common_ofi_provider_include` (the MTL's
/// and the BTL's include list; Open MPI excludes tcp/udp/shm by default).
const ONE_SIDED: &str = "--mca pml cm --mca mtl ofi --mca btl self,ofi --mca osc rdma --mca osc_rdma_btls ofi";

/// `osc_check.c`, compiled once per test binary run.
fn osc_program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    common::compiled(&EXE, "osc_check")
}

/// `mpirun -np N osc_check ARGS` with `mca` and provider `prov`, our library
/// (`lib`) or the system's (`None`) first in the search path, `FI_LOG_LEVEL`
/// `log`: its output, whatever the exit status.
fn mpirun_osc(lib: Option<&Path>, np: usize, prov: &str, mca: &str, log: &str, args: &[&str]) -> std::process::Output {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Command::new("timeout");
    c.args(["--kill-after=10", "300", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        .args(mca.split_whitespace())
        .args(["--mca", "opal_common_ofi_provider_include", prov, "-x", "LD_LIBRARY_PATH", "-x", "FI_LOG_LEVEL"])
        .env("FI_LOG_LEVEL", log)
        .env_remove("FI_LOG_PROV");
    match lib {
        Some(l) => c.env("LD_LIBRARY_PATH", l),
        None => c.env("LD_LIBRARY_PATH", ""),
    };
    c.arg(osc_program()).args(args).output().expect("run mpirun")
}

/// The memory registrations our library logged (`FI_LOG_LEVEL=debug`): process,
/// start, length, and whether peers may write it.
fn registrations(stderr: &str) -> Vec<(u32, u64, u64, bool)> {
    let parse = |l: &str| {
        // fabric:PID:SECONDS::PROV:mr:<debug> fi_mr_reg: N bytes at 0xADDR, access MrAccess(..), key 0x..
        let (pid, rest) = l.strip_prefix("fabric:")?.split_once(':')?;
        let (_, msg) = rest.split_once(":mr:<debug> fi_mr_reg: ")?;
        let (len, rest) = msg.split_once(" bytes at 0x")?;
        let (addr, rest) = rest.split_once(", access ")?;
        Some((pid.parse().ok()?, u64::from_str_radix(addr, 16).ok()?, len.parse().ok()?, rest.contains("REMOTE_WRITE")))
    };
    stderr.lines().filter_map(parse).collect()
}

/// [`mpirun_osc`] over ours with `mca` ([`ONE_SIDED`] and more), which must pass: every rank
/// done, both windows checked, our library mapped, every rank running osc rdma
/// with no BTL but `self` and `ofi` loaded, and each `MPI_Win_create` window
/// inside memory our library registered for peers to write in that process.
/// Returns standard output.
fn one_sided(np: usize, prov: &str, mca: &str, args: &[&str]) -> String {
    let lib = profile_dir();
    assert!(lib.join("libfabric.so.1").is_file(), "libfabric.so.1 not built in {}", lib.display());
    let out = mpirun_osc(Some(&lib), np, prov, mca, "debug", args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpirun -np {np} osc_check {args:?} over {prov}:\n{stdout}\n{stderr}");
    let ok = stdout.lines().filter(|l| l.starts_with("rank ") && l.ends_with(": ok")).count();
    assert_eq!(ok, np, "{stdout}\n{stderr}");
    let mapped = stdout.lines().find_map(|l| l.strip_prefix("libfabric: ")).unwrap_or_default();
    assert!(mapped.starts_with(&*lib.to_string_lossy()), "the ranks mapped {mapped:?}, not ours in {}", lib.display());
    let components: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("osc: rank ")).collect();
    assert_eq!(components.len(), np, "{stdout}");
    for c in components {
        let plugins: Vec<&str> = c.split_whitespace().skip(1).collect();
        assert!(plugins.contains(&"mca_osc_rdma") && plugins.contains(&"mca_btl_ofi"), "{c}");
        assert!(
            plugins.iter().all(|p| ["mca_osc_rdma", "mca_btl_self", "mca_btl_ofi"].contains(p)),
            "another osc or BTL component loaded: {c}"
        );
    }
    // window memory: pid PID at 0xADDR, N bytes
    let windows: Vec<(u32, u64, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let (pid, rest) = l.strip_prefix("window memory: pid ")?.split_once(" at 0x")?;
            let (addr, len) = rest.strip_suffix(" bytes")?.split_once(", ")?;
            Some((pid.parse().ok()?, u64::from_str_radix(addr, 16).ok()?, len.parse().ok()?))
        })
        .collect();
    if args.first().is_some_and(|a| *a == "create" || *a == "both") {
        assert_eq!(windows.len(), np, "{stdout}");
    }
    let regs = registrations(&stderr);
    for (pid, addr, len) in windows {
        assert!(
            regs.iter().any(|&(p, start, n, remote)| p == pid && remote && start <= addr && addr + len <= start + n),
            "no registration of ours covers the window of {pid} at {addr:#x} ({len} bytes): {regs:x?}"
        );
    }
    stdout
}

#[test]
fn ofi_btl_one_sided_over_tcp() {
    if open_mpi().is_none() {
        return;
    }
    for np in [2, 4] {
        let out = one_sided(np, "tcp", ONE_SIDED, &["both", "100"]);
        assert!(out.contains("window allocate: ok") && out.contains("window create: ok"), "{out}");
    }
    // With the BTL asking for automatic progress (data and control): the
    // domain's progress thread serves the peers' operations.
    let auto = format!("{ONE_SIDED} --mca btl_ofi_progress_mode auto");
    let out = one_sided(2, "tcp", &auto, &["create", "20"]);
    assert!(out.contains("window create: ok"), "{out}");
}

#[test]
fn ofi_btl_one_sided_over_udp() {
    if open_mpi().is_none() {
        return;
    }
    let out = one_sided(2, "udp", ONE_SIDED, &["both", "20"]);
    assert!(out.contains("window allocate: ok") && out.contains("window create: ok"), "{out}");
}

/// Without the ofi BTL (`--mca btl self`), osc rdma has nothing to reach the
/// other ranks and no other osc component is allowed: the job fails. So the
/// passes above ran over the ofi BTL, hence over our library.
#[test]
fn one_sided_fails_without_the_ofi_btl() {
    if open_mpi().is_none() {
        return;
    }
    let lib = profile_dir();
    let mca = ONE_SIDED.replace("btl self,ofi", "btl self");
    assert_ne!(mca, ONE_SIDED);
    let out = mpirun_osc(Some(&lib), 2, "tcp", &mca, "warn", &["create", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "one-sided MPI passed without the ofi BTL:\n{stdout}");
    // MPI_Init ran over our library (the MTL); the window is what failed.
    assert!(stdout.contains("libfabric: ") && !stdout.contains("window create: ok"), "{stdout}\n{stderr}");
    assert!(stderr.contains(": MPI_Win_create: "), "{stdout}\n{stderr}");
}

/// 8-byte one-sided operations (each followed by `MPI_Win_flush`) over ours
/// (tcp) and over the system's libfabric: `net` (its tcp RDM provider; Put and
/// Get only, it has no fetching atomics) and `sockets` (the one of its
/// providers the ofi BTL takes that passes `osc_check`; slow, hence few
/// iterations). Printed with `--nocapture`; not asserted: the machines are
/// shared.
#[test]
fn ofi_btl_one_sided_latency_against_libfabric() {
    if open_mpi().is_none() {
        return;
    }
    // The latency line, or why there is none.
    let line = |out: &std::process::Output| -> Result<String, String> {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        match stdout.lines().find(|l| l.starts_with("osc latency:")) {
            Some(l) if out.status.success() => Ok(l.to_string()),
            _ => Err(format!("failed ({}):\n{stdout}\n{stderr}", out.status)),
        }
    };
    let ours = line(&mpirun_osc(Some(&profile_dir()), 2, "tcp", ONE_SIDED, "warn", &["lat", "1000"]));
    println!("ours over tcp:            {}", ours.expect("one-sided latency over ours"));
    // The target's part runs when Open MPI progresses the BTL there, or at once
    // on the progress thread with automatic progress.
    let auto = format!("{ONE_SIDED} --mca btl_ofi_progress_mode auto");
    let ours = line(&mpirun_osc(Some(&profile_dir()), 2, "tcp", &auto, "warn", &["lat", "1000"]));
    println!("ours over tcp, auto:      {}", ours.expect("one-sided latency over ours, automatic progress"));
    // The loader's cache lists the system's libfabric.so.1 (and not ours).
    // Its runs are only printed: a failure there is libfabric's.
    let cache = Command::new("ldconfig").arg("-p").output().map(|o| o.stdout).unwrap_or_default();
    if String::from_utf8_lossy(&cache).contains("libfabric.so.1 ") {
        let net = line(&mpirun_osc(None, 2, "net", ONE_SIDED, "warn", &["lat", "1000", "2"]));
        println!("libfabric 1.17 (net):     {}", net.unwrap_or_else(|e| e));
        let sockets = line(&mpirun_osc(None, 2, "sockets", ONE_SIDED, "warn", &["lat", "20"]));
        println!("libfabric 1.17 (sockets): {}", sockets.unwrap_or_else(|e| e));
    }
}

//! Open MPI 4.1 (Debian's `openmpi-bin`, `libopenmpi-dev`) over our
//! `libfabric.so.1`: its ofi MTL runs `tests/mpi/mpi_check.c` with 2, 4 and 8
//! ranks (point-to-point 0 B to 4 MiB with data checks, wildcards, probe,
//! iprobe, mprobe, Ssend, cancel, collectives), and the program reports which
//! libfabric it mapped, which must be ours.
//!
//! Over libfabric 1.17 itself the same program passes with the same command
//! (`mpirun --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp`), but
//! for one case: an `MPI_Ssend` found by `MPI_Probe` and then received makes Open
//! MPI segfault in `MPI_Recv` over libfabric 1.17's udp (`udp;ofi_rxd`); over ours
//! it passes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// One job at a time: up to eight ranks each already share two cores, and the
/// latency test compares two runs.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// mpicc and mpirun, or a skip.
fn open_mpi() -> Option<()> {
    for tool in ["mpicc", "mpirun"] {
        if Command::new(tool).arg("--version").output().map_or(true, |o| !o.status.success()) {
            fabric_testkit::skip("openmpi", format!("no {tool} (apt-get install openmpi-bin libopenmpi-dev)"));
            return None;
        }
    }
    Some(())
}

/// The test program, compiled once per test binary run.
fn program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(format!("mpi_check-{}", std::process::id()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpi_check.c");
        let out = Command::new("mpicc").args(["-O2", "-Wall", "-o"]).arg(&exe).arg(&src).output().unwrap();
        assert!(out.status.success(), "mpicc: {}", String::from_utf8_lossy(&out.stderr));
        exe
    })
    .clone()
}

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

//! What the Open MPI tests share (`tests/mpi.rs`, `tests/mpi_hosts.rs`, each
//! including this file as a module): where our library is, whether Open MPI is
//! installed, and the test programs compiled once per test binary run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>/`, where the build leaves `libfabric.so.1`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// mpicc and mpirun, or a skip (area `openmpi`).
pub fn open_mpi() -> Option<()> {
    for tool in ["mpicc", "mpirun"] {
        if Command::new(tool).arg("--version").output().map_or(true, |o| !o.status.success()) {
            fabric_testkit::skip("openmpi", format!("no {tool} (apt-get install openmpi-bin libopenmpi-dev)"));
            return None;
        }
    }
    Some(())
}

/// `tests/mpi/<name>.c` compiled by mpicc into the test's temporary directory,
/// once per test binary run (`cell` keeps it).
pub fn compiled(cell: &'static OnceLock<PathBuf>, name: &str) -> PathBuf {
    cell.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(format!("{name}-{}", std::process::id()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/mpi/{name}.c"));
        let out = Command::new("mpicc").args(["-O2", "-Wall", "-o"]).arg(&exe).arg(&src).output().unwrap();
        assert!(out.status.success(), "mpicc {name}.c: {}", String::from_utf8_lossy(&out.stderr));
        exe
    })
    .clone()
}

/// `tests/mpi/mpi_check.c`, compiled once per test binary run.
pub fn program() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    compiled(&EXE, "mpi_check")
}

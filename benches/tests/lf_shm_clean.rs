//! `benches/lf-shm-clean.sh`, which removes the shared-memory regions libfabric's
//! shm provider leaves behind after a benchmark, removes exactly those: libfabric's
//! name shape, a process that no longer runs, newer than the marker when one is
//! given; never our own segments, a live process's region or other names.

use std::fs;
use std::path::Path;
use std::process::Command;

/// A pid no process has: above the kernel's limit (4194304 at most).
const DEAD: u32 = 999_999_000;

fn run(dir: &Path, marker: Option<&Path>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lf-shm-clean.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script).env("LF_SHM_DIR", dir);
    if let Some(m) = marker {
        cmd.arg(m);
    }
    let out = cmd.output().expect("bash runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

#[test]
fn removes_only_dead_processes_libfabric_regions() {
    let dir = std::env::temp_dir().join(format!("lf-shm-clean-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).unwrap();
    let me = std::process::id();
    for name in [
        format!("{DEAD}:0:0"),
        format!("{DEAD}:1:3:12345"),
        format!("{me}:0:0"),
        format!("fabric-shm-0-{DEAD}-1"),
        format!("{DEAD}:0"),
        format!("x{DEAD}:0:0"),
    ] {
        fs::write(dir.join(name), b"").unwrap();
    }
    run(&dir, None);
    let mut want =
        vec![format!("{me}:0:0"), format!("fabric-shm-0-{DEAD}-1"), format!("{DEAD}:0"), format!("x{DEAD}:0:0")];
    want.sort();
    assert_eq!(names(&dir), want);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_a_marker_only_newer_regions_go() {
    let dir = std::env::temp_dir().join(format!("lf-shm-clean-m-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).unwrap();
    let old = dir.join(format!("{DEAD}:0:0"));
    fs::write(&old, b"").unwrap();
    // An hour older than the marker.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options().write(true).open(&old).unwrap().set_modified(hour_ago).unwrap();
    let marker = dir.join("marker");
    fs::write(&marker, b"").unwrap();
    fs::write(dir.join(format!("{DEAD}:0:1")), b"").unwrap();
    fs::File::options()
        .write(true)
        .open(dir.join(format!("{DEAD}:0:1")))
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
        .unwrap();
    run(&dir, Some(&marker));
    assert_eq!(names(&dir), vec![format!("{DEAD}:0:0"), "marker".to_string()]);
    fs::remove_dir_all(&dir).unwrap();
}

//! Log lines of processes that share one standard error (MPI ranks under
//! `mpirun`, a test's children) come out whole: each line is one `write`.

use fabric_core::fi_log;
use fabric_core::log::Level;
use std::process::Command;

const CHILD: &str = "FABRIC_LOG_LINES_CHILD";
const LINES: usize = 3000;

/// In a child (`CHILD` set): `LINES` debug lines of several format pieces.
fn child() {
    for i in 0..LINES {
        fi_log!(Level::Debug, "tcp", "mr", "line {} of {}: {} {:#x} {}", i, LINES, "a piece", i * 7, "and the end");
    }
}

#[test]
fn lines_of_processes_sharing_stderr_do_not_interleave() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let test = "lines_of_processes_sharing_stderr_do_not_interleave";
    // Two children at once on one pipe: the shell's standard error.
    let script = "\"$0\" \"$1\" --exact --nocapture --test-threads=1 >/dev/null & \
                  \"$0\" \"$1\" --exact --nocapture --test-threads=1 >/dev/null & wait";
    let out = Command::new("sh")
        .args(["-c", script])
        .arg(&exe)
        .arg(test)
        .env(CHILD, "1")
        .env("FI_LOG_LEVEL", "debug")
        .env_remove("FI_LOG_PROV")
        .output()
        .expect("run sh");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut pids = std::collections::HashSet::new();
    let mut n = 0;
    for line in stderr.lines().filter(|l| l.contains(":mr:")) {
        // fabric:PID:SECONDS::tcp:mr:<debug> line I of LINES: a piece 0x.. and the end
        let rest = line.strip_prefix("fabric:").unwrap_or_else(|| panic!("cut line: {line:?}"));
        let (pid, rest) = rest.split_once(':').unwrap_or_else(|| panic!("cut line: {line:?}"));
        assert!(pid.parse::<u32>().is_ok(), "cut line: {line:?}");
        let (_, msg) = rest.split_once("::tcp:mr:<debug> line ").unwrap_or_else(|| panic!("cut line: {line:?}"));
        let (i, tail) = msg.split_once(' ').unwrap_or_else(|| panic!("cut line: {line:?}"));
        let i: usize = i.parse().unwrap_or_else(|_| panic!("cut line: {line:?}"));
        assert_eq!(tail, format!("of {LINES}: a piece {:#x} and the end", i * 7), "cut line: {line:?}");
        pids.insert(pid.to_string());
        n += 1;
    }
    assert_eq!(n, 2 * LINES, "{stderr}");
    assert_eq!(pids.len(), 2);
}

//! What the tests of the segment's modules share: a lock for those that change the
//! umask or make files by hand, such files, a dead pid, and `poll`.

use super::{path_of, start_time};
use std::fs::{OpenOptions, Permissions};
use std::io;
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Held by the tests that change the umask or make files by hand (the umask is
/// process-wide).
static FS_LOCK: Mutex<()> = Mutex::new(());

pub(super) fn fs_lock() -> std::sync::MutexGuard<'static, ()> {
    FS_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A file made by hand in /dev/shm, removed on drop.
pub(super) struct TempFile(pub(super) PathBuf);

impl TempFile {
    pub(super) fn new(name: &str, mode: u32, len: u64, head: &[u8]) -> TempFile {
        let path = path_of(name);
        let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&path).unwrap();
        f.set_permissions(Permissions::from_mode(mode)).unwrap();
        f.set_len(len).unwrap();
        f.write_all(head).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The pid of a child that has exited and been reaped, and its start time.
pub(super) fn dead_pid() -> (i32, u64) {
    let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let pid = child.id() as i32;
    let start = start_time(pid).expect("a running child has a start time");
    drop(child.stdin.take());
    child.wait().unwrap();
    (pid, start)
}

pub(super) fn poll_in(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, ours.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    assert!(r >= 0, "poll: {}", io::Error::last_os_error());
    r == 1 && p.revents & libc::POLLIN != 0
}

//! Liveness of a process named by pid and start time: `/proc/<pid>/stat`, `kill(pid,
//! 0)`, pid file descriptors, and the pid namespace that gives pids their meaning.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// A pid as the kernel takes it: `None` for 0 (our process group to `kill`) and for
/// values that would be negative (groups, or every process).
pub(super) fn to_pid(pid: i32) -> Option<libc::pid_t> {
    Some(pid).filter(|&p| p > 0)
}

/// Bytes of `/proc/<pid>/stat` that [`proc_stat`] reads: its first 22 fields fit
/// (a pid, a command of at most 16 bytes in parentheses, and 19 numbers of at most 20
/// digits, with their spaces, take at most 440).
const STAT_PREFIX: usize = 1024;

/// Parse `/proc/<pid>/stat`: the state letter (field 3) and the start time (field 22).
///
/// Without touching the heap (progress checks its peers' liveness with it, and the
/// data path allocates nothing): the path is formatted on the stack, and the first
/// [`STAT_PREFIX`] bytes are read into a stack buffer.
fn proc_stat(pid: i32) -> Option<(u8, u64)> {
    let mut path = [0u8; 32];
    let n = {
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/stat").ok()?;
        32 - w.len()
    };
    let path = std::str::from_utf8(&path[..n]).ok()?;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; STAT_PREFIX];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let text = &buf[..len];
    // Field 2, the command, is in parentheses and may hold anything, ')' included.
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Fields 4..=21 come between the state and the start time.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22, in clock ticks since
/// boot): with the pid it names one process, whatever pids are reused later. `None` when
/// there is no such process (or no `/proc`).
pub fn start_time(pid: i32) -> Option<u64> {
    to_pid(pid)?;
    proc_stat(pid).map(|(_, start)| start)
}

/// Whether process `pid`, started at `start` ([`start_time`]; 0 when unknown, which
/// checks the pid alone), still runs: it exists (`kill(pid, 0)` succeeds or says
/// `EPERM`), is not a zombie, and has that start time. Without `/proc` only the pid is
/// checked.
pub fn alive(pid: i32, start: u64) -> bool {
    let Some(p) = to_pid(pid) else { return false };
    // SAFETY: signal 0 sends nothing; `p > 0` names a single process.
    if unsafe { libc::kill(p, 0) } != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match proc_stat(pid) {
        Some((state, st)) => !matches!(state, b'Z' | b'X' | b'x') && (start == 0 || st == start),
        // Gone meanwhile, unless there is no /proc to ask.
        None => std::fs::metadata("/proc/self/stat").is_err(),
    }
}

/// A pid file descriptor for `pid` (`pidfd_open`): it becomes readable when the process
/// exits. `None` where unsupported or when there is no such process. The pid may have been
/// reused: confirm with [`alive`] after opening.
pub fn pidfd(pid: i32) -> Option<OwnedFd> {
    let p = to_pid(pid)?;
    // SAFETY: pidfd_open takes a pid and flags and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just gave us this descriptor (close-on-exec); nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The inode of our pid namespace, 0 when unknown.
pub(super) fn pidns() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0))
}

/// Whether a process whose pid namespace is `ns` shares ours (so that its pid means
/// something here). False when either is unknown.
pub(super) fn same_pidns(ns: u64) -> bool {
    ns != 0 && ns == pidns()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::testutil::{dead_pid, poll_in};
    use std::os::fd::AsRawFd;
    use std::process::{Command, Stdio};

    #[test]
    fn alive_tells_the_living_from_the_dead() {
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        // Field 22, counted naively (our command name has no spaces or parentheses).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(stat.split_whitespace().nth(21).unwrap().parse::<u64>().unwrap(), start);
        assert!(alive(me, start));
        assert!(alive(me, 0));
        assert!(!alive(me, start + 1));
        let (pid, start) = dead_pid();
        assert!(!alive(pid, start));
        assert_eq!(start_time(pid), None);
        assert!(!alive(0, 0));
        assert!(!alive(-1, 0));
        assert!(!alive(i32::MIN, 0));
        assert_eq!(start_time(0), None);
    }

    #[test]
    fn pidfd_becomes_readable_at_exit() {
        let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let Some(fd) = pidfd(child.id() as i32) else {
            child.kill().unwrap();
            child.wait().unwrap();
            fabric_testkit::skip("pidfd", "no pidfd_open here");
            return;
        };
        assert!(!poll_in(fd.as_raw_fd(), 0));
        drop(child.stdin.take());
        assert!(poll_in(fd.as_raw_fd(), 2000));
        child.wait().unwrap();
        assert!(pidfd(0).is_none());
    }
}

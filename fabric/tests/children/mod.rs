//! Child processes for the multi-process tests (`shm_processes.rs`,
//! `udp_relay.rs`): the test binary runs itself again as a child in some role
//! (its `child_entry` test, with the role in an environment variable), which talks
//! to the parent through protocol lines on its standard output (`@@KEY value`) and
//! command lines on its standard input. The parent holds each child in a [`Proc`],
//! which kills (`SIGKILL`) and reaps it when dropped, so a failing test leaves
//! nothing running, and which fails the test with the child's output.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Child side: print a protocol line for the parent.
pub fn say(key: &str, value: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@{key} {value}").and_then(|()| out.flush()).expect("write to the parent");
}

/// Child side: commands from the parent, read by a thread from standard input.
/// The process exits when its standard input closes: the parent is gone.
pub struct Commands {
    rx: Receiver<String>,
}

impl Commands {
    /// Start reading commands.
    pub fn start() -> Commands {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    return;
                }
            }
            eprintln!("child {}: standard input closed (the parent is gone): exiting", std::process::id());
            std::process::exit(3);
        });
        Commands { rx }
    }

    /// The next command (watchdog: `deadline`).
    #[track_caller]
    pub fn next(&self, deadline: Instant) -> String {
        let left = deadline.saturating_duration_since(Instant::now());
        self.rx.recv_timeout(left).unwrap_or_else(|e| panic!("no command from the parent in time: {e}"))
    }

    /// The next command if one came.
    pub fn try_next(&self) -> Option<String> {
        self.rx.try_recv().ok()
    }
}

/// Most bytes of a child's output kept for a failure report (the tail).
pub const LOG_CAP: usize = 8 << 20;

/// A child process running the test binary's `child_entry` in some role.
pub struct Proc {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Protocol lines (`KEY value`, without the `@@`) as the child prints them; the
    /// sender is dropped when its standard output closes.
    lines: Receiver<String>,
    /// Standard error and the non-protocol lines of standard output (the tail).
    log: Arc<Mutex<String>>,
    readers: Vec<thread::JoinHandle<()>>,
    /// The exit status, once reaped.
    status: Option<ExitStatus>,
}

/// Append to a log, keeping its last [`LOG_CAP`] bytes or so.
fn append(log: &Mutex<String>, s: &str) {
    let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
    l.push_str(s);
    if l.len() > LOG_CAP {
        let mut cut = l.len() - LOG_CAP / 2;
        while !l.is_char_boundary(cut) {
            cut += 1;
        }
        l.replace_range(..cut, "[...]\n");
    }
}

impl Proc {
    /// Start the test binary as a child with `role` in the variable `role_env`;
    /// `set_up` adds what else its environment needs.
    pub fn spawn(label: &str, role_env: &str, role: &str, set_up: impl FnOnce(&mut Command)) -> Proc {
        let exe = std::env::current_exe().expect("the test binary");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(role_env, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        set_up(&mut cmd);
        let mut child = cmd.spawn().expect("start a child");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let out_log = Arc::clone(&log);
        let r1 = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match line.find("@@") {
                    Some(i) => {
                        let _ = tx.send(line[i + 2..].to_string());
                    }
                    None => append(&out_log, &format!("{line}\n")),
                }
            }
        });
        let err_log = Arc::clone(&log);
        let r2 = thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match stderr.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => append(&err_log, &String::from_utf8_lossy(&buf[..n])),
                }
            }
        });
        Proc { label: label.to_string(), child, stdin, lines, log, readers: vec![r1, r2], status: None }
    }

    /// What the child wrote besides protocol lines (its standard error mostly).
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the child has exited (reaping it).
    pub fn exited(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status.is_some()
    }

    /// Fail the test because of this child, with its exit status and output.
    #[track_caller]
    pub fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let status = self.child.wait();
        // Let the readers take in the last words.
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        panic!("{}: {why} (exit: {status:?})\n--- its output ---\n{}--- end of output ---", self.label, self.log());
    }

    /// The next protocol line, which must have `key`; its value.
    #[track_caller]
    pub fn expect(&mut self, key: &str, deadline: Instant) -> String {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => self.parse(line, key),
            Err(RecvTimeoutError::Timeout) => self.fail(&format!("watchdog: no {key} line in time")),
            Err(RecvTimeoutError::Disconnected) => self.fail(&format!("exited before its {key} line")),
        }
    }

    /// The value of protocol line `line`, which must have `key`.
    #[track_caller]
    fn parse(&mut self, line: String, key: &str) -> String {
        match line.split_once(' ') {
            Some((k, v)) if k == key => v.to_string(),
            None if line == key => String::new(),
            _ => self.fail(&format!("expected a {key} line, got {line:?}")),
        }
    }

    /// The protocol line with `key` if one is there now (`None` when none is).
    #[track_caller]
    pub fn try_expect(&mut self, key: &str) -> Option<String> {
        match self.lines.try_recv() {
            Ok(line) => Some(self.parse(line, key)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => self.fail(&format!("exited before its {key} line")),
        }
    }

    /// Write a command line to the child.
    #[track_caller]
    pub fn send(&mut self, line: &str) {
        let ok = self.stdin.as_mut().is_some_and(|s| writeln!(s, "{line}").and_then(|()| s.flush()).is_ok());
        if !ok {
            self.fail(&format!("cannot write {line:?} to it (exited?)"));
        }
    }

    /// Kill the child (`SIGKILL`), reap it, and return every protocol line it
    /// printed that was not read yet.
    pub fn kill(&mut self) -> Vec<String> {
        self.child.kill().expect("kill a child");
        self.status = Some(self.child.wait().expect("reap a killed child"));
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.lines.try_iter().collect()
    }

    /// Wait for the child to exit by itself (watchdog: `deadline`) and require
    /// success; its output.
    #[track_caller]
    pub fn finish(mut self, deadline: Instant) -> String {
        while !self.exited() {
            if Instant::now() > deadline {
                self.fail("watchdog: did not exit in time");
            }
            thread::sleep(Duration::from_millis(5));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let status = self.status.expect("reaped");
        if !status.success() {
            self.fail(&format!("failed: {status}"));
        }
        // Now its standard input may close.
        self.stdin = None;
        self.log()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Wait for the protocol line `key` of every child, failing as soon as one of them
/// exits without it; the values, in order.
#[track_caller]
pub fn expect_all(procs: &mut [Proc], key: &str, deadline: Instant) -> Vec<String> {
    let mut got: Vec<Option<String>> = vec![None; procs.len()];
    while got.iter().any(Option::is_none) {
        for (i, p) in procs.iter_mut().enumerate() {
            if got[i].is_none() {
                got[i] = p.try_expect(key);
                if got[i].is_none() && p.exited() {
                    // The line may have come just before the exit.
                    got[i] = p.try_expect(key);
                    if got[i].is_none() {
                        p.fail(&format!("exited before its {key} line"));
                    }
                }
            }
        }
        if got.iter().any(Option::is_none) {
            if Instant::now() > deadline {
                let i = got.iter().position(Option::is_none).expect("one missing");
                procs[i].fail(&format!("watchdog: no {key} line in time"));
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
    got.into_iter().map(|v| v.expect("all there")).collect()
}

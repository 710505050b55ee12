//! The examples run and do what they say: each is started as its users would
//! start it (servers and clients as separate processes), over every built-in
//! provider it supports, and its output is checked.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one example run may take before the test fails (a watchdog).
const WATCHDOG: Duration = Duration::from_secs(120);

/// The providers built in (and allowed by `FI_PROVIDER`) among `wanted`.
fn providers(wanted: &[&str]) -> Vec<String> {
    let built: Vec<String> = fabric::providers().iter().map(|p| p.name().to_string()).collect();
    let v: Vec<String> = wanted.iter().filter(|w| built.iter().any(|b| b == *w)).map(|w| w.to_string()).collect();
    for w in wanted {
        if !v.iter().any(|p| p == w) {
            fabric_testkit::skip(w, format!("provider {w} is not built in or not allowed by FI_PROVIDER"));
        }
    }
    v
}

/// A child process and the threads reading its output.
struct Proc {
    child: Child,
    what: String,
    lines: mpsc::Receiver<String>,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Read a pipe to the end on a thread (a full pipe never stalls the child),
/// sending each line as it comes.
fn drain(pipe: impl Read + Send + 'static, tx: Option<mpsc::Sender<String>>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if let Some(tx) = &tx {
                let _ = tx.send(line.clone());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    })
}

fn start(exe: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    let what = format!("{} {}", Path::new(exe).file_name().unwrap_or_default().to_string_lossy(), args.join(" "));
    start_cmd(cmd, &what)
}

impl Proc {
    /// The first line of output, which names the address to connect to: the
    /// word after `prefix`.
    fn address(&self, prefix: &str) -> String {
        let line = self.lines.recv_timeout(WATCHDOG).unwrap_or_else(|e| panic!("{}: no first line ({e})", self.what));
        line.strip_prefix(prefix)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("{}: first line {line:?} does not start with {prefix:?}", self.what))
            .to_string()
    }

    /// Wait for the exit within the watchdog; its whole standard output, after
    /// checking that it succeeded.
    fn success(mut self, deadline: Instant) -> String {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() >= deadline => panic!("watchdog: {} still running", self.what),
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("{}: {e}", self.what),
            }
        };
        let out = self.out.take().expect("once").join().expect("reader");
        let err = self.err.take().expect("once").join().expect("reader");
        assert!(status.success(), "{} failed ({status}):\nstdout:\n{out}\nstderr:\n{err}", self.what);
        out
    }
}

#[test]
fn hello_receives_its_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_hello")).output().expect("run hello");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("received \"hello\""), "{text}");
}

/// `tagged`: two processes; every receive gets the message of its tag though
/// they arrive in the opposite order.
#[test]
fn tagged_messages_between_two_processes() {
    for prov in providers(&["tcp", "udp", "shm"]) {
        let deadline = Instant::now() + WATCHDOG;
        let receiver = start(env!("CARGO_BIN_EXE_tagged"), &["receiver", "--provider", &prov]);
        let addr = receiver.address("address ");
        let sender = start(env!("CARGO_BIN_EXE_tagged"), &["sender", &addr, "--provider", &prov]);
        let sent = sender.success(deadline);
        assert_eq!(sent.lines().collect::<Vec<_>>(), ["sent tag 3", "sent tag 2", "sent tag 1"], "{prov}");
        let got = receiver.success(deadline);
        let lines: Vec<&str> = got.lines().filter(|l| l.starts_with("tag ")).collect();
        assert_eq!(
            lines,
            ["tag 1: this message has tag 1", "tag 2: this message has tag 2", "tag 3: this message has tag 3"],
            "{prov}: {got}"
        );
    }
}

/// `msg_connect`: a connection request with its data, accepted, one request
/// answered, the client's shutdown seen by the server.
#[test]
fn msg_client_and_server_connect() {
    for prov in providers(&["tcp"]) {
        let deadline = Instant::now() + WATCHDOG;
        let server = start(env!("CARGO_BIN_EXE_msg_connect"), &["server", "--provider", &prov]);
        let addr = server.address("listening ");
        let client = start(env!("CARGO_BIN_EXE_msg_connect"), &["client", &addr, "--provider", &prov]);
        let answer = client.success(deadline);
        assert_eq!(answer.trim(), "answer \"HELLO OVER A CONNECTION\"", "{prov}");
        let log = server.success(deadline);
        assert_eq!(
            log.lines().skip(1).collect::<Vec<_>>(),
            ["connection request with data \"msg_connect client\"", "connected", "the client shut down"],
            "{prov}"
        );
    }
}

/// `rma`: a write lands in the target's registered buffer at the offset asked,
/// and reads back.
#[test]
fn rma_into_a_registered_region() {
    for prov in providers(&["tcp", "udp", "shm"]) {
        let out = start(env!("CARGO_BIN_EXE_rma"), &["--provider", &prov]).success(Instant::now() + WATCHDOG);
        assert!(out.contains("read back \"written by the initiator"), "{prov}: {out}");
        assert!(out.contains("the target's buffer holds it at offset 100"), "{prov}: {out}");
    }
}

/// `async_echo`: one server task serves four client processes at once, each
/// checking every echo byte for byte.
#[test]
fn async_echo_serves_many_peers_from_one_task() {
    const CLIENTS: usize = 4;
    const ROUNDS: &str = "300";
    for prov in providers(&["tcp", "udp", "shm"]) {
        let start_at = Instant::now();
        let deadline = start_at + WATCHDOG;
        let server = start(
            env!("CARGO_BIN_EXE_async_echo"),
            &["server", "--provider", &prov, "--clients", &CLIENTS.to_string()],
        );
        let addr = server.address("listening ");
        let clients: Vec<Proc> = (0..CLIENTS)
            .map(|_| {
                start(
                    env!("CARGO_BIN_EXE_async_echo"),
                    &["client", &addr, "--provider", &prov, "--rounds", ROUNDS, "--size", "8192"],
                )
            })
            .collect();
        for c in clients {
            let out = c.success(deadline);
            assert_eq!(out.trim(), format!("ok {ROUNDS} round trips"), "{prov}");
        }
        let log = server.success(deadline);
        assert_eq!(log.lines().last(), Some(format!("served {CLIENTS} clients, 1200 messages").as_str()), "{prov}");
        eprintln!("async_echo over {prov}: {CLIENTS} clients x {ROUNDS} round trips in {:?}", start_at.elapsed());
    }
}

/// `examples/async_echo_check.sh`, the check the verbs guest runs, passes over
/// the first provider built here (so that it does not rot where only the
/// guest runs it).
#[test]
fn async_echo_check_script_passes() {
    let Some(prov) = providers(&["tcp", "udp", "shm"]).into_iter().next() else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("async_echo_check.sh");
    let mut cmd = Command::new("sh");
    cmd.arg(&script).args([env!("CARGO_BIN_EXE_async_echo"), &prov, "3", "50"]);
    let out = start_cmd(cmd, "async_echo_check.sh").success(Instant::now() + WATCHDOG);
    assert!(out.contains(&format!("async_echo over {prov}: one server task, 3 clients x 50 round trips")), "{out}");
}

/// `target/<profile>/`, where the build leaves `libfabric.so.1`.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// `examples/c/hello_libfabric.c`, compiled against the system's libfabric
/// headers and linked with our `libfabric.so.1`, runs over each provider.
#[test]
fn c_program_runs_over_our_libfabric() {
    let header = Path::new("/usr/include/rdma/fabric.h");
    if !header.exists() {
        fabric_testkit::skip("libfabric", format!("{} is absent (package libfabric-dev)", header.display()));
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        fabric_testkit::skip("libfabric", format!("no C compiler ({cc})"));
        return;
    }
    let lib = lib_dir();
    let so = lib.join("libfabric.so.1");
    assert!(so.exists(), "no libfabric.so.1 in {} (fabric-capi builds it)", lib.display());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/hello_libfabric.c");
    let exe = std::env::temp_dir().join(format!("fabric-hello_libfabric-{}", std::process::id()));
    let built: Output = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(&so)
        .output()
        .expect("run the C compiler");
    assert!(built.status.success(), "compiling {}:\n{}", src.display(), String::from_utf8_lossy(&built.stderr));
    for prov in providers(&["tcp", "udp", "shm"]) {
        let mut child = Command::new(&exe);
        child.arg(&prov).env("LD_LIBRARY_PATH", &lib);
        let exe_s = exe.to_string_lossy().into_owned();
        let p = start_cmd(child, &exe_s);
        let out = p.success(Instant::now() + WATCHDOG);
        assert!(out.lines().next().is_some_and(|l| l.starts_with(&format!("provider {prov}"))), "{prov}: {out}");
        assert!(out.contains("received \"hello from C\""), "{prov}: {out}");
    }
    let _ = std::fs::remove_file(&exe);
}

/// [`start`] for a prepared command.
fn start_cmd(mut cmd: Command, what: &str) -> Proc {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let (tx, lines) = mpsc::channel();
    let out = drain(child.stdout.take().expect("piped"), Some(tx));
    let err = drain(child.stderr.take().expect("piped"), None);
    Proc { child, what: what.to_string(), lines, out: Some(out), err: Some(err) }
}

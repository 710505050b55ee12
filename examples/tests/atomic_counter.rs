//! Atomicity across processes (issue 3): concurrent fetching atomics from several
//! client processes on one counter of a server process give the right total, and
//! every client sees a different prior value for each of its increments.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const INCREMENTS: u64 = 2000;
/// The whole test, server start to last exit.
const WATCHDOG: Duration = Duration::from_secs(240);

/// Children killed and reaped when the test ends, however it ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_atomic_counter"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start atomic_counter")
}

/// Read a child's pipe to the end on a thread (so a full pipe never stalls it),
/// sending each line as it comes.
fn drain(pipe: impl Read + Send + 'static) -> (mpsc::Receiver<String>, JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (rx, h)
}

/// Wait for child `i` to exit, within the watchdog.
fn finish(children: &mut Children, i: usize, deadline: Instant, what: &str) -> ExitStatus {
    loop {
        match children.0[i].try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() >= deadline => {
                panic!("watchdog: {what} still running after {WATCHDOG:?}; killing every child")
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
}

#[test]
fn concurrent_fetch_adds_from_several_processes_count_exactly() {
    let total = CLIENTS as u64 * INCREMENTS;
    let deadline = Instant::now() + WATCHDOG;
    let mut children = Children(vec![spawn(&["server", &total.to_string(), &WATCHDOG.as_secs().to_string()])]);

    // The server's first line says where the counter is; it is read on a thread,
    // so the watchdog holds even if the server never prints it.
    let (first, server_out) = drain(children.0[0].stdout.take().expect("piped"));
    let (_, server_err) = drain(children.0[0].stderr.take().expect("piped"));
    let line = first.recv_timeout(WATCHDOG).unwrap_or_else(|e| panic!("the server did not print its address: {e}"));
    assert_eq!(line.split_whitespace().count(), 3, "server line {line:?}");

    let mut outputs = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = spawn(&["client", &INCREMENTS.to_string(), &line]);
        let (_, out) = drain(c.stdout.take().expect("piped"));
        let (_, err) = drain(c.stderr.take().expect("piped"));
        outputs.push((out, err));
        children.0.push(c);
    }
    let mut all = Vec::new();
    // Whether some client's increments were interleaved with another's.
    let mut spread = false;
    for (k, (out, err)) in outputs.into_iter().enumerate() {
        let status = finish(&mut children, k + 1, deadline, &format!("client {k}"));
        let (out, err) = (out.join().expect("reader"), err.join().expect("reader"));
        assert!(status.success(), "client {k} failed ({status}): {err}");
        let list = out.lines().find_map(|l| l.strip_prefix("fetched ")).expect("client prints its values");
        let values: Vec<u64> = list.split_whitespace().map(|v| v.parse().expect("a number")).collect();
        assert_eq!(values.len() as u64, INCREMENTS, "client {k}");
        assert!(values.windows(2).all(|w| w[0] < w[1]), "client {k}: fetched values not strictly increasing");
        spread |= values[values.len() - 1] - values[0] + 1 > INCREMENTS;
        all.extend(values);
    }
    let status = finish(&mut children, 0, deadline, "the server");
    let (out, err) = (server_out.join().expect("reader"), server_err.join().expect("reader"));
    assert!(status.success(), "the server failed ({status}): {err}\n{out}");
    assert_eq!(out.lines().last(), Some(format!("final {total}").as_str()), "server output: {out}");
    assert!(spread, "every client ran alone: the test did not exercise concurrent atomics");
    // Every increment saw a different counter value: together, exactly 0..total.
    all.sort_unstable();
    assert!(all.iter().copied().eq(0..total), "the fetched values are not 0..{total}, each once");
}

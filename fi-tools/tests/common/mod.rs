//! Helpers shared by the two-process tests of the tools.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Wait for a child with a watchdog, killing it on time-out.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub use fabric_testkit::port;

/// Write both sides' output to the test's captured output, which the harness
/// shows only when the test fails: a client's failure often has its cause on
/// the server's side.
pub fn show(server: &Output, client: &Output) {
    for (who, out) in [("server", server), ("client", client)] {
        println!(
            "--- {who}: {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
